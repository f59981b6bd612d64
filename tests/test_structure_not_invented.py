"""Issue 41: spelling is forgiven, structure is not invented.  Each structural omission below was accepted (or
silently completed) and is now a violation naming the rule, with an in-place repair where one exists."""

from __future__ import annotations

import copy
from typing import Any

from tools import autofix_dag, validate_dag
from tools.core.build import build_full_dag

TINY = {"hf_config": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                      "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
                      "max_position_embeddings": 131072}}
MOE = {"hf_config": {**TINY["hf_config"], "model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 6,
                     "num_experts_per_tok": 2}}
H100 = {"gpu": "h100-sxm", "gpus_per_node": 8}


def _build(model: dict[str, Any], gpus: int, **parallel: int) -> dict[str, Any]:
    return build_full_dag({"model": model, "hardware": {**H100, "num_gpus": gpus}, "parallel": parallel})


def _roots(doc: dict[str, Any]) -> set[str]:
    r = validate_dag(dag=copy.deepcopy(doc))
    return {v.rule_id for v in r.violations if v.severity == "error" and v.caused_by is None}


def _drop(doc: dict[str, Any], ids: set[str], rewire: bool = True) -> dict[str, Any]:
    """Remove nodes; with ``rewire`` each predecessor is wired to each successor, as a drafter who left them out."""
    edges = [e for e in doc["edges"] if e["source"] not in ids and e["target"] not in ids]
    if rewire:
        for n in ids:
            edges += [{"source": p["source"], "target": s["target"], "type": s["type"]}
                      for p in doc["edges"] if p["target"] == n for s in doc["edges"] if s["source"] == n]
    return {**doc, "nodes": [n for n in doc["nodes"] if n["id"] not in ids], "edges": edges}


def test_a_bare_stage_hand_off_is_implicit_communication_repaired_in_place() -> None:
    """GPUs 0-1 hand over to GPUs 2-3 along a bare edge: accepted with no warning before (the draft reader drew
    the SendRecv itself)."""
    built = _build(TINY, 4, pp=2, tp=2)
    bare = _drop(built, {n["id"] for n in built["nodes"] if n["type"] == "SendRecvNode"})
    assert _roots(built) == set() and _roots(bare) == {"COMM-NO-IMPLICIT"}
    fixed = autofix_dag(dag=bare)
    assert fixed.valid and fixed.repair == "in_place" and {c.rule_id for c in fixed.changes} == {"COMM-NO-IMPLICIT"}


def test_attention_shards_feeding_ffn_shards_unreduced_are_refused_and_repaired() -> None:
    built = _build(TINY, 2, tp=2)
    gone = {n["id"] for n in built["nodes"] if (n["type"] == "AllReduceNode" and ".attn." in n["id"])
            or (n["type"] == "NormNode" and n.get("role") == "pre_ffn")}
    doc = _drop(built, gone, rewire=False)
    doc["edges"] += [{"source": n["id"], "target": n["id"].replace(".attn.", ".ffn."), "type": "data"}
                     for n in built["nodes"] if n["type"] == "AttentionNode"]
    assert _roots(doc) == {"TP-REJOIN-BEFORE-NEXT-LAYER"}
    fixed = autofix_dag(dag=doc)
    assert fixed.valid and fixed.repair == "in_place"
    assert {c.rule_id for c in fixed.changes} == {"TP-REJOIN-BEFORE-NEXT-LAYER"}


def test_tp_shards_across_layers_with_one_reduce_at_the_end_name_tp_no_cross_layer() -> None:
    """Seed 000 section 5: 'Apply TP across multiple layers' must be rejected, by the rule that says so."""
    built = _build(TINY, 2, tp=2)
    last = {n["id"] for n in built["nodes"] if ".L3.ffn.allreduce" in n["id"]}
    gone = {n["id"] for n in built["nodes"] if n["type"] == "AllReduceNode" and n.get("role") == "tp_sync"} - last
    gone |= {n["id"] for n in built["nodes"] if n["type"] == "NormNode" and n.get("role") == "pre_ffn"}
    doc = _drop(built, gone, rewire=False)
    for n in built["nodes"]:
        i = n["id"]
        if n["type"] == "AttentionNode":
            doc["edges"].append({"source": i, "target": i.replace(".attn.", ".ffn."), "type": "data"})
        if n["type"] == "FFNNode" and ".L3." not in i:
            layer = int(i.split(".L")[1].split(".")[0])
            doc["edges"].append({"source": i, "target": i.replace(f".L{layer}.ffn.", f".L{layer + 1}.attn."),
                                 "type": "data"})
    assert "TP-NO-CROSS-LAYER" in _roots(doc)


def test_three_expert_nodes_on_two_gpus_are_refused_not_merged() -> None:
    """Seed 000 section 3.4: Expert nodes = GPUs.  They used to be merged silently into one per GPU."""
    doc = _build(MOE, 2, ep=2, tp=2)
    for n in [n for n in doc["nodes"] if n["type"] == "ExpertNode" and n.get("ep_rank") == 0]:
        twin = {**copy.deepcopy(n), "id": n["id"] + "b", "experts": n["experts"][1:]}
        n["experts"] = n["experts"][:1]
        doc["nodes"].append(twin)
        doc["edges"] += [{**e, "source": twin["id"]} for e in doc["edges"] if e["source"] == n["id"]] + \
                        [{**e, "target": twin["id"]} for e in doc["edges"] if e["target"] == n["id"]]
    assert "EP-EXPERT-NODES-EQ-GPUS" in _roots(doc)
