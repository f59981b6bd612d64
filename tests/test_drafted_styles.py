"""Hand-drafted DAGs judged by meaning, not spelling: styles an outside drafter used (a MoE layer without its
MoENode, a TP operator drawn as one node on all its GPUs, a redundant container edge) are judged as the
equivalent pdag drawing is, and the mistakes those styles could hide are still caught."""

from __future__ import annotations

import copy

from tests.fixtures.generate import P_PP, TINY, TINY_MOE, add_edge, bypass, plan
from tools import autofix_dag, validate_dag
from tools.build import build_full_dag

H2 = {"gpu": "h100-sxm", "num_gpus": 2, "gpus_per_node": 8}


def _errors(dag: dict) -> set[str]:
    return {v.rule_id for v in validate_dag(dag=copy.deepcopy(dag)).violations if v.severity == "error"}


def test_a_moe_layer_drawn_with_only_its_router_is_a_moe_layer() -> None:
    """knowledge/08's minimal MoE form has no MoENode: router, dispatch, experts, combine."""
    d = build_full_dag({"model": TINY_MOE, "hardware": H2, "parallel": {"tp": 2, "ep": 2}})
    for n in [n["id"] for n in d["nodes"] if n["type"] == "MoENode"]:
        bypass(d, n)
    for n in d["nodes"]:
        n.pop("op", None)
    assert _errors(d) == set()
    no_router = copy.deepcopy(d)
    for n in [n["id"] for n in no_router["nodes"] if n["type"] == "RouterNode"]:
        bypass(no_router, n)
    assert "EP-MOE-ONLY" in _errors(no_router)


def _logical_ffn() -> dict:
    """pdag's TP 2 DAG with layer 0's prefill FFN drawn as one node on GPUs 0 and 1."""
    d = build_full_dag({"model": TINY, "hardware": H2, "parallel": {"tp": 2}})
    ffn = "r0.prefill.L0.ffn"
    d["nodes"] = [n for n in d["nodes"] if n["id"] != f"{ffn}.t1"]
    d["edges"] = [e for e in d["edges"] if f"{ffn}.t1" not in (e["source"], e["target"])]
    for n in d["nodes"]:
        if n["id"] == f"{ffn}.t0":
            n.update(devices=[0, 1])
            n.pop("tp_rank")
            n.pop("op")
    return d


def test_a_tp_operator_drawn_as_one_node_still_needs_its_all_reduce() -> None:
    d = _logical_ffn()
    assert _errors(d) == set()
    broken = bypass(copy.deepcopy(d), "r0.prefill.L0.ffn.allreduce")
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in _errors(broken)
    fixed = autofix_dag(dag=broken)
    assert fixed.valid and any(c.rule_id == "TP-REJOIN-BEFORE-NEXT-LAYER" for c in fixed.changes)


def test_a_redundant_phase_to_stage_edge_is_not_a_parallel_branch() -> None:
    d = build_full_dag(P_PP)
    assert _errors(add_edge(copy.deepcopy(d), "r0.prefill", "r0.prefill.s1")) == set()


def test_sequence_sharded_decode_is_flagged_whatever_the_embedded_plan_says() -> None:
    sp = plan(TINY, 4, parallel={"tp": 4, "sp": 2})
    drawn = build_full_dag(sp)  # SP in both phases
    assert "SP-DECODE-INEFFECTIVE" in {v.rule_id for v in validate_dag(dag=copy.deepcopy(drawn)).violations}
    drawn["plan"] = {**sp, "phases": {"decode": {"sp": 1}}}
    warned = [v for v in validate_dag(dag=drawn).violations if v.rule_id == "SP-DECODE-INEFFECTIVE"]
    assert warned and "embedded plan" in warned[0].message
