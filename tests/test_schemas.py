"""The committed JSON Schemas are exactly what the pydantic models generate, and they accept real documents."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tools.schemas import SCHEMA_DIR, SCHEMAS, render


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_is_fresh(name):
    committed = (SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8")
    assert committed == render(name), "run: python -m tools.schemas"


def test_plan_schema_accepts_the_contract_example_and_rejects_unknown_keys():
    schema = json.loads(render("plan"))
    example = {
        "model": "llama-3.1-70b",
        "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
        "parallel": {"dp": 1, "pp": 1, "tp": 8, "ep": 1, "sp": 1},
        "phases": {"prefill": {"sp": 2}},
        "workload": {"input_len": 2048, "output_len": 128, "batch_size": 1},
        "dtype": "bf16",
        "kv_dtype": "bf16",
        "objective": "latency",
        "options": {"allow_expert_tp": False},
    }
    jsonschema.Draft202012Validator(schema).validate(example)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate({**example, "parallel": {"tq": 2}})
