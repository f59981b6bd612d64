"""Benchmark: a document far over the node limit (100,000 nodes) is refused for its size before it is read.

Target (issue 41): <= 0.2 s for validate_dag and autofix_dag on the parsed document, canonical and drafted
spellings alike (it took 5.3 s when the limit was checked after the draft reader had walked every node).  The
JSON text's own parse, which a front does before pdag sees the document, is printed beside it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tools import autofix_dag, validate_dag

NODES = 100_000
TARGET_S = 0.2


def _documents() -> dict[str, dict[str, Any]]:
    canonical = [{"id": f"n{i}", "type": "AttentionNode", "devices": [i % 8], "layer": i} for i in range(NODES)]
    drafted = [{"name": f"n{i}", "kind": "attention", "gpu": f"gpu{i % 8}"} for i in range(NODES)]
    return {"canonical": {"nodes": canonical, "edges": []},
            "drafted, wrapped": {"graph": {"vertices": drafted, "links": []}}}


def _seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    for name, doc in _documents().items():
        text = json.dumps(doc)
        parse = _seconds(lambda text=text: json.loads(text))
        v = _seconds(lambda doc=doc: validate_dag(dag=doc))
        a = _seconds(lambda doc=doc: autofix_dag(dag=doc))
        rules = sorted({x.rule_id for x in validate_dag(dag=doc).violations})
        ok = "ok" if max(v, a) <= TARGET_S else "OVER TARGET"
        print(f"{NODES:,} nodes ({name}, {len(text) / 1e6:.1f} MB): validate {v * 1000:.1f} ms, autofix "
              f"{a * 1000:.1f} ms ({ok}, target {TARGET_S * 1000:.0f} ms), refused by {', '.join(rules)}; "
              f"JSON parse before pdag {parse * 1000:.0f} ms")


if __name__ == "__main__":
    main()
