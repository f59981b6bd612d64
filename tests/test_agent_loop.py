"""The agent loop on the real Anthropic SDK, answered by respx through the httpx2 bridge (no network).

A tiny in-process MCP server stands in for pdag here, so these tests pin the loop itself: multi-turn tool use,
tool errors fed back, the turn limit, retries on 429 and 529, a malformed final answer, the transcript.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from evals.agent import AgentConfig, Transcript, run_agent
from evals.agents import mocked_client
from evals.agents.respx_bridge import API_BASE
from evals.scoring import extract_plan

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_server() -> MCPServer:
    server = MCPServer("fake-pdag", subscriptions=False)

    @server.tool()
    def validate_dag(plan: dict[str, Any]) -> dict[str, Any]:
        """Validate a plan (fake: tp must divide 32)."""
        tp = int((plan.get("parallel") or {}).get("tp", 1))
        bad = 32 % tp != 0
        v = [{"rule_id": "TP-HEADS-DIVISIBLE", "severity": "error", "message": "32 heads % tp"}] if bad else []
        return {"valid": not bad, "violations": v}

    @server.tool()
    def estimate_performance(plan: dict[str, Any]) -> dict[str, Any]:
        """Estimate (fake: always fails)."""
        raise ToolError("estimator unavailable for this plan")

    return server


def msg(content: list[dict[str, Any]], stop: str, n: int = 1) -> dict[str, Any]:
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


def use(tid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": args}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def ok(body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json=body)


def err(status: int, kind: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"type": "error", "error": {"type": kind, "message": kind}}, headers=headers)


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def drive(responses: list[httpx.Response], cfg: AgentConfig | None = None, **kw: Any):
    router = respx.Router(base_url=API_BASE, assert_all_mocked=True)
    route = router.post("/v1/messages").mock(side_effect=responses)
    cfg = cfg or AgentConfig(model="claude-test", system="be careful")
    async with Client(make_server()) as mcp, mocked_client(router) as llm:
        result = await run_agent(llm, mcp, "Plan llama on 4 GPUs", cfg, **kw)
    return result, route


async def test_multi_turn_tool_use_loop(tmp_path):
    plan = {"parallel": {"tp": 4}}
    responses = [
        ok(
            msg(
                [
                    text("validating twice"),
                    use("t1", "validate_dag", {"plan": plan}),
                    use("t2", "validate_dag", {"plan": plan}),
                ],
                "tool_use",
            )
        ),
        ok(msg([use("t3", "validate_dag", {"plan": {"parallel": {"tp": 2}}})], "tool_use", 2)),
        ok(msg([text('<plan>{"parallel": {"tp": 4}}</plan> done')], "end_turn", 3)),
    ]
    log = Transcript(tmp_path / "t.jsonl", case="x")
    result, route = await drive(responses, transcript=log)
    assert result.stop_reason == "end_turn" and result.turns == 3
    assert [c.name for c in result.tool_calls] == ["validate_dag"] * 3
    assert result.input_tokens == 300 and result.output_tokens == 30
    first = json.loads(route.calls[0].request.content)
    assert first["system"] == "be careful"
    assert {t["name"] for t in first["tools"]} == {"validate_dag", "estimate_performance"}
    assert all(t["input_schema"]["type"] == "object" and t["description"] for t in first["tools"])
    second = json.loads(route.calls[1].request.content)
    results = second["messages"][-1]["content"]  # both results of one turn in one user message
    assert [r["tool_use_id"] for r in results] == ["t1", "t2"]
    assert json.loads(results[0]["content"]) == {"valid": True, "violations": []}
    assert results[0]["is_error"] is False
    kinds = [r["type"] for r in Transcript.read(tmp_path / "t.jsonl")]
    assert kinds[0] == "meta" and kinds.count("request") == 3 and kinds.count("response") == 3
    assert kinds.count("tool_call") == 3 and kinds[-1] == "final"
    assert extract_plan(result.final_text)[1] == plan


async def test_tool_errors_are_fed_back():
    responses = [
        ok(msg([use("t1", "estimate_performance", {"plan": {}}), use("t2", "no_such_tool", {})], "tool_use")),
        ok(msg([use("t3", "validate_dag", {"plan": {"parallel": {"tp": 3}}})], "tool_use", 2)),
        ok(msg([text("I could not make it work.")], "end_turn", 3)),
    ]
    result, route = await drive(responses)
    assert result.stop_reason == "end_turn"
    assert [c.is_error for c in result.tool_calls] == [True, True, False]
    assert result.tool_errors == 2
    fed = json.loads(route.calls[1].request.content)["messages"][-1]["content"]
    assert fed[0]["is_error"] is True and "estimator unavailable" in fed[0]["content"]
    assert fed[1]["is_error"] is True and "no_such_tool" in fed[1]["content"]
    third = json.loads(route.calls[2].request.content)["messages"][-1]["content"][0]
    assert json.loads(third["content"])["violations"][0]["rule_id"] == "TP-HEADS-DIVISIBLE"


async def test_turn_limit_stops_the_loop():
    looping = [ok(msg([use(f"t{i}", "validate_dag", {"plan": {}})], "tool_use", i)) for i in range(10)]
    result, route = await drive(looping, AgentConfig(model="claude-test", max_turns=3))
    assert result.stop_reason == "max_turns" and result.turns == 3 and result.final_text is None
    assert route.call_count == 3 and len(result.tool_calls) == 3


async def test_token_budget_stops_the_loop():
    looping = [ok(msg([use(f"t{i}", "validate_dag", {"plan": {}})], "tool_use", i)) for i in range(10)]
    result, _ = await drive(looping, AgentConfig(model="claude-test", token_budget=200))
    assert result.stop_reason == "token_budget" and result.turns == 2


async def test_retries_on_429_and_529_with_backoff(tmp_path):
    sleeps = Sleeps()
    responses = [
        err(429, "rate_limit_error", {"retry-after": "0.5"}),
        err(529, "overloaded_error"),
        err(500, "api_error"),
        ok(msg([text("fine")], "end_turn")),
    ]
    log = Transcript(tmp_path / "r.jsonl")
    result, route = await drive(responses, transcript=log, sleep=sleeps)
    assert result.stop_reason == "end_turn" and result.final_text == "fine"
    assert result.retries == 3 and route.call_count == 4
    assert sleeps.delays == [0.5, 2.0, 4.0]  # retry-after honoured, then base * 2**attempt
    errors = [r for r in log.records if r["type"] == "api_error"]
    assert [e["status"] for e in errors] == [429, 529, 500]


async def test_retries_exhausted_end_the_run_cleanly():
    sleeps = Sleeps()
    responses = [err(529, "overloaded_error")] * 3
    result, route = await drive(responses, AgentConfig(model="claude-test", max_retries=2), sleep=sleeps)
    assert result.stop_reason == "api_error" and "OverloadedError" in (result.error or "")
    assert route.call_count == 3 and sleeps.delays == [1.0, 2.0]


async def test_client_errors_are_not_retried():
    sleeps = Sleeps()
    result, route = await drive([err(400, "invalid_request_error")], sleep=sleeps)
    assert result.stop_reason == "api_error" and route.call_count == 1 and sleeps.delays == []


async def test_malformed_final_answer():
    result, _ = await drive([ok(msg([text('<plan>{"parallel": {tp: 4}</plan>')], "end_turn"))])
    assert result.stop_reason == "end_turn"
    kind, plan, problem = extract_plan(result.final_text)
    assert kind == "malformed" and plan is None and "not JSON" in (problem or "")


def test_extract_plan_variants():
    assert extract_plan(None)[0] == "none"
    assert extract_plan("It cannot fit; you would need 16 GPUs.")[0] == "declined"
    assert extract_plan("<plan>null</plan> cannot fit")[0] == "declined"
    assert extract_plan('<plan>{"feasible": false}</plan>')[0] == "declined"
    assert extract_plan("<plan>[1, 2]</plan>")[0] == "malformed"
    assert extract_plan("<plan>{")[0] == "malformed"
    two = '<plan>{"a": 1}</plan> then <plan>\n```json\n{"b": 2}\n```\n</plan>'
    assert extract_plan(two) == ("plan", {"b": 2}, None)
