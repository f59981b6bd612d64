"""Structure of built DAGs, asserted with graph queries rather than output lines."""

from __future__ import annotations

import json

import jsonschema
import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import build_dag
from tools.core.build import build_full_dag, build_graph, devices_used
from tools.core.dag import COMM_TYPES, Dag, NodeType, dag_json_schema, json_to_graph
from tools.core.errors import PdagInputError
from tools.core.plan import parse_plan
from tools.core.render import fold, to_dot, to_mermaid


def graph_of(plan: dict) -> nx.DiGraph:
    return build_graph(parse_plan(plan))


def of_type(g: nx.DiGraph, t: NodeType, **where) -> list[str]:
    return [n for n, a in g.nodes(data=True) if a["type"] == t and all(a.get(k) == v for k, v in where.items())]


DENSE_TP8 = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8}}
MOE = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8}}


def test_dense_tp_shards_rejoin_through_allreduce_before_next_layer():
    g = graph_of(DENSE_TP8)
    assert nx.is_directed_acyclic_graph(g)
    shards = of_type(g, NodeType.ATTENTION, phase="prefill", layer=5)
    assert len(shards) == 8
    assert sorted(g.nodes[s]["devices"][0] for s in shards) == list(range(8))
    next_norm = "r0.prefill.L6.norm_attn"
    for s in shards:
        paths = list(nx.all_simple_paths(g, s, next_norm, cutoff=6))
        assert paths, s
        assert all(any(g.nodes[p]["type"] == NodeType.ALL_REDUCE for p in path[1:-1]) for path in paths)


def test_embeddings_norms_and_lm_head_are_not_sharded():
    g = graph_of(DENSE_TP8)
    for t in (NodeType.EMBEDDING, NodeType.NORM, NodeType.LM_HEAD):
        for n in of_type(g, t):
            assert "tp_rank" not in g.nodes[n]
            assert g.nodes[n]["devices"] == list(range(8))


def test_gpu_count_comes_from_devices_not_a_product():
    g = graph_of(MOE)
    assert devices_used(g) == list(range(8))
    assert build_dag(plan=MOE).gpus_used == 8


def test_moe_router_dispatch_experts_combine_in_order():
    g = graph_of(MOE)
    router = "r0.decode.L3.router"
    dispatch, combine = "r0.decode.L3.dispatch", "r0.decode.L3.combine"
    experts = of_type(g, NodeType.EXPERT, phase="decode", layer=3)
    assert len(experts) == 8
    assert sorted(e for x in experts for e in g.nodes[x]["experts"]) == list(range(8))
    assert g.nodes[dispatch]["type"] == g.nodes[combine]["type"] == NodeType.ALL_TO_ALL
    assert nx.has_path(g, router, dispatch)
    for e in experts:
        assert list(g.predecessors(e)) == [dispatch]
        assert list(g.successors(e)) == [combine]


def test_more_experts_than_gpus_groups_experts_per_expert_node():
    plan = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 16},
            "parallel": {"tp": 8, "ep": 8, "pp": 2}}
    g = graph_of(plan)
    experts = of_type(g, NodeType.EXPERT, phase="prefill", layer=10)
    assert len(experts) == 8
    assert all(len(g.nodes[e]["experts"]) == 32 for e in experts)
    # dense first layers have no router
    assert not of_type(g, NodeType.ROUTER, layer=0)
    # shared expert is TP-sharded FFN work beside the routed experts
    assert len(of_type(g, NodeType.FFN, phase="prefill", layer=10, role="shared_expert")) == 8


