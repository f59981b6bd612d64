"""Hand-drafted DAGs in another vocabulary are judged by their meaning: every rule fixture, rewritten the way
other drafters spell a DAG (``from``/``to`` edges, ``name`` ids, ``"attention"`` or ``"All-Reduce"`` types, GPU
ids as ``"cuda:3"`` or ``"gpu0-gpu3"``, nodes keyed by id, ``a -> b`` edge strings), gets the verdict its
canonical spelling gets, and what cannot be read is named with the closest canonical spellings."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.generate import P_ADP, P_DIS, P_MOE, P_PP, P_SP, bypass, dag_of
from tools import autofix_dag, validate_dag
from tools.core.dag import NodeType
from tools.drafts.dialect import translate
from tools.drafts.vocabulary import key, node_type, tables, vocabulary

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "rules").glob("*.json"))
DAG_CASES = [(f.stem, side, json.loads(f.read_text())[side]["dag"]) for f in FIXTURES
             for side in ("reject", "accept") if "dag" in json.loads(f.read_text())[side]]


def _type_spellings(canon: str) -> list[str]:
    """Other spellings of a node type that read back as it and imply no role or phase of their own."""
    implied = set(tables()["roles"]) | set(tables()["phases"])
    names = [n for n in vocabulary()["node_types"].get(canon, []) if key(n) not in implied]
    base = canon.removesuffix("Node")
    names += [base.lower(), base + "_node", "-".join(base), f"{base}(drafted)"]
    return [n for n in names if node_type(n) == canon]


def _devices(devs: list[int], rng: random.Random) -> Any:
    if len(devs) == 1:
        return rng.choice([devs[0], f"cuda:{devs[0]}", f"gpu{devs[0]}", [f"GPU {devs[0]}"]])
    if devs == list(range(devs[0], devs[-1] + 1)) and rng.random() < 0.5:
        return f"gpu{devs[0]}-gpu{devs[-1]}"
    return [f"cuda:{d}" for d in devs]


def to_dialect(doc: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``doc`` spelled the way a drafter with its own habits would spell it (same structure, same meaning)."""
    id_key = rng.choice(["id", "name", "node_id"])
    dev_key = rng.choice(["devices", "gpus", "device_ids", "placement"])
    src, dst = rng.choice([("source", "target"), ("from", "to"), ("src", "dst"), ("u", "v")])
    nodes = []
    for n in doc["nodes"]:
        m = {k: v for k, v in n.items() if k not in ("id", "type", "devices")}
        spellings = _type_spellings(n["type"])
        m[id_key] = n["id"]
        m[rng.choice(["type", "kind", "op_type"])] = rng.choice(spellings) if spellings else n["type"]
        if "devices" in n:  # a list of GPU ids respelled; a mesh placement or no devices kept as they are
            m[dev_key] = _devices(n["devices"], rng) if isinstance(n["devices"], list) and n["devices"] \
                else n["devices"]
        if rng.random() < 0.2:
            m["description"] = "drafted by hand"
        nodes.append(m)
    edges: list[Any] = []
    for e in doc["edges"]:
        style = rng.random()
        if style < 0.25:
            edges.append([e["source"], e["target"], e["type"]])
        elif style < 0.4 and e["type"] == "data" and "->" not in e["source"] + e["target"]:
            edges.append(f"{e['source']} -> {e['target']}")
        else:
            edges.append({src: e["source"], dst: e["target"], rng.choice(["type", "kind"]): e["type"]})
    out = {k: v for k, v in doc.items() if k not in ("nodes", "edges")}
    if rng.random() < 0.5 and id_key != "id":
        out["nodes"] = {n.pop(id_key): n for n in nodes}
    else:
        out["nodes"] = nodes
    out[rng.choice(["edges", "links"])] = edges
    return out


def _verdict(dag: dict[str, Any]) -> tuple[bool, list[str]]:
    r = validate_dag(dag=copy.deepcopy(dag))
    return r.valid, sorted({v.rule_id for v in r.violations if v.severity == "error"})


