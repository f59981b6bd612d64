"""The working form of a DAG: the representative part drawn, identical replicas and layers folded.

Every tool judges and prices this form (see ARCHITECTURE.md, "The working form of a DAG").  A ``ReplicaFold``
says that a drawn replica stands for ``count`` disjoint copies, copy *k* on devices shifted by ``k * stride``;
a ``LayerFold`` says that a drawn layer stands for ``repeat`` consecutive identical layers on the same GPUs.
``expand`` turns the working form back into the full per-GPU node-link document, page by page, and
``fold_replicas`` folds a submitted, fully drawn DAG after checking that its replicas really are copies.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import networkx as nx
from pydantic import BaseModel, Field

from tools.core.dag import CONTROL_TYPES, DAG_FORMAT, DAG_VERSION, MAX_FOLD_COUNT, NodeType
from tools.core.errors import PdagInputError
from tools.core.models import ModelSpec

PAGE_CHARS = 100_000  # about 25k tokens: the most one page of an expanded DAG holds (and one MCP answer)


@dataclass(frozen=True)
class ReplicaFold:
    """The drawn replica ``node`` (with everything under it) stands for ``count`` copies, copy k on +k*stride."""

    node: str
    count: int
    stride: int


@dataclass(frozen=True)
class LayerFold:
    """``nodes`` are the drawn layer ``first_layer``; they stand for ``repeat`` consecutive layers.

    ``carry`` holds the (exit, entry) pairs linking copy i's exit to copy i+1's entry."""

    nodes: tuple[str, ...]
    first_layer: int
    repeat: int
    carry: tuple[tuple[str, str], ...] = ()


@dataclass
class WorkingDag:
    """The representative graph plus its folds (a graph without folds is simply fully drawn)."""

    graph: nx.DiGraph
    replicas: list[ReplicaFold] = field(default_factory=list)
    layers: list[LayerFold] = field(default_factory=list)
    inferences: list[Any] = field(default_factory=list)  # tools.core.normalize.Inference: what normalization assumed

    def folds_json(self) -> dict[str, Any]:
        return {
            "replicas": [{"node": f.node, "count": f.count, "stride": f.stride} for f in self.replicas],
            "layers": [{"nodes": list(f.nodes), "first_layer": f.first_layer, "repeat": f.repeat,
                        "carry": [list(c) for c in f.carry]} for f in self.layers],
        }

    def document(self) -> dict[str, Any]:
        """The folded node-link document (schema version 2, with ``folds``)."""
        g = self.graph
        doc: dict[str, Any] = {
            "format": DAG_FORMAT,
            "version": DAG_VERSION,
            "model": g.graph.get("model"),
            "plan": g.graph.get("plan"),
            "nodes": [{"id": n, **a} for n, a in g.nodes(data=True)],
            "edges": [{"source": u, "target": v, "type": a["type"]} for u, v, a in g.edges(data=True)],
        }
        if self.replicas or self.layers:
            doc["folds"] = self.folds_json()
        return doc


def layer_kind(spec: ModelSpec, layer: int) -> tuple[bool, bool]:
    """What makes two layers different in the DAG or in their cost: MoE or dense, sliding-window or full."""
    sliding = bool(spec.sliding_window_layers) and spec.is_sliding_layer(layer)
    return spec.is_moe_layer(layer), sliding


def layer_signature(spec: ModelSpec, layer: int) -> tuple[bool, bool, bool, bool, bool, int]:
    """``layer_kind`` plus whether the layer mixes tokens through a recurrent state instead of attention, whether
    it has an FFN, whether it keeps its own KV and its FFN's width: layers fold into one run, and are priced once,
    only when all of these agree."""
    return (*layer_kind(spec, layer), spec.is_recurrent_layer(layer), spec.is_ffn_free(layer),
            spec.is_kv_shared(layer), spec.ffn_width(layer))


def layer_runs(spec: ModelSpec, layers: range, cuts: frozenset[int]) -> list[range]:
    """Maximal runs of identical layers inside one stage's ``layers``, also cut at ``cuts`` (the stage
    boundaries of every pool, so that prefill and decode folds cover the same layers)."""
    out: list[range] = []
    start = layers.start
    for layer in range(layers.start + 1, layers.stop):
        if layer in cuts or layer_signature(spec, layer) != layer_signature(spec, layer - 1):
            out.append(range(start, layer))
            start = layer
    if layers.stop > layers.start:
        out.append(range(start, layers.stop))
    return out


# ----------------------------------------------------------------------------------------------- expansion
@lru_cache(maxsize=1024)
def _token(first: int) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_])L{first}(?![0-9])")


def _replica_id(node: str, prefix: str, k: int) -> str:
    """Copy k of a node under replica ``prefix``: the prefix ``r0`` becomes ``r{k}``, else ``@r{k}`` is appended."""
    if k == 0:
        return node
    m = re.match(r"^([A-Za-z]+)(\d+)(?=$|\.)", prefix)
    if m and node.startswith(prefix) and (len(node) == len(prefix) or node[len(prefix)] == "."):
        return f"{m.group(1)}{int(m.group(2)) + k}{node[len(prefix):]}"
    return f"{node}@r{k}"


def _copies_of(node: str, first: int, repeat: int) -> list[str]:
    """Ids of copies 0..repeat-1 of a folded node: its ``L{first}`` token becomes ``L{first+i}``, else ``#i`` is
    appended (one regex search for all copies)."""
    m = _token(first).search(node)
    if m is None:
        return [node] + [f"{node}#{i}" for i in range(1, repeat)]
    head, tail = node[: m.start()], node[m.end():]
    return [node] + [f"{head}L{first + i}{tail}" for i in range(1, repeat)]


def _expand_layers(w: WorkingDag) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str, str]]]:
    """Layer copies first: node attrs by id (insertion order kept) and edges."""
    g = w.graph
    fold_of: dict[str, LayerFold] = {}
    for f in w.layers:
        for n in f.nodes:
            fold_of[n] = f
    ids = {n: _copies_of(n, f.first_layer, f.repeat) for n, f in fold_of.items() if n in g}
    nodes: dict[str, dict[str, Any]] = {}
    for n, a in g.nodes(data=True):
        f = fold_of.get(n)
        if f is None:
            nodes[n] = dict(a)
            continue
        base = {k: v for k, v in a.items() if k != "repeat"}
        layer = base.get("layer")
        ops = _copies_of(base["op"], f.first_layer, f.repeat) if isinstance(base.get("op"), str) else None
        for i, nid in enumerate(ids[n]):
            copy = dict(base)
            if layer is not None:
                copy["layer"] = layer + i
            if ops is not None:
                copy["op"] = ops[i]
            nodes[nid] = copy
    edges: list[tuple[str, str, str]] = []
    for u, v, a in g.edges(data=True):
        t = str(a.get("type", "data"))
        fu, fv = fold_of.get(u), fold_of.get(v)
        if fu is not None and fv is not None and (fu.first_layer, fu.repeat) == (fv.first_layer, fv.repeat):
            edges.extend((x, y, t) for x, y in zip(ids[u], ids[v], strict=True))
        else:
            edges.append((ids[u][-1] if fu is not None else u, v, t))
    for f in w.layers:
        for x, e in f.carry:
            edges.extend((ids[x][i], ids[e][i + 1], "data") for i in range(f.repeat - 1))
    return nodes, edges


def replica_members(g: nx.DiGraph, root: str) -> list[str]:
    """The replica node and what hangs under it, in graph order: reached without crossing sync or kv edges (they
    join phases and pools) or entering another replica, plus the nodes whose id extends the replica's id."""
    seen = {root}
    todo = [root]
    while todo:
        n = todo.pop()
        for m, a in g._succ[n].items():
            if m not in seen and a.get("type") not in ("sync", "kv") and g._node[m].get("type") != NodeType.REPLICA:
                seen.add(m)
                todo.append(m)
    head = root + "."
    return [n for n in g if n in seen or n.startswith(head)]


