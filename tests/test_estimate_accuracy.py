"""Accuracy scoring, calibration overlays and the published measurement file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import estimate_performance
from tools.errors import PdagInputError
from tools.estimate.accuracy import accuracy_report, calibrate, load_measurements, predict, spearman
from tools.estimate.efficiency import efficiency_for


def test_published_file_has_enough_sourced_points() -> None:
    pts = load_measurements()
    assert len(pts) >= 25
    for pt in pts:
        assert pt["source"].startswith("https://")
        assert pt["value"] > 0 and pt["input_len"] > 0 and pt["batch_size"] >= 1


def test_spearman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_prediction_parts_sum_to_value() -> None:
    pt = next(p for p in load_measurements() if p["metric"] == "ttft_ms")
    pred = predict(pt)
    assert sum(pred.parts.values()) == pytest.approx(pred.value, rel=1e-6)


def test_accuracy_report_on_a_subset() -> None:
    pts = [p for p in load_measurements() if p["gpu"] == "h100-sxm" and p["model"] == "llama-2-7b"]
    rep = accuracy_report(pts, leave_one_out=False)
    med, p90 = rep.stats()
    assert 0 <= med <= p90
    assert "median APE" in rep.text()


def test_calibrate_writes_overlay_and_does_not_get_worse(tmp_path: Path) -> None:
    pts = [p for p in load_measurements() if p["gpu"] == "l40s" and p["model"] in ("llama-2-7b", "mistral-7b")]
    out = tmp_path / "eff.json"
    res = calibrate(pts, gpu="l40s", out=str(out))
    assert out.exists() and res["median_ape_after"] <= res["median_ape_before"] + 1e-9
    overlay = json.loads(out.read_text())
    assert "l40s" in overlay["accelerators"]
    plan = {"model": "llama-2-7b", "hardware": {"gpu": "l40s", "num_gpus": 1}, "dtype": "fp8"}
    est = estimate_performance(plan=plan, efficiency=str(out))
    assert any(p.kind == "calibrated" for p in est.provenance)


def test_overlay_env_and_validation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "o.json"
    f.write_text(json.dumps({"defaults": {"memory_efficiency": 0.5}}))
    monkeypatch.setenv("PDAG_EFFICIENCY", str(f))
    assert efficiency_for("h100-sxm")["memory_efficiency"] == 0.5
    with pytest.raises(PdagInputError):
        efficiency_for("h100-sxm", {"memory_efficiency": -1})
    with pytest.raises(PdagInputError):
        calibrate(load_measurements(), gpu="no-such-gpu", out=str(tmp_path / "x.json"))