@pytest.mark.parametrize(("rule", "side", "dag"), DAG_CASES, ids=[f"{r}-{s}" for r, s, _ in DAG_CASES])
def test_every_rule_fixture_reads_the_same_in_another_vocabulary(rule: str, side: str, dag: dict[str, Any]) -> None:
    drafted = to_dialect(dag, random.Random(rule + side))
    assert _verdict(drafted) == _verdict(dag)
    if side == "reject":
        assert rule in _verdict(drafted)[1] or not _verdict(dag)[1]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), which=st.sampled_from(range(5)))
def test_any_drafted_spelling_of_a_built_dag_is_judged_as_the_canonical_one(seed: int, which: int) -> None:
    dag = dag_of([P_MOE, P_PP, P_SP, P_ADP, P_DIS][which])
    assert _verdict(to_dialect(dag, random.Random(seed))) == _verdict(dag)


def test_a_canonical_document_is_read_unchanged_and_without_notes() -> None:
    dag = dag_of(P_MOE)
    out, notes, _ = translate(copy.deepcopy(dag))
    assert out == dag and notes == []


def test_the_validator_says_what_it_read_how() -> None:
    drafted = to_dialect(dag_of(P_PP), random.Random(7))
    notes = validate_dag(dag=drafted).notes
    assert any(n.startswith("read the draft's own vocabulary") for n in notes)


def test_a_canonical_field_wins_over_an_alias_beside_it() -> None:
    doc = {"nodes": [{"id": "a", "name": "b", "type": "AttentionNode", "kind": "FFNNode", "devices": [1], "gpu": 2}],
           "edges": []}
    out, _, _ = translate(doc)
    node = out["nodes"][0]
    assert (node["id"], node["type"], node["devices"]) == ("a", "AttentionNode", [1])
    assert node["meta"] == {"name": "b", "kind": "FFNNode", "gpu": 2}


@pytest.mark.parametrize(("spelling", "canon"), [
    ("All-Reduce", "AllReduceNode"), ("AllReduce(TP)", "AllReduceNode"), ("all_reduce_tp", "AllReduceNode"),
    ("reduce_scatter", "ReduceScatterNode"), ("self_attention", "AttentionNode"), ("MLP", "FFNNode"),
    ("moe_dispatch", "AllToAllNode"), ("kv_cache_write", "KVCacheUpdateNode"), ("KV transfer", "KVTransferNode"),
    ("gate_proj", "LinearNode"), ("gate", "RouterNode"), ("pipeline_stage", "PipelineStageNode"),
    ("attention_node", "AttentionNode"), ("LMHead", "LMHeadNode"), ("p2p_send", "SendRecvNode"),
])
def test_type_spellings(spelling: str, canon: str) -> None:
    assert node_type(spelling) == canon


def test_every_alias_names_one_type_and_every_type_has_aliases() -> None:
    vocab = vocabulary()["node_types"]
    assert set(vocab) == {t.value for t in NodeType}
    for canon, names in vocab.items():
        assert names, canon
        for name in names:
            assert node_type(name) is not None, name


def test_a_role_or_phase_follows_from_the_spelling_only_where_the_draft_left_it_out() -> None:
    doc = {"nodes": [{"id": "x", "type": "moe_combine", "devices": [0]},
                     {"id": "y", "type": "combine", "role": "dispatch", "devices": [0]},
                     {"id": "p", "type": "GenerationPhase", "devices": [0]}], "edges": []}
    nodes = {n["id"]: n for n in translate(doc)[0]["nodes"]}
    assert nodes["x"]["role"] == "combine" and nodes["y"]["role"] == "dispatch"
    assert (nodes["p"]["type"], nodes["p"]["phase"]) == ("PhaseNode", "decode")


def test_an_unreadable_type_names_the_closest_canonical_types() -> None:
    dag = {"nodes": [{"id": "r", "type": "RequestNode", "devices": [0]},
                     {"id": "q", "type": "AttentoinNode", "devices": [0]}], "edges": [["r", "q"]]}
    r = validate_dag(dag=dag)
    msg = next(v.message for v in r.violations if v.rule_id == "STRUCT-KNOWN-TYPES")
    assert "AttentionNode" in msg and "AttentoinNode" in msg


