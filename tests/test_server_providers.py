"""The live tools/list against the rules of the LLM providers agents run on, so that every client framework can
hand pdag's tools to its model without rewriting or dropping them.

Provider rules, as documented (checked 2026-11 with the `search` reference corpus):
- OpenAI: a function description is at most 1,024 characters (the API answers "Invalid
  'tools[i].function.description': string too long. Expected a string with maximum length 1024", e.g.
  getsentry/sentry-mcp#106, langchain-ai/open_deep_research#80). Strict mode (platform.openai.com/docs/guides/
  function-calling#strict-mode and structured-outputs#supported-schemas): the root is an object, every object
  has `additionalProperties: false` and lists every property in `required`, an optional field is emulated with
  a null type, only a subset of keywords, at most 5 levels / 100 properties in the first published limits.
  openai-agents (`agents/strict_schema.py`) and langchain `strict=True` convert MCP schemas this way; an object
  without properties then closes to `{}`.
- Gemini: FunctionDeclaration.parameters is a Schema, "a select subset of an OpenAPI 3.0 schema object"
  (ai.google.dev/api and cloud.google.com/vertex-ai/docs/reference/rest/v1beta1/FunctionDeclaration): type,
  format, title, description, nullable, enum, min/maxItems, properties, required, min/maxProperties,
  min/maxLength, pattern, example, anyOf, propertyOrdering, default, items, minimum, maximum; no $ref, $defs
  or additionalProperties; parameters must have properties ("should be non-empty for OBJECT type",
  agno-agi/agno#2112); properties only on objects (anomalyco/opencode#11888).
- Anthropic: `input_schema` is a JSON Schema (draft 2020-12) whose top-level `type` is "object" (the SDK's
  `InputSchemaTyped.type: Required[Literal["object"]]`), without oneOf/allOf/anyOf at the top level ("input_schema
  does not support oneOf, allOf, or anyOf at the top level", anthropics/claude-code#5973); names match
  ^[a-zA-Z0-9_-]{1,64}$.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from anthropic.types.tool_param import InputSchemaTyped
from jsonschema import Draft202012Validator
from mcp import Client
from pydantic import TypeAdapter

from server import create_server
from tests.provider_schemas import (
    gemini_problems,
    open_objects,
    openai_strict_problems,
    property_paths,
    strict_call,
    to_gemini,
    to_openai_strict,
)

pytestmark = pytest.mark.anyio

DESCRIPTION_LIMIT = 1024
PLAN = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}
# One real call per tool, as an agent writes it (optional arguments left out).
CALLS: dict[str, dict[str, Any]] = {
    "build_dag": {"plan": PLAN},
    "validate_dag": {"plan": {**PLAN, "workload": {"batch_size": 4}}},
    "autofix_dag": {"plan": {**PLAN, "parallel": {"tp": 3}}},
    "estimate_performance": {"plan": PLAN, "sla": {"max_tpot_ms": 50}},
    "lookup_rule": {"query": "tensor parallel heads", "limit": 3},
    "search_strategies": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                          "slo": {"max_tpot_ms": 50}, "top_k": 2},
    "import_deployment": {"command": "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2"},
    "export_plan": {"plan": PLAN, "engine": "vllm"},
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def listing() -> list[dict[str, Any]]:
    """tools/list as it goes on the wire (camelCase keys, no nulls)."""
    import anyio

    async def fetch() -> list[dict[str, Any]]:
        async with Client(create_server(), mode="legacy") as c:
            tools = (await c.list_tools()).tools
        return [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools]

    return anyio.run(fetch)


def undeclared_objects(schema: Any, path: str = "") -> list[str]:
    """Objects that say neither which properties they take nor that they take any (additionalProperties)."""
    found: list[str] = []
    if isinstance(schema, dict):
        kind = schema.get("type")
        if (kind == "object" or (isinstance(kind, list) and "object" in kind)) and \
                "properties" not in schema and "additionalProperties" not in schema:
            found.append(path or "root")
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    found += undeclared_objects(sub, f"{path}.{name}")
            elif isinstance(value, dict):
                found += undeclared_objects(value, f"{path}/{key}")
            elif isinstance(value, list):
                for i, sub in enumerate(value):
                    found += undeclared_objects(sub, f"{path}/{key}[{i}]")
    return found


def test_every_tool_has_a_real_call(listing):
    assert sorted(t["name"] for t in listing) == sorted(CALLS)


def test_descriptions_fit_openai_limit(listing):
    too_long = {t["name"]: len(t["description"]) for t in listing if len(t["description"]) > DESCRIPTION_LIMIT}
    assert not too_long


def test_no_undeclared_input_objects(listing):
    assert {t["name"]: undeclared_objects(t["inputSchema"]) for t in listing} == {t["name"]: [] for t in listing}


# Free-form objects: a Hugging Face config.json, an inline accelerator, a drafted DAG, an engine's YAML. Strict mode
# has no form for them (docs/mcp-clients.md says what each client does); any new one must be added here knowingly.
PLAN_OPEN = {".plan.hardware.gpu", ".plan.model.hf_config", ".plan.speculative.draft_model.hf_config"}
DAG_OPEN = {".dag", ".dag.nodes[]", ".dag.edges[]"}
OPEN = {"build_dag": PLAN_OPEN, "validate_dag": PLAN_OPEN | DAG_OPEN, "autofix_dag": PLAN_OPEN | DAG_OPEN,
        "estimate_performance": PLAN_OPEN | DAG_OPEN, "lookup_rule": set(),
        "search_strategies": {".hardware.gpu", ".model.hf_config"},
        "import_deployment": {".engine_config", ".decode_engine_config", ".hf_config"}, "export_plan": PLAN_OPEN}


def test_open_objects_are_the_free_form_documents_only(listing):
    assert {t["name"]: open_objects(t["inputSchema"]) for t in listing} == OPEN


def test_the_checks_catch_what_providers_refuse():
    """The checkers below are not vacuous: each flags the shape its provider refuses."""
    assert undeclared_objects({"type": "object", "properties": {"x": {"type": "object"}}}) == [".x"]
    loose = {"type": "object", "properties": {"x": {"type": "object", "additionalProperties": True}}}
    assert openai_strict_problems(loose)
    assert gemini_problems({"type": "object", "properties": {"x": {"type": ["string", "null"]}}})
    assert gemini_problems({"type": "object", "properties": {}})
    with pytest.raises(ValueError):
        to_gemini({"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}})


@pytest.mark.parametrize("name", sorted(CALLS))
def test_openai_strict_form_is_a_valid_schema_that_openai_accepts(listing, name):
    schema = next(t for t in listing if t["name"] == name)["inputSchema"]
    strict = to_openai_strict(schema)
    Draft202012Validator.check_schema(strict)
    assert openai_strict_problems(strict) == []
    assert property_paths(strict) == property_paths(schema)


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_a_strict_client_call_gets_the_same_answer(listing, name):
    """The call a strict client sends (every property, null for the optional ones left out) is valid against the
    strict schema and answered exactly as the plain call."""
    strict = to_openai_strict(next(t for t in listing if t["name"] == name)["inputSchema"])
    call = strict_call(strict, CALLS[name])
    assert call != CALLS[name] and None in call.values()
    Draft202012Validator(strict).validate(call)
    async with Client(create_server(), mode="legacy") as c:
        plain = await c.call_tool(name, CALLS[name])
        nulls = await c.call_tool(name, call)
    assert not plain.is_error, plain.content[0].text
    assert not nulls.is_error, nulls.content[0].text
    assert nulls.structured_content == plain.structured_content


@pytest.mark.parametrize("name", sorted(CALLS))
def test_gemini_form_keeps_every_property_within_the_subset(listing, name):
    schema = next(t for t in listing if t["name"] == name)["inputSchema"]
    assert "$defs" not in schema and "$ref" not in str(schema)  # inlined already: nothing to resolve
    gemini = to_gemini(schema)
    assert gemini_problems(gemini) == []
    assert property_paths(gemini) == property_paths(schema)


def test_anthropic_input_schemas(listing):
    adapter = TypeAdapter(InputSchemaTyped)
    for tool in listing:
        schema = tool["inputSchema"]
        assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool["name"])
        adapter.validate_python(schema)  # top-level type "object", properties an object, required a list
        assert not {"anyOf", "oneOf", "allOf"} & set(schema), tool["name"]
        Draft202012Validator.check_schema(schema)


DISAGG = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 8},
          "options": {"disaggregated": True}}
MORE_CALLS = [(name, args) for name, args in CALLS.items()] + [
    ("validate_dag", {"plan": DISAGG, "detail": "full"}),
    ("autofix_dag", {"plan": {**PLAN, "parallel": {"tp": 3}}, "detail": "full"}),
    ("estimate_performance", {"plan": DISAGG, "detail": "full"}),
    ("search_strategies", {**CALLS["search_strategies"], "serving": True, "detail": "full"}),
]


async def test_output_schemas_declare_every_key_the_answers_carry(listing):
    """Clients that build a type from outputSchema (fastmcp's `.data`) drop undeclared keys."""
    declared = {t["name"]: set(t["outputSchema"]["properties"]) for t in listing}
    undeclared: dict[str, set[str]] = {}
    async with Client(create_server(), mode="legacy") as c:
        for name, args in MORE_CALLS:
            r = await c.call_tool(name, args)
            assert not r.is_error, (name, r.content[0].text)
            undeclared.setdefault(name, set()).update(set(r.structured_content) - declared[name])
    assert undeclared == {name: set() for name in undeclared}
