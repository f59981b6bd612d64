"""Benchmark: validate_dag and autofix_dag on DeepSeek-V3 over 64 H200 (dp 4, pp 2, tp 8, ep 8).

Targets (issue 3, on this 2-core machine): validate <= 150 ms, autofix <= 500 ms.  Prints the median and the
minimum of several runs, plus the full DAG size the plan stands for.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from tools import autofix_dag, validate_dag
from tools.core.build import build_dag

PLAN: dict[str, Any] = {
    "model": "deepseek-v3",
    "hardware": {"gpu": "h200", "num_gpus": 64},
    "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8},
}
TARGETS_MS = {"validate": 150.0, "autofix": 500.0}


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    fn()  # warm caches (presets, catalog, schemas)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), min(times)


def main(repeats: int = 7) -> None:
    built = build_dag(PLAN)
    v = validate_dag(plan=PLAN)
    a = autofix_dag(plan=PLAN)
    print(f"deepseek-v3 / 64x h200 (dp4 pp2 tp8 ep8): DAG {built.summary.total_nodes} nodes, "
          f"{built.summary.total_edges} edges, {v.gpus_used} GPUs; {v.summary}; autofix: {a.summary}")
    for name, fn in (("validate", lambda: validate_dag(plan=PLAN)), ("autofix", lambda: autofix_dag(plan=PLAN))):
        med, best = _time(fn, repeats)
        verdict = "ok" if med <= TARGETS_MS[name] else "OVER TARGET"
        print(f"  {name}: {med:.1f} ms median (min {best:.1f}), target {TARGETS_MS[name]:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