def test_metadata_claims_are_checked_against_the_drawing() -> None:
    """A drafter who writes the GPU count as the product of every degree is caught through its metadata."""
    dag = dag_of(P_PP)  # TP 2 x PP 2 on 4 GPUs
    drafted = to_dialect(dag, random.Random(3))
    drafted["metadata"] = {"model": "tiny", "degrees": {"tp": 2, "pp": 2, "dp": 2}, "num_gpus": 8}
    assert not validate_dag(dag=drafted).valid
    drafted["metadata"]["num_gpus"] = 4
    assert _verdict(drafted) == _verdict(dag)


def test_autofix_repairs_a_drafted_dag_as_it_repairs_the_canonical_one() -> None:
    dag = json.loads((Path(__file__).parent / "fixtures" / "rules" / "COMM-EXPLICIT-COLLECTIVES.json")
                     .read_text())["reject"]["dag"]
    drafted = to_dialect(dag, random.Random(11))
    fixed, plain = autofix_dag(dag=copy.deepcopy(drafted)), autofix_dag(dag=copy.deepcopy(dag))
    assert fixed.valid == plain.valid
    assert sorted(c.rule_id for c in fixed.changes) == sorted(c.rule_id for c in plain.changes)


@settings(max_examples=60, deadline=None)
@given(doc=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                        max_leaves=20))
def test_arbitrary_documents_never_crash_the_reader(doc: Any) -> None:
    if isinstance(doc, dict):
        out, notes, _ = translate(doc)
        assert isinstance(out, dict) and isinstance(notes, list)


def seed_style(dag: dict[str, Any]) -> dict[str, Any]:
    """A built DAG drawn with only what the seeds and the contract name: no PhaseNode or DecodeStepNode (phases
    by attribute), plain data edges for the KV cache and between the phases, sync edges into the collectives
    ("AllReduce / Sync"), embedding and LM head as LinearNodes.  The stage hand-offs stay drawn: they are
    communication, which seed 001 section 8 requires explicit (a bare pipeline edge is COMM-NO-IMPLICIT)."""
    d = copy.deepcopy(dag)
    types = {n["id"]: n["type"] for n in d["nodes"]}
    for kind in ("DecodeStepNode", "PhaseNode"):
        for nid in [n for n, t in types.items() if t == kind]:
            bypass(d, nid)
    types = {n["id"]: n["type"] for n in d["nodes"]}
    comm = {"AllReduceNode", "AllGatherNode", "ReduceScatterNode", "AllToAllNode"}
    for e in d["edges"]:
        if e["type"] == "kv":
            e["type"] = "data"
        elif types[e["target"]] in comm and types[e["source"]] not in comm and e["type"] == "data":
            e["type"] = "sync"
    for n in d["nodes"]:
        if n["type"] in ("LMHeadNode", "EmbeddingNode"):
            n["role"] = "lm_head" if n["type"] == "LMHeadNode" else "embedding"
            n["type"] = "LinearNode"
    return d


@pytest.mark.parametrize("which", range(3))
def test_a_dag_drawn_in_the_seeds_own_primitives_is_judged_as_pdags_drawing(which: int) -> None:
    dag = dag_of([P_MOE, P_PP, P_SP][which])
    drafted = seed_style(dag)
    assert {n["type"] for n in drafted["nodes"]}.isdisjoint({"PhaseNode", "DecodeStepNode"})
    assert _verdict(drafted) == _verdict(dag) == (True, [])
    notes = " ".join(validate_dag(dag=drafted).notes)
    assert "PhaseNode" in notes and "DecodeStepNode" in notes


def test_a_stage_hand_off_drawn_as_a_bare_edge_is_refused_and_repaired_in_place() -> None:
    """pdag once drew the SendRecvNode a draft left out (structure invented); now the bare edge is the violation
    that names the rule, and autofix inserts the SendRecvNode in the drawing."""
    from tools import autofix_dag

    dag = dag_of(P_PP)
    sends = [n["id"] for n in dag["nodes"] if n["type"] == "SendRecvNode" and n.get("role") == "stage_transfer"]
    bare = copy.deepcopy(dag)
    for nid in sends:
        bypass(bare, nid)
    assert "COMM-NO-IMPLICIT" in _verdict(bare)[1]
    fixed = autofix_dag(dag=bare)
    assert fixed.valid and fixed.repair == "in_place"
    assert {c.rule_id for c in fixed.changes} == {"COMM-NO-IMPLICIT"}
    assert sum(n["type"] == "SendRecvNode" for n in fixed.dag["nodes"]) == len(sends)


