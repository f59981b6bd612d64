"""COMM-*: every exchange of data between GPUs is an explicit communication node over the GPUs taking part."""

from __future__ import annotations

from collections.abc import Iterator

from tools.core.dag import CONTROL_TYPES, NodeType
from tools.rules.registry import Context, Finding, checker


def _producers(ctx: Context) -> dict[str, frozenset[str]]:
    """For each container node: the nearest real (non-container) producers above it, seen through containers.
    A communication node counts with its own GPUs: it makes data present there and nowhere else, so an
    unrelated collective upstream of a stage hand-off does not stand in for the missing SendRecv."""
    out: dict[str, frozenset[str]] = {}
    for n in ctx.topo:
        if ctx.types[n] not in CONTROL_TYPES:
            continue
        acc: set[str] = set()
        for p, a in ctx.pred[n].items():
            if a.get("type") == "sync":
                continue
            if ctx.types[p] in CONTROL_TYPES:
                acc |= out.get(p, frozenset())
            else:
                acc.add(p)
        out[n] = frozenset(acc)
    return out


def _group_join(ctx: Context, v: str) -> frozenset[int]:
    """Attention-DP: a node fed by two or more groups (e.g. the final norm) works on each group's own rows where
    they already are, so it may run on the union of those groups' GPUs without moving data."""
    feeders = [p for p in ctx.pred[v] if ctx.attr(p, "attn_group") is not None]
    if len({ctx.attr(p, "attn_group") for p in feeders}) < 2:
        return ctx.devices[feeders[0]] if feeders else frozenset()
    return frozenset().union(*(ctx.devices[p] for p in ctx.pred[v]))


@checker("COMM-NO-IMPLICIT")
def check_no_implicit(ctx: Context) -> Iterator[Finding]:
    """data/kv/pipeline edge u -> v into a non-communication node (containers seen through): v's GPUs within
    u's.  A collective u handing over to another stage counts with its own GPUs: it leaves its result where it
    ran, so an AllReduce on one stage's GPUs feeding the next stage's is a hand-off with no SendRecv (seed 001
    section 8: all communication is explicit)."""
    prod = _producers(ctx) if ctx.acyclic else {}
    bad: list[tuple[str, str, frozenset[int]]] = []
    for u, v, t in ctx.data_edges():
        if t not in ("data", "kv", "pipeline") or ctx.is_comm(v) or ctx.types[v] in CONTROL_TYPES:
            continue
        if ctx.is_comm(u) and (ctx.types[u] in (NodeType.SEND_RECV, NodeType.KV_TRANSFER) or (
                t != "pipeline" and ctx.key(u, "stage")[0] == ctx.key(v, "stage")[0])):
            continue  # inside a stage a collective's consumers are judged by COMM-EXPLICIT-COLLECTIVES
        if ctx.types[u] in CONTROL_TYPES:
            srcs = prod.get(u, frozenset())
            if not srcs:
                continue
            have = frozenset().union(*(ctx.devices[s] for s in srcs))
        else:
            have = ctx.devices[u]
            if ctx.attr(u, "attn_group") is not None and ctx.attr(v, "attn_group") is None:
                have = _group_join(ctx, v)
        extra = ctx.devices[v] - have
        if extra:
            bad.append((u, v, extra))
    if bad:
        u, v, extra = bad[0]
        stages = ctx.key(u, "stage")[0], ctx.key(v, "stage")[0]
        kv = ctx.types[u] == NodeType.KV_CACHE or ctx.succ[u][v].get("type") == "kv"
        what = (f"a KVTransferNode on GPUs {sorted(ctx.devices[u] | ctx.devices[v])[:8]} (the KV cache crosses to "
                "the GPUs that read it)" if kv
                else f"a SendRecvNode from stage {stages[0]} to stage {stages[1]} on GPUs "
                f"{sorted(ctx.devices[u] | ctx.devices[v])[:8]}" if None not in stages and stages[0] != stages[1]
                else f"the collective that brings {u}'s output to GPU(s) {sorted(extra)[:8]}")
        yield Finding(f"{len(bad)} edge(s) move data between GPUs with no communication node (e.g. {u} -> {v}: {v} "
                      "runs "
                      f"on GPU(s) {sorted(extra)[:8]} that {u} does not use); a consumer may only read what is already "
                      "on its GPUs", [x for e in bad[:3] for x in e[:2]],
                      hint=f"insert {what} between {u} and {v}")


@checker("COMM-EXPLICIT-COLLECTIVES")
def check_explicit_collectives(ctx: Context) -> Iterator[Finding]:
    bad = []
    for n in ctx.real_nodes:
        if not ctx.is_comm(n):
            continue
        mine = ctx.devices[n]
        ins = frozenset().union(*(ctx.devices[p] for p in ctx.pred[n]
                                  if ctx.types[p] not in CONTROL_TYPES and ctx.succ[p][n].get("type") != "sync"))
        if not mine or not ins <= mine:
            bad.append((n, ins - mine))
    if bad:
        n, missing = bad[0]
        yield Finding(f"{len(bad)} communication node(s) do not run on the GPUs they join (e.g. {n} lists "
                      f"{sorted(ctx.devices[n])[:8]} but its inputs are also on {sorted(missing)[:8]}); a collective's "
                      "devices are every GPU taking part", [b[0] for b in bad],
                      hint="list every participating GPU in the collective's devices")


REDUCING = (NodeType.ALL_REDUCE, NodeType.REDUCE_SCATTER)
PARTIAL_TYPES = {NodeType.ATTENTION, NodeType.FFN, NodeType.LINEAR, NodeType.EXPERT}


@checker("COMM-REDUCE-OF-SHARDS")
def check_reduce_of_shards(ctx: Context) -> Iterator[Finding]:
    """An AllReduce / ReduceScatter sums partial results: its inputs are shards of a sharded operator (or one
    sharded operator drawn as a single node over several GPUs).  Fed only by norms, collectives or nothing, it
    reduces nothing: typically another node drawn with a collective's type."""
    def partial(p: str) -> bool:
        if ctx.types[p] == NodeType.ALL_GATHER:  # sequence shards gathered first (SP), then the TP reduction
            return any(partial(q) for q in ctx.pred[p] if ctx.types[q] != NodeType.ALL_GATHER)
        if ctx.types[p] == NodeType.EMBEDDING:  # a vocab-parallel lookup: each rank holds some rows
            return int((ctx.attr(p, "meta") or {}).get("vocab_shards", 1) or 1) > 1
        return ctx.types[p] in PARTIAL_TYPES and (
            any(ctx.attr(p, k) is not None for k in ("tp_rank", "sp_rank", "ep_rank")) or len(ctx.devices[p]) > 1)

    bad = []
    for n in ctx.of(*REDUCING):
        ins = [p for p, a in ctx.pred[n].items() if a.get("type") != "sync"]
        if not any(partial(p) for p in ins):
            bad.append((n, ins))
    if bad:
        n, ins = bad[0]
        fed = f"fed by {', '.join(f'{ctx.types[p]} {p}' for p in ins[:2])}" if ins else "fed by nothing"
        yield Finding(f"{len(bad)} {ctx.types[n]}(s) reduce no partial results (e.g. {n}, {fed}); a reduction "
                      "joins the shards of a TP-sharded operator", [b[0] for b in bad],
                      hint=f"give {n} its real type (e.g. NormNode) or feed it the shards it joins")
