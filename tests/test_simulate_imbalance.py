"""Attention-DP ranks and DP replicas as the engines run them (per-rank queues and KV, the front end's routing, the
group stepping at its slowest rank), and lengths drawn from a dataset's histogram (issue 40, item 1)."""

from __future__ import annotations

import random
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures.generate import ADP_QWEN3
from tools.core.errors import PdagInputError
from tools.core.plan import LENGTH_DATASETS, parse_plan
from tools.estimate.fast import FastEstimator
from tools.estimate.simulate import (
    SimResult,
    _Dispatch,
    _Engine,
    _Lengths,
    _Setup,
    _setup,
    resolve_load,
    run,
    simulate,
)


def _runs(d: dict[str, Any]) -> tuple[SimResult, SimResult, SimResult]:
    """(ranks in lockstep, as simulated; the same ranks stepping on their own; the pre-rank model: one scheduler
    over every rank's budget, sequences and KV), all under the same load through the same event loop."""
    plan = parse_plan(d)
    fast = FastEstimator(plan)
    load = resolve_load(plan, fast.layout.dp)
    ranked = run(plan, fast, load, _setup(plan, fast, load, fast.eff, None))
    alone = _setup(plan, fast, load, fast.eff, None)
    for e in alone.engines:
        e.peers = None
    free = run(plan, fast, load, alone)
    s = _setup(plan, fast, load, fast.eff, None)
    g, e0 = s.ranks[0], s.engines[0]
    pooled = [_Engine(i, "both", s.policy, e0.cost, e0.budget * g, e0.max_seqs * g, s.kv_tokens, e0.ahead)
              for i in range(len(s.engines) // g)]
    one = run(plan, fast, load, _Setup(s.policy, pooled, list(range(len(pooled))), [], 0.0, s.gpus, s.kv_tokens))
    return ranked, free, one


def _close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol * abs(b)


def test_a_balanced_fixed_length_load_is_priced_as_one_scheduler_over_all_ranks() -> None:
    """Every rank holding the same requests: the lockstep group's step is the pooled step (within 3 %: the ranks
    admit and finish their prompts one step apart where the pooled budget took them together)."""
    d = {**ADP_QWEN3, "engine": "vllm", "engine_options": {"kv_cache_tokens": 400_000},
         "workload": {"input_len": 1024, "output_len": 256, "concurrency": 64, "num_requests": 64}}
    ranked, _, pooled = _runs(d)
    assert ranked.requests == pooled.requests == 64
    for a, b in [(ranked.tpot_ms.mean, pooled.tpot_ms.mean), (ranked.output_tokens_per_s, pooled.output_tokens_per_s),
                 (ranked.e2e_ms.mean, pooled.e2e_ms.mean)]:
        assert _close(a, b, 0.03)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_drawn_lengths_make_the_group_slower_than_its_ranks_alone(engine: str) -> None:
    """ShareGPT's long tail leaves ranks unevenly loaded; stepping at the slowest rank's time, the group decodes
    slower than the same ranks each at its own pace (KV to spare, so that only the steps differ)."""
    d = {**ADP_QWEN3, "engine": engine, "engine_options": {"kv_cache_tokens": 400_000},
         "workload": {"length_dataset": "sharegpt", "concurrency": 128, "num_requests": 640, "seed": 1}}
    ranked, free, _ = _runs(d)
    assert ranked.tpot_ms.mean > 1.03 * free.tpot_ms.mean
    assert ranked.output_tokens_per_s < free.output_tokens_per_s


@pytest.mark.parametrize("workload", [
    {"length_dataset": "sharegpt", "concurrency": 96, "num_requests": 400},
    {"length_dataset": "sharegpt", "request_rate": 40.0, "num_requests": 300},
    {"input_len": 800, "output_len": 200, "input_len_range": [100, 1500], "output_len_range": [10, 400],
     "concurrency": 48, "num_requests": 240},
])
def test_littles_law_holds_with_ranks_and_datasets(workload: dict[str, Any]) -> None:
    r = simulate(parse_plan({**ADP_QWEN3, "engine": "vllm", "workload": workload}))
    assert abs(r.mean_in_flight - r.request_throughput_per_s * r.e2e_ms.mean / 1e3) <= 0.02 * r.mean_in_flight


class _Fake:
    def __init__(self, waiting: int, running: int) -> None:
        self.waiting, self.running, self.inbound = [None] * waiting, [None] * running, 0


def test_routing_as_the_front_ends_route() -> None:
    """vLLM: least 4 x waiting + running, the first of equal scores; SGLang: round-robin whatever the load."""
    engines: Any = [_Fake(1, 0), _Fake(0, 3), _Fake(0, 5)]
    assert _Dispatch("vllm", engines)([0, 1, 2]) is engines[1]  # 4 > 3
    engines[1].inbound = 1  # a prompt's KV on its way there counts as waiting
    assert _Dispatch("vllm", engines)([0, 1, 2]) is engines[0]
    rr = _Dispatch("sglang", engines)
    assert [rr([0, 1, 2]) for _ in range(4)] == [engines[0], engines[1], engines[2], engines[0]]


def test_a_dataset_load_is_drawn_deterministically_at_its_stated_means() -> None:
    base = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}
    plan = parse_plan({**base, "workload": {"length_dataset": "sharegpt", "concurrency": 8, "num_requests": 64}})
    ds = LENGTH_DATASETS["sharegpt"]
    assert (plan.workload.input_len, plan.workload.output_len) == (ds["mean_input_tokens"], ds["mean_output_tokens"])
    a, b = simulate(plan), simulate(plan)
    assert a.model_dump_json() == b.model_dump_json()
    assert f"ShareGPT lengths, mean {ds['mean_input_tokens']} in / {ds['mean_output_tokens']} out" in a.load
    other = simulate(parse_plan({**base, "workload": {"length_dataset": "sharegpt", "concurrency": 8,
                                                      "num_requests": 64, "seed": 9}}))
    assert other.model_dump_json() != a.model_dump_json()
    # the heavy tail: most prompts are shorter than the mean
    draw, rng = _Lengths("sharegpt", (300, 150)), random.Random(0)
    xs = [draw.draw(rng) for _ in range(40_000)]
    assert _close(statistics.fmean(x for x, _ in xs), 300, 0.04)
    assert _close(statistics.fmean(y for _, y in xs), 150, 0.04)
    assert statistics.median(x for x, _ in xs) < 0.6 * 300
    with pytest.raises(PdagInputError) as exc:
        parse_plan({**base, "workload": {"length_dataset": "sharegpt", "input_len_range": [10, 20]}})
    assert "length_dataset" in exc.value.problem


@settings(max_examples=40, deadline=None)
@given(i=st.integers(1, 50_000), o=st.integers(1, 20_000), seed=st.integers(0, 2**31 - 1))
def test_drawn_lengths_lie_in_the_spans_the_cost_surface_is_priced_over(i: int, o: int, seed: int) -> None:
    draw, rng = _Lengths("sharegpt", (i, o)), random.Random(seed)
    (ilo, ihi), (olo, ohi) = draw.spans
    for _ in range(50):
        x, y = draw.draw(rng)
        assert 1 <= ilo <= x <= ihi and 1 <= olo <= y <= ohi
