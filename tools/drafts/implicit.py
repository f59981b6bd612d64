"""Structure a hand draft leaves implicit, made explicit before it is judged (after ``tools.drafts.dialect`` has
read its vocabulary).

The public contract names the node types a drafter uses (RequestNode, PipelineStageNode, AttentionNode, ...) but
not pdag's own containers, and the seeds draw a collective as "AllReduce / Sync".  So drafts that follow them
faithfully say some things differently from pdag's drawings; each reading below keeps the draft's meaning:

- **phases by attribute**: nodes that carry ``phase: prefill`` / ``decode`` with no PhaseNode above them get one
  PhaseNode per phase under the request (or replica) they hang from, and each phase's first nodes hang from it;
- **edges between the phases**: an edge from a prefill node to a decode node is the KV cache when either end is a
  KV cache node (``kv``), and the start signal (``sync``) when it runs from the end of the prefill chain to the
  start of the decode chain (a container's edges to what it holds do not count as the chain) or from the prefill's
  last stage container to the decode's first, the only two links the phases may have (any other stays as drawn, to
  be judged); a start signal drawn into a node inside the decode step starts the step;
- **a gathered cache**: a collective fed only by prefill KV cache nodes that feeds only decode moves the cache onto
  the decode GPUs: a KV re-shard (a KVTransferNode), its edges ``kv``;
- **sync edges into a collective**: a shard's edge into the collective that rejoins it carries its partial
  result (``data``), however the draft labelled it (the seeds draw the collective as "AllReduce / Sync");
- **one RequestNode per replica**: RequestNodes below the root RequestNode are DP replicas (ReplicaNode);
- **a container's shortcut**: a request wired both to its first stage and to the embedding inside it reaches the
  embedding through the phase; the direct edge is dropped;
- **embedding and LM head as LinearNodes**: a LinearNode whose role (or id) says embedding or LM head is one;
- **samplers**: a node spelled as a sampler (``Sample``, ``token_sampler``: an LMHeadNode with role ``sampler``, or a
  LinearNode so named) drawn after the LM head or the gather of its logits is the end of the head's output, never a
  second head; one with no LM head before it stands for the head;
- **the first token sent back**: a SendRecvNode fed only by the prefill's logits and feeding only the start of the
  decode chain (the last pipeline stage returning the token to the first) is the start signal (``sync``);
- **replicas by index**: operators marked only with a ``replica`` index under one RequestNode hang from one
  ReplicaNode per index;
- **the cache written from the projection**: a prefill KV cache node fed by the QKV projection drawn apart from its
  attention is that attention's cache write;
- **the decode step**: a decode phase drawn without pdag's DecodeStepNode (the seeds' "a Decode DAG represents
  execution of a single token") gets one between the phase and its first nodes;
- **KV reads in decode**: a decode KV cache node's edge into the attention beside it is the cache read (``kv``),
  and so are an edge between a KV cache node and a KV transfer and a KV transfer's edge into a decode attention;
- **abbreviated stages**: where every PipelineStageNode states its layers ``[first, end)`` and draws the same
  number of them, the first few (and, in some drafts, its last one too), with no repeat count anywhere, each
  stage's last drawn layer of the first few stands for the ones not drawn (a ``repeat``); a stage drawn in full,
  or one short of the others, is left for the layer rules to judge;
- **one cache across the phases**: where the prefill's KV cache node (or the transfer that carries it to another
  pool) feeds a decode attention directly and that attention appends to a decode KV cache node, the decode node
  continues the prefill's cache (a ``kv`` edge);
- **elided layers**: a placeholder node whose type says "repeat" and which names the layers it stands for, drawn
  in the chain after the layer before them, makes that layer's nodes stand for the elided ones too (a ``repeat``);
- **expert ranges**: a layer whose Expert nodes each list two numbers that, read as half-open ranges
  ``[first, end)``, tile the experts from 0 without gap or overlap holds those ranges (read as ids, the shared
  ends would put one expert in two nodes).

What is read here is spelling, never structure: a hand-off, collective or Expert node the draft does not draw is
not drawn for it (a bare pipeline edge between stages is COMM-NO-IMPLICIT, which autofix repairs in place).
Nothing here changes a draft that already states these (pdag's own drawings pass through unchanged), and every
reading is noted.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import networkx as nx

from tools.core.dag import COMM_TYPES, CONTROL_TYPES, NodeType
from tools.drafts.vocabulary import SAMPLER, is_int, key, names_sampler, node_type, words

T = NodeType
_CONTAINERS = {T.REQUEST.value, T.REPLICA.value}
_CONTROL = {t.value for t in CONTROL_TYPES}
_COLLECTIVES = {t.value for t in COMM_TYPES} - {T.SEND_RECV.value, T.KV_TRANSFER.value}
_PHASES = ("prefill", "decode")
_KV, _KV_TRANSFER, _ATTENTION = T.KV_CACHE.value, T.KV_TRANSFER.value, T.ATTENTION.value
_SEND_RECV, _EXPERT, _LINEAR = T.SEND_RECV.value, T.EXPERT.value, T.LINEAR.value
_REQUEST, _PHASE, _STAGE = T.REQUEST.value, T.PHASE.value, T.STAGE.value


def make_explicit(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``doc`` (canonical vocabulary) with the structure it leaves implicit drawn, and one note on what was read."""
    nodes, edges = doc.get("nodes"), doc.get("edges")
    if not isinstance(nodes, list) or not isinstance(edges, list):
        return doc, []
    if not all(isinstance(n, dict) and isinstance(n.get("id"), str) for n in nodes) or \
            not all(isinstance(e, dict) and isinstance(e.get("source"), str) and isinstance(e.get("target"), str)
                    for e in edges):
        return doc, []  # the schema check reports what is malformed
    nodes = [dict(n) for n in nodes]
    edges = [dict(e) for e in edges]
    done: Counter[str] = Counter()
    by_id = {n["id"]: n for n in nodes}
    nodes, edges = _elided_layers(nodes, edges, by_id, done)
    _linear_roles(nodes, done)
    nodes, edges = _samplers(nodes, edges, by_id, done)
    nodes, edges = _token_returns(nodes, edges, by_id, done)
    _nested_requests(nodes, edges, by_id, done)
    _collective_edges(edges, by_id, done)
    _cross_phase_edges(edges, by_id, done)
    _kv_gathers(edges, by_id, done)
    _kv_from_projection(edges, by_id, done)
    _kv_reads(edges, by_id, done)
    edges = _cache_continuity(edges, by_id, done)
    _expert_ranges(nodes, done)
    _abbreviated_stages(nodes, edges, by_id, done)
    nodes, edges = _replicas_by_attribute(nodes, edges, by_id, done)
    nodes, edges = _phase_containers(nodes, edges, by_id, done)
    nodes, edges = _decode_steps(nodes, edges, done)
    if not done:
        return doc, []
    text = "; ".join(f"{what} (x{n})" if n > 1 else what for what, n in sorted(done.items()))
    return {**doc, "nodes": nodes, "edges": edges}, [f"made the draft's implicit structure explicit: {text}"]


