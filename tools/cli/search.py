"""`pdag search`, `pdag export` and `pdag import`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tools.cli.common import add_plan_args, command, plan_from_args, read_json
from tools.core.errors import PdagInputError
from tools.engines.flags import default_version
from tools.engines.launch import ENGINES, TRTLLM_CONFIG_FILE, export_plan, import_deployment
from tools.search.strategies import search_strategies


def search_args(p: Any) -> None:
    """Arguments of ``pdag search``: the plan flags (the degrees are what it searches) and the search's own."""
    add_plan_args(p)
    p.add_argument("--max-ttft-ms", type=float)
    p.add_argument("--max-tpot-ms", type=float)
    p.add_argument("--min-throughput", type=float, help="output tokens/s of the deployment")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--no-attention-dp", action="store_true", help="leave attention-DP layouts out (MoE models)")
    p.add_argument("--allow-expert-tp", action="store_true",
                   help="also try TP inside experts (MoE; vLLM's default without expert parallelism, disallowed "
                        "by the rules unless a plan opts in)")
    p.add_argument("--no-disaggregated", action="store_true", help="do not compare disaggregated prefill/decode")
    p.add_argument("--serving", action=argparse.BooleanOptionalAction, default=None,
                   help="rank by served figures (continuous batching at the load; default: when the workload states "
                        "concurrency or request_rate); with --objective throughput and SLO flags: most tokens/s "
                        "within the TTFT/TPOT targets")
    p.add_argument("--lockstep", action="store_true",
                   help="with --serving: check --max-ttft-ms against the TTFT of clients whose prompts arrive in one "
                        "burst (fixed-length closed-loop benchmarks)")
    p.add_argument("--report", metavar="HTML", help="also write an HTML report: Pareto front and the best plan")
    p.add_argument("--unlaunchable", action="store_true",
                   help="also list plans no engine launches (labelled); default: only plans --engine (any engine "
                        "when it is not vllm, sglang or trtllm) launches")


