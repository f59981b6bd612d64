"""Benchmark: search_strategies wall time for the targets of issue 7 (DeepSeek-V3 on up to 64 H200 <= 1 s,
Llama-3.1-70B on 8 H100 <= 0.3 s) and issue 40 (a serving search over 64 GPUs <= 2 s)."""

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
    # issue 40: a serving search (the best layouts re-priced by the serving simulator) over 64 GPUs <= 2 s
    "deepseek-v3 fp8 / 64x h200 / throughput / serving": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8",
         "objective": "throughput", "serving": True}, 2.0),
    "deepseek-v3 fp8 / 64x h200 / throughput / serving, 1,024 clients, 2k in / 1k out": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8",
         "workload": {"input_len": 2048, "output_len": 1024, "concurrency": 1024}, "objective": "throughput",
         "serving": True}, 2.0),
    # the same load under vLLM's, SGLang's and TensorRT-LLM's profiles and schedulers (the case above is the generic
    # profile, which schedules as vLLM; SGLang's admission reserve, TensorRT-LLM's whole-request page reservation):
    # each engine's simulator path within the same target
    "deepseek-v3 fp8 / 64x h200 / throughput / serving, 1,024 clients, 2k in / 1k out, vllm": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8",
         "workload": {"input_len": 2048, "output_len": 1024, "concurrency": 1024}, "objective": "throughput",
         "serving": True, "engine": "vllm"}, 2.0),
    "deepseek-v3 fp8 / 64x h200 / throughput / serving, 1,024 clients, 2k in / 1k out, sglang": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8",
         "workload": {"input_len": 2048, "output_len": 1024, "concurrency": 1024}, "objective": "throughput",
         "serving": True, "engine": "sglang"}, 2.0),
    "deepseek-v3 fp8 / 64x h200 / throughput / serving, 1,024 clients, 2k in / 1k out, trtllm": (
        {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64}, "dtype": "fp8",
         "workload": {"input_len": 2048, "output_len": 1024, "concurrency": 1024}, "objective": "throughput",
         "serving": True, "engine": "trtllm"}, 2.0),
}


def main(repeats: int = 3) -> None:
    for name, (kwargs, target) in CASES.items():
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            result = search_strategies(**kwargs)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        med = statistics.median(times)
        best = result.top[0]
        verdict = "ok" if med <= target else "OVER"
        print(  # CPU time beside the wall time: on a shared machine the wall time counts other processes' turns
            f"{name}: {med * 1000:.0f} ms median (min {min(times) * 1000:.0f}, "
            f"CPU {statistics.median(cpu) * 1000:.0f}, target {target * 1000:.0f} ms, {verdict}); "
            f"{result.estimated} estimates, {result.considered} alternatives, "
            f"{sum(result.rejected.values())} rejected; top: {best.label} ({best.reason.split(';')[0]})"
        )
        if result.comparison:
            print(f"    {result.comparison[:240]}")


if __name__ == "__main__":
    main()
