"""Every catalog rule has a registered checker, and every checker a fixture it rejects and one it accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tools.rules.run  # noqa: F401  (every rule registered)
from tools.rules.registry import CHECKERS, FIXERS, catalog, dotted
from tools.rules.validate import validate_dag

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rules"


def run(case: dict) -> set[str]:
    kind, value = next(iter(case.items()))
    result = validate_dag(**{kind: value})
    assert not [n for n in result.notes if " failed: " in n], result.notes  # no checker crashed
    return {v.rule_id for v in result.violations}


def test_every_catalog_rule_has_a_checker():
    missing = sorted(set(catalog()) - set(CHECKERS))
    assert not missing, f"catalog rules without a checker: {missing}"


def test_every_fixer_belongs_to_a_checked_rule():
    assert set(FIXERS) <= set(CHECKERS)


@pytest.mark.parametrize("rule_id", sorted(CHECKERS))
def test_checker_has_reject_and_accept_fixture(rule_id: str):
    path = FIXTURES / f"{rule_id}.json"
    assert path.exists(), f"no fixture for {rule_id}"
    data = json.loads(path.read_text())
    assert rule_id in run(data["reject"]), f"{rule_id}: the reject fixture is not rejected"
    assert rule_id not in run(data["accept"]), f"{rule_id}: the accept fixture is rejected"


def test_catalog_checker_fields_match_registry():
    """Once tools.rules.sync_catalog has run, the catalog names the registered functions."""
    for rule_id, rule in catalog().items():
        if rule.get("checker") is None:
            pytest.skip("catalog not synced yet (python -m tools.rules.sync_catalog)")
        assert rule["checker"] == dotted(CHECKERS[rule_id].fn), rule_id
        assert rule["fixer"] == (dotted(FIXERS[rule_id]) if rule_id in FIXERS else None), rule_id
