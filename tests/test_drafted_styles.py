"""Hand-drafted DAGs judged by meaning, not spelling: styles an outside drafter used (a MoE layer without its
MoENode, a TP operator drawn as one node on all its GPUs, a redundant container edge) are judged as the
equivalent pdag drawing is, and the mistakes those styles could hide are still caught."""

from __future__ import annotations

import copy

from tests.fixtures.generate import P_PP, TINY, TINY_MOE, add_edge, bypass, plan
from tools import autofix_dag, validate_dag
from tools.core.build import build_full_dag

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


def test_op_naming_an_operator_kind_groups_shards_per_layer() -> None:
    """A drafter's op may name the kind ('attention', 'mlp') rather than the instance: shards still group per
    layer, so two layers' shards on GPU 0 are not one operator's shards sharing a GPU."""
    d = build_full_dag({"model": TINY, "hardware": H2, "parallel": {"tp": 2}})
    for n in d["nodes"]:
        if n.get("op"):
            n["op"] = "attention" if n["type"] == "AttentionNode" else "mlp" if n["type"] == "FFNNode" else n["op"]
            n.pop("tp_rank", None)
    assert _errors(d) == set()
    same_gpu = copy.deepcopy(d)
    for n in same_gpu["nodes"]:
        if n["id"] == "r0.prefill.L0.ffn.t1":
            n["devices"] = [0]
    assert "GPU-SHARDS-DISTINCT" in _errors(same_gpu)


