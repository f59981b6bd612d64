"""`pdag`: the command line front.  It only parses arguments, calls the core and prints."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

from tools.cli import build, check, conformance, estimate, report, rules, search  # noqa: F401  (each registers its subcommands)
from tools.cli.common import COMMANDS, add_plan_args, plan_from_args
from tools.core.errors import PdagInputError

__all__ = ["add_plan_args", "main", "plan_from_args"]


def version() -> str:
    try:
        return metadata.version("pdag")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def _quiet_broken_pipe() -> int:
    """The reader went away (`pdag ... | head -1`): stop quietly, as Unix tools do."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141 - 128  # SIGPIPE's number: what a shell reports as the reason


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # every server flag passes through; `pdag serve --help` shows them
        return rules.serve(argv[1:])
    parser = argparse.ArgumentParser(prog="pdag", description="Plan, validate and estimate LLM inference parallelism.")
    parser.add_argument("--version", action="version", version=f"pdag {version()}")
    sub = parser.add_subparsers(dest="command")
    for name, (help_text, _, add_args) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text))
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["plan", *argv]  # `pdag [plan flags]` is the main job
    args = parser.parse_args(argv)
    args.argv = argv[1:]  # as typed after the subcommand, for the "next:" lines of the main job
    try:
        code = COMMANDS[args.command][1](args)
        sys.stdout.flush()
        return code
    except PdagInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # e.g. calibrate --out into a missing directory or a full disk
        print(f"error: {exc.strerror or exc}" + (f": {exc.filename!r}" if exc.filename else ""), file=sys.stderr)
        return 1
    except (RecursionError, MemoryError, OverflowError, ValueError) as exc:
        if os.environ.get("PDAG_DEBUG"):
            raise
        print(f"error: pdag could not handle this input ({type(exc).__name__}: {str(exc)[:200]}); "
              "set PDAG_DEBUG=1 for the traceback and report it", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
