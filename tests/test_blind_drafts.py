"""24 DAGs drafted by hand from the seeds and the public contract alone, by a helper that never saw pdag's code or
output (2026-11-26), each in its own vocabulary (``name``/``label`` ids, ``kind``/``op``/``class`` types such as
``attention_node``, ``MHA``, ``AllReduce(TP)``, ``All2All``; ``from``/``to``, ``src``/``dst``, ``u``/``v`` edges or
``[a, b]`` pairs; devices as ``"gpu[0-7]"``, ``{"node": 1, "local_gpus": [...]}``, ``rank: "tp0"``; layers written
out or folded with ``repeat``; phases marked by attribute; sync edges into collectives).  Twelve are meant valid and
twelve carry one deliberate mistake each (``tests/data/blind_dags/index.json`` says which and quotes the seed).

Before pdag read drafts through ``tools.drafts.dialect`` and ``tools.drafts.implicit`` it rejected all 24, the twelve
valid ones on spelling.  Now six of the twelve valid drafts pass (eight did while pdag drew the stage hand-offs
two of them leave out, which it no longer invents), every mistaken draft is rejected, and nine of the
twelve by the rule that names its mistake.  The valid drafts still rejected are pinned below with the reason pdag
gives (six now: two draw bare stage hand-offs), each a reading of the seeds the drafter and pdag do not share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import validate_dag
from tools.core.errors import PdagInputError


def _read(data: Path, name: str):  # noqa: ANN202 - a ValidationResult, or None when not read as a DAG at all
    try:
        return validate_dag(dag=json.loads((data / name).read_text()))
    except PdagInputError:
        return None  # refused with an input error naming what is missing


def _unread(data: Path, index: dict) -> list[str]:
    return [name for name in sorted(index) if _read(data, name) is None]

DATA = Path(__file__).parent / "data" / "blind_dags"
INDEX = {e["file"]: e for e in json.loads((DATA / "index.json").read_text())}

ACCEPTED = ("06_llama70b_tp8_canonical.json", "07_llama70b_dp2_tp4_nodemap.json",
            "15_qwen3_30b_a3b_tp4_ep4_ranks.json", "16_mixtral_tp8attn_ep8_ops.json",
            "19_llama8b_dp4_pairs_repeat.json", "24_pd_disagg_llama70b_pools.json")
# the mistake each draft carries, and the rule that names it
CAUGHT = {"01_mixtral_tp8_ep4x2.json": "EP-NO-EXPERT-TP", "03_llama8b_dp4_camel.json": "MEM-KV-ESTIMATED",
          "04_qwen3_30b_a3b_tp4_ep4_gate.json": "EP-DISPATCH-COMBINE-ALLTOALL",
          "05_llama405b_pp2_tp8_folded_b.json": "PP-STAGES-OWN-GPUS",
          "09_mixtral_tp8_ep8_64gpu.json": "GPU-NO-MULTIPLICATION",
          "10_llama8b_tp2_a100.json": "TP-NO-CROSS-LAYER", "11_pd_disagg_llama70b_2step.json": "DECODE-SINGLE-TOKEN",
          "12_llama70b_tp8_linear_level.json": "TP-REJOIN-BEFORE-NEXT-LAYER",
          "18_llama405b_tp8_pp2_b.json": "STRUCT-ACYCLIC"}
# rejected, but for a consequence of the mistake rather than the rule that names it
OTHERWISE_CAUGHT = ("02_llama70b_tp8_sp2_longctx.json", "13_qwen3_30b_a3b_dpattn6_ep6.json",
                    "21_llama8b_dp2_l40s.json")
# meant valid by the drafter, rejected by pdag, and why
DISPUTED = {
    # attention-DP replicas that share the expert GPUs are not independent DP replicas; pdag's form of that
    # layout is the opt-in attention-DP group inside one replica (knowledge/12_attention_dp_and_disaggregation.md)
    "08_deepseekv3_dpattn16_ep16.json": "DP-INDEPENDENT-REPLICAS",
    "20_mixtral_dpattn8_ep8_a100.json": "DP-INDEPENDENT-REPLICAS",
    # the KV cache moves from the prefill pool's GPUs to the decode pool's along a bare edge: communication the
    # seeds require to be explicit (a KVTransferNode)
    "14_pd_disagg_llama8b_l40s.json": "COMM-NO-IMPLICIT",
    # both sequence shards of attention sit on the same eight GPUs: that is one TP operator run twice, not SP
    "22_llama70b_tp8_sp2_prefill_only.json": "GPU-SHARDS-DISTINCT",
    # the activations cross from stage 0's GPUs to stage 1's along a bare pipeline edge, with no SendRecvNode:
    # pdag used to draw the hand-off for the drafter (structure invented); seed 001 section 8 wants all
    # communication explicit, so it is refused, and autofix_dag inserts the SendRecvNode in place
    "17_llama405b_pp2_tp8_folded.json": "COMM-NO-IMPLICIT",
    "23_llama405b_tp8_pp2_source_target.json": "COMM-NO-IMPLICIT",
}


def _roots(name: str) -> tuple[bool, set[str]]:
    r = validate_dag(dag=json.loads((DATA / name).read_text()))
    return r.valid, {v.rule_id for v in r.violations if v.severity == "error" and v.caused_by is None}


def test_the_sets_cover_the_index_as_drafted() -> None:
    meant_valid = {f for f, e in INDEX.items() if e["expected"] == "valid"}
    assert set(ACCEPTED) | set(DISPUTED) == meant_valid
    assert set(CAUGHT) | set(OTHERWISE_CAUGHT) == set(INDEX) - meant_valid


@pytest.mark.parametrize("name", ACCEPTED)
def test_valid_drafts_in_their_own_vocabulary_pass(name: str) -> None:
    r = validate_dag(dag=json.loads((DATA / name).read_text()))
    assert r.valid, [v.rule_id for v in r.violations if v.severity == "error"]
    assert any(n.startswith("read the draft's own vocabulary") for n in r.notes)


@pytest.mark.parametrize(("name", "rule"), sorted(CAUGHT.items()))
def test_each_deliberate_mistake_is_named_by_its_rule(name: str, rule: str) -> None:
    valid, roots = _roots(name)
    assert not valid and rule in roots


@pytest.mark.parametrize("name", OTHERWISE_CAUGHT)
def test_the_other_mistakes_are_rejected(name: str) -> None:
    assert not _roots(name)[0]


@pytest.mark.parametrize(("name", "rule"), sorted(DISPUTED.items()))
def test_disputed_drafts_are_rejected_for_the_stated_reason(name: str, rule: str) -> None:
    valid, roots = _roots(name)
    assert not valid and rule in roots


# Round 3 (tests/data/blind_dags3): 16 more drafts by a helper told only the seeds, the contract and a list of
# habits to draft in (edges inside the nodes, phase sections, arrow strings, UPPER_SNAKE types, "node0/gpu3" ...).
# As first scored, before any change made for them: none of the 8 valid drafts passed, all 8 mistaken ones were
# rejected.  The readings their misses called for (phase from node ids, one cache across the phases, a sampler after
# the LM head, edges to several targets, "x80" repeat counts, "prefill_cluster" sections; then a device mesh named by
# axis, layers named in ids, stages drawn by their first and last layer, machines named in "hosts", a transfer's
# "from"/"to" GPUs, successors grouped by edge kind, "P."/"D." id prefixes, tables of node rows, a gathered KV cache as
# a re-shard) made six pass (five since pdag stopped drawing the stage hand-offs a draft leaves out).  Six of the
# eight mistakes are now named by their rule.  This round is no longer held
# out: it is the material those readings were made from.
DATA3 = Path(__file__).parent / "data" / "blind_dags3"
INDEX3 = {e["file"]: e for e in json.loads((DATA3 / "index.json").read_text())}
ACCEPTED3 = ("01_llama8b_1xl40s_inputs.json", "02_llama8b_2xl40s_tp2_arrows.json",
             "04_qwen72b_tp4_4xa100_sections.json",
             "08_gptoss120b_tp4ep4_4xh200_mesh.json", "10_mixtral8x22b_tp8ep8_mi300x_adjacency.json")
CAUGHT3 = {"03_llama8b_2xl40s_dp2_dagwrap.json": "DP-NO-LAYER-SPLIT",
           "05_qwen72b_tp4_fatarrow.json": "TP-REJOIN-BEFORE-NEXT-LAYER",
           "07_llama70b_pp2tp4_after.json": "PP-LINEAR-CHAIN",
           "09_gptoss120b_product16_triples.json": "EP-TP-NOT-MULTIPLIED",
           "12_deepseekv3_ep16_2nodes_dashedges.json": "EP-DISPATCH-COMBINE-ALLTOALL",
           "16_llama70b_tp8_tabular_decodepair.json": "DECODE-SINGLE-TOKEN"}
DISPUTED3 = {
    # two pools joined by a drawn KVTransferNode, but no opt-in: pdag asks a DAG for options.disaggregated (or a
    # metadata "disaggregated": true) as it asks a plan (DISAGG-OPT-IN's corpus fixture disagg-dag-without-opt-in)
    "14_llama70b_pd_disagg_kvxfer.json": "DISAGG-OPT-IN",
    # the FFN runs on GPU 0 over the whole sequence, and the next layer's sequence shards on GPUs 1-3 read their
    # slices from it with no scatter drawn: implicit communication, the only reason left
    "15_llama8b_sp4_prefill_128k_typededges.json": "COMM-NO-IMPLICIT",
    # stage 0's last AllReduce (GPUs 0-3) feeds stage 1's attention shards (GPUs 4-7) along bare pipeline edges:
    # the hand-off pdag used to draw for it; now refused as implicit communication, repaired in place by autofix
    "06_llama70b_pp2tp4_8xh100_nodegpu.json": "COMM-NO-IMPLICIT",
}


@pytest.mark.parametrize("name", sorted(INDEX3))
def test_round_three_drafts(name: str) -> None:
    valid, roots = _roots3(name)
    if INDEX3[name]["expected"] == "invalid":
        assert not valid
        if name in CAUGHT3:
            assert CAUGHT3[name] in roots, roots
    elif name in DISPUTED3:
        assert not valid and roots == {DISPUTED3[name]}, roots
    else:
        assert name in ACCEPTED3 and valid, roots


def test_round_three_sets_cover_the_index() -> None:
    meant_valid = {f for f, e in INDEX3.items() if e["expected"] == "valid"}
    assert set(ACCEPTED3) | set(DISPUTED3) == meant_valid
    assert set(CAUGHT3) <= set(INDEX3) - meant_valid


def _roots3(name: str) -> tuple[bool, set[str]]:
    r = validate_dag(dag=json.loads((DATA3 / name).read_text()))
    return r.valid, {v.rule_id for v in r.violations if v.severity == "error" and v.caused_by is None}


# Round 4 (tests/data/blind_dags4): 16 drafts by a fourth helper told only the seeds and the contract, asked to invent
# a drafting style per file, scored once before anything changed for them: this round is the held-out measure of how
# far the readings carry.  As first scored none of its 8 valid drafts passed and 10 of the 16 documents were not
# even found to hold a graph (``graph: {vertices, arcs}``, a Graphviz string, a tree of successors under the request,
# a torch.fx-style list, a table keyed by destination); every mistaken draft was refused.  Two readings followed from
# habits most of the round shares (a graph wrapper holding aliased node lists; a placeholder node standing for the
# elided layers), and from one valid draft's misses: attention drawn Megatron-style as one node per operator over the
# whole TP group (QKV projection -> attention -> output projection, one all-reduce after), the prefill cache written
# from the QKV projection, DP replicas marked only by a replica index, a sampler node after the LM head.  With them
# that draft (dag07) passes; the other seven valid ones do not (four are not read as graphs at all).
# Then the document-shape readings (tools/drafts/doc_shape.py, tools/drafts/dot.py: node objects found anywhere in the
# document,
# a Graphviz DOT string, section-qualified ids, successor/predecessor fields with edge kinds, typed arrow lists,
# node_rows tables, machines named inside GPU ids): 15 of the 16 documents read as graphs (dag02's positional rows
# with a prose legend do not), 2 of the 8 valid drafts pass (dag07, dag09), and three mistakes read now are named
# by their rule.  Then a sampler read as the sampler it is, however the vocabulary spells it (roles 'sampler':
# 'Sample', 'token sampler', ... as an LMHeadNode with that role, or a LinearNode so named): drawn after the LM head
# or the gather of its logits it is the end of the head's output, never a second head (round 3's draft 02 names a
# LinearNode 'decode.sample' after the logits gather); and the first token sent back to the first pipeline stage
# through a SendRecv node drawn between the phases, fed only by the prefill's logits and feeding only the start of
# the decode chain, is the start signal (a transfer fed by a layer's output is still judged as drawn).  dag15 and
# dag11 pass: 4 of 8 valid drafts.  Still refused: dag03, whose prefill cache is written from the SP all-gather
# (MEM-KV-ESTIMATED, its only root once 'Sample' is read).
DATA4 = Path(__file__).parent / "data" / "blind_dags4"
INDEX4 = {e["file"]: e for e in json.loads((DATA4 / "index.json").read_text())}
ACCEPTED4 = ("dag07_llama-3.1-8b_l40s.json", "dag09_deepseek-v3_h200.json", "dag11_llama-3.1-405b_h100.json",
             "dag15_gpt-oss-120b_b200.json")
CAUGHT4 = {"dag04_qwen3-30b-a3b_h100.json": "EP-DISPATCH-COMBINE-ALLTOALL",
           "dag06_mixtral-8x22b_h200.json": "GPU-FROM-DEVICES",
           "dag10_qwen2.5-72b_a100.json": "DP-NO-LAYER-SPLIT"}


@pytest.mark.parametrize("name", sorted(f for f, e in INDEX4.items() if e["expected"] == "invalid"))
def test_round_four_mistakes_are_refused(name: str) -> None:
    r = _read(DATA4, name)
    assert r is None or not r.valid


def test_round_four_valid_draft_that_the_readings_were_made_from_passes() -> None:
    r = validate_dag(dag=json.loads((DATA4 / "dag07_llama-3.1-8b_l40s.json").read_text()))
    assert r.valid, [v.rule_id for v in r.violations if v.severity == "error"]
    assert r.gpus_used == 4


def test_round_four_placeholders_for_elided_layers_are_read() -> None:
    r = validate_dag(dag=json.loads((DATA4 / "dag07_llama-3.1-8b_l40s.json").read_text()))
    assert any("placeholder for layers 1-30 as repeats of layer 0" in n for n in r.notes)
    assert "STRUCT-KNOWN-TYPES" not in {v.rule_id for v in r.violations}
    wrapped = validate_dag(dag=json.loads((DATA4 / "dag08_llama-3.1-70b_mi300x.json").read_text()))
    assert not wrapped.valid and len([n for n in wrapped.notes if "graph" in n]) >= 1


def test_round_four_document_shapes_are_read() -> None:
    assert _unread(DATA4, INDEX4) == ["dag02_qwen3-8b_l40s.json"]


@pytest.mark.parametrize("name", sorted(f for f, e in INDEX4.items() if e["expected"] == "valid"))
def test_round_four_valid_drafts(name: str) -> None:
    r = validate_dag(dag=json.loads((DATA4 / name).read_text()))
    assert r.valid == (name in ACCEPTED4), [v.rule_id for v in r.violations if v.severity == "error"]


@pytest.mark.parametrize("name", sorted(CAUGHT4))
def test_round_four_mistakes_named_by_their_rule(name: str) -> None:
    r = validate_dag(dag=json.loads((DATA4 / name).read_text()))
    roots = {v.rule_id for v in r.violations if v.severity == "error" and v.caused_by is None}
    assert not r.valid and CAUGHT4[name] in roots, roots


def test_round_four_dot_and_nested_tree_readings_are_noted() -> None:
    dot = validate_dag(dag=json.loads((DATA4 / "dag06_mixtral-8x22b_h200.json").read_text()))
    assert any("Graphviz DOT text in 'dot'" in n for n in dot.notes)
    tree = validate_dag(dag=json.loads((DATA4 / "dag15_gpt-oss-120b_b200.json").read_text()))
    assert any("node objects found in request" in n for n in tree.notes)


def test_round_four_samplers_and_the_token_sent_back_are_read() -> None:
    """dag15 spells its sampler 'Sample' (four of them, after each LM head); dag11 sends the first token from the
    last stage back to the first through 'tok_xfer', a SendRecv drawn between the phases."""
    tree = validate_dag(dag=json.loads((DATA4 / "dag15_gpt-oss-120b_b200.json").read_text()))
    assert tree.valid and tree.gpus_used == 8
    assert any("a sampler drawn after the LM head (or the gather of its logits) as the end of the head's output (x4)"
               in n for n in tree.notes)
    stages = validate_dag(dag=json.loads((DATA4 / "dag11_llama-3.1-405b_h100.json").read_text()))
    assert stages.valid and stages.gpus_used == 16
    assert any("a transfer of the first token drawn between the phases as the start signal (sync)" in n
               for n in stages.notes)
    sp = validate_dag(dag=json.loads((DATA4 / "dag03_llama-3.1-70b_h200.json").read_text()))
    roots = {v.rule_id for v in sp.violations if v.severity == "error" and v.caused_by is None}
    assert not sp.valid and roots == {"MEM-KV-ESTIMATED"}, roots


# Round 5 (tests/data/blind_dags5): 16 more drafts by a fifth helper told only the seeds and the contract, asked to
# invent a document style per file (networkx node-link JSON, nested deployment/phase/layer trees with `after` lists,
# short keys explained in a legend, ONNX-like tensors linking ops, seq/par blocks with no edge list, ...), scored once
# before anything changed for them, after the document-shape, DOT and sampler readings: 0 of 8 valid drafts passed,
# 2 of 16 documents were not found to hold a graph (was 8 of 16 in round 4), and every mistaken draft was refused,
# two by the rule that names the mistake (EP-DISPATCH-COMBINE-ALLTOALL, DP-ROOT-ONLY).  The valid drafts fail on
# spellings (elided-layer placeholders named `ElidedLayers`), on structure read from nesting (several roots), and
# on pipeline and disaggregation details: the honest figure for styles nobody here has seen.  Those first-scored
# figures stay as they were.  After readings of the common habits (placeholder types under any placeholder word and
# objects flagged `elided`, a placeholder for the later decode steps, one drawn beside the chain, an operator field
# naming the node beside its type field, layer blocks handing their layer to their ops, a parallelism block's GPU
# list as devices, `reads_kv` as a kv edge, short keys explained in a legend with edges as "src>dst" text, a `deps`
# map of predecessors, `a -> prefill:lm_head` keeping its section prefix, steps listed in order in a tree with no
# edges): 4 of 8 valid drafts pass (dag_01, dag_03, dag_07, dag_13), every document is read as a graph, and every
# mistaken draft is still refused.
DATA5 = Path(__file__).parent / "data" / "blind_dags5"
INDEX5 = {e["file"]: e for e in json.loads((DATA5 / "index.json").read_text())}
ACCEPTED5 = {"dag_01.json", "dag_03.json", "dag_07.json", "dag_13.json"}


@pytest.mark.parametrize("name", sorted(f for f, e in INDEX5.items() if e["expected"] == "valid"))
def test_round_five_valid_drafts(name: str) -> None:
    r = _read(DATA5, name)
    if r is None:
        assert name not in ACCEPTED5
        return
    assert r.valid == (name in ACCEPTED5), [v.rule_id for v in r.violations if v.severity == "error"]


def test_round_five_placeholders_and_operator_names_are_noted() -> None:
    flat = validate_dag(dag=json.loads((DATA5 / "dag_01.json").read_text()))
    assert any("a placeholder for layers 1-30 as repeats of layer 0 (x2)" in n for n in flat.notes)
    assert any("a placeholder for the decode steps after the drawn one" in n for n in flat.notes)
    tree = validate_dag(dag=json.loads((DATA5 / "dag_03.json").read_text()))
    assert tree.gpus_used == 8
    assert any("node field 'op' as the node's id" in n for n in tree.notes)
    assert any("a placeholder for layers 1-78 as repeats of layer 0" in n for n in tree.notes)
    steps = validate_dag(dag=json.loads((DATA5 / "dag_13.json").read_text()))
    assert steps.gpus_used == 4
    assert any("steps listed in order ('sequence') as a chain of nodes (x4)" in n for n in steps.notes)
    legend = validate_dag(dag=json.loads((DATA5 / "dag_04.json").read_text()))
    assert not legend.valid
    assert any("short keys explained in the 'legend' block" in n for n in legend.notes)


@pytest.mark.parametrize("name", sorted(f for f, e in INDEX5.items() if e["expected"] == "invalid"))
def test_round_five_mistakes_are_refused(name: str) -> None:
    r = _read(DATA5, name)
    assert r is None or not r.valid


def test_round_five_documents_are_mostly_read_as_graphs() -> None:
    unread = _unread(DATA5, INDEX5)
    assert len(unread) <= 2, unread
    assert unread == []
