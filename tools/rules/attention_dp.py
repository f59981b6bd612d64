"""ADP-*: opt-in attention-DP (SGLang's DP attention): per-group attention and KV, experts shared by all groups.

Beyond the seeds.  With ``options.allow_attention_dp`` a stage group is split into ``attn_dp`` attention groups
of ``max(tp, sp)`` GPUs, each serving its own share of the batch; the routers of every group feed one
AllToAll dispatch over the whole stage group and the combine brings each token back to its own group.
Without the opt-in the same structure is DP below the root and the seeds' DP rules reject it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer, layer_at, scope

Key = tuple[Any, Any, Any]  # (replica, phase, layer)


def plan_attn_dp(ctx: Context) -> dict[str, int]:
    """Phases whose plan degrees ask for attention-DP, with their attn_dp."""
    if ctx.plan is None or ctx.layout is None:
        return {}
    return {ph: pl.attn_dp for ph, pl in ctx.layout.phases.items() if pl.attn_dp > 1}


def attention_groups(ctx: Context) -> dict[Key, dict[Any, list[str]]]:
    """Layers whose attention runs as two or more data-parallel groups: (replica, phase, layer) -> group -> nodes.

    A group is the node's ``attn_group``; unlabelled attention nodes of one layer count as separate groups when
    they belong to different logical operators (``op``) on disjoint GPUs (one layer's attention run twice side
    by side for different requests).  Cached on the context."""
    cached = ctx.__dict__.get("_attn_groups")
    if cached is not None:
        return cached
    by_layer: dict[Key, dict[Any, list[str]]] = defaultdict(lambda: defaultdict(list))
    for a in ctx.of(NodeType.ATTENTION):
        r, ph, lyr = ctx.rpl[a]
        if lyr is None:
            continue
        g = ctx.attr(a, "attn_group")
        by_layer[(r, ph, lyr)][("g", g) if g is not None else ("op", ctx.attr(a, "op") or a)].append(a)
    out: dict[Key, dict[Any, list[str]]] = {}
    for key, groups in by_layer.items():
        labelled = {g: ns for g, ns in groups.items() if g[0] == "g"}
        if len(labelled) > 1:
            out[key] = {g[1]: ns for g, ns in labelled.items()}
            continue
        ops = {g: ns for g, ns in groups.items() if g[0] == "op"}
        if len(ops) > 1:
            devs = [frozenset().union(*(ctx.devices[n] for n in ns)) for ns in ops.values()]
            if all(d for d in devs) and sum(len(d) for d in devs) == len(frozenset().union(*devs)):
                out[key] = {g[1]: ns for g, ns in ops.items()}
    ctx.__dict__["_attn_groups"] = out
    return out


def group_nodes(ctx: Context) -> list[str]:
    """Nodes that mark attention-DP in a DAG: AttentionDPGroupNodes and anything carrying attn_group."""
    return [n for n, a in ctx.nattr.items()
            if a.get("type") == NodeType.ATTN_DP_GROUP or a.get("attn_group") is not None]


def dag_uses_attention_dp(ctx: Context) -> bool:
    return ctx.graph is not None and bool(attention_groups(ctx) or ctx.of(NodeType.ATTN_DP_GROUP))


def _example_nodes(ctx: Context) -> list[str]:
    groups = attention_groups(ctx)
    if groups:
        key = sorted(groups, key=str)[0]
        return [ns[0] for _g, ns in sorted(groups[key].items(), key=str)]
    return ctx.of(NodeType.ATTN_DP_GROUP)


def attention_dp_without_opt_in(ctx: Context) -> Iterator[Finding]:
    """The graph-level finding the seeds' DP rules share: attention-DP structure, no opt-in."""
    if ctx.options.allow_attention_dp or ctx.graph is None or not dag_uses_attention_dp(ctx):
        return
    groups = attention_groups(ctx)
    if groups:
        (r, ph, lyr), g = sorted(groups.items(), key=str)[0]
        what = f"{scope(r, ph)} runs the attention of layer {lyr} as {len(g)} groups on disjoint GPUs"
    else:
        what = f"the DAG has {len(ctx.of(NodeType.ATTN_DP_GROUP))} AttentionDPGroupNode(s)"
    yield Finding(f"{what}, each for its own requests: that is data parallelism inside a layer",
                  _example_nodes(ctx),
                  hint="fan out whole replicas at the RequestNode, or opt in (options.allow_attention_dp) for "
                       "attention-DP on a MoE model")


