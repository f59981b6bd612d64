"""`pdag search`, `pdag export` and `pdag import`."""

from __future__ import annotations

import json
from typing import Any

from tools.cli.common import command, read_json
from tools.engines import ENGINES, export_plan, import_command
from tools.search import search_strategies


def search_args(p: Any) -> None:
    """Arguments of ``pdag search``."""
    p.add_argument("--model", required=True, help="model preset id, e.g. llama-3.1-70b")
    p.add_argument("--gpu", default="h100-sxm", help="accelerator preset id")
    p.add_argument("--gpus", type=int, required=True, help="GPUs available")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--objective", choices=["latency", "throughput"], default="latency")
    p.add_argument("--input-len", type=int)
    p.add_argument("--output-len", type=int)
    p.add_argument("--batch", type=int, help="sequences per replica (searched for throughput when absent)")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"], default="bf16")
    p.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"])
    p.add_argument("--max-ttft-ms", type=float)
    p.add_argument("--max-tpot-ms", type=float)
    p.add_argument("--min-throughput", type=float, help="output tokens/s of the deployment")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--no-attention-dp", action="store_true", help="leave attention-DP layouts out (MoE models)")
    p.add_argument("--no-disaggregated", action="store_true", help="do not compare disaggregated prefill/decode")
    p.add_argument("--json", action="store_true", help="print the complete result as JSON")
    p.add_argument("--report", metavar="HTML", help="also write an HTML report: Pareto front and the best plan")


def cmd_search(args: Any) -> int:
    workload = {k: v for k, v in (("input_len", args.input_len), ("output_len", args.output_len),
                                  ("batch_size", args.batch)) if v is not None}
    slo = {k: v for k, v in (("max_ttft_ms", args.max_ttft_ms), ("max_tpot_ms", args.max_tpot_ms),
                             ("min_throughput_tokens_per_s", args.min_throughput)) if v is not None}
    result = search_strategies(
        model=args.model, hardware={"gpu": args.gpu, "num_gpus": args.gpus, "gpus_per_node": args.gpus_per_node},
        workload=workload or None, objective=args.objective, slo=slo or None, top_k=args.top,
        dtype=args.dtype, kv_dtype=args.kv_dtype, attention_dp=not args.no_attention_dp,
        disaggregated=False if args.no_disaggregated else None,
    )
    if args.report:
        from tools.cli.report import write_page
        from tools.pictures.report import search_report

        write_page(args.report, search_report(result)[1])
    if args.json:
        print(result.model_dump_json())
        return 0
    print(f"{result.model} on {result.hardware['num_gpus']}x {result.hardware['gpu']}, objective {result.objective}"
          f" ({result.estimated} estimates, {result.elapsed_ms:.0f} ms)")
    for p in result.top:
        print(f"{p.rank}. {p.label} [{p.gpus_used} GPUs, batch {p.batch_size}]: {p.reason}")
    print("Pareto (per-user tok/s vs tok/s per GPU): " + "; ".join(
        f"{p.label} b{p.batch_size} {p.user_tokens_per_s:.1f}/{p.throughput_per_gpu:.0f}" for p in result.pareto))
    print("rejected: " + ", ".join(f"{k} {v}" for k, v in result.rejected.items()))
    if result.comparison:
        print(f"aggregated vs disaggregated: {result.comparison}")
    for note in result.notes:
        print(f"note: {note}")
    if args.report:
        print(f"wrote {args.report}")
    return 0


def export_args(p: Any) -> None:
    """Arguments of ``pdag export``."""
    p.add_argument("plan_file", help="a plan JSON file ('-' for stdin)")
    p.add_argument("--engine", required=True, choices=list(ENGINES))
    p.add_argument("--json", action="store_true")


def cmd_export(args: Any) -> int:
    result = export_plan(read_json(args.plan_file), args.engine)
    if args.json:
        print(result.model_dump_json())
        return 0
    print(result.command)
    for note in result.notes:
        print(f"# {note}")
    return 0


def import_args(p: Any) -> None:
    """Arguments of ``pdag import``."""
    p.add_argument("launch_command", help="a pasted 'vllm serve ...' or 'python -m sglang.launch_server ...' line")
    p.add_argument("--gpu", default="h100-sxm")
    p.add_argument("--gpus-per-node", type=int, default=8)


def cmd_import(args: Any) -> int:
    result = import_command(args.launch_command, gpu=args.gpu, gpus_per_node=args.gpus_per_node)
    print(json.dumps(result.plan, indent=2))
    for note in result.notes:
        print(f"# {note}", file=__import__("sys").stderr)
    return 0


command("search", "search parallel plans for a model and cluster", search_args)(cmd_search)
command("export", "plan -> vLLM / SGLang / TensorRT-LLM launch command", export_args)(cmd_export)
command("import", "vLLM / SGLang launch command -> plan", import_args)(cmd_import)
