"""What one GPU of a sharded node runs: read from what the node declares, else from its operator's GPUs.

A TP operator may be drawn as one node per shard or as one node over all its GPUs (knowledge/08), so the work
of a node is not the work of one GPU.  Each GPU of a node runs one *part* of its operator:

- ``parts`` (how many parts the operator is split into): the node's ``meta.of`` where declared, else the GPUs its
  operator spans (the union of the devices of the nodes that share its ``op``; a node without ``op`` alone).  A
  node over several GPUs that each run the *same* part (the FFN copies of SP wider than TP) says so with
  ``meta.of``; without it, a node's GPUs hold different parts.
- attention: ``parts / seq_shards`` head shards; ``heads`` and ``kv_heads`` declared on a node are the node's, spread
  over its GPUs (one per head shard: ``devices / seq_shards``); undeclared, the model's heads over the head shards,
  KV heads replicated once there are more shards than KV heads (as the engines do).  A KV cache node takes its
  attention operator's shards.
- FFN: ``1 / parts`` of the intermediate size per GPU.
- Expert: the node's ``experts`` spread over its GPUs (``meta.of`` GPUs split each expert instead: expert TP);
  undeclared, the model's experts over the layer's expert GPUs.

``node_shares`` states both what a node declares (per GPU) and what the model and its operator's degree imply,
so the estimator prices the declared figures and ``STRUCT-SHARD-SIZES`` refuses those the model contradicts.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import networkx as nx

from tools.core.dag import NodeType
from tools.core.models import ModelSpec

T = NodeType
SHARDED = (T.ATTENTION, T.FFN, T.KV_CACHE, T.EXPERT)


@dataclass(frozen=True)
class Share:
    """One node's part of its operator, per GPU.  ``*_declared`` is what the node states (None: nothing),
    ``*_implied`` what the model and the operator's degree give; the priced figure is the declared one if any."""

    parts: int  # the operator's parts: meta.of where declared, else the GPUs it spans
    parts_allowed: tuple[int, ...]  # meta.of values the drawing supports (its GPUs, or its replicated nodes)
    of_declared: int | None
    heads_declared: float | None = None
    heads_implied: float | None = None
    kv_declared: float | None = None
    kv_implied: float | None = None
    experts_declared: float | None = None
    experts_implied: tuple[int, int] | None = None  # fewest, most experts one GPU holds (uneven splits differ)

    @property
    def heads(self) -> float | None:
        return self.heads_declared if self.heads_declared is not None else self.heads_implied

    @property
    def kv_heads(self) -> float | None:
        return self.kv_declared if self.kv_declared is not None else self.kv_implied

    @property
    def experts(self) -> float | None:
        if self.experts_declared is not None:
            return self.experts_declared
        return float(self.experts_implied[1]) if self.experts_implied else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _operators(g: nx.DiGraph) -> dict[str, list[str]]:
    """Each sharded node's operator: the nodes of its replica, phase and layer that share its ``op`` (a KV cache
    node joins its attention's), or the node alone when it names none; Expert nodes: the layer's Expert nodes."""
    groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    out: dict[str, list[str]] = {}
    for n, a in g.nodes(data=True):
        t = a.get("type")
        if t not in SHARDED:
            continue
        where = (a.get("replica"), a.get("phase"), a.get("layer"), a.get("attn_group") if t != T.EXPERT else None)
        if t == T.EXPERT:
            groups[(*where, "experts")].append(n)
        elif a.get("op") is not None:
            groups[(*where, a["op"], T.FFN if t == T.FFN else T.ATTENTION)].append(n)
        else:
            out[n] = [n]
    for members in groups.values():
        for n in members:
            out[n] = members
    return out


