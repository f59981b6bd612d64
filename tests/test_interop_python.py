"""The Python MCP client frameworks agents run on, against the real server over stdio and streamable HTTP: each
lists pdag's tools, converts them the way the framework does before a model sees them, and invokes tools directly
(no model call, no API key). docs/mcp-clients.md states the caveats these tests pin.

- openai-agents: MCPServerStdio / MCPServerStreamableHttp, MCPUtil's strict conversion
  (`convert_schemas_to_strict=True`), FunctionTool.on_invoke_tool as the runner calls it.
- fastmcp: fastmcp.Client, whose `.data` is a type built from each tool's outputSchema.

The packages come from the `interop` extra; without them these tests skip, except in CI (PDAG_REQUIRE_INTEROP=1).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from mcp import Client

from server import create_server
from tests.provider_schemas import open_objects, openai_strict_problems, strict_call
from tests.servers import ROOT, SERVER_ARGS, http_server, interop_client

pytestmark = pytest.mark.anyio

TOOLS = {"build_dag", "validate_dag", "autofix_dag", "estimate_performance", "lookup_rule", "search_strategies",
         "import_deployment", "export_plan"}
PLAN = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}
BAD_TP = {**PLAN, "parallel": {"tp": 3}}  # 32 heads do not split 3 ways, and 3 GPUs are more than 2
STDIO_ENV = {"PYTHONPATH": str(ROOT)}  # the SDK's stdio client passes on only a few variables besides these


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def url():
    with http_server() as u:
        yield u


@pytest.fixture(scope="module")
def advertised() -> dict[str, dict[str, Any]]:
    """Each tool's input schema as the server advertises it (to compare with what a framework made of it)."""
    import anyio

    async def fetch() -> dict[str, dict[str, Any]]:
        async with Client(create_server(), mode="legacy") as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}

    return anyio.run(fetch)


# ------------------------------------------------------------------------------------------ openai-agents


def agents_server(transport: str, url: str | None):
    agents_mcp = interop_client("agents.mcp")
    if transport == "stdio":
        return agents_mcp.MCPServerStdio({"command": sys.executable, "args": SERVER_ARGS, "cwd": str(ROOT),
                                   "env": STDIO_ENV}, client_session_timeout_seconds=60)
    return agents_mcp.MCPServerStreamableHttp({"url": url, "timeout": 60}, client_session_timeout_seconds=60)


async def invoke(tool, arguments: dict[str, Any]) -> str:
    """Run a FunctionTool as the agent runner does when the model asks for it; the text the model would read."""
    from agents.tool_context import ToolContext

    raw = json.dumps(arguments)
    out = await tool.on_invoke_tool(ToolContext(None, tool_name=tool.name, tool_call_id="call_1",
                                                tool_arguments=raw), raw)
    assert isinstance(out, dict) and out["type"] == "text", out  # one text block: pdag's JSON answer or its error
    return out["text"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_openai_agents_strict_conversion_and_direct_calls(request, transport, advertised):
    agents = interop_client("agents")
    agents_mcp = interop_client("agents.mcp")
    server = agents_server(transport, request.getfixturevalue("url") if transport == "http" else None)
    async with server:
        tools = await agents_mcp.MCPUtil.get_function_tools(server, convert_schemas_to_strict=True,
                                                            run_context=agents.RunContextWrapper(None),
                                                            agent=agents.Agent(name="pdag-interop"))
        by_name = {t.name: t for t in tools}
        assert set(by_name) == TOOLS

        # The converter keeps a tool strict exactly when its schema has no free-form object (docs/mcp-clients.md):
        # the others are sent non-strict with the schema as advertised.
        strict = {name for name, t in by_name.items() if t.strict_json_schema}
        assert strict == {name for name, schema in advertised.items() if not open_objects(schema)}
        assert "lookup_rule" in strict
        for name in strict:
            assert openai_strict_problems(by_name[name].params_json_schema) == [], name
        for name in TOOLS - strict:
            assert by_name[name].params_json_schema == advertised[name]

        # A strict model sends every property, null for those it leaves out: answered as the plain call.
        lookup = by_name["lookup_rule"]
        nulls = strict_call(lookup.params_json_schema, {"rule_id": "tp-heads-divisible"})
        assert nulls["query"] is None
        for arguments in ({"rule_id": "tp-heads-divisible"}, nulls):
            rules = json.loads(await invoke(lookup, arguments))["rules"]
            assert [r["id"] for r in rules] == ["TP-HEADS-DIVISIBLE"]

        built = json.loads(await invoke(by_name["build_dag"], {"plan": PLAN}))
        assert built["gpus_used"] == 2 and built["summary"]["model"] == "llama-3.1-8b"
        report = json.loads(await invoke(by_name["validate_dag"], {"plan": BAD_TP}))
        assert report["valid"] is False
        assert {"TP-HEADS-DIVISIBLE", "GPU-EXCEEDS-CLUSTER"} <= {v["rule_id"] for v in report["violations"]}

        refused = await invoke(by_name["build_dag"], {"plan": {**PLAN, "parallel": {"tp": -1}}})
        assert "plan.parallel.tp" in refused and "Traceback" not in refused


# ------------------------------------------------------------------------------------------ fastmcp


def fastmcp_client(transport: str, url: str | None):
    fastmcp = interop_client("fastmcp")
    if transport == "stdio":
        from fastmcp.client.transports import StdioTransport

        return fastmcp.Client(StdioTransport(sys.executable, SERVER_ARGS, env=STDIO_ENV, cwd=str(ROOT),
                                             keep_alive=False), timeout=60)
    return fastmcp.Client(url, timeout=60)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_fastmcp_typed_data_and_errors(request, transport):
    interop_client("fastmcp")
    client = fastmcp_client(transport, request.getfixturevalue("url") if transport == "http" else None)
    from fastmcp.exceptions import ToolError

    async with client:
        assert {t.name for t in await client.list_tools()} == TOOLS

        built = await client.call_tool("build_dag", {"plan": PLAN})
        # .data is built from the output schema: every top-level key is kept, nested objects stay dictionaries.
        assert built.data is not None, "fastmcp could not read the answer through build_dag's outputSchema"
        for key, value in built.structured_content.items():
            assert getattr(built.data, key) == value, key
        assert built.data.gpus_used == 2 and built.data.summary["model"] == "llama-3.1-8b"

        report = await client.call_tool("validate_dag", {"plan": BAD_TP})
        assert report.data.valid is False and report.data.error_count >= 2
        assert "TP-HEADS-DIVISIBLE" in {v["rule_id"] for v in report.data.violations}

        rule = await client.call_tool("lookup_rule", {"rule_id": "pp-linear-chain"})
        assert [r["id"] for r in rule.data.rules] == ["PP-LINEAR-CHAIN"]

        bad = {"plan": {**PLAN, "parallel": {"tp": -1}}}
        kept = await client.call_tool("build_dag", bad, raise_on_error=False)
        assert kept.is_error and kept.data is None and "plan.parallel.tp" in kept.content[0].text
        with pytest.raises(ToolError, match=r"plan\.parallel\.tp"):
            await client.call_tool("build_dag", bad)
