"""Published JSON Schemas, generated from the pydantic models (the one source of truth)."""

from __future__ import annotations

import json
from typing import Any

from knowledge import ROOT
from tools.core.dag import dag_json_schema
from tools.core.engine_profile import EngineProfile
from tools.core.plan import Plan
from tools.engines.conformance import corpus_json_schema

SCHEMA_DIR = ROOT / "schemas"


def plan_json_schema() -> dict[str, Any]:
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://pdag.dev/schema/plan-v1.json"
    return schema


def engine_json_schema() -> dict[str, Any]:
    schema = EngineProfile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://pdag.dev/schema/engine-v1.json"
    return schema


SCHEMAS = {"dag": dag_json_schema, "plan": plan_json_schema, "engine": engine_json_schema,
           "conformance": corpus_json_schema}


def render(name: str) -> str:
    return json.dumps(SCHEMAS[name](), indent=2, sort_keys=True) + "\n"


def write_all() -> None:
    """Refresh the committed copies under knowledge/schemas/ (run after changing a model)."""
    for name in SCHEMAS:
        (SCHEMA_DIR / f"{name}.schema.json").write_text(render(name), encoding="utf-8")


if __name__ == "__main__":
    write_all()
