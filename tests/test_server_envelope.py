"""Tool results on the wire: an error result carries the same envelope as a successful one on every protocol
version (handshake-era results have no `resultType`; 2026-era results have it and the serverInfo stamp).

The client classes parse and re-shape results, so these tests read the raw JSON-RPC messages of an in-memory
transport instead."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.client._memory import InMemoryTransport
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import JSONRPCNotification, JSONRPCRequest

from server import create_server
from server.tools import ELAPSED_KEY
from tools.core.inputs import MAX_DEPTH

pytestmark = pytest.mark.anyio

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


def nested(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


PLAN = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}
CALLS = {
    "success": ("lookup_rule", {"rule_id": "TP-HEADS-DIVISIBLE"}),
    "bad argument type": ("lookup_rule", {"rule_id": 5}),
    "unknown argument": ("build_dag", {"plan": PLAN, "bogus": 1}),
    "too deep": ("lookup_rule", {"query": nested(MAX_DEPTH + 5)}),
    "error in the core": ("lookup_rule", {"rule_id": "NO-SUCH-RULE"}),
}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def wire_results(version: str) -> dict[str, dict[str, Any]]:
    """Each call's raw `result` object as the server wrote it, on a session of protocol ``version``."""
    out: dict[str, dict[str, Any]] = {}
    async with InMemoryTransport(create_server()) as (read, write):

        async def request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            await write.send(SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=rid, method=method, params=params)))
            message = (await read.receive()).message.model_dump(by_alias=True, mode="json", exclude_none=True)
            assert message["id"] == rid and "result" in message, message
            return message["result"]

        meta: dict[str, Any] = {}
        if version == LEGACY:
            await request(0, "initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "wire-test", "version": "0"}})
            await write.send(SessionMessage(JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")))
        else:
            meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                              "io.modelcontextprotocol/clientCapabilities": {}}}
        for i, (label, (name, args)) in enumerate(CALLS.items(), 1):
            out[label] = await request(i, "tools/call", {"name": name, "arguments": args, **meta})
    return out


def envelope(result: dict[str, Any]) -> dict[str, Any]:
    """The result without its body (content, structured content) and without pdag's own timing in _meta."""
    env = {k: v for k, v in result.items() if k not in ("content", "structuredContent", "isError")}
    meta = {k: v for k, v in (env.pop("_meta", None) or {}).items() if k != ELAPSED_KEY}
    return env | ({"_meta": meta} if meta else {})


@pytest.mark.parametrize("version", [LEGACY, MODERN])
async def test_error_results_have_the_envelope_of_successful_ones(version):
    results = await wire_results(version)
    assert results["success"]["isError"] is False
    expected = envelope(results["success"])
    assert ("resultType" in expected) is (version == MODERN)
    for label, result in results.items():
        if label == "success":
            continue
        assert result["isError"] is True, label
        assert result["content"][0]["text"].startswith(f"Error executing tool {CALLS[label][0]}: "), label
        assert envelope(result) == expected, label


async def test_argument_errors_still_name_the_field():
    results = await wire_results(LEGACY)
    assert "invalid `rule_id`" in results["bad argument type"]["content"][0]["text"]
    assert "`bogus`: unknown argument" in results["unknown argument"]["content"][0]["text"]
    assert "nested" in results["too deep"]["content"][0]["text"]
