"""The serving simulator prices speculative decoding: a lone request matches the steady-state step, speculation helps
less as the batch grows, no token is lost to fractions, and the queueing identities still hold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import estimate_performance
from tools.core.plan import parse_plan
from tools.core.speculative import acceptance
from tools.estimate.simulate import SPEC_ONE, emitted, simulate, steps_to

DENSE: dict[str, Any] = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}
SPECS = [{"method": "eagle", "num_draft_tokens": 3}, {"method": "eagle3", "num_draft_tokens": 4},
         {"method": "ngram", "num_draft_tokens": 3, "acceptance_rate": 0.9},
         {"method": "ngram", "num_draft_tokens": 5, "mean_accepted_tokens": 2.37}]


def _plan(engine: str, spec: dict[str, Any] | None, **workload: Any) -> dict[str, Any]:
    wl = {"input_len": 512, "output_len": 128, **workload}
    return {**DENSE, "engine": engine, "workload": wl, **({"speculative": spec} if spec else {})}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("spec", SPECS)
def test_a_lone_request_matches_the_steady_state_step(engine: str, spec: dict[str, Any]) -> None:
    est = estimate_performance(plan=_plan(engine, spec, batch_size=1, concurrency=1, num_requests=4))
    sp = est.speculative
    assert sp is not None and est.served is not None
    assert est.tpot_ms == sp.tpot_with_ms == est.served.tpot_ms.mean
    assert est.tpot_ms == pytest.approx(sp.static.ms_per_token, rel=0.03)
    assert sp.tpot_without_ms == pytest.approx(sp.static.plain_step_ms, rel=0.03)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), engine=st.sampled_from(["vllm", "sglang", "trtllm"]))
def test_speculation_helps_less_as_the_batch_grows(spec: dict[str, Any], engine: str) -> None:
    gains = []
    for conc in (1, 8, 64, 256):
        sp = estimate_performance(plan=_plan(engine, spec, batch_size=conc, concurrency=conc)).speculative
        assert sp is not None
        gains.append(sp.tpot_without_ms / sp.tpot_with_ms)
    assert gains[0] > 1.2  # a lone request gains from each step's accepted drafts
    assert all(a >= b for a, b in zip(gains, gains[1:], strict=False)), gains
    assert gains[-1] < 0.9 * gains[0]


@given(credit=st.integers(0, SPEC_ONE - 1), per_step=st.integers(SPEC_ONE, 8 * SPEC_ONE),
       runs=st.lists(st.integers(1, 50), min_size=1, max_size=20))
def test_runs_of_steps_emit_what_single_steps_would(credit: int, per_step: int, runs: list[int]) -> None:
    total, c = 0, credit
    for k in runs:
        n, c = emitted(c, k, per_step)
        total += n
    assert (total, c) == emitted(credit, sum(runs), per_step)
    assert total * SPEC_ONE + c == credit + sum(runs) * per_step  # nothing lost to fractions


@given(tokens=st.integers(1, 5000), credit=st.integers(0, SPEC_ONE - 1), per_step=st.integers(SPEC_ONE, 8 * SPEC_ONE))
def test_steps_to_is_the_fewest_steps(tokens: int, credit: int, per_step: int) -> None:
    j = steps_to(tokens, credit, per_step)
    assert emitted(credit, j, per_step)[0] >= tokens
    assert j == 1 or emitted(credit, j - 1, per_step)[0] < tokens


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("spec", SPECS)
def test_every_output_token_is_emitted(engine: str, spec: dict[str, Any]) -> None:
    """One client, prompts of one chunk: after its prefill step (which samples the first token) each request takes
    exactly the fewest decode steps whose expected tokens cover the rest of its output."""
    n = 6
    plan = parse_plan(_plan(engine, spec, concurrency=1, num_requests=n, output_len_range=[2, 300], seed=5))
    r = simulate(plan)
    assert r.requests == n
    q = round(acceptance(plan.speculative).tokens_per_step * SPEC_ONE)
    outs = _output_lengths(plan)
    plain = simulate(parse_plan(_plan(engine, None, concurrency=1, num_requests=n, output_len_range=[2, 300], seed=5)))
    # the same lengths without speculation take one decode step a token; the steps besides (prefills, the idle step
    # of a scheduler that runs ahead while the next request is sent) are the same in both runs
    assert r.steps - plain.steps == sum(steps_to(o - 1, 0, q) - (o - 1) for o in outs)


def _output_lengths(plan: Any) -> list[int]:
    """The lengths the simulator draws (fixed prompt length: one draw per request, for its output)."""
    import random

    rng = random.Random(plan.workload.seed)
    lo, hi = plan.workload.output_len_range
    return [rng.randint(lo, hi) for _ in range(plan.workload.num_requests)]


@pytest.mark.parametrize("workload", [{"concurrency": 32, "num_requests": 200, "input_len_range": [200, 1500],
                                       "output_len_range": [16, 400], "seed": 2},
                                      {"request_rate": 20.0, "num_requests": 200}])
def test_littles_law_with_speculation(workload: dict[str, Any]) -> None:
    r = simulate(parse_plan(_plan("vllm", SPECS[0], **workload)))
    assert r.requests == 200
    assert abs(r.mean_in_flight - r.request_throughput_per_s * r.e2e_ms.mean / 1e3) / r.mean_in_flight < 0.02


def test_speculation_is_deterministic_and_its_kv_grows_by_the_tokens_emitted() -> None:
    plan = parse_plan(_plan("vllm", SPECS[0], concurrency=64, num_requests=300, output_len_range=[64, 512], seed=7,
                            input_len=2048))
    a = simulate(plan)
    assert a.model_dump_json() == simulate(plan).model_dump_json()
    tight = simulate(plan.model_copy(update={"engine_options": plan.engine_options.model_copy(
        update={"kv_cache_tokens": 40_000})}))
    assert tight.requests == 300 and tight.preemptions > 0 and tight.kv_peak_fraction <= 1.0
