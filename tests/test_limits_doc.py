"""docs/limits.md states each input limit beside the constant that enforces it; the two must agree (the README
once stated a 128 MB HTTP body limit while the server enforced 15.36 MB)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "limits.md"
ROW = re.compile(r"^\|\s*(?P<what>[^|]+?)\s*\|\s*(?P<value>[\d,]+)[^|]*\|\s*`(?P<constant>[\w.]+)`\s*\|$")


def _rows() -> list[tuple[str, int, str]]:
    rows = [m for line in DOC.read_text().splitlines() if (m := ROW.match(line.strip()))]
    return [(m["what"], int(m["value"].replace(",", "")), m["constant"]) for m in rows]


def _constant(dotted: str) -> int:
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_the_doc_states_the_limits_the_issue_names() -> None:
    stated = {c for _, _, c in _rows()}
    assert {"server.http.MAX_BODY_BYTES", "tools.core.dag.MAX_NODES", "tools.core.dag.MAX_EDGES",
            "tools.core.inputs.MAX_FILE_BYTES", "server.stdio.MAX_LINE_BYTES"} <= stated


@pytest.mark.parametrize(("what", "value", "constant"), _rows(), ids=[r[2] for r in _rows()])
def test_each_stated_limit_is_the_codes(what: str, value: int, constant: str) -> None:
    assert _constant(constant) == value, f"docs/limits.md says {what} is {value:,}; {constant} is " \
                                         f"{_constant(constant):,}"


def test_the_server_default_is_the_stated_body_limit() -> None:
    from server.__main__ import parser  # the flag's default, as a user sees it

    stated = {c: v for _, v, c in _rows()}
    assert parser().get_default("max_body_bytes") == stated["server.http.MAX_BODY_BYTES"]
