"""The serving simulator's KV cache is the room the engine sizes at start-up, requests hold the pages of the tokens
they have, and admission is gated as the engines gate it: a long prompt is not admitted on its first chunk alone
(vLLM's full_sequence_must_fit, SGLang's PrefillAdder), so a cache that holds one long request never thrashes."""

from __future__ import annotations

from typing import Any

import pytest

from tools.core.memory import kv_cache_tokens, memory_report
from tools.core.plan import parse_plan
from tools.estimate.simulate import simulate


def _plan(engine: str, **workload: Any) -> dict[str, Any]:
    return {"model": "qwen3-8b", "hardware": {"gpu": "rtx-4090", "num_gpus": 1}, "engine": engine,
            "workload": {"input_len": 20480, "output_len": 128, **workload}}


def test_the_simulated_cache_is_the_memory_models_room() -> None:
    plan = parse_plan(_plan("vllm", num_requests=4))
    room = kv_cache_tokens(plan)["both"]
    assert simulate(plan).kv_cache_tokens == room
    # the room holds more than the one whole 20.6k-token sequence the batch accounting rounds it down to
    assert memory_report(plan).max_batch_size_that_fits == 1 and room > 1.5 * (20480 + 128)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_cache_of_one_and_a_half_long_requests_does_not_thrash(engine: str) -> None:
    """Two 20k prompts do not fit together: the second waits for the first instead of being admitted on its first
    chunk and preempted (recomputed from scratch) again and again."""
    r = simulate(parse_plan(_plan(engine, concurrency=4, num_requests=8)))
    assert r.requests == 8
    assert r.preemptions == 0
    assert r.max_running == 1


def test_a_shared_prefix_burst_runs_at_once() -> None:
    """100 prompts of 20k tokens that share all but their last page: the prefix is held once and each request holds
    only its own pages, so the whole burst runs together (the old full-context sizing ran at most 8).  On average 48
    run: vLLM's cascade attention reads the shared prefix once per decode step, so decoding is a smaller share of the
    run than the prompts' tails (87 when each request read the prefix itself)."""
    r = simulate(parse_plan(_plan("vllm", num_requests=100) | {"prefix_caching": {"shared_prefix_len": 20480}}))
    assert r.requests == 100
    assert r.max_running == 100
    assert r.mean_running > 40
