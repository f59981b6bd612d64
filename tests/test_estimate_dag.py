"""estimate_performance(dag=...) prices the submitted DAG itself, and refuses one that does not validate."""

from __future__ import annotations

import copy

import pytest

from tests.fixtures.generate import P_DENSE, P_DIS, P_DP, P_MOE, P_PP, bypass, dag_of, one_node
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
    """Priced as drawn: the FFN of every layer drawn as one node over both GPUs (no meta.of) costs what its two
    halves cost; the two halves claiming the full width each (meta.of = 1) contradict the model and are refused
    (STRUCT-SHARD-SIZES), not priced as a model that is not the one served."""
    d = one_node(copy.deepcopy(dag_of(P_DENSE)), lambda op: op.endswith(".ffn"))
    assert figures(estimate_performance(dag=d)) == figures(estimate_performance(plan=P_DENSE))
    d = copy.deepcopy(dag_of(P_DENSE))
    for n in d["nodes"]:
        if n["type"] == "FFNNode":
            n["meta"] = {"of": 1}
    with pytest.raises(PdagInputError) as exc:
        estimate_performance(dag=d)
    assert "STRUCT-SHARD-SIZES" in exc.value.problem


def test_a_megatron_drawing_is_priced():
    split = estimate_performance(dag=megatron(copy.deepcopy(dag_of(P_DENSE))))
    assert split.prefill_latency_ms > 0 and split.gpus_used == 2


def test_a_broken_dag_is_refused_with_its_root_cause():
    d = bypass(copy.deepcopy(dag_of(P_DENSE)), "r0.prefill.L0.attn.allreduce")
    with pytest.raises(PdagInputError) as exc:
        estimate_performance(dag=d)
    assert exc.value.field == "dag" and "TP-REJOIN-BEFORE-NEXT-LAYER" in exc.value.problem
