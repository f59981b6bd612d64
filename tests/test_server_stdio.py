"""The server as Claude Desktop runs it: a real `python -m server` subprocess driven by the official client."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
PARAMS = StdioServerParameters(command=sys.executable, args=["-m", "server"], cwd=str(ROOT),
                               env={"PYTHONPATH": str(ROOT)})
SMALL = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}
ARGS = {
    "build_dag": {"plan": SMALL},
    "validate_dag": {"plan": SMALL},
    "autofix_dag": {"plan": SMALL},
    "estimate_performance": {"plan": SMALL},
    "lookup_rule": {"rule_id": "TP-HEADS-DIVISIBLE"},
    "search_strategies": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}},
    "import_deployment": {"command": "vllm serve meta-llama/Llama-3.1-8B-Instruct"},
    "export_plan": {"plan": SMALL, "engine": "sglang"},
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def test_stdio_round_trip():
    async with Client(PARAMS, read_timeout_seconds=60) as c:
        names = [t.name for t in (await c.list_tools()).tools]
        assert set(names) == set(ARGS)
        for name in names:
            r = await c.call_tool(name, ARGS[name])
            assert not r.is_error, (name, r.content)
            assert r.structured_content
        bad = await c.call_tool("build_dag", {"plan": {**SMALL, "parallel": {"tp": -1}}})
        assert bad.is_error and "plan.parallel.tp" in bad.content[0].text
        with pytest.raises(MCPError) as e:
            await c.call_tool("definitely_not_a_tool", {})
        assert e.value.error.code == -32602
        again = await c.call_tool("build_dag", {"plan": SMALL})  # still serving
        assert not again.is_error and again.structured_content["gpus_used"] == 1


async def test_stdio_legacy_handshake():
    async with stdio_client(PARAMS) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.server_info.name == "pdag" and init.protocol_version == "2025-11-25"
        r = await session.call_tool("lookup_rule", {"query": "kv cache mla", "limit": 2})
        assert not r.is_error


async def test_stdio_carries_a_full_page_larger_than_a_pipe_buffer():
    big = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
           "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8}}
    async with Client(PARAMS, read_timeout_seconds=60) as c:
        first = await c.call_tool("build_dag", {"plan": big, "detail": "full"})
        second = await c.call_tool("build_dag", {"plan": big, "detail": "full", "cursor": "dag:1"})
    assert not first.is_error and len(first.content[0].text) > 65536
    assert first.structured_content["next_cursor"] == "dag:1" and second.structured_content["page"]["index"] == 1
    assert second.structured_content["dag"] != first.structured_content["dag"]
