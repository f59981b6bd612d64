"""Shared pieces of the `pdag` command line: the plan flags and the subcommand registry."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.errors import PdagInputError

# The workload is left to the plan model's defaults, so flags, plan files and MCP calls estimate the same thing.
DEFAULT_PLAN: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
    "parallel": {"tp": 8},
    "objective": "latency",
}


def add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan_file", nargs="?", help="a plan JSON file ('-' for stdin); flags below override it")
    p.add_argument("--model", help="model preset id, e.g. llama-3.1-70b")
    p.add_argument("--gpu", help="accelerator preset id, e.g. h100-sxm")
    p.add_argument("--gpus", type=int, help="GPUs the plan may use (hardware.num_gpus)")
    p.add_argument("--gpus-per-node", type=int)
    for d in ("dp", "pp", "tp", "ep", "sp"):
        p.add_argument(f"--{d}", type=int, help=f"{d.upper()} degree")
    p.add_argument("--prefill-sp", type=int, help="SP degree in prefill only")
    p.add_argument("--input-len", type=int)
    p.add_argument("--output-len", type=int)
    p.add_argument("--batch", type=int, help="sequences per DP replica")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"])
    p.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"])
    p.add_argument("--objective", choices=["latency", "throughput"])
    p.add_argument("--json", action="store_true", help="print the complete result as JSON")


def read_json(path: str, field: str = "plan_file") -> Any:
    """A JSON document from a file ('-': stdin), with unreadable or malformed input as a field error."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PdagInputError(field, f"cannot read {path!r} ({exc.strerror})", "a readable JSON file or -") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PdagInputError(field, f"not valid JSON ({exc.msg} at line {exc.lineno})", "a JSON object") from None


def plan_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """A plan dict from a file and/or flags; with neither, the embedded default deployment."""
    if args.plan_file:
        plan = read_json(args.plan_file)
        if not isinstance(plan, dict):
            raise PdagInputError("plan_file", f"expected a JSON object, got {type(plan).__name__}", "a plan object")
    else:
        plan = json.loads(json.dumps(DEFAULT_PLAN))
    if args.model:
        plan["model"] = args.model
    hw = plan.setdefault("hardware", {})
    for flag, key in (("gpu", "gpu"), ("gpus", "num_gpus"), ("gpus_per_node", "gpus_per_node")):
        if getattr(args, flag) is not None:
            hw[key] = getattr(args, flag)
    degree_flags = any(getattr(args, d) is not None for d in ("dp", "pp", "tp", "ep", "sp"))
    if not args.plan_file and (degree_flags or args.gpus is not None or args.model):
        plan["parallel"] = {}  # flags describe a new deployment: do not inherit the default's TP 8
    par = plan.setdefault("parallel", {})
    for d in ("dp", "pp", "tp", "ep", "sp"):
        if getattr(args, d) is not None:
            par[d] = getattr(args, d)
    if args.prefill_sp is not None:
        plan.setdefault("phases", {}).setdefault("prefill", {})["sp"] = args.prefill_sp
    wl = plan.setdefault("workload", {})
    for flag, key in (("input_len", "input_len"), ("output_len", "output_len"), ("batch", "batch_size")):
        if getattr(args, flag) is not None:
            wl[key] = getattr(args, flag)
    for key in ("dtype", "kv_dtype", "objective"):
        if getattr(args, key) is not None:
            plan[key] = getattr(args, key)
    return plan


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None]]] = {}


def command(
    name: str, help_text: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register a subcommand; modules of the core add theirs here."""

    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help_text, fn, extra or add_plan_args)
        return fn

    return deco
