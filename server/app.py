"""create_server(): the pdag MCP server, assembled from the tool, resource and prompt modules."""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any

from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent
from pydantic import ValidationError

from server.prompting import register_prompts
from server.resources import register_resources
from server.tools import argument_error_text, available_tools

logger = logging.getLogger("pdag.server")

NAME = "pdag"
INSTRUCTIONS = """\
pdag plans and checks parallel strategies (DP, PP, TP, EP, SP) for LLM inference as explicit execution DAGs.
Workflow: draft a plan (pdag://schema/plan) -> build_dag -> validate_dag -> autofix_dag if invalid ->
estimate_performance -> answer. Reason in the order model structure, PP/EP, TP/SP, DP last. Use lookup_rule
to understand a rule_id. Answers are concise by default; pass detail="full" only when you need everything.
Presets: pdag://models, pdag://hardware. Knowledge documents: pdag://knowledge."""


def _version() -> str:
    try:
        return metadata.version("pdag")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def create_server() -> MCPServer:
    """A fresh server; tools whose core function has not landed yet are simply not registered."""
    tools = available_tools()
    by_name = {t.name: t for t in tools}

    async def reject_unknown_tools(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Unknown tool -> -32602 (the spec; the SDK would answer is_error).  Bad arguments -> one readable
        tool error naming each field, instead of pydantic's dump of the input."""
        if ctx.method == "tools/call" and isinstance(ctx.params, dict):
            name = ctx.params.get("name")
            tool = by_name.get(name) if isinstance(name, str) else None
            if tool is None:
                raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}. Known: {', '.join(by_name)}")
            args = ctx.params.get("arguments") or {}
            if isinstance(args, dict):
                try:
                    tool.fn_metadata.arg_model.model_validate(tool.fn_metadata.pre_parse_json(args))
                except ValidationError as exc:
                    text = argument_error_text(exc, list(tool.fn_metadata.arg_model.model_fields))
                    logger.info("tool %s rejected arguments: %s", name, text)
                    return CallToolResult(content=[TextContent(type="text", text=f"Error executing tool {name}: "
                                                               f"{text}")], is_error=True)
        return await call_next(ctx)

    server: MCPServer = MCPServer(
        NAME,
        title="pdag: parallel strategies for LLM inference",
        version=_version(),
        instructions=INSTRUCTIONS,
        tools=tools,
        subscriptions=False,
        middleware=[reject_unknown_tools],
        log_level="WARNING",
    )
    register_resources(server)
    register_prompts(server)
    return server