def gpus_used(working: WorkingDag, members: dict[str, list[str]] | None = None) -> int:
    """Distinct GPUs of compute/communication nodes in the full DAG: a folded replica's own GPUs (its
    ReplicaNode's devices, else those under it) once per copy, disjoint by construction; every other GPU once
    (e.g. the prefill side of a KV hand-off drawn under a decode replica)."""
    g = working.graph
    nodes = g._node
    total = 0
    rest: set[int] = set()
    counted: set[int] = set()
    folded: set[str] = set()
    for f in working.replicas:
        if f.node not in g:
            continue
        under = members[f.node] if members is not None else replica_members(g, f.node)
        folded.update(under)
        devs: set[int] = set()
        for n in under:
            if nodes[n].get("type") not in CONTROL_TYPES:
                devs.update(nodes[n].get("devices") or ())
        own = set(nodes[f.node].get("devices") or ()) or devs
        total += len(devs & own) * f.count
        counted |= devs & own
        rest |= devs - own
    for n, a in nodes.items():
        if n not in folded and a.get("type") not in CONTROL_TYPES:
            rest.update(a.get("devices") or ())
    return total + len(rest - counted)


def full_counts(w: WorkingDag) -> tuple[Counter[str], Counter[str], list[tuple[int, str, int]], int, int]:
    """What ``Expansion.counts`` gives (node and edge counts by type, (replica, pool, GPUs) per replica, totals),
    computed from the working form alone: each node times its repeat and its replica copies."""
    g = w.graph
    fold_of = {n: f for f in w.layers for n in f.nodes}
    copies: dict[str, int] = {}
    for f in w.replicas:
        if f.node in g:
            for n in replica_members(g, f.node):
                copies[n] = f.count
    nodes: Counter[str] = Counter()
    edges: Counter[str] = Counter()
    reps: list[tuple[int, str, int]] = []
    for n, a in g.nodes(data=True):
        f = fold_of.get(n)
        nodes[str(a.get("type"))] += (f.repeat if f else 1) * copies.get(n, 1)
        if a.get("type") == NodeType.REPLICA:
            pool = (a.get("meta") or {}).get("pool", "prefill+decode")
            reps.extend((a.get("replica", 0) + k, pool, len(a.get("devices", ()))) for k in range(copies.get(n, 1)))
    for u, v, a in g.edges(data=True):
        fu, fv = fold_of.get(u), fold_of.get(v)
        paired = fu is not None and fv is not None and (fu.first_layer, fu.repeat) == (fv.first_layer, fv.repeat)
        edges[str(a.get("type", "data"))] += (fu.repeat if paired and fu else 1) * copies.get(v, 1)
    for f in w.layers:
        for _, entry in f.carry:
            edges["data"] += (f.repeat - 1) * copies.get(entry, 1)
    return nodes, edges, reps, sum(nodes.values()), sum(edges.values())


