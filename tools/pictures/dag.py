"""The folded DAG, drawn: per phase, per pipeline stage, each run of identical layers once (with its repeat count),
its operators grouped by kind across TP/EP shards (with the GPUs they run on), collectives drawn as pills on the
links, and the operators on the estimator's critical path outlined in red.

The layout is computed here from the replica-0 graph (``networkx.topological_generations`` gives the columns), so
nothing beyond the package is needed to see it (no Graphviz)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from tools.core.dag import CONTROL_TYPES, NodeType
from tools.pictures.canvas import Canvas

COLLECTIVES = frozenset({NodeType.ALL_REDUCE, NodeType.ALL_GATHER, NodeType.REDUCE_SCATTER, NodeType.ALL_TO_ALL,
                         NodeType.SEND_RECV, NodeType.KV_TRANSFER})
_NAMES = {
    NodeType.NORM: "norm", NodeType.ATTENTION: "attention", NodeType.KV_CACHE: "KV cache", NodeType.FFN: "FFN",
    NodeType.ROUTER: "router", NodeType.EXPERT: "experts", NodeType.EMBEDDING: "embedding",
    NodeType.LM_HEAD: "LM head", NodeType.LINEAR: "linear", NodeType.ALL_REDUCE: "all-reduce",
    NodeType.ALL_GATHER: "all-gather", NodeType.REDUCE_SCATTER: "reduce-scatter", NodeType.ALL_TO_ALL: "all-to-all",
    NodeType.SEND_RECV: "send/recv", NodeType.KV_TRANSFER: "KV transfer",
}
_ROLE = {"dispatch": "dispatch", "combine": "combine", "shared_expert": "shared expert", "tp_sync": "TP",
         "sp_sync": "SP", "write": "write", "read_append": "read+append"}
_GROUP = re.compile(r"\.g\d+$")
COMPUTE_FILL, COMM_FILL, CRIT = "#dbe6f4", "#fbe3d0", "#d62728"
BOX_W, BOX_H, PILL_H, COL_GAP, ROW_GAP = 118, 40, 32, 26, 10

Key = tuple[str, str, str]


def node_key(a: dict[str, Any]) -> Key:
    """What makes two nodes 'the same operator' of a layer: type, role and op name (TP/EP shards and attention-DP
    groups fold together)."""
    op = _GROUP.sub("", a.get("op") or "").rsplit(".", 1)[-1]
    return str(a["type"]), a.get("role") or "", op


def gpus_text(devs: list[int]) -> str:
    """Compact GPU list: 'GPU 0-7', 'GPU 0-3,8-11', 'GPU 5'."""
    if not devs:
        return "no GPU"
    ds = sorted(set(devs))
    runs: list[list[int]] = [[ds[0], ds[0]]]
    for d in ds[1:]:
        if d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    parts = [f"{a}-{b}" if b > a else f"{a}" for a, b in runs]
    text = ",".join(parts[:3]) + (f",… ({len(ds)})" if len(parts) > 3 else "")
    return f"GPU {text}"


@dataclass
class Op:
    key: Key
    count: int
    devices: list[int]
    per_node_gpus: int
    critical: bool = False

    @property
    def collective(self) -> bool:
        return self.key[0] in {str(t) for t in COLLECTIVES}

    @property
    def label(self) -> str:
        t = NodeType(self.key[0])
        name = _NAMES.get(t, self.key[0])
        role = _ROLE.get(self.key[1], "")
        if t == NodeType.ALL_TO_ALL and role:
            name = f"EP {role}"
        elif role == "shared expert":
            name = "shared expert"
        elif role in ("TP", "SP"):
            name = f"{role} {name}"
        elif t == NodeType.NORM and self.key[1]:
            name = {"pre_attention": "norm (attn)", "pre_ffn": "norm (ffn)"}.get(self.key[1], name)
        return f"{name} ×{self.count}" if self.count > 1 else name


@dataclass
class Block:
    layers: tuple[int, int]  # first, last (inclusive)
    ops: list[Op]
    edges: set[tuple[Key, Key]]

    @property
    def repeat(self) -> int:
        return self.layers[1] - self.layers[0] + 1

    def signature(self) -> tuple[Any, ...]:
        return (self.repeat, tuple((o.key, o.count) for o in self.ops), tuple(sorted(self.edges)))


@dataclass
class StageDraw:
    stage: int
    devices: list[int]
    layers: tuple[int, int]
    pre: list[Op]
    blocks: list[Block]
    post: list[Op]
    same_as: int | None = None  # folded: stands for stages stage..until, like stage `same_as`
    until: int | None = None


@dataclass
class PhaseDraw:
    phase: str
    replica: str
    stages: list[StageDraw] = field(default_factory=list)
    inbound: list[Op] = field(default_factory=list)  # links into this phase from another pool (KV hand-off)


def _contracted_edges(graph: nx.DiGraph, members: set[str], sources: set[str]) -> set[tuple[str, str]]:
    """Edges from ``sources`` to other members, looking through control nodes (MoE, group containers)."""
    nodes = graph._node
    out: set[tuple[str, str]] = set()
    for u in sorted(sources):
        stack, seen = list(graph._succ[u]), set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in members:
                out.add((u, v))
            elif nodes[v]["type"] in CONTROL_TYPES and nodes[v].get("type") != NodeType.STAGE:
                stack.extend(graph._succ[v])
    return out


def _ops(graph: nx.DiGraph, names: list[str], critical: set[Key]) -> list[Op]:
    groups: dict[Key, list[str]] = {}
    for n in names:
        groups.setdefault(node_key(graph._node[n]), []).append(n)
    out = []
    for k, ns in groups.items():
        devs = sorted({d for n in ns for d in graph._node[n].get("devices", ())})
        per = max(len(graph._node[n].get("devices", ())) for n in ns)
        # a layer-folded transfer (the per-layer KV hand-off) counts once per layer it stands for
        count = sum(graph._node[n].get("repeat", 1) for n in ns) if k[0] == NodeType.KV_TRANSFER else len(ns)
        out.append(Op(k, count, devs, per, k in critical))
    return out


def phase_views(graph: nx.DiGraph, path_nodes: set[str]) -> list[PhaseDraw]:
    """Fold replica 0's graph for drawing: per phase, per stage, blocks of identical consecutive layers."""
    nodes = graph._node
    by_stage: dict[tuple[str, int], dict[int | None, list[str]]] = defaultdict(lambda: defaultdict(list))
    stage_nodes: dict[tuple[str, int], str] = {}
    replica_of: dict[str, Any] = {}
    for n, a in nodes.items():
        ph = a.get("phase")
        if not ph or a.get("stage") is None:
            continue
        rep = n.split(".", 1)[0]
        replica_of.setdefault(ph, rep)
        if rep != replica_of[ph]:
            continue
        if a["type"] == NodeType.STAGE:
            stage_nodes[(ph, a["stage"])] = n
        elif a["type"] not in CONTROL_TYPES:
            by_stage[(ph, a["stage"])][a.get("layer")].append(n)
    handoff = [n for n, a in nodes.items() if a["type"] == NodeType.KV_TRANSFER and not a.get("phase")]
    crit: set[tuple[str, int | None, Key]] = set()
    for v in path_nodes:
        a = nodes.get(v)
        if a is not None:
            crit.add((a.get("phase") or "prefill", a.get("layer"), node_key(a)))
    out: list[PhaseDraw] = []
    for ph in ("prefill", "decode"):
        keys = sorted(s for p, s in stage_nodes if p == ph)
        if not keys:
            continue
        pd = PhaseDraw(ph, replica_of[ph])
        for s in keys:
            sa = nodes[stage_nodes[(ph, s)]]
            lay = by_stage[(ph, s)]
            none_crit = {k for p, lyr, k in crit if p == ph and lyr is None}
            loose = lay.get(None, [])
            pre = _ops(graph, [n for n in loose if nodes[n]["type"] == NodeType.EMBEDDING], none_crit)
            post = _ops(graph, [n for n in loose if nodes[n]["type"] != NodeType.EMBEDDING], none_crit)
            blocks: list[Block] = []
            for layer in sorted(k for k in lay if k is not None):
                names = lay[layer]
                member = set(names)
                reps = {node_key(nodes[n]): n for n in reversed(names)}  # shards of an operator are alike
                edges = {(node_key(nodes[u]), node_key(nodes[v]))
                         for u, v in _contracted_edges(graph, member, set(reps.values()))}
                edges = {e for e in edges if e[0] != e[1]}
                ops = _ops(graph, names, {k for p, lyr, k in crit if p == ph and lyr == layer})
                sig = (tuple((o.key, o.count) for o in ops), tuple(sorted(edges)))
                last = blocks[-1] if blocks else None
                # a layer of the folded graph stands for `repeat` identical consecutive layers
                end = layer + max(nodes[n].get("repeat", 1) for n in names) - 1
                if last and last.layers[1] == layer - 1 and (tuple((o.key, o.count) for o in last.ops),
                                                             tuple(sorted(last.edges))) == sig:
                    last.layers = (last.layers[0], end)
                    for o, n in zip(last.ops, ops, strict=True):
                        o.critical = o.critical or n.critical
                else:
                    blocks.append(Block((layer, end), ops, edges))
            first, stop = (sa.get("layers") or [0, 0])[:2]
            st = StageDraw(s, list(sa.get("devices", ())), (first, stop - 1), pre, blocks, post)
            prev = pd.stages[-1] if pd.stages else None
            if (prev and not st.pre and not prev.pre and [o.key for o in prev.post] == [o.key for o in st.post]
                    and [b.signature() for b in prev.blocks] == [b.signature() for b in st.blocks]):
                if prev.same_as is None:
                    prev.same_as, prev.until = prev.stage, prev.stage
                prev.until = s
                prev.layers = (prev.layers[0], st.layers[1])
                prev.devices = sorted(set(prev.devices) | set(st.devices))
                for mine, theirs in zip(prev.post, st.post, strict=True):
                    mine.devices = sorted(set(mine.devices) | set(theirs.devices))
                    mine.critical = mine.critical or theirs.critical
                for mine_b, theirs_b in zip(prev.blocks, st.blocks, strict=True):
                    for mine, theirs in zip(mine_b.ops, theirs_b.ops, strict=True):
                        mine.devices = sorted(set(mine.devices) | set(theirs.devices))
                        mine.critical = mine.critical or theirs.critical
                continue
            pd.stages.append(st)
        if ph == "decode" and handoff:
            pd.inbound = _ops(graph, handoff, set())
        out.append(pd)
    return out


