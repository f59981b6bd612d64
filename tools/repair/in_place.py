"""Repairs in place: fix local defects of a submitted DAG in the agent's own drawing, each edit a JSON patch.

autofix_dag tries these before rebuilding a DAG from its plan, so the agent's drawing (its ids, its layout
choices) survives whatever is only locally wrong: a TP operator whose shards are never rejoined gets its
AllReduceNode, a dead-end shard its edge to the rejoin, a stage hand-off its SendRecvNode, a transfer the GPUs
it reaches, the first decode step its edge from the prefill's LM head, a norm drawn as a collective its type,
a shard stacked on a sibling's GPU the free GPU of its operator, Expert nodes sharing a GPU one node.  The
analysis reads the normalized working form (tools.core.normalize); the edits apply to the document as
submitted.  No plan is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.rules.registry import Change, Context, Violation

T = NodeType
MAX_ROUNDS = 3
_PLACE = ("phase", "replica", "stage", "layer")


class _Doc:
    """The submitted document being edited, with the JSON patch of every edit."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.ids = {n["id"] for n in doc["nodes"] if isinstance(n, dict) and isinstance(n.get("id"), str)}
        self.patch: list[dict[str, Any]] = []

    def fresh(self, base: str) -> str:
        nid, k = base, 1
        while nid in self.ids:
            k += 1
            nid = f"{base}.{k}"
        self.ids.add(nid)
        return nid

    def add_node(self, node: dict[str, Any]) -> None:
        self.doc["nodes"].append(node)
        self.patch.append({"op": "add", "path": "/nodes/-", "value": node})

    def add_edge(self, u: str, v: str, t: str = "data") -> None:
        e = {"source": u, "target": v, "type": t}
        if "edges" not in self.doc:  # a document of nodes alone: its first edge opens the list
            self.doc["edges"] = []
            self.patch.append({"op": "add", "path": "/edges", "value": []})
        self.doc["edges"].append(e)
        self.patch.append({"op": "add", "path": "/edges/-", "value": e})

    def remove_edge(self, u: str, v: str) -> None:
        for i, e in enumerate(self.doc.get("edges", [])):
            if isinstance(e, dict) and e.get("source") == u and e.get("target") == v:
                del self.doc["edges"][i]
                self.patch.append({"op": "remove", "path": f"/edges/{i}"})
                return

    def remove_node(self, nid: str) -> None:
        """Drop a node with its edges and its place in any layer fold."""
        for i in reversed(range(len(self.doc.get("edges", [])))):
            e = self.doc["edges"][i]
            if isinstance(e, dict) and nid in (e.get("source"), e.get("target")):
                del self.doc["edges"][i]
                self.patch.append({"op": "remove", "path": f"/edges/{i}"})
        for i, n in enumerate(self.doc["nodes"]):
            if isinstance(n, dict) and n.get("id") == nid:
                del self.doc["nodes"][i]
                self.patch.append({"op": "remove", "path": f"/nodes/{i}"})
                break
        folds = self.doc.get("folds")
        for i, f in enumerate((folds.get("layers") or []) if isinstance(folds, dict) else []):
            members = f.get("nodes") if isinstance(f, dict) else None
            if isinstance(members, list) and nid in members:
                j = members.index(nid)
                del members[j]
                self.patch.append({"op": "remove", "path": f"/folds/layers/{i}/nodes/{j}"})

    def set_field(self, nid: str, name: str, value: Any) -> None:
        for i, n in enumerate(self.doc["nodes"]):
            if isinstance(n, dict) and n.get("id") == nid:
                op = "replace" if name in n else "add"
                n[name] = value
                self.patch.append({"op": op, "path": f"/nodes/{i}/{name}", "value": value})
                return

    def join_fold(self, nid: str, like: str) -> None:
        """A node inserted inside a folded layer joins that layer fold."""
        folds = self.doc.get("folds")
        if not isinstance(folds, dict):
            return
        for i, f in enumerate(folds.get("layers") or []):
            if isinstance(f, dict) and like in (f.get("nodes") or []):
                f["nodes"].append(nid)
                self.patch.append({"op": "add", "path": f"/folds/layers/{i}/nodes/-", "value": nid})
                return