def test_nodes_that_repeat_fold_their_layer_without_a_folds_block() -> None:
    """A node's repeat (layers it stands for) folds the drawn layer even when the document states no folds."""
    from tools import build_dag

    d = build_dag(plan={"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                        "parallel": {"tp": 2}}).dag
    assert _errors(d) == set()
    d.pop("folds")
    assert _errors(d) == set()
    broken = bypass(copy.deepcopy(d), "r0.prefill.L0.ffn.allreduce")
    assert _errors(broken)


def test_a_collective_drawn_once_per_rank_is_one_collective() -> None:
    d = build_full_dag({"model": TINY, "hardware": H2, "parallel": {"tp": 2}})
    ar = "r0.prefill.L0.ffn.allreduce"
    node = next(n for n in d["nodes"] if n["id"] == ar)
    ins = [e["source"] for e in d["edges"] if e["target"] == ar]
    outs = [e["target"] for e in d["edges"] if e["source"] == ar]
    d["nodes"].remove(node)
    d["edges"] = [e for e in d["edges"] if ar not in (e["source"], e["target"])]
    for g in (0, 1):
        d["nodes"].append({**node, "id": f"{ar}.rank{g}", "devices": [g]})
        d["edges"] += [{"source": s, "target": f"{ar}.rank{g}", "type": "data"} for s in ins]
        d["edges"] += [{"source": f"{ar}.rank{g}", "target": t, "type": "data"} for t in outs]
    v = validate_dag(dag=copy.deepcopy(d))
    assert v.valid
    half = copy.deepcopy(d)  # one rank's half missing: the other does not cover both shards' GPUs
    half["nodes"] = [n for n in half["nodes"] if n["id"] != f"{ar}.rank1"]
    half["edges"] = [e for e in half["edges"] if f"{ar}.rank1" not in (e["source"], e["target"])]
    assert _errors(half)


def test_attention_dp_groups_are_never_one_tp_operator() -> None:
    """One-GPU attention-DP groups drawn without op / tp_rank (and the MoE layer without its MoENode) stay
    separate groups: their next collective is the dispatch, not a TP rejoin."""
    p = plan(TINY_MOE, 2, parallel={"attn_dp": 2, "ep": 2}, objective="throughput",
             options={"allow_attention_dp": True})
    d = build_full_dag(p)
    moes = [n["id"] for n in d["nodes"] if n["type"] == "MoENode"]
    d["nodes"] = [n for n in d["nodes"] if n["id"] not in moes]
    d["edges"] = [e for e in d["edges"] if e["source"] not in moes and e["target"] not in moes]
    for n in [n["id"] for n in d["nodes"] if n["type"] == "RouterNode"]:
        pre, g = n.rsplit(".router.", 1)
        d["edges"].append({"source": f"{pre}.norm_ffn.{g}", "target": n, "type": "data"})
    for n in d["nodes"]:
        if n["type"] in ("AttentionNode", "KVCacheUpdateNode"):
            n.pop("op", None)
            n.pop("tp_rank", None)
    assert _errors(d) == set()


def test_expert_nodes_drawn_one_per_expert_on_one_gpu_are_refused_not_merged() -> None:
    """Seed 000 section 3.4: Expert nodes = GPUs.  pdag used to merge them silently (and price them as one)."""
    d = build_full_dag(plan(TINY_MOE, 2, parallel={"ep": 2}))
    for ph in ("prefill", "decode"):
        for layer in (0, 1):
            for r in (0, 1):
                nid = f"r0.{ph}.L{layer}.e{r}"
                node = next(n for n in d["nodes"] if n["id"] == nid)
                first, second = node["experts"]
                node["experts"] = [first]
                node.pop("ep_rank", None)
                twin = {**copy.deepcopy(node), "id": nid + "b", "experts": [second]}
                d["nodes"].append(twin)
                d["edges"] += [{**e, "target": twin["id"]} for e in d["edges"] if e["target"] == nid]
                d["edges"] += [{**e, "source": twin["id"]} for e in d["edges"] if e["source"] == nid]
    assert "EP-EXPERT-NODES-EQ-GPUS" in _errors(d)
    twice = copy.deepcopy(d)  # the same expert on both of a GPU's nodes is a copy, not a split
    for n in twice["nodes"]:
        if n["id"] == "r0.prefill.L0.e0b":
            n["experts"] = list(next(m for m in twice["nodes"] if m["id"] == "r0.prefill.L0.e0")["experts"])
    assert _errors(twice)


def test_a_sendrecv_carrying_only_kv_cache_is_the_kv_hand_off() -> None:
    p = plan(TINY, 4, parallel={"tp": 2}, phases={"prefill": {"dp": 1}, "decode": {"dp": 2, "tp": 1}},
             objective="throughput", options={"disaggregated": True})
    d = build_full_dag(p)
    for n in d["nodes"]:
        if n["type"] == "KVTransferNode":
            n["type"] = "SendRecvNode"
            n.pop("role", None)
            n.pop("meta", None)
    assert _errors(d) == set()


def test_one_kv_cache_node_per_stage_serves_all_its_layers() -> None:
    d = build_full_dag(plan({"hf_config": {**TINY["hf_config"], "num_hidden_layers": 4}}, 2, parallel={"pp": 2},
                            objective="throughput", workload={"batch_size": 4}))
    for ph in ("prefill", "decode"):
        keep, drop = f"r0.{ph}.L0.kv.t0", f"r0.{ph}.L1.kv.t0"
        for e in d["edges"]:
            e["source"] = keep if e["source"] == drop else e["source"]
            e["target"] = keep if e["target"] == drop else e["target"]
        d["nodes"] = [n for n in d["nodes"] if n["id"] != drop]
        for k in ("layer", "op", "tp_rank"):
            next(n for n in d["nodes"] if n["id"] == keep).pop(k, None)
    seen: set[tuple[str, str, str]] = set()
    d["edges"] = [e for e in d["edges"] if (k := (e["source"], e["target"], e["type"])) not in seen
                  and not seen.add(k)]
    assert _errors(d) == set()


def test_kv_cache_crossing_gpus_is_told_to_use_a_kv_transfer() -> None:
    p = plan(TINY, 4, parallel={"tp": 2}, phases={"prefill": {"dp": 1}, "decode": {"dp": 2, "tp": 1}},
             objective="throughput", options={"disaggregated": True})
    d = build_full_dag(p)
    for n in [n["id"] for n in d["nodes"] if n["type"] == "KVTransferNode"]:
        bypass(d, n)
    hints = [v.hint for v in validate_dag(dag=d).violations if v.rule_id == "COMM-NO-IMPLICIT"]
    assert hints and "KVTransferNode" in hints[0]
