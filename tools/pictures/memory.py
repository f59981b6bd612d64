"""Memory per GPU as stacked bars against the GPU's capacity, from ``tools.core.memory``'s per-GPU accounting.
GPUs with the same breakdown share one bar (a 64-GPU replica is a handful of bars, not 64)."""

from __future__ import annotations

from dataclasses import dataclass

from tools.core.memory import GpuMemory, MemoryReport
from tools.pictures.canvas import Canvas

PARTS = (
    ("weights_bytes", "weights", "#4c72b0"),
    ("kv_cache_bytes", "KV cache", "#55a868"),
    ("activation_bytes", "activations", "#c44e52"),
    ("comm_buffer_bytes", "comm buffers", "#dd8452"),
    ("reserved_bytes", "reserve", "#8c8c8c"),
)
MAX_BARS = 24


@dataclass
class Bar:
    gpus: list[int]
    stage: int
    parts: dict[str, float]  # field -> bytes (of each GPU in the bar)

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def label(self) -> str:
        g = self.gpus
        return f"GPU {g[0]}" if len(g) == 1 else f"GPU {g[0]}-{g[-1]}"


def _key(g: GpuMemory) -> tuple[int, ...]:
    return (g.stage, *(round(getattr(g, f) / 1e6) for f, _, _ in PARTS))


def bars(mem: MemoryReport) -> list[Bar]:
    """Consecutive GPUs with equal breakdowns (to the MB) fold into one bar; past ``MAX_BARS`` bars, each stage
    keeps its fullest GPU's bar."""
    out: list[Bar] = []
    last: tuple[int, ...] | None = None
    for g in sorted(mem.per_gpu, key=lambda g: g.gpu):
        k = _key(g)
        if out and k == last and out[-1].gpus[-1] == g.gpu - 1:
            out[-1].gpus.append(g.gpu)
        else:
            out.append(Bar([g.gpu], g.stage, {f: getattr(g, f) for f, _, _ in PARTS}))
        last = k
    if len(out) > MAX_BARS:
        worst: dict[int, Bar] = {}
        for b in out:
            if b.stage not in worst or b.total > worst[b.stage].total:
                worst[b.stage] = b
        out = [worst[s] for s in sorted(worst)][:MAX_BARS]
    return out


def draw_memory(mem: MemoryReport, title: str = "Memory per GPU (replica 0)", width: float = 960,
                decode_from: int | None = None) -> Canvas:
    """``decode_from``: with disaggregated pools, the first GPU of the decode pool (bars are labelled by pool)."""
    bs = bars(mem)
    left, top, plot_h = 70, 50, 260
    bar_w = min(70.0, (width - left - 180) / max(len(bs), 1) * 0.7)
    gap = bar_w / 0.7 * 0.3
    height = top + plot_h + 70
    c = Canvas(width, height)
    c.text(10, 20, title, 15, weight="bold")
    cap = mem.capacity_bytes
    c.text(10, 38, f"capacity {cap / 1e9:.0f} GB per GPU; fullest GPU {mem.worst_gpu}: {mem.max_gpu_bytes / 1e9:.1f} GB"
           f" ({'fits' if mem.fits else 'does NOT fit'})", 11, fill="#555" if mem.fits else "#b00")
    top_gb = max(cap, max((b.total for b in bs), default=0.0)) * 1.05
    sy = plot_h / top_gb if top_gb else 0.0
    base = top + plot_h
    for gb in range(0, int(top_gb / 1e9) + 1, max(10, int(top_gb / 1e9 / 6) // 10 * 10)):
        y = base - gb * 1e9 * sy
        c.line(left, y, width - 170, y, stroke="#e4e4e4")
        c.text(left - 6, y + 4, f"{gb}", 10, anchor="end", fill="#555")
    c.text(14, top + plot_h / 2, "GB", 11, fill="#555")
    x = left + gap / 2
    for b in bs:
        y = base
        for f, name, color in PARTS:
            h = b.parts[f] * sy
            if h <= 0:
                continue
            y -= h
            c.rect(x, y, bar_w, h, fill=color, stroke="#fff", sw=0.5, cls=f"mem {name.replace(' ', '-')}",
                   title=f"{b.label} ({len(b.gpus)} GPUs): {name} {b.parts[f] / 1e9:.2f} GB")
        c.text(x + bar_w / 2, y - 4, f"{b.total / 1e9:.1f}", 10, anchor="middle", cls="mem-total")
        c.text(x + bar_w / 2, base + 14, b.label, 10, anchor="middle")
        pool = "" if decode_from is None else ("decode " if b.gpus[0] >= decode_from else "prefill ")
        c.text(x + bar_w / 2, base + 27, f"{pool}stage {b.stage}" + (f" ×{len(b.gpus)}" if len(b.gpus) > 1 else ""),
               9, anchor="middle", fill="#666")
        x += bar_w + gap
    cy = base - cap * sy
    c.line(left, cy, width - 170, cy, stroke="#b00", sw=1.5, dash=True, cls="capacity")
    c.text(width - 172, cy - 4, f"capacity {cap / 1e9:.0f} GB", 10, anchor="end", fill="#b00")
    c.line(left, base, width - 170, base, stroke="#888")
    ly = top + 4
    for _, name, color in reversed(PARTS):
        c.rect(width - 150, ly, 12, 12, fill=color)
        c.text(width - 132, ly + 10, name, 11)
        ly += 20
    return c