def _place(ctx: Context, n: str) -> dict[str, Any]:
    return {k: v for k, v in ctx.inherited[n].items() if v is not None and k in _PLACE}


def _tp_rejoins(ctx: Context, doc: _Doc, vs: list[Violation]) -> Iterator[Change]:
    """TP shards feeding a non-collective: insert the AllReduceNode; a dead-end shard: wire it to the rejoin."""
    from tools.rules.tp import REJOIN_OK, tp_chained, tp_groups

    if not any(v.rule_id == "TP-REJOIN-BEFORE-NEXT-LAYER" for v in vs):
        return
    for key, shards in sorted(tp_groups(ctx), key=lambda kv: str(kv[0])):
        members = set(shards)
        outs: dict[str, list[str]] = {}
        rejoin = [v for s in shards for v in ctx.succ[s] if ctx.types[v] in REJOIN_OK - {T.KV_CACHE}]
        for s in shards:
            outs[s] = [v for v, a in ctx.succ[s].items() if v not in members and a.get("type") != "sync"
                       and ctx.types[v] not in REJOIN_OK and not tp_chained(ctx, s, v)]
        bad = sorted({v for vs_ in outs.values() for v in vs_})
        dead = [s for s in shards if not any(ctx.types[v] in REJOIN_OK - {T.KV_CACHE} or tp_chained(ctx, s, v)
                                             for v in ctx.succ[s]) and not outs[s]]
        devs = sorted({d for s in shards for d in ctx.devices[s]})
        if bad and not rejoin:
            op = key[0] if isinstance(key[0], str) else shards[0]
            ar = doc.fresh(f"{op}.allreduce")
            node = {"id": ar, "type": str(T.ALL_REDUCE), "devices": devs, "role": "tp_sync", **_place(ctx, shards[0])}
            if isinstance(key[0], str):
                node["op"] = key[0]
            doc.add_node(node)
            doc.join_fold(ar, shards[0])
            for s in shards:
                for v in outs[s]:
                    doc.remove_edge(s, v)
                doc.add_edge(s, ar)
            for v in bad:
                doc.add_edge(ar, v)
            yield Change(rule_id="TP-REJOIN-BEFORE-NEXT-LAYER", message=f"inserted AllReduceNode {ar} on GPUs "
                         f"{devs[:16]} between the {len(shards)} shards of {op} and {', '.join(bad[:3])}",
                         field=f"dag.nodes[{ar}]", after=node)
        elif dead and rejoin:
            target = sorted(rejoin)[0]
            for s in dead:
                doc.add_edge(s, target)
            yield Change(rule_id="TP-REJOIN-BEFORE-NEXT-LAYER", message=f"wired the dead-end shard(s) "
                         f"{', '.join(dead[:3])} to the collective {target} that rejoins their operator",
                         field="dag.edges", after=[[s, target] for s in dead])