def test_a_missing_hand_off_is_still_caught_where_the_draft_draws_hand_offs_elsewhere() -> None:
    dag = dag_of(P_PP)
    one = next(n["id"] for n in dag["nodes"] if n["type"] == "SendRecvNode")
    assert "COMM-NO-IMPLICIT" in _verdict(bypass(copy.deepcopy(dag), one))[1]


def test_metadata_opt_ins_count_for_a_plan_less_draft() -> None:
    drafted = seed_style(dag_of(P_DIS))
    drafted.pop("plan")
    assert "DISAGG-OPT-IN" in _verdict(drafted)[1]
    drafted["metadata"] = {"disaggregated": True}
    assert "DISAGG-OPT-IN" not in _verdict(drafted)[1]


def test_a_layer_wired_across_the_phases_is_not_read_as_a_link_between_them() -> None:
    """Only the KV cache and the end-of-prefill -> start-of-decode edge are read as the phases' links; a prefill
    layer's output wired into decode stays data and is judged."""
    drafted = seed_style(dag_of(P_PP))
    ffn = next(n["id"] for n in drafted["nodes"] if n["type"] == "FFNNode" and n.get("phase") == "prefill")
    attn = next(n["id"] for n in drafted["nodes"] if n["type"] == "AttentionNode" and n.get("phase") == "decode")
    drafted["edges"].append({"source": ffn, "target": attn, "type": "data"})
    assert "PHASE-PREFILL-DECODE-SPLIT" in _verdict(drafted)[1]


def test_edges_written_inside_the_nodes_and_phase_sections_read_as_the_graph() -> None:
    """Two more drafting habits: each node lists what it waits for (``inputs`` / ``depends_on``), and the draft is
    split into ``prefill`` and ``decode`` sections."""
    dag = dag_of(P_PP)
    preds: dict[str, list[dict[str, str]]] = {}
    for e in dag["edges"]:
        preds.setdefault(e["target"], []).append({"id": e["source"], "type": e["type"]})
    nodes = [{**n, "inputs": preds[n["id"]]} if n["id"] in preds else dict(n) for n in dag["nodes"]]
    drafted = {k: v for k, v in dag.items() if k not in ("nodes", "edges")}
    drafted["nodes"] = [n for n in nodes if n.get("phase") is None]
    for phase in ("prefill", "decode"):
        drafted[phase] = {"nodes": [n for n in nodes if n.get("phase") == phase]}
    assert _verdict(drafted) == _verdict(dag) == (True, [])


@pytest.mark.parametrize(("text", "gpus"), [("cuda:0,cuda:1", [0, 1]), ("GPU0..GPU3", [0, 1, 2, 3]),
                                            ("node1/gpu3", [11]), ("gpu[0, 3]", [0, 3]), ("gpu[0-7]", list(range(8))),
                                            ("gpu0 gpu1", [0, 1]), ("cuda:3", [3])])
def test_gpu_spellings(text: str, gpus: list[int]) -> None:
    from tools.drafts.gpus import device_list

    assert device_list(text, 8) == gpus


def test_edges_grouped_by_kind_keep_their_kind() -> None:
    dag = dag_of(P_PP)
    grouped: dict[str, list[list[str]]] = {}
    for e in dag["edges"]:
        grouped.setdefault(e["type"], []).append([e["source"], e["target"]])
    drafted = {**{k: v for k, v in dag.items() if k != "edges"}, "edges": grouped}
    assert set(grouped) == {"data", "kv", "sync", "pipeline"} or {"data", "kv", "sync"} <= set(grouped)
    assert _verdict(drafted) == _verdict(dag) == (True, [])


