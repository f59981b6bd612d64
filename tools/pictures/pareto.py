"""The search's Pareto front: output tokens/s per GPU against TPOT, the chosen plan starred, and how many
alternatives each catalog rule rejected before estimation."""

from __future__ import annotations

import math

from tools.pictures.canvas import Canvas
from tools.pictures.timeline import ticks
from tools.search.strategies import SearchResult


def draw_pareto(result: SearchResult, width: float = 960) -> Canvas:
    left, top, plot_w, plot_h = 70, 66, width - 70 - 300, 320
    c = Canvas(width, top + plot_h + 60)
    c.text(10, 20, f"Pareto front: {result.model} on {result.hardware.get('num_gpus')}× {result.hardware.get('gpu')}",
           15, weight="bold")
    c.text(10, 38, f"objective {result.objective}; {result.estimated} plans estimated, {sum(result.rejected.values())} "
           "rejected by rule before estimation", 11, fill="#555")
    pts = {id(p): p for p in [*result.pareto, *result.top]}.values()
    chosen = result.top[0] if result.top else None
    xs = [p.tpot_ms for p in pts] or [1.0]
    ys = [p.throughput_per_gpu for p in pts] or [1.0]
    x_lo, x_hi = math.log10(min(xs) * 0.8), math.log10(max(xs) * 1.25)
    y_ticks = ticks(max(ys) * 1.12 or 1.0)
    y_hi = max(max(ys) * 1.12, y_ticks[-1]) or 1.0

    def px(p_tpot: float, p_tput: float) -> tuple[float, float]:
        fx = (math.log10(p_tpot) - x_lo) / (x_hi - x_lo) if x_hi > x_lo else 0.5
        return left + fx * plot_w, top + plot_h - p_tput / y_hi * plot_h

    c.rect(left, top, plot_w, plot_h, fill="#fcfcfc", stroke="#bbb")
    for v in y_ticks:
        _, y = px(xs[0], v)
        c.line(left, y, left + plot_w, y, stroke="#eee")
        c.text(left - 6, y + 4, f"{v:,.0f}", 10, anchor="end", fill="#555")
    for e in range(math.floor(x_lo), math.ceil(x_hi) + 1):
        for m in (1, 2, 3, 5):
            v = m * 10 ** e
            if x_lo <= math.log10(v) <= x_hi:
                x, _ = px(v, 0)
                c.line(x, top, x, top + plot_h, stroke="#eee")
                c.text(x, top + plot_h + 14, f"{v:g}", 10, anchor="middle", fill="#555")
    c.text(left + plot_w / 2, top + plot_h + 32, "TPOT (ms per output token, log scale) → slower per user", 11,
           anchor="middle")
    c.text(12, top - 8, "output tok/s per GPU", 11)
    front = sorted(result.pareto, key=lambda p: p.tpot_ms)
    if len(front) > 1:
        c.poly([px(p.tpot_ms, p.throughput_per_gpu) for p in front], stroke="#4c72b0", sw=1.5, cls="front")
    for p in front:
        x, y = px(p.tpot_ms, p.throughput_per_gpu)
        c.circle(x, y, 5, "#4c72b0", cls="pareto-point",
                 title=f"{p.label} batch {p.batch_size}: TPOT {p.tpot_ms:.2f} ms, TTFT {p.ttft_ms:.0f} ms, "
                       f"{p.throughput_per_gpu:,.1f} tok/s/GPU ({p.kind})")
        c.text(x + 7, y - 6, f"{p.label} b{p.batch_size}", 9, fill="#333")
    if chosen:
        x, y = px(chosen.tpot_ms, chosen.throughput_per_gpu)
        c.circle(x, y, 9, "none", stroke="#d62728", sw=2.5, cls="chosen",
                 title=f"chosen: {chosen.label} batch {chosen.batch_size}")
        near_edge = x > left + plot_w - 110
        c.text(x - 11 if near_edge else x + 11, y + 16, f"chosen: {chosen.label}", 10, weight="bold", fill="#d62728",
               anchor="end" if near_edge else "start")
    rx = left + plot_w + 24
    c.text(rx, top + 6, "rejected before estimation", 12, weight="bold")
    y = top + 26
    most = max(result.rejected.values(), default=1)
    for rule, n in sorted(result.rejected.items(), key=lambda kv: (-kv[1], kv[0]))[:14]:
        c.rect(rx, y - 9, 90 * n / most, 11, fill="#c44e52", cls="rejected", title=f"{rule}: {n}")
        c.text(rx + 96, y, f"{rule} {n}", 10)
        y += 18
    if result.slo_rejected:
        c.text(rx, y + 8, "missed an SLO: " + ", ".join(f"{k} {v}" for k, v in result.slo_rejected.items()), 10)
    return c
