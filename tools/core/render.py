"""Folded views of a DAG for people and for token-frugal agents: identical layers once, with a repeat count."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

import networkx as nx
from pydantic import BaseModel, Field

from tools.core.dag import NodeType


class LayerBlock(BaseModel):
    """A run of consecutive layers with the same structure."""

    layers: list[int] = Field(description="[first, last] layer indices (inclusive)")
    repeat: int
    pattern: str = Field(description="the operators of one layer, in order, with their shard counts")
    nodes_per_layer: dict[str, int]


class StageView(BaseModel):
    stage: int
    layers: list[int] = Field(description="[first, last+1)")
    devices: list[int]
    blocks: list[LayerBlock]


class PhaseView(BaseModel):
    phase: str
    stages: list[StageView]


class PoolView(BaseModel):
    pool: str = Field(description="'prefill+decode' (aggregated serving), or 'prefill' / 'decode' (disaggregated)")
    replicas: int
    gpus_per_replica: int


class FoldedDag(BaseModel):
    """What a DAG looks like, folded: replica 0 in detail (other replicas are the same, shifted)."""

    model: str | None
    replicas: int
    gpus_per_replica: int
    pools: list[PoolView]
    phases: list[PhaseView]
    node_counts: dict[str, int]
    edge_counts: dict[str, int]
    total_nodes: int
    total_edges: int


_GROUP = re.compile(r"\.g\d+$")  # attention-DP group suffix: groups fold together
_SHORT = {
    NodeType.NORM: "norm",
    NodeType.ATTENTION: "attention",
    NodeType.KV_CACHE: "kv",
    NodeType.ALL_REDUCE: "all-reduce",
    NodeType.ALL_GATHER: "all-gather",
    NodeType.REDUCE_SCATTER: "reduce-scatter",
    NodeType.ALL_TO_ALL: "all-to-all",
    NodeType.FFN: "ffn",
    NodeType.MOE: "moe",
    NodeType.ROUTER: "router",
    NodeType.EXPERT: "experts",
    NodeType.LINEAR: "linear",
    NodeType.ATTN_DP_GROUP: "attention-dp-group",
}


def _pattern(graph: nx.DiGraph, nodes: list[str]) -> tuple[str, dict[str, int]]:
    counts: Counter[tuple[str, str | None, str]] = Counter()
    order: list[tuple[str, str | None, str]] = []
    for n in nodes:  # insertion order follows construction order
        a = graph.nodes[n]
        mixer = (a.get("meta") or {}).get("mixer")  # a recurrent mixer in attention's place, its state in the cache's
        cache = "kv_and_state" if mixer and mixer.startswith("attention_and_") else "state"
        name = (cache if a["type"] == NodeType.KV_CACHE else mixer) if mixer else str(a["type"])
        key = (name, a.get("role"), _GROUP.sub("", a.get("op") or "").rsplit(".", 1)[-1])
        if key not in counts:
            order.append(key)
        counts[key] += 1
    parts = []
    for t, role, _ in order:
        name = _SHORT.get(t, t)  # NodeType is a StrEnum: its members hash and compare as their values
        if role in ("dispatch", "combine", "shared_expert", "sp_sync"):
            name = f"{name}({role})"
        c = counts[(t, role, _)]
        parts.append(f"{name}x{c}" if c > 1 else name)
    by_type: Counter[str] = Counter()
    for (t, _, _), c in counts.items():
        by_type[t] += c
    return " > ".join(parts), dict(sorted(by_type.items()))


def fold(graph: nx.DiGraph, expansion: tuple[Any, ...] | None = None) -> FoldedDag:
    """Summarise a DAG: per phase, per stage, runs of identical layers with their operator pattern.

    ``graph`` may be a working DAG's graph (nodes with ``repeat`` stand for that many layers); ``expansion``
    (``tools.core.working.full_counts`` of it) then gives the full DAG's counts and replica shapes.
    """
    replicas: set[int] = set()
    replica_sizes: list[int] = []
    pools: dict[str, list[int]] = {}
    node_counts: Counter[str] = Counter()
    edge_counts: Counter[str] = Counter()
    if expansion is not None:
        node_counts, edge_counts, reps, total_nodes, total_edges = expansion
        for rep, pool, size in reps:
            replicas.add(rep)
            replica_sizes.append(size)
            pools.setdefault(pool, []).append(size)
    else:
        for _, a in graph.nodes(data=True):
            t = a.get("type")
            node_counts[str(t)] += 1
            if t == NodeType.REPLICA:
                replicas.add(a.get("replica", 0))
                replica_sizes.append(len(a.get("devices", ())))
                pools.setdefault((a.get("meta") or {}).get("pool", "prefill+decode"), []).append(len(a["devices"]))
        edge_counts = Counter(str(a.get("type")) for _, _, a in graph.edges(data=True))
        total_nodes, total_edges = graph.number_of_nodes(), graph.number_of_edges()
    per_layer: dict[tuple[str, int], list[str]] = defaultdict(list)
    stage_nodes: dict[str, list[tuple[int, str]]] = defaultdict(list)
    first_replica = None
    for n, a in graph.nodes(data=True):
        rep = a.get("replica")
        if first_replica is None and rep is not None:
            first_replica = rep
        if rep != first_replica:
            continue
        if a.get("layer") is not None and a.get("phase"):
            for i in range(a.get("repeat") or 1):  # a folded node stands for its whole run of layers
                per_layer[(a["phase"], a["layer"] + i)].append(n)
        elif a.get("type") == NodeType.STAGE:
            stage_nodes[a.get("phase", "")].append((a.get("stage", 0), n))
    phases = []
    for phase in ("prefill", "decode"):
        stages = []
        for s, n in sorted(stage_nodes[phase]):
            a = graph.nodes[n]
            first, stop = (a.get("layers") or [0, 0])[:2]
            blocks: list[LayerBlock] = []
            for layer in range(first, stop):
                pat, counts = _pattern(graph, per_layer.get((phase, layer), []))
                if blocks and blocks[-1].pattern == pat and blocks[-1].layers[1] == layer - 1:
                    blocks[-1].layers[1] = layer
                    blocks[-1].repeat += 1
                else:
                    blocks.append(LayerBlock(layers=[layer, layer], repeat=1, pattern=pat, nodes_per_layer=counts))
            stages.append(StageView(stage=s, layers=[first, stop], devices=list(a["devices"]), blocks=blocks))
        if stages:
            phases.append(PhaseView(phase=phase, stages=stages))
    return FoldedDag(
        model=graph.graph.get("model"),
        replicas=len(replicas),
        gpus_per_replica=max(replica_sizes, default=0),
        pools=[PoolView(pool=k, replicas=len(v), gpus_per_replica=max(v)) for k, v in pools.items()],
        phases=phases,
        node_counts=dict(sorted(node_counts.items())),
        edge_counts=dict(sorted(edge_counts.items())),
        total_nodes=total_nodes,
        total_edges=total_edges,
    )


def _devices(devs: list[int]) -> str:
    if not devs:
        return "-"
    if devs == list(range(devs[0], devs[-1] + 1)) and len(devs) > 2:
        return f"GPU {devs[0]}-{devs[-1]}"
    return "GPU " + ",".join(map(str, devs))


def _folded_lines(folded: FoldedDag) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(phase, stage label, [(block id, block label)]) for the diagram renderers."""
    out = []
    for ph in folded.phases:
        for st in ph.stages:
            blocks = []
            for i, b in enumerate(st.blocks):
                rng = f"L{b.layers[0]}" if b.repeat == 1 else f"L{b.layers[0]}-{b.layers[1]} x{b.repeat}"
                blocks.append((f"{ph.phase}_s{st.stage}_b{i}", f"{rng}: {b.pattern}"))
            out.append((ph.phase, f"Stage {st.stage} ({_devices(st.devices)})", blocks))
    return out


