"""ORDER-* and COMBO-*: DP -> PP -> TP/SP -> EP nesting, reasoning order, and the closed set of combinations."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.core.plan import DEGREES
from tools.rules.registry import Change, Context, Finding, checker, fixer

RANK = {NodeType.REQUEST: 0, NodeType.REPLICA: 1, NodeType.PHASE: 2, NodeType.DECODE_STEP: 3, NodeType.STAGE: 4}
SHARD_KEYS = ("tp_rank", "sp_rank", "ep_rank")
KNOWN_RANKS = {"tp_rank", "sp_rank", "ep_rank"}


@checker("ORDER-CONSTRUCTION")
def check_construction(ctx: Context) -> Iterator[Finding]:
    for u, v, t in ctx.data_edges():
        if t == "sync":
            continue
        ru, rv = RANK.get(ctx.types[u]), RANK.get(ctx.types[v])
        if rv is None:
            continue
        if ru is not None and rv < ru:
            yield Finding(f"{ctx.types[u]} {u} contains the {ctx.types[v]} {v}; the DAG nests DP fan-out, then phases, "
                          "then the PP stage chain, then TP/SP inside operators, then EP inside MoE layers", [u, v])
            return
        if ru is None and rv <= 2:
            yield Finding(f"the operator {u} feeds the {ctx.types[v]} {v}; request-level nodes come before any "
                          "operator", [u, v])
            return


@checker("ORDER-HIERARCHY")
def check_hierarchy(ctx: Context) -> Iterator[Finding]:
    coarse = {NodeType.REQUEST, NodeType.REPLICA, NodeType.PHASE, NodeType.STAGE, NodeType.MOE, NodeType.ROUTER}
    for n, a in ctx.nattr.items():
        if not any(a.get(k) is not None for k in SHARD_KEYS):
            continue
        kids = [s for s in ctx.succ[n] if ctx.types[s] in coarse and ctx.succ[n][s].get("type") != "sync"]
        if kids:
            yield Finding(f"the shard {n} contains the {ctx.types[kids[0]]} {kids[0]}; partitions nest from coarse to "
                          "fine (PP > SP > EP > TP), a finer one never holds a coarser one", [n, *kids])
            return


@checker("ORDER-REASONING", needs="plan")
def check_reasoning(ctx: Context) -> Iterator[Finding]:
    """DP is decided last: replicas are only worth adding once one replica fits."""
    from tools.rules.memory import report_of

    assert ctx.layout is not None
    if ctx.layout.dp > 1 and not report_of(ctx).fits:
        yield Finding(f"dp = {ctx.layout.dp} replicas were chosen although one replica does not fit in memory; decide "
                      "PP/EP and TP for the model first and spend only the GPUs left over on DP",
                      field="plan.parallel.dp", hint="set dp = 1, make one replica fit, then add replicas")


@fixer("ORDER-REASONING")
def fix_reasoning(plan: dict[str, Any], ctx: Context) -> list[Change]:
    par = plan.setdefault("parallel", {})
    before = par.get("dp", 1)
    if before == 1:
        return []
    par["dp"] = 1
    for o in (plan.get("phases") or {}).values():
        if isinstance(o, dict):
            o.pop("dp", None)
    return [Change(rule_id="ORDER-REASONING", severity="warning", message=f"set dp from {before} to 1 so the GPUs go "
                   "to fitting one replica first (DP is decided last)", field="plan.parallel.dp", before=before,
                   after=1)]


@checker("ORDER-VALIDATE-BEFORE-OUTPUT", needs="late")
def check_validate_before_output(ctx: Context) -> Iterator[Finding]:
    """What a plan or DAG can show of this agent rule: a claim of having been validated while errors remain."""
    claims = []
    if ctx.graph is not None:
        for r in ctx.of(NodeType.REQUEST):
            meta = ctx.attr(r, "meta") or {}
            if meta.get("validated") is True or meta.get("valid") is True:
                claims.append(r)
    if claims or ctx.claims.get("valid") is True:
        errors = [v for v in ctx.violations if v.severity == "error"]
        if errors:
            yield Finding(f"the DAG says it was validated but it breaks {len(errors)} error rule(s) (e.g. "
                          f"{errors[0].rule_id}); run validate_dag/autofix_dag and present only results without errors",
                          claims, hint="call autofix_dag and present its output")


@checker("COMBO-CLOSED-SET", needs=("raw", "graph"))
def check_closed_set(ctx: Context) -> Iterator[Finding]:
    if ctx.graph is not None:
        odd = [n for n, a in ctx.nattr.items() if any(k.endswith("_rank") and k not in KNOWN_RANKS
                                                              for k in (a.get("meta") or {}))]
        if odd:
            key = next(k for k in ctx.attr(odd[0], "meta") if k.endswith("_rank") and k not in KNOWN_RANKS)
            yield Finding(f"node {odd[0]} is sharded along '{key}', a dimension outside the closed set TP, SP, PP, EP "
                          "(with DP as the outer fan-out)", odd)
    if ctx.plan is not None:
        return
    raw = ctx.raw_plan or {}
    par = raw.get("parallel")
    if isinstance(par, dict):
        extra = sorted(k for k in par if k not in DEGREES)
        if extra:
            yield Finding(f"parallel has unknown dimension(s) {extra}; strategies come from the closed set TP, SP, PP, "
                          "EP (with DP as the outer fan-out)", field=f"plan.parallel.{extra[0]}",
                          hint="drop them (context parallelism etc. are not part of pdag's closed set)")
    phases = raw.get("phases")
    if isinstance(phases, dict):
        for ph, o in phases.items():
            if ph not in ("prefill", "decode"):
                yield Finding(f"phases.{ph} is not a phase; the phases are prefill and decode",
                              field=f"plan.phases.{ph}")
            elif isinstance(o, dict):
                extra = sorted(k for k in o if k not in DEGREES)
                if extra:
                    yield Finding(f"phases.{ph} has unknown dimension(s) {extra}", field=f"plan.phases.{ph}.{extra[0]}")


@fixer("COMBO-CLOSED-SET")
def fix_closed_set(plan: dict[str, Any], ctx: Context) -> list[Change]:
    changes = []
    par = plan.get("parallel")
    if isinstance(par, dict):
        for k in sorted(k for k in par if k not in DEGREES):
            changes.append(Change(rule_id="COMBO-CLOSED-SET", message=f"removed parallel.{k}: not one of dp, pp, tp, "
                                  "ep, sp", field=f"plan.parallel.{k}", before=par.pop(k), after=None))
    phases = plan.get("phases")
    if isinstance(phases, dict):
        for ph in sorted(phases):
            o = phases[ph]
            if ph not in ("prefill", "decode"):
                changes.append(Change(rule_id="COMBO-CLOSED-SET", message=f"removed phases.{ph}: not a phase",
                                      field=f"plan.phases.{ph}", before=phases.pop(ph), after=None))
            elif isinstance(o, dict):
                for k in sorted(k for k in o if k not in DEGREES):
                    changes.append(Change(rule_id="COMBO-CLOSED-SET", message=f"removed phases.{ph}.{k}",
                                          field=f"plan.phases.{ph}.{k}", before=o.pop(k), after=None))
    return changes


@checker("COMBO-DP-OUTER", needs="any")
def check_dp_outer(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        pre, dec = ctx.layout.phases["prefill"].dp, ctx.layout.phases["decode"].dp
        if pre != dec and not ctx.plan.options.disaggregated:  # separate pools may differ (DISAGG-OPT-IN)
            yield Finding(f"dp is {pre} in prefill but {dec} in decode; DP is the outer request-level fan-out around "
                          "both phases, not a per-phase dimension", field="plan.phases",
                          hint="set one plan-wide dp")
    if ctx.graph is None:
        return
    inner = [n for n in ctx.of(NodeType.REPLICA)
             if any(ctx.attr(n, k) is not None for k in ("stage", "layer", "phase"))]
    if inner:
        yield Finding(f"ReplicaNode {inner[0]} carries a stage/layer/phase: DP is placed inside the model as another "
                      "combined dimension; it only wraps whole replicas", inner)


@fixer("COMBO-DP-OUTER")
def fix_dp_outer(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.layout is not None
    dp = max(ctx.layout.phases["prefill"].dp, ctx.layout.phases["decode"].dp)
    par = plan.setdefault("parallel", {})
    changes = [Change(rule_id="COMBO-DP-OUTER", message=f"set dp = {dp} for the whole replica (both phases)",
                      field="plan.parallel.dp", before=par.get("dp", 1), after=dp)]
    par["dp"] = dp
    for o in (plan.get("phases") or {}).values():
        if isinstance(o, dict):
            o.pop("dp", None)
    return changes
