"""COMM-*: every exchange of data between GPUs is an explicit communication node over the GPUs taking part."""

from __future__ import annotations

from collections.abc import Iterator

from tools.dag import CONTROL_TYPES
from tools.rules.registry import Context, Finding, checker

COMM_MARK = "<comm>"


def _producers(ctx: Context) -> dict[str, frozenset[str]]:
    """For each container node: the nearest real (non-container) producers above it, seen through containers.
    Contains COMM_MARK when a communication node feeds it (the exchange is then explicit)."""
    out: dict[str, frozenset[str]] = {}
    for n in ctx.topo:
        if ctx.types[n] not in CONTROL_TYPES:
            continue
        acc: set[str] = set()
        for p, a in ctx.pred[n].items():
            if a.get("type") == "sync":
                continue
            if ctx.is_comm(p):
                acc.add(COMM_MARK)
            elif ctx.types[p] in CONTROL_TYPES:
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
    """data/kv edge u -> v, neither a communication node (containers seen through): v's GPUs within u's."""
    prod = _producers(ctx) if ctx.acyclic else {}
    bad: list[tuple[str, str, frozenset[int]]] = []
    for u, v, t in ctx.data_edges():
        if t not in ("data", "kv") or ctx.is_comm(u) or ctx.is_comm(v) or ctx.types[v] in CONTROL_TYPES:
            continue
        if ctx.types[u] in CONTROL_TYPES:
            srcs = prod.get(u, frozenset())
            if not srcs or COMM_MARK in srcs:
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
        yield Finding(f"{len(bad)} edge(s) move data between GPUs with no communication node (e.g. {u} -> {v}: {v} "
                      "runs "
                      f"on GPU(s) {sorted(extra)[:8]} that {u} does not use); a consumer may only read what is already "
                      "on its GPUs", [x for e in bad[:3] for x in e[:2]],
                      hint="insert the collective (AllReduce/AllGather/AllToAll/SendRecv) that moves the data")


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
