"""Estimate timing: `python -m bench.estimate` prints how long estimate_performance takes."""

from __future__ import annotations

import statistics
import time

from tools import estimate_performance
from tools.core import memory
from tools.estimate import core

CASES = {
    "Llama-3.1-70B, 8x H100-SXM, TP8": {
        "model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
        "workload": {"input_len": 2048, "output_len": 256, "batch_size": 8},
    },
    "DeepSeek-V3 fp8, 64x H200, DP4 PP2 TP8 EP8": {
        "model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
        "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8}, "dtype": "fp8",
        "workload": {"input_len": 2048, "output_len": 256, "batch_size": 32},
    },
    "DeepSeek-V3 fp8, 8x H200, attention-DP 8 + EP8": {
        "model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8},
        "parallel": {"tp": 1, "attn_dp": 8, "ep": 8}, "dtype": "fp8", "options": {"allow_attention_dp": True},
        "workload": {"input_len": 2048, "output_len": 256, "batch_size": 256},
    },
    "Llama-3.1-70B, 16x H100-SXM, disaggregated TP8 prefill | DP2 x TP4 decode": {
        "model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 8},
        "phases": {"decode": {"dp": 2, "tp": 4}}, "options": {"disaggregated": True},
        "workload": {"input_len": 2048, "output_len": 256, "batch_size": 16},
    },
}


def main(repeats: int = 7) -> None:
    for name, plan in CASES.items():
        estimate_performance(plan=plan)  # warm the model/accelerator catalogs
        cold, warm = [], []
        for _ in range(repeats):
            core._PREPARED.clear()  # cold: build the DAG again and account its memory
            memory._CACHE.clear()
            t = time.perf_counter()
            est = estimate_performance(plan=plan)
            cold.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            estimate_performance(plan=plan)  # warm: same plan, DAG reused
            warm.append((time.perf_counter() - t) * 1e3)
        print(f"{name}: cold median {statistics.median(cold):.1f} ms (min {min(cold):.1f}), "
              f"warm median {statistics.median(warm):.1f} ms over {repeats} runs "
              f"(TTFT {est.prefill_latency_ms:.1f} ms, TPOT {est.decode_latency_ms_per_token:.2f} ms)")
    from tools.core.plan import parse_plan
    from tools.estimate.fast import FastEstimator

    for name, plan in CASES.items():
        parsed = parse_plan(plan)
        t = time.perf_counter()
        fast = FastEstimator(parsed)
        build = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        for b in (1, 2, 4, 8, 16, 32, 64, 128):
            fast.headline(b)
        sweep = (time.perf_counter() - t) * 1e3
        print(f"{name}: fast path (search) build {build:.1f} ms, 8-batch sweep {sweep:.1f} ms")


if __name__ == "__main__":
    main()
