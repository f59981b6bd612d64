"""Reading a hand-drafted DAG written in another vocabulary into pdag's own, before it is judged.

An agent that drafts a DAG by hand spells it its own way: ``{"from": .., "to": ..}`` edges, ``"name"`` for the
id, ``"gpu": 3`` for the devices, ``"attention"`` or ``"AllReduce(TP)"`` for the node type, nodes keyed by id,
edges as ``["a", "b"]`` pairs or ``"a -> b"`` strings, a ``metadata`` block beside the graph.  Judging such a
draft by the published schema alone fails it on spelling before its meaning is looked at.  ``translate`` maps
every spelling listed in ``knowledge/dag_vocabulary.json`` onto the canonical one through ``STAGES``, a declared
order of named stages, and says what it read how, so that the checkers judge the structure.  What it cannot read
(a node type no table names) is left as written and fails the schema with the closest canonical names offered; a
word the draft gives two meanings at once is read neither way and refused (STRUCT-ONE-READING).

Translation never overrides: a canonical field present in the draft wins over any alias beside it.  Fields no
table knows move into the node's ``meta`` (a drafter's ``label`` or ``description`` is not an error).  The result
depends only on the draft, so the same draft always reads the same way.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as default
from functools import cache
from typing import Any, NamedTuple

import knowledge
from tools.core.dag import CONTROL_TYPES, Dag, Edge, EdgeType, Node, NodeType
from tools.core.plan import OPT_INS
from tools.drafts.doc_shape import find_graph
from tools.drafts.gpus import (
    Mesh,
    device_list,
    gpu_text,
    gpus_per_node_of,
    hosts_in_ids,
    hosts_of,
    mesh_of,
    mesh_place,
    node_local,
)
from tools.drafts.vocabulary import SAMPLER, is_int, key, names_sampler, node_type, tables, vocabulary, words

_CONTROL = {t.value for t in CONTROL_TYPES}
_LAYERLESS = _CONTROL - {NodeType.MOE.value, NodeType.ATTN_DP_GROUP.value}  # containers above the layers
_CONTAINERS_ABOVE = {NodeType.REQUEST.value, NodeType.REPLICA.value, NodeType.PHASE.value}
_ROOTS = {NodeType.REQUEST.value, NodeType.REPLICA.value}  # above the phases: never one phase's own
_NODE_FIELDS = frozenset(Node.model_fields)
_NODE_TYPES = frozenset(t.value for t in NodeType)
_EDGE_FIELDS = frozenset(Edge.model_fields)
_EDGE_TYPES = frozenset(t.value for t in EdgeType)
_ROLE = re.compile(r"[A-Za-z0-9_.+-]{1,40}")
_CANON_TOP = {"format", "version", "model", "plan", "nodes", "edges", "folds", "gpus_used", "estimate", "dag",
              "options"}


class _Notes:
    """What the translation read how, counted so that a 500-node draft gets one line per kind of reading."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, text: str) -> None:
        self.counts[text] += 1

    def lines(self) -> list[str]:
        if not self.counts:
            return []
        parts = [f"{text} (x{n})" if n > 1 else text for text, n in sorted(self.counts.items())]
        return ["read the draft's own vocabulary: " + "; ".join(parts[:12])
                + (f"; and {len(parts) - 12} more" if len(parts) > 12 else "")]


def _columns(doc: dict[str, Any], part: str) -> list[str] | None:
    """The column names of a tabular ``nodes`` / ``edges`` list (``"node_columns": ["id", "type", "devices"]``)."""
    names = {f"{stem}{suffix}" for stem in (part, part.removesuffix("s")) for suffix in words("table_header_suffixes")}
    for k, v in doc.items():
        if key(k) in names and isinstance(v, list) and v and all(isinstance(c, str) for c in v):
            return v
    return None


def _rows(raw: Any, columns: list[str] | None, part: str, notes: _Notes) -> Any:
    """Rows of a table (``[["attn0", "attention", "cuda:0-7"], ...]`` under its column names) as objects."""
    if not columns or not isinstance(raw, list) or not raw or \
            not all(isinstance(r, list) and len(r) == len(columns) for r in raw):
        return raw
    notes.add(f"{part} as rows of a table with columns {', '.join(columns[:4])}")
    return [{c: v for c, v in zip(columns, r, strict=True) if v not in ("", None)} for r in raw]


def _node_items(raw: Any, notes: _Notes) -> Any:
    """Nodes as a list; a draft that keys its nodes by id (``{"attn0": {...}}``) gives each its key as id."""
    if not isinstance(raw, dict) or not raw or not all(isinstance(b, dict | str) for b in raw.values()):
        return raw
    out = []
    for nid, body in raw.items():
        if isinstance(body, dict):
            out.append({"id": str(nid), **body} if "id" not in body else body)
        else:
            out.append({"id": str(nid), "type": body})
    notes.add("nodes keyed by id")
    return out


def _edge_items(raw: Any, notes: _Notes) -> Any:
    """Edges as a list; an adjacency object (``{"a": ["b", "c"]}``) becomes one edge per successor, and edges
    grouped by kind (``{"data": [["a", "b"]], "sync": [...]}``) one edge of that kind per entry."""
    if not isinstance(raw, dict):
        return raw
    kinds = {k: tables()["edge_types"].get(key(k)) for k in raw}
    if raw and all(kinds.values()) and all(isinstance(v, list) for v in raw.values()):
        grouped: list[Any] = []
        for k, items in raw.items():
            for item in items:
                edge = _edge(item, notes)
                grouped.append({**edge, "type": kinds[k]} if isinstance(edge, dict) else edge)
        notes.add("edges grouped by kind")
        return grouped
    out: list[Any] = []
    for u, succ in raw.items():
        for v in succ if isinstance(succ, list) else [succ]:
            out.append({"source": str(u), "target": v} if not isinstance(v, dict) else {"source": str(u), **v})
    notes.add("edges as an adjacency object")
    return out


