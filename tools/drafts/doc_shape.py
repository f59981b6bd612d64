"""Finding the graph in a hand-drafted document that does not put it under ``nodes`` / ``edges``.

Drafters shape a DAG document their own way: a Graphviz string in a ``dot`` field, a torch.fx-style list under
``graph``, operators in id-keyed maps under ``phases.prefill`` / ``phases.decode``, stages holding their ops, a
request holding its replicas holding their op lists, each node naming its successors (``next``) or inputs
(``args``, ``inputs``), edges in a ``flow`` list of ``"a --sync--> b"`` strings.  The dialect reader looks for the
documented fields first; only when it finds none does ``find_graph`` look through the whole document:

- every object that looks like a node (an id-like field and a type-like field, or a type-like field in a map
  keyed by id) is one, wherever it sits; a node's fields that hold further nodes are read as nesting, not as
  fields;
- a node inherits the phase a section key names (``"prefill": [...]``), and the ``stage`` / ``replica`` index of a
  container that holds it, where it states none;
- ids that two sections both use (``embed`` under prefill and under decode) are told apart by their section
  (``prefill:embed``), which is how such drafts refer to them;
- edges come from lists of edge-like items anywhere (objects with a source and target, pairs, arrow strings)
  whose ends name the nodes found, and from successor / predecessor fields inside the nodes; a reference may carry
  its edge kind (``"b [sync]"``, ``"b@kv"``, ``"b#sync"``, ``{"from": "b", "as": "sync"}``);
- a Graphviz DOT string (``tools.drafts.dot``) is the graph when the document holds no node objects.

Ambiguity is refused, not guessed: two DOT strings, or one id naming two different nodes in the same section, are
input errors that name the fields.  Every reading is a note.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools.core.dag import NodeType
from tools.core.errors import PdagInputError
from tools.drafts.dot import DotGraph, looks_like_dot, parse_dot
from tools.drafts.vocabulary import is_int, key, node_type, tables, words

_ROOTS = {NodeType.REQUEST.value, NodeType.REPLICA.value}
_MAX_WALK = 60  # nesting levels looked through (the input limits bound the document's depth anyway)
_SEPARATORS = re.compile(r"[:/.>]")


class Notes(Protocol):
    def add(self, text: str) -> None: ...


@dataclass
class _Found:
    """A node found in the document: its body, the section path it sits under and what it inherits there."""

    nid: str
    body: dict[str, Any]
    path: tuple[str, ...]
    inherited: dict[str, Any] = field(default_factory=dict)


def _field_is(k: str, canon: str) -> bool:
    return k == canon or tables()["node_fields"].get(key(k)) == canon


def _id_of(d: dict[str, Any]) -> str | None:
    """The id a node object gives itself: ``id`` first, else the first id alias (``name``, ``key`` ...)."""
    for k in sorted(d, key=lambda k: k != "id"):
        v = d[k]
        if _field_is(k, "id") and (isinstance(v, str) and v.strip() or is_int(v)):
            return str(v)
    # else an operator field naming no node type, beside a type field that names one (``{"op": "prefill.embed",
    # "kind": "EmbeddingNode"}``) or a placeholder flag (``"elided": true``): the op is the node's name
    kinds = {node_type(v) for k, v in d.items() if _field_is(k, "type") and isinstance(v, str)} - {None}
    if placeholder_flag(d) or len(kinds) == 1:
        for k, v in d.items():
            if key(k) in words("operator_fields") and isinstance(v, str) and v.strip() and \
                    tables()["node_types"].get(key(v)) in kinds | {None}:  # not another kind
                return v
    return None


def placeholder_flag(d: dict[str, Any]) -> str | None:
    """A field among the vocabulary's placeholder words set true (``"elided": true``): the object stands for
    what the draft leaves out, and the field names its kind."""
    return next((k for k, v in d.items() if v is True and key(k) in words("placeholder_type_words")), None)


def _type_of(d: dict[str, Any]) -> str | None:
    """The node's kind: a ``type`` field or alias first, else an operator field (``op``: torch.fx's ``op`` says
    ``call_module`` beside a ``node_type``)."""
    for fits in (lambda k: _field_is(k, "type"), lambda k: key(k) in words("operator_fields")):
        for k, v in d.items():
            if isinstance(v, str) and v.strip() and fits(k):
                return v
    return placeholder_flag(d)


def _edge_ends(d: dict[str, Any]) -> bool:
    canon = {tables()["edge_fields"].get(key(k), k) for k in d}
    return {"source", "target"} <= canon


def _node_like(d: Any) -> bool:
    return isinstance(d, dict) and _id_of(d) is not None and _type_of(d) is not None and not _edge_ends(d)


def _keyed_nodes(d: Any) -> bool:
    """A map of node bodies keyed by id (``{"embed": {"op": "Embed", ...}, ...}``)."""
    return isinstance(d, dict) and bool(d) and all(
        isinstance(v, dict) and _type_of(v) is not None and not _edge_ends(v) for v in d.values()) \
        and sum(node_type(_type_of(v) or "") is not None for v in d.values()) * 2 >= len(d)


def _holds_nodes(v: Any, depth: int = 0) -> bool:
    if depth > _MAX_WALK:
        return False
    if _node_like(v) or _keyed_nodes(v):
        return True
    if isinstance(v, dict):
        return any(_holds_nodes(x, depth + 1) for x in v.values())
    if isinstance(v, list):
        return any(_holds_nodes(x, depth + 1) for x in v)
    return False


def phase_named(name: str) -> str | None:
    """The phase a section key names: ``prefill``, ``decode_pool``, ``cluster_prefill``, ``PREFILL (prompt)``."""
    phases = tables()["phases"]
    suffixes = "|".join(sorted(words("section_suffixes"), key=len, reverse=True))
    k = key(name)
    for cand in (k, re.sub(f"(?:{suffixes})+$", "", k), re.sub(f"^(?:{suffixes})+", "", k),
                 key(re.split(r"[\s(\[]", name.strip(), maxsplit=1)[0])):
        if cand in phases:
            return phases[cand]
    return None


def _context_of(container: dict[str, Any]) -> dict[str, Any]:
    """The ``stage`` / ``replica`` index a container states for what it holds."""
    out: dict[str, Any] = {}
    for k, v in container.items():
        for canon in ("stage", "replica", "layer"):
            if is_int(v) and _field_is(k, canon):
                out.setdefault(canon, v)
    return out


class _Walk:
    def __init__(self) -> None:
        self.nodes: list[_Found] = []
        self.edge_lists: list[tuple[tuple[str, ...], list[Any]]] = []
        self.tops: set[str] = set()

    def walk(self, obj: Any, path: tuple[str, ...], ctx: dict[str, Any], depth: int = 0) -> bool:
        """Collect the nodes and edge-like lists under ``obj``; whether any node was found."""
        if depth > _MAX_WALK:
            return False
        if _node_like(obj):
            body = {k: v for k, v in obj.items() if not _holds_nodes(v)}
            self.nodes.append(_Found(_id_of(obj) or "", body, path, ctx))
            for k, v in obj.items():
                if k not in body:
                    self.walk(v, path, ctx, depth + 1)
            return True
        if path and _keyed_nodes(obj):  # the document itself is never a map of nodes
            for nid, v in obj.items():
                body = {k: x for k, x in v.items() if not _holds_nodes(x)}
                self.nodes.append(_Found(_id_of(v) or str(nid), body, path, ctx))
            return True
        if isinstance(obj, list):
            if obj and all(_edge_like(x) for x in obj):
                self.edge_lists.append((path, obj))
                return False
            return any([self.walk(x, path, ctx, depth + 1) for x in obj])
        if not isinstance(obj, dict):
            return False
        inner = {**ctx, **_context_of(obj)}
        found = False
        for k, v in obj.items():
            here = {**inner, **({"phase": p} if (p := phase_named(str(k))) else {})}
            if self.walk(v, (*path, str(k)), here, depth + 1):
                found = True
                if not path:
                    self.tops.add(k)
            elif not path and any(p == (str(k),) or p[:1] == (str(k),) for p, _ in self.edge_lists):
                self.tops.add(k)
        return found


def _edge_like(x: Any) -> bool:
    if isinstance(x, str):
        return _arrow(x) is not None
    if isinstance(x, list | tuple):
        return len(x) in (2, 3) and all(isinstance(e, str) or is_int(e) for e in x[:2]) and \
            (len(x) == 2 or isinstance(x[2], str))
    return isinstance(x, dict) and _edge_ends(x)


_KIND_ARROW = re.compile(r"^\s*(.+?)\s*-{1,2}\s*([A-Za-z][\w\-]*?)\s*-{1,2}>\s*(.+?)\s*$")  # "a --sync--> b"
_PLAIN_ARROW = re.compile(r"^\s*(.+?)\s*(?:-->|->|→|=>)\s*(.+?)\s*$")


def _arrow(text: str) -> tuple[str, str, str | None] | None:
    m = _KIND_ARROW.match(text)
    if m:
        return m.group(1), m.group(3), m.group(2)
    m = _PLAIN_ARROW.match(text)
    return (m.group(1), m.group(2), None) if m else None


def arrow_with_kind(text: str) -> tuple[str, str, str] | None:
    """``"a --sync--> b"`` / ``"a -sync-> b"`` as (source, target, kind); None for a plain arrow."""
    m = _KIND_ARROW.match(text)
    return (m.group(1), m.group(3), m.group(2)) if m else None


_REF_KIND = re.compile(r"^(.*?)\s*(?:\[([\w\s\-]+)\]|\(([\w\s\-]+)\)|[@#|]\s*([\w\-]+))\s*$")


def split_ref(ref: str, known: set[str] | dict[str, Any]) -> tuple[str, str | None] | None:
    """A reference to a node, and the edge kind written with it: ``"b"``, ``"b [sync]"``, ``"b (kv-cache)"``,
    ``"b@kv"``, ``"b#sync"`` (the kind must name an edge type); None when it names no known node."""
    if ref in known:
        return ref, None
    m = _REF_KIND.match(ref)
    if m:
        kind = next(g for g in m.groups()[1:] if g)
        canon = tables()["edge_types"].get(key(kind))
        if canon and m.group(1) in known:
            return m.group(1), canon
    return None


class _Resolver:
    """Node references as drafts write them: an id, a section-qualified id (``prefill:embed``), or an id local to
    the referring node's own section."""

    def __init__(self, found: list[_Found]) -> None:
        self.ids = {f.nid for f in found}
        self.local: dict[tuple[str, str], set[str]] = {}
        self.bare: dict[str, set[str]] = {}
        for f in found:
            local = f.body.get("__local__", f.nid)
            self.bare.setdefault(local, set()).add(f.nid)
            for sec in f.path:
                self.local.setdefault((key(sec), local), set()).add(f.nid)

    def one(self, ref: str, path: tuple[str, ...]) -> str | None:
        if ref in self.ids:
            return ref
        parts = _SEPARATORS.split(ref, maxsplit=1)
        if len(parts) == 2:
            got = self.local.get((key(parts[0]), parts[1].strip()), set())
            if len(got) == 1:
                return next(iter(got))
        for sec in reversed(path):  # the referring node's own section first
            got = self.local.get((key(sec), ref), set())
            if len(got) == 1:
                return next(iter(got))
        got = self.bare.get(ref, set())
        return next(iter(got)) if len(got) == 1 else None

    def ref(self, ref: Any, path: tuple[str, ...]) -> tuple[str, str | None] | None:
        """(node id, edge kind or None) for a reference, or None when it names no node."""
        if isinstance(ref, dict):
            target = next((ref[k] for k in ref if isinstance(ref[k], str) and (
                key(k) in words("reference_fields") or tables()["edge_fields"].get(key(k)) == "source")), None)
            kind = next((ref[k] for k in ref if isinstance(ref[k], str)
                         and tables()["edge_fields"].get(key(k)) == "type"), None)
            got = self.one(target, path) if isinstance(target, str) else None
            return (got, tables()["edge_types"].get(key(kind), kind) if kind else None) if got else None
        if is_int(ref):
            ref = str(ref)
        if not isinstance(ref, str):
            return None
        got = self.one(ref.strip(), path)
        if got:
            return got, None
        m = _REF_KIND.match(ref)
        if m:
            kind = tables()["edge_types"].get(key(next(g for g in m.groups()[1:] if g)))
            got = self.one(m.group(1), path)
            if got and kind:
                return got, kind
        return None


