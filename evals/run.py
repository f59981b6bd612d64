"""``python -m evals.run``: run the cases with an agent through the pdag MCP server, score them, write reports.

Offline by default (the scripted agent, no key, no network).  Exit status 1 when the pass rate falls below the
suite's threshold (``evals/suite.json``), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import prompts
from evals import CASES_DIR, REPO_ROOT, SUITE_CONFIG, TASKS_DIR
from evals.agent import AgentConfig, Sleep, Transcript, run_agent
from evals.agents import Agent, SessionAgent, make_agent
from evals.cases import Case, load_cases
from evals.mcp_bridge import Transport, connect
from evals.report import summarize, table, write_reports
from evals.scoring import CaseScore, score_case

__all__ = ["SuiteResult", "main", "run_suite", "suite_config", "system_prompt"]

def suite_config(path: Path = SUITE_CONFIG) -> dict[str, Any]:
    """The suite's settings (turn and token limits, pass threshold, transport, results folder)."""
    return json.loads(path.read_text())


def system_prompt() -> str:
    """The planning agent's system prompt (``prompts/system.md``)."""
    return prompts.system_prompt()


@dataclass
class SuiteResult:
    scores: list[CaseScore]
    summary: dict[str, Any]
    out_dir: Path | None


async def run_suite(
    cases: list[Case],
    agent: Agent,
    *,
    transport: Transport = "stdio",
    config: dict[str, Any] | None = None,
    out_dir: Path | None = None,
    record_dir: Path | None = None,
    sleep: Sleep = asyncio.sleep,
    progress: bool = False,
) -> SuiteResult:
    """Run every case over one MCP connection, sequentially; score and (with ``out_dir``) write reports."""
    cfg = {**suite_config(), **(config or {})}
    system = system_prompt()
    transcripts = record_dir or (out_dir / "transcripts" if out_dir else None)
    scores: list[CaseScore] = []
    start = time.perf_counter()
    async with connect(transport) as mcp:
        for case in cases:
            model = agent.model_for(case)
            path = transcripts / f"{case.id}.jsonl" if transcripts else None
            log = Transcript(path, case=case.id, agent=agent.name, model=model, task=case.task)
            agent_cfg = AgentConfig(
                model=model,
                max_turns=int(cfg["max_turns"]),
                max_tokens=int(cfg["max_tokens"]),
                token_budget=int(cfg["token_budget"]),
                max_retries=int(cfg["max_retries"]),
                system=system,
            )
            async with agent.client(case) as llm:
                result = await run_agent(llm, mcp, case.task, agent_cfg, transcript=log, sleep=sleep)
            score = score_case(case, result, log.records, agent.injects_mistakes(case))
            scores.append(score)
            if progress:
                mark = "PASS" if score.passed else "FAIL"
                print(f"  {mark} {case.id} ({score.turns} turns, {score.tool_calls} tool calls)", file=sys.stderr)
    model_name = agent.model_for(cases[0]) if cases else "-"
    summary = summarize(
        scores,
        agent=agent.name,
        model=model_name,
        threshold=float(cfg["pass_threshold"]),
        seconds=time.perf_counter() - start,
    )
    if out_dir is not None:
        write_reports(out_dir, scores, summary)
    return SuiteResult(scores, summary, out_dir)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evals.run", description=__doc__)
    p.add_argument("--suite", choices=("agent", "drafts"), default="agent",
                   help="agent: planning conversations over MCP; drafts: injected mistakes in drafted DAGs")
    p.add_argument("--drafts", type=int, metavar="N", help="drafts suite: how many drafted DAGs (default suite.json)")
    p.add_argument("--agent", choices=("scripted", "anthropic", "replay", "sessions"), default="scripted")
    p.add_argument("--sessions", type=Path, metavar="DIR",
                   help="recorded agent sessions to score (with --agent sessions; see python -m evals.record)")
    p.add_argument("--model", help="Anthropic model id for --agent anthropic (default: suite.json's default_model)")
    p.add_argument("--cases", nargs="*", metavar="ID", help="only these case ids (or id prefixes)")
    p.add_argument("--cases-dir", type=Path, default=None, help="folder of case JSON files (default evals/cases)")
    p.add_argument("--transport", choices=("stdio", "inprocess"), default=None, help="how to reach the MCP server")
    p.add_argument("--out", type=Path, help="results folder (default results/evals/<timestamp>-<agent>)")
    p.add_argument("--record", type=Path, metavar="DIR", help="write transcripts to DIR (replay them with --replay)")
    p.add_argument("--replay", type=Path, metavar="DIR", help="transcripts to replay (with --agent replay)")
    p.add_argument("--max-turns", type=int, help="override the suite's turn limit")
    p.add_argument("--threshold", type=float, help="override the suite's pass-rate threshold")
    p.add_argument("--quiet", action="store_true", help="print only the headline figures")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cfg = suite_config()
    if args.suite == "drafts":
        return _drafts(cfg["drafts"], args.drafts)
    if args.max_turns:
        cfg["max_turns"] = args.max_turns
    if args.threshold is not None:
        cfg["pass_threshold"] = args.threshold
    agent_kind = "replay" if args.replay and args.agent == "scripted" else args.agent
    model = args.model or (cfg.get("default_model") if agent_kind == "anthropic" else None)
    agent = make_agent(agent_kind, model=model, replay_dir=args.replay, sessions_dir=args.sessions)
    if isinstance(agent, SessionAgent):
        tasks = {c.id: c for d in (CASES_DIR, TASKS_DIR) if d.is_dir() for c in load_cases(d)}
        cases = [c for c in agent.cases(tasks) if not args.cases or any(c.id.startswith(o) for o in args.cases)]
    else:
        cases = load_cases(args.cases_dir, args.cases) if args.cases_dir else load_cases(only=args.cases)
    if not cases:
        print("no cases selected", file=sys.stderr)
        return 2
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or REPO_ROOT / cfg["results_dir"] / f"{stamp}-{agent.name}"
    transport = args.transport or cfg.get("transport", "stdio")
    result = asyncio.run(
        run_suite(cases, agent, transport=transport, config=cfg, out_dir=out_dir, record_dir=args.record)
    )
    if agent_kind == "scripted" and not args.cases:  # the full offline eval also judges drafted DAGs
        from evals.drafts import passes, run_drafts
        from evals.drafts import text as drafts_text

        fig = run_drafts(cfg["drafts"]["cases"], cfg["drafts"]["seed"])
        result.summary["drafts"] = fig
        result.summary["ok"] = bool(result.summary["ok"] and passes(fig, cfg["drafts"]))
        write_reports(out_dir, result.scores, result.summary)
        print(drafts_text(fig))
    text = table(result.scores, result.summary)
    print("\n".join(text.splitlines()[-4:]) if args.quiet else text)
    if isinstance(agent, SessionAgent):
        print(per_task(result.scores))
    print(f"reports: {out_dir / 'report.json'}, {out_dir / 'report.md'}")
    return 0 if result.summary["ok"] else 1


