"""Outside test 4, a hand-drafted DAG: validate and autofix read one document one way (the model named in its
metadata, the edits made to the DAG as read), a TP operator drawn without its collective is diagnosed as the missing
collective (TP-REJOIN-BEFORE-NEXT-LAYER) rather than as DP inside a layer, and no message prints 'None'."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.responses import shape_autofix
from tests.fixtures.generate import TINY
from tools import autofix_dag, build_dag, validate_dag
from tools.core.errors import PdagInputError


def _draft(model: str | None = "llama-3.1-8b") -> dict[str, Any]:
    """TP 2 drawn by hand in a draft's own words: prefill with its all-reduces, decode shards with none."""
    meta = {"gpu": "h100-sxm", "total_gpus": 2, "tensor_parallel": 2}
    if model:
        meta["model"] = model
    nodes = [{"id": "req", "type": "Request"}, {"id": "prefill", "type": "Phase", "phase": "prefill"},
             {"id": "p.embed", "type": "embedding", "gpu": "gpu0-gpu1"}]
    edges = ["req -> prefill", "prefill -> p.embed"]
    last = "p.embed"
    for part, kind in (("attn", "attention"), ("mlp", "MLP")):
        nodes += [{"id": f"p.L0.{part}.{r}", "type": kind, "gpu": r} for r in (0, 1)]
        nodes.append({"id": f"p.L0.{part}.ar", "type": "AllReduce(TP)", "gpu": "gpu0-gpu1"})
        edges += [f"{last} -> p.L0.{part}.{r}" for r in (0, 1)] + [f"p.L0.{part}.{r} -> p.L0.{part}.ar" for r in (0, 1)]
        last = f"p.L0.{part}.ar"
    nodes += [{"id": "p.rest", "type": "repeat", "repeat": 31}, {"id": "p.head", "type": "LMHead", "gpu": "gpu0-gpu1"},
              {"id": "decode", "type": "Phase", "phase": "decode"}]
    edges += [f"{last} -> p.rest", "p.rest -> p.head", "p.head -> decode"]
    for r in (0, 1):  # decode: each GPU's chain runs on to the LM head with no collective between them
        nodes += [{"id": f"d.L0.attn.{r}", "type": "attention", "gpu": r},
                  {"id": f"d.L0.mlp.{r}", "type": "MLP", "gpu": r}]
        edges += [f"decode -> d.L0.attn.{r}", f"d.L0.attn.{r} -> d.L0.mlp.{r}", f"d.L0.mlp.{r} -> d.head"]
    nodes.append({"id": "d.head", "type": "LMHead", "gpu": "gpu0-gpu1"})
    return {"metadata": meta, "nodes": nodes, "edges": edges}


def _messages(result: Any) -> list[str]:
    return [x for v in result.violations for x in (v.message, v.hint or "")] + \
        [c.message for c in getattr(result, "changes", [])]


def test_autofix_reads_the_model_validate_reads() -> None:
    """Before: validate read metadata.model; autofix said the DAG names no known model and could not rebuild."""
    v = validate_dag(dag=_draft())
    assert any("metadata.model" in n for n in v.notes)
    r = autofix_dag(dag=_draft())
    assert not [n for n in r.notes if "names no known model" in n], r.notes
    assert r.valid and r.plan is not None and r.plan["model"] == "llama-3.1-8b"


def test_metadata_a_drafter_wrote_but_pdag_does_not_read_is_named() -> None:
    """Before: the degrees written in metadata were dropped without a word, beside notes that named what was read,
    so an agent could take them for claims pdag had checked."""
    notes = " ".join(validate_dag(dag=_draft()).notes)
    unread = {f.strip() for f in notes.split("metadata fields not read")[1].split(";")[0].split(":")[1].split(",")}
    assert unread == {"tensor_parallel"}  # model, gpu and total_gpus are read


def test_the_gpu_type_a_draft_names_is_the_one_autofix_rebuilds_on() -> None:
    """Before: autofix rebuilt a plan-less draft on H100 whatever its metadata said."""
    draft = _draft()
    draft["metadata"]["gpu"] = "A100 80GB"
    r = autofix_dag(dag=draft)
    assert r.plan is not None and r.plan["hardware"]["gpu"] == "a100-80gb"
    draft["metadata"]["gpu"] = "no-such-accelerator"
    r = autofix_dag(dag=draft)
    assert r.plan is not None and r.plan["hardware"]["gpu"] == "h100-sxm"
    assert any("no-such-accelerator" in n and "assumed" in n for n in r.notes)


