"""The search answer an agent reads: each plan once, nulls left out, and still complete on request."""

from __future__ import annotations

import json

from server.responses import shape_search
from tools import search_strategies, validate_dag


def test_summary_names_repeated_plans_and_full_keeps_them() -> None:
    result = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8})
    summary = shape_search(result, "summary").model_dump(exclude_none=True)
    full = shape_search(result, "full").model_dump(exclude_none=True)
    repeats = [e for e in summary["pareto"] + [summary.get("best_aggregated") or {}] if "same_plan_as" in e]
    assert repeats, "the best plans of a latency search are on its Pareto front too"
    for e in repeats:
        i = int(e["same_plan_as"].removeprefix("top[").removesuffix("]"))
        assert "plan" not in e and summary["top"][i]["label"] == e["label"]
    assert all("plan" in e for e in full["pareto"])
    assert len(json.dumps(summary)) < 0.8 * len(json.dumps(full))
    for entry in summary["top"]:  # nulls left out: the plan still passes to validate_dag as it is
        assert "null" not in json.dumps(entry["plan"])
        assert validate_dag(plan=entry["plan"]).valid


def test_estimate_summary_states_the_overlap_it_priced_with() -> None:
    """The summary leaves the assumptions out, but not the one that moves every communication figure."""
    from server.responses import shape_estimate
    from tools import estimate_performance

    plan = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8}}
    on = shape_estimate(estimate_performance(plan, simulate=False), "summary").note
    off = shape_estimate(estimate_performance(plan, simulate=False, overlap=False), "summary").note
    assert "Priced with overlap_comm on" in on and "EP all-to-all" in on
    assert "Priced with overlap_comm off" in off