def _fields(raw: dict[str, Any], canonical: frozenset[str], kind: str,
            notes: _Notes) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node's or edge's fields under their canonical names, and the fields no table knows."""
    aliases = tables()[f"{kind}_fields"]
    out: dict[str, Any] = {}
    spare: dict[str, Any] = {}
    for k, v in raw.items():
        canon = k if k in canonical else aliases.get(key(k))
        if canon == k:
            out[k] = v
        elif canon is not None and canon not in raw and canon not in out:
            out[canon] = v
            notes.add(f"{kind} field '{k}' as '{canon}'")
        else:
            spare[k] = v
    return out, spare


def _canonical_node(raw: dict[str, Any]) -> bool:
    """Already in pdag's vocabulary (every node pdag builds): nothing to read, and the common case on large DAGs."""
    if not raw.keys() <= _NODE_FIELDS or not isinstance(raw.get("type"), str) or raw.get("type") not in _NODE_TYPES:
        return False
    devs, phase, role = raw.get("devices"), raw.get("phase"), raw.get("role")
    return isinstance(devs, list) and all(type(d) is int for d in devs) and phase in (None, "prefill", "decode") \
        and (role is None or (isinstance(role, str) and _ROLE.fullmatch(role) is not None)) \
        and not any(isinstance(raw.get(f), str) for f in (*_COUNTED, "layers", "experts"))


def _node(raw: Any, notes: _Notes, gpus_per_node: int = 8, mesh: Mesh | None = None,
          hosts: dict[str, int] | None = None) -> Any:
    if not isinstance(raw, dict) or _canonical_node(raw):
        return raw
    node, spare = _fields(raw, _NODE_FIELDS, "node", notes)
    if isinstance(node.get("type"), dict | list):
        node["type"] = _as_text(node["type"], notes)
        return node
    if "type" not in node and isinstance(node.get("op"), str) and node_type(node["op"]):
        node["type"] = node.pop("op")  # "op": "attention" names the node's kind when nothing else does
        notes.add("node field 'op' as 'type'")
    _read_type(node, notes)
    _read_ranges(node, notes)
    _read_counts(node, notes)
    for k in [k for k in spare if key(k) in words("layer_count_fields")]:
        if _is_count(spare[k]) and "repeat" not in node and node.get("type") not in _CONTROL:
            node["repeat"] = spare.pop(k)  # an operator's node standing for that many layers
            notes.add(f"node field '{k}' on an operator as its repeat count")
    for k in [k for k in spare if key(k) in words("layer_range_fields")]:
        span = spare[k] if isinstance(spare[k], list) and len(spare[k]) == 2 and all(is_int(x) for x in spare[k]) \
            else None
        if span and span[1] > span[0] and "layer" not in node and node.get("type") != NodeType.STAGE.value:
            node["layer"] = span[0]  # [first, end): the node is the first of the layers it stands for
            node.setdefault("repeat", span[1] - span[0])
            del spare[k]
            notes.add(f"node field '{k}' [first, end) as the layer and its repeat count")
    if _is_count(node.get("layers")) and node.get("type") != NodeType.STAGE.value and "repeat" not in node:
        node["repeat"] = node.pop("layers")  # "layers": 80 on a layer's node: the layers it stands for
        notes.add("node field 'layers' (a count) as 'repeat'")
    _read_devices(node, notes, gpus_per_node, mesh or {}, hosts or {})
    if node.get("type") in (NodeType.MOE.value, NodeType.ROUTER.value) and _is_count(node.get("experts")):
        node.setdefault("meta", {}).setdefault("num_experts", node.pop("experts"))  # how many, not which
        notes.add("a MoE layer's expert count kept in meta")
    if "devices" not in node and node.get("type") in (NodeType.KV_TRANSFER.value, NodeType.SEND_RECV.value):
        ends = {k: v for k, v in spare.items() if key(k) in words("endpoint_fields")}
        got = [gpu_text(v, gpus_per_node, hosts or {}) for v in ends.values()]
        if ends and all(g is not None for g in got):
            node["devices"] = sorted({i for g in got for i in g or []})
            for k in ends:
                spare.pop(k)
            notes.add("a transfer's GPU endpoints ('from' / 'to') as its devices")
    _read_phase(node, notes)
    if "phase" not in node and isinstance(node.get("id"), str) and node.get("type") not in _CONTROL:
        phases = tables()["phases"]
        named = {phases[t] for t in map(key, re.split(r"[./:_\-\s]+", node["id"])[:-1]) if t in phases}
        if len(named) == 1:  # "pf.L0.attn", "decode/stage0/ffn": the phase its id names
            node["phase"] = named.pop()
            notes.add("phase from the node's id")
    if "layer" not in node and "repeat" not in node and isinstance(node.get("id"), str) \
            and node.get("type") not in _LAYERLESS:
        named_layers = {int(m.group(2)) for t in re.split(r"[./:_\-\s]+", node["id"])[:-1]
                        for m in [re.fullmatch(r"([a-z]+)(\d+)", t.lower())]
                        if m and m.group(1) in words("layer_id_prefixes")}
        if len(named_layers) == 1:  # "prefill.s0.L39.attn.tp0": the layer its id names
            node["layer"] = named_layers.pop()
            notes.add("layer from the node's id")
    devs = node.get("devices", None)
    if node.get("type") in _CONTROL and ("devices" not in node or isinstance(devs, dict) or (
            isinstance(devs, str) and key(devs) in words("all_gpus") | words("no_gpus"))):
        if "devices" in node:
            node.setdefault("meta", {}).setdefault("devices", node["devices"])
        node["devices"] = []  # a container's GPUs are those of what it holds (normalization fills them in)
        notes.add("containers without GPU ids: the GPUs of their contents")
    if is_int(node.get("id")):
        node["id"] = str(node["id"])
        notes.add("numeric node ids as text")
    for k in [k for k in spare if key(k) in words("shard_detail_fields")]:
        node.setdefault("meta", {}).setdefault("shard_detail", {})[k] = spare.pop(k)  # prose per GPU, no dimension
        notes.add(f"per-GPU shard descriptions ('{k}') kept in meta")
    if spare:
        meta = dict(node["meta"]) if isinstance(node.get("meta"), dict) else {}
        for k, v in spare.items():
            meta.setdefault(k, v)
        node["meta"] = meta
        notes.add("unknown node fields kept in meta: " + ", ".join(sorted(spare)[:4]))
    return node