def test_pipeline_stages_are_one_chain_of_contiguous_layers():
    plan = {"model": "llama-3.1-405b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 8, "pp": 2}}
    g = graph_of(plan)
    stages = sorted(of_type(g, NodeType.STAGE, phase="prefill"), key=lambda n: g.nodes[n]["stage"])
    assert len(stages) == 2
    assert nx.has_path(g, stages[0], stages[1]) and not nx.has_path(g, stages[1], stages[0])
    ranges = [g.nodes[s]["layers"] for s in stages]
    assert ranges[0][0] == 0 and ranges[0][1] == ranges[1][0] and ranges[1][1] == 126
    # every attention node of stage 1 sits on stage 1's GPUs, after the stage transfer
    send = of_type(g, NodeType.SEND_RECV, phase="prefill")
    assert len(send) == 1
    for a in of_type(g, NodeType.ATTENTION, phase="prefill", stage=1):
        assert g.nodes[a]["devices"][0] >= 8
        assert send[0] in nx.ancestors(g, a)
    assert len(devices_used(g)) == 16


def test_sp_shards_attention_only_and_syncs_explicitly():
    plan = dict(DENSE_TP8, phases={"prefill": {"sp": 2}})
    g = graph_of(plan)
    shards = of_type(g, NodeType.ATTENTION, phase="prefill", layer=0)
    assert len(shards) == 8 and {g.nodes[s]["sp_rank"] for s in shards} == {0, 1}
    gather = of_type(g, NodeType.ALL_GATHER, phase="prefill", layer=0)
    assert len(gather) == 1 and all(gather[0] in g.successors(s) for s in shards)
    assert not [n for n in of_type(g, NodeType.ALL_GATHER, phase="decode") if g.nodes[n].get("role") != "logits"]
    assert all("sp_rank" not in g.nodes[f] for f in of_type(g, NodeType.FFN))
    # KV laid out differently in the two phases: an explicit reshard between them
    assert of_type(g, NodeType.KV_TRANSFER, layer=0)
    assert len(devices_used(g)) == 8


def test_dp_replicas_fan_out_at_root_and_share_nothing():
    plan = dict(DENSE_TP8, hardware={"gpu": "h100-sxm", "num_gpus": 16}, parallel={"tp": 8, "dp": 2})
    g = graph_of(plan)
    assert list(g.predecessors("r0")) == ["request"] and list(g.predecessors("r1")) == ["request"]
    d0, d1 = nx.descendants(g, "r0"), nx.descendants(g, "r1")
    assert not d0 & d1
    dev0 = {d for n in d0 for d in g.nodes[n]["devices"]}
    dev1 = {d for n in d1 for d in g.nodes[n]["devices"]}
    assert dev0 == set(range(8)) and dev1 == set(range(8, 16))


def test_prefill_and_decode_are_separate_branches_linked_by_kv():
    g = graph_of(DENSE_TP8)
    pre, dec = nx.descendants(g, "r0.prefill"), "r0.decode"
    assert dec not in pre
    kv_edges = [(u, v) for u, v, t in g.edges(data="type") if t == "kv"]
    crossing = [(u, v) for u, v in kv_edges if g.nodes[u].get("phase") == "prefill" and g.nodes[v]["phase"] == "decode"]
    assert len(crossing) == 80 * 8
    step = "r0.decode.step"
    assert g.nodes[step]["type"] == NodeType.DECODE_STEP
    # the first token comes from prefill's LM head, its vocabulary slices gathered over the TP ranks
    assert "r0.prefill.logits.allgather" in g.predecessors(step)
    assert list(g.predecessors("r0.prefill.logits.allgather")) == ["r0.prefill.lm_head"]


def test_every_node_has_devices_and_comm_nodes_span_their_groups():
    g = graph_of(MOE)
    for n, a in g.nodes(data=True):
        assert a["devices"], n
        if a["type"] in COMM_TYPES:
            assert len(a["devices"]) >= 2, n


def test_json_round_trip_validates_against_published_schema():
    result = build_dag(plan=MOE)
    doc = json.loads(result.model_dump_json())["dag"]
    jsonschema.Draft202012Validator(dag_json_schema()).validate(doc)
    assert doc["version"] == 2 and doc["folds"]["layers"]
    g = json_to_graph(Dag.model_validate(doc))
    assert g.number_of_nodes() < result.summary.total_nodes  # the working form: one drawn layer per run
    full = build_full_dag(MOE)
    jsonschema.Draft202012Validator(dag_json_schema()).validate(full)
    g = json_to_graph(Dag.model_validate(full))
    assert g.number_of_nodes() == result.summary.total_nodes
    assert g.number_of_edges() == result.summary.total_edges


def test_same_plan_same_bytes():
    a = build_dag(plan=MOE).model_dump_json()
    b = build_dag(plan=json.loads(json.dumps(MOE))).model_dump_json()
    assert a == b


def test_folded_views_repeat_identical_layers():
    folded = fold(graph_of({"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8},
                            "parallel": {"tp": 8, "ep": 8}}))
    blocks = folded.phases[0].stages[0].blocks
    assert [(b.layers, b.repeat) for b in blocks] == [([0, 2], 3), ([3, 60], 58)]
    assert "router" in blocks[1].pattern and "router" not in blocks[0].pattern
    assert to_mermaid(folded).startswith("flowchart TD") and "x58" in to_mermaid(folded)
    assert to_dot(folded).startswith("digraph") and "KV cache" in to_dot(folded)


@pytest.mark.parametrize(
    ("plan", "field", "needle"),
    [
        ({"model": "llama-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}}, "plan.model", "llama-3.1-70b"),
        ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100", "num_gpus": 8}}, "plan.hardware.gpu", "h100-sxm"),
        ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 10**9}}, "plan.hardware.num_gpus",
         "65536"),
        ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 0}},
         "plan.parallel.tp", "greater than or equal to 1"),
        ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tq": 2}},
         "plan.parallel.tq", "closest: tp"),
        ({"model": {"hf_config": {"model_type": "llama", "num_hidden_layers": 10**8}},
          "hardware": {"gpu": "h100-sxm", "num_gpus": 8}}, "plan.model.hf_config", ""),
        ({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "dtype": "fp4"},
         "plan.dtype", "bf16"),
    ],
)
def test_bad_input_names_the_field_and_what_is_allowed(plan, field, needle):
    with pytest.raises(PdagInputError) as info:
        build_dag(plan=plan)
    assert info.value.field.startswith(field)
    assert needle in str(info.value)


