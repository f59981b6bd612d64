"""Normalization of a submitted DAG: canonical order and the optional attributes inferred from structure.

A hand-drafted DAG is judged by its meaning, not by how it was spelled.  Before any checker runs, the loaded
graph is rebuilt in a canonical order (a structural key: depth, type, devices, own attributes; ids only break
ties between structurally identical nodes) and every optional attribute the drafter left out is filled in from
the structure around it:

- ``replica`` / ``phase`` / ``stage``: from the ReplicaNode / PhaseNode / PipelineStageNode the node hangs under
  (reached by data edges, never through another container of that kind; a PhaseNode with no ``phase`` is the
  decode branch when it holds a DecodeStepNode);
- ``layer``: from the layer fold it belongs to, else by counting layers along the stage's data chain (a layer
  ends where its FFN / experts have been rejoined), anchored on the stage's ``layers`` range or on the nodes
  that carry a layer; a KV cache node takes the layer of the attention shard it is wired to;
- ``op`` / ``tp_rank`` / ``ep_rank``: shards of one type in one layer that rejoin at the same collective are
  one operator, ranked by GPU;
- ``role``: from the node type and its neighbours (KV write / read, TP / SP sync, MoE dispatch / combine,
  stage transfer, which norm, shared expert, a KV reshard inside one replica versus a hand-off between pools).

Explicit attributes always win.  Each filled-in value is recorded as an ``Inference`` so that a report can say
what was assumed.  The order and the inferences depend only on the structure, so the verdict is invariant under
node / edge order, id renaming and dropping any of these attributes.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import networkx as nx

from tools.core.dag import COMM_TYPES, CONTROL_TYPES, NodeType
from tools.core.working import LayerFold

T = NodeType
_LAYERLESS = (CONTROL_TYPES - {T.MOE, T.ATTN_DP_GROUP}) | {T.SEND_RECV, T.KV_TRANSFER, T.LM_HEAD, T.EMBEDDING}
_MIXERS = {T.FFN, T.EXPERT}
_SHARDED = (T.ATTENTION, T.FFN, T.LINEAR)
_ROLE_TYPES = {T.KV_CACHE, T.ALL_TO_ALL, T.ALL_REDUCE, T.ALL_GATHER, T.SEND_RECV, T.NORM, T.FFN, T.KV_TRANSFER}
_REJOIN = {T.ALL_REDUCE, T.ALL_GATHER, T.REDUCE_SCATTER, T.ALL_TO_ALL}


@dataclass(frozen=True)
class Inference:
    """An attribute normalization filled in: which node, which field, the value, and why."""

    node: str
    field: str
    value: Any
    why: str

    def text(self) -> str:
        return f"{self.node}.{self.field} = {self.value!r} ({self.why})"


def normalize(g: nx.DiGraph, layer_folds: Iterable[LayerFold] = ()) -> tuple[nx.DiGraph, list[Inference]]:
    """``g`` made canonical (reordered in place) with the optional attributes filled in, and what was inferred."""
    out, depth = _canonical(g)
    out.graph["topological"] = depth is not None  # its node order is then a topological order
    n = _Normalizer(out, list(layer_folds), depth)
    n.run()
    return out, n.inferences


# ----------------------------------------------------------------------------------------------- canonical order
_KEY_FIELDS = ("phase", "replica", "stage", "layer", "tp_rank", "sp_rank", "ep_rank", "attn_group", "role", "op")


def _own_key(a: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(a.get(k)) for k in _KEY_FIELDS)


def _canonical(g: nx.DiGraph) -> tuple[nx.DiGraph, dict[str, int] | None]:
    """``g`` with its nodes and edges put (in place) in a structural order that ignores JSON order and id
    spelling, and each node's depth (None when the graph has a cycle).  On an acyclic graph the order is
    topological."""
    depth: dict[str, int] = {}
    try:
        for i, gen in enumerate(nx.topological_generations(g)):
            for n in gen:
                depth[n] = i
    except nx.NetworkXUnfeasible:
        depth = {}
    nodes = g._node

    def key(n: str) -> tuple[Any, ...]:
        a = nodes[n]
        return depth.get(n, 0), str(a.get("type")), tuple(a.get("devices") or ())

    keys = {n: key(n) for n in g}
    seen = Counter(keys.values())
    order = sorted(g, key=lambda n: (keys[n], _own_key(nodes[n]) if seen[keys[n]] > 1 else (), n))
    pos = {n: i for i, n in enumerate(order)}
    out = g
    # reorder networkx's adjacency dicts in place (node order, then each neighbour dict by position): the same
    # graph, its iteration order canonical, without copying 30,000 attribute dicts
    by_pos = pos.__getitem__
    succ = {n: dict(sorted(out._succ[n].items(), key=lambda kv: by_pos(kv[0]))) for n in order}
    pred = {n: dict(sorted(out._pred[n].items(), key=lambda kv: by_pos(kv[0]))) for n in order}
    out._node = {n: nodes[n] for n in order}
    out._adj = out._succ = succ
    out._pred = pred
    for view in ("nodes", "adj", "succ", "pred", "edges", "out_edges", "in_edges", "degree", "in_degree",
                 "out_degree"):
        out.__dict__.pop(view, None)  # cached views hold the old dicts
    return out, (depth if len(depth) == len(order) else None)


# ----------------------------------------------------------------------------------------------- inference
class _Normalizer:
    def __init__(self, g: nx.DiGraph, folds: list[LayerFold], depth: dict[str, int] | None) -> None:
        self.g = g
        self.depth = depth or {}
        self.acyclic = depth is not None  # then the canonical order is a topological order
        self.a = g._node
        self.folds = folds
        self.inferences: list[Inference] = []
        self.replica_of: dict[str, str] = {}  # node -> the ReplicaNode it hangs under
        self.pos = {n: i for i, n in enumerate(g)}
        self.fold_of = {n: f for f in folds for n in f.nodes}

    def t(self, n: str) -> str:
        return str(self.a[n].get("type"))

    def set(self, n: str, name: str, value: Any, why: str) -> None:
        if value is None or self.a[n].get(name) is not None:
            return
        self.a[n][name] = value
        self.inferences.append(Inference(n, name, value, why))

    def run(self) -> None:
        self.containers()
        self.layers()
        self.operators()
        self.roles()

    # ------------------------------------------------------------------ containment
    def _owners(self) -> dict[NodeType, dict[str, str]]:
        """node -> the ReplicaNode / PhaseNode / PipelineStageNode it hangs under: one pass in topological order,
        a node taking its first predecessor's container (a container is its own).  Sync and kv edges join
        phases and pools, pipeline edges join stages: they carry no containment."""
        kinds = (T.REPLICA, T.PHASE, T.STAGE)
        out: dict[NodeType, dict[str, str]] = {k: {} for k in kinds}
        rep, ph, st = out[T.REPLICA], out[T.PHASE], out[T.STAGE]
        pred = self.g._pred
        for n in self.g:
            t = self.a[n].get("type")
            r = n if t == T.REPLICA else None
            p = n if t == T.PHASE else None
            s = n if t == T.STAGE else None
            for u, e in pred[n].items():
                et = e.get("type", "data")
                if et in ("sync", "kv"):
                    continue
                r = r or rep.get(u)
                p = p or ph.get(u)
                if et != "pipeline":
                    s = s or st.get(u)
            for d, v in ((rep, r), (ph, p), (st, s)):
                if v is not None:
                    d[n] = v
        return out

    def containers(self) -> None:
        owners = self._owners()
        reps = [n for n in self.g if self.a[n].get("type") == T.REPLICA]
        under_rep = {n: r for n, r in owners[T.REPLICA].items() if n != r}
        for i, r in enumerate(sorted(reps, key=lambda r: (min(self.a[r].get("devices") or [1 << 30]),
                                                          self.pos[r]))):
            self.set(r, "replica", i, "ReplicaNodes numbered by their first GPU")
            self.replica_of[r] = r
        for n, r in under_rep.items():
            self.replica_of[n] = r
            self.set(n, "replica", self.a[r].get("replica"), f"hangs under ReplicaNode {r}")
        under_phase = {n: p for n, p in owners[T.PHASE].items() if n != p}
        members: dict[str, list[str]] = defaultdict(list)
        for n, p in under_phase.items():
            members[p].append(n)
        for p in (n for n in self.g if self.a[n].get("type") == T.PHASE):
            if any(self.a[m].get("type") == T.DECODE_STEP for m in members[p]):
                self.set(p, "phase", "decode", "its branch holds a DecodeStepNode")
            else:
                low = p.lower()
                hint = "decode" if "decode" in low else "prefill" if "prefill" in low else None
                if hint is None and any(self.g._succ[m][s].get("type") in ("sync", "kv")
                                        for m in members[p] for s in self.g._succ[m]):
                    hint = "prefill"
                self.set(p, "phase", hint, "its branch has no DecodeStepNode and feeds decode (KV or sync)"
                         if hint == "prefill" else "named after its phase")
        for n, p in under_phase.items():
            self.set(n, "phase", self.a[p].get("phase"), f"hangs under PhaseNode {p}")
        under_stage = {n: x for n, x in owners[T.STAGE].items() if n != x}
        chains: dict[tuple[Any, Any], list[str]] = defaultdict(list)
        for s in (n for n in self.g if self.a[n].get("type") == T.STAGE):
            chains[(self.replica_of.get(s), self.a[s].get("phase"))].append(s)
        for stages in chains.values():
            for i, s in enumerate(sorted(stages, key=lambda s: self.depth.get(s, 0))):
                self.set(s, "stage", i, "position in its branch's pipeline chain")
        for n, s in under_stage.items():
            self.set(n, "stage", self.a[s].get("stage"), f"hangs under PipelineStageNode {s}")
        for n, a in self.a.items():  # a stage transfer belongs to the stage that sends
            if a.get("type") == T.SEND_RECV:
                sent = {self.a[p].get("stage") for p in self.g._pred[n] if self.t(p) not in CONTROL_TYPES}
                if len(sent) == 1:
                    self.set(n, "stage", sent.pop(), "SendRecv fed by that stage")
        for n, a in self.a.items():  # a KV cache read in decode hangs off its attention by a kv edge only
            if a.get("type") != T.KV_CACHE:
                continue
            near = [m for m in (*self.g._pred[n], *self.g._succ[n]) if self.t(m) == T.ATTENTION]
            if len(near) == 1:
                m = near[0]
                if n not in self.replica_of and m in self.replica_of:
                    self.replica_of[n] = self.replica_of[m]
                for f in ("replica", "phase", "stage"):
                    self.set(n, f, self.a[m].get(f), f"KV cache of attention {m}")

    # ------------------------------------------------------------------ layers
    def layers(self) -> None:
        for f in self.folds:
            for n in f.nodes:
                if n in self.g and self.t(n) not in _LAYERLESS:
                    self.set(n, "layer", f.first_layer, "drawn layer of a layer fold")
        if not self.acyclic:
            return
        groups: dict[tuple[Any, Any], dict[Any, list[str]]] = defaultdict(lambda: defaultdict(list))
        for n, a in self.a.items():
            if a.get("type") not in (T.REQUEST, T.REPLICA, T.PHASE, T.DECODE_STEP):
                groups[(self.replica_of.get(n), a.get("phase"))][a.get("stage")].append(n)
        stage_nodes = {(self.replica_of.get(s), self.a[s].get("phase"), self.a[s].get("stage")): s
                       for s in self.g if self.a[s].get("type") == T.STAGE}
        for (rep, ph), by_stage in groups.items():
            nxt = 0
            for st in sorted(by_stage, key=lambda s: (s is None, s if s is not None else 0)):
                nxt = self._stage_layers(by_stage[st], stage_nodes.get((rep, ph, st)), nxt)
        for n, a in self.a.items():  # a KV cache belongs to the layer of the attention it is wired to
            if a.get("type") == T.KV_CACHE and a.get("layer") is None:
                near = [m for m in (*self.g._pred[n], *self.g._succ[n]) if self.t(m) == T.ATTENTION
                        and self.a[m].get("layer") is not None]
                if near:
                    self.set(n, "layer", min(self.a[m]["layer"] for m in near), f"KV of attention {near[0]}")
        for n, a in self.a.items():  # a KV hand-off belongs to the layer (and replica) of the cache it fills
            if a.get("type") == T.KV_TRANSFER:
                dest = [m for m in self.g._succ[n] if self.t(m) == T.KV_CACHE]
                src = [m for m in self.g._pred[n] if self.t(m) == T.KV_CACHE]
                for f in ("layer", "replica"):
                    vals = {self.a[m].get(f) for m in dest}
                    if len(vals) == 1:
                        self.set(n, f, vals.pop(), f"hand-off into the KV cache {dest[0]}")
                reps = {self.replica_of.get(m) for m in dest + src}
                stages = {self.a[m].get("stage") for m in dest}
                if len(reps) == 1 and None not in reps and len(stages) == 1:
                    self.set(n, "stage", stages.pop(), "KV re-shard inside one stage")

    def _stage_layers(self, members: list[str], stage: str | None, start: int) -> int:
        """Fill ``layer`` inside one stage by counting layers along its data chain; returns the next layer."""
        count: dict[str, int] = {}
        exits: set[str] = set()
        for n in members:  # in canonical order, which is topological
            t = self.t(n)
            if t == T.KV_CACHE:
                continue
            ins = [p for p, e in self.g._pred[n].items() if p in count and e.get("type", "data") == "data"]
            c = 0
            for p in ins:
                c = max(c, count[p] + (self._repeat(p) if p in exits and t not in COMM_TYPES else 0))
            count[n] = c
            if t in _MIXERS or (t in COMM_TYPES and any(p in exits for p in ins)):
                exits.add(n)
        span = max((count[e] + self._repeat(e) for e in exits), default=0)
        if span == 0 and any(self.t(n) == T.ATTENTION for n in count):
            span = 1
        offsets = Counter(self.a[n]["layer"] - c for n, c in count.items()
                          if self.a[n].get("layer") is not None and self.t(n) not in _LAYERLESS)
        own = self.a[stage].get("layers") if stage is not None else None
        if own and len(own) == 2:
            base, why = own[0], f"counted along stage {stage} from its first layer {own[0]}"
        elif offsets:
            base, why = min(offsets.most_common(), key=lambda kv: (-kv[1], kv[0]))[0], \
                "counted along the stage's data chain from the layers its other nodes carry"
        else:
            base, why = start, "counted along the branch's data chain"
        for n, c in count.items():
            if self.t(n) not in _LAYERLESS and c < span:
                self.set(n, "layer", base + c, why)
        if stage is not None and span:
            self.set(stage, "layers", [base, base + span], "the layers counted inside the stage")
        return base + span

    def _repeat(self, n: str) -> int:
        f = self.fold_of.get(n)
        if f is not None:
            return f.repeat
        r = self.a[n].get("repeat")
        return r if isinstance(r, int) and r > 1 else 1

    # ------------------------------------------------------------------ operators
    def _rejoin(self, n: str) -> frozenset[str]:
        """The first collectives a shard's data reaches (through compute nodes of its own layer). A stage
        hand-off counts too, and so does the first compute node past the layer (the next layer, the LM head):
        shards that meet only there are still one operator, whose reduction is missing (TP-REJOIN-BEFORE-NEXT-LAYER
        names it), not groups serving requests of their own."""
        layer = self.a[n].get("layer")
        seen, todo, out = {n}, [n], set()
        while todo:
            x = todo.pop()
            for y, e in self.g._succ[x].items():
                if y in seen or e.get("type", "data") not in ("data", "pipeline"):
                    continue
                seen.add(y)
                if self.t(y) in _REJOIN or self.t(y) == T.SEND_RECV:
                    out.add(y)
                elif self.t(y) not in CONTROL_TYPES and self.a[y].get("layer") == layer:
                    todo.append(y)
                elif self.t(y) not in CONTROL_TYPES and self.t(y) != T.KV_CACHE:
                    out.add(y)
        return frozenset(out)

    def operators(self) -> None:
        groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
        for n, a in self.a.items():
            if a.get("type") in _SHARDED and a.get("op") is None:
                feeds = frozenset(self.t(p) for p in self.g._pred[n])  # QKV and output projections differ here
                # attention-DP groups are separate operators whatever collective their data reaches next
                key = (self.replica_of.get(n), a.get("phase"), a.get("layer"), a.get("attn_group"), a.get("type"),
                       feeds, self._rejoin(n))
                groups[key].append(n)
        for key in [k for k in groups if not k[-1]]:  # a shard that reaches no collective (a dead end) belongs
            siblings = [k for k in groups if k[:-1] == key[:-1] and k[-1]]  # to its one sibling operator
            if len(siblings) == 1:
                groups[siblings[0]].extend(groups.pop(key))
        named: dict[tuple[str, Any], int] = defaultdict(int)
        for (_r, _ph, _l, _g, typ, _feeds, rejoin), shards in groups.items():
            if len(shards) < 2 or not rejoin:
                continue
            anchor = min(rejoin, key=self.pos.__getitem__)
            base = self.a[anchor].get("op") or anchor
            if not any(self.t(r) in _REJOIN or self.t(r) == T.SEND_RECV for r in rejoin):
                # met only past the layer: named after the shards (their ids' common stem), not the node they meet at
                base = os.path.commonprefix(sorted(shards)).rstrip("._-/:#") or min(shards, key=self.pos.__getitem__)
            k = named[(base, typ)]
            named[(base, typ)] += 1
            op = base if k == 0 else f"{base}#{k}"  # e.g. the QKV and the output projection of one attention
            for s in shards:
                self.set(s, "op", op, f"one {typ} operator: shards rejoining at {anchor}")
        by_op: dict[tuple[Any, ...], list[str]] = defaultdict(list)
        for n, a in self.a.items():
            if a.get("type") in _SHARDED and a.get("op") is not None:
                by_op[(self.replica_of.get(n), a.get("phase"), a.get("layer"), a["op"], a["type"])].append(n)
        for shards in by_op.values():
            if len(shards) > 1 and all(self.a[s].get("tp_rank") is None for s in shards):
                by_sp: dict[Any, list[str]] = defaultdict(list)
                for s in shards:
                    by_sp[self.a[s].get("sp_rank")].append(s)
                for same in by_sp.values():
                    for i, s in enumerate(sorted(same, key=self._first_gpu)):
                        self.set(s, "tp_rank", i, "rank of its GPU among the operator's shards")
        experts: dict[tuple[Any, Any, Any], list[str]] = defaultdict(list)
        for n, a in self.a.items():
            if a.get("type") == T.EXPERT and a.get("tp_rank") is None:
                experts[(self.replica_of.get(n), a.get("phase"), a.get("layer"))].append(n)
        for nodes in experts.values():
            if len(nodes) > 1 and all(self.a[e].get("ep_rank") is None for e in nodes):
                for i, e in enumerate(sorted(nodes, key=self._first_gpu)):
                    self.set(e, "ep_rank", i, "rank of its GPU among the layer's Expert nodes")
        for n, a in self.a.items():
            if a.get("type") == T.KV_CACHE:
                near = [m for m in (*self.g._pred[n], *self.g._succ[n]) if self.t(m) == T.ATTENTION
                        and self.a[m].get("layer") == a.get("layer")]
                if len(near) == 1:
                    for f in ("op", "tp_rank", "sp_rank"):
                        self.set(n, f, self.a[near[0]].get(f), f"KV of attention shard {near[0]}")

    def _first_gpu(self, n: str) -> tuple[int, int]:
        devs = self.a[n].get("devices") or []
        return (min(devs) if devs else 1 << 30, self.pos[n])

    # ------------------------------------------------------------------ roles
    def roles(self) -> None:
        self.moe_layers = {(self.replica_of.get(m), a.get("phase"), a.get("layer")) for m, a in self.a.items()
                           if a.get("type") in (T.EXPERT, T.MOE) and a.get("layer") is not None}
        for n, a in self.a.items():
            t = a.get("type")
            if a.get("role") is not None or t not in _ROLE_TYPES:
                continue
            preds = {self.t(p) for p in self.g._pred[n]}
            succs = {self.t(s) for s in self.g._succ[n]}
            if t == T.KV_CACHE:
                role = {"prefill": "write", "decode": "read_append"}.get(a.get("phase") or "")
                self.set(n, "role", role, f"KV cache in the {a.get('phase')} branch")
            elif t == T.ALL_TO_ALL:
                role = "dispatch" if T.ROUTER in preds else "combine" if T.EXPERT in preds else None
                self.set(n, "role", role, "AllToAll fed by the router" if role == "dispatch" else
                         "AllToAll fed by the experts")
            elif t == T.ALL_REDUCE and preds & set(_SHARDED):
                self.set(n, "role", "tp_sync", "AllReduce joining TP shards")
            elif t == T.ALL_REDUCE and T.EMBEDDING in preds:
                self.set(n, "role", "vocab_sync", "AllReduce after a vocab-parallel embedding lookup")
            elif t == T.ALL_GATHER and any(self.a[p].get("sp_rank") is not None for p in self.g._pred[n]):
                self.set(n, "role", "sp_sync", "AllGather joining sequence shards")
            elif t == T.ALL_GATHER and T.LM_HEAD in preds:
                self.set(n, "role", "logits", "AllGather of a vocab-parallel LM head's logits")
            elif t == T.SEND_RECV:
                self.set(n, "role", "stage_transfer", "SendRecv between pipeline stages")
            elif t == T.NORM:
                role = ("final_norm" if T.LM_HEAD in succs else
                        "pre_attention" if succs & {T.ATTENTION, T.LINEAR} else
                        "pre_ffn" if succs & {T.FFN, T.MOE, T.ROUTER} else None)
                self.set(n, "role", role, "norm before " + ", ".join(sorted(succs)))
            elif t == T.FFN and (T.MOE in preds or self._in_moe_layer(n)):
                self.set(n, "role", "shared_expert", "FFN beside the experts of a MoE layer")
            elif t == T.KV_TRANSFER:
                ends = {self.replica_of.get(m) for m in (*self.g._pred[n], *self.g._succ[n])}
                same = len(ends) == 1 and None not in ends
                self.set(n, "role", "kv_reshard" if same else "kv_transfer",
                         "KV moves inside one replica (a re-shard)" if same else "KV moves between replicas")

    def _in_moe_layer(self, n: str) -> bool:
        return (self.replica_of.get(n), self.a[n].get("phase"), self.a[n].get("layer")) in self.moe_layers