def test_gpus_placed_on_a_named_device_mesh() -> None:
    """A draft that declares a device mesh and places each node by axis and coordinate (``{"mesh_axis": "tp",
    "coord": 1}``; ``{"replicated_on": "mesh"}``) is judged as the same drawing with GPU lists."""
    dag = dag_of(P_MOE)
    every = sorted({d for n in dag["nodes"] for d in n.get("devices") or []})
    mesh = {"devices": [f"gpu:{d}" for d in every], "axes": {"tp": {"size": len(every)}}}
    nodes = []
    for n in dag["nodes"]:
        devs = n.get("devices") or []
        place: Any = devs
        if devs == every:
            place = {"replicated_on": "mesh"}
        elif devs:
            place = {"mesh_axis": "tp", "coord": [every.index(d) for d in devs]}
        nodes.append({**{k: v for k, v in n.items() if k != "devices"}, "placement": place})
    drafted = {**{k: v for k, v in dag.items() if k != "nodes"}, "device_mesh": mesh, "nodes": nodes}
    assert _verdict(drafted) == _verdict(dag) == (True, [])
    wrong = copy.deepcopy(drafted)
    wrong["device_mesh"]["axes"]["tp"] = {"devices": [f"gpu:{d}" for d in reversed(every)]}  # coords now differ
    assert _verdict(wrong) == _verdict(dag)  # a permutation of the GPUs is the same deployment
    short = copy.deepcopy(drafted)
    short["device_mesh"] = {"devices": ["gpu:0"], "axes": {"tp": {"devices": ["gpu:0"]}}}
    assert not _verdict(short)[0]  # coordinates beyond the axis are not read as GPUs


def test_machines_named_in_hosts() -> None:
    """``"pnode:gpu0-3"`` names a machine the draft lists in its hardware's ``hosts``: the second machine's GPU 1
    is GPU ``gpus_per_node + 1``, not GPU 1 (which would put two pools on the same GPUs)."""
    from tools.drafts.gpus import device_list, gpu_text, hosts_of

    hosts = hosts_of({"hardware": {"hosts": ["pnode (prefill)", "dnode (decode)"], "gpus_per_node": 4}})
    assert hosts == {"pnode": 0, "dnode": 1}
    assert device_list("dnode:gpu1", 4, hosts) == [5]
    assert device_list("pnode:gpu0-3", 4, hosts) == [0, 1, 2, 3]
    assert device_list("dnode:gpu0-3", 4, hosts) == [4, 5, 6, 7]
    assert device_list("gpu[0..3] -> gpu[0]", 8) == [0, 1, 2, 3]
    assert gpu_text("pf.L0.kv", 8, hosts) is None  # a node id is not a GPU
    assert gpu_text("xnode:gpu1", 8, hosts) is None  # a machine the draft does not name


def test_layers_named_in_ids_and_phases_by_p_and_d() -> None:
    doc = {"nodes": [{"id": "P.L39.attn", "type": "attention", "devices": [0]},
                     {"id": "D/blk3/ffn", "type": "ffn", "devices": [0]},
                     {"id": "L7", "type": "ffn", "devices": [0]}], "edges": []}
    out, _, _ = translate(doc)
    got = {n["id"]: (n.get("layer"), n.get("phase")) for n in out["nodes"]}
    assert got == {"P.L39.attn": (39, "prefill"), "D/blk3/ffn": (3, "decode"), "L7": (None, None)}
    alone, _, _ = translate({"nodes": [{"id": "P.L0.attn", "type": "attention", "devices": [0]}], "edges": []})
    assert "phase" not in alone["nodes"][0]  # a lone "P" could stand for anything


def test_successors_grouped_by_kind_and_nodes_as_table_rows() -> None:
    """Two more habits: a node lists its consumers by edge kind (``"next": {"data": [...], "sync": [...]}``), and
    a draft writes its nodes as rows under ``node_columns``."""
    dag = dag_of(P_PP)
    succ: dict[str, dict[str, list[str]]] = {}
    for e in dag["edges"]:
        succ.setdefault(e["source"], {}).setdefault(e["type"], []).append(e["target"])
    nodes = [{**n, "next": succ[n["id"]]} if n["id"] in succ else dict(n) for n in dag["nodes"]]
    drafted = {**{k: v for k, v in dag.items() if k not in ("nodes", "edges")}, "nodes": nodes}
    assert _verdict(drafted) == _verdict(dag) == (True, [])
    columns = sorted({k for n in dag["nodes"] for k in n})
    table = {**{k: v for k, v in dag.items() if k != "nodes"}, "node_columns": columns,
             "nodes": [[n.get(c, "") for c in columns] for n in dag["nodes"]]}
    assert _verdict(table) == _verdict(dag)
    table["node_columns"] = columns[:-1]  # rows that do not fit the header stay unread
    assert not _verdict(table)[0]


