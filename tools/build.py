"""build_dag: plan -> explicit execution DAG, in the order the seeds mandate.

Order of construction (seed 000 section 6): the DP fan-out at the root, then each replica's Prefill and Decode
branches with their PP stage chain, then TP/SP shards inside attention and FFN operators, then EP fan-outs
inside MoE layers.  Every exchange of data between devices is an explicit communication node.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import networkx as nx
from pydantic import BaseModel, Field

from tools.dag import CONTROL_TYPES, MAX_NODES, EdgeType, NodeType, graph_to_json
from tools.errors import PdagInputError
from tools.layout import Layout, PhaseLayout
from tools.plan import Phase, Plan, parse_plan
from tools.render import FoldedDag, fold

DATA, PIPE, SYNC, KV = EdgeType.DATA, EdgeType.PIPELINE, EdgeType.SYNC, EdgeType.KV


def estimated_node_count(layout: Layout) -> int:
    """Upper bound on the nodes build_graph would create, computed before building anything."""
    spec = layout.plan.spec
    w = layout.group_width
    per_layer = 12 + 4 * w + (spec.moe.num_experts if spec.moe and layout.plan.options.allow_expert_tp else 0)
    per_phase = spec.num_layers * per_layer + 8 * layout.pp + 8
    return 1 + layout.dp * (1 + 2 * per_phase)


def _shard_suffix(h: int, j: int, sp: int) -> str:
    return f"t{h}" if sp == 1 else f"t{h}s{j}"


def _split_experts(num_experts: int, ep: int) -> list[list[int]]:
    base, extra = divmod(num_experts, ep)
    out, start = [], 0
    for k in range(ep):
        n = base + (1 if k < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


class _Builder:
    def __init__(self, plan: Plan, layout: Layout) -> None:
        self.plan = plan
        self.spec = plan.spec
        self.layout = layout
        self.g = nx.DiGraph(model=plan.model_id, plan=plan.model_dump(mode="json", exclude_none=True))
        self.nodes: list[tuple[str, dict[str, Any]]] = []
        self.edges: list[tuple[str, str, dict[str, EdgeType]]] = []
        self.prefill_kv: dict[tuple[int, int, int], tuple[str, int]] = {}  # (replica, layer, gpu) -> (id, stage)
        self.reshards: set[str] = set()
        self._etype = {t: {"type": t} for t in EdgeType}  # networkx copies edge attrs: share the source dicts

    def node(self, node_id: str, ntype: NodeType, devices: list[int], **attrs: Any) -> str:
        attrs = {k: v for k, v in attrs.items() if v is not None}
        attrs["type"] = ntype
        attrs["devices"] = devices
        self.nodes.append((node_id, attrs))
        return node_id

    def edge(self, u: str, v: str, etype: EdgeType = DATA) -> None:
        self.edges.append((u, v, self._etype[etype]))

    def build(self) -> nx.DiGraph:
        lay = self.layout
        all_devices = list(range(lay.gpus_needed))
        root = self.node("request", NodeType.REQUEST, all_devices, meta={"dp": lay.dp})
        rep = self.node("r0", NodeType.REPLICA, lay.replica_devices(0), replica=0)
        self.edge(root, rep)
        last_prefill = self.phase_branch(0, "prefill", rep, None)
        self.phase_branch(0, "decode", rep, last_prefill)
        self.clone_replicas()
        self.g.add_nodes_from(self.nodes)
        self.g.add_edges_from(self.edges)
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

    def phase_branch(self, r: int, phase: Phase, rep: str, prefill_out: str | None) -> str:
        lay, pl = self.layout, self.layout.phases[phase]
        ph = self.node(f"r{r}.{phase}", NodeType.PHASE, lay.replica_devices(r), phase=phase, replica=r)
        self.edge(rep, ph)
        prev = ph
        if phase == "decode":
            step = self.node(
                f"r{r}.decode.step",
                NodeType.DECODE_STEP,
                self.token_devices(r, 0, pl),
                phase=phase,
                replica=r,
                meta={"token": "t", "depends_on": "token t-1 (the prefill's first token for t=1)"},
            )
            self.edge(ph, step)
            if prefill_out is not None:
                self.edge(prefill_out, step, SYNC)
            prev = step
        for s, layers in enumerate(lay.stage_layers):
            stage = self.node(
                f"r{r}.{phase}.s{s}",
                NodeType.STAGE,
                lay.stage_devices(r, s),
                phase=phase,
                replica=r,
                stage=s,
                layers=[layers.start, layers.stop],
            )
            self.edge(prev, stage, PIPE if s > 0 else DATA)
            outs = [stage]
            if s == 0:
                outs = [self.node(f"r{r}.{phase}.embed", NodeType.EMBEDDING, self.token_devices(r, s, pl),
                                  phase=phase, replica=r, stage=s)]
                self.edge(stage, outs[0])
            for layer in layers:
                outs = self.layer(r, phase, pl, s, layer, outs)
            if s == lay.pp - 1:
                t = self.token_devices(r, s, pl)
                norm = self.node(f"r{r}.{phase}.final_norm", NodeType.NORM, t, phase=phase, replica=r, stage=s,
                                 role="final_norm")
                head = self.node(f"r{r}.{phase}.lm_head", NodeType.LM_HEAD, t, phase=phase, replica=r, stage=s)
                for o in outs:
                    self.edge(o, norm)
                self.edge(norm, head)
                return head
            nxt = self.token_devices(r, s + 1, pl)
            send = self.node(
                f"r{r}.{phase}.s{s}.send",
                NodeType.SEND_RECV,
                sorted(set(self.token_devices(r, s, pl)) | set(nxt)),
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

    def token_devices(self, r: int, s: int, pl: PhaseLayout) -> list[int]:
        """GPUs holding the token activations between operators: the attention (TP) GPUs of the stage."""
        base = self.layout.device(r, s, 0)
        return list(range(base, base + pl.attn_width))

    def layer(self, r: int, phase: Phase, pl: PhaseLayout, s: int, layer: int, inputs: list[str]) -> list[str]:
        spec, lay = self.spec, self.layout
        p = f"r{r}.{phase}.L{layer}"
        common = {"phase": phase, "replica": r, "stage": s, "layer": layer}
        t_dev = self.token_devices(r, s, pl)
        norm1 = self.node(f"{p}.norm_attn", NodeType.NORM, t_dev, role="pre_attention", **common)
        for i in inputs:
            self.edge(i, norm1)

        # Attention: head shards x sequence shards over the TP GPUs (SP re-partitions them).
        hs, sp = pl.head_shards, pl.sp
        heads = spec.num_heads // hs if hs else spec.num_heads
        kv_heads = None if spec.attention == "mla" else max(1, spec.num_kv_heads // hs)
        op = f"{p}.attn"
        shards = []
        for h in range(hs):
            for j in range(sp):
                local = h * sp + j
                dev = [lay.device(r, s, local)]
                suffix = _shard_suffix(h, j, sp)
                a = self.node(f"{op}.{suffix}", NodeType.ATTENTION, dev, op=op, tp_rank=h,
                              sp_rank=j if sp > 1 else None, heads=heads, kv_heads=kv_heads,
                              meta={"of": hs * sp, "seq_shards": sp} if sp > 1 else {"of": hs}, **common)
                self.edge(norm1, a)
                kv = self.node(f"{p}.kv.{suffix}", NodeType.KV_CACHE, dev, op=op, tp_rank=h,
                               sp_rank=j if sp > 1 else None, kv_heads=kv_heads,
                               role="write" if phase == "prefill" else "read_append", **common)
                if phase == "prefill":
                    self.edge(a, kv)
                    self.prefill_kv[(r, layer, dev[0])] = (kv, s)
                else:
                    self.edge(kv, a, KV)
                    self.link_kv(r, layer, dev[0], kv, pl)
                shards.append(a)
        out = shards
        if sp > 1:
            gather = self.node(f"{op}.sp_gather", NodeType.ALL_GATHER, t_dev, op=op, role="sp_sync", **common)
            for a in out:
                self.edge(a, gather)
            out = [gather]
        if hs > 1:
            ar = self.node(f"{op}.allreduce", NodeType.ALL_REDUCE, t_dev, op=op, role="tp_sync", **common)
            for a in out:
                self.edge(a, ar)
            out = [ar]
        norm2 = self.node(f"{p}.norm_ffn", NodeType.NORM, t_dev, role="pre_ffn", **common)
        for o in out:
            self.edge(o, norm2)
        if spec.is_moe_layer(layer):
            return self.moe(p, r, s, pl, norm2, common)
        return self.dense_ffn(f"{p}.ffn", r, s, pl, norm2, common, role=None)

    def dense_ffn(self, op: str, r: int, s: int, pl: PhaseLayout, src: str, common: dict[str, Any],
                  role: str | None) -> list[str]:
        lay, tp = self.layout, self.layout.phases[common["phase"]].tp
        shards = []
        for i in range(tp):
            f = self.node(f"{op}.t{i}", NodeType.FFN, [lay.device(r, s, i)], op=op, tp_rank=i, role=role,
                          meta={"of": tp}, **common)
            self.edge(src, f)
            shards.append(f)
        if tp == 1:
            return shards
        ar = self.node(f"{op}.allreduce", NodeType.ALL_REDUCE, self.token_devices(r, s, pl)[:tp] or
                       [lay.device(r, s, 0)], op=op, role="tp_sync", **common)
        for f in shards:
            self.edge(f, ar)
        return [ar]

    def moe(self, p: str, r: int, s: int, pl: PhaseLayout, src: str, common: dict[str, Any]) -> list[str]:
        spec, lay = self.spec, self.layout
        assert spec.moe is not None
        t_dev = self.token_devices(r, s, pl)
        ep = pl.ep
        expert_tp = lay.group_width // ep if self.plan.options.allow_expert_tp and ep < lay.group_width else 1
        e_dev = [lay.device(r, s, k) for k in range(ep * expert_tp)]
        both = sorted(set(t_dev) | set(e_dev))
        moe = self.node(f"{p}.moe", NodeType.MOE, both, **common)
        self.edge(src, moe)
        router = self.node(f"{p}.router", NodeType.ROUTER, t_dev, op=f"{p}.moe",
                           meta={"top_k": spec.moe.experts_per_token}, **common)
        self.edge(moe, router)
        dispatch = self.node(f"{p}.dispatch", NodeType.ALL_TO_ALL, both, op=f"{p}.moe", role="dispatch", **common)
        self.edge(router, dispatch)
        experts_out = []
        for k, experts in enumerate(_split_experts(spec.moe.num_experts, ep)):
            for j in range(expert_tp):
                suffix = f"e{k}" if expert_tp == 1 else f"e{k}.t{j}"
                e = self.node(f"{p}.{suffix}", NodeType.EXPERT, [lay.device(r, s, k * expert_tp + j)],
                              op=f"{p}.moe", ep_rank=k, tp_rank=j if expert_tp > 1 else None, experts=experts,
                              meta={"of": expert_tp} if expert_tp > 1 else {}, **common)
                self.edge(dispatch, e)
                experts_out.append(e)
        combine = self.node(f"{p}.combine", NodeType.ALL_TO_ALL, both, op=f"{p}.moe", role="combine", **common)
        for e in experts_out:
            self.edge(e, combine)
        outs = [combine]
        if spec.moe.num_shared_experts:
            outs += self.dense_ffn(f"{p}.shared", r, s, pl, moe, common, role="shared_expert")
        return outs

    def link_kv(self, r: int, layer: int, device: int, decode_kv: str, pl: PhaseLayout) -> None:
        """KV dependency from prefill into decode; a reshard node when the two phases shard KV differently."""
        found = self.prefill_kv.get((r, layer, device))
        if found is None:
            return
        src, stage = found
        pre = self.layout.phases["prefill"]
        if (pre.head_shards, pre.sp) == (pl.head_shards, pl.sp):
            self.edge(src, decode_kv, KV)
            return
        rid = f"r{r}.kv_reshard.L{layer}"
        if rid not in self.reshards:
            self.reshards.add(rid)
            self.node(rid, NodeType.KV_TRANSFER, self.token_devices(r, stage, pl), replica=r, layer=layer,
                      stage=stage, role="kv_reshard", meta={"from_sp": pre.sp, "to_sp": pl.sp})
            for (rr, ll, _), (kv, _) in self.prefill_kv.items():
                if rr == r and ll == layer:
                    self.edge(kv, rid, KV)
        self.edge(rid, decode_kv, KV)


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


def build_graph(plan: Plan, layout: Layout | None = None) -> nx.DiGraph:
    """Build the execution DAG of a parsed plan as a networkx graph (the form the other tools work on)."""
    layout = layout or Layout(plan)
    count = estimated_node_count(layout)
    if count > MAX_NODES:
        raise PdagInputError(
            "plan.parallel",
            f"this plan would build about {count:,} DAG nodes, above the limit of {MAX_NODES:,}",
            "fewer replicas or smaller degrees (dp x pp x max(tp, ep) GPUs)",
        )
    with gc_paused():
        return _Builder(plan, layout).build()


def devices_used(graph: nx.DiGraph) -> list[int]:
    """Distinct GPUs that compute or communication nodes run on: the GPU count comes from here."""
    used: set[int] = set()
    for _, attrs in graph.nodes(data=True):
        if attrs.get("type") not in CONTROL_TYPES:
            used.update(attrs.get("devices", ()))
    return sorted(used)



class BuildResult(BaseModel):
    """build_dag's answer: the full DAG (node-link JSON), its folded summary and the GPU count it implies."""

    gpus_used: int = Field(description="distinct GPUs in the DAG (never a product of degrees)")
    gpus_available: int = Field(description="hardware.num_gpus of the plan")
    summary: FoldedDag
    dag: dict[str, Any] = Field(description="node-link JSON; see the published DAG JSON Schema")


def build_dag(plan: Plan | dict[str, Any]) -> BuildResult:
    """Build the explicit execution DAG of a plan (raises PdagInputError on bad input)."""
    parsed = parse_plan(plan)
    graph = build_graph(parsed)
    with gc_paused():
        return BuildResult.model_construct(
            gpus_used=len(devices_used(graph)),
            gpus_available=parsed.hardware.num_gpus,
            summary=fold(graph),
            dag=graph_to_json(graph),
        )