def per_task(scores: list[CaseScore]) -> str:
    """Recorded sessions grouped by task: passes, sessions, tool calls and tool errors."""
    tasks: dict[str, list[CaseScore]] = {}
    for s in scores:
        tasks.setdefault(s.id.split("@", 1)[0], []).append(s)
    lines = [f"per task ({len(tasks)} tasks, {len(scores)} sessions): passed/sessions, tool calls, tool errors"]
    for task, ss in sorted(tasks.items()):
        lines.append(f"  {task:40} {sum(s.passed for s in ss)}/{len(ss)}  calls {sum(s.tool_calls for s in ss)}"
                     f"  errors {sum(s.tool_errors for s in ss)}")
    return "\n".join(lines)


def _drafts(cfg: dict[str, Any], cases: int | None) -> int:
    """The drafts suite (evals/drafts.py): its figures, and 0 when they meet suite.json's thresholds."""
    from evals.drafts import passes, run_drafts, text

    fig = run_drafts(cases or cfg["cases"], cfg["seed"])
    ok = passes(fig, cfg)
    print(text(fig))
    print("drafts suite: " + ("pass" if ok else "FAIL") + f" (thresholds: detection >= {cfg['min_detection']:.0%}, "
          f"repaired >= {cfg['min_repaired']:.0%}, median root violations <= {cfg['max_median_root_violations']})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