def _stage_handoffs(ctx: Context, doc: _Doc, vs: list[Violation]) -> Iterator[Change]:
    """A data edge from one stage into the next on other GPUs, with no SendRecv: insert one."""
    if not any(v.rule_id in ("COMM-NO-IMPLICIT", "PP-SENDRECV-CONSECUTIVE") for v in vs):
        return
    from tools.rules.pp import first_real

    for n in ctx.of(T.SEND_RECV):  # a transfer that does not list the GPUs it reaches
        recv = {d for v in first_real(ctx, list(ctx.succ[n])) for d in ctx.devices[v]}
        if recv - ctx.devices[n]:
            new = sorted(ctx.devices[n] | recv)
            doc.set_field(n, "devices", new)
            yield Change(rule_id="PP-SENDRECV-CONSECUTIVE", message=f"{n} now lists the receiving GPUs too: {new[:16]}",
                         field=f"dag.nodes[{n}].devices", before=sorted(ctx.devices[n]), after=new)
    for u, v, t in list(ctx.data_edges()):
        if t not in ("data", "pipeline") or ctx.is_comm(v) or ctx.types[u] in (T.SEND_RECV, T.KV_TRANSFER, T.STAGE):
            continue
        su, sv = ctx.inherited[u]["stage"], ctx.inherited[v]["stage"]
        if su is None or sv is None or su == sv or not (ctx.devices[v] - ctx.devices[u]):
            continue
        target = ctx.devices[v]
        devs = sorted(ctx.devices[u] | target)
        sr = doc.fresh(f"{u}.send")
        node = {"id": sr, "type": str(T.SEND_RECV), "devices": devs, "role": "stage_transfer",
                **{k: x for k, x in _place(ctx, u).items() if k != "layer"}}
        doc.add_node(node)
        doc.remove_edge(u, v)
        doc.add_edge(u, sr, "pipeline")
        doc.add_edge(sr, v, "pipeline")
        yield Change(rule_id="COMM-NO-IMPLICIT", message=f"inserted SendRecvNode {sr} on GPUs {devs[:16]} for the "
                     f"hand-off from stage {su} ({u}) to stage {sv} ({v})", field=f"dag.nodes[{sr}]", after=node)


def _first_token(ctx: Context, doc: _Doc, vs: list[Violation]) -> Iterator[Change]:
    if not any(v.rule_id == "DECODE-FIRST-TOKEN-FROM-PREFILL" for v in vs):
        return
    heads = [n for n in ctx.of(T.LM_HEAD) if ctx.inherited[n]["phase"] == "prefill"]
    for s in ctx.of(T.DECODE_STEP):
        if any(ctx.types[p] in (T.DECODE_STEP, T.LM_HEAD) for p in ctx.pred[s]) or not heads:
            continue
        same = [h for h in heads if ctx.inherited[h]["replica"] == ctx.inherited[s]["replica"]] or heads
        doc.add_edge(same[0], s, "sync")
        yield Change(rule_id="DECODE-FIRST-TOKEN-FROM-PREFILL", message=f"added the sync edge {same[0]} -> {s}: the "
                     "first decode step waits for the token prefill produced", field="dag.edges",
                     after=[same[0], s, "sync"])


def _retyped_norms(ctx: Context, doc: _Doc, vs: list[Violation]) -> Iterator[Change]:
    """A reduction of nothing that sits where a norm belongs (it feeds attention, an FFN or a MoE layer): the
    drafter typed a NormNode as a collective; give it its type back."""
    from tools.rules.comm import REDUCING

    bad = {n for v in vs if v.rule_id == "COMM-REDUCE-OF-SHARDS" for n in v.location.nodes}
    norm_next = {T.ATTENTION, T.FFN, T.LINEAR, T.MOE, T.ROUTER, T.LM_HEAD, T.ATTN_DP_GROUP}
    for n in sorted(bad):
        if n in ctx.g and ctx.types[n] in REDUCING and any(ctx.types[v] in norm_next for v in ctx.succ[n]):
            doc.set_field(n, "type", str(T.NORM))
            yield Change(rule_id="COMM-REDUCE-OF-SHARDS", message=f"{n} reduced no shards and feeds "
                         f"{next(iter(ctx.succ[n]))}: typed it NormNode (the node that sits there)",
                         field=f"dag.nodes[{n}].type", before=ctx.types[n], after=str(T.NORM))


