"""Benchmark: build_dag time and DAG size for the two reference deployments of the foundation issue."""

from __future__ import annotations

import statistics
import time

from tools.core.build import build_dag

CASES = {
    "deepseek-v3 / 64x h200 (dp4 pp2 tp8 ep8)": {
        "model": "deepseek-v3",
        "hardware": {"gpu": "h200", "num_gpus": 64},
        "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8},
    },
    "llama-3.1-405b / 16x h100-sxm (tp8 pp2)": {
        "model": "llama-3.1-405b",
        "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
        "parallel": {"tp": 8, "pp": 2},
    },
}


def main(repeats: int = 5) -> None:
    for name, plan in CASES.items():
        build_dag(plan=plan)  # warm caches (model presets, schemas)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            result = build_dag(plan=plan)
            times.append((time.perf_counter() - t0) * 1000)
        s = result.summary
        print(
            f"{name}: build {statistics.median(times):.1f} ms median (min {min(times):.1f}), "
            f"{s.total_nodes} nodes, {s.total_edges} edges, {result.gpus_used} GPUs"
        )


if __name__ == "__main__":
    main()
