"""The serving simulator's shortcuts (issue 40 item 5) against the long way round: one share of identical replicas
counted as many times as there are shares, and a replica's decoding requests held as one cohort."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.generate import P_DIS, P_DP
from tools.core.plan import Plan, parse_plan
from tools.estimate.fast import FastEstimator
from tools.estimate.simulate import (
    Load,
    SimResult,
    _burst_then_spread,
    _phases_spread,
    _setup,
    resolve_load,
    run,
    simulate,
    symmetric_shares,
)

H100 = {"gpu": "h100-sxm", "num_gpus": 4}
DP4: dict[str, Any] = {"model": "llama-3.1-8b", "hardware": H100, "parallel": {"dp": 4}, "engine": "vllm"}
DIS4 = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 6}, "engine": "vllm",
        "parallel": {"tp": 1}, "phases": {"prefill": {"dp": 2}, "decode": {"dp": 4, "tp": 1}},
        "options": {"disaggregated": True}}


def _long_way(plan: Plan, cohorts: bool = True) -> SimResult:
    """Every replica simulated (no shares), optionally without the decode cohorts."""
    fast = FastEstimator(plan)
    lay = fast.layout
    load = resolve_load(plan, lay.pools["decode"].dp if lay.disaggregated else lay.dp)
    setups = [_setup(plan, fast, load, fast.eff, fast if lay.disaggregated else None) for _ in range(2)]
    if not cohorts:
        for e in setups[0].engines + setups[1].engines:
            e.cohort = None
    if _phases_spread(load):  # the burst round, then the rounds with spread phases, every replica simulated
        return _burst_then_spread(plan, fast, load, *setups, symmetric_shares(setups[0], load), 1)
    return run(plan, fast, load, setups[0])


def _load(plan: Plan) -> Load:
    lay = FastEstimator(plan).layout
    return resolve_load(plan, lay.pools["decode"].dp if lay.disaggregated else lay.dp)


def _shares(d: dict[str, Any]) -> int:
    plan = parse_plan(d)
    fast = FastEstimator(plan)
    load = _load(plan)
    return symmetric_shares(_setup(plan, fast, load, fast.eff, fast if fast.layout.disaggregated else None), load)


def test_shares_only_where_replicas_see_the_same_requests() -> None:
    wl = {"input_len": 512, "output_len": 64}
    assert _shares({**DP4, "workload": {**wl, "concurrency": 32, "num_requests": 96}}) == 4
    assert _shares({**DP4, "workload": {**wl, "concurrency": 6, "num_requests": 96}}) == 2  # 6 clients: 2 shares
    assert _shares({**DP4, "workload": {**wl, "num_requests": 100}}) == 4  # a burst
    assert _shares({**DIS4, "workload": {**wl, "concurrency": 32, "num_requests": 96}}) == 2  # gcd(2, 4)
    # Poisson arrivals dealt round-robin, or drawn lengths, differ from replica to replica: no shortcut
    assert _shares({**DP4, "workload": {**wl, "request_rate": 50.0, "num_requests": 96}}) == 1
    assert _shares({**DP4, "workload": {**wl, "concurrency": 32, "num_requests": 96,
                                        "output_len_range": [32, 64]}}) == 1


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(per=st.integers(1, 24), rounds=st.integers(1, 4), out=st.sampled_from([2, 33, 128]),
       disagg=st.booleans())
def test_one_share_counted_n_times_is_the_whole_deployment(per: int, rounds: int, out: int, disagg: bool) -> None:
    """The shortcut against every replica simulated: the same requests; steps, throughput and latencies agree to
    within the moves vLLM's routing makes at a shared instant (the whole run routes requests in event order: a
    replica whose requests end first counts its clients' next requests as waiting, 4 x each, and sends some of them
    to the replicas whose requests end in the same instant but later in the event order): 5 %, and 15 % for
    2-token outputs, where every request of a replica ends in the same step as its neighbours'."""
    base = DIS4 if disagg else DP4
    shares = 2 if disagg else 4
    plan = parse_plan({**base, "workload": {"input_len": 700, "output_len": out, "concurrency": shares * per,
                                            "num_requests": shares * per * rounds}})
    short, whole = simulate(plan), _long_way(plan)
    tol = 0.05 if out > 2 else 0.15
    assert short.requests == whole.requests and abs(short.steps - whole.steps) <= tol * whole.steps
    assert short.load == whole.load and short.preemptions == whole.preemptions
    for a, b in [(short.output_tokens_per_s, whole.output_tokens_per_s), (short.ttft_ms.mean, whole.ttft_ms.mean),
                 (short.tpot_ms.mean, whole.tpot_ms.mean), (short.e2e_ms.mean, whole.e2e_ms.mean),
                 (short.mean_in_flight, whole.mean_in_flight)]:
        assert abs(a - b) <= tol * abs(b) + 1e-9
    # Little's law still holds on the counted share
    assert abs(short.mean_in_flight - short.request_throughput_per_s * short.e2e_ms.mean / 1e3) \
        <= 0.02 * short.mean_in_flight


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(["closed", "poisson", "burst"]), n=st.integers(4, 90), c=st.integers(1, 40),
       out=st.sampled_from([1, 2, 17, 150, 400]), ranged=st.booleans(),
       kv=st.sampled_from([None, 3000, 6000, 20000]), engine=st.sampled_from(["vllm", "generic", "sglang", "trtllm"]),
       disagg=st.booleans())
def test_decode_cohort_is_byte_identical_to_request_by_request(mode: str, n: int, c: int, out: int, ranged: bool,
                                                              kv: int | None, engine: str, disagg: bool) -> None:
    """The cohort forms, prices and ends every step as the request-by-request code does, through KV walls that
    preempt or retract (the requests get their own state back and are gathered again), to the byte: on a
    disaggregated decode replica (under SGLang with the admission reserve summed over the cohort) and on aggregated
    vLLM and TensorRT-LLM replicas, where prompts being computed step beside it (vLLM's scheduler runs ahead, the
    generic one does not; TensorRT-LLM's requests hold their pages from admission)."""
    wl: dict[str, Any] = {"input_len": 900, "output_len": out, "num_requests": n, "seed": n}
    if mode == "closed":
        wl["concurrency"] = c
    elif mode == "poisson":
        wl["request_rate"] = float(c * 5)
    if ranged:
        wl |= {"input_len_range": [300, 900], "output_len_range": [1, out]}
    d = {**(P_DIS if disagg else P_DP), "engine": engine, "workload": wl}
    if kv:
        d["engine_options"] = {"kv_cache_tokens": kv}
    plan = parse_plan(d)
    assert _long_way(plan).model_dump_json() == _long_way(plan, cohorts=False).model_dump_json()