def test_a_missing_collective_is_named_as_such_and_no_message_prints_none() -> None:
    """Before: the decode shards were 'replica None decode runs the attention of layer 0 as 2 groups ...' under
    DP-ROOT-ONLY."""
    v = validate_dag(dag=_draft())
    rules = {x.rule_id for x in v.violations}
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in rules and "DP-ROOT-ONLY" not in rules, rules
    rejoin = next(x for x in v.violations if x.rule_id == "TP-REJOIN-BEFORE-NEXT-LAYER")
    assert "AllReduceNode" in (rejoin.hint or "")
    for result in (v, autofix_dag(dag=_draft()), autofix_dag(dag=_draft(model=None))):
        assert not [m for m in _messages(result) if "None" in m], _messages(result)


def test_the_answer_says_what_autofix_did_to_the_dag() -> None:
    """Before: '1 edit(s) made in place' with a patch, beside the note 'The DAG was not changed'."""
    r = autofix_dag(dag=_draft(model=None))  # no model: nothing to rebuild from, the local edits come back
    assert r.repair == "in_place" and r.patch
    assert any(c.rule_id == "TP-REJOIN-BEFORE-NEXT-LAYER" for c in r.changes)
    assert any("as read" in n for n in r.notes)  # the patch is against the DAG as read, returned whole
    answer = shape_autofix(r, "summary")
    assert "was not changed" not in (answer.note or "")


def _bypass(dag: dict[str, Any], nid: str) -> None:
    """Remove node ``nid``, wiring its inputs straight to its outputs (a collective left out of the drawing)."""
    preds = [e["source"] for e in dag["edges"] if e["target"] == nid]
    succs = [e["target"] for e in dag["edges"] if e["source"] == nid]
    dag["nodes"] = [n for n in dag["nodes"] if n["id"] != nid]
    dag["edges"] = [e for e in dag["edges"] if nid not in (e["source"], e["target"])]
    dag["edges"] += [{"source": p, "target": s, "type": "data"} for p in preds for s in succs]
    for fold in (dag.get("folds") or {}).get("layers", []):
        fold["nodes"] = [n for n in fold["nodes"] if n != nid]
        fold["carry"] = [c for c in fold.get("carry", []) if nid not in c]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([2, 4]), dp=st.sampled_from([1, 2]), keep_plan=st.booleans())
def test_tp_shards_drawn_without_their_collectives_are_a_missing_collective(tp: int, dp: int,
                                                                            keep_plan: bool) -> None:
    """Property: a built DAG whose decode attention and FFN all-reduces of a layer are left out (the shards wired
    straight on) is diagnosed by TP-REJOIN-BEFORE-NEXT-LAYER, never as DP inside a layer, and autofix makes it
    valid again; without its embedded plan the model named at the top level is still read."""
    plan = {"model": TINY, "hardware": {"gpu": "h100-sxm", "num_gpus": tp * dp}, "parallel": {"tp": tp, "dp": dp}}
    dag = copy.deepcopy(build_dag(plan=plan).dag)
    dag["edges"] = [{k: str(v) for k, v in e.items()} for e in dag["edges"]]
    for part in ("attn", "ffn"):
        _bypass(dag, f"r0.decode.L0.{part}.allreduce")
    for node in dag["nodes"]:  # as a drafter writes it: which shards form one operator is left to the structure
        for name in ("op", "tp_rank"):
            node.pop(name, None)
    if not keep_plan:
        dag.pop("plan")
    rules = {x.rule_id for x in validate_dag(dag=dag).violations}
    assert "TP-REJOIN-BEFORE-NEXT-LAYER" in rules and "DP-ROOT-ONLY" not in rules, rules
    r = autofix_dag(dag=dag)
    assert r.valid, [(v.rule_id, v.message) for v in r.violations if v.severity == "error"]
    assert validate_dag(dag=r.dag).valid


DRAFTS = Path(__file__).parent / "data"


def _violations(doc: Any) -> list[Any]:
    try:
        return validate_dag(dag=doc).violations
    except PdagInputError:  # not a DAG at all: its error names a field, not a place in a DAG
        return []
CORPUS = Path(__file__).parent / "fixtures" / "corpus"


def test_no_message_about_a_stored_draft_prints_none() -> None:
    """Before: 18 messages over these drafts printed a key the draft left unsaid, e.g. 'MoE layer (None, None, 0)'
    or 'feeds sX (layer None, stage 1)'."""
    docs = [json.loads(p.read_text()) for d in ("blind_dags4", "blind_dags5")
            for p in sorted((DRAFTS / d).glob("*.json")) if p.name != "index.json"]
    docs += [item["input"]["dag"] for p in sorted(CORPUS.glob("*.json"))
             if "dag" in (item := json.loads(p.read_text()))["input"]]
    said = [m for doc in docs for v in _violations(doc) for m in (v.message, v.hint or "")]
    assert len(said) > 100
    assert not [m for m in said if re.search(r"\bNone\b", m)]
