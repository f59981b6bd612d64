"""Property tests: random plans and random mutations of valid DAGs never crash validate or autofix; autofix
output validates or explains itself, and fixing a fixed plan changes nothing."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contracts import assert_fix_contract, assert_no_crashed_checker
from tests.fixtures.generate import TINY, TINY_MOE
from tools import autofix_dag, build_dag, validate_dag

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
degree = st.sampled_from([1, 1, 2, 3, 4, 6, 8, 16])

plans = st.fixed_dictionaries({
    "model": st.sampled_from([TINY, TINY_MOE, "llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b"]),
    "hardware": st.fixed_dictionaries({"gpu": st.sampled_from(["h100-sxm", "a100-80gb", "l40s"]),
                                       "num_gpus": st.integers(1, 64), "gpus_per_node": st.sampled_from([4, 8])}),
    "parallel": st.fixed_dictionaries({"dp": degree, "pp": degree, "tp": degree, "ep": degree, "sp": degree}),
    "phases": st.sampled_from([{}, {"decode": {"sp": 1}}, {"prefill": {"sp": 2}}, {"decode": {"tp": 1}}]),
    "workload": st.fixed_dictionaries({"input_len": st.sampled_from([128, 2048, 16384]),
                                       "batch_size": st.sampled_from([1, 8])}),
    "objective": st.sampled_from(["latency", "throughput"]),
})


@SETTINGS
@given(plans)
def test_random_plans(plan):
    assert_fix_contract(plan)


BASES = [
    build_dag({"model": TINY, "hardware": {"gpu": "h100-sxm", "num_gpus": 4},
               "parallel": {"tp": 2, "pp": 2}, "workload": {"batch_size": 4}}).dag,
    build_dag({"model": TINY_MOE, "hardware": {"gpu": "h100-sxm", "num_gpus": 4},
               "parallel": {"dp": 2, "tp": 2, "ep": 2}, "objective": "throughput"}).dag,
]


@st.composite
def mutated(draw):
    dag = copy.deepcopy(draw(st.sampled_from(BASES)))
    if draw(st.booleans()):
        dag.pop("plan")
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop_edge", "move_shard", "stage_branch", "devices", "drop_node"]))
        nodes, edges = dag["nodes"], dag["edges"]
        if kind == "drop_edge" and edges:
            edges.pop(draw(st.integers(0, len(edges) - 1)))
        elif kind == "move_shard":
            shards = [n for n in nodes if n.get("tp_rank") is not None or n.get("ep_rank") is not None]
            n = draw(st.sampled_from(shards))
            n["devices"] = [draw(st.integers(0, 7))]
        elif kind == "stage_branch":
            stages = [n for n in nodes if n["type"] == "PipelineStageNode"]
            phases = [n for n in nodes if n["type"] == "PhaseNode"]
            if stages and phases:
                edges.append({"source": draw(st.sampled_from(phases))["id"],
                              "target": draw(st.sampled_from(stages))["id"], "type": "data"})
        elif kind == "devices":
            n = draw(st.sampled_from(nodes))
            n["devices"] = draw(st.lists(st.integers(0, 9), max_size=3))
        elif kind == "drop_node":
            gone = draw(st.sampled_from(nodes))["id"]
            dag["nodes"] = [n for n in nodes if n["id"] != gone]
    return dag


@SETTINGS
@given(mutated())
def test_mutated_dags(dag):
    v = validate_dag(dag=dag)
    assert_no_crashed_checker(v.notes)
    r = autofix_dag(dag=dag)
    assert_no_crashed_checker(r.notes)
    if r.valid and r.dag is not None:
        assert validate_dag(dag=r.dag).valid
    if not r.valid:
        assert all(x.reason for x in r.violations if x.severity == "error")
