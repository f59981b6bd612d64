"""Benchmark: one serving simulation (tools/estimate/simulate.py) of typical loads, cold (pricing the cost surface)
and warm, and a serving search that simulates its best layouts; issue 40's targets: 2,000 simulated requests in
<= 0.5 s, a serving search over 64 GPUs in <= 2 s (docs/benchmarks.md)."""

from __future__ import annotations

import statistics
import time

from tools import search_strategies
from tools.core.plan import parse_plan
from tools.estimate.simulate import simulate

BASE = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
        "engine": "vllm"}
ADP = {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"attn_dp": 8, "ep": 8},
       "options": {"allow_attention_dp": True}, "engine": "vllm"}
CASES = {
    "llama-3.1-70b TP8 vLLM, 64 clients, 2,000 requests, 1k in / 1k out +-11% (target <= 500 ms)": {
        **BASE, "workload": {"input_len": 1024, "output_len": 1024, "concurrency": 64, "num_requests": 2000,
                             "input_len_range": [910, 1138], "output_len_range": [910, 1138]}},
    # the same 2,000 requests under SGLang's and TensorRT-LLM's schedulers: each engine's path within the target
    "llama-3.1-70b TP8 SGLang, 64 clients, 2,000 requests, 1k in / 1k out +-11% (target <= 500 ms)": {
        **BASE, "engine": "sglang", "workload": {"input_len": 1024, "output_len": 1024, "concurrency": 64,
                                                 "num_requests": 2000, "input_len_range": [910, 1138],
                                                 "output_len_range": [910, 1138]}},
    "llama-3.1-70b TP8 TensorRT-LLM, 64 clients, 2,000 requests, 1k in / 1k out +-11% (target <= 500 ms)": {
        **BASE, "engine": "trtllm", "workload": {"input_len": 1024, "output_len": 1024, "concurrency": 64,
                                                 "num_requests": 2000, "input_len_range": [910, 1138],
                                                 "output_len_range": [910, 1138]}},
    "llama-3.1-70b TP8 vLLM, 64 clients, 1,000 requests, 1k in / 1k out +-11%": {
        **BASE, "workload": {"input_len": 1024, "output_len": 1024, "concurrency": 64, "num_requests": 1000,
                             "input_len_range": [910, 1138], "output_len_range": [910, 1138]}},
    "llama-3.1-70b TP8 vLLM, 64 clients, 1,000 requests, fixed 1k / 1k": {
        **BASE, "workload": {"input_len": 1024, "output_len": 1024, "concurrency": 64, "num_requests": 1000}},
    "llama-3.1-70b TP8 SGLang, Poisson 4 req/s, 1,000 requests, 2k in / 256 out": {
        **BASE, "engine": "sglang", "workload": {"input_len": 2048, "output_len": 256, "request_rate": 4.0,
                                                 "num_requests": 1000}},
    "qwen3-235b attention-DP 8 vLLM, 256 clients, 2,000 requests, 100-1500 in / 10-400 out (ranks in lockstep)": {
        **ADP, "workload": {"input_len": 800, "output_len": 205, "concurrency": 256, "num_requests": 2000,
                            "input_len_range": [100, 1500], "output_len_range": [10, 400]}},
    "qwen3-235b attention-DP 8 vLLM, 256 clients, 2,000 requests, ShareGPT lengths": {
        **ADP, "workload": {"length_dataset": "sharegpt", "concurrency": 256, "num_requests": 2000}},
    "gpt-oss-120b TP8 vLLM, 64 clients, 1k in / 8k out, KV of 300k tokens (preempts)": {
        "model": "gpt-oss-120b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
        "weights": "mxfp4", "engine": "vllm", "engine_options": {"kv_cache_tokens": 300_000},
        "workload": {"input_len": 1024, "output_len": 8192, "concurrency": 64, "num_requests": 640}},
}


def main(repeats: int = 3) -> None:
    for name, data in CASES.items():
        plan = parse_plan(data)
        t0 = time.perf_counter()
        result = simulate(plan)
        cold = (time.perf_counter() - t0) * 1000
        warm, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            simulate(plan)
            warm.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        # CPU time beside the wall time: on a shared machine the wall time counts other processes' turns
        print(f"{name}: {cold:.0f} ms cold, {statistics.median(warm):.0f} ms median of {repeats} "
              f"(CPU {statistics.median(cpu):.0f} ms); "
              f"{result.requests} requests, {result.steps} steps, TTFT {result.ttft_ms.mean:.0f} ms, "
              f"TPOT {result.tpot_ms.mean:.2f} ms, {result.preemptions} preemptions")
    t0, c0 = time.perf_counter(), time.process_time()
    found = search_strategies("deepseek-v3", {"gpu": "h200", "num_gpus": 64},
                              {"input_len": 2048, "output_len": 1024, "concurrency": 1024}, "throughput", serving=True)
    print(f"search deepseek-v3 on 64 H200, 1,024 clients, 2k in / 1k out, serving=True (target <= 2 s): "
          f"{time.perf_counter() - t0:.1f} s (CPU {time.process_time() - c0:.1f} s); {len(found.top)} plans, "
          f"the best at {found.top[0].throughput_tokens_per_s:.0f} tokens/s" if found.top else "no plan")


if __name__ == "__main__":
    main()