# ----------------------------------------------------------------------------------------------- ADP-OPT-IN
@checker("ADP-OPT-IN", needs="any")
def check_opt_in(ctx: Context) -> Iterator[Finding]:
    if ctx.options.allow_attention_dp:
        return
    asked = plan_attn_dp(ctx)
    if asked:
        ph, a = sorted(asked.items())[0]
        yield Finding(f"{ph} attn_dp = {a} splits each stage into {a} attention groups, but attention-DP is opt-in "
                      "(options.allow_attention_dp); by default DP fans out whole replicas at the root only",
                      field=field_of(ph, "attn_dp", ctx.plan),
                      hint="set attn_dp to 1 (attention TP over the same GPUs), or set options.allow_attention_dp "
                           "for a MoE model served for throughput")
        return
    if ctx.plan is None:  # a hand-drawn DAG: no plan, no opt-in
        for f in attention_dp_without_opt_in(ctx):
            f.message += "; attention-DP needs options.allow_attention_dp in the DAG's plan"
            yield f
    elif not ctx.from_plan:
        yield from attention_dp_without_opt_in(ctx)


def _turn_off(plan: dict[str, Any], ctx: Context, rule_id: str, into_dp: bool) -> list[Change]:
    """attn_dp -> 1 everywhere, keeping the GPU count: the attention GPUs go to TP (MoE) or to DP replicas."""
    assert ctx.plan is not None and ctx.layout is not None
    spec = ctx.plan.spec
    changes: list[Change] = []
    par = plan.setdefault("parallel", {})
    targets = [("plan.parallel", par)] + [(f"plan.phases.{ph}", o) for ph, o in (plan.get("phases") or {}).items()
                                          if isinstance(o, dict) and o.get("attn_dp") is not None]
    for path, d in targets:
        a = d.get("attn_dp", 1)
        if a == 1:
            continue
        del d["attn_dp"]  # 1 is the default: leave no trace of the feature in the repaired plan
        if into_dp:
            dp = d.get("dp", par.get("dp", 1)) * a
            d["dp"] = dp
            changes.append(Change(rule_id=rule_id, message=f"moved attn_dp {a} into dp (now {dp}): on this model "
                                  "attention groups are plain DP replicas; the GPU count stays the same",
                                  field=f"{path}.attn_dp", before=a, after=1))
            continue
        tp = d.get("tp", par.get("tp", 1))
        wide = tp * a
        ok = all(q % wide == 0 for q in spec.q_head_counts) and (spec.attention == "mla" or all(
            kv % wide == 0 or wide % kv == 0 for kv in spec.kv_head_counts))
        msg = f"set attn_dp from {a} to 1"
        if ok:
            msg += f" and tp from {tp} to {wide}: attention is tensor-parallel over the same GPUs"
        else:
            msg += ": the experts keep the stage group, attention runs on its TP GPUs"
        msg += ("; alternative: keep attention-DP and set options.allow_attention_dp = true (a MoE model served "
                "for throughput, like SGLang's --enable-dp-attention)")
        changes.append(Change(rule_id=rule_id, message=msg, field=f"{path}.attn_dp", before=a, after=1))
        if ok:  # its own entry, so that the degree's change names the rule that forced it
            d["tp"] = wide
            changes.append(Change(rule_id=rule_id, message=f"set tp from {tp} to {wide}: the {a} attention groups "
                                  "become one TP group over the same GPUs", field=f"{path}.tp", before=tp, after=wide))
    return changes


@fixer("ADP-OPT-IN")
def fix_opt_in(plan: dict[str, Any], ctx: Context) -> list[Change]:
    if ctx.plan is None:
        return []
    return _turn_off(plan, ctx, "ADP-OPT-IN", into_dp=not ctx.plan.spec.is_moe)


