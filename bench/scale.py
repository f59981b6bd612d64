"""Benchmark: the targets of issue 11 (scale), each printed against its target, medians on this machine.

build + validate + estimate of large deployments (the working form keeps them small), DeepSeek-V3 on 64 GPUs
against the figure before the working form, and search_strategies on 1,024 and 16,384 H200 (every plan it
returns is validated and estimated too).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from tools import build_dag, estimate_performance, search_strategies, validate_dag

DSV3_1024 = {"model": "deepseek-v3", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 1024},
             "parallel": {"dp": 16, "tp": 8, "ep": 64}}
DSV3_1024_ADP = {"model": "deepseek-v3", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 1024},
                 "parallel": {"dp": 16, "attn_dp": 8, "tp": 8, "ep": 64}, "options": {"allow_attention_dp": True}}
LLAMA_10K = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 10_000},
             "parallel": {"dp": 10_000}}
DSV3_64 = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
           "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8}}
DSV3_64_BEFORE_MS = 340.0  # build + validate + estimate at commit 9780703 (before the working form), this machine

PIPELINES: list[tuple[str, dict[str, Any], float]] = [
    ("deepseek-v3 fp8 / 1,024x h200 / dp16 tp8 ep64", DSV3_1024, 300.0),
    ("deepseek-v3 fp8 / 1,024x h200 / dp16 attention-DP 8 x tp8 + ep64", DSV3_1024_ADP, 300.0),
    ("llama-3.1-8b / 10,000x h100 / dp 10,000", LLAMA_10K, 300.0),
    ("deepseek-v3 / 64x h200 / dp4 pp2 tp8 ep8 (no slower than before)", DSV3_64, DSV3_64_BEFORE_MS),
]
SEARCHES: list[tuple[str, dict[str, Any], float]] = [
    ("search deepseek-v3 fp8 / 1,024x h200", {"model": "deepseek-v3", "dtype": "fp8",
                                              "hardware": {"gpu": "h200", "num_gpus": 1024}}, 2.0),
    ("search deepseek-v3 fp8 / 16,384x h200", {"model": "deepseek-v3", "dtype": "fp8",
                                               "hardware": {"gpu": "h200", "num_gpus": 16_384}}, 5.0),
]


def _median(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pipeline(plan: dict[str, Any]) -> tuple[int, bool, float]:
    built = build_dag(plan)
    v = validate_dag(plan=plan)
    e = estimate_performance(plan)
    return built.gpus_used, v.valid, e.e2e_latency_ms


def main(repeats: int = 5) -> None:
    for name, plan, target_ms in PIPELINES:
        t0 = time.perf_counter()
        gpus, valid, e2e = pipeline(plan)  # first call: also loads presets and builds the estimator's DAG
        first = (time.perf_counter() - t0) * 1e3
        med = _median(lambda plan=plan: pipeline(plan), repeats) * 1e3
        verdict = "ok" if max(med, first) <= target_ms else "OVER TARGET"
        print(f"{name}: build+validate+estimate {med:.0f} ms median (first call {first:.0f} ms), target "
              f"{target_ms:.0f} ms: {verdict} ({gpus:,} GPUs, {'valid' if valid else 'invalid'}, e2e {e2e:.0f} ms)")
    for name, kwargs, target_s in SEARCHES:
        t0 = time.perf_counter()
        result = search_strategies(**kwargs)
        took = time.perf_counter() - t0
        plans = [c.plan for c in result.top]
        ok = all(validate_dag(plan=p).valid and estimate_performance(p).e2e_latency_ms > 0 for p in plans)
        verdict = "ok" if took <= target_s else "OVER TARGET"
        print(f"{name}: {took:.2f} s, target {target_s:.0f} s: {verdict}; {result.estimated} estimates; top "
              f"{len(plans)} plans {'all validate and estimate' if ok else 'NOT ALL VALID'}"
              f"{'; best: ' + result.top[0].label if result.top else ''}")


if __name__ == "__main__":
    main()
