"""`pdag accuracy` reads speculative and prefix-caching points: their plan fields reach the estimate, a published
acceptance length is scored against the method's default, and a point whose source leaves a needed figure
unstated is listed as unscored with the reason, never priced on a guess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.calibration.accuracy import accuracy_report, load_measurements, point_gap, point_plan, predict
from tools.core.plan import Speculative
from tools.core.speculative import acceptance

HELDOUT = Path(__file__).resolve().parents[1] / "evals" / "measurements_heldout" / "spec_prefix_2026_11.json"
BASE: dict[str, Any] = {"id": "p", "source": "s", "engine": "TensorRT-LLM", "model": "llama-3.1-8b", "gpu": "h100-sxm",
                        "parallel": {"tp": 1}, "input_len": 512, "output_len": 128, "batch_size": 1}


def _write(tmp_path: Path, points: list[dict[str, Any]]) -> Path:
    f = tmp_path / "points.json"
    f.write_text(json.dumps({"points": points}), encoding="utf-8")
    return f


def test_an_acceptance_length_is_scored_against_the_default_not_itself() -> None:
    pt = {**BASE, "metric": "acceptance_length", "value": 2.0,
          "speculative": {"method": "ngram", "num_draft_tokens": 4, "acceptance_length": 2.0}}
    default = acceptance(Speculative(method="ngram", num_draft_tokens=4)).tokens_per_step
    assert predict(pt).value == default != 2.0


def test_a_serving_point_carries_its_features_into_the_plan() -> None:
    pt = {**BASE, "metric": "serving_output_tokens_per_s", "value": 100.0, "dtype": "nvfp4",
          "speculative": {"method": "eagle", "num_draft_tokens": 3, "acceptance_length": 2.5, "draft_model": "x"},
          "prefix_caching": {"enabled": True, "hit_rate": 0.5, "shared_prefix_len": None, "routing": "rr"}}
    plan = point_plan(pt)
    assert plan["speculative"] == {"method": "eagle", "num_draft_tokens": 3, "mean_accepted_tokens": 2.5}
    assert plan["prefix_caching"] == {"enabled": True, "hit_rate": 0.5}
    assert (plan["weights"], plan["dtype"]) == ("nvfp4", "bf16")


def test_speculation_and_hits_move_the_scored_figure() -> None:
    plain = {**BASE, "metric": "serving_output_tokens_per_s", "value": 100.0, "engine": "vLLM"}
    spec = {**plain, "speculative": {"method": "eagle", "num_draft_tokens": 3, "acceptance_length": 2.5}}
    assert predict(spec).value > 1.3 * predict(plain).value
    ttft = {**plain, "metric": "serving_ttft_ms", "input_len": 4096}
    hit = {**ttft, "prefix_caching": {"enabled": True, "shared_prefix_len": 3072}}
    assert predict(hit).value < 0.7 * predict(ttft).value


@pytest.mark.parametrize(("change", "reason"), [
    ({"output_len": None}, "output length not stated"),
    ({"batch_size": None, "gpu": None}, "gpu, concurrency not stated"),
    ({"parallel": {"tp": None, "pp": 1}}, "parallel layout not stated"),
    ({"speculative": {"method": "eagle", "num_draft_tokens": None}},
     "draft method or draft tokens per step not stated"),
])
def test_an_unstated_figure_is_a_reason_not_a_guess(change: dict[str, Any], reason: str) -> None:
    assert point_gap({**BASE, "metric": "serving_ttft_ms", "value": 1.0, **change}) == reason


def test_the_report_lists_unscored_points_with_their_reasons(tmp_path: Path) -> None:
    ok = {**BASE, "id": "al", "metric": "acceptance_length", "value": 1.5, "input_len": None,
          "speculative": {"method": "mtp", "num_draft_tokens": 1, "acceptance_length": 1.5}}
    bad = {**BASE, "id": "no-output", "metric": "serving_ttft_ms", "value": 9.0, "output_len": None}
    report = accuracy_report(load_measurements(_write(tmp_path, [ok, bad])), leave_one_out=False)
    assert [r.id for r in report.rows] == ["al"]
    assert report.unscored == [("no-output", "serving_ttft_ms", "output length not stated")]
    assert "output length not stated" in report.text()
    assert report.as_dict()["breakdown"]["catalog"]["speculative decoding, acceptance length"]["points"] == 1


def test_the_heldout_set_scores_every_class_it_can() -> None:
    points = load_measurements(HELDOUT)
    report = accuracy_report(points, leave_one_out=False)
    cat = report.as_dict()["breakdown"]["catalog"]
    assert len(report.rows) + len(report.unscored) == len(points)
    assert cat["speculative decoding, acceptance length"]["points"] == sum(
        p["metric"] == "acceptance_length" for p in points)
    assert cat["speculative decoding, TPOT of one client"]["points"] >= 5
    assert all(why.endswith("not stated") for _, _, why in report.unscored)