# --------------------------------------------------------------------------------------------- drawing
def _columns(block: Block) -> list[list[Op]]:
    g = nx.DiGraph()
    g.add_nodes_from(o.key for o in block.ops)
    g.add_edges_from(block.edges)
    by_key = {o.key: o for o in block.ops}
    if not nx.is_directed_acyclic_graph(g):
        return [[o] for o in block.ops]
    return [[by_key[k] for k in sorted(gen, key=lambda k: [o.key for o in block.ops].index(k))]
            for gen in nx.topological_generations(g)]


def _draw_op(c: Canvas, o: Op, x: float, y: float) -> tuple[float, float, float, float]:
    h = PILL_H if o.collective else BOX_H
    fill = COMM_FILL if o.collective else COMPUTE_FILL
    stroke, sw = (CRIT, 2.5) if o.critical else ("#7a8aa0" if not o.collective else "#c08050", 1.0)
    each = f", {o.per_node_gpus} each" if o.count > 1 and o.per_node_gpus < len(o.devices) else ""
    c.rect(x, y, BOX_W, h, fill=fill, stroke=stroke, sw=sw, rx=h / 2 if o.collective else 4,
           cls=("op critical" if o.critical else "op") + (" collective" if o.collective else ""),
           title=f"{o.label}: {gpus_text(o.devices)}{each}" + (" (on the critical path)" if o.critical else ""))
    c.text(x + BOX_W / 2, y + (13 if o.collective else 16), o.label, 10.5, anchor="middle",
           weight="bold" if o.critical else "normal")
    c.text(x + BOX_W / 2, y + (25 if o.collective else 31), gpus_text(o.devices) + each, 9, anchor="middle",
           fill="#444", cls="devices")
    return x, y, BOX_W, h