@pytest.mark.parametrize(("spelling", "sampler"), [
    ("Sample", True), ("sampler", True), ("Sampling", True), ("token sampler", True), ("decode.sample", True),
    ("rep0_dec_sample", True), ("Sampler(greedy)", True), ("argmax", True), ("next_token", True),
    ("lm_head + sampling", False), ("final norm + lm_head + sample (replicated)", False), ("LMHead", False),
    ("logits", False), ("all_gather", False),
])
def test_sampler_spellings(spelling: str, sampler: bool) -> None:
    from tools.drafts.vocabulary import names_sampler

    assert names_sampler(spelling) is sampler
    if sampler:
        assert node_type(spelling) == "LMHeadNode"  # read at the LM head's end, never as a type of its own


def _logits_ends(dag: dict[str, Any]) -> list[str]:
    """Where each LM head's logits leave it: the head, or the collective gathering its vocabulary slices."""
    types = {n["id"]: n["type"] for n in dag["nodes"]}
    ends = []
    for h in [n["id"] for n in dag["nodes"] if n["type"] == "LMHeadNode" or n.get("role") == "lm_head"]:
        gathers = [e["target"] for e in dag["edges"] if e["source"] == h and types[e["target"]] == "AllGatherNode"]
        ends.append(gathers[0] if gathers else h)
    return ends


def _with_samplers(dag: dict[str, Any], spelling: str) -> dict[str, Any]:
    """``dag`` with a sampler node drawn after each LM head's logits, taking over their consumers (the prefill's
    start signal to decode; none in decode, where the sampler ends the step)."""
    d = copy.deepcopy(dag)
    by_id = {n["id"]: n for n in d["nodes"]}
    for end in _logits_ends(d):
        sid = f"{end}.sampling_node"
        d["nodes"].append({"id": sid, "type": spelling, "devices": list(by_id[end]["devices"]),
                           **{k: by_id[end][k] for k in ("phase", "replica", "stage") if k in by_id[end]}})
        for e in d["edges"]:
            if e["source"] == end:
                e["source"] = sid
        d["edges"].append({"source": end, "target": sid, "type": "data"})
    return d


@pytest.mark.parametrize("spelling", ["Sample", "sampler", "token_sampler", "SamplingNode", "argmax"])
@pytest.mark.parametrize("which", range(2))
def test_a_sampler_after_the_lm_head_is_the_end_of_the_heads_output(spelling: str, which: int) -> None:
    """However the vocabulary spells it, a sampler drawn after the LM head (P_PP3) or after the gather of a
    vocabulary-parallel head's logits (P_PP) is read as the end of that head: no second LM head, no unknown type,
    the prefill's first token still reaching decode."""
    from tests.fixtures.generate import P_PP3

    dag = dag_of([P_PP3, P_PP][which])
    drafted = _with_samplers(dag, spelling)
    assert _verdict(drafted) == _verdict(dag) == (True, [])
    r = validate_dag(dag=copy.deepcopy(drafted))
    assert any("a sampler drawn after the LM head (or the gather of its logits)" in n for n in r.notes)


def test_a_sampler_with_no_lm_head_before_it_stands_for_the_head() -> None:
    """A draft that ends each branch in a sampler and draws no LM head: the sampler computes the logits it samples
    from, so it is the head (one per branch), as 'sampler' always read."""
    from tests.fixtures.generate import P_PP3

    dag = dag_of(P_PP3)
    drafted = copy.deepcopy(dag)
    for n in drafted["nodes"]:
        if n["type"] == "LMHeadNode":
            n["type"] = "Sample"
    r = validate_dag(dag=drafted)
    assert r.valid, [v.rule_id for v in r.violations if v.severity == "error"]
    assert any("a sampler with no LM head drawn before it as the LM head" in n for n in r.notes)