def _unique_ids(found: list[_Found], notes: Notes) -> None:
    """Ids that two sections both use are qualified by the section (``prefill:embed``); an id used twice in one
    section for two different nodes is refused."""
    by_id: dict[str, list[_Found]] = {}
    for f in found:
        by_id.setdefault(f.nid, []).append(f)
    for nid, group in by_id.items():
        if len(group) < 2:
            continue
        distinct = {repr(sorted(f.body.items(), key=lambda kv: kv[0])) for f in group}
        if len(distinct) == 1:  # the same node written twice: one node
            for f in group[1:]:
                found.remove(f)
            notes.add("a node written twice as one node")
            continue
        secs = [next((p for p in reversed(f.path) if phase_named(p)), f.path[-1] if f.path else "") for f in group]
        if len(set(secs)) < len(secs):
            raise PdagInputError("dag", f"the id '{nid}' names {len(group)} different nodes in one section",
                                 "node ids unique within each section of the document")
        for f, sec in zip(group, secs, strict=True):
            f.body["__local__"] = f.nid
            f.nid = f"{sec}:{nid}"
        notes.add("ids two sections share qualified by their section ('section:id')")


def _edges_inside(found: list[_Found], res: _Resolver, notes: Notes) -> list[dict[str, Any]]:
    """Edges a node states in its successor / predecessor fields, each reference resolved; a field whose
    references do not all name nodes stays a field."""
    out: list[dict[str, Any]] = []
    for f in found:
        for k in list(f.body):
            kv = key(k) in words("kv_source_fields")  # "reads_kv": the cache a decode attention reads
            before = kv or key(k) in words("predecessor_fields")
            if not before and key(k) not in words("successor_fields"):
                continue
            raw = f.body[k]
            if isinstance(raw, dict):
                kinds = {t: tables()["edge_types"].get(key(t)) for t in raw}
                if not all(kinds.values()):
                    continue
                refs = [({"id": r, "type": kinds[t]} if isinstance(r, str) else r)
                        for t, rs in raw.items() for r in (rs if isinstance(rs, list) else [rs])]
            else:
                refs = raw if isinstance(raw, list) else [raw]
            got = [res.ref(r, f.path) for r in refs]
            if not refs or any(g is None for g in got):
                continue
            for g in got:
                assert g is not None
                u, v = (g[0], f.nid) if before else (f.nid, g[0])
                kind = g[1] or ("kv" if kv else None)
                out.append({"source": u, "target": v, **({"type": kind} if kind else {})})
            del f.body[k]
            notes.add(f"node field '{k}' as edges")
    return out