def node_shares(g: nx.DiGraph, spec: ModelSpec) -> dict[str, Share]:
    """The per-GPU part of every attention, KV cache, FFN and Expert node of a normalized graph."""
    nodes = g._node
    out: dict[str, Share] = {}
    spans: dict[int, tuple[list[str], int]] = {}  # per operator (its members list): computing nodes, GPUs spanned
    for n, members in _operators(g).items():
        a = nodes[n]
        t = a["type"]
        meta = a.get("meta") or {}
        devs = max(1, len(a.get("devices") or ()))
        if id(members) not in spans:  # an EP layer's 64+ Expert nodes share one operator: count its GPUs once
            computing = [m for m in members if nodes[m]["type"] != T.KV_CACHE] or members
            spans[id(members)] = computing, max(1, len({d for m in computing for d in nodes[m].get("devices") or ()}))
        computing, span = spans[id(members)]
        of = _int(meta.get("of"))
        allowed = tuple(sorted({span, len(computing)}))
        if t == T.EXPERT:
            out[n] = _expert(spec, a, devs, of, span)
            continue
        if t == T.KV_CACHE:  # the KV of an attention operator: its shards are the attention's
            att = next((m for m in computing if nodes[m]["type"] == T.ATTENTION), None)
            of = _int((nodes[att].get("meta") or {}).get("of")) if att is not None else None
            meta = (nodes[att].get("meta") or {}) if att is not None else meta
        parts = of or span
        if t == T.FFN:
            out[n] = Share(parts, allowed, of)
            continue
        seq = _int(meta.get("seq_shards")) or 1
        head_shards = max(1, parts // seq)
        spread = max(1.0, devs / seq)  # the head shards this node holds
        heads = _int(a.get("heads"))
        kv = _int(a.get("kv_heads"))
        mla = spec.attention == "mla"
        out[n] = Share(
            parts, allowed, of,
            heads_declared=heads / spread if heads is not None and t == T.ATTENTION else None,
            heads_implied=spec.q_heads(_layer_of(a, spec)) / head_shards if t == T.ATTENTION else None,
            kv_declared=None if mla or kv is None else max(1.0, kv / spread),
            kv_implied=None if mla else float(max(1, spec.kv_shape(_layer_of(a, spec))[0] // head_shards)),
        )
    return out


def _layer_of(a: dict[str, Any], spec: ModelSpec) -> int | None:
    """The node's layer when it names one in range (a full-attention layer may have its own KV heads)."""
    layer = a.get("layer")
    ok = isinstance(layer, int) and not isinstance(layer, bool) and 0 <= layer < spec.num_layers
    return layer if ok else None


def _expert(spec: ModelSpec, a: dict[str, Any], devs: int, of: int | None, span: int) -> Share:
    total = spec.moe.num_experts if spec.moe else 0
    etp = of or 1
    groups = max(1, span // etp)  # expert GPUs holding different experts
    declared = a.get("experts")
    held = len(declared) / max(1.0, devs / etp) if isinstance(declared, list) and declared else None
    return Share(etp, (etp,), of, experts_declared=held,
                 experts_implied=(total // groups, math.ceil(total / groups)) if total else None)


def per_gpu_form(g: nx.DiGraph, spec: ModelSpec) -> nx.DiGraph:
    """A copy of ``g`` whose sharded nodes state what one of their GPUs runs, as pdag draws a shard (``heads``,
    ``kv_heads``, ``meta.of``, as many ``experts``): what the cost model prices.  A DAG pdag built is unchanged."""
    out = g.copy()
    for n, s in node_shares(g, spec).items():
        a = out._node[n]
        t = a["type"]
        if t == T.EXPERT:
            if s.experts is not None:
                kept = a.get("experts") or []
                count = math.ceil(s.experts - 1e-9)
                a["experts"] = list(kept[:count]) if len(kept) >= count else list(range(count))
            continue
        if t in (T.ATTENTION, T.FFN):
            a["meta"] = {**(a.get("meta") or {}), "of": s.parts}
        if s.heads is not None:
            a["heads"] = s.heads
        if s.kv_heads is not None:
            a["kv_heads"] = s.kv_heads
    return out
