"""estimate_performance(dag=...) prices the submitted DAG itself, and refuses one that does not validate."""

from __future__ import annotations

import copy

import pytest

from tests.fixtures.generate import P_DENSE, P_DIS, P_DP, P_MOE, P_PP, bypass, dag_of
from tests.test_drafted_checks import megatron
from tests.test_normalize import renamed, shuffled, strip
from tools import estimate_performance
from tools.core.errors import PdagInputError


def figures(e) -> tuple[float, float, int]:
    return round(e.prefill_latency_ms, 9), round(e.decode_latency_ms_per_token, 9), e.gpus_used


@pytest.mark.parametrize("p", [P_DENSE, P_PP, P_DP, P_MOE, P_DIS], ids=["dense", "pp", "dp", "moe", "disagg"])
def test_the_drawn_dag_of_a_plan_costs_what_the_plan_costs(p):
    assert figures(estimate_performance(dag=copy.deepcopy(dag_of(p)))) == figures(estimate_performance(plan=p))


def test_a_terse_shuffled_renamed_drawing_costs_the_same():
    d = renamed(strip(shuffled(dag_of(P_DP), 5), ("op", "role", "layer", "phase")), 5)
    assert figures(estimate_performance(dag=d)) == figures(estimate_performance(plan=P_DP))


def test_costs_come_from_the_dag_nodes():
    """FFN shards drawn at full width (meta.of = 1) cost more than the plan's halves: priced as drawn."""
    d = copy.deepcopy(dag_of(P_DENSE))
    for n in d["nodes"]:
        if n["type"] == "FFNNode":
            n["meta"] = {"of": 1}
    drawn = estimate_performance(dag=d)
    assert drawn.prefill_latency_ms > estimate_performance(plan=P_DENSE).prefill_latency_ms


def test_a_megatron_drawing_is_priced():
    split = estimate_performance(dag=megatron(copy.deepcopy(dag_of(P_DENSE))))
    assert split.prefill_latency_ms > 0 and split.gpus_used == 2


def test_a_broken_dag_is_refused_with_its_root_cause():
    d = bypass(copy.deepcopy(dag_of(P_DENSE)), "r0.prefill.L0.attn.allreduce")
    with pytest.raises(PdagInputError) as exc:
        estimate_performance(dag=d)
    assert exc.value.field == "dag" and "TP-REJOIN-BEFORE-NEXT-LAYER" in exc.value.problem
