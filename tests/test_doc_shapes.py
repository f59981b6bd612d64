"""Documents that keep their graph outside ``nodes`` / ``edges`` (``tools.drafts.doc_shape``,
``tools.drafts.dot``): each reading on a small document written here, and random DOT / graph-shaped inputs that must
read or be refused with a
``PdagInputError``, never crash."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import validate_dag
from tools.core.errors import PdagInputError
from tools.drafts.dialect import translate
from tools.drafts.dot import looks_like_dot, parse_dot


def _edges(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(e["source"], e["target"], e.get("type", "data")) for e in doc["edges"]}


def _ids(doc: dict[str, Any]) -> set[str]:
    return {n["id"] for n in doc["nodes"]}


# -- DOT parser


def test_dot_chains_attributes_and_quoted_ids() -> None:
    g = parse_dot('digraph g { "a b" -> c -> d [type=sync]; c [type=Attention, gpus="0-3"]; // note\n}')
    assert list(g.nodes) == ["a b", "c", "d"]
    assert g.edges == [("a b", "c", {"type": "sync"}), ("c", "d", {"type": "sync"})]
    assert g.nodes["c"] == {"type": "Attention", "gpus": "0-3"}


def test_dot_defaults_subgraphs_ports_and_comments() -> None:
    g = parse_dot("""/* head */ strict digraph {
        node [shape=box, role=x];
        subgraph cluster_decode { label="DECODE"; stage=1; a; b [role=y] }
        {a b} -> c:n:s;
# a comment line

        e [label=<<b>html</b>>]
    }""")
    assert g.nodes["a"]["role"] == "x" and g.nodes["b"]["role"] == "y"
    assert ("a", "c", {}) in g.edges and ("b", "c", {}) in g.edges
    names = [n for n, _ in g.groups["a"]]
    assert "cluster_decode" in names and dict(g.groups["a"][0][1]) == {"label": "DECODE", "stage": "1"}
    assert g.nodes["e"]["label"] == "<b>html</b>"


@pytest.mark.parametrize("text", ["digraph { a -> }", "digraph { a [x=] }", "digraph { a -> b", "digraph {} x",
                                  "graph { <a", "digraph { a @ b }", "{ a -> b }"])
def test_dot_refuses_malformed_text_with_an_input_error(text: str) -> None:
    with pytest.raises(PdagInputError) as e:
        parse_dot(text, "dag.dot")
    assert e.value.field == "dag.dot" and "DOT text" in e.value.problem


def test_dot_nesting_is_bounded() -> None:
    with pytest.raises(PdagInputError, match="nested deeper"):
        parse_dot("digraph {" + "{" * 200 + "}" * 200 + "}")


def test_looks_like_dot() -> None:
    assert looks_like_dot("// c\n digraph name {") and looks_like_dot("strict graph {")
    assert not looks_like_dot("a digraph of the model") and not looks_like_dot(3)


# -- readings of a document's shape

_DOT_DOC = {"format": "my-dot", "dot": """digraph {
    request [type=RequestNode, gpus="host"];
    subgraph cluster_prefill { label="PREFILL";
        emb [type=EmbeddingNode, gpus="0-1", color=red]; attn [type=Attention, gpus="0-1", layer=0]; }
    request -> emb -> attn [type=data, label=activations];
}"""}


def test_a_dot_string_is_read_as_the_graph() -> None:
    out, notes, _ = translate(_DOT_DOC)
    assert _ids(out) == {"request", "emb", "attn"}
    assert ("emb", "attn", "data") in _edges(out)
    by = {n["id"]: n for n in out["nodes"]}
    assert by["attn"]["phase"] == "prefill" and by["attn"]["layer"] == 0 and by["attn"]["devices"] == [0, 1]
    assert "phase" not in by["request"] and by["request"]["devices"] == []
    assert "color" not in str(by["emb"]) and "format" not in out
    assert any("Graphviz DOT text in 'dot'" in n and "cluster" in n for n in notes)


def test_two_dot_strings_are_refused() -> None:
    with pytest.raises(PdagInputError, match="two Graphviz DOT texts"):
        translate({"a": "digraph { x -> y }", "b": "digraph { y -> z }"})


def test_node_objects_anywhere_with_successor_fields() -> None:
    doc = {"request": {"id": "req", "is": "Request", "next": ["r0/emb"], "fan_out": [
        {"replica": 0, "prefill": [{"id": "r0/emb", "is": "Embed", "devices": "0-1", "next": ["r0/attn [sync]"]},
                                   {"id": "r0/attn", "is": "Attention", "devices": "0-1"}]}]}}
    out, notes, _ = translate(doc)
    assert _ids(out) == {"req", "r0/emb", "r0/attn"}
    assert _edges(out) == {("req", "r0/emb", "data"), ("r0/emb", "r0/attn", "sync")}
    by = {n["id"]: n for n in out["nodes"]}
    assert by["r0/attn"]["phase"] == "prefill" and by["r0/attn"]["replica"] == 0
    assert "replica" not in by["req"] and "fan_out" not in str(by["req"])
    assert any("node objects found in request" in n for n in notes)


def test_id_keyed_maps_under_phase_sections_share_ids() -> None:
    doc = {"entry": {"REQ": {"op": "Request", "feeds": "prefill:embed"}},
           "phases": {"prefill": {"embed": {"op": "Embed", "on": "0-1", "inputs": ["REQ"]},
                                  "kv": {"op": "KVWrite", "on": "0-1", "inputs": [{"from": "embed", "as": "sync"}]}},
                      "decode": {"embed": {"op": "Embed", "on": "0-1",
                                           "inputs": [{"from": "prefill:kv", "as": "kv"}]}}}}
    out, notes, _ = translate(doc)
    assert _ids(out) == {"REQ", "prefill:embed", "kv", "decode:embed"}  # only the shared id is qualified
    assert _edges(out) == {("REQ", "prefill:embed", "data"), ("prefill:embed", "kv", "sync"),
                           ("kv", "decode:embed", "kv")}
    assert any("qualified by their section" in n for n in notes)


def test_one_id_for_two_nodes_in_one_section_is_refused() -> None:
    doc = {"note": "x", "g": [{"id": "a", "type": "Attention"}, {"id": "a", "type": "FFN"}]}
    with pytest.raises(PdagInputError, match="names 2 different nodes"):
        translate(doc)


def test_torch_fx_list_with_args_kwargs_and_meta() -> None:
    doc = {"graph": [
        {"name": "%req", "op": "placeholder", "node_type": "RequestNode", "args": [], "device": []},
        {"name": "%kv", "op": "call_module", "node_type": "KVCacheUpdateNode", "args": ["%req"],
         "device": ["cuda:0"], "meta": {"phase": "prefill", "layer_idx": 0, "desc": "write"}},
        {"name": "%attn", "op": "call_module", "node_type": "AttentionNode", "args": ["%req"],
         "kwargs": {"past_key_values": ["%kv"]}, "device": ["cuda:0"], "meta": {"phase": "decode"}}]}
    out, _, _ = translate(doc)
    assert _edges(out) == {("%req", "%kv", "data"), ("%req", "%attn", "data"), ("%kv", "%attn", "kv")}
    by = {n["id"]: n for n in out["nodes"]}
    assert by["%kv"]["type"] == "KVCacheUpdateNode" and by["%kv"]["layer"] == 0 and by["%kv"]["phase"] == "prefill"
    assert by["%attn"]["phase"] == "decode" and by["%kv"]["meta"]["desc"] == "write"


def test_stage_containers_and_a_flow_of_typed_arrows() -> None:
    doc = {"glue": [{"id": "req", "op": "request"}],
           "phases": {"prefill": {"stages": [{"stage": 1, "ops": [{"id": "a", "op": "attention", "on": "hA:cuda:0"},
                                                                   {"id": "b", "op": "ffn", "on": "hB:cuda:0"}]}]}},
           "flow": ["req --data--> a", "a --sync--> b"]}
    out, notes, _ = translate(doc)
    assert _edges(out) == {("req", "a", "data"), ("a", "b", "sync")}
    by = {n["id"]: n for n in out["nodes"]}
    assert by["a"]["stage"] == 1 and by["a"]["phase"] == "prefill"
    assert by["a"]["devices"] == [0] and by["b"]["devices"] == [8]  # machines named in ids, in order
    assert any("'flow' as the edge list" in n for n in notes)
    assert any("machines named in the GPU ids" in n for n in notes)


def test_an_edge_list_naming_other_things_is_not_read_as_edges() -> None:
    doc = {"g": [{"id": "a", "type": "Attention"}, {"id": "b", "type": "FFN"}],
           "pairs": [["x", "y"], ["y", "z"]]}
    out, _, _ = translate(doc)
    assert out.get("edges", []) == []


def test_documented_nodes_win_and_nothing_else_is_searched() -> None:
    doc = {"nodes": [{"id": "a", "type": "AttentionNode", "devices": [0]}], "edges": [],
           "elsewhere": [{"id": "b", "type": "FFN"}, {"id": "c", "type": "FFN"}]}
    out, _, _ = translate(doc)
    assert _ids(out) == {"a"}


def test_a_document_without_node_objects_is_still_not_a_dag() -> None:
    with pytest.raises(PdagInputError, match="dag.nodes"):
        validate_dag(dag={"model": {"id": "llama", "shape": {"layers": 2}}, "request": {"prompt": 3}})


def test_table_rows_under_node_rows() -> None:
    doc = {"node_columns": ["id", "type", "ranks"], "node_rows": [["a", "AttentionNode", "r0-r1"], ["b", "FFN", "-"]],
           "edge_columns": ["from", "to"], "edge_rows": [["a", "b"]]}
    out, _, _ = translate(doc)
    assert {n["id"]: n.get("devices") for n in out["nodes"]}["a"] == [0, 1]
    assert _edges(out) == {("a", "b", "data")}


# -- random inputs never crash

_NAME = st.text(alphabet="abcxyz019_ /:-\"\\", min_size=0, max_size=6)
_TOKEN = st.sampled_from(["digraph", "graph", "subgraph", "node", "edge", "strict", "{", "}", "[", "]", "=", ";",
                          ",", "->", "--", ":", "<", ">", '"', "/*", "*/", "//", "#", "\n", "a", "b", "type",
                          "Attention", "0-3"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_TOKEN, _NAME), max_size=40))
def test_random_dot_text_reads_or_is_refused(tokens: list[str]) -> None:
    text = "digraph { " + " ".join(tokens) + " }"
    with contextlib.suppress(PdagInputError):
        parse_dot(text)
    with contextlib.suppress(PdagInputError):
        validate_dag(dag={"dot": text})


_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), _NAME,
                    st.sampled_from(["Attention", "FFN", "AllReduce", "Request", "prefill", "decode", "a [sync]",
                                     "a -> b", "x --kv--> y", "0-3", "cuda:1", "hA:cuda:0"]))
_KEYS = st.sampled_from(["id", "name", "type", "op", "is", "next", "inputs", "args", "on", "devices", "prefill",
                         "decode", "stage", "replica", "meta", "flow", "graph", "from", "to", "as", "dot", "x"])
_DOC = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(_KEYS, inner, max_size=5)), max_leaves=30)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_KEYS, _DOC, max_size=5))
def test_random_graph_shaped_documents_read_or_are_refused(doc: dict[str, Any]) -> None:
    with contextlib.suppress(PdagInputError):
        validate_dag(dag=doc)


# -- round-5 habits: placeholder spellings, operator names, parallelism blocks, kv-source fields


def _chain(phase: str, extra: list[dict[str, Any]], tail: list[str]) -> tuple[list[Any], list[Any]]:
    """One layer 0 (attention -> FFN) in ``phase``, then ``tail`` ids chained after its FFN."""
    nodes = [{"id": f"{phase}.L0.attn", "type": "AttentionNode", "phase": phase, "layer": 0, "devices": [0]},
             {"id": f"{phase}.L0.ffn", "type": "FFNNode", "phase": phase, "layer": 0, "devices": [0]}, *extra]
    ids = [f"{phase}.L0.attn", f"{phase}.L0.ffn", *tail]
    return nodes, [{"source": a, "target": b} for a, b in zip(ids, ids[1:], strict=False)]


@pytest.mark.parametrize("spelling", ["ElidedLayers", "OmittedBlocks", "skipped_layers", "LayerRepeat"])
def test_placeholder_types_under_any_placeholder_word(spelling: str) -> None:
    from tools.drafts.implicit import make_explicit

    hold = {"id": "p.mid", "type": spelling, "phase": "prefill", "layers": [1, 6], "devices": [0]}
    last = {"id": "p.L7.attn", "type": "AttentionNode", "phase": "prefill", "layer": 7, "devices": [0]}
    nodes, edges = _chain("prefill", [hold, last], ["p.mid", "p.L7.attn"])
    out, notes = make_explicit({"nodes": nodes, "edges": edges})
    by = {n["id"]: n for n in out["nodes"]}
    assert "p.mid" not in by and by["prefill.L0.ffn"]["repeat"] == 7
    assert ("prefill.L0.ffn", "p.L7.attn", "data") in _edges(out)
    assert any("placeholder for layers 1-6 as repeats of layer 0" in n for n in notes)


def test_a_type_without_a_placeholder_word_is_not_a_placeholder() -> None:
    from tools.drafts.implicit import make_explicit

    odd = {"id": "p.mid", "type": "MysteryLayers", "phase": "prefill", "layers": [1, 6], "devices": [0]}
    nodes, edges = _chain("prefill", [odd], ["p.mid"])
    out, _ = make_explicit({"nodes": nodes, "edges": edges})
    assert "p.mid" in _ids(out) and all("repeat" not in n for n in out["nodes"])


def test_a_placeholder_for_later_decode_steps_at_the_chain_end() -> None:
    from tools.drafts.implicit import make_explicit

    later = {"id": "steps", "type": "ElidedDecodeSteps", "phase": "decode", "devices": [0]}
    nodes, edges = _chain("decode", [later], ["steps"])
    out, notes = make_explicit({"nodes": nodes, "edges": [*edges, {"source": "decode.L0.attn", "target": "steps",
                                                                     "type": "kv"}]})
    assert "steps" not in _ids(out)
    assert any("decode steps after the drawn one" in n for n in notes)
    # in prefill, or with a data successor, it is no later decode step: it stays to be reported
    for phase, tail in (("prefill", ["steps"]), ("decode", ["steps", "decode.L0.more"])):
        moved = {**later, "phase": phase}
        more = {"id": "decode.L0.more", "type": "NormNode", "phase": "decode", "devices": [0]}
        nodes, edges = _chain(phase, [moved, more], tail)
        assert "steps" in _ids(make_explicit({"nodes": nodes, "edges": edges})[0])


def test_a_placeholder_drawn_beside_the_chain() -> None:
    """No edges of its own: the chain runs from the layer before it to the one after; the layer before, in its
    phase and stage, stands for the elided ones."""
    from tools.drafts.implicit import make_explicit

    hold = {"id": "mid", "type": "ElidedLayers", "phase": "prefill", "layer": 1, "repeat": 3, "devices": [0]}
    nodes, edges = _chain("prefill", [hold], [])
    out, notes = make_explicit({"nodes": nodes, "edges": edges})
    assert "mid" not in _ids(out) and all(n.get("repeat") == 4 for n in out["nodes"])
    assert any("placeholder for layers 1-3 as repeats of layer 0" in n for n in notes)


def test_operator_field_as_name_beside_a_type_field() -> None:
    doc = {"root": {"op": "request", "kind": "RequestNode"},
           "phases": [{"name": "prefill", "layers": [
               {"layer": 0, "ops": [
                   {"op": "prefill.0.attn", "kind": "AttentionNode", "gpus": [0], "after": ["request"]},
                   {"op": "prefill.0.kv_write", "kind": "KVCacheUpdateNode", "gpus": [0],
                    "after": ["prefill.0.attn"]}]},
               {"layer": "1-4", "elided": True, "op": "prefill.rest", "repeat": 4, "after": ["prefill.0.attn"]}]}]}
    out, notes, _ = translate(doc)
    by = {n["id"]: n for n in out["nodes"]}
    assert set(by) == {"request", "prefill.0.attn", "prefill.0.kv_write", "prefill.rest"}
    assert by["prefill.0.attn"]["type"] == "AttentionNode" and "op" not in by["prefill.0.attn"]
    assert by["prefill.0.kv_write"]["layer"] == 0  # from the layer block that holds it
    assert by["prefill.rest"]["type"] == "elided"
    assert ("prefill.0.attn", "prefill.0.kv_write", "data") in _edges(out)
    assert any("node field 'op' as the node's id" in n for n in notes)
    assert any("flagged 'elided' as a placeholder node" in n for n in notes)
    # an operator field that names another kind is no name
    with pytest.raises(PdagInputError):
        validate_dag(dag={"x": [{"op": "AllReduce", "kind": "FFNNode"}, {"op": "Attention", "kind": "NormNode"}]})


def test_parallelism_block_devices_and_kv_source_fields() -> None:
    doc = {"graph": [
        {"id": "p.attn", "type": "AttentionNode", "phase": "prefill", "tp": {"degree": 2, "gpus": [0, 1]}},
        {"id": "p.kv", "type": "KVCacheUpdateNode", "phase": "prefill", "gpus": [0, 1], "inputs": ["p.attn"]},
        {"id": "d.attn", "type": "AttentionNode", "phase": "decode", "gpus": [0, 1], "reads_kv": "p.kv"}]}
    out, notes, _ = translate(doc)
    by = {n["id"]: n for n in out["nodes"]}
    assert by["p.attn"]["devices"] == [0, 1]
    assert ("p.kv", "d.attn", "kv") in _edges(out)
    assert any("node field 'reads_kv' as edges" in n for n in notes)
    # a block that is no parallelism block gives no devices
    plain, _, _ = translate({"graph": [{**doc["graph"][0], "tp": None, "misc": {"gpus": [0, 1]}}, doc["graph"][1]]})
    assert "devices" not in {n["id"]: n for n in plain["nodes"]}["p.attn"]


def test_short_keys_explained_in_a_legend() -> None:
    from tools.drafts.dialect import read_legend

    doc = {"legend": {"n": "nodes: i=id, t=type, g=GPU ids, x=repeat count", "e": "edges 'src>dst'"},
           "dag": {"n": [{"i": "a", "t": "AttentionNode", "g": [0, 1]}, {"i": "b", "t": "FFNNode", "g": [0, 1]}],
                   "e": ["a>b"]}}
    out, notes = read_legend(doc)
    assert "legend" not in out
    assert out["dag"]["nodes"] == [{"id": "a", "type": "AttentionNode", "devices": [0, 1]},
                                   {"id": "b", "type": "FFNNode", "devices": [0, 1]}]
    assert out["dag"]["edges"] == [{"source": "a", "target": "b"}]
    assert any("short keys explained in the 'legend' block" in n for n in notes)
    # without a legend, or with an arrow the legend does not show, nothing is renamed or split
    assert read_legend(doc["dag"]) == (doc["dag"], [])
    other, _ = read_legend({**doc, "legend": {**doc["legend"], "e": "edges"}})
    assert other["dag"]["edges"] == ["a>b"]
    # a code whose description names no field stays as written
    kept, _ = read_legend({"legend": {"n": "nodes: q=quality"}, "dag": {"n": [{"q": 1}]}})
    assert kept["dag"]["nodes"] == [{"q": 1}]


def test_predecessor_maps_section_ids_in_edge_text_and_more_placeholder_spans() -> None:
    from tools.drafts.implicit import _elided_span
    from tools.drafts.vocabulary import node_type

    out, notes, _ = translate({"ops": [{"id": "a", "type": "AttentionNode", "devices": [0]},
                                    {"id": "b", "type": "FFNNode", "devices": [0]}], "deps": {"a": [], "b": ["a"]}})
    assert _edges(out) == {("a", "b", "data")}
    assert any("'deps' as each node's predecessors" in n for n in notes)
    # a successor map under an edge word stays a successor map
    succ, _, _ = translate({"ops": out["nodes"], "links": {"a": ["b"]}})
    assert _edges(succ) == {("a", "b", "data")}
    edges, _, _ = translate({"nodes": out["nodes"], "edges": ["x:L0 -> prefill:lm_head", "a -> b : sync"]})
    assert {(e["source"], e["target"], e.get("type", "data")) for e in edges["edges"]} == {
        ("x:L0", "prefill:lm_head", "data"), ("a", "b", "sync")}
    assert _elided_span({"id": "P_L1_78", "type": "ElidedLayers", "count": 78}) == (1, 78)
    assert _elided_span({"id": "dec1_l00_attn", "type": "ElidedLayers"}) is None
    assert node_type("AttentionNode.SeqShard") == "AttentionNode"


def _steps_tree(decode: bool = True) -> dict[str, Any]:
    layer = {"layer": 0, "steps": [{"node": "AttentionNode", "tp_shards": [{"gpu": 0}, {"gpu": 1}]},
                                   {"node": "KVCacheUpdateNode", "gpus": [0, 1], "branch_of": "AttentionNode"},
                                   {"node": "AllReduceNode", "gpus": [0, 1]}]}
    phases = [{"phase": "prefill", "sequence": [{"node": "EmbeddingNode", "gpus": [0, 1]}, layer,
                                                 {"elided_layers": "1-2"}, {"node": "SampleNode", "gpus": [0]}]}]
    if decode:
        phases.append({"phase": "decode", "sequence": [{"node": "EmbeddingNode", "gpus": [0, 1]}]})
    return {"root": {"id": "req", "type": "RequestNode", "children": [
        {"id": "r0", "type": "ReplicaNode", "gpus": [0, 1], "children": phases}]}}


def test_steps_listed_in_order_as_a_chain() -> None:
    out, notes, _ = translate(_steps_tree())
    by = {n["id"]: n for n in out["nodes"]}
    attn, kv, ar = "r0/prefill/layer0/AttentionNode", "r0/prefill/layer0/KVCacheUpdateNode", \
        "r0/prefill/layer0/AllReduceNode"
    assert {attn, kv, ar, "r0/prefill/EmbeddingNode", "r0/prefill/elided_layers", "r0/prefill/SampleNode",
            "r0/decode/EmbeddingNode"} <= set(by)
    assert by[attn]["devices"] == [0, 1] and by[attn]["layer"] == 0 and by[attn]["phase"] == "prefill"
    e = _edges(out)
    assert {("req", "r0", "data"), ("r0", "r0/prefill/EmbeddingNode", "data"),
            ("r0/prefill/EmbeddingNode", attn, "data"), (attn, kv, "data"), (attn, ar, "data"),
            (ar, "r0/prefill/elided_layers", "data"), ("r0/prefill/elided_layers", "r0/prefill/SampleNode", "data"),
            ("r0/prefill/SampleNode", "r0/decode/EmbeddingNode", "data")} <= e
    assert (kv, ar, "data") not in e  # the side branch is no link of the chain
    assert any("steps listed in order ('sequence') as a chain of nodes" in n for n in notes)
    assert any("a decode section after the prefill section beside it" in n for n in notes)
    # without a decode section nothing is linked across; a list of objects naming no node type is no chain
    alone, notes2, _ = translate(_steps_tree(decode=False))
    assert not any("decode section" in n for n in notes2) and "r0/decode/EmbeddingNode" not in _ids(alone)
    with pytest.raises(PdagInputError):
        validate_dag(dag={"plan": {"steps": [{"what": "buy"}, {"what": "sell"}]}})


def test_a_request_the_steps_wait_for_is_drawn_as_the_root() -> None:
    ops = [{"name": "embed", "op": "EmbeddingNode", "gpus": [0], "depends_on": ["request"]},
           {"name": "attn", "op": "AttentionNode", "gpus": [0], "depends_on": ["embed"]}]
    out, notes, _ = translate({"prefill_pool": {"ops": ops}, "decode_pool": {"ops": []}})
    assert {"id": "request", "type": "RequestNode", "devices": []} in out["nodes"]
    assert ("request", "embed", "data") in _edges(out)
    assert any("the RequestNode 'request' the steps wait for drawn as the root" in n for n in notes)
    # a name that spells no request, or a request already drawn, draws nothing
    other, _, _ = translate({"prefill_pool": {"ops": [{**ops[0], "depends_on": ["start"]}, ops[1]]}})
    assert all(n.get("type") != "RequestNode" for n in other["nodes"])
    drawn, _, _ = translate({"prefill_pool": {"ops": [{"name": "req", "op": "RequestNode"}, *ops]}})
    assert [n["id"] for n in drawn["nodes"] if n.get("type") == "RequestNode"] == ["req"]
