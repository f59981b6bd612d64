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
    from tools.rules.lookup import lookup_rule

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


def serve(server_argv: list[str]) -> int:
    """Hand the process over to `python -m server` with the given flags: the core never imports the protocol
    glue, and the server checks its own flags (`pdag serve --help` lists them)."""
    import os

    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "server", *server_argv])
    return 0  # not reached


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("server_flags", nargs=argparse.REMAINDER, help="the server's flags (pdag serve --help)")


def cmd_serve(args: argparse.Namespace) -> int:
    return serve(args.server_flags)


command("rule", "look up rules by id, free text or topic", _rule_args)(cmd_rule)
command("serve", "start the MCP server (stdio; --http for streamable HTTP on loopback); takes the server's flags",
        _serve_args)(cmd_serve)
