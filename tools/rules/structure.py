"""STRUCT-*: the DAG is a well-formed document and graph (schema, acyclic, no dangling edges, one root...)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import networkx as nx

from tools.core.dag import CONTROL_TYPES, EdgeType, NodeType
from tools.core.shares import node_shares
from tools.rules.registry import EXTRA_RULES, Context, Finding, checker

EXTRA_RULES["STRUCT-SCHEMA"] = {
    "severity": "error",
    "source": [{"seed": "pdag", "section": "published DAG JSON Schema (tools.core.dag.dag_json_schema)"}],
}
KNOWN_NODE_TYPES = {str(t) for t in NodeType}
KNOWN_EDGE_TYPES = {str(t) for t in EdgeType}
HINT_SCHEMA = "make the DAG match the published JSON Schema (tools.core.dag.dag_json_schema())"


def _schema(ctx: Context, rule_id: str, hint: str = HINT_SCHEMA) -> Iterator[Finding]:
    for rid, path, msg in ctx.schema_errors:
        if rid == rule_id:
            yield Finding(f"{path}: {msg}", field=path, hint=hint)


@checker("STRUCT-SCHEMA", needs="any")
def check_schema(ctx: Context) -> Iterator[Finding]:
    """Anything the schema rejects that no more specific STRUCT rule names."""
    yield from _schema(ctx, "STRUCT-SCHEMA")


@checker("STRUCT-NODE-LIMIT", needs="any")
def check_node_limit(ctx: Context) -> Iterator[Finding]:
    yield from _schema(ctx, "STRUCT-NODE-LIMIT", "submit a plan (pdag builds and folds large DAGs) or fewer replicas")


@checker("STRUCT-KNOWN-TYPES", needs="any")
def check_known_types(ctx: Context) -> Iterator[Finding]:
    if ctx.schema_errors:
        yield from _schema(ctx, "STRUCT-KNOWN-TYPES", "use the canonical node and edge types of the DAG schema")
        return
    if ctx.graph is None:
        return
    bad = [n for n, t in ctx.types.items() if t not in KNOWN_NODE_TYPES]
    if bad:
        yield Finding(f"{len(bad)} node(s) have unknown types; node types must be one of "
                      f"{', '.join(sorted(KNOWN_NODE_TYPES))}", bad)
    bad_e = [(u, v) for u, v, t in ctx.data_edges() if t not in KNOWN_EDGE_TYPES]
    if bad_e:
        yield Finding(f"{len(bad_e)} edge(s) have unknown types; edge types are {', '.join(sorted(KNOWN_EDGE_TYPES))}",
                      [u for u, _ in bad_e])


@checker("STRUCT-ONE-READING", needs="any")
def check_one_reading(ctx: Context) -> Iterator[Finding]:
    """A word the draft gives two meanings (knowledge/dag_vocabulary.json, refused_readings), read neither way."""
    yield from _schema(ctx, "STRUCT-ONE-READING", "write one of the spellings offered, which carries one meaning")


@checker("STRUCT-NO-DANGLING-EDGES", needs="any")
def check_dangling(ctx: Context) -> Iterator[Finding]:
    if ctx.dangling:
        ends = sorted({f"{u} -> {v}" for u, v in ctx.dangling})
        yield Finding(f"{len(ctx.dangling)} edge(s) point to node ids that do not exist (e.g. {ends[0]}); every edge "
                      "must join two nodes of the DAG", [u for u, _ in ctx.dangling],
                      hint="add the missing nodes or remove the edges")
    if ctx.duplicate_ids:
        yield Finding(f"node ids appear more than once ({', '.join(sorted(set(ctx.duplicate_ids))[:5])}); node ids "
                      "must be unique", ctx.duplicate_ids, hint="rename the duplicates")


@checker("STRUCT-ACYCLIC")
def check_acyclic(ctx: Context) -> Iterator[Finding]:
    if ctx.acyclic:
        return
    cycle = nx.find_cycle(ctx.g)
    path = " -> ".join([u for u, *_ in cycle] + [cycle[0][0]])
    yield Finding(f"the graph has a cycle ({path[:300]}); an execution DAG must be acyclic",
                  [u for u, *_ in cycle], hint="remove the edge that closes the cycle")


@checker("STRUCT-DEVICES-ASSIGNED", needs="any")
def check_devices(ctx: Context) -> Iterator[Finding]:
    yield from _schema(ctx, "STRUCT-DEVICES-ASSIGNED", "give every node a list of GPU ids")
    if ctx.graph is None or ctx.from_plan:
        return
    empty = [n for n in ctx.real_nodes if not ctx.devices[n]]
    if empty:
        yield Finding(f"{len(empty)} compute/communication node(s) have no devices; every node must say which GPUs "
                      "it runs on", empty, hint="list the GPU ids of each node in 'devices'")
    n_gpus = ctx.num_gpus
    if n_gpus is not None:
        out = [n for n, d in ctx.devices.items() if d and max(d) >= n_gpus]
        if out:
            yield Finding(f"{len(out)} node(s) use GPU ids >= hardware.num_gpus = {n_gpus}; device ids must lie in "
                          f"[0, {n_gpus})", out, field="plan.hardware.num_gpus")
    control = [n for n in ctx.g if ctx.types[n] in CONTROL_TYPES]
    for n in control:
        own = ctx.devices[n]
        if not own:
            continue
        for s in ctx.succ[n]:
            if ctx.types[s] not in CONTROL_TYPES and not ctx.devices[s] <= own and ctx.types[n] != NodeType.MOE:
                if ctx.types[n] in (NodeType.STAGE,):
                    break  # stage placement is PP-OUTER-STRUCTURE's business
                yield Finding(f"container node {n} lists devices {_fmt(own)} but its child {s} runs on "
                              f"{_fmt(ctx.devices[s])}; a container carries the union of its children's devices",
                              [n, s])
                break


def _fmt(d: frozenset[int] | set[int]) -> str:
    s = sorted(d)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}-{s[-1]}"
    return "[" + ", ".join(map(str, s[:8])) + (", ..." if len(s) > 8 else "") + "]"


@checker("STRUCT-SINGLE-ROOT")
def check_single_root(ctx: Context) -> Iterator[Finding]:
    roots = ctx.of(NodeType.REQUEST)
    if len(roots) != 1:
        yield Finding(f"the DAG has {len(roots)} RequestNodes; it needs exactly one root RequestNode", roots,
                      hint="add one RequestNode and hang every replica under it")
        return
    root = roots[0]
    if ctx.g.in_degree(root):
        yield Finding(f"the RequestNode {root} has predecessors; the root has none", [root, *ctx.pred[root]])
    if not ctx.acyclic:
        return
    orphans = [n for n, d in ctx.g.in_degree() if d == 0 and n != root]
    if orphans:  # in an acyclic graph, unreachable from the root <=> some other source exists
        yield Finding(f"{len(orphans)} node(s) have no predecessor and are not reachable from the RequestNode "
                      f"(e.g. {orphans[0]}); every node must hang under the root", orphans,
                      hint="connect them to the operator that feeds them")


@checker("STRUCT-THREE-LAYERS")
def check_three_layers(ctx: Context) -> Iterator[Finding]:
    """Request level holds only DP replicas (or phases), operator-level shards never hang off request-level
    nodes, and stage nodes never sit directly under the request."""
    for root in ctx.of(NodeType.REQUEST):
        bad = [s for s in ctx.succ[root] if ctx.types[s] not in (NodeType.REPLICA, NodeType.PHASE)]
        if bad:
            yield Finding(f"the RequestNode feeds {len(bad)} node(s) that are not DP replicas or phases (e.g. "
                          f"{bad[0]}, "
                          f"a {ctx.types[bad[0]]}); the request level holds only DP", [root, *bad],
                          hint="put replicas under the RequestNode, stages under the phases, shards inside operators")
    for n in ctx.of(NodeType.REPLICA, NodeType.PHASE):
        bad = [s for s in ctx.succ[n] if _sharded(ctx, s)]
        if bad:
            yield Finding(f"operator shards (e.g. {bad[0]}) hang directly under the {ctx.types[n]} {n}; TP/SP/EP "
                          "belong inside operators of a pipeline stage", [n, *bad])


def _sharded(ctx: Context, n: str) -> bool:
    a = ctx.nattr[n]
    return any(a.get(k) is not None for k in ("tp_rank", "sp_rank", "ep_rank"))


@checker("STRUCT-DRAWING-MATCHES-PLAN", needs="graph")
def check_drawing_matches_plan(ctx: Context) -> Iterator[Finding]:
    """A DAG that embeds its plan draws that plan: the rules read the plan for some checks and the drawing for
    others, so a drawing of another layout (DP 2 under a plan of TP 2, same GPU count) would pass both halves."""
    if ctx.plan is None or ctx.layout is None or ctx.from_plan or ctx.layout.disaggregated:
        return
    if any(pl.attn_dp > 1 for pl in ctx.layout.phases.values()):
        return
    if any(ctx.attr(n, r) is not None for n in ctx.of(NodeType.REPLICA) for r in ("tp_rank", "sp_rank", "ep_rank")):
        return  # shard ranks on whole-model copies: TP at the root, which the TP and ORDER rules report
    drawn = ctx.inferred_degrees
    for degree, want in (("dp", ctx.layout.dp), ("pp", ctx.layout.pp)):
        if drawn[degree] != want:
            yield Finding(f"the drawing shows {degree} = {drawn[degree]} but its embedded plan says {degree} = {want}; "
                          "the plan and the drawing describe different deployments", field=f"plan.parallel.{degree}",
                          hint=f"set the plan's {degree} to {drawn[degree]}, or draw {want} "
                               f"{'replicas' if degree == 'dp' else 'pipeline stages'} (build_dag draws the plan)")
            return


def _n(v: float) -> str:
    return f"{v:g}"


@checker("STRUCT-SHARD-SIZES")
def check_shard_sizes(ctx: Context) -> Iterator[Finding]:
    """What a shard declares (heads, kv_heads, meta.of, experts) is what the estimator prices, so it must be what
    the model split over the operator's GPUs gives (tools/core/shares.py says how a node's GPUs share its work)."""
    spec = ctx.spec
    if spec is None or ctx.graph is None or ctx.from_plan:  # pdag's own split: a fraction is TP-HEADS-DIVISIBLE's
        return
    shares = node_shares(ctx.g, spec)
    # KV-TP-SHARDING already judges kv_heads on operators drawn one shard per TP rank
    ranked = {s for shards in ctx.ops.values() if ctx.tp_width(shards) > 1 for s in shards}
    # and EP-EXPERT-NODES-EQ-GPUS Expert nodes that share a GPU (split experts are its finding, not a size's)
    on_gpu: dict[tuple[Any, ...], list[str]] = {}
    for x in ctx.of(NodeType.EXPERT):
        for d in ctx.devices[x]:
            on_gpu.setdefault((*ctx.key(x, "replica", "phase", "layer"), d), []).append(x)
    stacked = {x for xs in on_gpu.values() if len(xs) > 1 for x in xs}
    found: dict[str, list[tuple[str, str]]] = {}
    for n in ctx.topo:
        s = shares.get(n)
        if s is None:
            continue
        t, a = ctx.types[n], ctx.nattr[n]
        gpus = len(ctx.devices[n])
        if s.of_declared is not None and t in (NodeType.ATTENTION, NodeType.FFN) \
                and s.of_declared not in s.parts_allowed:
            kind, size = ("attention", "heads") if t == NodeType.ATTENTION else ("FFN", "intermediate size")
            found.setdefault("of", []).append((n, f"{n} declares meta.of = {s.of_declared} (each of its GPUs runs "
                                                  f"1/{s.of_declared} of the {kind}) but its operator is drawn over "
                                                  f"{max(s.parts_allowed)} GPU(s): the model's {size} split over "
                                                  f"them gives of = {' or '.join(map(str, s.parts_allowed))}"))
            continue
        if s.heads_declared is not None and s.heads_implied is not None and \
                not math.isclose(s.heads_declared, s.heads_implied):
            want = a["heads"] * s.heads_implied / s.heads_declared
            layer = a.get("layer")
            q = spec.q_heads(layer) if isinstance(layer, int) and 0 <= layer < spec.num_layers else spec.num_heads
            found.setdefault("heads", []).append((n, f"{n} declares heads = {a['heads']} but {spec.id}'s "
                                                     f"{q} query heads over {s.parts} shard(s) give "
                                                     f"{_n(s.heads_implied)} per GPU: heads = {_n(want)} on its "
                                                     f"{gpus} GPU(s)"))
        if s.kv_declared is not None and s.kv_implied is not None and n not in ranked \
                and a["kv_heads"] <= max(spec.kv_head_counts) and not math.isclose(s.kv_declared, s.kv_implied):
            found.setdefault("kv_heads", []).append((n, f"{n} declares kv_heads = {a['kv_heads']} on {gpus} GPU(s) but "
                                                        f"{spec.id}'s KV heads over {s.parts} "
                                                        f"shard(s) give {_n(s.kv_implied)} per GPU (sharded while "
                                                        "the shards are no more than the KV heads, replicated beyond)"))
        if s.experts_declared is not None and s.experts_implied is not None and n not in stacked and \
                not s.experts_implied[0] <= s.experts_declared <= s.experts_implied[1]:
            lo, hi = s.experts_implied
            found.setdefault("experts", []).append((n, f"{n} holds {_n(s.experts_declared)} expert(s) per GPU but "
                                                       f"{spec.id}'s {spec.moe.num_experts if spec.moe else 0} "
                                                       f"experts over the layer's expert GPUs give "
                                                       f"{lo if lo == hi else f'{lo}-{hi}'} per GPU"))
    for _what, hits in found.items():
        nodes = [n for n, _ in hits]
        more = f" ({len(hits) - 1} more node(s) alike)" if len(hits) > 1 else ""
        yield Finding(hits[0][1] + more, nodes, hint="state the shard's own part of the model (or leave the "
                                                     "attribute out: pdag then derives it from the node's GPUs)")
