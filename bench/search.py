"""Benchmark: search_strategies wall time for the targets of issue 7 (DeepSeek-V3 on up to 64 H200 <= 1 s,
Llama-3.1-70B on 8 H100 <= 0.3 s)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from tools.search.strategies import search_strategies

CASES: dict[str, tuple[dict[str, Any], float]] = {
    "llama-3.1-70b / 8x h100-sxm / latency": (
        {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}}, 0.3),
    "llama-3.1-70b / 8x h100-sxm / throughput": (
        {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "objective": "throughput"}, 0.3),
    "deepseek-v3 fp8 / 8x h200 / latency": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8"}, 1.0),
    "deepseek-v3 fp8 / 64x h200 / latency": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8"}, 1.0),
    "deepseek-v3 fp8 / 64x h200 / throughput": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8",
         "objective": "throughput"}, 1.0),
}


def main(repeats: int = 3) -> None:
    for name, (kwargs, target) in CASES.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            result = search_strategies(**kwargs)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        best = result.top[0]
        verdict = "ok" if med <= target else "OVER"
        print(
            f"{name}: {med * 1000:.0f} ms median (min {min(times) * 1000:.0f}, target {target * 1000:.0f} ms, "
            f"{verdict}); {result.estimated} estimates, {result.considered} alternatives, "
            f"{sum(result.rejected.values())} rejected; top: {best.label} ({best.reason.split(';')[0]})"
        )
        if result.comparison:
            print(f"    {result.comparison[:240]}")


if __name__ == "__main__":
    main()