def test_a_linear_node_named_as_a_sampler_is_no_second_lm_head() -> None:
    """The seeds draw the LM head as a LinearNode; a LinearNode named 'sample' after it (round 3's draft 02) is a
    sampler, not a second head: two heads in a branch would be refused (PERF-CRITICAL-PATH's one head per branch)."""
    drafted = _with_samplers(seed_style(dag_of(P_PP)), "linear")
    for n in drafted["nodes"]:
        if n["id"].endswith(".sampling_node"):
            n["id"] = n["id"].removesuffix(".sampling_node") + ".sample"
    for e in drafted["edges"]:
        for f in ("source", "target"):
            e[f] = e[f].replace(".sampling_node", ".sample")
    assert _verdict(drafted) == (True, [])
    twice = copy.deepcopy(drafted)  # the same draft with the sampler spelled as a second LM head is refused
    for n in twice["nodes"]:
        if n["id"].endswith(".sample"):
            n["type"] = "LMHeadNode"
    assert not _verdict(twice)[0]


def _token_sent_back(through: str | None = None, phase: str | None = None) -> dict[str, Any]:
    """A seed-style PP draft whose first token goes back to the first stage through a SendRecv node drawn between
    the phases (no phase of its own, or in the section of ``phase``), fed by the prefill's logits gather (or by
    ``through``) and feeding the decode embedding."""
    d = seed_style(dag_of(P_PP))
    types = {n["id"]: n for n in d["nodes"]}
    gather = next(e for e in _logits_ends(d) if types[e].get("phase") == "prefill")
    end = through or gather
    embed = next(i for i, n in types.items() if n.get("role") == "embedding" and n.get("phase") == "decode")
    d["edges"] = [e for e in d["edges"] if e["source"] != gather or types[e["target"]].get("phase") != "decode"]
    d["nodes"].append({"id": "token_return", "type": "SendRecv", "devices": [0, 1, 2, 3],
                       **({"phase": phase} if phase else {})})
    d["edges"] += [{"source": end, "target": "token_return", "type": "pipeline"},
                   {"source": "token_return", "target": embed, "type": "pipeline"}]
    return d


@pytest.mark.parametrize("phase", [None, "prefill", "decode"])
def test_the_first_token_sent_back_between_the_phases_is_the_start_signal(phase: str | None) -> None:
    drafted = _token_sent_back(phase=phase)
    r = validate_dag(dag=copy.deepcopy(drafted))
    assert r.valid, [v.rule_id for v in r.violations if v.severity == "error"]
    assert any("a transfer of the first token drawn between the phases as the start signal (sync)" in n
               for n in r.notes)


def test_a_transfer_of_hidden_states_between_the_phases_is_still_refused() -> None:
    """Only the token may cross: the same transfer fed by a prefill layer's output is judged as drawn."""
    d = seed_style(dag_of(P_PP))
    ffn = next(n["id"] for n in d["nodes"] if n["type"] == "AllReduceNode" and n.get("phase") == "prefill")
    assert "PHASE-PREFILL-DECODE-SPLIT" in _verdict(_token_sent_back(through=ffn))[1]


def test_the_token_sent_into_the_middle_of_decode_is_still_refused() -> None:
    """The start signal reaches where decode starts; a token wired into a decode layer is judged as drawn."""
    d = _token_sent_back()
    attn = next(n["id"] for n in d["nodes"] if n["type"] == "AttentionNode" and n.get("phase") == "decode")
    for e in d["edges"]:
        if e["source"] == "token_return":
            e["target"] = attn
    assert "PHASE-PREFILL-DECODE-SPLIT" in _verdict(d)[1]


def test_vertex_ids_and_kv_read_edges() -> None:
    """Graph-library habits: a vertex's id as ``vid``, an edge of kind ``kv_read``."""
    out, _, _ = translate({"vertices": [{"vid": "a", "kind": "KVCacheUpdateNode", "devices": [0]},
                                     {"vid": "b", "kind": "AttentionNode", "devices": [0]}],
                        "arcs": [{"src": "a", "dst": "b", "kind": "kv_read"}]})
    assert [n["id"] for n in out["nodes"]] == ["a", "b"]
    assert out["edges"] == [{"source": "a", "target": "b", "type": "kv"}]
