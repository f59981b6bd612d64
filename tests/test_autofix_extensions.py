"""autofix_dag on the opt-in strategies: without the opt-in the feature is turned off with the GPU count kept,
and the opt-in is offered as an alternative; repairs are idempotent."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contracts import assert_fix_contract
from tests.fixtures.generate import ADP_DSV3, DIS_70B, P_ADP, P_DIS, TINY, TINY_MOE, without
from tools import autofix_dag, validate_dag
from tools.core.layout import Layout
from tools.core.plan import parse_plan


def gpus(plan: dict) -> int:
    return Layout(parse_plan(plan)).gpus_needed


def test_attention_dp_without_opt_in_turned_off_keeping_gpus_with_opt_in_alternative():
    bare = {**without(ADP_DSV3, "allow_attention_dp"), "weights": "bf16"}  # 1.3 TB: needs all 16 GPUs
    r = autofix_dag(plan=bare)
    assert r.valid
    assert r.plan["parallel"].get("attn_dp", 1) == 1 and r.plan["parallel"]["tp"] == 8
    assert gpus(r.plan) == gpus(bare) == 16
    assert any(c.rule_id == "ADP-OPT-IN" and "allow_attention_dp" in c.message for c in r.changes)
    alt = [a for a in r.alternatives if a.plan.get("options", {}).get("allow_attention_dp")]
    assert alt and alt[0].parallel["attn_dp"] == 8 and validate_dag(plan=alt[0].plan).valid
    assert autofix_dag(plan=r.plan).changes == []


def test_disaggregated_without_opt_in_aggregates_with_same_gpus():
    bare = {**without(P_DIS, "disaggregated")}
    r = autofix_dag(plan=bare)
    assert r.valid and r.plan["parallel"] == {"tp": 2, "dp": 2} and "phases" not in r.plan
    assert gpus(r.plan) == 4
    alt = [a for a in r.alternatives if a.plan.get("options", {}).get("disaggregated")]
    assert alt and validate_dag(plan=alt[0].plan).valid
    assert autofix_dag(plan=r.plan).changes == []


def test_dense_attention_dp_becomes_dp():
    r = autofix_dag(plan={**without(P_DIS, "disaggregated"), "phases": {}, "parallel": {"attn_dp": 2, "tp": 2},
                          "options": {"allow_attention_dp": True}})
    assert r.valid and r.plan["parallel"]["dp"] == 2 and "attn_dp" not in r.plan["parallel"]
    assert "allow_attention_dp" not in (r.plan.get("options") or {})


def test_ep_is_spread_over_the_attention_groups():
    r = autofix_dag(plan={**P_ADP, "parallel": {"attn_dp": 4, "ep": 2}})
    assert r.valid and r.plan["parallel"]["ep"] == 4


def test_valid_opt_in_plans_are_unchanged():
    for plan in (P_ADP, P_DIS, ADP_DSV3, DIS_70B):
        r = autofix_dag(plan=plan)
        assert r.valid and not [c for c in r.changes if c.severity == "error"], [c.message for c in r.changes]


degree = st.sampled_from([1, 1, 2, 4])
opt_plans = st.fixed_dictionaries({
    "model": st.sampled_from([TINY, TINY_MOE]),
    "hardware": st.fixed_dictionaries({"gpu": st.just("h100-sxm"), "num_gpus": st.sampled_from([2, 4, 8, 16])}),
    "parallel": st.fixed_dictionaries({"dp": degree, "tp": degree, "ep": degree, "attn_dp": degree}),
    "phases": st.sampled_from([{}, {"decode": {"tp": 1, "dp": 2}}, {"decode": {"attn_dp": 2}}]),
    "objective": st.sampled_from(["latency", "throughput"]),
    "options": st.fixed_dictionaries({"allow_attention_dp": st.booleans(), "disaggregated": st.booleans()}),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opt_plans)
def test_random_opt_in_plans(plan):
    assert_fix_contract(plan)