def _stacked_shards(ctx: Context, doc: _Doc, vs: list[Violation]) -> Iterator[Change]:
    """Two shards of one operator on one GPU while the operator's rejoin spans a GPU no shard uses: move the
    second shard (and the KV cache it writes or reads) there."""
    if not any(v.rule_id == "GPU-SHARDS-DISTINCT" for v in vs):
        return
    for _key, shards in sorted(ctx.ops.items(), key=lambda kv: str(kv[0])):
        used: dict[int, str] = {}
        stacked = []
        for sh in sorted(shards):
            devs = ctx.devices[sh]
            if len(devs) == 1 and next(iter(devs)) in used:
                stacked.append(sh)
            for d in devs:
                used.setdefault(d, sh)
        if not stacked:
            continue
        span = {d for sh in shards for v in ctx.succ[sh] if ctx.is_comm(v) for d in ctx.devices[v]}
        free = sorted(span - set(used))
        if len(free) != len(stacked):
            continue
        for sh, gpu in zip(stacked, free, strict=True):
            old = sorted(ctx.devices[sh])
            doc.set_field(sh, "devices", [gpu])
            for kv in (*ctx.pred[sh], *ctx.succ[sh]):
                if ctx.types[kv] == T.KV_CACHE and ctx.devices[kv] == ctx.devices[sh]:
                    doc.set_field(kv, "devices", [gpu])
            yield Change(rule_id="GPU-SHARDS-DISTINCT", message=f"moved {sh} from GPU {old[0]} to GPU {gpu}, the "
                         "one GPU of its operator's collective that no other shard used", field=f"dag.nodes[{sh}]"
                         ".devices", before=old, after=[gpu])


def _shared_expert_gpus(ctx: Context, doc: _Doc, vs: list[Violation]) -> Iterator[Change]:
    """Expert nodes of one MoE layer on the same GPU(s) (one node per expert, say): an Expert node is the set of
    experts on one GPU, so they become one node holding all their experts, wired as the first of them was."""
    if not any(v.rule_id == "EP-EXPERT-NODES-EQ-GPUS" for v in vs):
        return
    stacks: dict[tuple[Any, ...], list[str]] = {}
    for n in sorted(ctx.of(T.EXPERT)):
        stacks.setdefault((*ctx.key(n, "replica", "phase", "layer"), tuple(sorted(ctx.devices[n]))), []).append(n)
    for _where, nodes in sorted(stacks.items(), key=str):
        if len(nodes) < 2:
            continue
        lists = [ctx.attr(n, "experts") for n in nodes]
        if not all(isinstance(x, list) and x for x in lists):
            continue  # without the experts each node holds, merging them would guess
        keep, rest = nodes[0], nodes[1:]
        held = sorted({e for x in lists for e in x})
        before = list(lists[0])
        for other in rest:
            for u in ctx.pred[other]:
                if u not in rest and keep not in ctx.succ[u]:
                    doc.add_edge(u, keep, str(ctx.pred[other][u].get("type", "data")))
            for v in ctx.succ[other]:
                if v not in rest and v not in ctx.succ[keep]:
                    doc.add_edge(keep, v, str(ctx.succ[other][v].get("type", "data")))
            doc.remove_node(other)
        doc.set_field(keep, "experts", held)
        yield Change(rule_id="EP-EXPERT-NODES-EQ-GPUS", message=f"merged {', '.join(rest[:3])}"
                     f"{' and more' if len(rest) > 3 else ''} into {keep}: Expert nodes on the same GPU(s) "
                     f"{sorted(ctx.devices[keep])[:8]} are one Expert node holding all their experts",
                     field=f"dag.nodes[{keep}].experts", before=before, after=held)


REPAIRS = (_tp_rejoins, _stage_handoffs, _first_token, _retyped_norms, _stacked_shards, _shared_expert_gpus)


def repair_in_place(dag: dict[str, Any]) -> tuple[dict[str, Any], list[Change], list[dict[str, Any]], list[Violation]]:
    """Up to three rounds of local repairs on a copy of ``dag``: (repaired document, changes, JSON patch,
    violations left).  A round that changes nothing ends the loop."""
    from tools.rules.validate import check, load_dag

    doc = _Doc(copy.deepcopy(dag))
    changes: list[Change] = []
    ctx, _ = load_dag(copy.deepcopy(doc.doc))
    vs = check(ctx)
    for _ in range(MAX_ROUNDS):
        if ctx.graph is None or not any(v.severity == "error" for v in vs):
            break
        made = [c for fix in REPAIRS for c in fix(ctx, doc, vs)]
        if not made:
            break
        changes.extend(made)
        ctx, _ = load_dag(copy.deepcopy(doc.doc))
        vs = check(ctx)
    return doc.doc, changes, doc.patch, vs