def _draw_block(c: Canvas, b: Block, x0: float, y0: float, folded: bool = False) -> float:
    """Draw one block at (x0, y0); return its height.  ``folded``: the block stands for the same layers of several
    stages, so it is labelled by its repeat count only."""
    cols = _columns(b)
    tall = max((sum((PILL_H if o.collective else BOX_H) + ROW_GAP for o in col) for col in cols), default=0)
    h = 24 + tall + 4
    w = len(cols) * (BOX_W + COL_GAP) - COL_GAP + 20
    rep = (f"{b.repeat} layers per stage  ×{b.repeat}" if folded
           else f"layers {b.layers[0]}–{b.layers[1]}  ×{b.repeat}" if b.repeat > 1 else f"layer {b.layers[0]}")
    c.rect(x0, y0, w, h, fill="#fafafa", stroke="#999", rx=6, cls="block")
    c.text(x0 + 8, y0 + 16, rep, 11, weight="bold", cls="repeat")
    pos: dict[Key, tuple[float, float, float, float]] = {}
    for i, col in enumerate(cols):
        x = x0 + 10 + i * (BOX_W + COL_GAP)
        total = sum((PILL_H if o.collective else BOX_H) + ROW_GAP for o in col) - ROW_GAP
        y = y0 + 24 + (tall - ROW_GAP - total) / 2
        for o in col:
            pos[o.key] = _draw_op(c, o, x, y)
            y += (PILL_H if o.collective else BOX_H) + ROW_GAP
    crit = {o.key for o in b.ops if o.critical}
    for u, v in sorted(b.edges):
        if u not in pos or v not in pos:
            continue
        ux, uy, uw, uh = pos[u]
        vx, vy, _, vh = pos[v]
        on = u in crit and v in crit
        c.line(ux + uw, uy + uh / 2, vx, vy + vh / 2, stroke=CRIT if on else "#888", sw=2 if on else 1,
               arrow=True, cls="edge critical" if on else "edge")
    return h


