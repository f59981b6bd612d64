"""More clients than the KV cache holds is a queue, not a plan that cannot start (MEM-LOAD-QUEUES).

An outside agent planned Qwen3-Next at ~100k tokens for 32 clients: validate refused it on MEM-FITS ("lower the
batch", though no batch was stated) and export refused it, while the estimate's simulation ran 28 at once and queued
the rest, as the engines do.  A stated batch_size that does not fit is still MEM-FITS.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tools.core.plan import Plan
from tools.engines.launch import export_plan
from tools.estimate.core import estimate_performance
from tools.rules.validate import validate_dag

LONG = {"input_len": 30000, "output_len": 1000}


def _plan(**wl: int) -> dict:
    return {"model": "qwen3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "workload": {**LONG, **wl}}


def _rules(res) -> dict[str, str]:
    return {v.rule_id: v.severity for v in res.violations}


def test_clients_beyond_the_cache_queue_and_a_stated_batch_does_not_fit():
    queued = validate_dag(plan=_plan(concurrency=64))
    assert queued.valid and _rules(queued) == {"MEM-LOAD-QUEUES": "warning"}
    held = next(v for v in queued.violations if v.rule_id == "MEM-LOAD-QUEUES")
    assert "of the 64 sequences" in held.message
    stated = validate_dag(plan=_plan(concurrency=64, batch_size=64))
    assert not stated.valid and "MEM-FITS" in _rules(stated)
    assert "MEM-LOAD-QUEUES" not in _rules(stated)


def test_the_queued_load_exports_and_its_estimate_says_it_queues():
    assert export_plan(_plan(concurrency=64), "vllm").command.startswith("vllm serve")
    est = estimate_performance(_plan(concurrency=64))
    assert any("KV cache is saturated" in w for w in est.warnings)
    assert not any("does not fit" in w for w in est.warnings)
    few = estimate_performance(_plan(concurrency=4))
    assert est.ttft_ms > few.ttft_ms  # the queue is in the served TTFT


def test_the_batch_read_from_the_load_is_not_a_stated_one():
    assert Plan.model_validate(_plan(concurrency=16)).batch_from_load
    assert not Plan.model_validate(_plan(concurrency=16, batch_size=16)).batch_from_load
    assert not Plan.model_validate(_plan(concurrency=16, request_rate=2.0)).batch_from_load


@settings(max_examples=12, deadline=None)
@given(clients=st.integers(1, 512), input_len=st.integers(1000, 60000))
def test_a_load_never_fails_memory_when_one_client_fits(clients, input_len):
    one = validate_dag(plan=_plan(concurrency=1, input_len=input_len))
    many = validate_dag(plan=_plan(concurrency=clients, input_len=input_len))
    assert ("MEM-FITS" in _rules(one)) == ("MEM-FITS" in _rules(many))


def test_a_served_load_export_does_not_advise_capping_to_the_static_batch():
    """At a request rate the served figures ran as many at once as the pages held; advising max_num_seqs = 1 (the
    static batch) would launch a server far slower than the one priced (an outside agent tester's finding)."""
    notes = export_plan({**_plan(request_rate=2.0), "workload": {"input_len": 1024, "output_len": 256,
                                                                 "request_rate": 2.0}}, "vllm").notes
    seqs = [n for n in notes if n.startswith("--max-num-seqs")]
    assert seqs and "served figures" in seqs[0] and "max_num_seqs = 1" not in seqs[0]
    static = export_plan({**_plan(), "workload": {"input_len": 1024, "output_len": 256, "batch_size": 4}}, "vllm")
    assert any("max_num_seqs = 4" in n for n in static.notes)


def test_the_served_front_leaves_off_plans_the_load_queues():
    """A front point at 8 s of TTFT, its clients waiting in a queue, was drawn beside plans that serve the same load
    (per-user speed 1/TPOT ignores the wait): an agent reading the front took it for the fastest per user."""
    from tools.estimate.simulate import simulate
    from tools.search.strategies import search_strategies

    res = search_strategies(model="llama-3.1-70b", hardware={"gpu": "h100-sxm", "num_gpus": 8},
                            workload={"concurrency": 64}, objective="throughput")
    assert res.pareto
    for entry in res.pareto:
        sim = simulate(Plan.model_validate(entry.plan))
        assert sim.queue_ms.mean <= sim.e2e_ms.mean - sim.queue_ms.mean, entry.label
    assert any("left off it" in n for n in res.notes)


def test_in_flight_at_a_request_rate_is_what_the_rate_holds():
    """Under Poisson arrivals a search entry said 'in_flight 2' (batch_size 1 x 2 replicas) while the simulation it
    was ranked by held ~356 requests: at a rate, in_flight is the served mean in the system (Little's law)."""
    from tools.search.strategies import search_strategies

    res = search_strategies(model="llama-3.1-8b", hardware={"gpu": "h100-sxm", "num_gpus": 2},
                            workload={"input_len": 1024, "output_len": 256, "request_rate": 20}, top_k=2)
    for p in res.top:
        held = p.throughput_tokens_per_s / 256 * p.e2e_ms / 1e3
        assert abs(p.in_flight - held) <= max(1.0, 0.02 * held), p.label


def test_a_search_without_lengths_says_which_it_priced():
    """An outside agent searched Kimi-K2 at 256 clients with no lengths and was not told they were 2048 / 256."""
    from tools.search.strategies import search_strategies

    bare = search_strategies(model="llama-3.1-8b", hardware={"gpu": "h100-sxm", "num_gpus": 2},
                             workload={"concurrency": 16}, top_k=1)
    assert any("not stated: priced at the defaults, 2048 in / 256 out" in n for n in bare.notes)
    stated = search_strategies(model="llama-3.1-8b", hardware={"gpu": "h100-sxm", "num_gpus": 2},
                               workload={"concurrency": 16, "input_len": 512, "output_len": 128}, top_k=1)
    assert not any("not stated" in n for n in stated.notes)


def _poisson(rate: float) -> dict[str, Any]:
    return {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
            "engine": "vllm", "workload": {"input_len": 2048, "output_len": 256, "request_rate": rate,
                                           "num_requests": 600}}


def test_arrivals_faster_than_the_deployment_serves_are_named_as_the_cause() -> None:
    """An outside agent sent 10 req/s to a deployment serving 8.2: the answer gave finite percentiles that grew
    with the run and blamed the KV cache, suggesting 'fewer clients' for a load that has none."""
    over = estimate_performance(_poisson(20))
    assert over.served is not None and over.served.request_throughput_per_s < 0.9 * 20
    said = " ".join(over.warnings)
    assert "arrival rate (20 req/s) is above what this deployment serves" in said
    assert "fewer clients" not in said
    kept_up = estimate_performance(_poisson(2))
    assert not any("arrival rate" in w for w in kept_up.warnings)