def _as_text(value: dict[str, Any] | list[Any], notes: _Notes) -> str:
    """A type written as an object or a list names no type: its JSON text goes on, so the schema refuses it
    (STRUCT-KNOWN-TYPES) quoting what was written, and nothing downstream meets an unhashable type."""
    notes.add("a type written as an object or a list kept as its JSON text")
    return json.dumps(value, sort_keys=True)[:60]


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _read_type(node: dict[str, Any], notes: _Notes) -> None:
    raw = node.get("type")
    if not isinstance(raw, str) or raw in NodeType.__members__.values():
        return
    canon = node_type(raw)
    if canon is None:
        return
    node["type"] = canon
    k = key(re.sub(r"[(\[{].*?[)\]}]", "", raw))
    role = SAMPLER if canon == NodeType.LM_HEAD.value and names_sampler(raw) else tables()["roles"].get(k)
    if role == SAMPLER and isinstance(node.get("role"), str) and not _ROLE.fullmatch(node["role"]):
        node.setdefault("meta", {}).setdefault("role", node.pop("role"))  # a sentence about the sampling
    if role and "role" not in node:
        node["role"] = role
    # a sampler is read as the LM head's end (tools/drafts/implicit.py), or as the head where none is drawn before it
    notes.add(f"type '{raw}' as a sampler ({canon}, role '{SAMPLER}')" if node.get("role") == SAMPLER
              else f"type '{raw}' as {canon}")
    suffixes = "|".join(sorted(words("phase_type_suffixes"), key=len, reverse=True))
    phase = tables()["phases"].get(k) or tables()["phases"].get(re.sub(rf"(?:{suffixes}|\d+)+$", "", k))
    if canon == NodeType.PHASE.value and phase and "phase" not in node:
        node["phase"] = phase


def _read_devices(node: dict[str, Any], notes: _Notes, gpus_per_node: int, mesh: Mesh,
                  hosts: dict[str, int]) -> None:
    devs = node.get("devices")
    if devs is None or (isinstance(devs, list) and all(is_int(d) for d in devs)):
        return
    got = mesh_place(devs, mesh)
    if got is not None:
        node["devices"] = sorted(set(got))
        notes.add("GPUs named by the draft's device mesh (axis and coordinate)")
        return
    got = node_local(devs, gpus_per_node)
    if got is not None:
        node["devices"] = got
        notes.add("GPUs given as a machine and its local GPU ids")
        return
    got = device_list(devs, gpus_per_node, hosts)
    if got is not None:
        node["devices"] = sorted(set(got))
        notes.add("a single GPU number as the devices list" if is_int(devs) else "GPU ids written as text or ranges")


def _read_phase(node: dict[str, Any], notes: _Notes) -> None:
    p = node.get("phase")
    if isinstance(p, str) and p not in ("prefill", "decode"):
        canon = tables()["phases"].get(key(p))
        if canon:
            node["phase"] = canon
            notes.add(f"phase '{p}' as {canon}")
        else:  # "all", "both", "transfer": no one phase; the structure says where it belongs
            node.setdefault("meta", {}).setdefault("phase", p)
            del node["phase"]
            notes.add(f"phase '{p}' as no phase of its own")
    role = node.get("role")
    if isinstance(role, str) and not _ROLE.fullmatch(role):  # a sentence, not a role: kept as a note
        node.setdefault("meta", {}).setdefault("role", role)
        del node["role"]
        notes.add("free-text roles kept in meta")


def _span(value: Any) -> tuple[int, int] | None:
    """``"0-31"`` / ``"63..125"`` as (first, last), inclusive."""
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"\s*[a-z_]*(\d+)\s*(?:-|\.\.|to|:)\s*[a-z_]*(\d+)\s*", value.lower())
    if not m or int(m.group(1)) > int(m.group(2)):
        return None
    return int(m.group(1)), int(m.group(2))


_INDEXES = ("layer", "stage", "replica", "tp_rank", "sp_rank", "ep_rank", "attn_group")
_COUNTED = ("layer", "stage", "replica", "tp_rank", "sp_rank", "ep_rank", "attn_group", "heads", "kv_heads", "repeat")


