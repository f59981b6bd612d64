"""One meaning per word in the draft vocabulary: a role's spelling names the node the role lives on, and a table
that gives one spelling two meanings is refused when it loads (knowledge/dag_vocabulary.json)."""

from __future__ import annotations

import json

import pytest

from tools import build_dag, validate_dag
from tools.drafts import vocabulary

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