def _listed_edges(lists: list[tuple[tuple[str, ...], list[Any]]], res: _Resolver,
                  notes: Notes) -> list[dict[str, Any]]:
    """Edge-like lists whose ends name the nodes found (at least half of them; the rest are kept, to be reported
    as dangling)."""
    out: list[dict[str, Any]] = []
    for path, items in lists:
        edges = []
        for x in items:
            if isinstance(x, str):
                u, v, kind = _arrow(x) or ("", "", None)
                e: dict[str, Any] = {"source": u, "target": v, **({"type": kind} if kind else {})}
            elif isinstance(x, list | tuple):
                e = {"source": str(x[0]), "target": str(x[1]), **({"type": x[2]} if len(x) == 3 else {})}
            else:
                e = dict(x)
            edges.append(e)
        ends = [(_end(e, "source"), _end(e, "target")) for e in edges]
        hits = [(res.one(u, path) if u else None, res.one(v, path) if v else None) for u, v in ends]
        if sum(1 for a, b in hits if a and b) * 2 < len(edges):
            continue
        for e, (a, b), (u, v) in zip(edges, hits, ends, strict=True):
            for k in [k for k in e if tables()["edge_fields"].get(key(k), k) in ("source", "target")]:
                del e[k]
            e["source"], e["target"] = a or u, b or v
            out.append(e)
        notes.add(f"'{'.'.join(path) or 'the document'}' as the edge list")
    return out