@dataclass
class _Copies:
    """One replica fold, ready to copy: the drawn replica's nodes, the edges into them, the GPUs it owns."""

    fold: ReplicaFold
    members: list[str]
    mset: set[str]
    edges: list[tuple[str, str, str]]
    own: set[int]


class Expansion:
    """The full DAG as index arithmetic over the layer-expanded base and its replica copies (never all in memory:
    a page materializes only its own slice).

    Copy k of a folded replica shifts the GPUs the replica owns by ``k * stride`` and renames its nodes (and
    ``op`` names); a GPU or a node of another folded replica it talks to (a decode replica's KV hand-off from a
    prefill replica) becomes that replica's copy ``k % count``, the way pdag pairs decode with prefill replicas.
    Edges leaving a replica stay with the drawn copy."""

    def __init__(self, w: WorkingDag) -> None:
        nodes, edges = _expand_layers(w)
        self.base_nodes = list(nodes.items())
        self.base_edges = edges
        self.attrs = nodes
        self.copies: list[_Copies] = []
        if w.replicas:
            lg = nx.DiGraph()
            lg.add_nodes_from(nodes.items())
            lg.add_edges_from((u, v, {"type": t}) for u, v, t in edges)
            for f in w.replicas:
                if f.node not in lg:
                    continue
                members = replica_members(lg, f.node)
                mset = set(members)
                devs = {d for n in members if nodes[n].get("type") not in CONTROL_TYPES for d in nodes[n]["devices"]}
                own = set(nodes[f.node].get("devices") or ()) or devs
                self.copies.append(_Copies(f, members, mset, [e for e in edges if e[1] in mset], own))
        self.owner = {n: c for c in self.copies for n in c.members}
        live = [c for c in self.copies if c.fold.count > 1]
        self.live = live
        self.node_count = len(self.base_nodes) + sum((c.fold.count - 1) * len(c.members) for c in live)
        self.edge_count = len(self.base_edges) + sum((c.fold.count - 1) * len(c.edges) for c in live)

    def _device(self, c: _Copies, d: int, k: int) -> int:
        if d in c.own:
            return d + k * c.fold.stride
        for o in self.copies:
            if o is not c and d in o.own:
                return d + (k % o.fold.count) * o.fold.stride
        return d

    def _name(self, c: _Copies, n: str, k: int) -> str:
        o = self.owner.get(n)
        if o is None:
            return n
        return _replica_id(n, o.fold.node, k if o is c else k % o.fold.count)

    def counts(self) -> tuple[Counter[str], Counter[str], list[tuple[int, str, int]], int, int]:
        """Node and edge counts by type, (replica, pool, GPUs) per replica, totals: without listing the copies."""
        nodes: Counter[str] = Counter()
        edges: Counter[str] = Counter()
        reps: list[tuple[int, str, int]] = []
        for _, a in self.base_nodes:
            nodes[str(a.get("type"))] += 1
            if a.get("type") == NodeType.REPLICA:
                reps.append((a.get("replica", 0), (a.get("meta") or {}).get("pool", "prefill+decode"),
                             len(a.get("devices", ()))))
        for _, _, t in self.base_edges:
            edges[t] += 1
        for c in self.live:
            for n in c.members:
                a = self.attrs[n]
                nodes[str(a.get("type"))] += c.fold.count - 1
                if n == c.fold.node:
                    pool = (a.get("meta") or {}).get("pool", "prefill+decode")
                    reps.extend((a.get("replica", 0) + k, pool, len(a.get("devices", ())))
                                for k in range(1, c.fold.count))
            for _, _, t in c.edges:
                edges[t] += c.fold.count - 1
        return nodes, edges, reps, self.node_count, self.edge_count

    def _copies(self, offset: int, base_len: int,
                items_of: Callable[[Any], list[Any]]) -> Iterator[tuple[Any, int, Any]]:
        """(fold, copy index, item) of every folded copy from overall position ``offset`` on, the unfolded base
        holding the first ``base_len`` positions."""
        offset = max(0, offset - base_len)
        for c in self.live:
            items = items_of(c)
            block = (c.fold.count - 1) * len(items)
            if offset >= block:
                offset -= block
                continue
            k0, i0 = divmod(offset, len(items))
            offset = 0
            for k in range(k0 + 1, c.fold.count):
                for it in items[i0:]:
                    yield c, k, it
                i0 = 0

    def nodes(self, offset: int) -> Iterator[dict[str, Any]]:
        for n, a in self.base_nodes[offset:]:
            yield {"id": n, **a}
        for c, k, n in self._copies(offset, len(self.base_nodes), lambda c: c.members):
            a = dict(self.attrs[n])
            a["devices"] = sorted(self._device(c, d, k) for d in a.get("devices", ()))
            if a.get("replica") is not None:
                a["replica"] = a["replica"] + k
            if isinstance(a.get("op"), str):
                a["op"] = _replica_id(a["op"], c.fold.node, k)
            yield {"id": self._name(c, n, k), **a}

    def edges(self, offset: int) -> Iterator[dict[str, Any]]:
        for u, v, t in self.base_edges[offset:]:
            yield {"source": u, "target": v, "type": t}
        for c, k, (u, v, t) in self._copies(offset, len(self.base_edges), lambda c: c.edges):
            yield {"source": self._name(c, u, k), "target": self._name(c, v, k), "type": t}