_SPAN = re.compile(r"(?:layers?|blocks?|l)?\s*(\d+)\s*(?:\.\.|-|to|\u2013)\s*(\d+)", re.IGNORECASE)


_ID_SPAN = re.compile(r"(?:^|[^a-z])(?:layers?|blocks?|l)_?(\d+)_(\d+)(?:$|[^0-9])", re.IGNORECASE)


def _elided_span(n: dict[str, Any]) -> tuple[int, int] | None:
    """The layers ``[first, last]`` a placeholder node says it stands for: a ``[first, last]`` pair or a
    ``"first-last"`` text in its fields, its first ``layer`` and a ``repeat`` count, or a span in its id."""
    def search(v: Any) -> tuple[int, int] | None:
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return (v[0], v[1]) if v[0] <= v[1] else None
        if isinstance(v, str):
            m = _SPAN.search(v)
            return (int(m.group(1)), int(m.group(2))) if m and int(m.group(1)) <= int(m.group(2)) else None
        if isinstance(v, dict):
            for k in sorted(v, key=lambda k: "layer" not in k and "block" not in k):  # a field naming layers first
                got = search(v[k])
                if got:
                    return got
        return None
    first, count = n.get("layer"), n.get("repeat")
    counted = (first, first + count - 1) if is_int(first) and is_int(count) and count > 0 else None
    m = _ID_SPAN.search(n["id"])  # "P_L1_78": an underscore between the numbers, after a layer prefix
    in_id = (int(m.group(1)), int(m.group(2))) if m and int(m.group(1)) <= int(m.group(2)) else None
    return search({k: v for k, v in n.items() if k not in ("id", "devices", "type")}) or counted \
        or search(n["id"]) or in_id


def _is_placeholder(n: dict[str, Any]) -> bool:
    """A node whose type is no pdag type and says it stands for what is left out (``RepeatNode``,
    ``ElidedLayers``, ``OmittedBlocks``: the vocabulary's placeholder words)."""
    t = n.get("type")
    return isinstance(t, str) and t not in T.__members__.values() and \
        any(w in key(t) for w in words("placeholder_type_words"))


