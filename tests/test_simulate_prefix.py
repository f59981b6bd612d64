"""The serving simulator prices prefix caching: hits lower TTFT and let more requests run in a tight KV cache, no hit
is the plain engine byte for byte, the pages balance (a shared prefix held once, freed or evicted, never lost), and
the queueing identities still hold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import estimate_performance
from tools.core.plan import parse_plan
from tools.estimate.fast import FastEstimator
from tools.estimate.simulate import PrefixPricing, _Engine, _Req, _setup, resolve_load, run, simulate

ENGINES = ["vllm", "sglang", "trtllm"]


def _plan(engine: str, prefix: dict[str, Any] | None, kv: int | None = None, **workload: Any) -> dict[str, Any]:
    wl = {"input_len": 2048, "output_len": 128, "concurrency": 32, "num_requests": 96, **workload}
    plan: dict[str, Any] = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "engine": engine,
                            "workload": wl}
    if kv:
        plan["engine_options"] = {"kv_cache_tokens": kv}
    if prefix is not None:
        plan["prefix_caching"] = prefix
    return plan


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("no_hit", [{"shared_prefix_len": 0}, {"hit_rate": 0.0}, {"enabled": False},
                                    {"enabled": False, "shared_prefix_len": 1024}])
def test_no_hit_is_the_plain_engine_byte_for_byte(engine: str, no_hit: dict[str, Any]) -> None:
    plain = simulate(parse_plan(_plan(engine, None, kv=30_000)))
    assert simulate(parse_plan(_plan(engine, no_hit, kv=30_000))).model_dump_json() == plain.model_dump_json()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("prefix", [{"shared_prefix_len": 1536}, {"hit_rate": 0.75}])
def test_hits_lower_ttft_and_raise_throughput(engine: str, prefix: dict[str, Any]) -> None:
    plain = simulate(parse_plan(_plan(engine, None)))
    hit = simulate(parse_plan(_plan(engine, prefix)))
    assert hit.ttft_ms.mean < 0.8 * plain.ttft_ms.mean
    assert hit.output_tokens_per_s > plain.output_tokens_per_s
    assert hit.requests == plain.requests


@pytest.mark.parametrize("engine", ENGINES)
def test_a_shared_prefix_is_held_once(engine: str) -> None:
    """In a KV cache that holds few whole requests, a shared prefix (held once) lets more requests run than the same
    share of private hits (each request holds its own) or no caching."""
    kv = 40_000
    plain = simulate(parse_plan(_plan(engine, None, kv=kv, concurrency=64, num_requests=192)))
    private = simulate(parse_plan(_plan(engine, {"hit_rate": 0.75}, kv=kv, concurrency=64, num_requests=192)))
    shared = simulate(parse_plan(_plan(engine, {"shared_prefix_len": 1536}, kv=kv, concurrency=64, num_requests=192)))
    assert shared.mean_running > 1.5 * plain.mean_running
    assert shared.mean_running > 1.5 * private.mean_running
    assert shared.max_running > plain.max_running


def _engines_after(plan_dict: dict[str, Any]) -> list[Any]:
    plan = parse_plan(plan_dict)
    fast = FastEstimator(plan)
    load = resolve_load(plan, fast.layout.dp)
    setup = _setup(plan, fast, load, fast.eff, None)
    result = run(plan, fast, load, setup)
    assert result.requests == load.num_requests
    return setup.engines


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=st.sampled_from(ENGINES), shared=st.integers(1, 2047), kv=st.integers(8_000, 60_000),
       conc=st.integers(1, 48), seed=st.integers(0, 9))
def test_pages_balance_and_the_prefix_is_evicted_not_lost(engine: str, shared: int, kv: int, conc: int,
                                                          seed: int) -> None:
    """Whatever the cache size, every page comes back once the run ends: the prefix is unreferenced, its pages count
    as free (cached or evicted), and nothing is held twice."""
    for e in _engines_after(_plan(engine, {"shared_prefix_len": shared}, kv=kv, concurrency=conc, num_requests=40,
                                  seed=seed, input_len_range=[shared + 1, 2048], output_len_range=[1, 256])):
        assert e.prefix_refs == 0
        assert e.free == e.capacity
        assert e.evictable in (0, e.prefix_pages)
        assert e.prefix_pages <= shared // e.bs


def test_an_unreferenced_prefix_is_reused_then_evicted_when_its_pages_are_taken() -> None:
    """Pages of 16 tokens, a cache of 10 pages, a 32-token shared prefix: the first request computes it and leaves it
    cached; the next hits it (32 tokens skipped, 2 pages referenced, not taken again); once nobody references it and
    an allocation takes its pages, it is gone and the next request computes it again."""
    e = _Engine(0, "both", "vllm", None, 8192, 8, 160, False, prefix=PrefixPricing(32, 0.0))  # type: ignore[arg-type]
    first = _Req(0, 0, 64, 8, prompt=64)
    e.prefix_hit(first)
    assert first.computed == 0
    assert e._grow(first, 64) and e.free == 6
    first.computed = 64
    e.prefix_computed(first)
    e._release(first)
    assert (e.free, e.evictable, e.prefix_pages) == (10, 2, 2)
    second = _Req(1, 1, 64, 8, prompt=64)
    e.prefix_hit(second)
    assert (second.computed, second.blocks, e.free) == (32, 2, 8)
    assert e._grow(second, 64) and e.free == 6  # two pages of its own for the suffix
    e._release(second)
    assert (e.free, e.evictable) == (10, 2)
    other = _Req(2, 2, 144, 8, prompt=144)
    assert e._grow(other, 144) and e.free == 1  # takes the prefix's free pages
    third = _Req(3, 3, 64, 8, prompt=64)
    e.prefix_hit(third)
    assert (third.computed, e.prefix_pages, e.evictable) == (0, 0, 0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=st.sampled_from(ENGINES), hit=st.floats(0.05, 1.0), conc=st.integers(1, 64),
       rate=st.one_of(st.none(), st.floats(2.0, 40.0)))
def test_littles_law_holds_with_hits(engine: str, hit: float, conc: int, rate: float | None) -> None:
    wl: dict[str, Any] = {"concurrency": conc, "num_requests": 60, "output_len_range": [8, 200]}
    if rate is not None:
        wl["request_rate"] = rate
    r = simulate(parse_plan(_plan(engine, {"hit_rate": hit}, **wl)))
    assert r.mean_in_flight == pytest.approx(r.request_throughput_per_s * r.e2e_ms.mean / 1e3, rel=1e-6)


def test_the_estimate_gives_served_figures_with_and_without_hits() -> None:
    est = estimate_performance(plan=_plan("vllm", {"shared_prefix_len": 1536}))
    pf = est.prefix_caching
    assert pf is not None and est.served is not None
    assert pf.ttft_with_ms == est.served.ttft_ms.mean == est.ttft_ms
    assert pf.ttft_without_ms is not None and pf.ttft_with_ms < pf.ttft_without_ms
    assert any("two simulations" in a for a in pf.assumptions)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_suffix_still_attends_to_the_cached_keys(engine: str) -> None:
    """One client, a 7,168-token prefix of 8,192-token prompts: after the first request, a prompt costs more than a
    1,024-token prompt (its queries attend to 8k keys) and much less than the whole prompt."""
    def ttft_p50(input_len: int, prefix: dict[str, Any] | None) -> float:
        wl = {"input_len": input_len, "output_len": 16, "concurrency": 1, "num_requests": 9}
        return simulate(parse_plan(_plan(engine, prefix, **wl))).ttft_ms.p50

    hit = ttft_p50(8192, {"shared_prefix_len": 7168})
    assert 1.1 * ttft_p50(1024, None) < hit < 0.5 * ttft_p50(8192, None)


def _disaggregated(engine: str, prefix: dict[str, Any] | None, kv: int, **workload: Any) -> dict[str, Any]:
    wl = {"input_len": 4096, "output_len": 256, "concurrency": 128, "num_requests": 384, **workload}
    plan: dict[str, Any] = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 3}, "engine": engine,
                            "parallel": {"tp": 1}, "phases": {"prefill": {"dp": 1}, "decode": {"dp": 2, "tp": 1}},
                            "options": {"disaggregated": True}, "engine_options": {"kv_cache_tokens": kv},
                            "workload": wl}
    if prefix is not None:
        plan["prefix_caching"] = prefix
    return plan


def test_a_vllm_decode_pool_holds_a_received_shared_prefix_once() -> None:
    """vLLM's decode instance finds the shared prefix in its own cache and pulls only the rest: in a 60k-token
    decode cache, 4k-token prompts sharing 3.5k tokens run several times as many at once as prompts without the
    share (before, each decode request held its whole prompt: at most 14 ran, with preemptions)."""
    prefix = {"shared_prefix_len": 3584}
    plain = simulate(parse_plan(_disaggregated("vllm", None, 60_000)))
    shared = simulate(parse_plan(_disaggregated("vllm", prefix, 60_000)))
    assert shared.max_running >= 3 * plain.max_running
    assert shared.output_tokens_per_s > 1.5 * plain.output_tokens_per_s
    assert shared.ttft_ms.mean < 0.5 * plain.ttft_ms.mean


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine=st.sampled_from(ENGINES), shared=st.integers(1, 4095), kv=st.integers(9_000, 80_000),
       conc=st.integers(1, 48))
def test_decode_pool_pages_balance_with_a_shared_prefix(engine: str, shared: int, kv: int, conc: int) -> None:
    """Every decode replica gives all its pages back and no reference to the prefix outlives the run; only vLLM's
    decode replicas reuse the prefix (SGLang's and TensorRT-LLM's receive every prompt whole)."""
    plan = parse_plan(_disaggregated(engine, {"shared_prefix_len": shared}, kv, concurrency=conc, num_requests=40))
    fast = FastEstimator(plan)
    load = resolve_load(plan, fast.layout.pools["decode"].dp)
    setup = _setup(plan, fast, load, fast.eff, fast)
    assert run(plan, fast, load, setup).requests == load.num_requests
    for e in setup.engines:
        assert e.prefix_refs == 0 and e.free == e.capacity
        if e.role == "decode":
            assert (e.prefix is not None) == (engine == "vllm")


def test_vllm_cascade_attention_reads_a_prefix_every_running_request_shares_once(monkeypatch) -> None:
    """vLLM's cascade attention (vllm PR #11635): when every running request holds the same cached prefix (at least
    256 tokens, at least 8 requests), a decode step reads it once, not once per request, so 64 clients sharing a
    7,680-token prefix decode faster than the same run with the kernel off; with fewer than 8 running it is off."""
    import tools.estimate.simulate as sim

    wl = {"input_len": 8192, "output_len": 256, "concurrency": 64, "num_requests": 128}
    plan = parse_plan(_plan("vllm", {"shared_prefix_len": 7680}, **wl))
    assert sim.prefix_pricing(plan).cascade
    cascade = simulate(plan)
    few = simulate(parse_plan(_plan("vllm", {"shared_prefix_len": 7680}, **{**wl, "concurrency": 4})))
    monkeypatch.setattr(sim, "CASCADE_MIN_REQUESTS", 10**9)
    off = simulate(plan)
    assert cascade.tpot_ms.mean < 0.8 * off.tpot_ms.mean
    assert cascade.output_tokens_per_s > off.output_tokens_per_s
    assert simulate(parse_plan(_plan("vllm", {"shared_prefix_len": 7680}, **{**wl, "concurrency": 4}))) \
        .model_dump_json() == few.model_dump_json()


@pytest.mark.parametrize("engine,model,prefix,cascade", [
    ("sglang", "llama-3.1-8b", {"shared_prefix_len": 1024}, False),  # no cascade kernel in its default backends
    ("trtllm", "llama-3.1-8b", {"shared_prefix_len": 1024}, False),
    ("vllm", "llama-3.1-8b", {"shared_prefix_len": 255}, False),  # under vLLM's 256-token threshold
    ("vllm", "llama-3.1-8b", {"hit_rate": 0.9}, False),  # each request's own history: nothing all of them share
    ("vllm", "deepseek-v3", {"shared_prefix_len": 1024}, False),  # MLA backends do not run it
    ("vllm", "gemma-2-27b", {"shared_prefix_len": 1024}, False),  # nor sliding-window layers
    ("vllm", "llama-3.1-8b", {"shared_prefix_len": 1024}, True),
])
def test_which_engines_and_models_run_cascade_attention(engine: str, model: str, prefix: dict[str, Any],
                                                       cascade: bool) -> None:
    from tools.estimate.simulate import prefix_pricing

    plan = parse_plan({**_plan(engine, prefix), "model": model})
    assert prefix_pricing(plan).cascade is cascade


def test_a_hit_reads_the_cached_keys_however_short_its_suffix() -> None:
    """A prompt found cached but for its last token still streams the cached keys and values through attention: at
    least the plain decode step's cost per token of context times the cached tokens; a long suffix is bound by its
    attention's arithmetic instead."""
    plan = parse_plan(_plan("vllm", {"shared_prefix_len": 8000}, input_len=8192))
    fast = FastEstimator(plan)
    cost = _setup(plan, fast, resolve_load(plan, 1), fast.eff, None).engines[0].cost
    per_token = cost.kv_read_ms_per_token()
    assert per_token > 0
    assert cost.cached_attention_ms(8000, 1) == pytest.approx(per_token * 8000)
    assert cost.cached_attention_ms(8000, 4096) > per_token * 8000
