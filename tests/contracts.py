"""The contract every property test holds validate_dag and autofix_dag to, written once."""

from __future__ import annotations

from typing import Any

from tools import autofix_dag, validate_dag
from tools.core.errors import PdagInputError
from tools.core.models import ModelSpec, from_hf_config


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


def read_or_named(cfg: dict[str, Any]) -> ModelSpec | None:
    """An arbitrary config.json is read into a model with positive parameters and non-negative KV/state bytes, or
    refused naming an hf_config field; None when refused."""
    try:
        spec = from_hf_config(cfg)
    except PdagInputError as exc:
        assert exc.field.startswith("hf_config")
        return None
    assert spec.param_count() > 0
    assert spec.kv_bytes_per_token(2) >= 0 and spec.state_bytes_per_sequence() >= 0
    return spec