def _later_steps(h: dict[str, Any], g: nx.DiGraph, by_id: dict[str, dict[str, Any]],
                 edges: list[dict[str, Any]]) -> bool:
    """A placeholder whose type or id names decode steps (``ElidedDecodeSteps``, ``decode_steps_2_to_N``), in the
    decode phase, drawn at the end of the chain (nothing waits for it but through kv edges): the later steps repeat
    the drawn one, which a decode phase already stands for."""
    t, name = key(h["type"]), key(h["id"])
    if "layer" in t + name or not any(w in t or w in name for w in words("later_step_words")):
        return False
    phases = {h.get("phase")} | {by_id[p].get("phase") for p in g.predecessors(h["id"]) if p in by_id}
    return "decode" in phases and not any(e["source"] == h["id"] and e.get("type", "data") != "kv" for e in edges)


def _elided_layers(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                   done: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A placeholder node whose type says "repeat" (``RepeatNode``, ``LayerRepeat``, ``repeat_block``) and which
    names the layers it stands for (``first..last``), drawn in the chain between the layer before them and the one
    after: the layers it elides run like the layer before them, so that layer's nodes in the same phase and branch
    stand for ``last - first + 2`` layers (a ``repeat``), and the placeholder's place in the chain is an edge from
    its predecessors to its successors."""
    holders = [n for n in nodes if _is_placeholder(n)]
    if not holders:
        return nodes, edges
    g = _graph(nodes, edges)
    gone: set[str] = set()
    for h in holders:
        if _later_steps(h, g, by_id, edges):
            gone.add(h["id"])
            done["a placeholder for the decode steps after the drawn one, which stands for them"] += 1
            continue
        span = _elided_span(h)
        preds = [p for p in g.predecessors(h["id"]) if p not in gone]
        alone = g.degree(h["id"]) == 0  # drawn beside the chain, which goes from the layer before to the one after
        if span is None or not (preds or alone and h.get("phase")):
            continue
        first, last = span
        phases = {by_id[p].get("phase") for p in preds} - {None}
        phase = h.get("phase") or (phases.pop() if len(phases) == 1 else None)
        near = nx.ancestors(g, h["id"]) if preds else \
            {n["id"] for n in nodes if all(n.get(f) == h.get(f) for f in ("stage", "replica") if f in h)}
        template = [by_id[a] for a in near if by_id[a].get("layer") == first - 1
                    and by_id[a].get("phase") == phase and "repeat" not in by_id[a]]
        if not template:
            continue
        for t in template:
            t["repeat"] = last - first + 2
        gone.add(h["id"])
        done[f"a placeholder for layers {first}-{last} as repeats of layer {first - 1}"] += 1
    if not gone:
        return nodes, edges
    kept = [e for e in edges if e["source"] not in gone and e["target"] not in gone]
    for h in gone:
        ins = [e for e in edges if e["target"] == h and e["source"] not in gone and e.get("type", "data") != "kv"]
        outs = [e for e in edges if e["source"] == h and e["target"] not in gone and e.get("type", "data") != "kv"]
        kept += [{"source": i["source"], "target": o["target"], "type": o.get("type", "data")}
                 for i in ins for o in outs]
    for h in gone:
        by_id.pop(h, None)
    return [n for n in nodes if n["id"] not in gone], kept


def _samplers(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
              done: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A sampler turns the LM head's logits into the next token: a node spelled as one (``Sample``, ``sampler``,
    ``token_sampler``: the sampler role's spellings, read as an LMHeadNode with role ``sampler``, or a LinearNode
    named so) drawn after the LM head, or after the collective that gathers the head's vocabulary slices, is the
    end of that head's output: it is taken out and its edges leave from what fed it the logits (the token is what
    the head's branch ends in, so a decode step may end at it and the next phase may wait for it).  Its other
    inputs go with it.  A sampler with no LM head drawn before it stands for the head (it computes the logits it
    samples from) and stays one; a LinearNode so named stays as drawn.  No sampler becomes a second head."""
    samplers = {n["id"] for n in nodes if _is_sampler(n)}
    if not samplers:
        return nodes, edges
    gone: set[str] = set()
    changed = True
    while changed:  # a sampler drawn after another one ends the same head
        changed = False
        preds: dict[str, list[str]] = {}
        for e in edges:
            preds.setdefault(e["target"], []).append(e["source"])
        for sid in sorted(samplers - gone):
            logits = [u for u in preds.get(sid, []) if _gives_logits(u, sid, by_id, preds, samplers - gone)]
            if not logits:
                continue
            have = {(e["source"], e["target"]) for e in edges}
            outs = [e for e in edges if e["source"] == sid]
            edges = [e for e in edges if sid not in (e["source"], e["target"])]
            for e in outs:
                for u in logits:
                    if (u, e["target"]) not in have and u != e["target"]:
                        edges.append({**e, "source": u})
                        have.add((u, e["target"]))
            gone.add(sid)
            changed = True
            done["a sampler drawn after the LM head (or the gather of its logits) as the end of the head's output"] \
                += 1
    for sid in samplers - gone:
        n = by_id[sid]
        if n.get("role") == SAMPLER:
            del n["role"]
        if n.get("type") == T.LM_HEAD.value:
            done["a sampler with no LM head drawn before it as the LM head"] += 1
    for sid in gone:
        by_id.pop(sid, None)
    return _heads_in_two_steps([n for n in nodes if n["id"] not in gone], edges, by_id, done)


def _heads_in_two_steps(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                        done: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An LM head drawn as the only consumer of another in the same phase (``lm_head`` then ``logits``, or two
    samplers where no head is drawn) is that head's second step: one output per branch, its edges leaving from
    the first."""
    head = T.LM_HEAD.value
    outs: dict[str, list[str]] = {}
    for e in edges:
        outs.setdefault(e["source"], []).append(e["target"])
    merged = {v: u for u, vs in outs.items() if by_id.get(u, {}).get("type") == head and len(vs) == 1
              for v in vs if by_id.get(v, {}).get("type") == head and by_id[v].get("phase") == by_id[u].get("phase")}
    merged = {v: u for v, u in merged.items() if u not in merged}
    if not merged:
        return nodes, edges
    done["an LM head drawn after the LM head as its second step"] += len(merged)
    kept = [{**e, "source": merged.get(e["source"], e["source"])} for e in edges if e["target"] not in merged]
    for v in merged:
        by_id.pop(v, None)
    return [n for n in nodes if n["id"] not in merged], kept


def _token_returns(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                   done: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A transfer drawn between the phases that carries the first token: a SendRecvNode whose every input is what
    the prefill's first token comes out of (its LM head, or the collective gathering the head's logits) and whose
    every output starts the decode chain (under pipeline parallelism the last stage sends the token back to the first
    one, where decode embeds it).  It is the path of the start signal, which is the only thing that crosses: the
    node is taken out and its inputs signal its outputs (``sync``).  A transfer fed by anything else, hidden
    states from a layer included, stays as drawn for PHASE-PREFILL-DECODE-SPLIT to judge."""
    sends = {n["id"] for n in nodes if n.get("type") == _SEND_RECV}
    fed = {e["target"] for e in edges if e["target"] in sends and by_id.get(e["source"], {}).get("phase") == "prefill"}
    sends = {e["source"] for e in edges if e["source"] in fed and by_id.get(e["target"], {}).get("phase") == "decode"}
    if not sends:  # pdag's own stage transfers stay inside one phase
        return nodes, edges
    preds: dict[str, list[str]] = {}
    succs: dict[str, list[str]] = {}
    for e in edges:
        preds.setdefault(e["target"], []).append(e["source"])
        succs.setdefault(e["source"], []).append(e["target"])

    def token_out(u: str) -> bool:
        a = by_id.get(u, {})
        return a.get("phase") == "prefill" and (a.get("type") == T.LM_HEAD.value or (
            a.get("type") in _COLLECTIVES and any(by_id.get(p, {}).get("type") == T.LM_HEAD.value
                                                  for p in preds.get(u, []))))

    def starts_decode(v: str, t: str) -> bool:  # a decode node nothing else of decode feeds but containers
        return by_id.get(v, {}).get("phase") == "decode" and not any(
            p != t and by_id.get(p, {}).get("phase") == "decode" and by_id[p].get("type") not in _CONTROL
            for p in preds.get(v, []))

    def carried(t: str) -> list[str]:  # what the transfer is fed (a container's edge to it carries nothing)
        return [u for u in preds.get(t, []) if by_id.get(u, {}).get("type") not in _CONTROL]

    gone = {t for t in sorted(sends) if carried(t) and succs.get(t) and all(token_out(u) for u in carried(t))
            and all(starts_decode(v, t) for v in succs[t])}
    if not gone:
        return nodes, edges
    kept = [e for e in edges if e["source"] not in gone and e["target"] not in gone]
    have = {(e["source"], e["target"]) for e in kept}
    for t in sorted(gone):
        for u in carried(t):
            for v in succs[t]:
                if (u, v) not in have:
                    kept.append({"source": u, "target": v, "type": "sync"})
                    have.add((u, v))
        by_id.pop(t, None)
        done["a transfer of the first token drawn between the phases as the start signal (sync)"] += 1
    return [n for n in nodes if n["id"] not in gone], kept


def _is_sampler(n: dict[str, Any]) -> bool:
    """A node read as a sampler (its type's spelling said so), or a LinearNode whose role or id names one."""
    if n.get("type") == T.LM_HEAD.value:
        return n.get("role") == SAMPLER
    if n.get("type") != _LINEAR:
        return False
    named = _linear_name(n)
    return named is not None and names_sampler(named)


def _gives_logits(u: str, sid: str, by_id: dict[str, dict[str, Any]], preds: dict[str, list[str]],
                  samplers: set[str]) -> bool:
    """``u`` hands sampler ``sid`` the LM head's logits: the head itself (not a sampler read as one) in the same
    phase, or a collective of that phase fed by the head (the gather of a vocabulary-parallel head's slices)."""
    a = by_id.get(u, {})
    if u in samplers or a.get("phase") != by_id[sid].get("phase"):
        return False
    if a.get("type") == T.LM_HEAD.value:
        return True
    return a.get("type") in _COLLECTIVES and any(
        by_id.get(p, {}).get("type") == T.LM_HEAD.value and p not in samplers for p in preds.get(u, []))


def _linear_name(n: dict[str, Any]) -> str | None:
    """What names a LinearNode as an embedding or an LM head (or a sampler): its role, the last part of its id, or
    its whole id ending in the type's name ("rep0_dec_lm_head"), the first that names one of them."""
    names = [n.get("role"), re.split(r"[./:]", n["id"])[-1], n["id"]]
    return next((w for w in names if isinstance(w, str) and node_type(w) in (T.EMBEDDING.value, T.LM_HEAD.value)),
                None)


def _linear_roles(nodes: list[dict[str, Any]], done: Counter[str]) -> None:
    for n in nodes:
        if n.get("type") != _LINEAR:
            continue
        named = _linear_name(n)
        if named is None or names_sampler(named):  # a sampler is no LM head (``_samplers`` reads it)
            continue
        canon = node_type(named)
        n["type"] = canon
        done[f"LinearNode named {key(str(n.get('role') or n['id']))[:16]!r} as {canon}"] += 1


def _graph(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(n["id"] for n in nodes)
    g.add_edges_from((e["source"], e["target"]) for e in edges if e["source"] in g and e["target"] in g)
    return g


def _nested_requests(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                     done: Counter[str]) -> None:
    requests = [n["id"] for n in nodes if n.get("type") == _REQUEST]
    if len(requests) < 2:
        return
    g = _graph(nodes, edges)
    roots = [r for r in requests if not any(by_id.get(p, {}).get("type") in _CONTAINERS for p in g.predecessors(r))]
    if len(roots) != 1:
        return
    for r in requests:
        if r != roots[0]:
            by_id[r]["type"] = T.REPLICA.value
            done["a RequestNode below the root request as a DP replica (ReplicaNode)"] += 1


def _collective_edges(edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], done: Counter[str]) -> None:
    for e in edges:
        if e.get("type") != "sync":
            continue
        u, v = by_id.get(e["source"], {}), by_id.get(e["target"], {})
        if u.get("phase") and v.get("phase") and u.get("phase") != v.get("phase"):
            continue
        if (v.get("type") in _COLLECTIVES) != (u.get("type") in _COLLECTIVES) and \
                {u.get("type"), v.get("type")}.isdisjoint(_CONTROL):
            e["type"] = "data"
            done["a sync edge between a shard and its collective as data"] += 1


def _cross_phase_edges(edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], done: Counter[str]) -> None:
    """Prefill -> decode edges: the KV cache when a KV cache node is at either end; the start signal when it runs
    from the end of the prefill chain to the start of the decode chain.  Any other such edge (a layer's output
    wired into decode) stays data, for PHASE-PREFILL-DECODE-SPLIT to judge."""
    phase_of = {i: n.get("phase") for i, n in by_id.items()}
    cross = [e for e in edges if phase_of.get(e["source"]) == "prefill" and phase_of.get(e["target"]) == "decode"
             and e.get("type") not in ("kv", "sync")]
    if not cross:
        return
    ends = {e["source"] for e in cross} | {e["target"] for e in cross}
    inner: set[tuple[str, str]] = set()  # (node, "out"/"in") with a neighbour in its own phase on that side
    for e in edges:
        u, v = e["source"], e["target"]
        if by_id.get(u, {}).get("type") in _CONTROL or by_id.get(v, {}).get("type") in _CONTROL:
            continue  # a container's edge to what it holds carries no data: it neither feeds nor drains a chain
        if u in ends and phase_of.get(v) == phase_of.get(u):
            inner.add((u, "out"))
        if v in ends and phase_of.get(u) == phase_of.get(v):
            inner.add((v, "in"))
    for e in cross:
        kv = _KV in (by_id[e["source"]].get("type"), by_id[e["target"]].get("type"))
        start = ((e["source"], "out") not in inner and (e["target"], "in") not in inner) or (
            by_id[e["source"]].get("type") == _STAGE and by_id[e["target"]].get("type") == _STAGE)
        if kv or start:
            e["type"] = "kv" if kv else "sync"
            done["an edge from prefill to decode as " + ("the KV cache (kv)" if kv else "the start signal (sync)")] += 1


def _replicas_by_attribute(nodes: list[dict[str, Any]], edges: list[dict[str, Any]],
                           by_id: dict[str, dict[str, Any]], done: Counter[str]
                           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """DP replicas a draft marks only by a ``replica`` index on its operators, under one RequestNode: one
    ReplicaNode per index, holding the operators of that index that nothing of their own replica precedes."""
    if any(n.get("type") in (T.REPLICA.value, _PHASE) for n in nodes):
        return nodes, edges
    roots = [n["id"] for n in nodes if n.get("type") == _REQUEST]
    ops = [n for n in nodes if n.get("type") not in _CONTROL]
    index = {n["id"]: n.get("replica") for n in ops}
    if len(roots) != 1 or not ops or any(not isinstance(i, int) or isinstance(i, bool) for i in index.values()) \
            or len(set(index.values())) < 2:
        return nodes, edges
    root = roots[0]
    preds: dict[str, set[str]] = {}
    for e in edges:
        preds.setdefault(e["target"], set()).add(e["source"])
    heads = {i for i in index if not any(index.get(p) == index[i] for p in preds.get(i, ()))}
    new_nodes = list(nodes)
    new_edges = [e for e in edges if not (e["source"] == root and e["target"] in heads)]
    for r in sorted(set(index.values())):
        rid = f"{root}.replica{r}"
        while rid in by_id:
            rid += "_"
        by_id[rid] = {"id": rid, "type": T.REPLICA.value, "replica": r, "devices": []}
        new_nodes.append(by_id[rid])
        new_edges.append({"source": root, "target": rid, "type": "data"})
        new_edges += [{"source": rid, "target": h, "type": "data"} for h in sorted(heads) if index[h] == r]
        done["a ReplicaNode for the operators marked with one replica index"] += 1
    return new_nodes, new_edges


def _phase_containers(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                      done: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """PhaseNodes for a draft that marks phases only by attribute (module doc)."""
    if any(n.get("type") == _PHASE for n in nodes):
        return nodes, edges
    phased = {n["id"] for n in nodes if n.get("phase") in _PHASES and n.get("type") not in _CONTAINERS}
    containers = [n["id"] for n in nodes if n.get("type") in _CONTAINERS]
    if not phased or not containers:
        return nodes, edges
    g = _graph(nodes, edges)
    depth = {c: len(nx.ancestors(g, c)) for c in containers}
    entries: dict[tuple[str, str], list[str]] = {}
    for nid in sorted(phased):
        phase = by_id[nid]["phase"]
        preds = list(g.predecessors(nid))
        if any(by_id[p].get("phase") == phase for p in preds):
            continue
        owners = [c for c in containers if c in nx.ancestors(g, nid)]
        roots = [c for c in containers if by_id[c].get("type") == _REQUEST]
        if not owners and len(roots) == 1 and len(containers) == 1:
            owners = roots  # a phase drawn with no edge into it: it belongs to the one request there is
        if not owners:
            continue
        owner = max(owners, key=lambda c: (depth[c], c))
        if owner in nx.descendants(g, nid):
            continue  # the draft wires this node back into its container: hanging it there would close a cycle
        entries.setdefault((owner, phase), []).append(nid)
    if not entries:
        return nodes, edges
    taken = set(by_id)
    new_nodes = list(nodes)
    hung = {f for firsts in entries.values() for f in firsts}
    below_hung = set().union(*(nx.descendants(g, f) for f in hung))
    # the container's edge straight to a node its phase's first nodes already lead to (a request wired to the first
    # stage and to the embedding inside it) is a shortcut the PhaseNode replaces
    shortcut = {(e["source"], e["target"]) for e in edges if e["source"] in containers and e["target"] in phased
                and e["target"] not in hung and e["target"] in below_hung}
    if shortcut:
        done["a container's edge past its phase's first nodes, dropped"] += len(shortcut)
    new_edges = [e for e in edges if not (e["source"] in containers and e["target"] in hung)
                 and (e["source"], e["target"]) not in shortcut]
    for (owner, phase), firsts in sorted(entries.items()):
        pid = f"{owner}.{phase}"
        while pid in taken:
            pid += "_"
        taken.add(pid)
        new_nodes.append({"id": pid, "type": T.PHASE.value, "phase": phase, "devices": []})
        new_edges.append({"source": owner, "target": pid, "type": "data"})
        new_edges.extend({"source": pid, "target": f, "type": "data"} for f in firsts)
        done[f"a PhaseNode for the {phase} nodes under {owner[:24]!r}"] += 1
    return new_nodes, new_edges


def _kv_from_projection(edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], done: Counter[str]) -> None:
    """A prefill KV cache node written from the QKV projection drawn apart from its attention (the projection feeds
    the attention and the cache) is that attention's cache write: pdag's AttentionNode holds its projections."""
    feeds: dict[str, list[str]] = {}
    for e in edges:
        feeds.setdefault(e["source"], []).append(e["target"])
    for e in edges:
        u, k = by_id.get(e["source"], {}), by_id.get(e["target"], {})
        if u.get("type") != _LINEAR or k.get("type") != _KV or k.get("phase") != "prefill":
            continue
        attns = [a for a in feeds.get(e["source"], []) if by_id.get(a, {}).get("type") == _ATTENTION
                 and by_id[a].get("phase") == "prefill"]
        if len(attns) == 1 and attns[0] not in feeds.get(e["target"], []):
            e["source"] = attns[0]
            done["a prefill KV cache written from the QKV projection as its attention's write"] += 1


def _kv_gathers(edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], done: Counter[str]) -> None:
    """A collective fed only by prefill KV cache nodes that feeds only decode (a sequence-parallel prefill's cache
    gathered onto the decode GPUs) moves the cache, not activations: a KV re-shard (KVTransferNode), its edges kv."""
    ins: dict[str, list[dict[str, Any]]] = {}
    outs: dict[str, list[dict[str, Any]]] = {}
    for e in edges:
        ins.setdefault(e["target"], []).append(e)
        outs.setdefault(e["source"], []).append(e)
    for i, n in by_id.items():
        if n.get("type") not in _COLLECTIVES or not ins.get(i) or not outs.get(i):
            continue
        if all(by_id.get(e["source"], {}).get("type") == _KV and by_id[e["source"]].get("phase") == "prefill"
               for e in ins[i]) and all(by_id.get(e["target"], {}).get("phase") == "decode" for e in outs[i]):
            n["type"], n["role"] = _KV_TRANSFER, "kv_reshard"
            n.pop("phase", None)
            for e in ins[i] + outs[i]:
                e["type"] = "kv"
            done["a collective that gathers the prefill's KV cache for decode as a KV re-shard (kv)"] += 1


def _kv_reads(edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]], done: Counter[str]) -> None:
    kv_nodes = {i for i, n in by_id.items() if n.get("type") in (_KV, _KV_TRANSFER)}
    if not kv_nodes:
        return
    for e in edges:
        if e.get("type", "data") != "data" or not ({e["source"], e["target"]} & kv_nodes):
            continue
        u, v = by_id.get(e["source"], {}), by_id.get(e["target"], {})
        if u.get("type") == _KV_TRANSFER and v.get("type") == _ATTENTION and v.get("phase") == "decode":
            e["type"] = "kv"
            done["a KV transfer's edge into a decode attention as the cache it reads (kv)"] += 1
            continue
        if {u.get("type"), v.get("type")} == {_KV, _KV_TRANSFER}:
            e["type"] = "kv"
            done["a KV cache node's edge to or from a KV transfer as the cache (kv)"] += 1
        elif u.get("type") == _KV and v.get("type") == _ATTENTION and u.get("phase") == v.get("phase") == "decode":
            e["type"] = "kv"
            done["a decode KV cache node's edge into its attention as the cache read (kv)"] += 1


