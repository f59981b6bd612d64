"""Outside test 4: autofix keeps the drawn strategy (the fewest, smallest degree changes, the rules' own hints
first), offers the plan as drawn with its opt-in set, and repairs SP in decode, which validate flags and no engine
launches."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contracts import assert_fix_contract
from tests.fixtures.generate import TINY, TINY_MOE
from tools import autofix_dag, export_plan, validate_dag
from tools.core.layout import Layout
from tools.core.plan import parse_plan
from tools.engines.launch import EngineCannotExpress
from tools.repair.autofix import degrees_of

DSV3_DRAFT = {"model": "deepseek-v3", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
              "parallel": {"tp": 8, "ep": 8, "dp": 2, "sp": 2, "attn_dp": 2}, "phases": {"decode": {"sp": 2}},
              "workload": {"input_len": 4096, "output_len": 512, "concurrency": 32}, "objective": "throughput"}


def test_a_draft_that_does_not_fit_takes_the_hinted_repair_not_a_far_layout() -> None:
    """Before: tp 2, ep 2, pp 5 on 10 of the 16 GPUs (the change log went tp 8 -> 16 -> 2), although validate's
    MEM-FITS hint said 'ep 16' and a plan that close fits."""
    hint = next(v.hint for v in validate_dag(plan=DSV3_DRAFT).violations if v.rule_id == "MEM-FITS")
    r = autofix_dag(plan=DSV3_DRAFT)
    assert r.valid and validate_dag(plan=r.plan).valid
    par = r.plan["parallel"]
    assert f"ep {par['ep']}" in hint and par.get("pp", 1) == 1
    assert Layout(parse_plan(r.plan)).gpus_needed == 16  # no GPU left idle
    fields = [c.field for c in r.changes]
    assert len(fields) == len(set(fields)), fields  # each degree changed once, not back and forth
    # every degree it changed is reported with the rule that forced it, that rule's own change
    for lost in r.intents_not_kept:
        key, rules = lost.split()[0], lost.split("forced by ")[1].rstrip(")").split(", ")
        assert len(rules) == 1 and any(c.field == f"plan.{key}" and c.rule_id == rules[0] for c in r.changes)


def test_the_plan_as_drawn_with_its_opt_in_is_offered_repaired() -> None:
    """Before: alternatives held only pipeline layouts: the opt-in alternative was offered only when the drawn plan
    was valid with the opt-in as it stood."""
    r = autofix_dag(plan=DSV3_DRAFT)
    opted = [a for a in r.alternatives if (a.plan.get("options") or {}).get("allow_attention_dp")]
    assert opted, [a.note for a in r.alternatives]
    alt = opted[0].plan
    assert validate_dag(plan=alt).valid
    assert alt["parallel"]["tp"] == 8 and alt["parallel"]["attn_dp"] == 2  # the drawn attention layout is kept
    assert autofix_dag(plan=alt).changes == []


def test_sp_in_decode_is_repaired_and_the_plan_then_exports() -> None:
    """Before: validate said valid (SP-DECODE-INEFFECTIVE a warning), autofix 'nothing to change', and export
    refused the plan for its decode SP."""
    plan = {"model": "mixtral-8x22b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
            "parallel": {"tp": 8, "ep": 8, "dp": 2}, "phases": {"decode": {"sp": 2}},
            "workload": {"input_len": 4096, "output_len": 512, "concurrency": 32}, "engine": "vllm"}
    v = validate_dag(plan=plan)
    assert "SP-DECODE-INEFFECTIVE" in {x.rule_id for x in v.violations}
    r = autofix_dag(plan=plan)
    assert [(c.rule_id, c.field, c.after) for c in r.changes if c.rule_id == "SP-DECODE-INEFFECTIVE"] == [
        ("SP-DECODE-INEFFECTIVE", "plan.phases.decode.sp", 1)]
    assert "SP-DECODE-INEFFECTIVE" not in {x.rule_id for x in r.violations}
    assert "phases" not in r.plan  # decode sp 1 is the plan-wide value: no override left
    assert "vllm serve" in export_plan(r.plan).command
    # prefill SP is the plan's own choice (a warning for a short prompt): kept, decode SP alone is repaired
    kept = autofix_dag(plan={**plan, "parallel": {**plan["parallel"], "sp": 2}})
    assert kept.plan["parallel"]["sp"] == 2 and kept.plan["phases"]["decode"]["sp"] == 1
    # ... and the answer says, before the agent exports it, that export writes no command for it
    assert [n for n in kept.notes if "prefill sp = 2" in n and "export_plan" in n]
    assert not [n for n in r.notes if "export_plan" in n]
    with pytest.raises(EngineCannotExpress):
        export_plan(kept.plan)


degree = st.sampled_from([1, 1, 2, 4])


@st.composite
def drafts(draw: st.DrawFn) -> dict[str, Any]:
    """Drafts in layouts every engine launches (a MoE model's experts over its TP group), with SP drawn in decode
    or not: what export refuses of them is the decode SP autofix must repair."""
    model = draw(st.sampled_from([TINY, TINY_MOE]))
    tp = draw(degree)
    return {"model": model, "hardware": {"gpu": "h100-sxm", "num_gpus": draw(st.sampled_from([2, 4, 8]))},
            "parallel": {"dp": draw(degree), "tp": tp, "ep": tp if model is TINY_MOE else 1, "pp": draw(degree)},
            "phases": draw(st.sampled_from([{}, {"decode": {"sp": 2}}, {"decode": {"sp": 4}}])),
            "objective": draw(st.sampled_from(["latency", "throughput"])),
            "engine": draw(st.sampled_from(["vllm", "sglang", "trtllm"])),
            "checkpoint": "/models/tiny"}  # a config.json names no repo for the command to load


def _changed(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    b, a = degrees_of(before), degrees_of(after)
    return {k for k in set(b) | set(a) if b.get(k, 1) != a.get(k, 1)}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drafts())
def test_an_arbitrary_draft_is_repaired_into_a_plan_its_engine_launches(plan: dict[str, Any]) -> None:
    """Property: the repaired plan validates, a valid draft keeps every degree but its decode SP, and a plan that
    names an engine and draws no prefill SP exports under that engine once repaired."""
    assert_fix_contract(plan)
    r = autofix_dag(plan=plan)
    if validate_dag(plan=plan).valid:
        assert _changed(plan, r.plan) <= {"phases.decode.sp"}
    if r.valid:
        out = export_plan(r.plan)
        assert out.engine == plan["engine"] and out.argv