class Page(BaseModel):
    """One page of an expanded DAG: a slice of its nodes or of its edges, and where the next page starts."""

    part: str = Field(description="'nodes' or 'edges': what this page lists")
    items: list[dict[str, Any]]
    cursor: str | None = Field(description="pass it back to get the next page; null on the last page")
    total_nodes: int
    total_edges: int
    header: dict[str, Any] | None = Field(None, description="format, version, model, plan (first page only)")


def _parse_cursor(cursor: Any) -> tuple[str, int]:
    if cursor is None or cursor == "":
        return "nodes", 0
    if isinstance(cursor, str) and len(cursor) <= 40:
        part, _, offset = cursor.partition(":")
        if part in ("nodes", "edges") and offset.isdigit() and len(offset) <= 15:
            return part, int(offset)
    shown = cursor[:40] if isinstance(cursor, str) else type(cursor).__name__
    raise PdagInputError("cursor", f"not a cursor this tool returned: {shown!r}",
                         "the 'cursor' of the previous page (e.g. 'nodes:0'), or none for the first page")


def expand(working: WorkingDag, cursor: str | None = None, page_chars: int = PAGE_CHARS) -> Page:
    """One page (at most ``page_chars`` characters of JSON items, and at least one item) of the full DAG."""
    part, offset = _parse_cursor(cursor)
    ex = Expansion(working)
    total = ex.node_count if part == "nodes" else ex.edge_count
    if offset > total:
        raise PdagInputError("cursor", f"offset {offset} is past the end ({total} {part})",
                             "the 'cursor' of the previous page")
    items: list[dict[str, Any]] = []
    size = 0
    for it in ex.nodes(offset) if part == "nodes" else ex.edges(offset):
        n = len(json.dumps(it, separators=(",", ":"))) + 1
        if items and size + n > page_chars:
            break
        items.append(it)
        size += n
    end = offset + len(items)
    last = "edges:0" if part == "nodes" and ex.edge_count else None
    nxt = f"{part}:{end}" if end < total else last
    g = working.graph
    header = ({"format": DAG_FORMAT, "version": DAG_VERSION, "model": g.graph.get("model"),
               "plan": g.graph.get("plan")} if part == "nodes" and offset == 0 else None)
    return Page(part=part, items=items, cursor=nxt, total_nodes=ex.node_count, total_edges=ex.edge_count,
                header=header)


