"""build_dag: plan -> explicit execution DAG, in the order the seeds mandate.

Order of construction (seed 000 section 6): the DP fan-out at the root, then each replica's Prefill and Decode
branches with their PP stage chain, then TP/SP shards inside attention and FFN operators, then EP fan-outs
inside MoE layers.  Every exchange of data between devices is an explicit communication node.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from typing import Any

import networkx as nx
from pydantic import BaseModel, Field

from tools.core.dag import CONTROL_TYPES, MAX_WORKING_NODES, EdgeType, NodeType
from tools.core.errors import PdagInputError
from tools.core.layout import Layout, PhaseLayout, Pool, even_split, vocab_shards
from tools.core.plan import Phase, Plan, parse_plan
from tools.core.render import FoldedDag, fold
from tools.core.working import (
    PAGE_CHARS,
    LayerFold,
    Page,
    ReplicaFold,
    WorkingDag,
    expand,
    expand_document,
    full_counts,
    gpus_used,
    layer_runs,
)

DATA, PIPE, SYNC, KV = EdgeType.DATA, EdgeType.PIPELINE, EdgeType.SYNC, EdgeType.KV


def estimated_node_count(layout: Layout, folded: bool = True) -> int:
    """Upper bound on the nodes a build would create, computed before building anything: of the working form
    (replica 0 of each pool, one drawn layer per run of identical layers) or, ``folded=False``, of the full DAG."""
    spec = layout.plan.spec
    cuts = frozenset(r.start for pool in layout.pools.values() for r in pool.stage_layers)
    total = 1
    for phase, pool in _distinct_pools(layout):
        pl = layout.phases[phase]
        # expert-TP draws ep x (W / ep) Expert nodes per MoE layer (``moe``): one per GPU of the group, not per expert
        experts = pool.group_width if spec.moe and layout.plan.options.allow_expert_tp else 0
        per_layer = 12 + 4 * pool.group_width + 6 * pl.attn_dp + experts
        drawn = (sum(len(layer_runs(spec, r, cuts)) for r in pool.stage_layers) if folded else spec.num_layers)
        per_phase = drawn * per_layer + 8 * pool.pp + 8
        total += (1 if folded else pool.dp) * (1 + (2 if not layout.disaggregated else 1) * per_phase)
    return total


def _distinct_pools(layout: Layout) -> list[tuple[Phase, Pool]]:
    if layout.disaggregated:
        return [("prefill", layout.pools["prefill"]), ("decode", layout.pools["decode"])]
    return [("prefill", layout.pools["prefill"])]


def _shard_suffix(h: int, j: int, sp: int) -> str:
    return f"t{h}" if sp == 1 else f"t{h}s{j}"


def _split_experts(num_experts: int, ep: int) -> list[list[int]]:
    """Expert ids per Expert node: contiguous, as even as the layers of a pipeline."""
    counts = even_split(num_experts, ep)
    return [list(range(stop - n, stop)) for n, stop in zip(counts, accumulate(counts), strict=True)]


class Builder:
    def __init__(self, plan: Plan, layout: Layout) -> None:
        self.plan = plan
        self.spec = plan.spec
        self.layout = layout
        self.g = nx.DiGraph(model=plan.model_id, plan=plan.model_dump(mode="json", exclude_none=True))
        self.nodes: list[tuple[str, dict[str, Any]]] = []
        self.first_nodes = self.first_edges = 0
        self.edges: list[tuple[str, str, dict[str, EdgeType]]] = []
        # (replica id, layer, gpu) -> (prefill KV node, stage): where decode finds the cache it reads
        self.prefill_kv: dict[tuple[str, int, int], tuple[str, int]] = {}
        self.kv_links: set[str] = set()
        self.templates: dict[tuple[str, str, int, bool], _LayerTemplate] = {}
        self.folded = False  # draw one layer per run of identical layers (set by folded builds)
        self.layer_folds: list[LayerFold] = []
        self._etype = {t: {"type": t} for t in EdgeType}  # networkx copies edge attrs: share the source dicts

    def node(self, node_id: str, ntype: NodeType, devices: list[int], **attrs: Any) -> str:
        attrs = {k: v for k, v in attrs.items() if v is not None}
        attrs["type"] = ntype
        attrs["devices"] = devices
        self.nodes.append((node_id, attrs))
        return node_id

    def devices_of(self, ids: list[str]) -> set[int]:
        """GPUs of these recently built nodes.  A stage ending in an MoE combine wider than attention (ep > tp)
        hands its tokens to the next stage from the combine's GPUs: the combine all-to-all and the stage's
        SendRecv share that group, so the SendRecv lists it (engines return tokens to their attention ranks in
        the combine and send from there)."""
        want, found = set(ids), set()
        for node_id, attrs in reversed(self.nodes):
            if node_id in want:
                found.update(attrs["devices"])
                want.discard(node_id)
                if not want:
                    break
        return found

    def edge(self, u: str, v: str, etype: EdgeType = DATA) -> None:
        self.edges.append((u, v, self._etype[etype]))

    def build(self, first_replica_only: bool = False) -> None:
        """Fill the node and edge lists; ``first_*`` mark where replica 0 (or pools p0 and d0) end."""
        lay = self.layout
        root = self.node("request", NodeType.REQUEST, list(range(lay.gpus_needed)),
                         meta={"dp": lay.dp} if not lay.disaggregated else
                         {"prefill_dp": lay.pools["prefill"].dp, "decode_dp": lay.pools["decode"].dp})
        if not lay.disaggregated:
            rep = self.node("r0", NodeType.REPLICA, lay.replica_devices(0), replica=0)
            self.edge(root, rep)
            last_prefill = self.phase_branch("r0", 0, "prefill", rep, None)
            self.phase_branch("r0", 0, "decode", rep, last_prefill)
            self.first_nodes, self.first_edges = len(self.nodes), len(self.edges)
            if not first_replica_only:
                self.clone_replicas()
            return
        pre, dec = lay.pools["prefill"], lay.pools["decode"]
        heads = []
        for i in range(1 if first_replica_only else pre.dp):
            rep = self.node(f"p{i}", NodeType.REPLICA, pre.replica_devices(i), replica=i, meta={"pool": "prefill"})
            self.edge(root, rep)
            heads.append(self.phase_branch(f"p{i}", i, "prefill", rep, None))
        for j in range(1 if first_replica_only else dec.dp):
            rep = self.node(f"d{j}", NodeType.REPLICA, dec.replica_devices(j), replica=j, meta={"pool": "decode"})
            self.edge(root, rep)
            src = j % pre.dp  # decode replicas take requests from the prefill replicas in turn
            self.phase_branch(f"d{j}", j, "decode", rep, heads[src % len(heads)], kv_source=f"p{src % len(heads)}")
        self.first_nodes, self.first_edges = len(self.nodes), len(self.edges)

    def graph(self, first_replica_only: bool = False) -> nx.DiGraph:
        nodes = self.nodes[: self.first_nodes] if first_replica_only else self.nodes
        edges = self.edges[: self.first_edges] if first_replica_only else self.edges
        self.g.add_nodes_from(nodes)
        self.g.add_edges_from(edges)
        return self.g

    def clone_replicas(self) -> None:
        """Replicas are identical sub-DAGs on disjoint GPUs: copy replica 0 with shifted ids and devices."""
        shift = self.layout.replica_gpus
        nodes0, edges0 = self.nodes[1:], self.edges[1:]  # all but the root and its first fan-out edge
        for r in range(1, self.layout.dp):
            prefix, offset = f"r{r}", r * shift
            for node_id, attrs in nodes0:
                copy = dict(attrs)
                copy["replica"] = r
                copy["devices"] = [d + offset for d in attrs["devices"]]
                self.nodes.append((prefix + node_id[2:], copy))
            self.edges.append(("request", prefix, self._etype[DATA]))
            for u, v, t in edges0:
                self.edges.append((prefix + u[2:], prefix + v[2:], t))

    def phase_branch(self, rid: str, r: int, phase: Phase, rep: str, prefill_out: str | None,
                     kv_source: str | None = None) -> str:
        pool, pl = self.layout.pools[phase], self.layout.phases[phase]
        ph = self.node(f"{rid}.{phase}", NodeType.PHASE, pool.replica_devices(r), phase=phase, replica=r)
        self.edge(rep, ph)
        prev = ph
        if phase == "decode":
            step = self.node(
                f"{rid}.decode.step",
                NodeType.DECODE_STEP,
                self.token_devices(pool, r, 0, pl),
                phase=phase,
                replica=r,
                meta={"token": "t", "depends_on": "token t-1 (the prefill's first token for t=1)"},
            )
            self.edge(ph, step)
            if prefill_out is not None:
                self.edge(prefill_out, step, SYNC)
            prev = step
        ctx = BuildContext(rid, r, phase, pl, pool, kv_source or rid)
        for s, layers in enumerate(pool.stage_layers):
            stage = self.node(
                f"{rid}.{phase}.s{s}",
                NodeType.STAGE,
                pool.stage_devices(r, s),
                phase=phase,
                replica=r,
                stage=s,
                layers=[layers.start, layers.stop],
            )
            self.edge(prev, stage, PIPE if s > 0 else DATA)
            outs = [stage]
            t_dev = self.token_devices(pool, r, s, pl)
            vocab = vocab_shards(self.plan, pl)
            if s == 0:
                outs = [self.node(f"{rid}.{phase}.embed", NodeType.EMBEDDING, t_dev, phase=phase, replica=r, stage=s,
                                  meta={"vocab_shards": vocab} if vocab > 1 else None)]
                self.edge(stage, outs[0])
                if vocab > 1:  # each rank looks up the rows it holds; the sum gives every rank the embeddings
                    outs = [self.node(f"{rid}.{phase}.embed.allreduce", NodeType.ALL_REDUCE, t_dev, phase=phase,
                                      replica=r, stage=s, role="vocab_sync")]
                    self.edge(f"{rid}.{phase}.embed", outs[0])
            if pl.attn_dp > 1:
                groups = {g: list(outs) for g in range(pl.attn_dp)}
                for run in self.runs(layers):
                    n0 = len(self.nodes)
                    groups = self.layer_attention_dp(ctx, s, run.start, groups)
                    p = f"{rid}.{phase}.L{run.start}"
                    self.fold_layer(n0, run, [(o, f"{p}.adp.g{g}") for g in sorted(groups) for o in groups[g]])
                outs = list(dict.fromkeys(o for g in sorted(groups) for o in groups[g]))
            else:
                for run in self.runs(layers):
                    n0 = len(self.nodes)
                    outs = self.layer(ctx, s, run.start, outs)
                    self.fold_layer(n0, run, [(o, f"{rid}.{phase}.L{run.start}.norm_attn") for o in outs])
            if s == pool.pp - 1:
                norm = self.node(f"{rid}.{phase}.final_norm", NodeType.NORM, t_dev, phase=phase, replica=r, stage=s,
                                 role="final_norm")
                head = self.node(f"{rid}.{phase}.lm_head", NodeType.LM_HEAD, t_dev, phase=phase, replica=r, stage=s,
                                 meta={"vocab_shards": vocab} if vocab > 1 else None)
                for o in outs:
                    self.edge(o, norm)
                self.edge(norm, head)
                if vocab > 1:  # each rank scores its slice of the vocabulary; sampling needs all the logits
                    gather = self.node(f"{rid}.{phase}.logits.allgather", NodeType.ALL_GATHER, t_dev, phase=phase,
                                       replica=r, stage=s, role="logits")
                    self.edge(head, gather)
                    return gather
                return head
            nxt = self.token_devices(pool, r, s + 1, pl)
            send = self.node(
                f"{rid}.{phase}.s{s}.send",
                NodeType.SEND_RECV,
                sorted(set(t_dev) | set(nxt) | self.devices_of(outs)),
                phase=phase,
                replica=r,
                stage=s,
                role="stage_transfer",
                meta={"from_stage": s, "to_stage": s + 1},
            )
            for o in outs:
                self.edge(o, send, PIPE)
            prev = send
        return prev

    def runs(self, layers: range) -> list[range]:
        """The layers to draw: each one (full build), or one per run of identical layers (folded build)."""
        if not self.folded:
            return [range(layer, layer + 1) for layer in layers]
        return layer_runs(self.spec, layers, self.cuts)

    @cached_property
    def cuts(self) -> frozenset[int]:
        """Stage boundaries of every pool: folds of prefill, decode and the KV hand-offs cover the same layers."""
        return frozenset(r.start for pool in self.layout.pools.values() for r in pool.stage_layers)

    def fold_layer(self, n0: int, run: range, carry: list[tuple[str, str]]) -> None:
        """Mark the nodes drawn since ``n0`` for layer ``run.start`` as standing for the whole run."""
        if len(run) <= 1:
            return
        ids = []
        for i in range(n0, len(self.nodes)):
            nid, attrs = self.nodes[i]
            if attrs.get("layer") == run.start:
                self.nodes[i] = (nid, {**attrs, "repeat": len(run)})  # a new dict: templates share the old one
                ids.append(nid)
        self.layer_folds.append(LayerFold(tuple(ids), run.start, len(run), tuple(carry)))

    @staticmethod
    def token_devices(pool: Pool, r: int, s: int, pl: PhaseLayout) -> list[int]:
        """GPUs holding the token activations between operators: every attention GPU of the stage."""
        return pool.devices(r, s, 0, pl.attention_gpus)

    def layer(self, c: BuildContext, s: int, layer: int, inputs: list[str]) -> list[str]:
        """One decoder layer.  Layers of the same kind in a stage have the same sub-DAG: the first one is built
        and recorded, the others are copies of it with their own ids (most of a large DAG is built this way)."""
        key = (c.rid, c.phase, s, self.spec.is_moe_layer(layer), self.spec.is_recurrent_layer(layer),
               self.spec.is_ffn_free(layer), self.spec.kv_shape(layer),  # a full layer's own KV heads (Gemma-4)
               self.spec.q_heads(layer),  # and query heads (Step-3.5-Flash)
               self.spec.is_kv_shared(layer), self.spec.ffn_width(layer))
        tmpl = self.templates.get(key)
        if tmpl is not None:
            return self.copy_layer(tmpl, c, s, layer, inputs)
        n0, e0 = len(self.nodes), len(self.edges)
        outs = self.build_layer(c, s, layer, inputs)
        self.templates[key] = _LayerTemplate.record(self, n0, e0, f"{c.rid}.{c.phase}.L{layer}", outs)
        return outs

    def copy_layer(self, t: _LayerTemplate, c: BuildContext, s: int, layer: int, inputs: list[str]) -> list[str]:
        p = f"{c.rid}.{c.phase}.L{layer}"
        cut = len(t.prefix)
        for rel, attrs in t.nodes:
            copy = dict(attrs)
            copy["layer"] = layer
            if "op" in copy:
                copy["op"] = p + copy["op"][cut:]
            self.nodes.append((p + rel, copy))
        for i in inputs:
            self.edge(i, p + t.first)
        for u, v, a in t.edges:
            self.edges.append((p + u, p + v, a))
        for rel, device in t.kv:
            if c.phase == "prefill":
                self.prefill_kv[(c.rid, layer, device)] = (p + rel, s)
            else:
                self.link_kv(c, s, layer, device, p + rel)
        return [p + o for o in t.outs]

    def build_layer(self, c: BuildContext, s: int, layer: int, inputs: list[str]) -> list[str]:
        p = f"{c.rid}.{c.phase}.L{layer}"
        common = {"phase": c.phase, "replica": c.r, "stage": s, "layer": layer}
        t_dev = self.token_devices(c.pool, c.r, s, c.pl)
        norm1 = self.node(f"{p}.norm_attn", NodeType.NORM, t_dev, role="pre_attention", **common)
        for i in inputs:
            self.edge(i, norm1)
        out = self.attention(c, s, layer, norm1, f"{p}.attn", f"{p}.kv", 0, common)
        if self.spec.is_ffn_free(layer):  # a mixer block alone (Nemotron-H): no FFN and no norm before one
            return out
        norm2 = self.node(f"{p}.norm_ffn", NodeType.NORM, t_dev, role="pre_ffn", **common)
        for o in out:
            self.edge(o, norm2)
        if self.spec.is_moe_layer(layer):
            return self.moe(c, s, p, {0: norm2}, common)[0]
        return self.dense_ffn(c, s, f"{p}.ffn", norm2, 0, common, role=None)

    def layer_attention_dp(self, c: BuildContext, s: int, layer: int,
                           inputs: dict[int, list[str]]) -> dict[int, list[str]]:
        """Opt-in attention-DP: each group runs attention (and dense FFN) on its own share of the batch."""
        p = f"{c.rid}.{c.phase}.L{layer}"
        norm2: dict[int, str] = {}
        outs: dict[int, list[str]] = {}
        for g in range(c.pl.attn_dp):
            common = {"phase": c.phase, "replica": c.r, "stage": s, "layer": layer, "attn_group": g}
            base = g * c.pl.attn_width
            g_dev = c.pool.devices(c.r, s, base, c.pl.attn_width)
            grp = self.node(f"{p}.adp.g{g}", NodeType.ATTN_DP_GROUP, g_dev, meta={"of": c.pl.attn_dp}, **common)
            for i in inputs[g]:
                self.edge(i, grp)
            norm1 = self.node(f"{p}.norm_attn.g{g}", NodeType.NORM, g_dev, role="pre_attention", **common)
            self.edge(grp, norm1)
            out = self.attention(c, s, layer, norm1, f"{p}.attn.g{g}", f"{p}.kv.g{g}", base, common)
            if self.spec.is_ffn_free(layer):
                outs[g] = out
                continue
            norm2[g] = self.node(f"{p}.norm_ffn.g{g}", NodeType.NORM, g_dev, role="pre_ffn", **common)
            for o in out:
                self.edge(o, norm2[g])
            if not self.spec.is_moe_layer(layer):
                outs[g] = self.dense_ffn(c, s, f"{p}.ffn.g{g}", norm2[g], base, common, role=None)
        if self.spec.is_moe_layer(layer):
            common = {"phase": c.phase, "replica": c.r, "stage": s, "layer": layer}
            outs = self.moe(c, s, p, norm2, common)
        return outs

    def attention(self, c: BuildContext, s: int, layer: int, src: str, op: str, kv_prefix: str, base: int,
                  common: dict[str, Any]) -> list[str]:
        """Head shards x sequence shards over one attention group's GPUs, with KV cache and explicit syncs."""
        spec, pl = self.spec, c.pl
        hs, sp = pl.head_shards, pl.sp
        heads = spec.q_heads(layer) // hs  # a full layer's own query heads (Step-3.5-Flash)
        kv_heads = None if spec.attention == "mla" else max(1, spec.kv_shape(layer)[0] // hs)
        # a recurrent layer's mixer takes the attention node's place; its cache holds a state, not K and V (Falcon-H1:
        # both mixers in the one node, its cache K and V and the state)
        mixer = ({"mixer": spec.recurrent.kind} if spec.recurrent and spec.is_recurrent_layer(layer) else
                 {"mixer": f"attention_and_{spec.recurrent.kind}"} if spec.recurrent and spec.is_parallel_layer(layer)
                 else {})
        shards = []
        for h in range(hs):
            for j in range(sp):
                dev = [c.pool.device(c.r, s, base + h * sp + j)]
                suffix = _shard_suffix(h, j, sp)
                a = self.node(f"{op}.{suffix}", NodeType.ATTENTION, dev, op=op, tp_rank=h,
                              sp_rank=j if sp > 1 else None, heads=heads, kv_heads=kv_heads,
                              meta=({"of": hs * sp, "seq_shards": sp} if sp > 1 else {"of": hs}) | mixer, **common)
                self.edge(src, a)
                kv = self.node(f"{kv_prefix}.{suffix}", NodeType.KV_CACHE, dev, op=op, tp_rank=h,
                               sp_rank=j if sp > 1 else None, kv_heads=kv_heads,
                               role="write" if c.phase == "prefill" else "read_append",
                               **({"meta": mixer} if mixer else {}), **common)
                if c.phase == "prefill":
                    self.edge(a, kv)
                    self.prefill_kv[(c.rid, layer, dev[0])] = (kv, s)
                else:
                    self.edge(kv, a, KV)
                    self.link_kv(c, s, layer, dev[0], kv)
                shards.append(a)
        g_dev = c.pool.devices(c.r, s, base, pl.attn_width)
        out = shards
        if sp > 1:
            gather = self.node(f"{op}.sp_gather", NodeType.ALL_GATHER, g_dev, op=op, role="sp_sync", **common)
            for a in out:
                self.edge(a, gather)
            out = [gather]
        if hs > 1:
            ar = self.node(f"{op}.allreduce", NodeType.ALL_REDUCE, g_dev, op=op, role="tp_sync", **common)
            for a in out:
                self.edge(a, ar)
            out = [ar]
        return out

    def dense_ffn(self, c: BuildContext, s: int, op: str, src: str, base: int, common: dict[str, Any],
                  role: str | None) -> list[str]:
        tp = c.pl.tp
        # SP wider than TP (e.g. SP alone): the sequence shards are gathered before the FFN, which then runs
        # replicated on each TP-sized slice of the attention GPUs, so the next layer finds its tokens locally.
        copies = max(1, c.pl.attn_width // tp)
        shards = []
        for i in range(tp):
            devs = [c.pool.device(c.r, s, base + j * tp + i) for j in range(copies)]
            f = self.node(f"{op}.t{i}", NodeType.FFN, devs, op=op, tp_rank=i, role=role, meta={"of": tp}, **common)
            self.edge(src, f)
            shards.append(f)
        if tp == 1:
            return shards
        ar = self.node(f"{op}.allreduce", NodeType.ALL_REDUCE, c.pool.devices(c.r, s, base, tp * copies), op=op,
                       role="tp_sync", **common)
        for f in shards:
            self.edge(f, ar)
        return [ar]

    def moe(self, c: BuildContext, s: int, p: str, norms: dict[int, str],
            common: dict[str, Any]) -> dict[int, list[str]]:
        """Router -> AllToAll dispatch -> Expert nodes (one per EP GPU) -> AllToAll combine, per group's tokens."""
        spec, pl = self.spec, c.pl
        assert spec.moe is not None
        t_dev = self.token_devices(c.pool, c.r, s, pl)
        ep = pl.ep
        width = c.pool.group_width
        expert_tp = width // ep if self.plan.options.allow_expert_tp and ep < width else 1
        e_dev = c.pool.devices(c.r, s, 0, ep * expert_tp)
        both = sorted(set(t_dev) | set(e_dev))
        moe = self.node(f"{p}.moe", NodeType.MOE, both, **common)
        adp = pl.attn_dp > 1
        dispatch = f"{p}.dispatch"
        routers = []
        for g, norm in norms.items():
            self.edge(norm, moe)
            gcommon = dict(common, attn_group=g) if adp else common
            r_dev = c.pool.devices(c.r, s, g * pl.attn_width, pl.attn_width) if adp else t_dev
            router = self.node(f"{p}.router.g{g}" if adp else f"{p}.router", NodeType.ROUTER, r_dev, op=f"{p}.moe",
                               meta={"top_k": spec.moe.experts_per_token}, **gcommon)
            self.edge(moe, router)
            routers.append(router)
        self.node(dispatch, NodeType.ALL_TO_ALL, both, op=f"{p}.moe", role="dispatch", **common)
        for router in routers:
            self.edge(router, dispatch)
        experts_out = []
        for k, experts in enumerate(_split_experts(spec.moe.num_experts, ep)):
            for j in range(expert_tp):
                suffix = f"e{k}" if expert_tp == 1 else f"e{k}.t{j}"
                e = self.node(f"{p}.{suffix}", NodeType.EXPERT, [c.pool.device(c.r, s, k * expert_tp + j)],
                              op=f"{p}.moe", ep_rank=k, tp_rank=j if expert_tp > 1 else None, experts=experts,
                              meta={"of": expert_tp} if expert_tp > 1 else {}, **common)
                self.edge(dispatch, e)
                experts_out.append(e)
        combine = self.node(f"{p}.combine", NodeType.ALL_TO_ALL, both, op=f"{p}.moe", role="combine", **common)
        for e in experts_out:
            self.edge(e, combine)
        outs: dict[int, list[str]] = {}
        for g, norm in norms.items():
            outs[g] = [combine]
            if spec.moe.num_shared_experts:
                if adp:
                    gcommon = dict(common, attn_group=g)
                    outs[g] += self.dense_ffn(c, s, f"{p}.shared.g{g}", norm, g * pl.attn_width, gcommon,
                                              role="shared_expert")
                else:
                    outs[g] += self.dense_ffn(c, s, f"{p}.shared", moe, 0, common, role="shared_expert")
        return outs

    def link_kv(self, c: BuildContext, s: int, layer: int, device: int, decode_kv: str) -> None:
        """KV dependency from prefill into decode, through an explicit node whenever the cache must move."""
        pre = self.layout.phases["prefill"]
        if self.layout.disaggregated:
            self._kv_via(f"{c.rid}.kv_transfer.L{layer}", "kv_transfer", c, s, layer, decode_kv, pre)
            return
        found = self.prefill_kv.get((c.rid, layer, device))
        same_layout = (pre.head_shards, pre.sp, pre.attn_dp) == (c.pl.head_shards, c.pl.sp, c.pl.attn_dp)
        if found is not None and same_layout:
            self.edge(found[0], decode_kv, KV)
            return
        self._kv_via(f"{c.rid}.kv_reshard.L{layer}", "kv_reshard", c, s, layer, decode_kv, pre)

    def _kv_via(self, nid: str, role: str, c: BuildContext, s: int, layer: int, decode_kv: str,
                pre: PhaseLayout) -> None:
        if nid not in self.kv_links:
            self.kv_links.add(nid)
            sources = [(kv, st, d) for (rid, ll, d), (kv, st) in self.prefill_kv.items()
                       if rid == c.kv_source and ll == layer]
            devices = sorted({d for _, _, d in sources} | set(self.token_devices(c.pool, c.r, s, c.pl)))
            # between pools the two sides' stages need not line up: the hand-off belongs to no pipeline stage
            stage = None if self.layout.disaggregated else s
            self.node(nid, NodeType.KV_TRANSFER, devices, replica=c.r, layer=layer, stage=stage, role=role,
                      meta={"from": {"replica": c.kv_source, "head_shards": pre.head_shards, "sp": pre.sp,
                                     "attn_dp": pre.attn_dp},
                            "to": {"head_shards": c.pl.head_shards, "sp": c.pl.sp, "attn_dp": c.pl.attn_dp}})
            for kv, _, _ in sources:
                self.edge(kv, nid, KV)
        self.edge(nid, decode_kv, KV)


@dataclass(frozen=True)
class _LayerTemplate:
    """A built layer as ids relative to its prefix: its nodes, internal edges, entry node, outputs, KV shards."""

    prefix: str
    nodes: list[tuple[str, dict[str, Any]]]
    edges: list[tuple[str, str, dict[str, EdgeType]]]
    first: str
    outs: list[str]
    kv: list[tuple[str, int]]

    @classmethod
    def record(cls, b: Builder, n0: int, e0: int, prefix: str, outs: list[str]) -> _LayerTemplate:
        cut = len(prefix)
        # KV hand-off nodes made while linking decode KV belong to no layer template: copies link their own
        mine = [(n, a) for n, a in b.nodes[n0:] if n.startswith(prefix + ".") and a["type"] != NodeType.KV_TRANSFER]
        ids = {n for n, _ in mine}
        edges = [(u[cut:], v[cut:], a) for u, v, a in b.edges[e0:] if u in ids and v in ids]
        kv = [(n[cut:], a["devices"][0]) for n, a in mine if a["type"] == NodeType.KV_CACHE]
        return cls(prefix, [(n[cut:], a) for n, a in mine], edges, mine[0][0][cut:], [o[cut:] for o in outs], kv)


@dataclass(frozen=True)
class BuildContext:
    """Where a branch is being built: replica id and index, phase, its degrees and its GPU pool."""

    rid: str
    r: int
    phase: Phase
    pl: PhaseLayout
    pool: Pool
    kv_source: str


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while allocating tens of thousands of acyclic dicts (it would rescan them all)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _builder(plan: Plan, layout: Layout | None, first_replica_only: bool, folded: bool = False) -> Builder:
    layout = layout or Layout(plan)
    count = estimated_node_count(layout, folded=folded or first_replica_only)
    if count > MAX_WORKING_NODES:
        raise PdagInputError(
            "plan.parallel",
            f"this plan's working DAG (one replica per pool) would have about {count:,} nodes, above the limit of "
            f"{MAX_WORKING_NODES:,}",
            "smaller degrees inside a replica (pp x max(tp, ep) GPUs per replica); the number of replicas is free",
        )
    builder = Builder(plan, layout)
    builder.folded = folded
    builder.build(first_replica_only)
    return builder


def build_graph(plan: Plan, layout: Layout | None = None, first_replica_only: bool = False) -> nx.DiGraph:
    """Build the execution DAG of a parsed plan as a networkx graph, every layer drawn.

    ``first_replica_only`` builds replica 0 (pools p0 and d0 when disaggregated) on the full plan's GPU ids:
    every other replica is the same sub-DAG shifted to other GPUs.
    """
    with gc_paused():
        return _builder(plan, layout, first_replica_only).graph()


def replica_folds(layout: Layout) -> list[ReplicaFold]:
    """Replica 0 of each pool stands for all of the pool's replicas, each on the next block of GPUs."""
    if not layout.disaggregated:
        pool = layout.pools["prefill"]
        return [ReplicaFold("r0", pool.dp, pool.replica_gpus)] if pool.dp > 1 else []
    out = []
    for rid, phase in (("p0", "prefill"), ("d0", "decode")):
        pool = layout.pools[phase]  # type: ignore[index]
        if pool.dp > 1:
            out.append(ReplicaFold(rid, pool.dp, pool.replica_gpus))
    return out


def build_working(plan: Plan, layout: Layout | None = None) -> WorkingDag:
    """The working form of a plan's DAG: replica 0 of each pool, one drawn layer per run of identical layers,
    and the folds saying what they stand for (the form every tool judges and prices)."""
    layout = layout or Layout(plan)
    with gc_paused():
        b = _builder(plan, layout, first_replica_only=True, folded=True)
        return WorkingDag(b.graph(), replica_folds(layout), b.layer_folds)


def _working_devices(nodes: Iterable[tuple[str, dict[str, Any]]]) -> set[int]:
    used: set[int] = set()
    for _, attrs in nodes:
        if attrs.get("type") not in CONTROL_TYPES:
            used.update(attrs.get("devices", ()))
    return used


def devices_used(graph: nx.DiGraph) -> list[int]:
    """Distinct GPUs that compute or communication nodes run on: the GPU count comes from here."""
    return sorted(_working_devices(graph.nodes(data=True)))


class BuildResult(BaseModel):
    """build_dag's answer: the working form of the DAG (node-link JSON with folds), its folded summary and the GPU
    count it implies."""

    gpus_used: int = Field(description="distinct GPUs in the DAG (never a product of degrees)")
    gpus_available: int = Field(description="hardware.num_gpus of the plan")
    summary: FoldedDag
    dag: dict[str, Any] = Field(description="node-link JSON (version 2): replica 0 of each pool and one drawn layer "
                                "per run of identical layers, with 'folds' saying what they stand for; "
                                "tools.core.working.expand gives the full per-GPU DAG in pages")


def build_dag(plan: Plan | dict[str, Any]) -> BuildResult:
    """Build the execution DAG of a plan in its working form (raises PdagInputError on bad input)."""
    parsed = parse_plan(plan)
    working = build_working(parsed)
    with gc_paused():
        return BuildResult.model_construct(
            gpus_used=gpus_used(working),
            gpus_available=parsed.hardware.num_gpus,
            summary=fold(working.graph, full_counts(working)),
            dag=working.document(),
        )


def build_dag_page(plan: Plan | dict[str, Any], cursor: str | None = None, page_chars: int = PAGE_CHARS) -> Page:
    """One page of the full per-GPU DAG of a plan (at most ``page_chars`` characters of JSON items): its nodes,
    then its edges; pass the page's ``cursor`` back for the next one."""
    return expand(build_working(parse_plan(plan)), cursor, page_chars)


def build_full_dag(plan: Plan | dict[str, Any]) -> dict[str, Any]:
    """The full per-GPU node-link document of a plan, every replica and layer drawn (small plans, tests)."""
    return expand_document(build_working(parse_plan(plan)))