def _decode_steps(nodes: list[dict[str, Any]], edges: list[dict[str, Any]],
                  done: Counter[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    types = {n["id"]: n.get("type") for n in nodes}
    if T.DECODE_STEP.value in types.values():
        return nodes, edges
    phases = [n["id"] for n in nodes if n.get("type") == _PHASE and n.get("phase") == "decode"]
    phase_of = {n["id"]: n.get("phase") for n in nodes}
    for ph in phases:
        sid = f"{ph}.step"
        while sid in types:
            sid += "_"
        types[sid] = T.DECODE_STEP.value
        nodes = [*nodes, {"id": sid, "type": T.DECODE_STEP.value, "devices": []}]
        inside = nx.descendants(_graph(nodes, edges), ph)
        # the start signal from prefill (its first token) starts the step, not one node inside it
        edges = [{**e, "source": sid} if e["source"] == ph else
                 {**e, "target": sid} if e["target"] in inside and e.get("type") == "sync"
                 and phase_of.get(e["source"]) == "prefill" else e for e in edges]
        edges.append({"source": ph, "target": sid, "type": "data"})
        done["a DecodeStepNode for the decode phase's single token"] += 1
    return nodes, edges


def _expert_ranges(nodes: list[dict[str, Any]], done: Counter[str]) -> None:
    layers: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for n in nodes:
        if n.get("type") == _EXPERT:
            layers.setdefault((n.get("phase"), n.get("layer")), []).append(n)
    for group in layers.values():
        pairs = [n.get("experts") for n in group]
        if len(group) < 2 or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) for x in p)
                                     and p[1] > p[0] + 1 for p in pairs):
            continue
        spans = sorted(pairs)
        if spans[0][0] != 0 or any(a[1] != b[0] for a, b in zip(spans, spans[1:], strict=False)):
            continue
        for n in group:
            first, end = n["experts"]
            n["experts"] = list(range(first, end))
        done["expert lists [first, end) as ranges"] += 1


