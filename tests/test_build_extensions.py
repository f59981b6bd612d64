"""DAG structure of the opt-in strategies beyond the seeds: attention-DP and disaggregated prefill/decode."""

from __future__ import annotations

import networkx as nx

from tools.core.build import build_graph, devices_used
from tools.core.dag import NodeType
from tools.core.plan import parse_plan

ADP = {
    "model": "deepseek-v3",
    "hardware": {"gpu": "h200", "num_gpus": 16},
    "parallel": {"tp": 1, "attn_dp": 8, "ep": 8, "pp": 2},
    "options": {"allow_attention_dp": True},
}
DISAGG = {
    "model": "llama-3.1-70b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
    "parallel": {"tp": 8},
    "phases": {"prefill": {"dp": 1}, "decode": {"dp": 2, "tp": 4}},
    "options": {"disaggregated": True},
}


def nodes(g: nx.DiGraph, t: NodeType, **where) -> list[str]:
    return [n for n, a in g.nodes(data=True) if a["type"] == t and all(a.get(k) == v for k, v in where.items())]


def test_attention_dp_groups_run_attention_without_allreduce_and_share_experts():
    g = build_graph(parse_plan(ADP))
    assert len(devices_used(g)) == 16
    groups = nodes(g, NodeType.ATTN_DP_GROUP, phase="decode", layer=10)
    assert len(groups) == 8
    attn = nodes(g, NodeType.ATTENTION, phase="decode", layer=10)
    assert sorted(g.nodes[a]["attn_group"] for a in attn) == list(range(8))
    assert not nodes(g, NodeType.ALL_REDUCE, phase="decode", layer=10)  # attention TP 1 inside each group
    # each group's KV is its own (different requests): one KV node per group GPU, none replicated
    kv = nodes(g, NodeType.KV_CACHE, phase="decode", layer=10)
    assert sorted(g.nodes[k]["devices"][0] for k in kv) == list(range(8))  # layer 10 is in stage 0
    dispatch = "r0.decode.L10.dispatch"
    routers = nodes(g, NodeType.ROUTER, phase="decode", layer=10)
    assert len(routers) == 8 and all(dispatch in g.successors(r) for r in routers)
    experts = nodes(g, NodeType.EXPERT, phase="decode", layer=10)
    assert len(experts) == 8 and all(list(g.predecessors(e)) == [dispatch] for e in experts)
    assert nx.is_directed_acyclic_graph(g)


def test_disaggregated_pools_are_disjoint_and_linked_by_kv_transfer():
    g = build_graph(parse_plan(DISAGG))
    pre = {d for n in nodes(g, NodeType.ATTENTION, phase="prefill") for d in g.nodes[n]["devices"]}
    dec = {d for n in nodes(g, NodeType.ATTENTION, phase="decode") for d in g.nodes[n]["devices"]}
    assert pre == set(range(8)) and dec == set(range(8, 16))
    transfers = nodes(g, NodeType.KV_TRANSFER)
    assert len(transfers) == 2 * 80  # one per layer per decode replica
    t = "d1.kv_transfer.L5"
    assert set(g.nodes[t]["devices"]) == set(range(8)) | {12, 13, 14, 15}
    srcs = list(g.predecessors(t))
    assert len(srcs) == 8 and all(g.nodes[s]["phase"] == "prefill" for s in srcs)
    assert all(g.nodes[v]["type"] == NodeType.KV_CACHE for v in g.successors(t))
    assert g.nodes[t]["meta"]["from"]["head_shards"] == 8 and g.nodes[t]["meta"]["to"]["head_shards"] == 4
    assert "p0.prefill.logits.allgather" in g.predecessors("d1.decode.step")
    assert nx.is_directed_acyclic_graph(g)
    assert len(devices_used(g)) == 16


def test_disaggregated_pools_may_pipeline_differently():
    """A deeper prefill pipeline than decode is legal: the KV hand-off belongs to no stage of either pool."""
    from tools import validate_dag

    plan = {**DISAGG, "phases": {"prefill": {"dp": 1, "pp": 2, "tp": 4}, "decode": {"dp": 1, "tp": 8}}}
    g = build_graph(parse_plan(plan))
    transfers = nodes(g, NodeType.KV_TRANSFER)
    assert transfers and all("stage" not in g.nodes[t] for t in transfers)
    sources = {g.nodes[p]["stage"] for t in transfers for p in g.predecessors(t)}
    assert sources == {0, 1}
    result = validate_dag(plan=plan)
    assert result.valid, [v.rule_id for v in result.violations if v.severity == "error"]