def _read_counts(node: dict[str, Any], notes: _Notes) -> None:
    """Whole-number fields written as text: ``"tp0"``, ``"16 of 32"``, ``"3"``."""
    for field in _COUNTED:
        v = node.get(field)
        if isinstance(v, str):
            m = re.fullmatch(r"\s*[a-z_]*?(\d+)(?:\s*(?:of|/)\s*\d+)?\s*", v.lower())
            nums = re.findall(r"\d+", v)
            if m:
                node[field] = int(m.group(1))
                notes.add(f"{field} written as text ('{v[:12]}')")
            elif field in _INDEXES and len(nums) == 1 and re.search(r"\d+\s*$", v):  # "prefill.stage0"
                node[field] = int(nums[0])
                notes.add(f"{field} written as a name ('{v[:16]}')")
            elif len(nums) > 1:  # a description ("q heads 0-15, kv heads 0-3"): kept, the structure says the rest
                node.setdefault("meta", {}).setdefault(field, v)
                del node[field]
                notes.add(f"{field} written as a description, kept in meta")


def _read_ranges(node: dict[str, Any], notes: _Notes) -> None:
    """Layer and expert spans written as text: a layer's node standing for layers "0-31", a stage holding
    "63-125", an expert node holding experts "0-15"."""
    for field in ("layers", "repeat"):
        v = node.get(field)
        if isinstance(v, str) and re.fullmatch(r"\s*[x×*]\s*\d+\s*", v.lower()) and \
                node.get("type") != NodeType.STAGE.value:
            del node[field]
            node["repeat"] = int(re.sub(r"\D", "", v))  # "x80": the node stands for 80 layers
            notes.add(f"{field} '{v.strip()}' as the repeat count")
    for field in ("layer", "layers", "experts"):
        span = _span(node.get(field))
        if span is None:
            continue
        first, last = span
        if field == "experts":
            node["experts"] = list(range(first, last + 1))
        elif field == "layers" or node.get("type") == NodeType.STAGE.value:
            if field == "layer":
                del node["layer"]
            node["layers"] = [first, last + 1]
        else:
            node["layer"] = first
            if last > first and "repeat" not in node:
                node["repeat"] = last - first + 1
        notes.add(f"{field} written as a span '{first}-{last}'")


_ARROW = re.compile(r"^\s*(.+?)\s*(?:->|→|=>|-->)\s*(.+?)\s*$")


def _edge(raw: Any, notes: _Notes) -> Any:
    if isinstance(raw, dict) and raw.keys() <= _EDGE_FIELDS and isinstance(raw.get("source"), str) and \
            isinstance(raw.get("target"), str) and isinstance(raw.get("type", "data"), str) and \
            raw.get("type", "data") in _EDGE_TYPES:
        return raw
    t = tables()
    if isinstance(raw, str):
        m = _ARROW.match(raw)
        if not m:
            return raw
        notes.add("edges written 'a -> b'")
        target, kind = m.group(2), None
        tail = re.fullmatch(r"(.+?)\s*(?:\((\w+)\)|\[(\w+)\]|:\s*(\w+))", target)
        if tail and not (tail.group(4) and key(tail.group(4)) not in t["edge_types"]):
            # "a -> b (pipeline)", "a -> b [kv]", "a -> b : sync"; not "a -> prefill:lm_head", a section's id
            target, kind = tail.group(1), next(g for g in tail.groups()[1:] if g)
        edge = {"source": m.group(1), "target": target}
        if kind:
            edge["type"] = t["edge_types"].get(key(kind), kind)
        return edge
    if isinstance(raw, list | tuple) and len(raw) in (2, 3) and all(isinstance(x, str | int) for x in raw[:2]):
        notes.add("edges as [source, target] pairs")
        edge = {"source": str(raw[0]), "target": str(raw[1])}
        if len(raw) == 3 and isinstance(raw[2], str):
            edge["type"] = raw[2]
        raw = edge
    if not isinstance(raw, dict):
        return raw
    edge, spare = _fields(raw, _EDGE_FIELDS, "edge", notes)
    for k in ("source", "target"):
        if is_int(edge.get(k)):
            edge[k] = str(edge[k])
    et = edge.get("type")
    if isinstance(et, dict | list):
        edge["type"] = _as_text(et, notes)
    elif isinstance(et, str) and et not in EdgeType.__members__.values():
        canon = t["edge_types"].get(key(et))
        if canon:
            edge["type"] = canon
            notes.add(f"edge type '{et}' as {canon}")
    if spare:
        notes.add("unknown edge fields dropped: " + ", ".join(sorted(spare)[:4]))
    return edge


def _top_level(doc: dict[str, Any], notes: _Notes) -> dict[str, Any]:
    t = tables()["document"]
    out: dict[str, Any] = {}
    dropped = []
    for k, v in doc.items():
        if k in _CANON_TOP:
            out[k] = v
            continue
        canon = t.get(key(k))
        if canon == "edges" and key(k) in words("predecessor_fields") and isinstance(v, dict) and v and all(
                isinstance(ps, list) and all(isinstance(p, str) for p in ps) for ps in v.values()) \
                and canon not in doc and canon not in out:  # deps[x] = what x waits for: edges into x
            out[canon] = [{"source": p, "target": str(x)} for x, ps in v.items() for p in ps]
            notes.add(f"'{k}' as each node's predecessors (edges into it)")
        elif canon is not None and canon not in doc and canon not in out:
            out[canon] = v
            notes.add(f"'{k}' as '{canon}'")
        elif key(k) in words("metadata_blocks") and isinstance(v, dict):
            _claims_from(v, out, notes)
        else:
            dropped.append(k)
    if dropped:
        notes.add("top-level fields ignored: " + ", ".join(sorted(dropped)[:4]))
    return out


