"""PERF-* and OBJ-*: what a plan or DAG can show of the estimation rules.

The estimator (tools.estimate) follows these rules itself; here they are checked on what an agent hands in:
the DAG's shape (one output per branch, every collective on a path, router fan-out) and, when the DAG carries
an ``estimate`` claim (top-level or in the RequestNode's meta), that claim's consistency.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.core.quantization import weight_bytes
from tools.rules.registry import Change, Context, Finding, checker, fixer, param

OBJECTIVES = ("latency", "throughput")


def _estimate(ctx: Context) -> dict[str, Any] | None:
    e = ctx.claims.get("estimate")
    return e if isinstance(e, dict) else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _close(a: float, b: float, rule_id: str) -> bool:
    """Equal within the rule's relative tolerance (claims are rounded figures)."""
    return abs(a - b) <= param(rule_id, "tolerance") * max(abs(a), abs(b), 1e-9)


@checker("PERF-CRITICAL-PATH")
def check_critical_path(ctx: Context) -> Iterator[Finding]:
    heads: dict[Any, list[str]] = defaultdict(list)
    for n in ctx.of(NodeType.LM_HEAD):
        heads[ctx.rp[n]].append(n)
    for ph in ctx.of(NodeType.PHASE):
        k = ctx.rp[ph]
        if len(heads.get(k, [])) != 1:
            yield Finding(f"branch {ph} ends in {len(heads.get(k, []))} LMHeadNodes; latency follows the critical path "
                          "of each branch, which ends in exactly one output (LM head)", [ph, *heads.get(k, [])],
                          hint="end each phase branch in one LMHeadNode")
            return


@checker("PERF-NO-DEGREE-SCALING", needs="any")
def check_no_degree_scaling(ctx: Context) -> Iterator[Finding]:
    est = _estimate(ctx)
    if est is None:
        return
    claimed = _num(est.get("prefill_latency_ms"))
    base = _num(est.get("baseline_latency_ms"))
    if claimed is None:
        return
    if ctx.plan is not None:
        d = ctx.plan.parallel
        prod = d.pp * d.tp * max(1, d.ep) * d.sp
    else:
        i = ctx.inferred_degrees
        prod = i["pp"] * i["tp"] * i["ep"] * i["sp"]
    if base is None and ctx.plan is not None:
        w = ctx.plan.workload
        flops = 2.0 * ctx.plan.spec.active_param_count() * w.batch_size * w.input_len
        base = flops / ctx.plan.accelerator.peak_flops(ctx.plan.dtype) * 1000
    if base and prod > 1 and _close(claimed * prod, base, "PERF-NO-DEGREE-SCALING"):
        yield Finding(f"the claimed prefill latency {claimed:.3g} ms is the single-GPU time {base:.3g} ms divided by "
                      "the "
                      f"product of the degrees ({prod}); latency comes from the critical path, not from dividing by "
                      "degrees", field="estimate.prefill_latency_ms", hint="use estimate_performance")


@checker("PERF-PHASES-SEPARATE", needs="any")
def check_phases_separate(ctx: Context) -> Iterator[Finding]:
    est = _estimate(ctx)
    if est is None:
        return
    pre, dec = _num(est.get("prefill_latency_ms")), _num(est.get("decode_latency_ms_per_token"))
    if pre is None or dec is None:
        yield Finding("the estimate does not report prefill latency and decode latency per token separately (fields "
                      "prefill_latency_ms, decode_latency_ms_per_token)", field="estimate")
        return
    e2e = _num(est.get("e2e_latency_ms"))
    out = ctx.plan.workload.output_len if ctx.plan is not None else _num(est.get("output_len"))
    if e2e is not None and out and not _close(e2e, pre + out * dec, "PERF-PHASES-SEPARATE"):
        yield Finding(f"e2e_latency_ms {e2e:.4g} is not prefill {pre:.4g} + {out:g} x decode step {dec:.4g} ms",
                      field="estimate.e2e_latency_ms")