def _devices(n: dict[str, Any]) -> set[int]:
    d = n.get("devices")
    return {x for x in d if isinstance(x, int)} if isinstance(d, list) else set()


def _abbreviated_stages(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                        done: Counter[str]) -> None:
    stages = [n["id"] for n in nodes if n.get("type") == _STAGE and isinstance(n.get("layers"), list)
              and len(n["layers"]) == 2 and all(isinstance(x, int) for x in n["layers"])]
    if not stages or any("repeat" in n for n in nodes):
        return
    drawn_anywhere = {n["layer"] for n in nodes if isinstance(n.get("layer"), int)}
    if all(set(range(*by_id[st]["layers"])) <= drawn_anywhere for st in stages):
        return  # every layer a stage claims is drawn (any document pdag built): nothing is abbreviated
    g = _graph(nodes, edges)
    below = {st: nx.descendants(g, st) for st in stages}
    plans = []
    for st in stages:
        first, end = by_id[st]["layers"]
        inner = set().union(*(below[o] | {o} for o in stages if o in below[st]))
        members = [by_id[m] for m in below[st] - inner
                   if isinstance(by_id[m].get("layer"), int) and first <= by_id[m]["layer"] < end]
        drawn = sorted({m["layer"] for m in members})
        closing = len(drawn) >= 2 and drawn[-1] == end - 1 and drawn[-2] < end - 2  # the stage's last layer too
        prefix = drawn[:-1] if closing else drawn
        if not prefix or prefix != list(range(first, first + len(prefix))) or first + len(drawn) >= end:
            return  # a stage drawn in full, or not as a prefix of its layers (and its last): nothing is abbreviated
        plans.append((members, prefix, closing, first, end))
    if len({(len(prefix), closing) for _, prefix, closing, _, _ in plans}) != 1:
        return  # an abbreviation draws every stage alike; one stage short of the others is missing layers
    for members, prefix, closing, first, end in plans:
        last = prefix[-1]
        for m in members:
            if m["layer"] == last:
                m["repeat"] = end - last - (1 if closing else 0)
        shown = f"{len(prefix)} of its layers {first}-{end - 1}" + (" and its last" if closing else "")
        done[f"a stage drawing {shown}: the last of the first ones stands for the rest"] += 1