def _end(e: dict[str, Any], canon: str) -> str | None:
    v = next((e[k] for k in e if k == canon or tables()["edge_fields"].get(key(k)) == canon), None)
    return str(v) if isinstance(v, str) or is_int(v) else None


def _lift_attributes(body: dict[str, Any], notes: Notes) -> dict[str, Any]:
    """A node's own fields written in an attribute block inside it (torch.fx's ``meta``), where the node does not
    state them itself."""
    out = dict(body)
    for k, block in body.items():
        if not isinstance(block, dict):
            continue
        if key(k) in words("parallel_blocks"):  # "tp": {"degree": 8, "gpus": [...]}: the GPUs it is sharded over
            known = {f for f in block if isinstance(f, str) and tables()["node_fields"].get(key(f), f) == "devices"}
        elif key(k) in words("node_attribute_blocks"):
            known = {f for f in block if isinstance(f, str) and (
                f in ("phase", "role", "layer", "repeat") or tables()["node_fields"].get(key(f)))}
        else:
            continue
        lifted = [f for f in known if _scalar(block[f]) and f not in out
                  and tables()["node_fields"].get(key(f), f) not in out]
        for f in lifted:
            out[f] = block[f]
        rest = {f: v for f, v in block.items() if f not in lifted}
        if rest:
            out[k] = rest
        else:
            del out[k]
        if lifted:
            notes.add(f"node fields inside '{k}' as the node's own")
    return out