def _draw_row(c: Canvas, ops: list[Op], x0: float, y0: float, label: str) -> float:
    if not ops:
        return 0.0
    c.text(x0, y0 + 22, label, 10, fill="#666")
    x = x0 + 40
    for i, o in enumerate(ops):
        _, _, w, h = _draw_op(c, o, x, y0 + 4)
        if i:
            on = o.critical and ops[i - 1].critical
            c.line(x - COL_GAP, y0 + 4 + BOX_H / 2, x, y0 + 4 + BOX_H / 2, stroke=CRIT if on else "#888",
                   sw=2 if on else 1, arrow=True, cls="edge critical" if on else "edge")
        x += w + COL_GAP
    return BOX_H + 10


def _stage_width(st: StageDraw) -> float:
    cols = max((len(_columns(b)) for b in st.blocks), default=1)
    return max(cols * (BOX_W + COL_GAP) + 40, (len(st.pre) + len(st.post)) * (BOX_W + COL_GAP) + 80, 420)


def draw_dag(views: list[PhaseDraw], title: str, subtitle: str = "") -> Canvas:
    width = max((_stage_width(st) for pv in views for st in pv.stages), default=600) + 40
    c = Canvas(width, 10)
    c.text(10, 20, title, 15, weight="bold")
    if subtitle:
        c.text(10, 38, subtitle, 11, fill="#555")
    y = 52.0
    for pv in views:
        c.text(10, y + 14, f"{pv.phase} (replica {pv.replica}; other replicas are copies on their own GPUs)", 13,
               weight="bold", cls="phase")
        y += 24
        for o in pv.inbound:
            _draw_op(c, o, 22, y)
            c.text(22 + BOX_W + 10, y + 20, "KV cache handed over from the prefill pool, one transfer per layer "
                   "(costed after the prefill pass; see the prefill timeline)", 10, fill="#555", cls="handoff")
            y += PILL_H + 12
        for i, st in enumerate(pv.stages):
            if i:
                c.line(30, y - 14, 30, y, stroke="#555", sw=1.5, arrow=True)
            top = y
            name = (f"stages {st.same_as}–{st.until} (×{st.until - st.same_as + 1}, same structure)"
                    if st.same_as is not None and st.until is not None else f"stage {st.stage}")
            c.text(22, y + 16, f"{name} · layers {st.layers[0]}–{st.layers[1]} · {gpus_text(st.devices)}", 12,
                   weight="bold", cls="stage")
            y += 24
            y += _draw_row(c, st.pre, 22, y, "in")
            for b in st.blocks:
                y += _draw_block(c, b, 22, y, st.same_as is not None) + 8
            y += _draw_row(c, st.post, 22, y, "out")
            c.rect(14, top, width - 28, y - top + 4, stroke="#555", sw=1, rx=8, cls="stage-frame")
            y += 18
        y += 8
    x = 14.0
    for fill, stroke, text in ((COMPUTE_FILL, "#7a8aa0", "operator (GPUs it runs on)"),
                               (COMM_FILL, "#c08050", "collective on the link"),
                               ("#ffffff", CRIT, "on the critical path")):
        c.rect(x, y, 22, 14, fill=fill, stroke=stroke, sw=2 if stroke == CRIT else 1, rx=3)
        c.text(x + 28, y + 11, text, 11)
        x += 40 + 7 * len(text)
    c.height = y + 26
    return c
