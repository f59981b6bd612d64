"""HW-*: the accelerator is fully specified and supports the dtype; collectives that span nodes are flagged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.core.errors import PdagInputError
from tools.core.formats import FORMATS, format_info, fp4_native, runs_on
from tools.core.hardware import resolve_accelerator
from tools.core.plan import parse_plan
from tools.core.quantization import weights_of
from tools.rules.registry import Change, Context, Finding, checker, fixer

COLLECTIVES = (NodeType.ALL_REDUCE, NodeType.ALL_GATHER, NodeType.REDUCE_SCATTER, NodeType.ALL_TO_ALL)


@checker("HW-ACCELERATOR-SPEC", needs="raw")
def check_accelerator(ctx: Context) -> Iterator[Finding]:
    raw = ctx.raw_plan or {}
    hw = raw.get("hardware")
    if not isinstance(hw, dict) or "gpu" not in hw:
        return
    try:
        acc = resolve_accelerator(hw["gpu"], field="hardware.gpu")
    except PdagInputError:
        return  # an unusable accelerator is an input error in every tool (screen_plan), not a rule finding
    sixteen = acc.supports("bf16") or acc.supports("fp16")
    dtype = raw.get("dtype", "bf16")
    # a narrower dtype than the GPU computes in runs weight-only (de-quantized in the GEMM), as engines do
    if isinstance(dtype, str) and dtype in ("bf16", "fp16", "fp8", "int8", "int4") and not acc.supports(dtype) \
            and not (sixteen and runs_on(dtype, acc)):
        yield Finding(f"{acc.name} has no {dtype} peak compute (supports {', '.join(acc.supported_dtypes())}); the "
                      "dtype must be one the accelerator runs", field="plan.dtype",
                      hint=f"use one of {', '.join(acc.supported_dtypes())}")
    weights = raw.get("weights") or _implied_weights(raw)
    if isinstance(weights, str) and weights in FORMATS and not (runs_on(weights, acc) and sixteen):
        native = list(fp4_native()) if format_info(weights)["compute"] == "fp4" else []
        yield Finding(f"{acc.name} cannot serve {weights} weights: it has no tensor cores for them and engines "
                      "ship no de-quantizing kernel for the format", field="plan.weights",
                      hint=f"serve it on {', '.join(native)}" if native else "choose a format the GPU runs")


def _implied_weights(raw: dict[str, Any]) -> str | None:
    """The format the plan's checkpoint stores when the plan does not state one (None if it cannot be read)."""
    try:
        return weights_of(parse_plan(raw))
    except PdagInputError:
        return None


@fixer("HW-ACCELERATOR-SPEC")
def fix_accelerator(plan: dict[str, Any], ctx: Context) -> list[Change]:
    """Only the dtype can be repaired (to the accelerator's narrowest supported float type); an unknown GPU cannot."""
    try:
        acc = resolve_accelerator(plan["hardware"]["gpu"])
    except (PdagInputError, KeyError, TypeError):
        return []
    dtype = plan.get("dtype", "bf16")
    if acc.supports(dtype):
        return []
    new = next((d for d in ("bf16", "fp16", "fp8") if acc.supports(d)), acc.supported_dtypes()[0])
    plan["dtype"] = new
    return [Change(rule_id="HW-ACCELERATOR-SPEC", message=f"changed dtype from {dtype} to {new}: {acc.name} has no "
                   f"{dtype} tensor cores", field="plan.dtype", before=dtype, after=new)]


@checker("HW-INTERCONNECT-COST")
def check_interconnect(ctx: Context) -> Iterator[Finding]:
    gpn = ctx.nvlink_domain  # a node, or a whole NVL72 rack: the estimator prices both on the scale-up link
    seen: dict[tuple[frozenset[int], int, int], bool] = {}
    bad = []
    for n in ctx.of(*COLLECTIVES):
        devs = ctx.devices[n]
        # replicas are shifted copies of replica 0 within their pool: test the set once per replica offset
        pool = ctx.layout.pools.get(ctx.graph.nodes[n].get("phase")) if ctx.from_plan and ctx.layout else None
        shift, reps = (pool.replica_gpus, pool.dp) if pool else (0, 1)
        key = (devs, shift, reps)
        if key not in seen:
            seen[key] = any(len({(d + r * shift) // gpn for d in devs}) > 1 for r in range(reps))
        if seen[key]:
            bad.append(n)
    if bad:
        yield Finding(f"{len(bad)} collective(s) span more than one NVLink domain of {gpn} GPUs (e.g. {bad[0]} on "
                      f"{len(ctx.devices[bad[0]])} GPUs); they run at network bandwidth, the bottleneck of the whole "
                      "collective, and estimate_performance and search_strategies price them so", bad,
                      hint="no change needed when search_strategies ranked this layout: the cost is in its figures, "
                      "so it beat the layouts that keep TP/EP groups in one NVLink domain; for a drafted plan, "
                      "compare with TP/EP inside a domain (a node, or an NVL72 rack) and PP across domains")
