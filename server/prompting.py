"""MCP prompts: ready-made requests for planning, reviewing and explaining, with texts kept in prompts/."""

from __future__ import annotations

import json
from typing import Annotated

from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.types import INVALID_PARAMS
from pydantic import Field

import prompts
from tools.core.errors import PdagInputError
from tools.core.inputs import load_json_text
from tools.core.plan import Workload
from tools.rules.lookup import lookup_rule

_WORKLOAD = Workload()  # the one default workload of CLI, plan files and MCP


def register_prompts(server: MCPServer) -> None:
    @server.prompt(name="plan_deployment", title="Plan a deployment")
    def plan_deployment(
        model: Annotated[str, Field(description="model preset id (see pdag://models), e.g. deepseek-v3")],
        gpus: Annotated[str, Field(description="number of GPUs available, e.g. 64")],
        gpu: Annotated[str, Field(description="accelerator preset id (see pdag://hardware)")] = "h100-sxm",
        objective: Annotated[str, Field(description="latency or throughput")] = "latency",
        input_len: Annotated[str, Field(description="prompt tokens per sequence")] = str(_WORKLOAD.input_len),
        output_len: Annotated[str, Field(description="generated tokens per sequence")] = str(_WORKLOAD.output_len),
        batch_size: Annotated[str, Field(description="sequences per replica")] = str(_WORKLOAD.batch_size),
        gpus_per_node: Annotated[str, Field(description="GPUs per node")] = "8",
        constraints: Annotated[str, Field(description="optional extra constraints or SLOs, free text")] = "",
    ) -> str:
        """Plan a parallel strategy for a model on a cluster, validated and estimated with the pdag tools."""
        extra = f"- Constraints: {constraints}\n" if constraints.strip() else ""
        return prompts.render("plan_deployment", model=model, gpus=gpus, gpu=gpu, objective=objective,
                              input_len=input_len, output_len=output_len, batch_size=batch_size,
                              gpus_per_node=gpus_per_node, constraints=extra)

    @server.prompt(name="review_plan", title="Review a plan")
    def review_plan(
        plan_json: Annotated[str, Field(description="the plan as JSON text (pdag://schema/plan)")],
    ) -> str:
        """Review an existing plan: violations, fixes, estimates and one validated improvement."""
        try:
            text = json.dumps(load_json_text(plan_json, "plan_json"), indent=2)
        except PdagInputError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        return prompts.render("review_plan", plan_json=text)

    @server.prompt(name="review_command", title="Review an engine launch command")
    def review_command(
        command: Annotated[str, Field(description="a 'vllm serve ...', 'python -m sglang.launch_server ...' or "
                                                  "'trtllm-serve ...' line")],
        gpu: Annotated[str, Field(description="accelerator preset id (see pdag://hardware)")] = "h100-sxm",
        decode_command: Annotated[str, Field(description="disaggregated serving: the decode pool's command "
                                                         "(command is then the prefill pool's)")] = "",
    ) -> str:
        """Review an existing deployment from its launch command: what it runs, what breaks, its estimate, one
        validated improvement and its command."""
        if not command.strip():
            raise MCPError(code=INVALID_PARAMS, message="command is empty: paste the engine's launch command line")
        decode = f"\nIts decode pool runs:\n\n```\n{decode_command.strip()}\n```\n" if decode_command.strip() else ""
        decode_arg = ', `decode_command`: the decode pool\'s' if decode_command.strip() else ""
        return prompts.render("review_command", command=command.strip(), gpu=gpu, decode=decode,
                              decode_arg=decode_arg)

    @server.prompt(name="explain_violation", title="Explain a rule violation")
    def explain_violation(
        rule_id: Annotated[str, Field(description="a rule id from a violation, e.g. TP-HEADS-DIVISIBLE")],
    ) -> str:
        """Explain a rule (why it exists, what breaks it, how to fix a plan) from the rule catalog."""
        try:
            found = lookup_rule(rule_id=rule_id)
        except PdagInputError as exc:
            raise MCPError(code=INVALID_PARAMS, message=f"{exc.problem}; {exc.allowed}") from None
        item = found.rules[0] if found.rules else found.conflicts[0]
        body = json.dumps(item.model_dump(mode="json", exclude_none=True), indent=1)
        return prompts.render("explain_violation", rule_id=item.id, rule_text=f"```json\n{body}\n```")