def _scalar(v: Any) -> bool:
    return isinstance(v, str | int | float | bool) or (isinstance(v, list) and all(
        isinstance(x, str | int | float) for x in v))


def _nodes_out(found: list[_Found], notes: Notes) -> list[dict[str, Any]]:
    out = []
    for f in found:
        body = _lift_attributes({k: v for k, v in f.body.items() if k != "__local__"}, notes)
        id_keys = [k for k in body if _field_is(k, "id")]
        for k in id_keys:
            if k != "id" and str(body[k]) in (f.nid, f.body.get("__local__")):
                del body[k]
        if not id_keys:  # the operator field that named the node
            for k in [k for k in body if key(k) in words("operator_fields")]:
                if str(body[k]) in (f.nid, f.body.get("__local__")):
                    del body[k]
                    notes.add(f"node field '{k}' as the node's id")
        if (flag := placeholder_flag(body)) and not any(_field_is(k, "type") for k in body):
            body["type"] = flag
            del body[flag]
            notes.add(f"an object flagged '{flag}' as a placeholder node")
        node = {"id": f.nid, **{k: v for k, v in body.items() if k != "id"}}
        if not any(_field_is(k, "type") for k in node):  # the operator field is the node's kind here
            op = next(k for k in node if key(k) in words("operator_fields") and isinstance(node[k], str))
            node["type"] = node.pop(op)
            notes.add(f"node field '{op}' as 'type'")
        kind = node_type(_type_of(body) or "")
        for canon in ("phase", "stage", "replica", "layer"):
            if canon in f.inherited and kind not in _ROOTS and not any(_field_is(k, canon) for k in node):
                node[canon] = f.inherited[canon]
                notes.add(f"{canon} from the section that holds the node")
        out.append(node)
    return out