def to_mermaid(folded: FoldedDag) -> str:
    lines = ["flowchart TD", f'  req["Request: {folded.replicas} replica(s) x {folded.gpus_per_replica} GPUs"]']
    prev_by_phase: dict[str, str] = {}
    for phase, stage_label, blocks in _folded_lines(folded):
        sid = f"{phase}_{stage_label.split()[1]}"
        lines.append(f'  {sid}["{phase} {stage_label}"]')
        lines.append(f"  {prev_by_phase.get(phase, 'req')} --> {sid}")
        prev = sid
        for bid, label in blocks:
            lines.append(f'  {bid}["{label}"]')
            lines.append(f"  {prev} --> {bid}")
            prev = bid
        prev_by_phase[phase] = prev
    if "prefill" in prev_by_phase and "decode" in prev_by_phase:
        lines.append(f"  {prev_by_phase['prefill']} -. KV cache .-> decode_0")
    return "\n".join(lines) + "\n"


def to_dot(folded: FoldedDag) -> str:
    lines = ["digraph pdag {", "  rankdir=TB; node [shape=box, fontsize=10];"]
    lines.append(f'  req [label="Request: {folded.replicas} replica(s) x {folded.gpus_per_replica} GPUs"];')
    prev_by_phase: dict[str, str] = {}
    for phase, stage_label, blocks in _folded_lines(folded):
        sid = f"{phase}_{stage_label.split()[1]}"
        lines.append(f'  {sid} [label="{phase} {stage_label}", shape=folder];')
        lines.append(f"  {prev_by_phase.get(phase, 'req')} -> {sid};")
        prev = sid
        for bid, label in blocks:
            lines.append(f'  {bid} [label="{label}"];')
            lines.append(f"  {prev} -> {bid};")
            prev = bid
        prev_by_phase[phase] = prev
    if "prefill" in prev_by_phase and "decode" in prev_by_phase:
        lines.append(f'  {prev_by_phase["prefill"]} -> decode_0 [style=dashed, label="KV cache"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_text(folded: FoldedDag, gpus_used: int, gpus_available: int | None = None) -> str:
    """The CLI's readable summary."""
    out = [f"model: {folded.model}"]
    avail = f" of {gpus_available} available" if gpus_available is not None else ""
    shape = ", ".join(
        f"{p.pool} pool: {p.replicas} replica(s) x {p.gpus_per_replica}" if len(folded.pools) > 1
        else f"{p.replicas} replica(s) x {p.gpus_per_replica}"
        for p in folded.pools
    )
    out.append(f"GPUs used: {gpus_used}{avail} ({shape})")
    for ph in folded.phases:
        out.append(f"{ph.phase}:")
        for st in ph.stages:
            out.append(f"  stage {st.stage}: layers {st.layers[0]}-{st.layers[1] - 1} on {_devices(st.devices)}")
            for b in st.blocks:
                rng = f"L{b.layers[0]}" if b.repeat == 1 else f"L{b.layers[0]}-{b.layers[1]} (x{b.repeat})"
                out.append(f"    {rng}: {b.pattern}")
    nodes = ", ".join(f"{k} {v}" for k, v in folded.node_counts.items())
    edges = ", ".join(f"{k} {v}" for k, v in folded.edge_counts.items())
    out.append(f"nodes: {folded.total_nodes} ({nodes})")
    out.append(f"edges: {folded.total_edges} ({edges})")
    return "\n".join(out)

