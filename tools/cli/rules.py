"""`pdag rule` (look up the catalog) and `pdag serve` (hand over to the MCP server)."""

from __future__ import annotations

import argparse
import sys

from tools.cli.common import command


def _rule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("rule_id", nargs="?", help="a rule id, e.g. TP-HEADS-DIVISIBLE (case-insensitive)")
    p.add_argument("-q", "--query", help="free text, ranked by relevance")
    p.add_argument("--strategy", help="DP, PP, TP, EP or SP")
    p.add_argument("--phase", help="prefill, decode or both")
    p.add_argument("--node-type", help="e.g. AttentionNode")
    p.add_argument("--layer", help="request, structural, operator, plan or graph")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--json", action="store_true")


def cmd_rule(args: argparse.Namespace) -> int:
    from tools.lookup import lookup_rule

    result = lookup_rule(rule_id=args.rule_id, query=args.query, strategy=args.strategy, phase=args.phase,
                         node_type=args.node_type, layer=args.layer, limit=args.limit)
    if args.json:
        print(result.model_dump_json(exclude_none=True))
        return 0
    for c in result.conflicts:
        print(f"{c.id}: {c.topic}\n  decision: {c.pdag_decision}")
    full = len(result.rules) == 1
    for r in result.rules:
        print(f"{r.id} [{r.severity}] {r.title}")
        print(f"  {r.statement}")
        if full:
            print(f"  why: {r.rationale}")
            print(f"  breaks it: {r.examples.violating}")
            print(f"  satisfies it: {r.examples.satisfying}")
            print("  source: " + "; ".join(f"{s.seed} {s.section}" for s in r.source))
            print(f"  checker: {r.checker or '-'}  fixer: {r.fixer or '-'}  related: {', '.join(r.related) or '-'}")
    if result.total_matches > len(result.rules):
        print(f"({result.total_matches - len(result.rules)} more; raise --limit)")
    return 0


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--allow-remote", action="store_true")
    p.add_argument("--allowed-host", action="append", default=[])


def cmd_serve(args: argparse.Namespace) -> int:
    """Hand the process over to `python -m server`: the core never imports the protocol glue."""
    import os

    argv = ["--host", args.host, "--port", str(args.port)] + (["--http"] if args.http else [])
    argv += ["--allow-remote"] if args.allow_remote else []
    for h in args.allowed_host:
        argv += ["--allowed-host", h]
    os.execv(sys.executable, [sys.executable, "-m", "server", *argv])
    return 0  # not reached


command("rule", "look up rules by id, free text or topic", _rule_args)(cmd_rule)
command("serve", "start the MCP server (stdio; --http for streamable HTTP on loopback)", _serve_args)(cmd_serve)
