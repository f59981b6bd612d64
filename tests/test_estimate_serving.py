"""Serving mode: continuous batching with chunked prefill, and the best concurrency under an SLA."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import estimate_performance
from tools.core.efficiency import efficiency_for
from tools.core.errors import PdagInputError


def plan(b: int, i: int = 2048, o: int = 256, **extra: object) -> dict:
    return {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
            "dtype": "fp8", "engine": "vllm", "workload": {"input_len": i, "output_len": o, "batch_size": b},
            **extra}


def test_serving_step_is_decode_plus_prompt_share() -> None:
    e = estimate_performance(plan=plan(32))
    one = estimate_performance(plan=plan(1))
    sv = e.steady_state_estimate
    assert sv is not None and sv.concurrency == 32
    # a step carries 32/256 of one request's prefill work on top of the decode step at 32, less the host cost and
    # the weight reads the decode step already pays (70B fp8 over 8 H100s: ~8.8 GB per GPU at 0.8 x 3.35 TB/s)
    w_ms = e.memory.weights_bytes / (3.35e12 * efficiency_for("h100-sxm", engine="vllm")["memory_efficiency"]) * 1e3
    assert 2.5 < w_ms < 4.0
    work = max(0.0, one.prefill_latency_ms - e.prefill.step_overhead_ms - w_ms)
    assert sv.step_ms == pytest.approx(e.decode_latency_ms_per_token + 32 / 256 * work, rel=1e-6)
    # a request's own prompt is in its TTFT and its replacement comes after its last token: its decode steps carry
    # the other 31 requests' prompts
    assert sv.tpot_ms == pytest.approx(e.decode_latency_ms_per_token + 31 / 256 * work, rel=1e-6)
    assert sv.tpot_ms > e.decode_latency_ms_per_token  # prefill interferes with decode
    assert sv.ttft_ms < e.prefill_latency_ms  # one prompt, not the whole static batch
    assert sv.output_tokens_per_s_per_gpu == pytest.approx(32 / (sv.step_ms / 1e3) / 8)
    assert sv.output_tokens_per_s_per_user == pytest.approx(1e3 / sv.tpot_ms)


def test_a_lone_clients_tpot_is_the_bare_decode_step_even_with_a_long_prompt() -> None:
    """One client's decode never shares a step with a prompt (its own came before, its next comes after), as
    TensorRT-LLM's 130k-token LongBench run shows: 9.3 ms TPOT after a 16 s TTFT on one H200."""
    e = estimate_performance(plan=plan(1, i=131072, o=200))
    assert e.steady_state_estimate is not None
    assert e.steady_state_estimate.tpot_ms == pytest.approx(e.decode_latency_ms_per_token, rel=1e-9)
    sv = e.steady_state_estimate
    assert sv.step_ms > 1.5 * sv.tpot_ms  # the throughput still pays the next prompt


def test_best_under_sla_meets_it_and_beats_its_neighbour() -> None:
    e = estimate_performance(plan=plan(8), sla={"max_tpot_ms": 40, "max_ttft_ms": 1000})
    best = e.best_under_sla
    assert best is not None and best.meets_sla and best.tpot_ms <= 40 and best.ttft_ms <= 1000
    over = estimate_performance(plan=plan(best.concurrency + 1)).steady_state_estimate
    assert over is not None and over.tpot_ms > 40  # one more request in flight breaks the SLA
    assert best.output_tokens_per_s_per_gpu >= e.steady_state_estimate.output_tokens_per_s_per_gpu  # type: ignore[union-attr]


def test_impossible_sla_gives_none_and_bad_sla_is_named() -> None:
    assert estimate_performance(plan=plan(1), sla={"max_tpot_ms": 0.01}).best_under_sla is None
    with pytest.raises(PdagInputError) as exc:
        estimate_performance(plan=plan(1), sla={"max_tpot_ms": -1})
    assert exc.value.field.startswith("sla")


