"""`python -m evals.record`: let an agent drive the pdag MCP server one call at a time and keep the session.

An LLM agent that can run shell commands (but sees no source and no README) plans a deployment through exactly
what an MCP client shows it: the tool list with descriptions and input schemas, the resources and the prompts.
Every step is appended to a JSONL session file; `python -m evals.run --agent sessions --sessions DIR` later
re-runs each recorded tool call against the current code and scores the final answer like any case.

    python -m evals.record start SESSION --task TASK_ID [--agent LABEL]   # the request and the interface
    python -m evals.record call SESSION TOOL '{"plan": {...}}'            # or - to read the arguments from stdin
    python -m evals.record read SESSION pdag://rules/catalog              # a resource
    python -m evals.record prompt SESSION plan_deployment '{"model": "llama-3.1-70b", ...}'
    python -m evals.record final SESSION -                                # the final answer, from stdin
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from evals import CASES_DIR, TASKS_DIR
from evals.agent import Transcript
from evals.cases import Case, load_cases
from evals.mcp_bridge import connect, result_payload

ANSWER_FORMAT = ("End with your final answer: explain the plan, then give it as JSON inside <plan>...</plan> "
                 "(the plan object the tools take). If no plan can meet the request, say why and give no <plan> "
                 "block.")


def find_task(task_id: str) -> Case:
    """A session task (evals/tasks) or an offline case (evals/cases) by id."""
    for directory in (TASKS_DIR, CASES_DIR):
        if directory.is_dir():
            found = [c for c in load_cases(directory) if c.id == task_id]
            if found:
                return found[0]
    raise SystemExit(f"no task {task_id!r} in {TASKS_DIR} or {CASES_DIR}")


def _started(path: str) -> Path:
    session = Path(path)
    if not session.exists():
        raise SystemExit(f"{session} has no session: run `python -m evals.record start {session} --task ID` first")
    return session


def _append(session: Path, kind: str, **data: Any) -> None:
    with session.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": kind, **data}, default=str) + "\n")


def _arguments(text: str) -> dict[str, Any]:
    raw = sys.stdin.read() if text == "-" else text
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise SystemExit(f"the arguments are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SystemExit("the arguments must be a JSON object")
    return value


def _calls_so_far(session: Path) -> int:
    return sum(1 for r in Transcript.read(session) if r["type"] == "tool_call")


async def _interface() -> str:
    """What an MCP client lists: tools (description and input schema), resources, resource templates, prompts."""
    async with connect("inprocess") as mcp:
        tools = (await mcp.list_tools()).tools
        resources = (await mcp.list_resources()).resources
        templates = (await mcp.list_resource_templates()).resource_templates
        prompts = (await mcp.list_prompts()).prompts
    out = ["TOOLS"]
    for t in tools:
        schema = json.dumps(t.input_schema, separators=(",", ":"))
        out += [f"## {t.name}", t.description or "", "input schema: " + schema]
    out.append("\nRESOURCES (read with: python -m evals.record read SESSION URI)")
    out += [f"- {r.uri}: {r.description or r.name}" for r in resources]
    out += [f"- {t.uri_template}: {t.description or t.name}" for t in templates]
    out.append("\nPROMPTS (get with: python -m evals.record prompt SESSION NAME 'JSON-ARGS')")
    for p in prompts:
        args = ", ".join(a.name + ("" if a.required else "?") for a in p.arguments or [])
        out.append(f"- {p.name}({args}): {p.description or ''}")
    return "\n".join(out)


async def _call(name: str, args: dict[str, Any]) -> tuple[Any, bool, str]:
    async with connect("inprocess") as mcp:
        try:
            result = await mcp.call_tool(name, args)
        except Exception as exc:  # noqa: BLE001 - what a client would show the agent
            text = f"Error calling tool {name}: {exc}"
            return text, True, text
    text = "\n".join(getattr(block, "text", "") or f"[{block.type} content]" for block in result.content)
    return result_payload(result), bool(result.is_error), text


async def _read(uri: str) -> str:
    async with connect("inprocess") as mcp:
        result = await mcp.read_resource(uri)
    return "\n".join(getattr(c, "text", "") or "[binary content]" for c in result.contents)


async def _prompt(name: str, args: dict[str, Any]) -> str:
    async with connect("inprocess") as mcp:
        result = await mcp.get_prompt(name, {k: str(v) for k, v in args.items()})
    return "\n\n".join(f"[{m.role}] " + (getattr(m.content, "text", "") or "") for m in result.messages)


def cmd_start(args: argparse.Namespace) -> str:
    task = find_task(args.task)
    session = Path(args.session)
    session.parent.mkdir(parents=True, exist_ok=True)
    session.write_text("", encoding="utf-8")
    _append(session, "meta", case=task.id, agent="session", model=args.agent, task=task.task,
            started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    return f"REQUEST\n{task.task}\n\n{ANSWER_FORMAT}\n\n" + asyncio.run(_interface())


def cmd_call(args: argparse.Namespace) -> str:
    session = _started(args.session)
    arguments = _arguments(args.arguments)
    began = time.perf_counter()
    payload, is_error, text = asyncio.run(_call(args.tool, arguments))
    _append(session, "tool_call", turn=_calls_so_far(session) + 1, name=args.tool, input=arguments,
            is_error=is_error, payload=payload, ms=round((time.perf_counter() - began) * 1000, 2))
    return ("TOOL ERROR\n" if is_error else "") + text


def cmd_read(args: argparse.Namespace) -> str:
    session = _started(args.session)
    text = asyncio.run(_read(args.uri))
    _append(session, "resource", uri=args.uri, chars=len(text))
    return text


def cmd_prompt(args: argparse.Namespace) -> str:
    session = _started(args.session)
    text = asyncio.run(_prompt(args.name, _arguments(args.arguments)))
    _append(session, "prompt", name=args.name, chars=len(text))
    return text


def cmd_final(args: argparse.Namespace) -> str:
    session = _started(args.session)
    text = sys.stdin.read() if args.text == "-" else args.text
    _append(session, "final_answer", text=text)
    return "recorded; the session is complete"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m evals.record", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("start", help="begin a session: print the request and the MCP interface")
    s.add_argument("session")
    s.add_argument("--task", required=True)
    s.add_argument("--agent", default="unnamed", help="who drives the session (a model name or label)")
    s.set_defaults(run=cmd_start)
    s = sub.add_parser("call", help="call a tool with JSON arguments")
    s.add_argument("session")
    s.add_argument("tool")
    s.add_argument("arguments", nargs="?", default="{}")
    s.set_defaults(run=cmd_call)
    s = sub.add_parser("read", help="read a resource")
    s.add_argument("session")
    s.add_argument("uri")
    s.set_defaults(run=cmd_read)
    s = sub.add_parser("prompt", help="get a prompt with JSON arguments")
    s.add_argument("session")
    s.add_argument("name")
    s.add_argument("arguments", nargs="?", default="{}")
    s.set_defaults(run=cmd_prompt)
    s = sub.add_parser("final", help="record the final answer (text, or - for stdin)")
    s.add_argument("session")
    s.add_argument("text")
    s.set_defaults(run=cmd_final)
    args = p.parse_args(argv)
    print(args.run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