def _claims_from(block: dict[str, Any], out: dict[str, Any], notes: _Notes) -> None:
    """A ``metadata`` block's model name and stated GPU count, which the checkers compare with the drawing."""
    model = next((v for k, v in block.items() if key(k) in words("metadata_model_fields") and v), None)
    if isinstance(model, str) and "model" not in out:
        out["model"] = model
        notes.add("metadata.model as the DAG's model")
    opts = block.get("options") if isinstance(block.get("options"), dict) else {}
    for k in OPT_INS:
        v = block.get(k, opts.get(k))
        if isinstance(v, bool) and k not in out.get("options", {}):
            out.setdefault("options", {})[k] = v
            notes.add(f"metadata.{k} as the draft's opt-in")
    hw = block.get("hardware") if isinstance(block.get("hardware"), dict) else {}
    for k, v in [*block.items(), *hw.items()]:
        if key(k) in words("gpu_count_fields") and _is_count(v) and "gpus_used" not in out:
            out["gpus_used"] = v
            notes.add(f"metadata.{k} as the DAG's claimed GPU count")
        elif key(k) in words("metadata_gpu_fields") and isinstance(v, str) and v and "gpu" not in out:
            out["gpu"] = v  # the accelerator a plan inferred from the drawing runs on (autofix's rebuild)
            notes.add(f"metadata.{k} as the DAG's GPU type")
    read = words("metadata_model_fields") | words("gpu_count_fields") | words("metadata_gpu_fields") | {
        "options", *OPT_INS}
    unread = sorted(k for k in block if key(k) not in read and not (k == "hardware" and hw and all(
        key(h) in words("gpu_count_fields") | words("metadata_gpu_fields") for h in hw)))
    if unread:  # said, so that a claim there (a GPU type, a degree) is not taken for one pdag checked or used
        notes.add("metadata fields not read (the drawing decides): " + ", ".join(unread[:6]))


@cache
def _plan_fields() -> frozenset[str]:
    return frozenset(knowledge.load_json("schemas/plan.schema.json")["properties"])


@dataclass
class _Draft:
    """A draft while it is read: the document as written (``doc``, once unwrapped), what has been read so far in
    pdag's vocabulary (``out``), the notes, the words refused for carrying two meanings, and the draft's own
    statements of its machines and device mesh that the GPU spellings are read against."""

    doc: dict[str, Any]
    notes: _Notes = default(default_factory=_Notes)
    out: dict[str, Any] = default(default_factory=dict)
    refused: list[tuple[str, str]] = default(default_factory=list)
    gpus_per_node: int = 8
    mesh: Mesh = default(default_factory=dict)
    hosts: dict[str, int] = default(default_factory=dict)


def _unwrap(d: _Draft) -> None:
    """A ``graph`` / ``dag`` wrapper (``graph_wrappers``) around the node and edge lists: its contents as the
    document's."""
    def holds_nodes(block: dict[str, Any]) -> bool:
        return any(tables()["document"].get(key(k)) == "nodes" for k in block)

    for wrapper in [k for k in d.doc if key(k) in words("graph_wrappers")]:
        inner = d.doc.get(wrapper)
        if "nodes" not in d.doc and isinstance(inner, dict) and (holds_nodes(inner) or any(
                isinstance(v, dict) and "nodes" in v for v in inner.values())):
            d.doc = {**{k: v for k, v in d.doc.items() if k != wrapper}, **inner}
            d.notes.add(f"the '{wrapper}' wrapper")


def _sections(d: _Draft) -> None:
    """``"prefill": {nodes, edges}`` / ``"decode": {...}`` sections (``phases`` + ``section_suffixes``): one node
    and edge list, each node's ``phase`` from its section."""
    d.doc = _phase_sections(d.doc, d.notes)


def _elsewhere(d: _Draft) -> None:
    """A graph kept outside ``nodes`` / ``edges`` (node objects in lists, id-keyed maps, trees, a DOT text;
    tools/drafts/doc_shape.py): its nodes and edges as the document's; the draft's own ``format`` name dropped."""
    if any(k == "nodes" or tables()["document"].get(key(k)) == "nodes" for k in d.doc):
        return
    found = find_graph(d.doc, d.notes)
    if found:
        graph, used = found
        if isinstance(d.doc.get("format"), str) and d.doc["format"] != "pdag.dag":
            used.add("format")
            d.notes.add(f"the draft's format name '{d.doc['format'][:40]}' dropped")
        d.doc = {**{k: v for k, v in d.doc.items() if k not in used}, **graph}


def _document(d: _Draft) -> None:
    """Top-level keys (``document``: ``vertices`` -> ``nodes``, ``links`` -> ``edges``; a ``deps`` map -> edges
    into each node), a ``metadata`` block's model, opt-ins and GPU count (``metadata_blocks``) as the DAG's
    ``model``, ``options`` and ``gpus_used``; the machines and mesh the draft states, for its GPU spellings."""
    d.out = _top_level(d.doc, d.notes)
    d.gpus_per_node = gpus_per_node_of(d.doc)


