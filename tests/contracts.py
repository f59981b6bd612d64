"""The contract every property test holds validate_dag and autofix_dag to, written once."""

from __future__ import annotations

from typing import Any

from tools import autofix_dag, validate_dag


def assert_no_crashed_checker(notes: list[str]) -> None:
    assert not [n for n in notes if " failed: " in n], notes


def assert_fix_contract(plan: dict[str, Any]) -> None:
    """Neither tool crashes; fixing never turns a valid plan invalid; the fixed plan validates, or every error
    left says why; fixing a fixed plan changes nothing."""
    v = validate_dag(plan=plan)
    assert_no_crashed_checker(v.notes)
    r = autofix_dag(plan=plan)
    assert_no_crashed_checker(r.notes)
    if v.valid:
        assert r.valid
    if r.valid:
        assert validate_dag(plan=r.plan).valid
    else:
        assert all(x.reason for x in r.violations if x.severity == "error")
    assert autofix_dag(plan=r.plan).changes == []
