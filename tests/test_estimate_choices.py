"""Choosing a deployment under a TPOT target, scored on published sweeps (tools/calibration/choices.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.calibration.accuracy import accuracy_report, load_measurements
from tools.calibration.choices import choices, summary


def _sweep(configs: list[tuple[int, int, float, float]]) -> list[dict]:
    """Points of one sweep: (tp, concurrency, TPOT ms, tokens/s per GPU) per measured configuration."""
    out = []
    for tp, conc, tpot, rate in configs:
        base = {"model": "llama-3.1-70b", "gpu": "h200", "engine_profile": "vllm", "input_len": 1000,
                "output_len": 1000, "batch_size": conc, "parallel": {"tp": tp}, "source": "s"}
        out += [{**base, "metric": "serving_tpot_ms", "value": tpot},
                {**base, "metric": "serving_output_tokens_per_s_per_gpu", "value": rate}]
    return out


def _run(points: list[dict], predicted: list[float]) -> list:
    return choices(points, predicted, [1] * len(points), [False] * len(points))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 256), st.floats(3, 80), st.floats(10, 5e3)),
                min_size=2, max_size=12, unique_by=lambda c: (c[0], c[1])))
def test_a_perfect_estimate_always_picks_the_best(configs: list[tuple[int, int, float, float]]) -> None:
    pts = _sweep(configs)
    for c in _run(pts, [p["value"] for p in pts]):
        assert c.outcome == "meets" and c.share_of_best == 1.0


def test_a_wrong_estimate_misses_or_finds_none() -> None:
    pts = _sweep([(8, 16, 12.0, 300.0), (4, 64, 25.0, 900.0)])
    optimistic = [p["value"] * (0.5 if p["metric"] == "serving_tpot_ms" else 1.0) for p in pts]
    at_15 = [c for c in _run(pts, optimistic) if c.target_ms == 15.0]
    assert [c.outcome for c in at_15] == ["misses"]  # TP4 at 64 clients looks like 12.5 ms; it measured 25
    pessimistic = [p["value"] * (2.0 if p["metric"] == "serving_tpot_ms" else 1.0) for p in pts]
    at_20 = [c for c in _run(pts, pessimistic) if c.target_ms == 20.0]
    assert [c.outcome for c in at_20] == ["none"]  # TP8 measured 12 ms; priced at 24 nothing seems to meet 20
    wrong_rate = [p["value"] * (10.0 if p["batch_size"] == 16 and "tokens" in p["metric"] else 1.0) for p in pts]
    at_30 = [c for c in _run(pts, wrong_rate) if c.target_ms == 30.0]
    assert at_30[0].outcome == "meets" and at_30[0].share_of_best == 300.0 / 900.0


@pytest.mark.slow  # tens of seconds (the serving simulator prices every point); .ci/run runs it
def test_published_sweeps_are_mostly_chosen_well() -> None:
    """InferenceMAX, NIM and GPUStack sweeps, TPOT targets 10-50 ms: for dense models pdag's pick meets the target in
    156 of 180 cases, 138 of them within 10 % of the best measured throughput; for MoE in 143 of 164 (112 near the
    best), the misses mostly MoE decode pdag still prices fast (README)."""
    rep = accuracy_report(load_measurements(), leave_one_out=False)
    dense = summary([c for c in rep.choices if not c.moe])
    moe = summary([c for c in rep.choices if c.moe])
    assert dense["cases"] >= 150 and moe["cases"] >= 150
    assert dense["meets"] >= 0.8 * dense["cases"] and dense["near_best"] >= 0.7 * dense["cases"], dense
    assert moe["meets"] >= 0.75 * moe["cases"] and moe["near_best"] >= 0.65 * moe["cases"], moe
    assert "choosing the most tokens/s per GPU" in rep.text()
