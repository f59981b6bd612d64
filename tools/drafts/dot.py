"""A Graphviz DOT graph, as a hand draft pastes it into a JSON field, read into nodes and edges with attributes.

Drafters who think in pictures write ``digraph { a -> b -> c; a [type=Attention, gpus="0-7"] }``.  This is a
small parser of the DOT language (https://graphviz.org/doc/info/lang.html) for that use, written here rather than
taken from ``pydot`` (which builds on pyparsing and parses far slower on the 15 kB a draft holds) or
``pygraphviz`` (a C extension): pdag needs only the graph's structure and the attributes, with the scoping rules
the language defines, and an input error that says where the text stopped making sense.

Read: ``strict``, ``graph`` / ``digraph`` (an undirected graph's ``--`` edges are read in the order written),
quoted ids with escapes, numerals, HTML strings, ``//``, ``/* */`` and ``#`` comments, attribute lists
``[a=1, b="x"; c=y]`` (several lists in a row merge), chains ``a -> b -> c``, ports ``a:n`` (dropped), ``node`` /
``edge`` / ``graph`` default statements scoped to their subgraph, ``{a b} -> c`` and ``a -> subgraph s {b c}``
(an edge to every member), and subgraphs whose graph attributes are handed to their member nodes (the reader decides
which ones mean something).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tools.core.errors import PdagInputError

MAX_DEPTH = 64  # subgraphs inside subgraphs; a draft nests two or three
MAX_DOT_CHARS = 4_000_000  # the document's own limits apply first; this bounds one string's parse
_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*|/\*.*?\*/|^\#[^\n]*)
  | (?P<arrow>->|--)
  | (?P<punct>[{}\[\];,=:])
  | (?P<quoted>"(?:[^"\\]|\\.)*")
  | (?P<num>-?(?:\.\d+|\d+(?:\.\d*)?))
  | (?P<name>[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)
  | (?P<html><)
""", re.VERBOSE | re.DOTALL | re.MULTILINE)
_KEYWORDS = {"strict", "graph", "digraph", "subgraph", "node", "edge"}
ALLOWED = "a Graphviz graph: 'digraph { a -> b; a [type=..., gpus=...] }'"


@dataclass
class DotGraph:
    """What a DOT text holds: nodes in first-mention order with their attributes, edges in order, and per node the
    subgraphs that hold it (outermost first: name and graph attributes)."""

    name: str | None = None
    directed: bool = True
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    groups: dict[str, list[tuple[str | None, dict[str, str]]]] = field(default_factory=dict)


def looks_like_dot(text: Any) -> bool:
    """A string that opens like a DOT graph (comments and ``strict`` allowed before it)."""
    if not isinstance(text, str):
        return False
    head = re.sub(r"^(?:\s+|//[^\n]*|/\*.*?\*/|#[^\n]*)*", "", text[:4000], flags=re.DOTALL)
    return re.match(r"(?i)(?:strict\s+)?(?:di)?graph\b[^{]*\{", head) is not None


