"""`pdag`: the command line front.  It only parses arguments, calls the core and prints."""

from __future__ import annotations

import argparse
import sys

from tools.cli import build, check, estimate, report, rules, search  # noqa: F401  (each registers its subcommands)
from tools.cli.common import COMMANDS, add_plan_args, plan_from_args
from tools.errors import PdagInputError

__all__ = ["add_plan_args", "main", "plan_from_args"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdag", description="Plan, validate and estimate LLM inference parallelism.")
    sub = parser.add_subparsers(dest="command")
    for name, (help_text, _, add_args) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text))
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["plan", *(argv or [])])
    try:
        return COMMANDS[args.command][1](args)
    except PdagInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
