"""The size of a submitted document, measured before any of it is read.

Reading a draft (dialect, shapes, implicit steps) and checking its values walk every node; a document far over
the node limit would spend seconds there only to be refused.  This looks at the lengths of the collections a few
keys deep, never at their items, so the refusal costs microseconds whatever the document holds."""

from __future__ import annotations

from typing import Any

from tools.core.dag import MAX_EDGES, MAX_NODES
from tools.drafts.vocabulary import key, tables

_DEPTH = 3  # a graph sits at the top, under a "dag"/"graph" wrapper, or in a phase section of one


def oversized(doc: Any) -> tuple[str, str] | None:
    """(the collection's path, why it is too large to read), or None."""
    document = tables()["document"]
    todo: list[tuple[Any, str, int]] = [(doc, "dag", 0)]
    while todo:
        value, where, depth = todo.pop()
        if not isinstance(value, dict) or depth >= _DEPTH:
            continue
        for k, v in value.items():
            if not isinstance(v, list | dict):
                continue
            part = "nodes" if k == "nodes" else "edges" if k == "edges" else \
                document.get(key(k)) if isinstance(k, str) else None
            limit = MAX_NODES if part == "nodes" else MAX_EDGES if part == "edges" else MAX_NODES + MAX_EDGES
            if len(v) > limit:
                return f"{where}.{k}", (f"{len(v):,} {part or 'entries'} in one document; the limit is "
                                        f"{MAX_NODES:,} nodes and {MAX_EDGES:,} edges, so the document was refused "
                                        "unread (send a large DAG folded: see the schema's 'folds')")
            if isinstance(v, dict):
                todo.append((v, f"{where}.{k}", depth + 1))
    return None
