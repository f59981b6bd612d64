"""Root causes first: violations that follow from another one are reported under it.

One defect often breaks many rules (TP drawn at the root of the DAG makes every operator look like a
misplaced shard).  ``group_causes`` marks each error that is a consequence of an earlier-ranked error at the
same place with ``caused_by``, so that a report leads with the few root causes.  Which rule explains which is
data: ``knowledge/rules/causes.json`` (precedence, and the rules whose violation explains everything under the
nodes it names).
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from typing import Any

import networkx as nx

from knowledge import load_json
from tools.core.dag import CONTROL_TYPES, NodeType
from tools.rules.registry import Violation


@cache
def _causes() -> dict[str, Any]:
    return load_json("rules/causes.json")


def rank(rule_id: str) -> int:
    """Earlier is more fundamental: the catalog's precedence list, then the area order."""
    data = _causes()
    order = {r: i for i, r in enumerate(data["precedence"])}
    if rule_id in order:
        return order[rule_id]
    areas = {a: i for i, a in enumerate(data["areas"])}
    return len(order) + areas.get(rule_id.split("-", 1)[0], len(areas))


def where(v: Violation) -> str:
    """A violation's location in a few characters: its first node, else its field."""
    return v.location.nodes[0] if v.location.nodes else (v.location.field or "?")


def _scope(v: Violation, graph: nx.DiGraph | None) -> set[str]:
    nodes = set(v.location.nodes)
    if graph is None or v.rule_id not in _causes()["absorbs_subtree"]:
        return nodes
    for n in v.location.nodes:  # a misplaced container explains what hangs under it
        t = graph._node[n].get("type") if n in graph else None
        if t in CONTROL_TYPES and t != NodeType.REQUEST:
            nodes |= nx.descendants(graph, n)
    return nodes


def group_causes(violations: list[Violation], graph: nx.DiGraph | None) -> list[Violation]:
    """The same violations with ``caused_by`` set on consequences; root causes first, then consequences."""
    errs = [v for v in violations if v.severity == "error"]
    if len(errs) < 2:
        return violations
    ranks = [rank(v.rule_id) for v in errs]
    by_node: dict[str, list[int]] = defaultdict(list)
    by_field: dict[str, list[int]] = defaultdict(list)
    wide: set[int] = set()  # violations that explain a whole subtree outrank their own rule's other findings
    for i, v in enumerate(errs):
        scope = _scope(v, graph)
        if len(scope) > len(v.location.nodes):
            wide.add(i)
        for n in scope:
            by_node[n].append(i)
        if v.location.field:
            by_field[v.location.field].append(i)
    parent: dict[int, int] = {}
    for j, v in enumerate(errs):
        cands = {i for n in v.location.nodes for i in by_node.get(n, ())}
        if v.location.field:
            cands.update(by_field[v.location.field])
        earlier = [i for i in cands if ranks[i] < ranks[j] or (ranks[i] == ranks[j] and i in wide and j not in wide)]
        if earlier:
            parent[j] = min(earlier, key=lambda i: (ranks[i], i not in wide, i))
    for j in parent:
        root = parent[j]
        while root in parent:
            root = parent[root]
        errs[j].caused_by = f"{errs[root].rule_id} at {where(errs[root])}"
    roots = [v for v in violations if v.caused_by is None]
    return roots + [v for v in violations if v.caused_by is not None]