def _tokens(text: str, where: str) -> list[tuple[str, str, int]]:
    """(kind, text, line) for each token; an HTML string ``<...>`` is one token, nested brackets counted."""
    out: list[tuple[str, str, int]] = []
    pos, line = 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PdagInputError(where, f"DOT text: unexpected character {text[pos]!r} on line {line}", ALLOWED)
        kind = m.lastgroup or ""
        if kind == "html":
            depth, end = 0, pos
            while end < len(text):
                depth += {"<": 1, ">": -1}.get(text[end], 0)
                end += 1
                if depth == 0:
                    break
            if depth:
                raise PdagInputError(where, f"DOT text: an HTML label opened on line {line} is never closed", ALLOWED)
            out.append(("id", text[pos + 1:end - 1], line))
            line += text.count("\n", pos, end)
            pos = end
            continue
        tok = m.group()
        if kind == "quoted":
            out.append(("id", re.sub(r"\\(.)", lambda e: e.group(1) if e.group(1) in '"\\' else e.group(),
                                     tok[1:-1]).replace("\\\n", ""), line))
        elif kind == "name":
            low = tok.lower()
            out.append((low, tok, line) if low in _KEYWORDS else ("id", tok, line))
        elif kind == "num":
            out.append(("id", tok, line))
        elif kind == "arrow":
            out.append(("arrow", tok, line))
        elif kind != "ws":
            out.append((tok, tok, line))
        line += tok.count("\n")
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str, int]], where: str) -> None:
        self.toks, self.i, self.where = tokens, 0, where
        self.g = DotGraph()

    # -- token helpers
    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.toks[j][0] if j < len(self.toks) else "<end>"

    def take(self, kind: str | None = None) -> str:
        if self.i >= len(self.toks):
            raise PdagInputError(self.where, "DOT text: ends before the graph's closing '}'", ALLOWED)
        k, text, line = self.toks[self.i]
        if kind is not None and k != kind:
            shown = "a name" if kind == "id" else repr(kind)
            raise PdagInputError(self.where, f"DOT text: expected {shown} on line {line}, found {text!r}", ALLOWED)
        self.i += 1
        return text

    # -- grammar
    def graph(self) -> DotGraph:
        if self.peek() == "strict":
            self.take()
        kind = self.take()
        if kind not in ("graph", "digraph"):
            raise PdagInputError(self.where, f"DOT text: expected 'digraph' or 'graph', found {kind!r}", ALLOWED)
        self.g.directed = kind == "digraph"
        if self.peek() == "id":
            self.g.name = self.take()
        self.take("{")
        self.stmts({}, {}, [])
        self.take("}")
        if self.i != len(self.toks):
            raise PdagInputError(self.where, f"DOT text: text after the graph's closing '}}' on line "
                                 f"{self.toks[self.i][2]}", ALLOWED)
        return self.g

    def attrs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        while self.peek() == "[":
            self.take()
            while self.peek() != "]":
                name = self.take("id")
                if self.peek() == "=":
                    self.take()
                    out[name] = self.take("id")
                else:
                    out[name] = "true"
                if self.peek() in (",", ";"):
                    self.take()
            self.take("]")
        return out

    def node_ref(self, node_defaults: dict[str, str], groups: list[tuple[str | None, dict[str, str]]]) -> str:
        nid = self.take("id")
        if self.peek() == ":":  # a port (and compass point): where on the node an edge ends, not another node
            self.take()
            self.take("id")
            if self.peek() == ":":
                self.take()
                self.take("id")
        self.declare(nid, node_defaults, groups)
        return nid

    def declare(self, nid: str, node_defaults: dict[str, str],
                groups: list[tuple[str | None, dict[str, str]]]) -> None:
        if nid not in self.g.nodes:
            self.g.nodes[nid] = dict(node_defaults)
            self.g.groups[nid] = list(groups)
        else:  # mentioned again inside a subgraph: a member of it too
            held = self.g.groups[nid]
            held += [g for g in groups if all(g[1] is not h[1] for h in held)]

    def operand(self, node_defaults: dict[str, str], edge_defaults: dict[str, str],
                groups: list[tuple[str | None, dict[str, str]]]) -> list[str]:
        """One side of an edge: a node, or every node of a subgraph written in place."""
        if self.peek() in ("subgraph", "{"):
            return self.subgraph(node_defaults, edge_defaults, groups)
        return [self.node_ref(node_defaults, groups)]

    def subgraph(self, node_defaults: dict[str, str], edge_defaults: dict[str, str],
                 groups: list[tuple[str | None, dict[str, str]]]) -> list[str]:
        name = None
        if self.peek() == "subgraph":
            self.take()
            if self.peek() == "id":
                name = self.take()
        self.take("{")
        if len(groups) >= MAX_DEPTH:
            raise PdagInputError(self.where, f"DOT text: subgraphs nested deeper than {MAX_DEPTH}", ALLOWED)
        members = self.stmts(dict(node_defaults), dict(edge_defaults), [*groups, (name, {})])
        self.take("}")
        return members

    def stmts(self, node_defaults: dict[str, str], edge_defaults: dict[str, str],
              groups: list[tuple[str | None, dict[str, str]]]) -> list[str]:
        """Statements up to the closing brace; the nodes they mention, in order."""
        mentioned: list[str] = []
        own = groups[-1][1] if groups else None
        while self.peek() not in ("}", "<end>"):
            k = self.peek()
            if k in ("node", "edge", "graph") and self.peek(1) == "[":
                self.take()
                got = self.attrs()
                {"node": node_defaults, "edge": edge_defaults}.get(k, own if own is not None else {}).update(got)
            elif k == "id" and self.peek(1) == "=":
                name = self.take()
                self.take()
                value = self.take("id")
                if own is not None:  # shared by reference: members declared before it get it too
                    own[name] = value
            else:
                left = self.operand(node_defaults, edge_defaults, groups)
                mentioned += left
                if self.peek() == "arrow":
                    chain = [left]
                    while self.peek() == "arrow":
                        self.take()
                        chain.append(self.operand(node_defaults, edge_defaults, groups))
                        mentioned += chain[-1]
                    ea = {**edge_defaults, **self.attrs()}
                    for tails, heads in zip(chain, chain[1:], strict=False):
                        self.g.edges += [(u, v, dict(ea)) for u in tails for v in heads]
                elif k == "id":
                    self.g.nodes[left[0]].update(self.attrs())
            if self.peek() in (";", ","):
                self.take()
        return list(dict.fromkeys(mentioned))


def parse_dot(text: str, where: str = "dag") -> DotGraph:
    """The graph a DOT text draws; a text that is not DOT is a ``PdagInputError`` naming ``where`` and the line."""
    if len(text) > MAX_DOT_CHARS:
        raise PdagInputError(where, f"DOT text of {len(text):,} characters; the limit is {MAX_DOT_CHARS:,}", ALLOWED)
    parser = _Parser(_tokens(text, where), where)
    return parser.graph()