@settings(max_examples=10, deadline=None, derandomize=True)
@given(st.integers(1, 512), st.integers(1, 256), st.integers(16, 8192), st.integers(16, 2048))
def test_serving_latencies_grow_with_concurrency(c: int, extra: int, i: int, o: int) -> None:
    lo = estimate_performance(plan=plan(c, i, o)).steady_state_estimate
    hi = estimate_performance(plan=plan(c + extra, i, o)).steady_state_estimate
    assert lo is not None and hi is not None
    assert hi.tpot_ms >= lo.tpot_ms and hi.ttft_ms >= lo.ttft_ms
    # clients in lockstep wait for the prompts of the burst ahead of them: never less than spread arrivals
    assert lo.ttft_lockstep_ms >= lo.ttft_ms and hi.ttft_lockstep_ms >= hi.ttft_ms
    assert hi.ttft_lockstep_ms >= lo.ttft_lockstep_ms


def test_best_under_sla_uses_the_estimates_efficiency_overlay() -> None:
    sla = {"max_tpot_ms": 40}
    base = estimate_performance(plan=plan(8), sla=sla).best_under_sla
    slow = estimate_performance(plan=plan(8), sla=sla, efficiency={"small_gemm_memory_efficiency": 0.3,
                                                                   "memory_efficiency": 0.3}).best_under_sla
    assert base is not None and slow is not None and slow.concurrency < base.concurrency


def test_search_under_sla_prices_continuous_batching() -> None:
    """Static batches pay the whole batch's prefill as TTFT; under continuous batching the search can hold more
    requests in flight within the same SLA, and every plan it returns meets it."""
    from tools.search.strategies import search_strategies

    args = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "workload": {"input_len": 2048, "output_len": 256}, "objective": "throughput", "dtype": "fp8",
            "slo": {"max_tpot_ms": 50, "max_ttft_ms": 1000}, "engine": "vllm", "disaggregated": False}
    static = search_strategies(**args).top[0]
    served = search_strategies(**args, serving=True).top[0]
    assert served.plan["engine"] == "vllm"
    assert served.batch_size > static.batch_size
    assert served.tpot_ms <= 50 and served.ttft_ms <= 1000
    check = estimate_performance(plan=served.plan)  # the served request's figures, as the search ranked them
    assert check.tpot_ms == pytest.approx(served.tpot_ms, rel=1e-6)
    assert check.ttft_ms == pytest.approx(served.ttft_ms, rel=1e-6)
    burst = search_strategies(**(args | {"slo": args["slo"] | {"arrivals": "lockstep"}}), serving=True).top[0]
    assert burst.ttft_ms <= 1000 and burst.tpot_ms <= 50
    assert estimate_performance(plan=burst.plan).ttft_ms == pytest.approx(burst.ttft_ms, rel=1e-6)


def test_a_lone_client_waits_for_nothing_but_its_prefill() -> None:
    e = estimate_performance(plan=plan(1))
    sv = e.steady_state_estimate
    assert sv is not None and sv.ttft_ms == pytest.approx(e.prefill_latency_ms)
    assert e.steady_state_estimate.ttft_lockstep_ms == pytest.approx(e.prefill_latency_ms)


def test_a_burst_of_prompts_costs_half_its_prefill_on_average() -> None:
    """C prompts arriving together wait, on average, for half of the burst: the mean TTFT lies between half and
    all of the static batch's prefill of the same C prompts (which also pays their attention at once)."""
    for c in (16, 64, 128):
        e = estimate_performance(plan=plan(c, 1024, 512))
        sv = e.steady_state_estimate
        assert sv is not None and sv.queue_ms == 0
        assert 0.4 * e.prefill_latency_ms < sv.ttft_lockstep_ms < 1.05 * e.prefill_latency_ms, c
        assert sv.ttft_lockstep_ms > 3 * sv.ttft_ms