def cmd_search(args: Any) -> int:
    given = [f"--{d}" for d in ("dp", "pp", "tp", "ep", "sp", "prefill_sp") if getattr(args, d) is not None]
    if given:
        raise PdagInputError(given[0].replace("_", "-"), "search chooses the parallel degrees itself",
                             "model, GPU, workload, dtype and objective flags (or a plan file)")
    plan = plan_from_args(args)
    # Without a plan file only the workload flags given count: an absent batch size is searched (throughput).
    workload = plan.get("workload") if args.plan_file else {
        k: v for k, v in (("input_len", args.input_len), ("output_len", args.output_len), ("batch_size", args.batch),
                          ("concurrency", args.concurrency), ("request_rate", args.request_rate))
        if v is not None}
    slo = {k: v for k, v in (("max_ttft_ms", args.max_ttft_ms), ("max_tpot_ms", args.max_tpot_ms),
                             ("min_throughput_tokens_per_s", args.min_throughput)) if v is not None}
    if slo and args.lockstep:
        slo["arrivals"] = "lockstep"
    result = search_strategies(
        model=plan["model"], hardware=plan["hardware"], workload=workload or None,
        objective=plan.get("objective", "latency"), slo=slo or None, top_k=args.top,
        dtype=plan.get("dtype", "bf16"), kv_dtype=plan.get("kv_dtype"),
        weights=plan.get("weights"), attention_dp=not args.no_attention_dp, allow_expert_tp=args.allow_expert_tp,
        disaggregated=False if args.no_disaggregated else None, engine=plan.get("engine", "generic"),
        serving=args.serving, engine_options=plan.get("engine_options"), checkpoint=plan.get("checkpoint"),
        unlaunchable=args.unlaunchable, speculative=plan.get("speculative"),
    )
    if args.report:
        from tools.cli.report import write_page
        from tools.pictures.report import search_report

        write_page(args.report, search_report(result)[1])
    if args.json:
        print(result.model_dump_json())
        return 0
    print(f"{result.model} on {result.hardware['num_gpus']}x {result.hardware['gpu']}, objective {result.objective}"
          f" ({result.estimated} estimates)")
    for p in result.top:
        print(f"{p.rank}. {p.label} [{p.gpus_used} GPUs, batch {p.batch_size} per replica, {p.in_flight} in flight]: "
              f"{p.reason}")
        launch = f"launch with {', '.join(p.engines)}" if p.engines else "no engine launches it as planned"
        print(f"   {launch}" + "".join(f"; not {e}: {why}" for e, why in p.engine_gaps.items()))
    basis = "served" if any("served figures" in p.reason for p in result.pareto) else "steady-state"
    print(f"Pareto (per-user tok/s vs tok/s per GPU, {basis} figures): " + "; ".join(
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
    """Arguments of ``pdag export``: a plan file (or `pdag plan --json` output) and/or the plan flags."""
    add_plan_args(p)
    p.add_argument("--force", action="store_true",
                   help="write the command even though validate refuses the plan (the output says why)")
    p.add_argument("--engine-version", metavar="VERSION",
                   help="engine release whose flags to write (default: the current one with a flag table: "
                        + ", ".join(f"{e} {default_version(e)}" for e in ENGINES) + ")")


def cmd_export(args: Any) -> int:
    plan = plan_from_args(args)
    engine = plan.get("engine")
    if engine not in ENGINES:
        raise PdagInputError("--engine", f"exports need a target engine, got {engine!r}", ", ".join(ENGINES))
    result = export_plan(plan, engine, force=args.force, engine_version=args.engine_version)
    if args.json:
        print(result.model_dump_json())
        return 0
    print(result.command)
    if result.config:
        print(f"# {TRTLLM_CONFIG_FILE}: " + json.dumps(result.config, sort_keys=True))
    for note in result.notes:
        print(f"# {note}")
    return 0


def import_args(p: Any) -> None:
    """Arguments of ``pdag import``."""
    p.add_argument("launch_command",
                   help="a pasted 'vllm serve ...', 'python -m sglang.launch_server ...' or 'trtllm-serve ...' line")
    p.add_argument("--gpu", default="h100-sxm")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--engine-config", metavar="FILE",
                   help="the options of the command's --config YAML (TensorRT-LLM or vLLM), as a JSON file")
    p.add_argument("--replicas", type=int, default=1,
                   help="servers running this command behind a router (e.g. Kubernetes replicas): plain DP")
    p.add_argument("--decode-command", metavar="COMMAND",
                   help="disaggregated serving: the decode pool's launch command (launch_command is the prefill "
                        "pool's)")
    p.add_argument("--decode-engine-config", metavar="FILE",
                   help="the decode command's --config YAML as a JSON file, when it differs from the prefill pool's")
    p.add_argument("--decode-replicas", type=int, default=1, help="servers running the decode command")
    p.add_argument("--input-len", type=int, help="the user's prompt tokens per request (a command states no load)")
    p.add_argument("--output-len", type=int, help="the user's output tokens per request")
    p.add_argument("--batch", type=int, help="sequences per replica")
    p.add_argument("--concurrency", type=int, help="clients in flight in all")
    p.add_argument("--objective", choices=("latency", "throughput"), help="the user's goal (default latency)")
    p.add_argument("--hf-config", metavar="FILE",
                   help="the checkpoint's config.json, for a model with no preset (the command's repo stays the "
                        "checkpoint an export serves)")


def cmd_import(args: Any) -> int:
    config = read_json(args.engine_config, "--engine-config") if args.engine_config else None
    decode = read_json(args.decode_engine_config, "--decode-engine-config") if args.decode_engine_config else None
    result = import_deployment(args.launch_command, gpu=args.gpu, gpus_per_node=args.gpus_per_node,
                               engine_config=config, replicas=args.replicas, decode_command=args.decode_command,
                               decode_engine_config=decode, decode_replicas=args.decode_replicas,
                               workload={k: v for k, v in (
                                   ("input_len", args.input_len), ("output_len", args.output_len),
                                   ("batch_size", args.batch), ("concurrency", args.concurrency)) if v is not None},
                               objective=args.objective,
                               hf_config=read_json(args.hf_config, "--hf-config") if args.hf_config else None)
    print(json.dumps(result.plan, indent=2))
    for note in result.notes:
        print(f"# {note}", file=__import__("sys").stderr)
    return 0


command("search", "search parallel plans for a model and cluster", search_args)(cmd_search)
command("export", "plan -> vLLM / SGLang / TensorRT-LLM launch command", export_args)(cmd_export)
command("import", "vLLM / SGLang / TensorRT-LLM / Dynamo launch command (and a decode pool's) -> plan",
        import_args)(cmd_import)