def _model_and_plan(d: _Draft) -> None:
    """A model object as its name (``model_name_fields``); a plan written as prose, and a plan's fields the plan
    schema does not have, dropped."""
    out = d.out
    if isinstance(out.get("model"), dict):
        model = out.pop("model")
        name = next((v for k, v in model.items() if key(k) in words("model_name_fields") and isinstance(v, str)),
                    None)
        if name:
            out["model"] = name
            d.notes.add("the model object by its name")
    if isinstance(out.get("plan"), str):  # a sentence describing the plan, not the plan object
        out.pop("plan")
        d.notes.add("a 'plan' written as prose ignored")
    if isinstance(out.get("plan"), dict):
        extra = sorted(k for k in out["plan"] if k not in _plan_fields())
        if extra:  # a drafter's own notes beside the plan's fields
            out["plan"] = {k: v for k, v in out["plan"].items() if k not in extra}
            d.notes.add("plan fields ignored: " + ", ".join(extra[:4]))


def _table_rows(d: _Draft) -> None:
    """Nodes or edges as rows of a table under column names (``node_columns`` + ``table_header_suffixes``) as
    objects keyed by those names."""
    for part in ("nodes", "edges"):
        if part in d.out:
            d.out[part] = _rows(d.out[part], _columns(d.doc, part), part, d.notes)


def _node_list(d: _Draft) -> None:
    """Nodes keyed by id as a list with ``id``; the draft's device mesh (``mesh_blocks``) and machines
    (``host_list_fields``, else machine names inside the GPU ids) for reading its GPU spellings."""
    if "nodes" not in d.out:
        return
    d.out["nodes"] = _node_items(d.out["nodes"], d.notes)
    d.mesh, d.hosts = mesh_of(d.doc, d.gpus_per_node), hosts_of(d.doc)
    if not d.hosts and isinstance(d.out["nodes"], list):
        d.hosts = hosts_in_ids(d.out["nodes"])
        if d.hosts:
            d.notes.add("machines named in the GPU ids (" + ", ".join(list(d.hosts)[:3])
                        + ") numbered in order of first appearance")


def _two_readings(d: _Draft) -> None:
    """A node key that is both a node field and a key of a mesh placement (``rank``: the node's GPU ids, or its
    coordinate on the mesh axis it names beside it, ``refused_readings``) is read neither way: refused, naming
    both readings, and kept in the node's ``meta``."""
    nodes = d.out.get("nodes")
    if not d.mesh or not isinstance(nodes, list):
        return
    table = vocabulary()["refused_readings"]["node_key_or_mesh_place"]
    both = {s for s, canon in tables()["node_fields"].items() if canon == table["node_field"]} \
        & words(table["mesh_fields"])
    for i, n in enumerate(nodes):
        if not isinstance(n, dict) or table["node_field"] in n:
            continue
        axis = next((v for k, v in n.items() if key(k) in words("mesh_axis_fields") and isinstance(v, str)
                     and key(v) in d.mesh), None)
        word = next((k for k in n if key(k) in both), None)
        if axis is None or word is None:
            continue
        offered = ", or ".join(f"'{w}' for {what}" for w, what in table["write"].items())
        d.refused.append((f"dag.nodes[{i}].{word}",
                          f"node {str(n.get('id', i))[:40]!r}: '{word}' reads two ways here: the node's GPU ids "
                          f"({n[word]!r}), or its coordinate on the mesh axis '{axis}' it names beside it; write "
                          f"{offered}"))
        meta = n["meta"] if isinstance(n.get("meta"), dict) else {}
        nodes[i] = {**{k: v for k, v in n.items() if k not in (word, "meta")}, "meta": {**meta, word: n[word]}}


def _nodes(d: _Draft) -> None:
    """Each node's own spellings (``node_fields``, ``node_types``, ``roles``, ``phases``, GPU spellings, counts and
    spans written as text, a layer or phase named in its id); fields no table knows kept in ``meta``."""
    if isinstance(d.out.get("nodes"), list):
        d.out["nodes"] = [_node(n, d.notes, d.gpus_per_node, d.mesh, d.hosts) for n in d.out["nodes"]]


def _initials(d: _Draft) -> None:
    """Ids opening with a lone ``P`` / ``D`` (``phase_initials``) as the node's ``phase``, where the draft marks no
    phase otherwise."""
    if isinstance(d.out.get("nodes"), list):
        _letter_phases(d.out["nodes"], d.notes)


def _edges(d: _Draft) -> None:
    """Edges as a list of ``source`` / ``target`` / ``type`` objects (``edge_fields``, ``edge_types``): from an
    adjacency object, edges grouped by kind, ``[a, b]`` pairs, ``"a -> b"`` text, an edge to several nodes."""
    if "edges" in d.out:
        edges = _edge_items(d.out["edges"], d.notes)
        d.out["edges"] = [x for e in edges for x in _fan_out(_edge(e, d.notes), d.notes)] \
            if isinstance(edges, list) else edges


def _edges_in_nodes(d: _Draft) -> None:
    """Edges written inside the nodes (``predecessor_fields``, ``successor_fields``) as edges, where every id
    they name is a node of the draft."""
    if isinstance(d.out.get("nodes"), list):
        embedded = _embedded_edges(d.out["nodes"], d.notes)
        if embedded:
            d.out["edges"] = (d.out["edges"] if isinstance(d.out.get("edges"), list) else []) + embedded


class Stage(NamedTuple):
    name: str
    read: Callable[[_Draft], None]