def test_a_lockstep_sla_holds_fewer_clients() -> None:
    """The same TTFT target checked against bursts of prompts admits no more clients than against spread arrivals,
    and the concurrency it picks meets it in lockstep."""
    sla = {"max_tpot_ms": 60, "max_ttft_ms": 800}
    spread = estimate_performance(plan=plan(8, 1024, 512), sla=sla).best_under_sla
    burst = estimate_performance(plan=plan(8, 1024, 512), sla=sla | {"arrivals": "lockstep"}).best_under_sla
    assert spread is not None and burst is not None
    assert burst.concurrency < spread.concurrency and burst.ttft_lockstep_ms <= 800 < spread.ttft_lockstep_ms


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_clients_beyond_the_kv_cache_queue(engine: str) -> None:
    """More clients than the KV cache holds: the extra ones wait (Little's law over the running slots), so TPOT
    and throughput stay those of the running batch and TTFT grows by the wait."""
    def serve(c: int):
        return estimate_performance(plan=plan(c, 4096, 1024, engine=engine)).steady_state_estimate

    first = serve(1)
    assert first is not None and first.running == 1 and first.queue_ms == 0
    cap = estimate_performance(plan=plan(1, 4096, 1024, engine=engine)).memory.max_batch_size_that_fits
    full = serve(10 * cap)
    assert full is not None and cap <= full.running < 10 * cap and full.queue_ms > 0
    held = serve(full.running)
    assert held is not None and held.queue_ms == 0
    assert full.tpot_ms == pytest.approx(held.tpot_ms) and \
        full.output_tokens_per_s_per_gpu == pytest.approx(held.output_tokens_per_s_per_gpu)
    service = held.ttft_ms + (1024 - 1) * held.tpot_ms
    assert full.queue_ms == pytest.approx((10 * cap / full.running - 1) * service)


def test_on_demand_pages_hold_more_requests_than_full_reservation() -> None:
    """vLLM takes KV pages as tokens arrive (on average the prompt and half the output), TensorRT-LLM's default
    scheduler reserves the whole output up front."""
    vllm = estimate_performance(plan=plan(4096, 4096, 1024, engine="vllm")).steady_state_estimate
    trt = estimate_performance(plan=plan(4096, 4096, 1024, engine="trtllm")).steady_state_estimate
    assert vllm is not None and trt is not None
    assert vllm.running == pytest.approx(trt.running * (4096 + 1024) / (4096 + 512), abs=1)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 4096), st.integers(1, 4096), st.floats(0.1, 5_000.0), st.floats(0.0, 50.0),
       st.integers(256, 65_536), st.floats(0.0, 3.0))
def test_a_burst_waits_at_least_its_own_prefill_and_grows_with_its_size(running: int, more: int, gpu_ms: float,
                                                                        shared_ms: float, chunk: int,
                                                                        host: float) -> None:
    """Also for an eager engine whose host takes ``host`` times the GPU's time to launch a prefill's kernels."""
    from tools.core.plan import parse_plan
    from tools.estimate.serving import Prefill, burst_ttft

    p = parse_plan(plan(1))
    eff = {**efficiency_for("h100-sxm", engine="vllm"), "prefill_chunk_tokens": float(chunk)}
    step = eff["step_overhead_ms"]
    latency = max(gpu_ms, host * gpu_ms) + step
    pre = Prefill(latency, host * gpu_ms, latency - gpu_ms - step)
    one = burst_ttft(p, eff, running, pre, shared_ms)
    assert one >= latency * (1 - 1e-9)
    assert burst_ttft(p, eff, running + more, pre, shared_ms) >= one


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 5_000.0)), min_size=1, max_size=8),
       st.floats(0.0, 200.0))
