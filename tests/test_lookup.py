"""lookup_rule: by id, by relevance, by topic; errors that point to the right id."""

from __future__ import annotations

import pytest

from tools import lookup_rule
from tools.core.errors import PdagInputError
from tools.rules.lookup import catalog, rule_ids


def test_by_id_is_case_insensitive_and_complete():
    r = lookup_rule(rule_id="tp-heads-divisible")
    assert [x.id for x in r.rules] == ["TP-HEADS-DIVISIBLE"] and r.total_matches == 1
    rule = r.rules[0]
    assert rule.statement and rule.rationale and rule.source[0].seed and rule.source[0].section
    assert rule.examples.violating and rule.examples.satisfying
    assert "checker" in rule.model_dump() and "fixer" in rule.model_dump()
    assert rule.related


def test_every_catalog_id_resolves():
    for rid in rule_ids():
        assert lookup_rule(rule_id=rid).rules[0].id == rid


def test_conflict_ids_resolve():
    cid = catalog()["conflicts"][0]["id"]
    r = lookup_rule(rule_id=cid.lower())
    assert r.rules == [] and r.conflicts[0].id == cid


def test_unknown_id_lists_closest():
    with pytest.raises(PdagInputError) as e:
        lookup_rule(rule_id="TP-HEAD-DIVISIBLE")
    assert e.value.field == "rule_id"
    assert "TP-HEADS-DIVISIBLE" in (e.value.allowed or "")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("KV cache size with MLA latent", "KV-FORMULA-MLA"),
        ("is data parallelism good for latency", "DP-NOT-FOR-LATENCY"),
        ("tensor parallel inside experts", "EP-NO-EXPERT-TP"),
        ("attention heads divisible by tp", "TP-HEADS-DIVISIBLE"),
    ],
)
def test_query_ranks_the_obvious_rule_first_three(query, expected):
    ids = [r.id for r in lookup_rule(query=query, limit=3).rules]
    assert expected in ids


def test_query_is_deterministic_and_scored():
    a = lookup_rule(query="pipeline stages layers", limit=10)
    b = lookup_rule(query="pipeline stages layers", limit=10)
    assert [r.id for r in a.rules] == [r.id for r in b.rules]
    scores = [r.score for r in a.rules]
    assert all(s is not None and s > 0 for s in scores) and scores == sorted(scores, reverse=True)


def test_query_without_matches_is_empty():
    r = lookup_rule(query="zzzz qqqq")
    assert r.rules == [] and r.total_matches == 0


def test_topic_filters_combine():
    r = lookup_rule(strategy="sp", phase="decode", limit=100)
    assert r.rules and all("SP" in x.strategies and x.scope.phase in ("decode", "both") for x in r.rules)
    r = lookup_rule(node_type="Expert", layer="operator", limit=100)
    assert r.rules and all("ExpertNode" in x.node_types and x.scope.level == "operator" for x in r.rules)


def test_limit_and_total():
    r = lookup_rule(strategy="TP", limit=2)
    assert len(r.rules) == 2 and r.total_matches > 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"strategy": "XP"}, "strategy"), ({"phase": "training"}, "phase"), ({"node_type": "Foo"}, "node_type"),
     ({"layer": "kernel"}, "layer"), ({"limit": 0}, "limit"), ({"query": "x" * 600}, "query")],
)
def test_bad_filters_name_the_field(kwargs, field):
    with pytest.raises(PdagInputError) as e:
        lookup_rule(**kwargs)
    assert e.value.field == field and e.value.allowed
