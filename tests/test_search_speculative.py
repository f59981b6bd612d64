"""Search may choose speculative decoding when the caller allows a method: each of the best layouts is served with
and without it (1..k draft tokens) and keeps what ranks first, with the plain figures beside; a method the model or
engine cannot run is refused with the rule's words."""

from __future__ import annotations

from typing import Any

import pytest

from tools import estimate_performance
from tools.core.errors import PdagInputError
from tools.search.strategies import _spec_settings, search_strategies

R1: dict[str, Any] = {"model": "deepseek-r1", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8",
                      "engine": "sglang", "disaggregated": False}


def _served(plan: dict[str, Any]) -> Any:
    est = estimate_performance(plan=plan)
    assert est.served is not None
    return est.served


def test_deepseek_r1_on_8_h200_takes_mtp_when_it_serves_faster() -> None:
    res = search_strategies(**R1, workload={"input_len": 1024, "output_len": 1024, "concurrency": 8},
                            speculative={"method": "mtp", "num_draft_tokens": 3}, top_k=2)
    best = res.top[0]
    spec = best.plan["speculative"]
    assert spec["method"] == "mtp" and 1 <= spec["num_draft_tokens"] <= 3
    plain_plan = {k: v for k, v in best.plan.items() if k != "speculative"}
    with_, without = _served(best.plan), _served(plain_plan)
    assert best.tpot_ms == pytest.approx(with_.tpot_ms.mean)  # the figures estimate gives for the plan
    assert with_.e2e_ms.mean < without.e2e_ms.mean
    assert f"TPOT {without.tpot_ms.mean:.2f} ms" in best.reason  # the plan without it, beside
    assert "sglang" in best.engines  # the engine asked for launches it


@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_the_choice_is_the_better_served_plan(objective: str) -> None:
    """Dense EAGLE at a large load: whichever the search keeps serves at least as well as the alternative it
    rejected (speculation or none), on the simulator's figures."""
    res = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 1}, engine="vllm", objective=objective,
                            workload={"input_len": 512, "output_len": 128, "concurrency": 192}, top_k=1,
                            speculative={"method": "eagle", "num_draft_tokens": 2}, disaggregated=False)
    chosen = res.top[0].plan
    other = {k: v for k, v in chosen.items() if k != "speculative"} if "speculative" in chosen else \
        chosen | {"speculative": {"method": "eagle", "num_draft_tokens": 2}}
    a, b = _served(chosen), _served(other)
    if objective == "latency":
        assert a.e2e_ms.mean <= b.e2e_ms.mean
    else:
        assert a.output_tokens_per_s >= b.output_tokens_per_s


def test_a_fixed_acceptance_length_is_tried_at_its_own_draft_length() -> None:
    from tools.core.plan import parse_plan

    probe = parse_plan({"model": "deepseek-r1", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8"})
    assert [s["num_draft_tokens"] for s in _spec_settings(probe, {"method": "mtp", "num_draft_tokens": 3})] == [1, 2, 3]
    only = _spec_settings(probe, {"method": "mtp", "num_draft_tokens": 3, "mean_accepted_tokens": 2.4})
    assert only == [{"method": "mtp", "num_draft_tokens": 3, "mean_accepted_tokens": 2.4}]


def test_a_method_the_model_cannot_run_is_refused_with_the_rule() -> None:
    with pytest.raises(PdagInputError) as exc:
        search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 1},
                          workload={"input_len": 512, "output_len": 128}, speculative={"method": "mtp"})
    assert exc.value.field == "speculative.method" and "SPEC-MTP-LAYERS" in exc.value.problem


def test_without_speculative_nothing_changes() -> None:
    args: dict[str, Any] = {"workload": {"input_len": 1024, "output_len": 256, "concurrency": 8}, "top_k": 2}
    res = search_strategies(**R1, **args)
    assert all("speculative" not in p.plan for p in res.top)
