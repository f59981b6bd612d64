"""The MCP surface's token budget, measured on the wire: tokens = characters of compact JSON / 4
(server.schemas.tokens). tools/list <= 10.2k, each default answer <= 4k on the largest presets, estimate without
repeated fields, detail="full" paged; timings in _meta so equal calls give byte-identical structured content."""

from __future__ import annotations

import json

import jsonschema
import pytest
from mcp import Client

from server import create_server
from server.paging import PAGE_CHARS
from server.schemas import tokens
from server.tools import ELAPSED_KEY
from tools import build_dag

pytestmark = pytest.mark.anyio

# Every tool that takes a plan declares the plan's fields (OpenAI strict mode and Gemini need self-contained
# schemas: no shared $defs across tools), so the plan schema is sent five times: ~8.4k tokens measured, ~9.3k since
# the plan states speculative decoding and prefix caching, ~10.5k with the workload's load fields and the decode
# pool's engine options; 10,129 once the advertised plan leaves out the allowed values of its string fields (the
# full schema is pdag://schema/plan, and an error names them). Each field and type is still declared: less would
# take fields away from strict clients, which can send only what the schema declares. 10,331 with search's
# allow_expert_tp and import_deployment's workload and objective (the load and goal a command does not state);
# 10,364 with import_deployment's hf_config (the config.json of a model with no preset).
# 10,394 with search's speculative (a method and a draft length: the plan's speculative states the rest).
# 10,352 after build_dag and lookup_rule say things in fewer words; 10,403 with parallel.dcp (decode context
# parallel, declared once: not per phase); 10,374 after estimate and search say things in fewer words too.
TOOLS_LIST_BUDGET = 10400
ANSWER_BUDGET = 4000
RESOURCES_LIST_BUDGET = 2000
LARGEST = {
    "deepseek-v3 64x h200": {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
                             "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8}},
    "llama-3.1-405b 16x h100": {"model": "llama-3.1-405b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
                                "parallel": {"pp": 2, "tp": 8}},
    "qwen3-235b 8x h200 adp": {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "num_gpus": 8},
                               "parallel": {"attn_dp": 8, "ep": 8}, "options": {"allow_attention_dp": True}},
    "invalid: deepseek-v3 tp 3": {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
                                  "parallel": {"dp": 7, "tp": 3, "ep": 5}},
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def wire(obj) -> str:
    return json.dumps(obj.model_dump(by_alias=True, mode="json", exclude_none=True), separators=(",", ":"))


async def test_tools_list_and_resources_list_within_budget():
    async with Client(create_server(), mode="legacy") as c:
        listing = await c.list_tools()
        resources = await c.list_resources()
        templates = await c.list_resource_templates()
    assert tokens(wire(listing)) <= TOOLS_LIST_BUDGET, tokens(wire(listing))
    assert tokens(wire(resources)) + tokens(wire(templates)) <= RESOURCES_LIST_BUDGET
    for tool in listing.tools:  # the compact schema still names every argument and says which are required
        assert tool.input_schema["additionalProperties"] is False
        assert "$defs" not in json.dumps(tool.input_schema)
    by_name = {t.name: t for t in listing.tools}
    plan = by_name["build_dag"].input_schema["properties"]["plan"]
    assert set(plan["properties"]) >= {"model", "hardware", "parallel", "workload", "options"}
    assert plan["properties"]["hardware"]["required"] == ["gpu", "num_gpus"]
    for name in ("validate_dag", "autofix_dag", "estimate_performance", "export_plan"):  # one plan schema
        assert {k: v for k, v in by_name[name].input_schema["properties"]["plan"].items() if k != "description"} \
            == {k: v for k, v in plan.items() if k != "description"}, name
    assert "enum" not in json.dumps(plan) and plan["properties"]["dtype"] == {"type": "string"}


async def test_a_value_outside_the_plans_unadvertised_enums_is_refused_naming_the_allowed_ones():
    plan = {**LARGEST["llama-3.1-405b 16x h100"], "dtype": "bfloat16", "engine": "tgi"}
    async with Client(create_server()) as c:
        for name in ("build_dag", "validate_dag", "estimate_performance"):
            r = await c.call_tool(name, {"plan": plan})
            assert r.is_error, name
            text = r.content[0].text
            assert "plan.dtype" in text and "'bf16'" in text and "plan.engine" in text and "'vllm'" in text, text


async def test_compact_schema_keeps_strictness_with_field_naming_errors():
    async with Client(create_server()) as c:
        bad = await c.call_tool("build_dag", {"plan": {**LARGEST["deepseek-v3 64x h200"],
                                                       "parallel": {"tp": 0, "bogus": 1}}})
    assert bad.is_error
    msg = bad.content[0].text
    assert "plan.parallel.tp" in msg and ">= 1" in msg and "plan.parallel.bogus" in msg


def _calls(plan: dict) -> list[tuple[str, dict]]:
    return [(n, {"plan": plan}) for n in ("build_dag", "validate_dag", "autofix_dag", "estimate_performance")]


async def test_default_answers_within_budget_on_the_largest_presets():
    async with Client(create_server()) as c:
        listing = {t.name: t for t in (await c.list_tools()).tools}
        calls = [call for plan in LARGEST.values() for call in _calls(plan)]
        calls += [("search_strategies", {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 16}}),
                  ("lookup_rule", {"query": "expert parallel all-to-all", "limit": 25})]
        for name, args in calls:
            r = await c.call_tool(name, args)
            assert not r.is_error, (name, r.content[0].text)
            text = r.content[0].text
            assert tokens(text) <= ANSWER_BUDGET, (name, tokens(text))
            jsonschema.validate(r.structured_content, listing[name].output_schema)