# ----------------------------------------------------------------------------------------------- ADP-MOE-ONLY
@checker("ADP-MOE-ONLY", needs="any")
def check_moe_only(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None:
        if ctx.plan.spec.is_moe:
            return
        for ph, a in sorted(plan_attn_dp(ctx).items()):
            yield Finding(f"{ctx.plan.spec.id} is a dense model but {ph} attn_dp = {a}: with no experts to share, "
                          "attention groups are plain DP replicas", field=field_of(ph, "attn_dp", ctx.plan),
                          hint="use dp instead (set attn_dp to 1 and multiply dp by it)")
            return
        if ctx.from_plan:
            return
    if ctx.graph is None or ctx.spec is None or ctx.spec.is_moe or not dag_uses_attention_dp(ctx):
        return
    yield Finding(f"the DAG runs attention-DP groups on the dense model {ctx.spec.id}; without experts to share "
                  "they are DP replicas", _example_nodes(ctx), hint="draw separate replicas under the RequestNode")


@fixer("ADP-MOE-ONLY")
def fix_moe_only(plan: dict[str, Any], ctx: Context) -> list[Change]:
    if ctx.plan is None:
        return []
    changes = _turn_off(plan, ctx, "ADP-MOE-ONLY", into_dp=True)
    opts = plan.get("options") or {}
    if opts.get("allow_attention_dp"):
        del opts["allow_attention_dp"]
        changes.append(Change(rule_id="ADP-MOE-ONLY", message="removed options.allow_attention_dp: a dense model has "
                              "no experts for attention groups to share", field="plan.options.allow_attention_dp",
                              before=True, after=None))
    return changes


# ----------------------------------------------------------------------------------------------- ADP-EP-SPANS-GROUPS
def _spans_problem(ctx: Context, ph: str) -> str | None:
    assert ctx.plan is not None and ctx.layout is not None
    pl, pool = ctx.layout.phases[ph], ctx.layout.pools[ph]  # type: ignore[index]
    att, w = pl.attention_gpus, pool.group_width
    if ctx.plan.options.allow_expert_tp:
        if att == w and w % pl.ep == 0:
            return None
    elif pl.ep == att:
        return None
    if pl.ep < att:
        return (f"{ph}: ep = {pl.ep} but attn_dp x max(tp, sp) = {pl.attn_dp} x {pl.attn_width} = {att} attention "
                f"GPUs: {att - pl.ep} GPU(s) hold no expert and idle in every MoE layer")
    extra = f"; {att} does not divide W = {w}" if w % att else ""
    return (f"{ph}: ep = {pl.ep} but attn_dp x max(tp, sp) = {pl.attn_dp} x {pl.attn_width} = {att}: "
            f"{w - att} GPU(s) of the {w}-GPU stage group run no attention group{extra}")


@checker("ADP-EP-SPANS-GROUPS", needs="plan")
def check_ep_spans_groups(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    if not ctx.plan.spec.is_moe:
        return
    for ph in sorted(plan_attn_dp(ctx)):
        problem = _spans_problem(ctx, ph)
        if problem:
            yield Finding(problem + "; with attention-DP the experts are spread over exactly the attention GPUs",
                          field=field_of(ph, "ep", ctx.plan),
                          hint="set ep = attn_dp x max(tp, sp), or attn_dp = ep / max(tp, sp)")
            return


@fixer("ADP-EP-SPANS-GROUPS")
def fix_ep_spans_groups(plan: dict[str, Any], ctx: Context) -> list[Change]:
    """ep := attn_dp * width when the experts split evenly that way, else attn_dp := ep / width."""
    assert ctx.plan is not None and ctx.layout is not None
    e = ctx.plan.spec.moe.num_experts  # type: ignore[union-attr]
    imbalance_ok = ctx.plan.options.expert_imbalance_ok
    changes: list[Change] = []
    for ph in sorted(plan_attn_dp(ctx)):
        if not _spans_problem(ctx, ph):
            continue
        pl = ctx.layout.phases[ph]  # type: ignore[index]
        att = pl.attention_gpus
        ep_path = field_of(ph, "ep", ctx.plan)
        a_path = field_of(ph, "attn_dp", ctx.plan)
        if att <= e and (e % att == 0 or imbalance_ok):
            where = f"{ph} " if ep_path.startswith("plan.phases") else ""
            changes.append(_set(plan, ep_path, pl.ep, att, "ADP-EP-SPANS-GROUPS",
                                f"set {where}ep from {pl.ep} to {att} = attn_dp x max(tp, sp): the experts now use "
                                "every attention GPU"))
        elif pl.ep % pl.attn_width == 0 and pl.ep // pl.attn_width > 1:
            a = pl.ep // pl.attn_width
            where = f"{ph} " if a_path.startswith("plan.phases") else ""
            changes.append(_set(plan, a_path, pl.attn_dp, a, "ADP-EP-SPANS-GROUPS",
                                f"set {where}attn_dp from {pl.attn_dp} to {a}: the attention groups now cover the "
                                f"{pl.ep} expert GPUs"))
        if changes and not ep_path.startswith("plan.phases") and not a_path.startswith("plan.phases"):
            break  # a plan-wide change serves both phases
    return changes


def _set(plan: dict[str, Any], path: str, before: int, after: int, rule_id: str, message: str) -> Change:
    parts = path.split(".")[1:]
    d = plan
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = after
    return Change(rule_id=rule_id, message=message, field=path, before=before, after=after)


# ----------------------------------------------------------------------------------------------- graph rules
def _group_devices(ctx: Context, groups: dict[Any, list[str]]) -> dict[Any, frozenset[int]]:
    return {g: frozenset().union(*(ctx.devices[n] for n in ns)) for g, ns in groups.items()}


def _moe_parts(ctx: Context) -> dict[Key, dict[str, list[str]]]:
    out: dict[Key, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for n in ctx.of(NodeType.ROUTER, NodeType.EXPERT, NodeType.ALL_TO_ALL):
        out[ctx.rpl[n]][ctx.types[n]].append(n)
    return out


@checker("ADP-DISPATCH-FROM-ALL-GROUPS")
def check_dispatch_from_all_groups(ctx: Context) -> Iterator[Finding]:
    groups_of = attention_groups(ctx)
    if not groups_of:
        return
    parts = _moe_parts(ctx)
    for key, groups in sorted(groups_of.items(), key=str):
        gdev = _group_devices(ctx, groups)
        names = sorted(gdev, key=str)
        for i, g in enumerate(names):
            for h in names[i + 1:]:
                if gdev[g] & gdev[h]:
                    both = sorted(gdev[g] & gdev[h])
                    yield Finding(f"layer {key}: attention groups {g} and {h} share GPU(s) {both}; attention-DP "
                                  "groups are disjoint GPU sets", groups[g][:2] + groups[h][:2])
                    return
        p = parts.get(key)
        if not p or not p.get(NodeType.EXPERT):
            continue
        experts = set(p[NodeType.EXPERT])
        dispatch = sorted({q for e in experts for q in ctx.pred[e] if ctx.types[q] == NodeType.ALL_TO_ALL})
        combine = sorted({s for e in experts for s in ctx.succ[e] if ctx.types[s] == NodeType.ALL_TO_ALL})
        if len(dispatch) != 1:
            yield Finding(f"MoE {layer_at(key)}: the experts are fed by {len(dispatch)} AllToAll dispatch nodes; with "
                          "attention-DP every group's tokens go through one dispatch over the whole stage group",
                          dispatch or sorted(experts))
            return
        d = dispatch[0]
        routers = [r for r in p.get(NodeType.ROUTER, []) if d in ctx.succ[r]]
        fed = {g for g, devs in gdev.items() if any(ctx.devices[r] and ctx.devices[r] <= devs for r in routers)}
        missing = [g for g in names if g not in fed]
        if missing:
            yield Finding(f"MoE {layer_at(key)}: attention group(s) {missing} have no router feeding the dispatch {d}; "
                          "every group routes its own tokens into the one AllToAll", [d, *groups[missing[0]][:2]],
                          hint="add a RouterNode per group (on its GPUs) with an edge to the dispatch")
            return
        everyone = frozenset().union(*gdev.values())
        for c in [d, *combine]:
            if not everyone <= ctx.devices[c]:
                yield Finding(f"MoE {layer_at(key)}: the AllToAll {c} runs on {sorted(ctx.devices[c])[:8]} but the "
                              f"attention groups use {sorted(everyone)[:8]}; dispatch and combine span every group",
                              [c])
                return
        if not combine:
            yield Finding(f"MoE {layer_at(key)}: no AllToAll combine returns the expert outputs to the groups",
                          sorted(experts))
            return
    # a group's output reaches another group only through a collective
    grp = {n: ctx.attr(n, "attn_group") for n in group_nodes(ctx)}
    for u, v, t in ctx.data_edges():
        if t == "sync" or ctx.is_comm(u) or ctx.is_comm(v):
            continue
        gu, gv = grp.get(u), grp.get(v)
        if gu is not None and gv is not None and gu != gv:
            yield Finding(f"{u} (attention group {gu}) feeds {v} (group {gv}) directly; groups exchange tokens only "
                          "through the MoE dispatch/combine AllToAll", [u, v])
            return


@checker("ADP-KV-PER-GROUP")
def check_kv_per_group(ctx: Context) -> Iterator[Finding]:
    groups_of = attention_groups(ctx)
    if not groups_of:
        return
    owner: dict[str, Any] = {}
    devs_of: dict[Key, dict[Any, frozenset[int]]] = {}
    for key, groups in groups_of.items():
        devs_of[key] = _group_devices(ctx, groups)
        for g, ns in groups.items():
            for n in ns:
                owner[n] = (key, g)
    bad: list[str] = []
    for k in ctx.of(NodeType.KV_CACHE):
        near = [a for a in list(ctx.pred[k]) + list(ctx.succ[k]) if a in owner]
        gs = {owner[a] for a in near}
        if len(gs) > 1:
            bad.append(k)
            continue
        if gs:
            key, g = next(iter(gs))
            own = ctx.attr(k, "attn_group")
            if not ctx.devices[k] <= devs_of[key][g] or (own is not None and own != g):
                bad.append(k)
    for u, v, t in ctx.data_edges():
        if t != "kv" or ctx.is_comm(u) or ctx.is_comm(v):
            continue
        gu, gv = ctx.attr(u, "attn_group"), ctx.attr(v, "attn_group")
        if gu is not None and gv is not None and gu != gv:
            bad.extend((u, v))
    if bad:
        yield Finding(f"{len(bad)} KV node(s)/edge(s) cross attention-DP groups (e.g. {bad[0]}); each group keeps the "
                      "KV cache of its own requests on its own GPUs", bad,
                      hint="attach each KVCacheUpdateNode to the attention of its own group, on that group's GPUs")
