"""EP-*: expert parallelism lives in MoE layers: router -> dispatch -> Expert nodes (one per GPU) -> combine."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer, layer_at, set_degree


def _moe_layers(ctx: Context) -> dict[Any, dict[str, list[str]]]:
    """(replica, phase, layer) -> {node type: nodes} for MoE, router, expert nodes."""
    out: dict[Any, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for n in ctx.of(NodeType.MOE, NodeType.ROUTER, NodeType.EXPERT):
        out[ctx.rpl[n]][ctx.types[n]].append(n)
    return out


@checker("EP-MOE-ONLY", needs="any")
def check_moe_only(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None and not ctx.plan.spec.is_moe:
        for ph, pl in ctx.layout.phases.items():
            if pl.ep > 1:
                yield Finding(f"{ctx.plan.spec.id} is a dense model (no MoE layers) but {ph} ep = {pl.ep}; EP needs "
                              "experts to spread", field=field_of(ph, "ep", ctx.plan), hint="set ep = 1")
                return
    if ctx.graph is None:
        return
    experts = ctx.of(NodeType.EXPERT, NodeType.ROUTER)
    if experts and ctx.spec is not None and not ctx.spec.is_moe:
        yield Finding(f"the DAG has Router/Expert nodes but {ctx.spec.id} is a dense model", experts)
        return
    # a MoE layer is drawn with a MoENode, or (knowledge/08's minimal form) with just its router
    moe_keys = {ctx.rpl[n] for n in ctx.of(NodeType.MOE, NodeType.ROUTER)}
    loose = [n for n in ctx.of(NodeType.EXPERT) if ctx.rpl[n] not in moe_keys]
    if loose:
        yield Finding(f"{len(loose)} ExpertNode(s) sit outside any MoENode (e.g. {loose[0]}); experts appear only "
                      "inside MoE layers", loose)


@fixer("EP-MOE-ONLY")
def fix_moe_only(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return set_degree(plan, "ep", 1, "EP-MOE-ONLY", "the model is dense")


@checker("EP-EXPLICIT-DECOMPOSITION")
def check_decomposition(ctx: Context) -> Iterator[Finding]:
    for key, grp in sorted(_moe_layers(ctx).items(), key=str):
        if not grp.get(NodeType.EXPERT):
            if grp.get(NodeType.MOE):
                yield Finding(f"MoE {layer_at(key)} has no ExpertNodes; a MoE layer is router -> dispatch -> experts "
                              "-> combine", grp[NodeType.MOE])
                return
            continue
        if not grp.get(NodeType.ROUTER):
            yield Finding(f"MoE {layer_at(key)} has Expert nodes but no RouterNode; routing must be an explicit step",
                          grp[NodeType.EXPERT], hint="add RouterNode -> dispatch AllToAll before the experts")
            return
        direct = [e for e in grp[NodeType.EXPERT] for p in ctx.pred[e]
                  if ctx.types[p] in (NodeType.MOE, NodeType.ROUTER, NodeType.NORM)]
        if direct:
            yield Finding(f"Expert node {direct[0]} is fed straight by its router/MoE node; dispatch is a separate "
                          "step between router and experts", direct)
            return


@checker("EP-DISPATCH-COMBINE-ALLTOALL")
def check_alltoall(ctx: Context) -> Iterator[Finding]:
    for key, grp in sorted(_moe_layers(ctx).items(), key=str):
        experts = grp.get(NodeType.EXPERT, [])
        if len({d for e in experts for d in ctx.devices[e]}) <= 1:
            continue
        for e in experts:
            bad_in = [p for p in ctx.pred[e] if ctx.types[p] != NodeType.ALL_TO_ALL]
            bad_out = [s for s in ctx.succ[e] if ctx.types[s] not in (NodeType.ALL_TO_ALL, NodeType.ALL_REDUCE)]
            if bad_in or bad_out:
                other = (bad_in or bad_out)[0]
                yield Finding(f"MoE {layer_at(key)}: Expert node {e} exchanges tokens with the {ctx.types[other]} "
                              f"{other} over a plain edge; with EP the dispatch and the combine are AllToAllNodes over "
                              "the EP GPUs", [e, other],
                              hint="put an AllToAllNode (dispatch) before and one (combine) after")
                return


@checker("EP-NO-EARLY-REJOIN")
def check_no_early_rejoin(ctx: Context) -> Iterator[Finding]:
    experts = set(ctx.of(NodeType.EXPERT))
    for u, v, _ in ctx.data_edges():
        if u in experts and v in experts and ctx.attr(u, "ep_rank") != ctx.attr(v, "ep_rank"):
            yield Finding(f"Expert node {u} feeds Expert node {v}; EP branches stay apart until the combine", [u, v])
            return
    for v in ctx.real_nodes:
        if ctx.is_comm(v) or v in experts:
            continue
        ins = [p for p in ctx.pred[v] if p in experts]
        if len(ins) > 1:
            yield Finding(f"{ctx.types[v]} {v} merges {len(ins)} Expert nodes; only the combine (an AllToAllNode) "
                          "joins "
                          "the EP branches", [v, *ins])
            return


@checker("EP-EXPERT-NODES-EQ-GPUS", needs="any")
def check_nodes_eq_gpus(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None and ctx.plan.spec.is_moe:
        e = ctx.plan.spec.moe.num_experts  # type: ignore[union-attr]
        for ph, pl in ctx.layout.phases.items():
            if pl.ep > e:
                yield Finding(f"{ph}: ep = {pl.ep} Expert nodes for {e} experts; each Expert node (GPU) holds at least "
                              "one expert, so ep <= num_experts", field=field_of(ph, "ep", ctx.plan),
                              hint=f"use ep <= {e}, a divisor of {e}")
                return
    if ctx.graph is None:
        return
    want = None
    for key, grp in sorted(_moe_layers(ctx).items(), key=str):
        experts = grp.get(NodeType.EXPERT, [])
        if not experts:
            continue
        empty = [x for x in experts if ctx.attr(x, "experts") == []]
        if empty:
            yield Finding(f"MoE {layer_at(key)}: Expert node {empty[0]} holds no expert; each Expert node holds >= 1",
                          empty)
            return
        if ctx.layout is not None and key[1] in ctx.layout.phases:
            want = ctx.layout.phases[key[1]].ep
        ranks = {ctx.attr(x, "ep_rank") if ctx.attr(x, "ep_rank") is not None else x for x in experts}
        if want is not None and len(ranks) != want:  # an Expert node split by expert TP is one rank
            yield Finding(f"MoE {layer_at(key)} has {len(ranks)} Expert nodes but ep = {want}; there is one Expert "
                          "node per EP GPU", experts)
            return
        # nodes, not ranks: normalization ranks Expert nodes by GPU, so two on one GPU share a rank and would be
        # counted (and priced) as one, silently merged; seed 000 section 3.4: Expert nodes = GPUs
        by_dev: dict[int, set[str]] = defaultdict(set)
        for x in experts:
            for d in ctx.devices[x]:
                by_dev[d].add(x)
        shared = sorted(d for d, xs in by_dev.items() if len(xs) > 1)
        if shared:
            on = sorted(by_dev[shared[0]])
            gpus = sorted(by_dev)
            yield Finding(f"MoE {layer_at(key)}: {len(experts)} Expert nodes on {len(gpus)} GPU(s); "
                          f"{', '.join(on[:3])} share GPU {shared[0]}. An Expert node is the set of experts on one "
                          "GPU (Expert nodes = GPUs)", on, hint=f"draw one Expert node per GPU, listing all the "
                          f"experts that GPU holds (merge {', '.join(on[:3])} into one)")
            return


def best_ep(ctx: Context, ep: int) -> int:
    """The largest divisor of num_experts that is <= ep and divides the stage group (no imbalance, no idle)."""
    assert ctx.plan is not None and ctx.layout is not None
    e = ctx.plan.spec.moe.num_experts  # type: ignore[union-attr]
    w = max(max(pl.tp, pl.sp) for pl in ctx.layout.phases.values())
    ok = [x for x in range(min(ep, e), 0, -1) if e % x == 0 and (w % x == 0 or x % w == 0)]
    return ok[0] if ok else 1


def set_ep(plan: dict[str, Any], ctx: Context, rule_id: str, why: str, severity: str = "error") -> list[Change]:
    changes = []
    par = plan.setdefault("parallel", {})
    targets = [("plan.parallel.ep", par)] + [(f"plan.phases.{ph}.ep", o) for ph, o in
                                            (plan.get("phases") or {}).items() if isinstance(o, dict) and "ep" in o]
    for path, d in targets:
        before = d.get("ep", 1)
        new = best_ep(ctx, before)
        if new != before:
            d["ep"] = new
            changes.append(Change(rule_id=rule_id, severity=severity,  # type: ignore[arg-type]
                                  message=f"set ep from {before} to {new}: {why}", field=path, before=before,
                                  after=new))
    return changes


@fixer("EP-EXPERT-NODES-EQ-GPUS")
def fix_nodes_eq_gpus(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return set_ep(plan, ctx, "EP-EXPERT-NODES-EQ-GPUS", "the largest divisor of the expert count that fits the group")


@checker("EP-EVEN-EXPERTS", needs="any")
def check_even(ctx: Context) -> Iterator[Finding]:
    if ctx.options.expert_imbalance_ok:
        return
    if ctx.plan is not None and ctx.layout is not None:
        if not ctx.plan.spec.is_moe:
            return
        e = ctx.plan.spec.moe.num_experts  # type: ignore[union-attr]
        for ph, pl in ctx.layout.phases.items():
            if pl.ep <= e and e % pl.ep:
                yield Finding(f"{ph}: {e} experts over ep = {pl.ep} GPUs leaves some GPUs with {e // pl.ep + 1} "
                              "experts "
                              f"and others with {e // pl.ep}; the slowest Expert node sets the MoE time",
                              field=field_of(ph, "ep", ctx.plan),
                              hint="use an ep that divides the expert count, or set options.expert_imbalance_ok")
                return
        return
    if ctx.graph is None:
        return
    for key, grp in sorted(_moe_layers(ctx).items(), key=str):
        sizes = {len(ctx.attr(x, "experts") or []) for x in grp.get(NodeType.EXPERT, []) if ctx.attr(x, "experts")}
        if len(sizes) > 1:
            yield Finding(f"MoE {layer_at(key)}: Expert nodes hold {sorted(sizes)} experts each; the split is uneven",
                          grp[NodeType.EXPERT])
            return


@fixer("EP-EVEN-EXPERTS")
def fix_even(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return set_ep(plan, ctx, "EP-EVEN-EXPERTS", "a divisor of the expert count, so every GPU holds as many experts",
                   "warning")


@checker("EP-NOT-INSIDE-TP")
def check_not_inside_tp(ctx: Context) -> Iterator[Finding]:
    for n in ctx.of(NodeType.MOE, NodeType.ROUTER):
        bad = [p for p in ctx.pred[n] if ctx.attr(p, "tp_rank") is not None and ctx.types[p] != NodeType.EXPERT]
        if bad:
            yield Finding(f"the EP fan-out {n} hangs under the TP shard {bad[0]}; EP is never nested inside TP shards",
                          [n, *bad])
            return
    for key, grp in sorted(_moe_layers(ctx).items(), key=str):
        routers = grp.get(NodeType.ROUTER, [])
        groups = [ctx.attr(r, "attn_group") for r in routers]
        if None not in groups and len(set(groups)) == len(routers):
            continue  # one router per attention-DP group (ADP-* rules judge the groups)
        if len(routers) > 1:
            yield Finding(f"MoE {layer_at(key)} has {len(grp[NodeType.ROUTER])} routers: the EP fan-out is repeated "
                          "per TP shard; one router per MoE layer", grp[NodeType.ROUTER])
            return


@checker("EP-NO-EXPERT-TP")
def check_no_expert_tp(ctx: Context) -> Iterator[Finding]:
    if ctx.options.allow_expert_tp:
        return
    bad = [n for n in ctx.of(NodeType.EXPERT) if ctx.attr(n, "tp_rank") is not None]
    if bad:
        yield Finding(f"{len(bad)} Expert node(s) are TP shards (e.g. {bad[0]}); TP inside experts needs "
                      "options.allow_expert_tp = true", bad, hint="set options.allow_expert_tp, or keep experts whole")
        return
    # drawn as one node per expert group: an Expert node on several GPUs whose output alone is reduced over them
    # holds partial sums, i.e. its experts are TP-sharded (a combine all-reduce joins several Expert nodes)
    reduce = (NodeType.ALL_REDUCE, NodeType.REDUCE_SCATTER)
    split = [n for n in ctx.of(NodeType.EXPERT) if len(ctx.devices[n]) > 1 and any(
        ctx.types[s] in reduce and [p for p in ctx.pred[s] if ctx.types[p] == NodeType.EXPERT] == [n]
        for s in ctx.succ[n])]
    if split:
        yield Finding(f"{len(split)} Expert node(s) are reduced over their own GPUs (e.g. {split[0]} on "
                      f"{len(ctx.devices[split[0]])} GPUs, then an all-reduce of it alone): each expert is TP-sharded "
                      "over them; TP inside experts needs options.allow_expert_tp = true", split,
                      hint="put each expert whole on one GPU (EP), or set options.allow_expert_tp")


@checker("EP-NOT-REPLICATION")
def check_not_replication(ctx: Context) -> Iterator[Finding]:
    total = ctx.spec.moe.num_experts if ctx.spec is not None and ctx.spec.moe else None
    for key, grp in sorted(_moe_layers(ctx).items(), key=str):
        owner: dict[int, Any] = {}
        for x in grp.get(NodeType.EXPERT, []):
            rank = ctx.attr(x, "ep_rank") if ctx.attr(x, "ep_rank") is not None else x
            for e in ctx.attr(x, "experts") or []:
                if e in owner and owner[e] != rank:
                    yield Finding(f"MoE {layer_at(key)}: expert {e} is in two Expert nodes; EP partitions the experts, "
                                  "each "
                                  "lives in exactly one Expert node (EP is not a replication factor)",
                                  grp[NodeType.EXPERT])
                    return
                owner[e] = rank
        if total is not None and owner and len(owner) != total:
            yield Finding(f"MoE {layer_at(key)}: the Expert nodes hold {len(owner)} of the {total} experts; together "
                          "they hold every expert once", grp[NodeType.EXPERT])
            return


@checker("EP-TP-NOT-MULTIPLIED", needs="any")
def check_tp_not_multiplied(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        d = ctx.plan.parallel
        prod = d.dp * d.pp * d.tp * d.ep
        if d.tp > 1 and d.ep > 1 and ctx.plan.spec.is_moe and ctx.plan.hardware.num_gpus == prod \
                and prod > ctx.layout.gpus_needed:
            yield Finding(f"hardware.num_gpus = {prod} counts tp x ep = {d.tp} x {d.ep} GPUs per stage; Expert nodes "
                          f"run on the same stage group as the TP shards, which uses {ctx.layout.group_width} GPUs",
                          field="plan.hardware.num_gpus", hint=f"set hardware.num_gpus to {ctx.layout.gpus_needed}")
    if ctx.graph is None or ctx.from_plan:
        return
    attn: dict[Any, set[int]] = defaultdict(set)
    for a in ctx.of(NodeType.ATTENTION):
        attn[ctx.rps[a]].update(ctx.devices[a])
    stage_devs = {ctx.rps[n]: ctx.devices[n] for n in ctx.of(NodeType.STAGE)}
    for x in ctx.of(NodeType.EXPERT):
        k = ctx.rps[x]
        group = stage_devs.get(k) or frozenset(attn.get(k, ()))
        if group and not ctx.devices[x] & group:
            yield Finding(f"Expert node {x} runs on GPUs {sorted(ctx.devices[x])[:8]}, outside its stage group "
                          f"{sorted(group)[:8]}; experts share the stage's GPUs with the TP shards (tp and ep are not "
                          "multiplied)", [x])
            return


@checker("EP-SPANS-STAGE-GROUP", needs="plan")
def check_spans_group(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    if not ctx.plan.spec.is_moe or ctx.plan.options.allow_expert_tp:
        return
    for ph, pl in ctx.layout.phases.items():
        w = ctx.layout.pools[ph].group_width
        if pl.ep < w:
            yield Finding(f"{ph}: ep = {pl.ep} Expert nodes on a {w}-GPU stage group: {w - pl.ep} GPU(s) idle in every "
                          "MoE block", field=field_of(ph, "ep", ctx.plan),
                          hint=f"set ep = {w} (or options.allow_expert_tp to split experts over the group)")
            return


@fixer("EP-SPANS-STAGE-GROUP")
def fix_spans_group(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.plan is not None and ctx.layout is not None
    e = ctx.plan.spec.moe.num_experts  # type: ignore[union-attr]
    w = ctx.layout.group_width
    if w > e or (e % w and not ctx.plan.options.expert_imbalance_ok):
        return []
    return set_degree(plan, "ep", w, "EP-SPANS-STAGE-GROUP", "the experts now use every GPU of the stage group",
                      severity="warning")
