"""GPU-*: the GPU count comes from the devices of the DAG (dp * pp * max(tp, sp, ep)), never from a product."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tools.core.layout import nominal_product
from tools.core.plan import DEFAULT_GPUS_PER_NODE, DEGREES
from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer


def _raw_int_ok(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


@checker("GPU-MIN-ONE", needs="raw")
def check_min_one(ctx: Context) -> Iterator[Finding]:
    raw = ctx.raw_plan or {}
    par = raw.get("parallel")
    if isinstance(par, dict):
        for d in DEGREES:
            if d in par and not _raw_int_ok(par[d]):
                yield Finding(f"parallel.{d} is {par[d]!r}; every degree must be an integer >= 1 (1 = not used)",
                              field=f"plan.parallel.{d}", hint=f"set parallel.{d} to 1 or more")
    phases = raw.get("phases")
    if isinstance(phases, dict):
        for ph, o in phases.items():
            if isinstance(o, dict):
                for d in DEGREES:
                    if d in o and o[d] is not None and not _raw_int_ok(o[d]):
                        yield Finding(f"phases.{ph}.{d} is {o[d]!r}; a degree must be an integer >= 1",
                                      field=f"plan.phases.{ph}.{d}")
    hw = raw.get("hardware")
    if isinstance(hw, dict):
        for k in ("num_gpus", "gpus_per_node"):
            if k in hw and not _raw_int_ok(hw[k]):
                yield Finding(f"hardware.{k} is {hw[k]!r}; it must be an integer >= 1", field=f"plan.hardware.{k}")


@fixer("GPU-MIN-ONE")
def fix_min_one(plan: dict[str, Any], ctx: Context) -> list[Change]:
    changes = []
    par = plan.get("parallel")
    if isinstance(par, dict):
        for d in DEGREES:
            if d in par and not _raw_int_ok(par[d]):
                changes.append(Change(rule_id="GPU-MIN-ONE", message=f"set parallel.{d} to 1: a degree is >= 1",
                                      field=f"plan.parallel.{d}", before=par[d], after=1))
                par[d] = 1
    phases = plan.get("phases")
    if isinstance(phases, dict):
        for ph, o in phases.items():
            if isinstance(o, dict):
                for d in DEGREES:
                    if d in o and o[d] is not None and not _raw_int_ok(o[d]):
                        changes.append(Change(rule_id="GPU-MIN-ONE", message=f"removed phases.{ph}.{d} "
                                              "(not a degree >= 1): the phase inherits parallel." + d,
                                              field=f"plan.phases.{ph}.{d}", before=o[d], after=None))
                        del o[d]
    hw = plan.get("hardware")
    if isinstance(hw, dict):
        if "gpus_per_node" in hw and not _raw_int_ok(hw["gpus_per_node"]):
            changes.append(Change(rule_id="GPU-MIN-ONE",
                                  message=f"set hardware.gpus_per_node to the default {DEFAULT_GPUS_PER_NODE}",
                                  field="plan.hardware.gpus_per_node", before=hw["gpus_per_node"],
                                  after=DEFAULT_GPUS_PER_NODE))
            hw["gpus_per_node"] = DEFAULT_GPUS_PER_NODE
        if "num_gpus" in hw and not _raw_int_ok(hw["num_gpus"]):
            need = 1
            if isinstance(par, dict):
                dp, pp = par.get("dp", 1), par.get("pp", 1)
                w = max(par.get("tp", 1), par.get("sp", 1), par.get("ep", 1))
                need = dp * pp * w
            changes.append(Change(rule_id="GPU-MIN-ONE", message=f"set hardware.num_gpus to {need}, the GPUs the "
                                  "degrees need (dp * pp * max(tp, sp, ep))", field="plan.hardware.num_gpus",
                                  before=hw["num_gpus"], after=need))
            hw["num_gpus"] = need
    return changes


@checker("GPU-DEGREES-DIVIDE-GROUP", needs="plan")
def check_divide_group(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    moe = ctx.plan.spec.is_moe
    for ph, pl in ctx.layout.phases.items():
        w = ctx.layout.pools[ph].group_width
        for name, deg in (("tp", pl.tp), ("sp", pl.sp), ("ep", pl.ep if moe else 1)):
            if w % deg:
                yield Finding(f"{ph}: {name} = {deg} does not divide the stage group width W = {w} (max(tp, sp, ep), "
                              "attention-DP groups included); "
                              "each degree must divide W so every operator's shards map onto whole GPU subsets",
                              field=field_of(ph, name, ctx.plan),
                              hint=f"choose {name} among the divisors of {w}, or make W a multiple of {deg}")


def _claim(ctx: Context) -> int | None:
    c = ctx.claims.get("gpus_used")
    return c if isinstance(c, int) and not isinstance(c, bool) else None


@checker("GPU-NO-MULTIPLICATION", needs="any")
def check_no_multiplication(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        product, need = nominal_product(ctx.plan), ctx.layout.gpus_needed
        d = ctx.plan.parallel
        if product > need and ctx.plan.hardware.num_gpus == product:
            yield Finding(f"hardware.num_gpus = {product} equals dp x pp x tp x ep x sp = {d.dp}x{d.pp}x{d.tp}x{d.ep}x"
                          f"{d.sp}, but the DAG uses only {need} GPUs (dp * pp * max(tp, sp, ep)); degrees that act in "
                          "different operators share the same GPUs and are not multiplied",
                          field="plan.hardware.num_gpus", hint=f"set hardware.num_gpus to {need}")
            return
    claim = _claim(ctx)
    if claim is None or ctx.graph is None:
        return
    inf = ctx.inferred_degrees
    product = inf["dp"] * inf["pp"] * inf["tp"] * inf["ep"] * inf["sp"]
    if claim == product and claim > ctx.gpus_used:
        yield Finding(f"the DAG claims gpus_used = {claim}, the product of its degrees ({inf}), but its nodes use "
                      f"{ctx.gpus_used} distinct GPUs; the count comes from the devices, not from multiplying degrees",
                      field="gpus_used", hint=f"report gpus_used = {ctx.gpus_used}")


@fixer("GPU-NO-MULTIPLICATION")
def fix_no_multiplication(plan: dict[str, Any], ctx: Context) -> list[Change]:
    if ctx.layout is None:
        return []
    need = ctx.layout.gpus_needed
    before = plan["hardware"]["num_gpus"]
    plan["hardware"]["num_gpus"] = need
    return [Change(rule_id="GPU-NO-MULTIPLICATION", message=f"reduced hardware.num_gpus from {before} (the product "
                   f"of all degrees) to {need}, the GPUs the DAG actually uses", field="plan.hardware.num_gpus",
                   before=before, after=need)]


@checker("GPU-FROM-DEVICES", needs="graph")
def check_from_devices(ctx: Context) -> Iterator[Finding]:
    used = ctx.gpus_used
    claim = _claim(ctx)
    if claim is not None and claim != used:
        yield Finding(f"the DAG claims gpus_used = {claim} but its nodes use {used} distinct GPUs; gpus_used is the "
                      "number of distinct device ids", field="gpus_used", hint=f"report gpus_used = {used}")
    if not ctx.from_plan and ctx.layout is not None and used and used != ctx.layout.gpus_needed:
        yield Finding(f"the DAG's nodes use {used} distinct GPUs but its plan lays out dp * pp * max(tp, sp, ep) = "
                      f"{ctx.layout.gpus_needed}; the devices must follow replica*pp*W + stage*W + local",
                      field="dag.plan", hint="rebuild the DAG from the plan (build_dag)")


@checker("GPU-IDLE", needs="plan")
def check_idle(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    used = ctx.gpus_used if ctx.graph is not None else ctx.layout.gpus_needed  # type: ignore[union-attr]
    have = ctx.plan.hardware.num_gpus
    if used < have:
        hint = ("add DP replicas on the idle GPUs" if ctx.plan.objective == "throughput"
                else "use them for wider TP if the latency needs it, or leave them to other deployments")
        yield Finding(f"the plan uses {used} of its {have} GPUs: {have - used} idle", field="plan.hardware.num_gpus",
                      hint=hint)


@fixer("GPU-IDLE")
def fix_idle(plan: dict[str, Any], ctx: Context) -> list[Change]:
    """Throughput only: spend whole idle replicas' worth of GPUs on more DP replicas."""
    if ctx.plan is None or ctx.layout is None or ctx.plan.objective != "throughput":
        return []
    per = ctx.layout.replica_gpus
    dp = ctx.plan.hardware.num_gpus // per
    if dp <= ctx.layout.dp or any((plan.get("phases") or {}).get(p, {}) and (plan["phases"][p] or {}).get("dp")
                                  for p in ("prefill", "decode")):
        return []
    before = plan.setdefault("parallel", {}).get("dp", 1)
    plan["parallel"]["dp"] = dp
    return [Change(rule_id="GPU-IDLE", severity="warning", message=f"raised dp from {before} to {dp}: objective "
                   f"throughput, and {ctx.plan.hardware.num_gpus} GPUs hold {dp} replicas of {per} GPUs",
                   field="plan.parallel.dp", before=before, after=dp)]