def _dot_fields(doc: dict[str, Any]) -> list[tuple[str, str]]:
    out = [(k, v) for k, v in doc.items() if looks_like_dot(v)]
    for k, v in doc.items():
        if isinstance(v, dict):
            out += [(f"{k}.{k2}", v2) for k2, v2 in v.items() if looks_like_dot(v2)]
    return out


def _from_dot(g: DotGraph, where: str, notes: Notes) -> dict[str, Any]:
    display = words("graphviz_display_attributes")
    nodes = []
    for nid, attrs in g.nodes.items():
        node: dict[str, Any] = {"id": nid, **{k: v for k, v in attrs.items() if key(k) not in display or k == "label"}}
        for name, group in g.groups.get(nid, []):
            for k, v in group.items():
                if key(k) not in display and k != "label" and k not in node:
                    node[k] = v
                    notes.add(f"DOT subgraph attribute '{k}' on its members")
            phase = next((p for p in (phase_named(name or ""), phase_named(group.get("label", ""))) if p), None)
            if phase and "phase" not in node and node_type(str(node.get("type", ""))) not in _ROOTS:
                node["phase"] = phase
                notes.add("phase from the DOT cluster that holds the node")
        for k, v in list(node.items()):
            if is_int_text(v) and k != "id":
                node[k] = int(v)
        nodes.append(node)
    edges = []
    for u, v, attrs in g.edges:
        e: dict[str, Any] = {"source": u, "target": v}
        for k, x in attrs.items():
            canon = tables()["edge_fields"].get(key(k), k)
            if canon == "type" and tables()["edge_types"].get(key(x)):
                e["type"] = x
        edges.append(e)
    notes.add(f"the Graphviz DOT text in '{where}' as the graph ({len(nodes)} nodes, {len(edges)} edges)")
    return {"nodes": nodes, "edges": edges}


def is_int_text(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"-?\d{1,9}", v.strip()) is not None


def find_graph(doc: dict[str, Any], notes: Notes) -> tuple[dict[str, Any], set[str]] | None:
    """The graph a document holds outside ``nodes`` / ``edges``: ``({"nodes": [...], "edges": [...]}, the
    top-level fields it was read from)``, or None when there is none to find."""
    doc = ordered_steps(doc, notes)
    w = _Walk()
    w.walk(doc, (), {})
    dots = _dot_fields(doc)
    if len(w.nodes) < 2:
        if not dots:
            return None
        if len(dots) > 1:
            raise PdagInputError("dag", "two Graphviz DOT texts (" + ", ".join(k for k, _ in dots[:3])
                                 + "): which one is the DAG is not said", "one DOT text, or 'nodes' and 'edges'")
        where, text = dots[0]
        return _from_dot(parse_dot(text, f"dag.{where}"), where, notes), {where.split(".")[0]}
    if dots:
        notes.add(f"the DOT text in '{dots[0][0]}' not read: the node objects in the document are the graph")
    _request_named(w, notes)
    _unique_ids(w.nodes, notes)
    res = _Resolver(w.nodes)
    edges = _edges_inside(w.nodes, res, notes) + _listed_edges(w.edge_lists, res, notes)
    roots = sorted({f.path[0] if f.path else "the document" for f in w.nodes})
    notes.add(f"{len(w.nodes)} node objects found in {', '.join(roots[:4])} as the graph's nodes")
    used = set(w.tops) | {p[0] for p, _ in w.edge_lists if p}
    return {"nodes": _nodes_out(w.nodes, notes), "edges": edges}, used


