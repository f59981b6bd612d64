"""Pages of a detail="full" answer, so no single answer outgrows a model's tool-result limit.

A full answer is split along its long lists (a DAG's nodes and edges, every violation, per-GPU tables):
each page carries the answer's other fields plus a contiguous run of list items, and `next_cursor` while
more remain. Concatenating each list over the pages gives the complete answer. Pages are a pure function
of the answer, so the same call and cursor always give the same page.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

PAGE_CHARS = 80_000  # ~20k tokens: below the 25k-token tool-result cap of common MCP hosts
_MIN_LIST = 2


def _dumps(x: Any) -> str:
    return json.dumps(x, separators=(",", ":"), ensure_ascii=False)


def _lists(data: dict[str, Any], where: str = "") -> list[tuple[str, list[Any]]]:
    """Lists reachable through objects only (a list inside a list item travels with its item), by path."""
    out: list[tuple[str, list[Any]]] = []
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if isinstance(value, dict):
            out.extend(_lists(value, path))
        elif isinstance(value, list) and len(value) >= _MIN_LIST:
            out.append((path, value))
    return out


def _with_lists(data: dict[str, Any], parts: dict[str, list[Any]], where: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if path in parts:
            out[key] = parts[path]
        elif isinstance(value, dict):
            out[key] = _with_lists(value, parts, path)
        else:
            out[key] = value
    return out


def parse_cursor(cursor: str | None, pages: int) -> int:
    """The page index a cursor names; a ToolError naming `cursor` for anything else."""
    if cursor is None:
        return 0
    if not cursor.isdigit() or int(cursor) >= pages:
        raise ToolError(f"invalid `cursor`: {cursor!r} is not a page of this answer. Allowed: the next_cursor of "
                        f"the previous page (0 to {pages - 1}), or no cursor for the first page")
    return int(cursor)


def paginate(data: dict[str, Any], page_chars: int = PAGE_CHARS) -> list[dict[str, Any]]:
    """Every page of ``data`` in order; ``[data]`` when it fits on one page."""
    if len(_dumps(data)) <= page_chars:
        return [data]
    lists = _lists(data)
    skeleton = _with_lists(data, {path: [] for path, _ in lists})
    budget = max(page_chars - len(_dumps(skeleton)) - 200, page_chars // 4)
    # Greedy packing over the items of every list in order: page boundaries as (list index, item index).
    bounds: list[tuple[int, int]] = [(0, 0)]
    used = 0
    for li, (_, items) in enumerate(lists):
        for ii, item in enumerate(items):
            size = len(_dumps(item)) + 1
            if used and used + size > budget:
                bounds.append((li, ii))
                used = 0
            used += size
    pages = []
    for k, start in enumerate(bounds):
        end = bounds[k + 1] if k + 1 < len(bounds) else (len(lists), 0)
        parts: dict[str, list[Any]] = {}
        ranges: dict[str, list[int]] = {}
        for li, (path, items) in enumerate(lists):
            lo = 0 if li > start[0] else start[1] if li == start[0] else len(items)
            hi = len(items) if li < end[0] else end[1] if li == end[0] else 0
            parts[path] = items[lo:hi] if hi > lo else []
            if hi > lo:
                ranges[path] = [lo, hi, len(items)]
        out = _with_lists(data, parts)
        out["page"] = {"index": k, "count": len(bounds), "items": ranges}
        if k + 1 < len(bounds):
            out["next_cursor"] = str(k + 1)
        pages.append(out)
    return pages