def expand_document(working: WorkingDag) -> dict[str, Any]:
    """The whole expanded document at once (for tests and small DAGs)."""
    ex = Expansion(working)
    g = working.graph
    return {"format": DAG_FORMAT, "version": DAG_VERSION, "model": g.graph.get("model"), "plan": g.graph.get("plan"),
            "nodes": list(ex.nodes(0)), "edges": list(ex.edges(0))}




# ----------------------------------------------------------------------------------------------- submitted DAGs
def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_FOLD_COUNT


def read_folds(raw: Any, graph: nx.DiGraph) -> tuple[list[ReplicaFold], list[LayerFold], list[tuple[str, str]]]:
    """The usable folds of a submitted document's ``folds`` object, and (JSON path, problem) for the rest.

    Schema violations are reported by the schema check; this keeps what is usable and says why the rest
    was left out (a fold naming a node the DAG does not have, a node in two layer folds)."""
    problems: list[tuple[str, str]] = []
    reps: list[ReplicaFold] = []
    lays: list[LayerFold] = []
    if not isinstance(raw, dict):
        return reps, lays, [("dag.folds", "expected an object with 'replicas' and 'layers' lists")]
    seen_rep: set[str] = set()
    for i, f in enumerate(raw.get("replicas") or [] if isinstance(raw.get("replicas"), list) else []):
        path = f"dag.folds.replicas[{i}]"
        if not isinstance(f, dict) or not isinstance(f.get("node"), str) or not _is_count(f.get("count")) \
                or not _is_count(f.get("stride")):
            problems.append((path, "needs node (a ReplicaNode id), count >= 1 and stride >= 1"))
        elif f["node"] not in graph or graph.nodes[f["node"]].get("type") != NodeType.REPLICA:
            problems.append((path, f"node {f['node'][:80]!r} is not a ReplicaNode of this DAG"))
        elif f["node"] in seen_rep:
            problems.append((path, f"replica {f['node'][:80]!r} is folded twice"))
        else:
            seen_rep.add(f["node"])
            reps.append(ReplicaFold(f["node"], f["count"], f["stride"]))
    in_fold: set[str] = set()
    for i, f in enumerate(raw.get("layers") or [] if isinstance(raw.get("layers"), list) else []):
        path = f"dag.folds.layers[{i}]"
        ok = isinstance(f, dict) and isinstance(f.get("nodes"), list) and f["nodes"] \
            and all(isinstance(n, str) for n in f["nodes"]) and _is_count(f.get("repeat")) \
            and isinstance(f.get("first_layer"), int) and not isinstance(f.get("first_layer"), bool) \
            and 0 <= f["first_layer"] <= MAX_FOLD_COUNT
        if not ok:
            problems.append((path, "needs nodes (node ids), first_layer >= 0 and repeat >= 1"))
            continue
        nodes = list(dict.fromkeys(f["nodes"]))
        missing = [n for n in nodes if n not in graph]
        twice = [n for n in nodes if n in in_fold]
        if missing or twice:
            what = f"names node(s) the DAG does not have: {missing[:3]}" if missing else \
                f"puts node(s) already in another layer fold: {twice[:3]}"
            problems.append((path, what))
            continue
        carry = []
        for pair in f.get("carry") or []:
            if isinstance(pair, list | tuple) and len(pair) == 2 and all(p in nodes for p in pair):
                carry.append((pair[0], pair[1]))
            else:
                problems.append((f"{path}.carry", "each entry is [exit, entry], both nodes of this fold"))
                break
        in_fold.update(nodes)
        lays.append(LayerFold(tuple(nodes), f["first_layer"], f["repeat"], tuple(carry)))
    return reps, lays, problems