@checker("PERF-COMM-ACCOUNTED")
def check_comm_accounted(ctx: Context) -> Iterator[Finding]:
    # the gathered logits end a branch: the token sampled from them leaves the DAG (decode's next step is the
    # DecodeStepNode's loop, not an edge)
    loose = [n for n in ctx.real_nodes if ctx.is_comm(n) and (
        not ctx.pred[n] or (not ctx.succ[n] and ctx.g._node[n].get("role") != "logits"))]
    if loose:
        yield Finding(f"{len(loose)} communication node(s) are not on any path (e.g. {loose[0]} has no "
                      f"{'input' if not ctx.pred[loose[0]] else 'consumer'}); each collective sits on the path whose "
                      "time it adds to", loose)
    est = _estimate(ctx)
    brk = est.get("breakdown") if est else None
    if isinstance(brk, dict) and _num(brk.get("comm_ms")) == 0:
        multi = [n for n in ctx.real_nodes if ctx.is_comm(n) and len(ctx.devices[n]) > 1]
        if multi:
            yield Finding(f"the estimate charges 0 ms of communication but the DAG has {len(multi)} collectives over "
                          "several GPUs; each adds time from its message size, group and link", multi)


@checker("PERF-DECODE-MEMORY-BOUND", needs="any")
def check_decode_memory_bound(ctx: Context) -> Iterator[Finding]:
    est = _estimate(ctx)
    if est is None or ctx.plan is None or ctx.layout is None:
        return
    dec = _num(est.get("decode_latency_ms_per_token"))
    if dec is None:
        return
    p = ctx.plan
    per_param = min(weight_bytes(p, "dense"), weight_bytes(p, "expert"))  # a floor: the narrowest storage
    bytes_read = p.spec.active_param_count() * per_param / ctx.layout.replica_gpus
    floor = bytes_read / p.accelerator.memory_bandwidth_bytes_per_s * 1000
    if dec < floor:
        yield Finding(f"the claimed decode step {dec:.3g} ms is below {floor:.3g} ms, the time to read the active "
                      "weights once at peak memory bandwidth; decode is memory-bound", field="estimate")


@checker("PERF-THROUGHPUT-METRIC", needs="any")
def check_throughput(ctx: Context) -> Iterator[Finding]:
    est = _estimate(ctx)
    if est is None:
        return
    thr = est.get("throughput")
    tok = _num(thr.get("output_tokens_per_s")) if isinstance(thr, dict) else None
    if tok is None:
        yield Finding("the estimate reports no throughput.output_tokens_per_s for the whole deployment",
                      field="estimate.throughput")
        return
    dec = _num(est.get("decode_latency_ms_per_token"))
    if ctx.plan is not None and ctx.layout is not None and dec:
        cap = ctx.layout.dp * ctx.plan.workload.batch_size * 1000 / dec
        if tok > cap * (1 + param("PERF-THROUGHPUT-METRIC", "tolerance")):
            yield Finding(f"throughput {tok:.4g} tokens/s exceeds dp x batch / decode step = {cap:.4g}; DP multiplies "
                          "throughput, nothing else does", field="estimate.throughput.output_tokens_per_s")


@checker("PERF-MOE-MAX-EXPERT")
def check_moe_max_expert(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    if spec is None or spec.moe is None:
        return
    bad = [n for n in ctx.of(NodeType.ROUTER)
           if "top_k" in (ctx.attr(n, "meta") or {}) and ctx.attr(n, "meta")["top_k"] != spec.moe.experts_per_token]
    if bad:
        yield Finding(f"router {bad[0]} sends each token to top_k = {ctx.attr(bad[0], 'meta')['top_k']} experts but "
                      f"{spec.id} routes to {spec.moe.experts_per_token}; the MoE time is the slowest Expert node's "
                      "share of the active experts", bad)


@checker("OBJ-EXPLICIT", needs=("raw", "graph"))
def check_objective(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is None and ctx.raw_plan is not None and "objective" in ctx.raw_plan:
        obj = ctx.raw_plan["objective"]
        if obj not in OBJECTIVES:
            yield Finding(f"objective is {obj!r}; it must be 'latency' or 'throughput'", field="plan.objective",
                          hint="say which one the plan optimises")
    if ctx.graph is None:
        return
    for r in ctx.of(NodeType.REQUEST):
        obj = (ctx.attr(r, "meta") or {}).get("objective")
        if obj is not None and obj not in OBJECTIVES:
            yield Finding(f"the RequestNode states objective {obj!r}; it must be 'latency' or 'throughput'", [r])


@fixer("OBJ-EXPLICIT")
def fix_objective(plan: dict[str, Any], ctx: Context) -> list[Change]:
    obj = plan.get("objective")
    text = str(obj).lower()
    new = "throughput" if any(w in text for w in ("through", "qps", "tok", "rate", "cost", "batch")) else "latency"
    plan["objective"] = new
    return [Change(rule_id="OBJ-EXPLICIT", message=f"set objective from {obj!r} to {new!r} (the closest of latency / "
                   "throughput)", field="plan.objective", before=obj, after=new)]
