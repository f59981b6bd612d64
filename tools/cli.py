"""`pdag`: the command line front.  It only parses arguments, calls the core and prints."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.errors import PdagInputError
from tools.estimate import commands as estimate_commands

DEFAULT_PLAN: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
    "parallel": {"tp": 8},
    "workload": {"input_len": 2048, "output_len": 256, "batch_size": 8},
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


def plan_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """A plan dict from a file and/or flags; with neither, the embedded default deployment."""
    if args.plan_file:
        text = sys.stdin.read() if args.plan_file == "-" else Path(args.plan_file).read_text(encoding="utf-8")
        try:
            plan = json.loads(text)
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON ({exc.msg} at line {exc.lineno})"
            raise PdagInputError("plan_file", problem, "a plan object") from None
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


def cmd_build(args: argparse.Namespace) -> int:
    from tools.build import build_dag
    from tools.render import render_text, to_dot, to_mermaid

    result = build_dag(plan_from_args(args))
    if args.json:
        print(result.model_dump_json(indent=None))
    elif args.mermaid:
        print(to_mermaid(result.summary), end="")
    elif args.dot:
        print(to_dot(result.summary), end="")
    else:
        print(render_text(result.summary, result.gpus_used, result.gpus_available))
    return 0


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None]]] = {}


def command(name: str, help_text: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    """Register a subcommand; modules of the core add theirs here."""

    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help_text, fn, extra or add_plan_args)
        return fn

    return deco


def _build_args(p: argparse.ArgumentParser) -> None:
    add_plan_args(p)
    p.add_argument("--mermaid", action="store_true", help="print a folded Mermaid flowchart")
    p.add_argument("--dot", action="store_true", help="print a folded Graphviz DOT graph")


command("build", "plan -> execution DAG; prints a folded summary", _build_args)(cmd_build)


def cmd_models(args: argparse.Namespace) -> int:
    from tools.models import load_preset, preset_ids

    rows = []
    for pid in preset_ids():
        m = load_preset(pid)
        moe = f"MoE {m.moe.num_experts}e top-{m.moe.experts_per_token}" if m.moe else "dense"
        rows.append({"id": pid, "params_b": round(m.param_count() / 1e9, 2), "layers": m.num_layers,
                     "heads": m.num_heads, "kv_heads": m.num_kv_heads, "attention": m.attention, "ffn": moe})
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['id']:<24} {r['params_b']:>8.2f}B  {r['layers']:>3} layers  heads {r['heads']}/{r['kv_heads']}"
                  f"  {r['attention']:<4} {r['ffn']}")
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from tools.hardware import accelerator_ids, load_accelerator

    rows = []
    for gid in accelerator_ids():
        a = load_accelerator(gid)
        rows.append({"id": gid, "memory_gb": a.memory_bytes / 1e9, "hbm_tb_s": a.memory_bandwidth_bytes_per_s / 1e12,
                     "bf16_tflops": a.dense_tflops.bf16, "fp8_tflops": a.dense_tflops.fp8,
                     "intra_node": f"{a.intra_node.kind} {a.intra_node.bandwidth_bytes_per_s / 1e9:g} GB/s"})
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['id']:<12} {r['memory_gb']:>6.0f} GB  {r['hbm_tb_s']:>5.2f} TB/s  bf16 {r['bf16_tflops']} TFLOPS"
                  f"  fp8 {r['fp8_tflops']}  {r['intra_node']}")
    return 0


def _json_only(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


command("models", "list the model presets", _json_only)(cmd_models)
command("gpus", "list the accelerator presets", _json_only)(cmd_gpus)


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
command("estimate", "plan -> latency, throughput, KV cache and memory estimate",
        estimate_commands.estimate_args)(estimate_commands.cmd_estimate)
command("accuracy", "score the estimator against published measurements",
        estimate_commands.accuracy_args)(estimate_commands.cmd_accuracy)
command("calibrate", "fit an accelerator's efficiency factors to measurements",
        estimate_commands.calibrate_args)(estimate_commands.cmd_calibrate)


def _register_search_and_engines() -> None:
    from tools import engines, search

    command("search", "search parallel plans for a model and cluster", search.search_args)(search.cmd_search)
    command("export", "plan -> vLLM / SGLang / TensorRT-LLM launch command", engines.export_args)(engines.cmd_export)
    command("import", "vLLM / SGLang launch command -> plan", engines.import_args)(engines.cmd_import)


_register_search_and_engines()


def _register_validate_and_fix() -> None:
    from tools.autofix import cmd_fix
    from tools.validate import cmd_validate

    command("validate", "plan or DAG (JSON file) -> the rules it breaks, where and why")(cmd_validate)
    command("fix", "plan or DAG (JSON file) -> repaired plan, with the changes and what is left")(cmd_fix)


_register_validate_and_fix()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdag", description="Plan, validate and estimate LLM inference parallelism.")
    sub = parser.add_subparsers(dest="command")
    for name, (help_text, _, add_args) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text))
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["build", *(argv or [])])
    try:
        return COMMANDS[args.command][1](args)
    except PdagInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
