"""`null` for a defaulted field means the field is absent (strict function-calling clients send every property,
null for the ones the model leaves out); a field whose type takes null keeps its null."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tools import autofix_dag, validate_dag
from tools.core.absent import without_nulls
from tools.core.plan import Plan

PLAN = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"tp": 4}}
NULLS = {"model": "llama-3.1-8b", "checkpoint": None, "phases": None, "workload": None, "dtype": None,
         "objective": None, "options": {"allow_expert_tp": None, "layer_split": None}, "engine_options": None,
         "hardware": {"gpu": "h100-sxm", "num_gpus": 4, "gpus_per_node": None, "network": None},
         "parallel": {"dp": None, "pp": None, "tp": 4, "ep": None, "sp": None, "attn_dp": None}}


def test_null_fields_parse_as_their_defaults():
    assert Plan.model_validate(NULLS) == Plan.model_validate(PLAN)


def test_a_field_that_takes_null_keeps_it_and_a_required_one_stays_required():
    assert Plan.model_validate({**PLAN, "kv_dtype": None}).kv_dtype is None
    with pytest.raises(ValidationError):
        Plan.model_validate({**PLAN, "hardware": {"gpu": "h100-sxm", "num_gpus": None}})


def test_free_form_objects_keep_their_nulls():
    hf = {"hf_config": {"model_type": "llama", "rope_scaling": None}}
    assert without_nulls(Plan, {**NULLS, "model": hf})["model"] == hf
    assert without_nulls(Plan, NULLS)["parallel"] == {"tp": 4}


def test_the_rules_and_repairs_read_null_as_absent():
    assert validate_dag(plan=NULLS).model_dump() == validate_dag(plan=PLAN).model_dump()
    fixed = autofix_dag(plan={**NULLS, "parallel": {**NULLS["parallel"], "tp": 3}})
    assert fixed.valid and fixed.plan["parallel"] == {"tp": 4} and "dtype" not in fixed.plan
