"""The Gantt timeline of one prefill pass and one decode step: per pipeline stage, when its GPUs compute, wait
on memory, communicate, and sit idle (pipeline bubbles), from the estimator's own critical path."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from tools.estimate.core import Estimate, PhasePath
from tools.pictures.canvas import Canvas

KIND_COLORS = {
    "compute": "#4c72b0",
    "memory": "#55a868",
    "communication": "#dd8452",
    "overhead": "#8c8c8c",
    "handoff": "#8172b3",
}
KIND_NAMES = {"compute": "compute-bound", "memory": "memory-bound", "communication": "communication",
              "overhead": "engine step overhead", "handoff": "KV hand-off"}
SHORT = {"compute": "comp", "memory": "mem", "communication": "comm", "overhead": "eng", "handoff": "kv"}
IDLE = "#eeeeee"


@dataclass
class Segment:
    row: str  # "stage 0", ..., or "KV hand-off"
    start_ms: float
    ms: float
    kind: str
    micro: int = 0
    names: dict[str, float] = field(default_factory=dict)  # operator -> ms inside the segment


@dataclass
class Timeline:
    phase: str
    rows: list[str]
    segments: list[Segment]
    total_ms: float
    micro_batches: int

    def busy_ms(self, row: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for s in self.segments:
            if s.row == row:
                out[s.kind] += s.ms
        return dict(out)


def _stage_runs(path: PhasePath) -> tuple[dict[int, list[tuple[float, float, str, str]]], dict[int, float]]:
    """Per stage, (offset in the stage, ms, kind, name) of its steps in path order; and the time each stage is
    entered along the chain."""
    runs: dict[int, list[tuple[float, float, str, str]]] = defaultdict(list)
    entry: dict[int, float] = {}
    clock = 0.0
    for st in path.steps:
        entry.setdefault(st.stage, clock)
        done = sum(r[1] for r in runs[st.stage])
        runs[st.stage].append((done, st.ms, st.kind, st.name))
        clock += st.ms
    return runs, entry


def _merge(segs: list[Segment]) -> list[Segment]:
    """Adjacent steps of one kind on one row become one segment (keeps the picture small at 60+ layers)."""
    out: list[Segment] = []
    for s in segs:
        last = out[-1] if out else None
        if (last and last.row == s.row and last.kind == s.kind and last.micro == s.micro
                and abs(last.start_ms + last.ms - s.start_ms) < 1e-9):
            last.ms += s.ms
            for k, v in s.names.items():
                last.names[k] = last.names.get(k, 0.0) + v
        else:
            out.append(s)
    return out


def schedule(path: PhasePath, handoff_ms: float = 0.0) -> Timeline:
    """Place the critical path on a time axis, stage by stage.

    One pass (``micro_batches == 1``): the chain runs once; a stage idles while the others work.  Micro-batched
    prefill: micro-batch *j* occupies stage *s* in slot ``j + s`` of the slowest stage's length (``(m+pp-1)``
    slots).  Micro-batched decode: the micro-batches cycle, so a step is one period of the estimator's latency and
    micro-batch *j* enters stage *s* ``j`` slots after micro-batch 0 (wrapping round the period).  The engine step
    overhead closes the pass on every stage; with a disaggregated plan the KV hand-off follows prefill."""
    runs, entry = _stage_runs(path)
    rows = [f"stage {s}" for s in range(path.stages)]
    segs: list[Segment] = []
    m = path.micro_batches
    stage_ms = {s: sum(r[1] for r in runs.get(s, [])) for s in range(path.stages)}
    period = path.latency_ms
    slot = max(stage_ms.values(), default=0.0)

    def put(stage: int, start: float, micro: int) -> None:
        for off, ms, kind, name in runs.get(stage, []):
            t = start + off
            if path.phase == "decode" and m > 1 and period > 0:
                t %= period
                if t + ms > period + 1e-9:  # wraps round the step
                    head = period - t
                    segs.append(Segment(rows[stage], t, head, kind, micro, {name: head}))
                    segs.append(Segment(rows[stage], 0.0, ms - head, kind, micro, {name: ms - head}))
                    continue
            segs.append(Segment(rows[stage], t, ms, kind, micro, {name: ms}))

    if m == 1:
        for s in runs:
            put(s, entry[s], 0)
    else:
        for j in range(m):
            for s in runs:
                put(s, (j + s) * slot if path.phase == "prefill" else j * slot + entry[s], j)
    segs.sort(key=lambda g: (rows.index(g.row), g.start_ms))
    segs = _merge(segs)
    end = period
    if path.step_overhead_ms > 0:
        for r in rows:
            segs.append(Segment(r, end, path.step_overhead_ms, "overhead", 0, {"engine step overhead":
                                                                                path.step_overhead_ms}))
        end += path.step_overhead_ms
    if handoff_ms > 0:
        rows.append("KV hand-off")
        segs.append(Segment("KV hand-off", end, handoff_ms, "handoff", 0,
                            {"KV hand-off to the decode pool": handoff_ms}))
        end += handoff_ms
    return Timeline(path.phase, rows, segs, end, m)


def timelines(est: Estimate, paths: dict[str, PhasePath]) -> list[Timeline]:
    hand = est.kv_transfer.ms if est.kv_transfer else 0.0
    return [schedule(paths["prefill"], hand), schedule(paths["decode"])]


def num(v: float) -> str:
    """A duration for people: 1,246 / 71.6 / 0.48 / 0 (no exponents, no float noise)."""
    if abs(v) < 5e-4:
        return "0"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _fmt_ms(ms: float) -> str:
    return f"{num(ms)} ms"


def ticks(total: float) -> list[float]:
    """About six round tick values (1, 2 or 5 times a power of ten) from 0 to ``total``."""
    if total <= 0:
        return [0.0]
    raw = total / 6
    mag = 10 ** math.floor(math.log10(raw))
    step = next(k * mag for k in (1, 2, 5, 10) if k * mag >= raw)
    return [round(i * step, 12) for i in range(int(total / step + 1e-9) + 1)]


def _pixels(tl: Timeline, scale: float, min_px: float = 1.5) -> list[tuple[str, float, float, str, list[Segment]]]:
    """Segments as drawn: on each row, touching segments narrower together than ``min_px`` become one rectangle
    in the colour of the kind that takes most of it (the timeline's figures are unchanged; a 120-layer pipeline
    would otherwise draw tens of thousands of sub-pixel slivers)."""
    out: list[tuple[str, float, float, str, list[Segment]]] = []
    for row in tl.rows:
        group: list[Segment] = []
        for g in sorted((g for g in tl.segments if g.row == row), key=lambda g: g.start_ms):
            if group:
                start, end = group[0].start_ms, group[-1].start_ms + group[-1].ms
                if (end - start) * scale < min_px and (g.start_ms - end) * scale < 0.5:
                    group.append(g)
                    continue
                out.append(_flush(row, group))
            group = [g]
        if group:
            out.append(_flush(row, group))
    return out


def _flush(row: str, group: list[Segment]) -> tuple[str, float, float, str, list[Segment]]:
    by_kind: dict[str, float] = defaultdict(float)
    for g in group:
        by_kind[g.kind] += g.ms
    start = group[0].start_ms
    return row, start, group[-1].start_ms + group[-1].ms - start, max(by_kind, key=by_kind.__getitem__), group


def draw_timeline(tl: Timeline, title: str, width: float = 960) -> Canvas:
    """One Gantt chart: a row per stage (plus the KV hand-off), coloured by what the GPUs do."""
    left, right, row_h, top = 88, 250, 26, 46
    plot_w = width - left - right
    height = top + row_h * len(tl.rows) + 64
    c = Canvas(width, height)
    c.text(10, 20, title, 15, weight="bold")
    mb = f", {tl.micro_batches} micro-batches" if tl.micro_batches > 1 else ""
    c.text(10, 38, f"total {_fmt_ms(tl.total_ms)}{mb}; grey = idle (pipeline bubble or waiting on another stage)", 11,
           fill="#555")
    scale = plot_w / tl.total_ms if tl.total_ms > 0 else 0.0
    for i, row in enumerate(tl.rows):
        y = top + i * row_h
        c.text(left - 8, y + row_h / 2 + 4, row, 11, anchor="end")
        c.rect(left, y + 3, plot_w, row_h - 6, fill=IDLE, cls="idle", title=f"{row}: idle")
        busy = tl.busy_ms(row)
        idle = max(tl.total_ms - sum(busy.values()), 0.0)
        parts = [f"{SHORT[k]} {num(v)}" for k, v in sorted(busy.items(), key=lambda kv: -kv[1]) if k != "overhead"]
        parts.append(f"idle {num(idle)} ms")
        c.text(left + plot_w + 8, y + row_h / 2 + 4, " · ".join(parts[-4:]), 10, fill="#444")
    first: dict[tuple[str, int], float] = {}
    for row, start, ms, kind, parts in _pixels(tl, scale):
        y = top + tl.rows.index(row) * row_h
        w = ms * scale
        tip = ""
        if w >= 3 and len(parts) == 1:  # a tooltip per sliver would triple the page for nothing
            g = parts[0]
            top_names = sorted(g.names.items(), key=lambda kv: -kv[1])[:3]
            tip = (f"{g.row}, micro-batch {g.micro}: {KIND_NAMES[g.kind]} {g.ms:.3f} ms at {g.start_ms:.3f} ms ("
                   + ", ".join(f"{n} {v:.3f}" for n, v in top_names) + ")")
        c.rect(left + start * scale, y + 3, max(w, 0.4), row_h - 6, fill=KIND_COLORS[kind], cls=f"seg {kind}",
               title=tip)
    for g in tl.segments:
        if g.kind != "overhead" and tl.micro_batches > 1:
            first[(g.row, g.micro)] = min(first.get((g.row, g.micro), g.start_ms), g.start_ms)
    slot_px = (tl.total_ms / (tl.micro_batches + len(tl.rows))) * scale
    for (row, micro), start in sorted(first.items()):
        x, y = left + start * scale, top + tl.rows.index(row) * row_h
        c.line(x, y + 1, x, y + row_h - 1, stroke="#222", sw=1.5)
        if slot_px >= 24:
            c.text(x + 2, y + row_h - 6, f"mb{micro}", 8, fill="#fff")
    axis_y = top + row_h * len(tl.rows) + 4
    c.line(left, axis_y, left + plot_w, axis_y, stroke="#888")
    for t in ticks(tl.total_ms):
        x = left + t * scale
        c.line(x, axis_y, x, axis_y + 4, stroke="#888")
        c.text(x, axis_y + 16, f"{t:g}", 10, anchor="middle", fill="#555")
    c.text(left + plot_w, axis_y + 30, "ms", 10, anchor="end", fill="#555")
    x = left
    for kind in ("compute", "memory", "communication", "overhead", *(["handoff"] if "KV hand-off" in tl.rows else [])):
        c.rect(x, axis_y + 36, 12, 12, fill=KIND_COLORS[kind])
        c.text(x + 16, axis_y + 46, KIND_NAMES[kind], 11)
        x += 26 + 7 * len(KIND_NAMES[kind])
    c.rect(x, axis_y + 36, 12, 12, fill=IDLE, stroke="#ccc")
    c.text(x + 16, axis_y + 46, "idle", 11)
    return c