@checker("GPU-EXCEEDS-CLUSTER", needs="plan")
def check_exceeds(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    used = ctx.gpus_used if ctx.graph is not None else ctx.layout.gpus_needed
    have = ctx.plan.hardware.num_gpus
    if used > have:
        how = " + ".join(f"{ph} dp {p.dp} x pp {p.pp} x W {p.group_width}" for ph, p in
                         ({"prefill": ctx.layout.pools["prefill"], "decode": ctx.layout.pools["decode"]}.items()
                          if ctx.layout.disaggregated else [("", ctx.layout.pools["prefill"])]))
        needed = ctx.layout.gpus_needed
        why = f"the plan needs {used} GPUs ({how.strip()})" if used == needed else \
            f"the DAG's nodes use {used} distinct GPUs (its plan's layout needs {needed}: {how.strip()})"
        yield Finding(f"{why} but hardware.num_gpus is {have}", field="plan.hardware.num_gpus",
                      hint="lower dp first, then pp or tp, or use a larger cluster" if used == needed else
                      f"move the nodes onto GPUs 0-{have - 1} (the plan's layout places them on {needed})")


@fixer("GPU-DEGREES-DIVIDE-GROUP")
def fix_divide_group(plan: dict[str, Any], ctx: Context) -> list[Change]:
    """EP is the degree that usually breaks the group (tp/sp are tied to heads): snap it to the group."""
    from tools.rules.ep import set_ep
    from tools.rules.sp import fix_with_tp

    assert ctx.plan is not None
    if ctx.plan.spec.is_moe:
        changes = set_ep(plan, ctx, "GPU-DEGREES-DIVIDE-GROUP", "a divisor of the expert count that divides (or is a "
                          "multiple of) the attention width, so every degree divides the stage group")
        if changes:
            return changes
    changes = fix_with_tp(plan, ctx)
    for c in changes:
        c.rule_id = "GPU-DEGREES-DIVIDE-GROUP"
    return changes


@checker("GPU-SHARDS-DISTINCT")
def check_shards_distinct(ctx: Context) -> Iterator[Finding]:
    """Shards of one operator (TP, SP or EP ranks) split its work across GPUs: two shards on one GPU split
    nothing and leave the operator's GPU count wrong."""
    for key, shards in sorted(ctx.ops.items(), key=lambda kv: str(kv[0])):
        seen: dict[int, str] = {}
        for s in shards:
            for d in ctx.devices[s]:
                other = seen.get(d)
                if other is not None and other != s and _rank(ctx, other) != _rank(ctx, s):
                    op = op_name(ctx, key, s)
                    yield Finding(f"shards {other} and {s} of {op} both run on GPU {d}; the shards of an operator "
                                  "run on distinct GPUs", [other, s],
                                  hint=f"put each of the {len(shards)} shards of {op} on its own GPU")
                    return
                seen[d] = s


def _rank(ctx: Context, n: str) -> tuple[Any, ...]:
    return tuple(ctx.attr(n, k) for k in ("tp_rank", "sp_rank", "ep_rank"))


def op_name(ctx: Context, key: Any, n: str) -> str:
    """How to name a sharded operator in a message: its ``op``, else its type and layer."""
    if isinstance(key, tuple) and isinstance(key[0], str):
        return key[0]
    layer = ctx.inherited[n]["layer"]
    return f"the {ctx.types[n]} of layer {layer}" if layer is not None else f"the {ctx.types[n]} {n}"