STAGES: tuple[Stage, ...] = (  # in this order: each reads what the stages before it have put in place
    Stage("unwrap", _unwrap),
    Stage("phase sections", _sections),
    Stage("graph elsewhere", _elsewhere),
    Stage("document keys", _document),
    Stage("model and plan", _model_and_plan),
    Stage("table rows", _table_rows),
    Stage("node list", _node_list),
    Stage("two readings", _two_readings),
    Stage("nodes", _nodes),
    Stage("phase initials", _initials),
    Stage("edges", _edges),
    Stage("edges in nodes", _edges_in_nodes),
)


class Reading(NamedTuple):
    dag: dict[str, Any]
    notes: list[str]
    refused: list[tuple[str, str]]  # (JSON path, message): a word the draft gives two meanings, read neither way


def translate(doc: dict[str, Any]) -> Reading:
    """``doc`` in pdag's vocabulary read through ``STAGES``, one note saying what was read how (none for a
    canonical document), and the words refused for carrying two meanings (STRUCT-ONE-READING)."""
    d = _Draft(doc)
    for stage in STAGES:
        stage.read(d)
    return Reading(d.out, d.notes.lines(), d.refused)


def _letter_phases(nodes: list[Any], notes: _Notes) -> None:
    """Ids that open with a lone "P" or "D" ("P.L0.attn", "D/L0/ffn") name the phase, where the draft marks no
    phase otherwise and both letters occur (one letter alone could be anything)."""
    ops = [n for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str) and n.get("type") not in _CONTROL]
    if not ops or any(n.get("phase") for n in ops):
        return
    parts = {n["id"]: re.split(r"[./:_\-\s]+", n["id"]) for n in nodes if isinstance(n, dict)
             and isinstance(n.get("id"), str)}
    letters = tables()["phase_initials"]
    if not set(letters) <= {parts[n["id"]][0].lower() for n in ops}:
        return
    for n in nodes:
        words_of = parts.get(n.get("id")) if isinstance(n, dict) else None
        if words_of and len(words_of) > 1 and words_of[0].lower() in letters and "phase" not in n \
                and n.get("type") not in _CONTAINERS_ABOVE:
            n["phase"] = letters[words_of[0].lower()]
            notes.add("phase from the id's leading P or D")


def _fan_out(edge: Any, notes: _Notes) -> list[Any]:
    """An edge whose source or target lists several nodes (``{"source": "a", "target": ["b", "c"]}``) is one edge
    to each."""
    if not isinstance(edge, dict):
        return [edge]
    src, dst = edge.get("source"), edge.get("target")
    if not (isinstance(src, list) or isinstance(dst, list)):
        return [edge]
    srcs, dsts = src if isinstance(src, list) else [src], dst if isinstance(dst, list) else [dst]
    if not all(isinstance(x, str) for x in srcs + dsts):
        return [edge]
    notes.add("an edge to several nodes as one edge each")
    return [{**edge, "source": u, "target": v} for u in srcs for v in dsts]


def _embedded_edges(nodes: list[Any], notes: _Notes) -> list[dict[str, Any]]:
    """Edges a draft writes inside its nodes (``"inputs": ["attn0"]``, ``"depends_on"``, ``"next"``), kept in
    ``meta`` by the node reader: read as edges where every reference names a node of the draft (the node's entry in
    ``nodes`` is replaced by a copy without those fields; the caller's document is never changed)."""
    ids = {n["id"] for n in nodes if isinstance(n, dict) and isinstance(n.get("id"), str)}
    out: list[dict[str, Any]] = []
    for i, n in enumerate(nodes):
        meta = n.get("meta") if isinstance(n, dict) else None
        if not isinstance(meta, dict) or not isinstance(n.get("id"), str):
            continue
        kept = dict(meta)
        for k in meta:
            before = key(k) in words("predecessor_fields")
            if not before and key(k) not in words("successor_fields"):
                continue
            refs = meta[k] if isinstance(meta[k], list) else [meta[k]]
            typed = meta[k] if isinstance(meta[k], dict) else None
            kinds = {t: tables()["edge_types"].get(key(t)) for t in typed} if typed else {}
            if typed and kinds and all(kinds.values()):  # {"data": ["b"], "sync": ["ar"]}: the edges by kind
                refs = [{"id": r, "type": kinds[t]} for t, rs in typed.items()
                        for r in (rs if isinstance(rs, list) else [rs])]
            found = []
            for r in refs:
                ref, kind = (_reference(r), r.get("type")) if isinstance(r, dict) else (r, None)
                if isinstance(ref, str) and ref in ids:
                    u, v = (ref, n["id"]) if before else (n["id"], ref)
                    found.append({"source": u, "target": v, **({"type": kind} if isinstance(kind, str) else {})})
            if len(found) == len(refs):
                out += found
                del kept[k]
                notes.add(f"node field '{k}' as edges")
        if len(kept) < len(meta):
            nodes[i] = {**{f: v for f, v in n.items() if f != "meta"}, **({"meta": kept} if kept else {})}
    return [_edge(e, notes) for e in out]


def _reference(ref: dict[str, Any]) -> Any:
    """The node an edge written inside a node refers to, in an object (``{"id": "b", "type": "sync"}``): under a
    ``reference_fields`` key, else an edge's source spelling."""
    return next((v for k, v in ref.items() if key(k) in words("reference_fields")), None) or next(
        (v for k, v in ref.items() if tables()["edge_fields"].get(key(k)) == "source"), None)


