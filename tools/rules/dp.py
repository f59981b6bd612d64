"""DP-*: data parallelism is the request-level fan-out into independent, complete replicas."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import networkx as nx

from tools.core.dag import CONTROL_TYPES, NodeType
from tools.rules.attention_dp import attention_dp_without_opt_in
from tools.rules.registry import Change, Context, Finding, checker, fixer, scope, set_degree


@checker("DP-ROOT-ONLY")
def check_root_only(ctx: Context) -> Iterator[Finding]:
    for n in ctx.of(NodeType.REPLICA):
        bad = [p for p in ctx.pred[n] if ctx.types[p] != NodeType.REQUEST]
        if bad:
            yield Finding(f"ReplicaNode {n} hangs under the {ctx.types[bad[0]]} {bad[0]}; DP replicas fan out only "
                          "from "
                          "the root RequestNode", [n, *bad], hint="move the replica fan-out to the RequestNode")
    for f in attention_dp_without_opt_in(ctx):  # attention-DP groups are a DP fan-out below the root
        f.message += "; DP fans out only at the root RequestNode unless attention-DP is opted in"
        yield f


def _replica_members(ctx: Context) -> tuple[dict[str, set[Any]], dict[Any, set[int]]]:
    """Replicas reaching each node along data/pipeline edges (the replicas partition the graph, so linear).

    Disaggregated serving (opted in): prefill and decode replicas are told apart by node id, and the KV edges
    from a prefill replica into the decode replicas it serves are the designed hand-over, not shared nodes."""
    reach: dict[str, set[Any]] = defaultdict(set)
    disagg = ctx.options.disaggregated
    skip = {"sync", "kv"} if disagg else {"sync"}
    flow = nx.DiGraph()
    flow.add_nodes_from(ctx.g)
    flow.add_edges_from((u, v) for u, v, t in ctx.g.edges(data="type") if t not in skip)
    for i, r in enumerate(ctx.of(NodeType.REPLICA)):
        rid = r if disagg else ctx.attr(r, "replica") if ctx.attr(r, "replica") is not None else i
        for u in nx.descendants(flow, r) | {r}:
            reach[u].add(rid)
    devices: dict[Any, set[int]] = defaultdict(set)
    for n, rs in reach.items():
        if len(rs) == 1 and ctx.types[n] not in CONTROL_TYPES:
            devices[next(iter(rs))].update(ctx.devices[n])
    return reach, devices


def _fold_overlaps(ctx: Context) -> Iterator[Finding]:
    """A replica fold's copies must land on GPUs of their own: the stride covers the replica's GPUs, and no
    copy falls on a GPU some other drawn node uses."""
    for f in ctx.replica_folds:
        members = ctx.replica_members.get(f.node, [])
        if f.count < 2 or not members:
            continue
        mset = set(members)
        devs: set[int] = set()
        for n in members:
            if ctx.types[n] not in CONTROL_TYPES:
                devs.update(ctx.devices[n])
        devs &= ctx.replica_span(f.node, devs)
        if not devs:
            continue
        lo, span = min(devs), max(devs) - min(devs) + 1
        if f.stride < span:
            yield Finding(f"replica fold of {f.node}: stride {f.stride} is smaller than the {span} GPUs the replica "
                          "spans, so its copies share GPUs; replicas each run on their own GPUs", [f.node],
                          hint=f"set the fold's stride to at least {span}")
            continue
        hits = []
        for n in ctx.real_nodes:
            if n in mset:
                continue
            for x in ctx.devices[n]:
                k = (x - lo) // f.stride
                if 1 <= k < f.count and x - k * f.stride in devs:
                    hits.append(n)
                    break
        if hits:
            yield Finding(f"the copies of folded replica {f.node} fall on GPUs that {len(hits)} other node(s) use "
                          f"(e.g. {sorted(hits)[0]}); replicas each run on their own GPUs", [f.node, *hits])


@checker("DP-INDEPENDENT-REPLICAS")
def check_independent(ctx: Context) -> Iterator[Finding]:
    yield from _fold_overlaps(ctx)
    if len(ctx.of(NodeType.REPLICA)) < 2:
        return
    reach, devices = _replica_members(ctx)
    shared = [n for n, rs in reach.items() if len(rs) > 1]
    if shared:
        yield Finding(f"{len(shared)} node(s) belong to more than one DP replica (e.g. {sorted(shared)[0]}); replicas "
                      "are independent sub-DAGs that share no node or edge", shared,
                      hint="give each replica its own copy of the operators")
    reps = sorted(devices, key=str)
    for i, a in enumerate(reps):
        for b in reps[i + 1:]:
            common = devices[a] & devices[b]
            if common:
                yield Finding(f"replicas {a} and {b} both use GPU(s) {sorted(common)[:8]}; each replica runs on its "
                              "own "
                              "GPUs", field=None, hint="shift replica b's devices by the GPUs of one replica")


@checker("DP-NO-LAYER-SPLIT")
def check_no_layer_split(ctx: Context) -> Iterator[Finding]:
    """Every replica holds every layer (in each phase it has): the model's, or in a drawing that abbreviates the
    model for every replica alike, the layers drawn."""
    layers: dict[Any, set[int]] = defaultdict(set)
    for n in ctx.of(NodeType.ATTENTION):
        r, ph, _ = ctx.rpl[n]
        layers[(r, ph)].update(ctx.layer_span(n))
    yield from _layer_split_by_groups(ctx)
    if not layers:
        return
    drawn = set().union(*layers.values())
    model = set(range(ctx.spec.num_layers)) if ctx.spec is not None else drawn
    # a drawing that abbreviates the model (no replica reaches its last layers, none states the rest as a fold)
    # is held to the same layers in every replica, not to layers nobody drew
    full = model if model <= drawn else drawn
    for (r, ph), got in sorted(layers.items(), key=str):
        missing = full - got
        if missing and (len({k[0] for k in layers}) > 1 or ctx.replica_count > 1):
            yield Finding(f"{scope(r, ph)} lacks layers {_ranges(missing)}; every DP replica holds the complete "
                          "model - DP never splits layers (that is PP's job)", hint="use pp to split layers")


def _layer_split_by_groups(ctx: Context) -> Iterator[Finding]:
    for f in attention_dp_without_opt_in(ctx):
        f.message = (f.message.split(", each for")[0] + ": each group holds only the attention of the layer while "
                     "the rest of it is shared, so DP cuts through the layer (a DP replica holds whole layers)")
        yield f


def _ranges(xs: set[int]) -> str:
    s = sorted(xs)
    out, start = [], s[0]
    for a, b in zip(s, s[1:] + [None], strict=False):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out[:6]) + (" ..." if len(out) > 6 else "")


@checker("DP-NOT-FOR-LATENCY", needs="plan")
def check_not_for_latency(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    dp = max(p.dp for p in ctx.layout.pools.values())
    if ctx.plan.objective == "latency" and dp > 1:
        yield Finding(f"objective is latency but dp = {dp}: DP replicas serve other requests and never "
                      "shorten one request's latency", field="plan.parallel.dp",
                      hint="set dp to 1 (spend the GPUs on TP within a node if the latency needs it)")


@fixer("DP-NOT-FOR-LATENCY")
def fix_not_for_latency(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return set_degree(plan, "dp", 1, "DP-NOT-FOR-LATENCY",
                      "objective latency, and DP does not reduce a request's latency", severity="warning")
