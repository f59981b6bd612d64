"""create_server(): the pdag MCP server, assembled from the tool, resource and prompt modules."""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any

from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import INVALID_PARAMS, Prompt

from server.prompting import register_prompts
from server.resources import register_resources
from server.tools import available_tools
from tools.core.errors import PdagInputError
from tools.core.inputs import check_json_value

logger = logging.getLogger("pdag.server")

NAME = "pdag"
INSTRUCTIONS = """\
pdag plans and checks parallel strategies (DP, PP, TP, EP, SP) for LLM inference as explicit execution DAGs.
Workflow: draft a plan (pdag://schema/plan) -> build_dag -> validate_dag -> autofix_dag if invalid ->
estimate_performance -> answer. Reason in the order model structure, PP/EP, TP/SP, DP last. search_strategies
ranks valid candidate plans for a starting point or a check. Two strategies need an opt-in in the plan:
attention-DP (parallel.attn_dp with options.allow_attention_dp) and disaggregated prefill/decode pools
(options.disaggregated, per-phase degrees in phases.prefill / phases.decode). Use lookup_rule to understand a
rule_id. import_deployment reads an engine's launch command into a checked plan; export_plan writes a plan as
one. Answers are concise by default; pass detail="full" only when you need everything.
Presets: pdag://models, pdag://hardware. Knowledge documents: pdag://knowledge."""


def _version() -> str:
    try:
        return metadata.version("pdag")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def _check_tool_name(params: dict[str, Any], by_name: dict[str, Tool]) -> None:
    """Unknown tool -> -32602 (the spec; the SDK would answer is_error).  Bad arguments are the tool's to
    answer (server.tools.PdagTool), so that their error result is built like a successful one."""
    name = params.get("name")
    if not isinstance(name, str) or name not in by_name:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}. Known: {', '.join(by_name)}")


def _check_prompt_get(params: dict[str, Any], prompts: dict[str, Prompt]) -> None:
    """Unknown prompt, missing or unknown argument -> -32602 naming what is allowed (the SDK would log a
    traceback and answer an internal error)."""
    name = params.get("name")
    prompt = prompts.get(name) if isinstance(name, str) else None
    if prompt is None:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown prompt: {name}. Known: {', '.join(prompts)}")
    args = params.get("arguments") if isinstance(params.get("arguments"), dict) else {}
    try:
        check_json_value(args, "arguments")
    except PdagInputError as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"prompt {name}: {exc}") from None
    known = [a.name for a in prompt.arguments or []]
    missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in args]
    unknown = [k for k in args if k not in known]
    if missing or unknown:
        problem = f"missing argument(s) {', '.join(missing)}" if missing else \
            f"unknown argument(s) {', '.join(unknown)}"
        raise MCPError(code=INVALID_PARAMS, message=f"prompt {name}: {problem}. Arguments: {', '.join(known)}")


def create_server() -> MCPServer:
    """A fresh server; tools whose core function has not landed yet are simply not registered."""
    tools = available_tools()
    by_name = {t.name: t for t in tools}

    async def check_requests(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Refuse unknown tools and prompts (and bad prompt arguments) here, before the SDK's handlers."""
        if isinstance(ctx.params, dict):
            if ctx.method == "tools/call":
                _check_tool_name(ctx.params, by_name)
            elif ctx.method == "prompts/get":
                _check_prompt_get(ctx.params, {p.name: p for p in await server.list_prompts()})
        return await call_next(ctx)

    server: MCPServer = MCPServer(
        NAME,
        title="pdag: parallel strategies for LLM inference",
        version=_version(),
        instructions=INSTRUCTIONS,
        tools=tools,
        subscriptions=False,
        middleware=[check_requests],
        log_level="WARNING",
    )
    register_resources(server)
    register_prompts(server)
    return server