def _phase_sections(doc: dict[str, Any], notes: _Notes) -> dict[str, Any]:
    """A draft split into ``"prefill": {nodes, edges}`` and ``"decode": {...}`` sections (beside any top-level
    nodes): one node and edge list, each section's nodes marked with its phase where they say none."""
    phases = tables()["phases"]

    def phase_of(name: str) -> str | None:
        suffixes = "|".join(sorted(words("section_suffixes"), key=len, reverse=True))
        return phases.get(re.sub(f"(?:{suffixes})+$", "", key(name))) or phases.get(key(name))

    sections = {k: v for k, v in doc.items() if isinstance(v, dict) and "nodes" in v and phase_of(k)}
    if not sections:
        return doc
    out = {k: v for k, v in doc.items() if k not in sections}
    nodes: list[Any] = list(_node_items(out.get("nodes", []), notes) or [])
    edges: list[Any] = list(_edge_items(out.get("edges", []), notes) or [])
    for k in [k for k, v in out.items() if isinstance(v, dict) and isinstance(v.get("id"), str)
              and isinstance(v.get("type"), str) and node_type(v["type"])]:
        nodes.append(out.pop(k))  # a lone node beside the sections ("request": {"id": ..., "type": ...})
        notes.add(f"the top-level '{k}' as a node")
    for name, sec in sections.items():
        sec_nodes = _node_items(sec["nodes"], notes)
        phase = phase_of(name)
        for n in sec_nodes if isinstance(sec_nodes, list) else []:
            control = isinstance(n, dict) and node_type(str(n.get("type") or n.get("kind") or "")) in _ROOTS
            nodes.append({**n, "phase": n.get("phase", phase)} if isinstance(n, dict) and not control else n)
        sec_edges = _edge_items(sec.get("edges", []), notes)
        edges += sec_edges if isinstance(sec_edges, list) else []
        notes.add(f"the '{name}' section as the {phase} phase's nodes")
    for k in [k for k in out if tables()["document"].get(key(k)) == "edges" and isinstance(out[k], list)]:
        edges += out.pop(k)  # "links" / "cross_edges" beside the sections: the edges between them
        notes.add(f"'{k}' as edges between the sections")
    out["nodes"], out["edges"] = nodes, edges
    return out


_CANONICAL_FIELDS = frozenset(Node.model_fields) | frozenset(Edge.model_fields) | frozenset(Dag.model_fields)
_LEGEND_PAIR = re.compile(r"\b(\w{1,4})\s*[=:]\s*([A-Za-z][\w\s\-]*?)\s*(?=[,;)]|$|\b\w{1,4}\s*[=:])")
_LEGEND_ARROW = re.compile(r"\b([A-Za-z]+)\s*(->|-->|=>|>|→|\||,|:)\s*([A-Za-z]+)\b")


def _legend_field(text: str) -> str | None:
    """The field or section a legend's description names: the whole text, else its first two words, else its
    first word ("GPU ids" -> devices, "repeat count" -> repeat, "nodes: ..." -> nodes)."""
    ws = re.findall(r"[A-Za-z_]+", text)
    for cand in (text, " ".join(ws[:2]), ws[0] if ws else ""):
        k = key(cand)
        if k in _CANONICAL_FIELDS:
            return k
        for table in ("document", "node_fields", "edge_fields"):
            if k and k in tables()[table]:
                return tables()[table][k]
    return None


def read_legend(doc: Any) -> tuple[Any, list[str]]:
    """A document whose keys are short codes explained in a legend block (``"legend": {"n": "nodes: i=id,
    t=type, g=GPU ids"}``): each code renamed to the field its description names, wherever it is a key, and edges
    written as text in the form the legend shows (``"edges 'src>dst'"``) split there into source and target."""
    if not isinstance(doc, dict):
        return doc, []
    blocks = [k for k, v in doc.items() if key(k) in words("legend_blocks") and isinstance(v, dict)]
    if len(blocks) != 1:
        return doc, []
    legend = doc[blocks[0]]
    renames: dict[str, str] = {}
    arrow: str | None = None
    endpoints = words("endpoint_fields")
    for code, text in legend.items():
        if not isinstance(text, str):
            continue
        head = re.split(r"[:(\s]", text.strip(), maxsplit=1)[0]
        if (f := _legend_field(head)) in ("nodes", "edges"):
            renames[code] = f
            if f == "edges":
                arrow = next((m.group(2) for m in _LEGEND_ARROW.finditer(text)
                              if key(m.group(1)) in endpoints and key(m.group(3)) in endpoints), arrow)
        for short, what in _LEGEND_PAIR.findall(text.split(":", 1)[1] if ":" in text else ""):
            if (f := _legend_field(what)) and short not in renames:
                renames[short] = f
    if not renames:
        return doc, []
    notes = [f"short keys explained in the '{blocks[0]}' block read as the fields they stand for ("
             + ", ".join(f"{a}={b}" for a, b in sorted(renames.items())[:8]) + ")"]

    def rename(v: Any, under: str | None = None) -> Any:
        if isinstance(v, dict):
            return {(renames[k] if k in renames and renames[k] not in v else k): rename(x, renames.get(k, k))
                    for k, x in v.items()}
        if isinstance(v, list):
            if under == "edges" and arrow and v and all(isinstance(x, str) and x.count(arrow) == 1 for x in v):
                return [dict(zip(("source", "target"), (p.strip() for p in x.split(arrow)), strict=True)) for x in v]
            return [rename(x) for x in v]
        return v
    if arrow:
        notes.append(f"edges written as 'source{arrow}target' text, as the legend shows")
    return {k: rename(v) for k, v in doc.items() if k != blocks[0]}, notes