def _cache_continuity(edges: list[dict[str, Any]], by_id: dict[str, dict[str, Any]],
                      done: Counter[str]) -> list[dict[str, Any]]:
    kv_nodes = {i for i, n in by_id.items() if n.get("type") == _KV}
    if not kv_nodes:
        return edges
    phase = {i: by_id[i].get("phase") for i in kv_nodes}
    # what brings the prefill's cache: its KV cache nodes, or the transfers that carry it to a decode pool
    carriers = {i for i in kv_nodes if phase[i] == "prefill"} | \
        {i for i, n in by_id.items() if n.get("type") == _KV_TRANSFER}
    fed = {e["target"] for e in edges if e["source"] in carriers and e["target"] in kv_nodes}
    reads: dict[str, list[str]] = {}  # decode attention -> prefill KV nodes (or transfers) that feed it
    for e in edges:
        if e["source"] in carriers and by_id.get(e["target"], {}).get("type") == _ATTENTION:
            reads.setdefault(e["target"], []).append(e["source"])
    added = []
    for e in edges:
        a, k = e["source"], e["target"]
        if a in kv_nodes and phase[a] == "decode" and k in reads:  # the decode cache drawn feeding its attention
            a, k = k, a
        if k in kv_nodes and phase[k] == "decode" and k not in fed and a in reads:
            added += [{"source": p, "target": k, "type": "kv"} for p in reads[a]]
            fed.add(k)
            done["a decode KV cache node as the continuation of the prefill cache its attention reads (kv)"] += 1
    return edges + added