def apply_layer_folds(graph: nx.DiGraph, layers: list[LayerFold]) -> None:
    """Every node of a layer fold carries its ``repeat`` (and nothing else does): what checkers and the
    estimator read."""
    for a in graph._node.values():
        a.pop("repeat", None)
    for f in layers:
        if f.repeat > 1:
            for n in f.nodes:
                graph._node[n]["repeat"] = f.repeat


_REPLICA_ID = re.compile(r"([A-Za-z]+)(\d+)")


def fold_drawn_replicas(graph: nx.DiGraph) -> list[ReplicaFold]:
    """Fold the replicas of a fully drawn DAG that really are copies, removing the copies from ``graph``.

    Per pool (replica ids sharing a letter prefix: r0, r1, ... or p0.. / d0..), replicas k = 1, 2, ... are folded
    into the first while each has the same nodes (ids renamed r0 -> rk), the same attributes, the same edges and
    its GPUs shifted by one constant stride at least the replica's span; the first replica that differs, and
    every one after it, stays drawn and is judged on its own."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for n, a in graph.nodes(data=True):
        m = _REPLICA_ID.fullmatch(n) if a.get("type") == NodeType.REPLICA else None
        if m:
            groups.setdefault(m.group(1), []).append((int(m.group(2)), n))
    folds: list[ReplicaFold] = []
    for items in groups.values():
        items.sort()
        base_index, base = items[0]
        members = replica_members(graph, base)
        mset = set(members)
        own = set(graph.nodes[base].get("devices") or ())
        # a replica wired to anything but the root (a disaggregated decode replica's KV from prefill) stays drawn
        wired = any(v not in mset for n in members for v in graph._succ[n]) or \
            any(u not in mset for n in members if n != base for u in graph._pred[n])
        if len(items) < 2 or not own or wired:
            continue
        span = max(own) - min(own) + 1
        stride = 0
        copies: list[list[str]] = []
        for idx, r in items[1:]:
            k = idx - base_index
            if k != len(copies) + 1:
                break
            if k == 1:
                rdev = graph.nodes[r].get("devices") or []
                stride = (min(rdev) - min(own)) if rdev else 0
                if stride < span:
                    break
            names = _same_copy(graph, base, members, mset, own, k, stride)
            if names is None:
                break
            copies.append(names)
        if copies:
            for names in copies:
                graph.remove_nodes_from(names)
            folds.append(ReplicaFold(base, len(copies) + 1, stride))
    return folds


def _same_copy(g: nx.DiGraph, base: str, members: list[str], mset: set[str], own: set[int], k: int,
               stride: int) -> list[str] | None:
    """The node ids of copy k of replica ``base`` when it is an exact shifted copy, else None."""
    names = [_replica_id(n, base, k) for n in members]
    nodes = g._node
    if any(m not in nodes for m in names) or len(replica_members(g, names[0])) != len(names):
        return None
    shift = k * stride
    rename = dict(zip(members, names, strict=True))
    names_set = set(names)
    for n, m in zip(members, names, strict=True):
        a, b = nodes[n], nodes[m]
        if a.keys() != b.keys():
            return None
        for key, v in a.items():
            w = b[key]
            if key == "devices":
                if w != sorted(d + shift if d in own else d for d in v):
                    return None
            elif key == "replica":
                if not isinstance(w, int) or w != v + k:
                    return None
            elif key == "op" and isinstance(v, str):
                if w not in (v, _replica_id(v, base, k)):
                    return None
            elif w != v:
                return None
        pa, pb = g._pred[n], g._pred[m]
        if len(pa) != len(pb) or len(g._succ[n]) != len(g._succ[m]) or any(v not in names_set for v in g._succ[m]):
            return None
        for p, e in pa.items():
            q = rename.get(p, p)
            if q not in pb or pb[q].get("type") != e.get("type"):
                return None
    return names


def folds_from_repeat(graph: nx.DiGraph) -> dict[str, Any] | None:
    """The ``folds`` object a document means when its nodes carry ``repeat`` (layers a node stands for) but it
    states no ``folds``: one layer fold per drawn layer (same replica, phase, stage, layer and repeat), carried
    from the layer's one exit to its entries.  None when no node repeats, or a group has no single exit."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for n, a in graph.nodes(data=True):
        r = a.get("repeat")
        if isinstance(r, int) and not isinstance(r, bool) and r > 1:
            if not isinstance(a.get("layer"), int):
                return None
            groups.setdefault((a.get("replica"), a.get("phase"), a.get("stage"), a["layer"], r), []).append(n)
    if not groups:
        return None
    layers = []
    flow = [(u, v) for u, v, t in graph.edges(data="type") if t not in ("kv", "sync")]
    for (_r, _ph, _s, layer, repeat), nodes in sorted(groups.items(), key=str):
        members = set(nodes)
        entries = sorted({v for u, v in flow if v in members and u not in members})
        exits = sorted({u for u, v in flow if u in members and v not in members})
        if len(exits) != 1 or not entries:
            return None
        layers.append({"nodes": nodes, "first_layer": layer, "repeat": repeat,
                       "carry": [[exits[0], e] for e in entries]})
    return {"replicas": [], "layers": layers}