def test_huge_replica_is_refused_before_building_but_many_replicas_fold():
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 65536},
            "parallel": {"tp": 65536}}
    with pytest.raises(PdagInputError) as info:
        build_dag(plan=plan)
    assert "nodes" in info.value.problem
    many = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 65536},
            "parallel": {"dp": 512, "tp": 8, "ep": 16}}
    result = build_dag(plan=many)
    assert result.gpus_used == 512 * 16 and result.summary.replicas == 512
    assert len(result.dag["nodes"]) < 1000 < result.summary.total_nodes


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(["llama-3.1-8b", "mixtral-8x7b", "qwen3-30b-a3b", "mistral-7b"]),
    dp=st.integers(1, 2), pp=st.integers(1, 4), tp=st.sampled_from([1, 2, 4, 8]),
    ep=st.sampled_from([1, 2, 4, 8]), sp=st.sampled_from([1, 2]),
)
def test_any_plan_builds_an_acyclic_dag_whose_gpu_count_is_derived(model, dp, pp, tp, ep, sp):
    plan = {"model": model, "hardware": {"gpu": "h100-sxm", "num_gpus": 64},
            "parallel": {"dp": dp, "pp": pp, "tp": tp, "ep": ep}, "phases": {"prefill": {"sp": sp}},
            "workload": {"input_len": 64, "output_len": 8}}
    g = graph_of(plan)
    assert nx.is_directed_acyclic_graph(g)
    spec = parse_plan(plan).spec
    width = max(tp, sp, ep if spec.is_moe else 1)
    assert len(devices_used(g)) == dp * pp * width