def test_an_eager_pass_takes_at_least_its_gpu_work_and_each_hosts_launches(stages: list[tuple[float, float]],
                                                                          host_us: float) -> None:
    """Pipeline stages with their own hosts: the pass is never shorter than the GPU work or any stage's launches,
    never longer than the stages taken one after the other at their own floors, and a slower host never helps."""
    from tools.estimate.costs import eager_pass, host_floor

    gpu, launches = [g for g, _ in stages], [n for _, n in stages]
    t = eager_pass(gpu, launches, host_us)
    assert t >= sum(gpu) * (1 - 1e-12) and t >= max(n * host_us * 1e-6 for n in launches) * (1 - 1e-12)
    assert t <= sum(host_floor(gpu, launches, host_us)) * (1 + 1e-12)
    assert eager_pass(gpu, launches, host_us * 1.5) >= t
    assert eager_pass(gpu, launches, 0.0) == pytest.approx(sum(gpu))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.integers(64, 32768), st.integers(1, 4096), st.sampled_from([None, 0, 8, 512, 16384]))
def test_a_larger_step_budget_never_raises_ttft(budget: int, more: int, graph: int | None) -> None:
    """plan.engine_options.max_batched_tokens: a prompt cut into fewer chunks never waits longer, whatever the
    graph capture size; TPOT does not depend on the budget."""
    base = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "engine": "vllm",
            "workload": {"input_len": 6000, "output_len": 500, "batch_size": 16}}
    opts = {} if graph is None else {"graph_max_tokens": graph}
    small = estimate_performance(plan={**base, "engine_options": {**opts, "max_batched_tokens": budget}})
    large = estimate_performance(plan={**base, "engine_options": {**opts, "max_batched_tokens": budget + more}})
    small, large = small.steady_state_estimate, large.steady_state_estimate
    assert large.ttft_ms <= small.ttft_ms * (1 + 1e-9)
    assert large.tpot_ms == pytest.approx(small.tpot_ms)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_scheduler_one_step_ahead_costs_a_new_request_one_step(engine: str) -> None:
    """vLLM's async and SGLang's and TensorRT-LLM's overlap schedulers prepare step n+1 while step n runs, so a
    prompt arriving under load waits one whole step more; a lone client finds the engine idle and waits for none,
    and neither the step nor the burst-arrival end changes."""
    def serving(b: int, ahead: bool):
        p = plan(b, engine=engine, engine_options={"scheduler_ahead": ahead})
        return estimate_performance(plan=p).steady_state_estimate

    on, off = serving(32, True), serving(32, False)
    assert on is not None and off is not None
    assert on.tpot_ms == off.tpot_ms and on.prefill_ms == off.prefill_ms
    assert on.ttft_ms - off.ttft_ms == pytest.approx(on.step_ms, rel=1e-9)
    assert on.ttft_lockstep_ms >= on.ttft_ms
    lone_on, lone_off = serving(1, True), serving(1, False)
    assert lone_on is not None and lone_off is not None and lone_on.ttft_ms == lone_off.ttft_ms
    default = estimate_performance(plan=plan(32, engine=engine)).steady_state_estimate
    assert default is not None and default.ttft_ms == on.ttft_ms  # all three schedule ahead by default


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm-cpp"])
def test_a_burst_that_fits_one_step_waits_for_the_whole_step(engine: str) -> None:
    """Prompts that share a step get their first token together when it ends: 20 prompts of 200 tokens arriving
    at once fit one 8k-token step, so their lockstep TTFT is that whole step, near the static prefill of the same
    batch in one pass (not half of it, as first come first served over a continuous queue would give)."""
    p = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "parallel": {"tp": 1},
         "engine": engine, "workload": {"input_len": 200, "output_len": 200, "batch_size": 20}}
    e = estimate_performance(plan=p)
    assert e.steady_state_estimate is not None and e.steady_state_estimate.running == 20
    assert 0.7 * e.prefill_latency_ms <= e.steady_state_estimate.ttft_lockstep_ms <= 1.05 * e.prefill_latency_ms
