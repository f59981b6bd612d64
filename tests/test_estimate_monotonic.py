"""Monotonicity the estimate must keep over arbitrary plans: more sequences or more context never make a step
faster, and spreading experts wider at the same per-GPU batch never lowers decode throughput per GPU."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tools import estimate_performance
from tools.core.engine_profile import ENGINE_IDS

DENSE = st.sampled_from([("llama-3.1-8b", 1), ("llama-3.1-8b", 2), ("llama-3.1-70b", 4), ("llama-3.1-70b", 8),
                         ("mistral-7b", 1)])
GPUS = st.sampled_from(["h100-sxm", "a100-80gb", "h200", "mi300x"])
SLOW = settings(max_examples=12, deadline=None, derandomize=True)


def _est(model: str, tp: int, gpu: str, engine: str, b: int, i: int, o: int):
    return estimate_performance(plan={"model": model, "hardware": {"gpu": gpu, "num_gpus": tp},
                                      "parallel": {"tp": tp}, "engine": engine,
                                      "workload": {"input_len": i, "output_len": o, "batch_size": b}})


@SLOW
@given(DENSE, GPUS, st.sampled_from(ENGINE_IDS), st.integers(1, 256), st.integers(1, 64), st.integers(16, 8192))
def test_latency_monotonic_in_batch(mt: tuple[str, int], gpu: str, engine: str, b: int, extra: int,
                                    i: int) -> None:
    model, tp = mt
    small, big = _est(model, tp, gpu, engine, b, i, 128), _est(model, tp, gpu, engine, b + extra, i, 128)
    assert big.decode_latency_ms_per_token >= small.decode_latency_ms_per_token
    assert big.prefill_latency_ms >= small.prefill_latency_ms


@SLOW
@given(DENSE, GPUS, st.sampled_from(ENGINE_IDS), st.integers(1, 128), st.integers(16, 16384),
       st.integers(1, 16384))
def test_latency_monotonic_in_context(mt: tuple[str, int], gpu: str, engine: str, b: int, i: int,
                                      extra: int) -> None:
    model, tp = mt
    short, long = _est(model, tp, gpu, engine, b, i, 128), _est(model, tp, gpu, engine, b, i + extra, 128)
    assert long.decode_latency_ms_per_token >= short.decode_latency_ms_per_token
    assert long.prefill_latency_ms >= short.prefill_latency_ms


@pytest.mark.parametrize("widths", [(8, 16), (16, 32), (32, 64)])
@pytest.mark.parametrize("per_gpu", [16, 64, 128])
def test_decode_throughput_per_gpu_monotonic_in_ep(widths: tuple[int, int], per_gpu: int) -> None:
    """Published large-scale EP results (DeepSeek, SGLang with DeepEP): wider EP at equal per-GPU batch keeps or
    raises throughput per GPU.  Every point of the grid, on the engine those results ran (sglang): the 'generic'
    profile's NCCL all-to-all loses per-GPU rate past one node at 128 sequences per GPU (EP8 -> EP16 0.87x), which
    no published run confirms or refutes; a sample of four drawn from both engines used to miss those points."""
    rate = []
    for ep in widths:
        est = estimate_performance(plan={
            "model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": ep}, "dtype": "fp8", "engine": "sglang",
            "parallel": {"ep": ep, "attn_dp": ep}, "options": {"allow_attention_dp": True},
            "workload": {"input_len": 2000, "output_len": 200, "batch_size": per_gpu * ep}}, simulate=False)
        rate.append(est.static_batch_throughput.decode_tokens_per_s / ep)
    assert rate[1] >= 0.98 * rate[0]


@settings(max_examples=20, deadline=None, derandomize=True)
@given(DENSE, GPUS, st.integers(1, 4), st.integers(400, 640), st.integers(1, 64))
@example(("llama-3.1-70b", 8), "h200", 1, 500, 20)  # 500 tokens graphed, 520 launched from the host
def test_a_graph_capture_size_only_ever_adds_time(mt: tuple[str, int], gpu: str, b: int, i: int,
                                                  extra: int) -> None:
    """vLLM replays a graph for passes of at most 512 tokens and launches larger ones from the host: crossing the
    line can only make a prefill (and a serving TTFT) slower, never faster."""
    model, tp = mt
    short, long = _est(model, tp, gpu, "vllm", b, i, 128), _est(model, tp, gpu, "vllm", b, i + extra, 128)
    assert long.prefill_latency_ms >= short.prefill_latency_ms
    assert long.steady_state_estimate.ttft_ms >= short.steady_state_estimate.ttft_ms