async def test_estimate_summary_does_not_repeat_fields():
    async with Client(create_server()) as c:
        r = await c.call_tool("estimate_performance", {"plan": LARGEST["deepseek-v3 64x h200"]})
    data = r.structured_content
    for repeated in ("critical_path", "bottleneck", "fits"):
        assert repeated not in data
    assert data["prefill"]["critical_path"] and data["decode"]["bottleneck"]  # kept once, per phase
    assert data["memory"]["fits"] is True and "kv_cache_bytes_total" not in data["memory"]
    assert data["kv_cache"]["bytes_total"] > 0


@pytest.mark.slow  # pages a whole 64-GPU DAG over MCP: ~13 s; .ci/run runs it
async def test_full_detail_is_paged_and_reassembles():
    plan = LARGEST["deepseek-v3 64x h200"]
    async with Client(create_server()) as c:
        output_schema = {t.name: t for t in (await c.list_tools()).tools}["build_dag"].output_schema
        nodes: list = []
        edges: list = []
        working_nodes: list = []
        cursor = None
        pages = 0
        while True:
            args = {"plan": plan, "detail": "full"} | ({"cursor": cursor} if cursor else {})
            r = await c.call_tool("build_dag", args)
            assert not r.is_error, r.content[0].text
            assert len(r.content[0].text) <= PAGE_CHARS + 1000
            jsonschema.validate(r.structured_content, output_schema)
            page = r.structured_content
            part = page["page"]["part"]
            assert "dag" in page or part != "dag"  # the working form first, then the expansion
            working_nodes += page.get("dag", {}).get("nodes", [])
            if part != "dag":
                (nodes if part == "nodes" else edges).extend(page["page"]["items"])
            pages += 1
            cursor = page.get("next_cursor")
            assert cursor == page["page"]["cursor"]
            if cursor is None:
                break
        assert pages > 2
        bad = await c.call_tool("build_dag", {"plan": plan, "detail": "full", "cursor": "nodes:99999999"})
    assert bad.is_error and "cursor" in bad.content[0].text
    assert len(nodes) == page["page"]["total_nodes"] and len(edges) == page["page"]["total_edges"]
    assert len(working_nodes) == len(build_dag(plan).dag["nodes"])
    assert len({n["id"] for n in nodes}) == len(nodes)


async def test_equal_calls_give_byte_identical_bodies_and_timings_in_meta():
    plan = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 3}}
    async with Client(create_server(), mode="legacy") as c:
        for name, args in [("validate_dag", {"plan": plan}), ("autofix_dag", {"plan": plan}),
                           ("search_strategies", {"model": "mixtral-8x7b",
                                                  "hardware": {"gpu": "h100-sxm", "num_gpus": 4}})]:
            a = await c.call_tool(name, args)
            b = await c.call_tool(name, args)
            assert not a.is_error
            assert json.dumps(a.structured_content) == json.dumps(b.structured_content)
            assert a.content[0].text == b.content[0].text
            assert "elapsed_ms" not in a.content[0].text
            assert a.meta[ELAPSED_KEY] >= 0
