"""Defects of hand-drafted DAGs that used to pass (issue 13), and a valid layout that used to be rejected."""

from __future__ import annotations

import copy

from tests.fixtures.generate import P_DENSE, P_PP, add_edge, bypass, dag_of, drop_edges, node, set_attr, swap_layers
from tools import validate_dag

R = "r0.prefill"


def errors(doc: dict) -> set[str]:
    v = validate_dag(dag=copy.deepcopy(doc))
    return {x.rule_id for x in v.violations if x.severity == "error"}


def dense() -> dict:
    return copy.deepcopy(dag_of(P_DENSE))


def pp() -> dict:
    return copy.deepcopy(dag_of(P_PP))


def test_layers_out_of_order_inside_a_stage():
    assert "PP-LAYER-ORDER" in errors(swap_layers(dense(), 2, 3))
    assert "PP-LAYER-ORDER" not in errors(dense())


def test_stage_hand_off_without_sendrecv_is_implicit_even_after_a_collective():
    d = bypass(pp(), f"{R}.s0.send")
    assert "COMM-NO-IMPLICIT" in errors(d)


def test_sendrecv_must_reach_the_next_stage_gpus():
    d = set_attr(pp(), f"{R}.s0.send", devices=[0, 1])
    assert "PP-SENDRECV-CONSECUTIVE" in errors(d)
    assert "PP-SENDRECV-CONSECUTIVE" not in errors(pp())


def test_stage_range_gap_without_operator_layers():
    d = pp()
    for n in d["nodes"]:
        if n["type"] not in ("PipelineStageNode",):
            n.pop("layer", None)
    set_attr(d, f"{R}.s1", layers=[3, 5])
    assert "PP-CONTIGUOUS-LAYERS" in errors(d)


def test_stage_range_disagrees_with_its_operators():
    d = set_attr(pp(), f"{R}.s1", layers=[3, 4])
    assert "PP-CONTIGUOUS-LAYERS" in errors(d)


def test_dead_end_tp_shard():
    removed = drop_edges(dense(), lambda e: (e["source"], e["target"]) == (f"{R}.L1.attn.t1", f"{R}.L1.attn.allreduce"))
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in errors(removed)
    reversed_ = add_edge(copy.deepcopy(removed), f"{R}.L1.attn.allreduce", f"{R}.L1.attn.t1")
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in errors(reversed_)


def test_norm_retyped_as_allreduce():
    d = set_attr(dense(), f"{R}.L1.norm_attn", type="AllReduceNode")
    assert "COMM-REDUCE-OF-SHARDS" in errors(d)
    assert "COMM-REDUCE-OF-SHARDS" not in errors(dense())


def test_every_node_on_gpu0_without_a_plan():
    d = dense()
    d.pop("plan")
    for n in d["nodes"]:
        n["devices"] = [0]
    assert "GPU-SHARDS-DISTINCT" in errors(d)


def test_decode_without_the_prefill_token():
    d = drop_edges(dense(), lambda e: e["type"] == "sync")
    assert "DECODE-FIRST-TOKEN-FROM-PREFILL" in errors(d)
    assert "DECODE-FIRST-TOKEN-FROM-PREFILL" not in errors(dense())


def megatron(d: dict) -> dict:
    """Each attention shard split the Megatron way: QKV linear shard -> attention -> out-proj shard -> AllReduce."""
    for a in [n for n in d["nodes"] if n["type"] == "AttentionNode"]:
        aid = a["id"]
        base = {k: v for k, v in a.items() if k not in ("id", "type", "heads", "kv_heads", "op", "meta")}
        qkv, out = aid.replace(".attn.", ".qkv."), aid.replace(".attn.", ".out_proj.")
        d["nodes"].append({**base, "id": qkv, "type": "LinearNode"})
        d["nodes"].append({**base, "id": out, "type": "LinearNode"})
        for e in d["edges"]:
            if e["target"] == aid and e["type"] == "data":
                e["target"] = qkv
            elif e["source"] == aid and node(d, e["target"])["type"] == "AllReduceNode":
                e["source"] = out
        add_edge(d, qkv, aid)
        add_edge(d, aid, out)
    return d


def test_megatron_split_attention_is_accepted():
    d = megatron(dense())
    assert errors(d) == set()


def test_megatron_shard_skipping_its_out_projection_is_still_caught():
    d = megatron(dense())
    d = drop_edges(d, lambda e: (e["source"], e["target"]) == (f"{R}.L0.out_proj.t1", f"{R}.L0.attn.allreduce"))
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in errors(d)


def test_head_shards_gathered_but_never_summed():
    from tests.fixtures.generate import P_SP

    d = copy.deepcopy(dag_of(P_SP))
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" not in errors(d)
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in errors(bypass(d, f"{R}.L0.attn.allreduce"))


def test_dead_end_shard_without_op_or_rank_is_still_a_shard():
    removed = drop_edges(dense(), lambda e: (e["source"], e["target"]) == (f"{R}.L1.attn.t1", f"{R}.L1.attn.allreduce"))
    for n in removed["nodes"]:
        n.pop("op", None)
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in errors(removed)


def test_decode_attention_must_append_to_a_kv_cache_node_of_its_own_step():
    """A decode that reads the prefill's cache but never appends its token's K/V (found by the blind drafts)."""
    d = dense()
    for nid in [n["id"] for n in d["nodes"] if n["type"] == "KVCacheUpdateNode" and ".decode." in n["id"]]:
        for e in [e for e in d["edges"] if e["target"] == nid and e["type"] == "kv"]:
            for out in [o for o in d["edges"] if o["source"] == nid]:
                add_edge(d, e["source"], out["target"], "kv")  # prefill's cache straight into decode attention
        d["nodes"] = [n for n in d["nodes"] if n["id"] != nid]
        d["edges"] = [e for e in d["edges"] if nid not in (e["source"], e["target"])]
    assert "MEM-KV-ESTIMATED" in errors(d)
    assert "MEM-KV-ESTIMATED" not in errors(dense())