def _step_kind(item: dict[str, Any]) -> str | None:
    """The node type an anonymous step names: a field whose value is exactly a node type's spelling."""
    types = tables()["node_types"]
    for v in item.values():
        if isinstance(v, str) and (key(v) in types or key(v).endswith("node") and key(v)[:-4] in types):
            return v
    return None


def _ordered(item: Any) -> tuple[str, list[Any]] | None:
    """The ordered list of steps an object holds (``"sequence": [...]``, ``"steps": [...]``), if any."""
    if not isinstance(item, dict):
        return None
    for k, v in item.items():
        if key(k) in words("ordered_step_fields") and isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return k, v
    return None


def ordered_steps(doc: Any, notes: Notes) -> Any:
    """A tree whose phases list their steps in order instead of edges (``{"phase": "prefill", "sequence": [{"node":
    "EmbeddingNode"}, {"layer": 0, "steps": [...]}, ...]}``): each step becomes a node named by its path
    (``replica0/prefill/layer0/AttentionNode``, a second one of a type ``...#2``) that runs ``after`` the step
    before it; a step that says it is a ``branch_of`` an earlier one hangs off that one instead; a group's
    ``layer`` goes to its steps; an object in the list named by a placeholder word (``"elided_layers": "1-34"``)
    is a placeholder node; the first step of a list hangs under the node that holds it."""
    def walk(obj: Any, path: list[str], owner: str | None, phase: str | None) -> Any:
        if isinstance(obj, list):
            return [walk(x, path, owner, phase) for x in obj]
        if not isinstance(obj, dict):
            return obj
        me = _id_of(obj) if _node_like(obj) else None
        here = phase or next((p for k, v in obj.items() if _field_is(k, "phase") and isinstance(v, str)
                              and (p := phase_named(v))), None)
        seq = _ordered(obj)
        if seq is None or me is not None:
            out = {}
            for k, v in obj.items():
                kids = walk(v, [me] if me else path, me or owner, here)
                if me and key(k) in words("successor_fields") and isinstance(kids, list):
                    for c in kids:
                        if isinstance(c, dict) and _node_like(c) and not any(
                                key(f) in words("predecessor_fields") for f in c):
                            c["after"] = [me]
                    _phases_in_order(kids)
                out[k] = kids
            return out
        name = next((v for k, v in obj.items() if _field_is(k, "phase") and isinstance(v, str)), None)
        steps, ends = _chain(seq[1], [*path, *([name] if name else [])], owner, here, None)
        notes.add(f"steps listed in order ('{seq[0]}') as a chain of nodes")
        return {**{k: v for k, v in obj.items() if k != seq[0]}, seq[0]: steps, "__ends__": ends}

    def _phases_in_order(kids: list[Any]) -> None:
        """A prefill section and a decode section under one node: decode starts after prefill's last step."""
        made = {}
        for c in kids:
            if isinstance(c, dict) and "__ends__" in c:
                ph = next((phase_named(v) for k, v in c.items() if _field_is(k, "phase") and isinstance(v, str)), None)
                made[ph] = c
        for c in kids:
            if isinstance(c, dict):
                ends = c.pop("__ends__", None)
                if c is made.get("decode") and "prefill" in made and ends is not None:
                    first = c[_ordered(c)[0]][0]  # type: ignore[index]
                    first["after"] = [*made["prefill"].get("__done__", []), *first.get("after", [])]
                if c is made.get("prefill") and ends is not None:
                    c["__done__"] = ends
        for c in kids:
            if isinstance(c, dict):
                c.pop("__done__", None)
        if "prefill" in made and "decode" in made:
            notes.add("a decode section after the prefill section beside it")

    def _chain(items: list[Any], path: list[str], before: str | None, phase: str | None,
               layer: Any) -> tuple[list[Any], list[str]]:
        out: list[Any] = []
        last = [before] if before else []
        seen: dict[str, str] = {}  # a type -> its first step here, for branch_of
        count: Counter[str] = Counter()
        for item in items:
            group = _ordered(item)
            if group is not None:
                lay = next((v for k, v in item.items() if _field_is(k, "layer")), layer)
                sub = [*path, f"layer{lay}" if is_int(lay) else str(len(out))]
                inner, ends = _chain(group[1], sub, None, phase, lay)
                if inner and last:
                    inner[0]["after"] = [*inner[0].get("after", []), *last]
                out += inner
                last = ends or last
                continue
            kind = _step_kind(item)
            hold = next((k for k in item if any(w in key(k) for w in words("placeholder_type_words"))), None)
            if kind is None and hold is None:
                out.append(item)
                continue
            base = kind or hold or ""
            own = next((str(v) for k, v in item.items() if _field_is(k, "id") and isinstance(v, str)), None)
            sid = "/".join(str(p) for p in [*path, own or base])
            count[sid] += 1
            sid = sid if count[sid] == 1 else f"{sid}#{count[sid]}"
            node = {k: v for k, v in item.items() if not _field_is(k, "id")}
            node["id"], node["type"] = sid, base
            for k in [k for k, v in item.items() if v == kind and k != "type" and not _field_is(k, "type")]:
                del node[k]
            for k in [k for k in item if key(k) in words("shard_detail_fields")]:
                gpus = [x.get(g) for x in item[k] if isinstance(x, dict)
                        for g in x if tables()["node_fields"].get(key(g)) == "devices"] \
                    if isinstance(item[k], list) else []
                if gpus and all(is_int(g) for g in gpus) and not any(
                        tables()["node_fields"].get(key(f), f) == "devices" for f in item):
                    node["devices"] = sorted(set(gpus))
                    notes.add(f"the GPUs of a step's per-GPU shards ('{k}') as its devices")
            if phase:
                node.setdefault("phase", phase)
            if is_int(layer):
                node.setdefault("layer", layer)
            branch = next((v for k, v in item.items() if key(k) in words("branch_fields")), None)
            if isinstance(branch, str) and branch in seen:
                node["after"] = [seen[branch]]
                node.pop(next(k for k in item if key(k) in words("branch_fields")))
            else:
                node["after"] = list(last)
                last = [sid]
            seen.setdefault(base, sid)
            out.append(node)
        return out, last

    def has_steps(obj: Any, depth: int = 0) -> bool:
        if depth > _MAX_WALK:
            return False
        if isinstance(obj, dict):
            return _ordered(obj) is not None and any(_step_kind(x) for x in _ordered(obj)[1]) or any(  # type: ignore[index]
                has_steps(v, depth + 1) for v in obj.values())
        return isinstance(obj, list) and any(has_steps(x, depth + 1) for x in obj)

    return walk(doc, [], None, None) if has_steps(doc) else doc


def _request_named(w: _Walk, notes: Notes) -> None:
    """No RequestNode drawn, but steps wait for one by a name that spells it (``"depends_on": ["request"]``):
    the root they name is drawn."""
    if any(node_type(_type_of(f.body) or "") == NodeType.REQUEST.value for f in w.nodes):
        return
    ids = {f.nid for f in w.nodes}
    named = sorted({r for f in w.nodes for k, v in f.body.items() if key(k) in words("predecessor_fields")
                    for r in (v if isinstance(v, list) else [v]) if isinstance(r, str) and r not in ids
                    and node_type(r) == NodeType.REQUEST.value})
    if len(named) == 1:
        w.nodes.insert(0, _Found(named[0], {"id": named[0], "type": NodeType.REQUEST.value}, ()))
        notes.add(f"the RequestNode '{named[0]}' the steps wait for drawn as the root")
