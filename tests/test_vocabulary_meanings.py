"""One meaning per word in the draft vocabulary: a role's spelling names the node the role lives on, and a table
that gives one spelling two meanings is refused when it loads (knowledge/dag_vocabulary.json)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools import build_dag, validate_dag
from tools.drafts import dialect, vocabulary

PLAN = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
        "dtype": "fp8"}


def test_a_shared_expert_spelled_so_stays_the_ffn_beside_the_experts() -> None:
    dag = build_dag(plan=PLAN).dag
    shared = [n for n in dag["nodes"] if n.get("role") == "shared_expert"]
    assert shared and validate_dag(dag=dag).valid
    for n in shared:
        n["type"] = "shared_expert"
        del n["role"]
    result = validate_dag(dag=dag)
    assert result.valid, [v.rule_id for v in result.violations]


@pytest.mark.parametrize("role, node_type", [("dispatch", "AllToAllNode"), ("combine", "AllToAllNode"),
                                             ("shared_expert", "FFNNode"), ("sampler", "LMHeadNode")])
def test_every_role_spelling_names_the_node_the_role_lives_on(role: str, node_type: str) -> None:
    t = vocabulary.tables()
    spellings = [k for k, r in t["roles"].items() if r == role]
    assert spellings and all(t["node_types"][k] == node_type for k in spellings)


def test_a_table_giving_one_spelling_two_meanings_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = json.loads(json.dumps(vocabulary.vocabulary()))
    doc["node_types"]["ExpertNode"].append("sharedexpert")  # the old double meaning
    monkeypatch.setattr(vocabulary, "vocabulary", lambda: doc)
    vocabulary.tables.cache_clear()
    try:
        with pytest.raises(ValueError, match="one meaning"):
            vocabulary.tables()
    finally:
        vocabulary.tables.cache_clear()


def _stale(monkeypatch: pytest.MonkeyPatch, edit: Any) -> None:
    doc = json.loads(json.dumps(vocabulary.vocabulary()))
    edit(doc)
    monkeypatch.setattr(vocabulary, "vocabulary", lambda: doc)
    vocabulary.tables.cache_clear()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["readings"]["mesh_axis_fields"].append("coord"), "both"),  # axis and coordinate at one position
    (lambda d: d["readings"]["endpoint_fields"].append("next"), "both"),  # a GPU end and a successor, undeclared
    (lambda d: d["readings"].update(new_words=["x"]), "no entry in 'positions'"),
    (lambda d: d["shared_spellings"]["entries"].append(
        {"spellings": ["vertices"], "position": "document key", "tables": ["document"], "decided_by": "-"}),
     "remove the entry"),
])
def test_every_table_is_checked_for_one_meaning_per_position(monkeypatch: pytest.MonkeyPatch, edit: Any,
                                                             message: str) -> None:
    _stale(monkeypatch, edit)
    try:
        with pytest.raises(ValueError, match=message):
            vocabulary.tables()
    finally:
        vocabulary.tables.cache_clear()


def test_the_shipped_vocabulary_declares_every_shared_spelling() -> None:
    vocabulary.tables.cache_clear()
    vocabulary.one_meaning_per_position()  # raises otherwise
    assert set(vocabulary.vocabulary()["positions"]) - {"about"} == (
        set(vocabulary.vocabulary()["readings"]) - {"about"}) | {
        "document", "node_fields", "edge_fields", "edge_types", "phases", "node_types", "roles", "phase_initials"}


def _mesh_draft(node: dict[str, Any]) -> dict[str, Any]:
    dag = build_dag(plan={"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                          "parallel": {"tp": 2}}).dag
    every = sorted({g for n in dag["nodes"] for g in n["devices"]})
    target = next(n for n in dag["nodes"] if n["type"] == "AttentionNode" and n["devices"] == [1])
    del target["devices"]
    target.update(node)
    return {**dag, "device_mesh": {"devices": every, "axes": {"tp": {"size": len(every)}}}}


def test_rank_beside_a_mesh_axis_is_refused_with_both_readings() -> None:
    result = validate_dag(dag=_mesh_draft({"mesh_axis": "tp", "rank": 1}))
    refused = [v for v in result.violations if v.rule_id == "STRUCT-ONE-READING"]
    assert not result.valid and len(refused) == 1
    text = refused[0].message
    assert "'rank'" in text and "GPU ids" in text and "mesh axis 'tp'" in text
    assert "'gpu'" in text and "'coord'" in text  # both spellings offered


@pytest.mark.parametrize("node", [{"gpu": 1}, {"devices": {"mesh_axis": "tp", "coord": 1}}, {"rank": 1}])
def test_one_meaning_spellings_read_without_refusal(node: dict[str, Any]) -> None:
    result = validate_dag(dag=_mesh_draft(node))
    assert result.valid, [(v.rule_id, v.message) for v in result.violations if v.severity == "error"]


def test_the_reading_is_a_declared_table_of_documented_stages() -> None:
    names = [s.name for s in dialect.STAGES]
    assert len(names) == len(set(names)) and names.index("two readings") < names.index("nodes")
    assert all(s.read.__doc__ and s.read.__doc__.strip() for s in dialect.STAGES)
