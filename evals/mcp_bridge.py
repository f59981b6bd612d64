"""The MCP side of the agent: connect to the pdag server and translate between MCP and the Messages API."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from mcp import Client, StdioServerParameters

from evals import REPO_ROOT

Transport = Literal["stdio", "inprocess"]

__all__ = ["Transport", "connect", "mcp_tools_to_anthropic", "result_payload", "stdio_params", "tool_result_block"]


def stdio_params() -> StdioServerParameters:
    """How to start ``python -m server`` as a subprocess from this checkout (the way Claude Desktop would)."""
    env = {"PYTHONPATH": str(REPO_ROOT)}
    for key in ("PATH", "HOME", "SYSTEMROOT", "VIRTUAL_ENV"):
        if key in os.environ:
            env[key] = os.environ[key]
    return StdioServerParameters(command=sys.executable, args=["-m", "server"], cwd=str(REPO_ROOT), env=env)


@asynccontextmanager
async def connect(transport: Transport = "stdio", *, read_timeout: float = 120.0) -> AsyncIterator[Client]:
    """An MCP client connected to pdag: a ``python -m server`` subprocess, or the server object in-process."""
    if transport == "stdio":
        target: Any = stdio_params()
    elif transport == "inprocess":
        from server.app import create_server  # imported late: the in-process path is optional

        target = create_server()
    else:
        raise ValueError(f"unknown MCP transport {transport!r}; use 'stdio' or 'inprocess'")
    async with Client(target, read_timeout_seconds=read_timeout) as client:
        yield client


def mcp_tools_to_anthropic(tools: list[Any]) -> list[dict[str, Any]]:
    """Anthropic tool definitions (name, description, input_schema) for MCP tools, in the server's order."""
    out = []
    for tool in tools:
        schema = dict(tool.input_schema or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        out.append({"name": tool.name, "description": tool.description or "", "input_schema": schema})
    return out


def result_payload(result: Any) -> Any:
    """The JSON an MCP tool result carries: structured content if any, else its text (parsed when it is JSON)."""
    if result.structured_content is not None and not result.is_error:
        return result.structured_content
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return text


def tool_result_block(tool_use_id: str, payload: Any, is_error: bool) -> dict[str, Any]:
    """One ``tool_result`` content block: compact JSON (or the error text) for the model to read."""
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": is_error}
