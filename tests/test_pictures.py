"""The plan report's pictures: drawn for a dense, an MoE, a PP and a disaggregated plan, and checked against the
estimate they come from (totals, critical path, memory), plus the HTML page and the terminal bars."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.cli import main as cli
from tools.estimate.core import PathStep, PhasePath
from tools.pictures.memory import bars
from tools.pictures.pareto import draw_pareto
from tools.pictures.report import _bar, plan_pictures, report_html, search_report, text_bars
from tools.pictures.timeline import schedule
from tools.search.strategies import search_strategies

DENSE = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
         "workload": {"input_len": 2048, "output_len": 256, "batch_size": 8}}
MOE = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
       "workload": {"input_len": 1024, "output_len": 128, "batch_size": 4}}
PP = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"pp": 2, "tp": 8},
      "workload": {"input_len": 2048, "output_len": 256, "batch_size": 8}}
DISAGG = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 8},
          "phases": {"decode": {"dp": 2, "tp": 4}}, "options": {"disaggregated": True},
          "workload": {"input_len": 2048, "output_len": 256, "batch_size": 16}}
PLANS = {"dense": DENSE, "moe": MOE, "pp": PP, "disagg": DISAGG}


@pytest.fixture(scope="module", params=list(PLANS))
def pics(request):
    return request.param, plan_pictures(PLANS[request.param])


def test_every_picture_is_drawn(pics):
    name, p = pics
    assert set(p.canvases) == {"dag", "timeline-prefill", "timeline-decode", "memory"}
    for key, canvas in p.canvases.items():
        svg = canvas.to_svg(key)
        assert svg.startswith("<svg") and svg.endswith("</svg>") and len(canvas.shapes) > 10, key


def test_dag_folds_layers_marks_the_critical_path_and_names_gpus(pics):
    name, p = pics
    dag = p.canvases["dag"]
    texts = dag.texts()
    layers = p.plan.spec.num_layers
    per_stage = layers // (2 if name == "pp" else 1)
    assert any(t.endswith(f"  ×{per_stage}") for t in texts), "a run of identical layers is drawn once with its count"
    assert any(c.startswith("op critical") for c in dag.classes()), "no operator on the critical path"
    assert any(c == "edge critical" for c in dag.classes())
    assert "attention ×8" in texts or "attention ×4" in texts
    assert any(t.startswith("GPU 0-7") for t in texts)
    assert {"prefill", "decode"} <= {t.split(" ")[0] for t in texts}
    if name == "moe":
        assert {"EP dispatch", "EP combine", "experts ×8", "router"} <= set(texts)
    if name == "pp":
        assert any(t.startswith("stage 1 · layers 40–79 · GPU 8-15") for t in texts)
        assert "send/recv" in texts
    if name == "disagg":
        assert "KV transfer ×80" in texts and any(t.startswith("stage 0 · layers 0–79 · GPU 8-11") for t in texts)


def test_timelines_add_up_to_the_estimate(pics):
    name, p = pics
    e = p.estimate
    for tl in p.timelines:
        detail = getattr(e, tl.phase)
        path = p.paths[tl.phase]
        assert path.micro_batches == detail.micro_batches
        expect = detail.latency_ms + (e.kv_transfer.ms if tl.phase == "prefill" and e.kv_transfer else 0.0)
        assert tl.total_ms == pytest.approx(expect, rel=1e-9)
        if tl.phase == "prefill":
            assert tl.total_ms == pytest.approx(e.prefill_latency_ms, rel=1e-9)  # TTFT
        else:
            assert tl.total_ms == pytest.approx(e.decode_latency_ms_per_token, rel=1e-9)  # TPOT
        if detail.micro_batches == 1:  # one pass: the drawn work is the critical path itself
            work = sum(s.ms for s in tl.segments if s.kind not in ("overhead", "handoff"))
            assert work == pytest.approx(detail.critical_path_ms, rel=1e-9)
        for row in tl.rows:
            assert sum(tl.busy_ms(row).values()) <= tl.total_ms * (1 + 1e-9)
        assert all(s.start_ms >= 0 and s.start_ms + s.ms <= tl.total_ms * (1 + 1e-9) for s in tl.segments)
        assert len(tl.rows) == len(detail.stage_ms) + (1 if tl.phase == "prefill" and e.kv_transfer else 0)


def test_pp_timeline_shows_idle_stages():
    p = plan_pictures({**PP, "workload": {"input_len": 2048, "output_len": 256, "batch_size": 1}})
    pre = p.timelines[0]
    assert pre.rows == ["stage 0", "stage 1"] and p.estimate.prefill.micro_batches == 1
    s0, s1 = (sum(pre.busy_ms(r).values()) for r in pre.rows)
    step = p.estimate.prefill.step_overhead_ms
    # batch 1: each stage waits while the other works, so its idle time is the other stage's work
    assert pre.total_ms - s0 == pytest.approx(s1 - step, rel=1e-9)
    assert pre.total_ms - s1 == pytest.approx(s0 - step, rel=1e-9)


def test_memory_bars_equal_the_accounting(pics):
    name, p = pics
    mem = p.estimate.memory
    bs = bars(mem)
    assert sum(len(b.gpus) for b in bs) == len(mem.per_gpu)
    by_gpu = {g.gpu: g for g in mem.per_gpu}
    for b in bs:
        for g in b.gpus:
            assert b.total == pytest.approx(by_gpu[g].total_bytes, rel=1e-3)
    assert max(b.total for b in bs) == pytest.approx(mem.max_gpu_bytes, rel=1e-6)
    canvas = p.canvases["memory"]
    assert "capacity" in canvas.classes()
    assert f"{mem.max_gpu_bytes / 1e9:.1f}" in canvas.texts()
    kinds = {c.split(" ", 1)[1] for c in canvas.classes() if c.startswith("mem ")}
    assert {"weights", "KV-cache", "reserve"} <= kinds
    if name == "disagg":
        assert any(t.startswith("decode stage 0") for t in canvas.texts())


def test_html_is_self_contained_deterministic_and_links_rules(pics):
    name, p = pics
    html = report_html(p)
    assert html == report_html(plan_pictures(PLANS[name]))
    no_ns = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert not re.search(r"https?://|<script|<link|<img|@import|url\((?!#)", no_ns), "the page must not fetch anything"
    assert html.count("<svg") == 4
    for v in p.validation.violations:
        assert f'href="#rule-{v.rule_id}"' in html and f'id="rule-{v.rule_id}"' in html
    assert f"{p.estimate.prefill_latency_ms:,.1f} ms" in html


def test_disaggregated_report_warns_with_linked_rule():
    p = plan_pictures(DISAGG)
    assert any(v.rule_id == "DISAGG-TRANSFER-LINK" for v in p.validation.violations)
    assert 'href="#rule-DISAGG-TRANSFER-LINK"' in report_html(p)


def test_search_report_draws_the_pareto_front():
    result = search_strategies(model="llama-3.1-8b", hardware={"gpu": "h100-sxm", "num_gpus": 8},
                               objective="throughput", disaggregated=False)
    canvas = draw_pareto(result)
    assert canvas.classes().count("pareto-point") == len(result.pareto) > 0
    assert canvas.classes().count("chosen") == 1
    assert canvas.classes().count("rejected") == min(len(result.rejected), 14)
    for rule, n in list(result.rejected.items())[:3]:
        assert f"{rule} {n}" in canvas.texts()
    pics, html = search_report(result)
    assert "Pareto front" in html and html.count("<svg") == 5
    for rule in result.rejected:
        assert f'id="rule-{rule}"' in html


def test_png_is_a_small_png():
    p = plan_pictures(MOE)
    from server.pictures import png_under

    data = png_under(p.canvases["timeline-decode"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 300_000
    assert data == png_under(p.canvases["timeline-decode"])  # deterministic bytes


def test_text_bars_in_the_terminal(capsys):
    p = plan_pictures(PP)
    out = text_bars(p.estimate, p.paths, width=50)
    lines = out.splitlines()
    assert [ln.split("|")[0].strip() for ln in lines[:3]] == ["prefill", "decode", "memory"]
    assert all(len(ln.split("|")[1]) == 50 for ln in lines[:3])
    assert f"{p.estimate.memory.max_gpu_bytes / 1e9:.1f} of {p.estimate.memory.capacity_bytes / 1e9:.0f} GB" in lines[2]
    assert cli(["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^prefill \|[#=~+.]+\| ", printed, re.M) and re.search(r"^memory  \|[WKABR.]+\| ", printed, re.M)


def test_cli_report_writes_the_page(tmp_path, capsys):
    out = tmp_path / "r.html"
    assert cli(["report", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--ep", "8",
                "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert f"wrote {out}" in capsys.readouterr().out
    assert cli(["report", "--model", "llama-3.1-8b", "--gpus", "1", "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "output" in capsys.readouterr().err
    page = tmp_path / "s.html"
    assert cli(["search", "--model", "llama-3.1-8b", "--gpus", "2", "--no-disaggregated", "--report", str(page)]) == 0
    assert "Pareto front" in page.read_text(encoding="utf-8")


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=8), st.integers(1, 120))
@settings(max_examples=60, deadline=None)
def test_bar_is_always_exactly_the_width(values, width):
    parts = [(chr(ord("a") + i), v) for i, v in enumerate(values)]
    bar = _bar(parts, sum(values), width)
    assert len(bar) == width
    if sum(values) > 0:
        for ch, v in parts:  # each part within one cell of its share
            assert abs(bar.count(ch) - v / sum(values) * width) <= 1 + 1e-9


_step = st.builds(lambda stage, ms, kind: (stage, ms, kind), st.integers(0, 3), st.floats(0.001, 50),
                  st.sampled_from(["compute", "memory", "communication"]))


@given(st.lists(_step, min_size=1, max_size=40), st.integers(1, 4), st.sampled_from(["prefill", "decode"]),
       st.floats(0, 3))
@settings(max_examples=60, deadline=None)
def test_schedule_fits_its_latency_without_overlaps(raw, micro, phase, overhead):
    stages = max(s for s, _, _ in raw) + 1
    steps = sorted(raw, key=lambda r: r[0])  # a chain walks the stages in order
    per = [sum(ms for s, ms, _ in steps if s == k) for k in range(stages)]
    if micro == 1:
        latency = sum(per)
    elif phase == "prefill":
        latency = (micro + stages - 1) * max(per)
    else:
        latency = max(sum(per), micro * max(per))
    path = PhasePath(phase=phase, stages=stages, micro_batches=micro, latency_ms=latency, step_overhead_ms=overhead,
                     steps=[PathStep(node=f"n{i}", name=k, kind=k, stage=s, layer=None, ms=ms)
                            for i, (s, ms, k) in enumerate(steps)])
    tl = schedule(path)
    assert tl.total_ms == pytest.approx(latency + overhead)
    for row in tl.rows:
        segs = sorted((s for s in tl.segments if s.row == row), key=lambda s: s.start_ms)
        for a, b in zip(segs, segs[1:], strict=False):
            assert a.start_ms + a.ms <= b.start_ms + 1e-6 * max(1.0, latency)
        stage = int(row.split()[1])
        work = sum(s.ms for s in segs if s.kind != "overhead")
        assert work == pytest.approx(per[stage] * micro, rel=1e-9, abs=1e-9)
    assert {s.kind for s in tl.segments} <= {"compute", "memory", "communication", "overhead"}
