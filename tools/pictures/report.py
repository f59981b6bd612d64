"""The plan report: every picture of a plan (and of a search) in one self-contained HTML page, as PNGs for MCP
hosts, and as two text bars for the terminal.  Pure functions of the plan: the same plan gives the same bytes."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from tools.core.plan import Plan, parse_plan
from tools.estimate.core import Estimate, PhasePath, estimate_performance, replica_graph
from tools.estimate.headline import pool_label
from tools.pictures.canvas import Canvas
from tools.pictures.dag import draw_dag, phase_views
from tools.pictures.memory import PARTS, draw_memory
from tools.pictures.pareto import draw_pareto
from tools.pictures.timeline import KIND_NAMES, Timeline, draw_timeline, num, timelines
from tools.rules.lookup import catalog
from tools.rules.validate import ValidationResult, validate_dag
from tools.search.strategies import SearchResult

__all__ = ["PlanPictures", "plan_pictures", "report_html", "text_bars"]


@dataclass
class PlanPictures:
    plan: Plan
    estimate: Estimate
    validation: ValidationResult
    paths: dict[str, PhasePath]
    timelines: list[Timeline]
    canvases: dict[str, Canvas]  # dag, timeline-prefill, timeline-decode, memory (+ pareto for a search)
    title: str

    def summary(self) -> str:
        """What the pictures show, in words (for hosts that display no images)."""
        e = self.estimate
        lines = [self.title,
                 f"TTFT {e.ttft_ms:.1f} ms, TPOT {e.tpot_ms:.2f} ms at {e.load}, "
                 f"{e.throughput.output_tokens_per_s_per_gpu:,.1f} output tok/s per GPU, {e.gpus_used} GPUs; "
                 f"validation: {self.validation.summary}"]
        for tl in self.timelines:
            per = "; ".join(f"{r}: " + ", ".join(f"{KIND_NAMES[k]} {num(v)} ms"
                                                 for k, v in sorted(tl.busy_ms(r).items())) for r in tl.rows)
            lines.append(f"timeline {tl.phase} ({num(tl.total_ms)} ms): {per}")
        lines.append(f"memory: {e.memory.message}")
        return "\n".join(lines)


def _title(plan: Plan, est: Estimate) -> str:
    if est.pools:
        return (f"{plan.spec.name} on {est.gpus_used}× {plan.accelerator.id} (disaggregated: prefill "
                f"{est.pools['prefill'].label} | decode {est.pools['decode'].label})")
    p = plan.parallel
    label = pool_label(p.dp, p.pp, p.tp, p.ep if plan.spec.is_moe else 1, p.attn_dp, p.sp)
    return f"{plan.spec.name} on {est.gpus_used}× {plan.accelerator.id} ({label})"

def plan_pictures(plan: Plan | dict[str, Any], search: SearchResult | None = None) -> PlanPictures:
    """Estimate and validate the plan once, then draw: the folded DAG with the critical path, the prefill and
    decode timelines, memory per GPU (and the search's Pareto front when given)."""
    full = parse_plan(plan)
    paths: dict[str, PhasePath] = {}
    est = estimate_performance(full, trace=paths)
    val = validate_dag(plan=full)
    title = _title(full, est)
    on_path = {s.node for ph in paths.values() for s in ph.steps}
    views = phase_views(replica_graph(full), on_path)
    tls = timelines(est, paths)
    canvases = {"dag": draw_dag(views, f"Folded DAG: {title}",
                                "each run of identical layers drawn once with its repeat count; shards of an "
                                "operator grouped with the GPUs they run on")}
    for tl in tls:
        what = "one prefill pass" if tl.phase == "prefill" else "one decode step"
        canvases[f"timeline-{tl.phase}"] = draw_timeline(tl, f"Timeline of {what} along the critical path, per stage")
    canvases["memory"] = draw_memory(est.memory, decode_from=est.pools["prefill"].gpus if est.pools else None)
    if search is not None:
        canvases["pareto"] = draw_pareto(search)
    return PlanPictures(full, est, val, paths, tls, canvases, title)


# --------------------------------------------------------------------------------------------- terminal
def _bar(parts: list[tuple[str, float]], total: float, width: int) -> str:
    """Characters proportional to each part (largest remainder, so the bar is exactly ``width`` wide)."""
    if total <= 0:
        return "." * width
    raw = [(ch, v / total * width) for ch, v in parts]
    cells = [int(r) for _, r in raw]
    for i in sorted(range(len(raw)), key=lambda i: -(raw[i][1] - cells[i]))[: width - sum(cells)]:
        cells[i] += 1
    return "".join(ch * n for (ch, _), n in zip(raw, cells, strict=True))


_GLYPH = {"compute": "#", "memory": "=", "communication": "~", "overhead": "+", "handoff": ">"}


def text_bars(est: Estimate, paths: dict[str, PhasePath], width: int = 60) -> str:
    """Compact timeline (per phase, busy time of the slowest stage by kind, idle as '.') and memory bars."""
    out = []
    for tl in timelines(est, paths):
        row = max(tl.rows, key=lambda r: sum(tl.busy_ms(r).values()))
        busy = tl.busy_ms(row)
        idle = max(tl.total_ms - sum(busy.values()), 0.0)
        parts = [(_GLYPH[k], busy.get(k, 0.0)) for k in _GLYPH] + [(".", idle)]
        out.append(f"{tl.phase:<8}|{_bar(parts, tl.total_ms, width)}| {tl.total_ms:.3g} ms ({row})")
    m = est.memory
    worst = next((g for g in m.per_gpu if g.gpu == m.worst_gpu), None)
    if worst is not None:
        glyphs = ("W", "K", "A", "B", "R")
        parts = [(g, getattr(worst, f)) for g, (f, _, _) in zip(glyphs, PARTS, strict=True)]
        free = max(m.capacity_bytes - worst.total_bytes, 0.0)
        scale = max(m.capacity_bytes, worst.total_bytes)
        out.append(f"{'memory':<8}|{_bar([*parts, ('.', free)], scale, width)}| {worst.total_bytes / 1e9:.1f} of "
                   f"{m.capacity_bytes / 1e9:.0f} GB (GPU {m.worst_gpu})")
    out.append("         # compute  = memory-bound  ~ communication  + engine overhead  > KV hand-off  . idle | "
               "W weights  K KV cache  A activations  B buffers  R reserve")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
.kpi{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.kpi div{background:#f4f6fa;border-radius:6px;padding:8px 14px} .kpi b{display:block;font-size:18px}
.pic{overflow-x:auto;border:1px solid #eee;border-radius:6px;padding:6px;margin:8px 0}
.pic svg{max-width:100%;height:auto} table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
.error{color:#b00} .warning{color:#a60} .ok{color:#070} .rule{margin:10px 0;padding:8px 12px;background:#fafafa}
.rule:target{background:#fff4c2} small{color:#666} code{font-size:12px}
"""


def _rules_used(pics: PlanPictures, search: SearchResult | None) -> list[dict[str, Any]]:
    ids = {v.rule_id for v in pics.validation.violations} | set(search.rejected if search else ())
    return [r for r in catalog()["rules"] if r["id"] in ids]


def _validation_html(pics: PlanPictures) -> str:
    v = pics.validation
    head = (f'<p class="{"ok" if v.valid else "error"}">{escape(v.summary)} ({v.rules_checked} rules checked, '
            f"{v.errors} errors, {v.warnings} warnings)</p>")
    if not v.violations:
        return head
    rows = "".join(
        f'<tr><td class="{x.severity}">{x.severity}</td><td><a href="#rule-{escape(x.rule_id)}">{escape(x.rule_id)}'
        f"</a></td><td>{escape(x.message)}</td><td>{escape(x.hint or '')}</td></tr>" for x in v.violations)
    return head + f"<table><tr><th></th><th>rule</th><th>what</th><th>fix</th></tr>{rows}</table>"


def _rules_html(rules: list[dict[str, Any]]) -> str:
    if not rules:
        return "<p>No rule was broken or used to reject an alternative.</p>"
    return "".join(
        f'<div class="rule" id="rule-{escape(r["id"])}"><b>{escape(r["id"])}</b>: {escape(r["title"])}<br>'
        f"{escape(r['statement'])}<br><small>why: {escape(r['rationale'])}</small></div>" for r in rules)


def report_html(pics: PlanPictures, search: SearchResult | None = None) -> str:
    """One HTML page with inline SVG and CSS only: no script, no font or image fetched from anywhere."""
    e = pics.estimate
    kpis = [("TTFT", f"{e.ttft_ms:,.1f} ms"), ("TPOT", f"{e.tpot_ms:.2f} ms"),
            ("static prefill", f"{e.prefill_latency_ms:,.1f} ms"),
            ("throughput", f"{e.throughput.output_tokens_per_s:,.0f} tok/s"),
            ("per GPU", f"{e.throughput.output_tokens_per_s_per_gpu:,.1f} tok/s"), ("GPUs", str(e.gpus_used)),
            ("memory", f"{e.memory.max_gpu_bytes / 1e9:.1f} / {e.memory.capacity_bytes / 1e9:.0f} GB"),
            ("valid", "yes" if pics.validation.valid else "no")]
    c = pics.canvases
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>pdag report: {escape(pics.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(pics.title)}</h1><small>workload: input {pics.plan.workload.input_len}, output "
        f"{pics.plan.workload.output_len}, batch {pics.plan.workload.batch_size} per replica; dtype "
        f"{pics.plan.dtype}. Figures are pdag's analytical estimates, not measurements.</small>",
        '<div class="kpi">' + "".join(f"<div>{k}<b>{escape(v)}</b></div>" for k, v in kpis) + "</div>",
    ]
    if search is not None:
        parts += ["<h2>Search: Pareto front</h2>", f'<div class="pic">{c["pareto"].to_svg("Pareto front")}</div>']
        rows = "".join(f"<tr><td>{p.rank}</td><td>{escape(p.label)}</td><td>{p.gpus_used}</td><td>{p.batch_size}</td>"
                       f"<td>{p.ttft_ms:,.1f}</td><td>{p.tpot_ms:.2f}</td><td>{p.throughput_per_gpu:,.1f}</td>"
                       f"<td>{escape(p.reason)}</td></tr>" for p in search.top)
        parts.append("<table><tr><th>rank</th><th>plan</th><th>GPUs</th><th>batch</th><th>TTFT ms</th><th>TPOT ms</th>"
                     f"<th>tok/s/GPU</th><th>why</th></tr>{rows}</table><p>The pictures below are of plan 1.</p>")
        if search.comparison:
            parts.append(f"<p>{escape(search.comparison)}</p>")
    parts += [
        "<h2>Execution DAG (folded)</h2>", f'<div class="pic">{c["dag"].to_svg("folded DAG")}</div>',
        "<h2>Timeline</h2>",
        f'<div class="pic">{c["timeline-prefill"].to_svg("prefill timeline")}</div>',
        f'<div class="pic">{c["timeline-decode"].to_svg("decode timeline")}</div>',
        "<h2>Memory per GPU</h2>", f'<div class="pic">{c["memory"].to_svg("memory per GPU")}</div>',
        f"<p>{escape(e.memory.message)}</p>",
        "<h2>Validation</h2>", _validation_html(pics),
        "<h2>Rules referenced</h2>", _rules_html(_rules_used(pics, search)),
        "<h2>Assumptions</h2><ul>" + "".join(f"<li>{escape(a)}</li>" for a in e.assumptions) + "</ul>",
    ]
    if e.warnings:
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in e.warnings) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def search_report(result: SearchResult) -> tuple[PlanPictures, str]:
    """A search's report: the best plan's pictures plus the Pareto front."""
    if not result.top:
        from tools.core.errors import PdagInputError

        raise PdagInputError("search", "no plan fits this model on this cluster, so there is nothing to draw",
                             "more GPUs, a smaller model or a lower-precision dtype")
    pics = plan_pictures(result.top[0].plan, search=result)
    return pics, report_html(pics, result)
