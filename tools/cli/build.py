"""`pdag build`, `pdag plan` (the default), `pdag models` and `pdag gpus`."""

from __future__ import annotations

import argparse
import json
import shlex

from tools.cli.common import add_plan_args, command, plan_from_args


def cmd_build(args: argparse.Namespace) -> int:
    from tools.core.build import build_dag
    from tools.core.render import render_text, to_dot, to_mermaid

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


def _build_args(p: argparse.ArgumentParser) -> None:
    add_plan_args(p)
    p.add_argument("--mermaid", action="store_true", help="print a folded Mermaid flowchart")
    p.add_argument("--dot", action="store_true", help="print a folded Graphviz DOT graph")


command("build", "plan -> execution DAG; prints a folded summary", _build_args)(cmd_build)


def cmd_models(args: argparse.Namespace) -> int:
    from tools.core.models import load_preset, preset_ids

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
    from tools.core.hardware import accelerator_ids, load_accelerator

    rows = []
    for gid in accelerator_ids():
        a = load_accelerator(gid)
        rows.append({"id": gid, "memory_gb": a.memory_bytes / 1e9, "memory": a.memory_label(),
                     "capacity_gib": a.capacity_bytes / 2**30, "hbm_tb_s": a.memory_bandwidth_bytes_per_s / 1e12,
                     "bf16_tflops": a.dense_tflops.bf16, "fp8_tflops": a.dense_tflops.fp8,
                     "intra_node": f"{a.intra_node.kind} {a.intra_node.bandwidth_bytes_per_s / 1e9:g} GB/s"})
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['id']:<13} {r['memory']:<26} {r['hbm_tb_s']:>5.2f} TB/s  bf16 {r['bf16_tflops']} TFLOPS"
                  f"  fp8 {r['fp8_tflops']}  {r['intra_node']}")
    return 0


def _json_only(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


command("models", "list the model presets", _json_only)(cmd_models)
command("gpus", "list the accelerator presets", _json_only)(cmd_gpus)




def cmd_plan(args: argparse.Namespace) -> int:
    """The main job: one deployment built, checked against every rule and estimated, in one readable page."""
    from tools.core.build import build_dag
    from tools.core.errors import PdagInputError
    from tools.core.render import render_text
    from tools.engines.launch import export_plan
    from tools.estimate import estimate_performance
    from tools.rules.validate import validate_dag

    plan = plan_from_args(args)
    built = build_dag(plan)
    checked = validate_dag(plan=plan)
    est = estimate_performance(plan=plan)
    if args.json:
        print(json.dumps({"plan": plan, "gpus_used": built.gpus_used, "summary": built.summary.model_dump(),
                          "validation": checked.model_dump(mode="json"), "estimate": est.model_dump(mode="json")}))
        return 0 if checked.valid else 1
    print(f"plan: {json.dumps(plan)}\n")
    print(render_text(built.summary, built.gpus_used, built.gpus_available))
    print(f"\nvalidation: {checked.summary}")
    for v in checked.violations:
        print(f"  {v.severity.upper():7} {v.rule_id}: {v.message}")
    print("\nestimate:\n" + "\n".join(est.summary().splitlines()[:5]))
    same = " ".join(shlex.quote(a) for a in getattr(args, "argv", []) if a != "--json")
    same = f" {same}" if same else ""
    print(f"\nnext: pdag estimate{same}    (full breakdown)\n      pdag search{_search_flags(args)}    (alternatives)")
    try:
        export_plan(plan, "vllm")
        print(f"      pdag export{same} --engine vllm    (launch command)")
    except PdagInputError as exc:
        print(f"      (no engine launch command: {exc.problem})")
    return 0 if checked.valid else 1


def _search_flags(args: argparse.Namespace) -> str:
    """The main job's arguments minus the degrees (search chooses those itself)."""
    out: list[str] = []
    skip = False
    for a in getattr(args, "argv", []):
        if skip:
            skip = False
            continue
        if a.split("=")[0] in ("--dp", "--pp", "--tp", "--ep", "--sp", "--prefill-sp"):
            skip = "=" not in a
            continue
        if a != "--json":
            out.append(shlex.quote(a))
    return (" " + " ".join(out)) if out else ""


command("plan", "build, validate and estimate a plan in one page (the default command)")(cmd_plan)