_PER_RANK = (NodeType.ALL_REDUCE, NodeType.ALL_GATHER, NodeType.REDUCE_SCATTER, NodeType.ALL_TO_ALL)


def merge_rank_collectives(graph: nx.DiGraph) -> list[tuple[str, list[int], str]]:
    """Merge one collective drawn as one node per rank (each on its own GPU, each fed by the same shards) into
    the single collective it stands for, in place; (kept node, its GPUs, why) for each merge."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for n, a in graph.nodes(data=True):
        if a.get("type") in _PER_RANK and len(a.get("devices") or ()) == 1:
            preds = frozenset(p for p in graph.predecessors(n) if graph.edges[p, n].get("type", "data") == "data")
            if len(preds) > 1:
                groups.setdefault((a["type"], preds, a.get("phase"), a.get("layer")), []).append(n)
    merged = []
    for (typ, preds, _ph, _layer), nodes in sorted(groups.items(), key=str):
        devs = [graph.nodes[n]["devices"][0] for n in nodes]
        covered = {d for p in preds for d in graph.nodes[p].get("devices") or ()}
        if len(nodes) < 2 or len(set(devs)) != len(devs) or not covered <= set(devs):
            continue
        keep, rest = sorted(nodes)[0], sorted(nodes)[1:]
        for n in rest:
            for s in list(graph.successors(n)):
                if not graph.has_edge(keep, s):
                    graph.add_edge(keep, s, **graph.edges[n, s])
            graph.remove_node(n)
        graph.nodes[keep]["devices"] = sorted(devs)
        merged.append((keep, sorted(devs), f"one {typ} drawn per rank ({', '.join(sorted(nodes)[:4])}) is one "
                                           "collective over their GPUs"))
    return merged


def kv_hand_offs(graph: nx.DiGraph) -> list[tuple[str, str, str]]:
    """A SendRecvNode that carries only KV cache (from KV cache nodes, to KV cache or attention nodes) is the
    prefill-to-decode KV hand-off: read it as the KVTransferNode it stands for, in place."""
    out = []
    for n, a in graph.nodes(data=True):
        if a.get("type") != NodeType.SEND_RECV:
            continue
        ins = [graph.nodes[p].get("type") for p in graph.predecessors(n)]
        outs = [graph.nodes[s].get("type") for s in graph.successors(n)]
        if ins and outs and all(t == NodeType.KV_CACHE for t in ins) and \
                all(t in (NodeType.KV_CACHE, NodeType.ATTENTION) for t in outs):
            a["type"] = str(NodeType.KV_TRANSFER)
            out.append((n, str(NodeType.KV_TRANSFER), "a SendRecvNode carrying only KV cache is the KV hand-off"))
    return out
