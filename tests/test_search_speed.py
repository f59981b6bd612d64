"""The serving search's shortcuts (issue 40: a serving search over 64 GPUs <= 2 s) against the long way round: phase
prices shared between a search's simulations (``PriceBook``), node cost keys worked out once per layout, the
ITL statistic's ordering and the remembered one-sequence room; each must leave every figure as it was."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tools.search.strategies as strategies
from tools.core.memory import one_sequence_tokens
from tools.core.plan import parse_plan
from tools.estimate.fast import FastEstimator, PriceBook
from tools.estimate.simulate import Stat, _weighted_stat, simulate
from tools.search.strategies import search_strategies

H100 = {"gpu": "h100-sxm", "num_gpus": 8}
# disaggregated 8B plans whose pools recur: two prefill layouts, two decode layouts, paired every way
POOLS = [({"tp": tp_p, "dp": 1}, {"tp": tp_d, "dp": dp_d, "ep": 1, "pp": 1, "sp": 1, "attn_dp": 1})
         for tp_p, (tp_d, dp_d) in itertools.product((1, 2), ((1, 2), (2, 1)))]


def _disagg(prefill: dict[str, int], decode: dict[str, int], wl: dict[str, Any], engine: str) -> dict[str, Any]:
    return {"model": "llama-3.1-8b", "hardware": H100, "engine": engine, "parallel": prefill,
            "phases": {"decode": decode}, "options": {"disaggregated": True}, "workload": wl}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(range(len(POOLS))), engine=st.sampled_from(["vllm", "sglang", "trtllm"]),
       out=st.sampled_from([2, 40, 130]), clients=st.integers(1, 24), ranged=st.booleans())
def test_shared_phase_prices_change_no_simulated_figure(order: list[int], engine: str, out: int, clients: int,
                                                        ranged: bool) -> None:
    """Plans simulated one after the other with one PriceBook give the bytes each gives alone, in any order, and the
    book prices fewer phases than the plans would one by one (their pools recur)."""
    wl: dict[str, Any] = {"input_len": 600, "output_len": out, "concurrency": clients, "num_requests": 3 * clients}
    if ranged:
        wl |= {"input_len_range": [200, 600], "output_len_range": [1, out]}
    book = PriceBook()
    alone_prices = 0
    for i in order:
        plan = parse_plan(_disagg(*POOLS[i], wl, engine))
        own = PriceBook()
        assert simulate(plan, prices=book).model_dump_json() == simulate(plan, prices=own).model_dump_json() \
            == simulate(plan).model_dump_json()
        alone_prices += len(own.parts)
    assert len(book.parts) < alone_prices


def test_price_book_keeps_apart_what_prices_differently() -> None:
    """A phase is shared only when it is built and priced alike: other degrees, GPUs, lengths or efficiency get
    prices of their own (each estimator sharing a book answers what it answers alone)."""
    book = PriceBook()
    wl = {"input_len": 1024, "output_len": 128}
    plans = [parse_plan({"model": "llama-3.1-8b", "hardware": H100, "parallel": par, "workload": w, "engine": eng})
             for par in ({"tp": 1}, {"tp": 2}, {"tp": 2, "dp": 4}, {"tp": 4, "pp": 2})
             for w in (wl, {**wl, "input_len": 2048})
             for eng in ("vllm", "sglang")]
    plans.append(parse_plan(_disagg({"tp": 2, "dp": 1}, {"tp": 2, "dp": 3}, wl, "vllm")))  # decode off GPU 0
    for plan in plans:
        shared, alone = FastEstimator(plan, prices=book), FastEstimator(plan)
        for phase, batch in itertools.product(("prefill", "decode"), (1, 3, 64)):
            assert shared.phase_parts(phase, batch) == alone.phase_parts(phase, batch)
    # TP2 and DP4 x TP2 price alike (replicas do not change a replica's phase); other degrees or engines do not
    ids = {(p.parallel.tp, p.parallel.dp, p.workload.input_len, p.engine): FastEstimator(p, prices=book)._book_id(
        "decode") for p in plans[:-1]}
    assert ids[(2, 1, 1024, "vllm")] == ids[(2, 4, 1024, "vllm")]
    assert len({ids[(2, 1, 1024, "vllm")], ids[(1, 1, 1024, "vllm")], ids[(2, 1, 1024, "sglang")],
                ids[(4, 1, 1024, "vllm")]}) == 4


def test_serving_search_is_the_same_with_and_without_shared_prices(monkeypatch: Any) -> None:
    """The search's answer does not depend on its simulations sharing their phase prices."""
    kwargs: dict[str, Any] = {"model": "llama-3.1-8b", "hardware": H100, "objective": "throughput",
                              "workload": {"input_len": 1024, "output_len": 128, "concurrency": 64}}
    shared = search_strategies(**kwargs).model_dump_json()
    real = strategies.simulate
    monkeypatch.setattr(strategies, "simulate", lambda plan, prices=None: real(plan))
    assert search_strategies(**kwargs).model_dump_json() == shared


def _weighted_stat_long_way(counts: Counter[tuple[float, float]]) -> Stat:
    """The statistic with its pairs ordered as (pair, count) items, every repeat added one by one."""
    pairs = sorted(counts.items())
    total = sum(w * c for (_, w), c in pairs)
    values = [x * w for (x, w), c in pairs for _ in range(c)]
    acc = 0.0
    for v in values:
        acc += v
    ends = list(itertools.accumulate(w * c for (_, w), c in pairs))

    def q(f: float) -> float:
        i = next(i for i, e in enumerate(ends) if e >= f * total - 1e-9)
        return pairs[min(len(pairs) - 1, i)][0][0]

    return Stat(mean=acc / total, p50=q(0.5), p90=q(0.9), p99=q(0.99))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(1, 300))
def test_weighted_stat_orders_pairs_as_items_do(seed: int, n: int) -> None:
    rng = random.Random(seed)
    gaps = [rng.choice([rng.uniform(0.1, 90.0), float(rng.randint(1, 40)), 12.5]) for _ in range(n)]
    counts = Counter({(g, float(rng.choice([1, 1, 2, 37, 160]))): rng.randint(1, 200) for g in gaps})
    assert _weighted_stat(counts) == _weighted_stat_long_way(counts)


def test_one_sequence_room_remembered_per_plan_and_view() -> None:
    a = parse_plan({"model": "gemma-3-27b", "hardware": H100, "parallel": {"tp": 2}})
    b = parse_plan({"model": "gemma-3-27b", "hardware": H100, "parallel": {"tp": 4}})
    first = [one_sequence_tokens(p, w) for p in (a, b) for w in (True, False)]
    assert first == [one_sequence_tokens(p, w) for p in (a, b) for w in (True, False)]
    assert first[0] > first[1] and first[2] > first[0]  # a full-length cache holds less; TP4 holds more than TP2
