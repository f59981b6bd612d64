"""The planning agent's loop: Messages API turns with tool use, tools served by the pdag MCP server.

The loop is the same for every agent (scripted, live, replay): only the ``AsyncAnthropic`` client it is given
differs.  It converts the server's MCP tools to Anthropic tool definitions, calls ``messages.create`` until
the model ends its turn, runs every ``tool_use`` block through MCP (errors go back as ``is_error`` results),
bounds turns and tokens, retries rate limits and server errors with a deterministic back-off, and writes
every request, response, API error and tool call to a JSONL transcript.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anthropic

from evals.mcp_bridge import mcp_tools_to_anthropic, result_payload, tool_result_block

Sleep = Callable[[float], Awaitable[None]]
RETRYABLE = (anthropic.RateLimitError, anthropic.InternalServerError, anthropic.APIConnectionError)

__all__ = ["AgentConfig", "AgentResult", "ToolCall", "Transcript", "run_agent"]


@dataclass
class AgentConfig:
    """Bounds and retry policy of one agent run."""

    model: str
    max_turns: int = 12
    max_tokens: int = 4096  # per response
    token_budget: int = 1_000_000  # input + output tokens over the whole run
    max_retries: int = 4
    backoff_base: float = 1.0  # seconds; doubled on each retry, no jitter
    backoff_max: float = 30.0
    system: str | None = None


@dataclass
class ToolCall:
    """One tool invocation and what came back."""

    turn: int
    name: str
    input: dict[str, Any]
    is_error: bool
    payload: Any
    ms: float


@dataclass
class AgentResult:
    """What a run produced: the final text, why it stopped, and its costs."""

    final_text: str | None
    stop_reason: str
    turns: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    retries: int = 0
    seconds: float = 0.0
    error: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tool_errors(self) -> int:
        return sum(1 for call in self.tool_calls if call.is_error)

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures (no message history)."""
        out = asdict(self)
        out.pop("messages")
        out["tool_errors"] = self.tool_errors
        return out


class Transcript:
    """Append-only JSONL log of one run; kept in memory too so the scorer can read the tool results."""

    def __init__(self, path: Path | None = None, **meta: Any) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        if meta:
            self.write("meta", **meta)

    def write(self, kind: str, **data: Any) -> None:
        record = {"type": kind, **data}
        self.records.append(record)
        if self.path is not None:
            with self.path.open("a") as fh:
                fh.write(json.dumps(record, default=str) + "\n")

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def _create(
    llm: anthropic.AsyncAnthropic, request: dict[str, Any], cfg: AgentConfig, log: Transcript, turn: int, sleep: Sleep
) -> tuple[Any, int]:
    """One Messages API call with retries on 429 / 5xx / 529 / connection errors; returns (message, retries)."""
    for attempt in range(cfg.max_retries + 1):
        try:
            raw = await llm.messages.with_raw_response.create(**request)
            body = await raw.json()
            message = await raw.parse()
            log.write("response", turn=turn, body=body)
            return message, attempt
        except RETRYABLE as exc:
            status = getattr(exc, "status_code", None)
            log.write("api_error", turn=turn, attempt=attempt, status=status, error=str(exc)[:500])
            if attempt == cfg.max_retries:
                raise
            delay = _retry_after(exc)
            if delay is None:
                delay = min(cfg.backoff_max, cfg.backoff_base * 2**attempt)
            await sleep(min(delay, cfg.backoff_max))
    raise AssertionError("unreachable")


async def _call_tool(mcp: Any, name: str, args: dict[str, Any]) -> tuple[Any, bool]:
    """Run one tool through MCP; protocol errors and crashes become error payloads for the model."""
    try:
        result = await mcp.call_tool(name, args)
    except Exception as exc:  # noqa: BLE001 - any failure is reported to the model, never raised
        return f"Error calling tool {name}: {exc}", True
    return result_payload(result), bool(result.is_error)


async def run_agent(
    llm: anthropic.AsyncAnthropic,
    mcp: Any,
    prompt: str,
    config: AgentConfig,
    *,
    transcript: Transcript | None = None,
    sleep: Sleep = asyncio.sleep,
) -> AgentResult:
    """Drive the model until it ends its turn (or a bound is hit) and return the outcome.

    ``mcp`` is a connected ``mcp.Client``.  API failures that survive the retries end the run with
    ``stop_reason="api_error"`` instead of raising, so one bad case does not stop a suite.
    """
    log = transcript if transcript is not None else Transcript()
    start = time.perf_counter()
    tools = mcp_tools_to_anthropic((await mcp.list_tools()).tools)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    out = AgentResult(final_text=None, stop_reason="max_turns", messages=messages)
    try:
        for turn in range(1, config.max_turns + 1):
            request: dict[str, Any] = {
                "model": config.model,
                "max_tokens": config.max_tokens,
                "tools": tools,
                "messages": messages,
            }
            if config.system:
                request["system"] = config.system
            log.write("request", turn=turn, body=request)
            message, retries = await _create(llm, request, config, log, turn, sleep)
            out.turns, out.retries = turn, out.retries + retries
            out.input_tokens += message.usage.input_tokens or 0
            out.output_tokens += message.usage.output_tokens or 0
            content = [block.model_dump(mode="json", exclude_none=True) for block in message.content]
            messages.append({"role": "assistant", "content": content})
            text = "".join(block.text for block in message.content if block.type == "text")
            uses = [block for block in message.content if block.type == "tool_use"]
            if message.stop_reason == "pause_turn":
                continue
            if message.stop_reason != "tool_use" or not uses:
                out.final_text, out.stop_reason = text, str(message.stop_reason)
                break
            results = []
            for block in uses:
                began = time.perf_counter()
                args = block.input if isinstance(block.input, dict) else {}
                payload, is_error = await _call_tool(mcp, block.name, args)
                ms = (time.perf_counter() - began) * 1000
                call = ToolCall(turn, block.name, args, is_error, payload, round(ms, 2))
                out.tool_calls.append(call)
                log.write("tool_call", **asdict(call))
                results.append(tool_result_block(block.id, payload, is_error))
            messages.append({"role": "user", "content": results})
            if out.input_tokens + out.output_tokens > config.token_budget:
                out.stop_reason = "token_budget"
                break
    except anthropic.APIError as exc:
        out.stop_reason, out.error = "api_error", f"{type(exc).__name__}: {exc}"
    out.seconds = round(time.perf_counter() - start, 3)
    log.write("final", **out.summary())
    return out
