"""`pdag accuracy` reads a served run as its benchmark states it: request throughput and end-to-end latency scored
from the serving simulation, ``concurrency`` and ``num_requests`` as the run's load, and the presets the prefix-caching
held-out set names (RTX 4090, Llama-2-13B, Llama-3-8B)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.calibration.accuracy import (
    accuracy_report,
    load_measurements,
    point_gap,
    point_load,
    point_plan,
    predict,
    reuse_pairs,
)
from tools.core.hardware import load_accelerator
from tools.core.models import load_preset, resolve_model

HELDOUT = Path(__file__).resolve().parents[1] / "evals" / "measurements_heldout" / "prefix_2026_11.json"
RUN: dict[str, Any] = {"id": "p", "source": "s", "engine": "vLLM", "model": "llama-3.1-8b", "gpu": "h100-sxm",
                       "parallel": {"tp": 1}, "dtype": "bf16", "input_len": 1024, "output_len": 128,
                       "batch_size": None, "concurrency": 16, "num_requests": 160}


def _write(tmp_path: Path, points: list[dict[str, Any]]) -> Path:
    f = tmp_path / "points.json"
    f.write_text(json.dumps({"points": points}), encoding="utf-8")
    return f


def _load_one(tmp_path: Path, pt: dict[str, Any]) -> dict[str, Any]:
    return load_measurements(_write(tmp_path, [pt]))[0]


def test_request_throughput_and_e2e_agree_with_the_other_serving_metrics(tmp_path: Path) -> None:
    """The same simulated run: requests/s is tokens/s over output_len, and a request's e2e is its TTFT plus one
    TPOT per further token (means of a finite run, so within a few per cent, not exactly)."""
    figs = {m: predict(_load_one(tmp_path, {**RUN, "metric": m, "value": 1.0})).value
            for m in ("serving_request_throughput", "serving_output_tokens_per_s", "serving_e2e_ms",
                      "serving_ttft_ms", "serving_tpot_ms")}
    assert figs["serving_request_throughput"] == pytest.approx(figs["serving_output_tokens_per_s"] / 128, rel=1e-6)
    assert figs["serving_e2e_ms"] == pytest.approx(figs["serving_ttft_ms"] + 127 * figs["serving_tpot_ms"], rel=0.05)


def test_new_metrics_score_in_the_report(tmp_path: Path) -> None:
    pts = [{**RUN, "id": "rps", "metric": "serving_request_throughput", "value": 10.0},
           {**RUN, "id": "e2e", "metric": "serving_e2e_ms", "value": 2000.0}]
    report = accuracy_report(load_measurements(_write(tmp_path, pts)), leave_one_out=False)
    assert [r.id for r in report.rows] == ["rps", "e2e"]
    cat = report.as_dict()["breakdown"]["catalog"]
    assert cat["metric: serving request throughput"]["points"] == 1 == cat["metric: serving e2e latency"]["points"]


def test_analytic_serving_model_prices_the_new_metrics(tmp_path: Path) -> None:
    pt = _load_one(tmp_path, {**RUN, "metric": "serving_e2e_ms", "value": 1.0})
    ttft = predict({**pt, "metric": "serving_ttft_ms"}, serving_model="analytic").value
    tpot = predict({**pt, "metric": "serving_tpot_ms"}, serving_model="analytic").value
    assert predict(pt, serving_model="analytic").value == pytest.approx(ttft + 127 * tpot)
    tok = predict({**pt, "metric": "serving_output_tokens_per_s"}, serving_model="analytic").value
    rps = predict({**pt, "metric": "serving_request_throughput"}, serving_model="analytic").value
    assert rps == pytest.approx(tok / 128)


def test_concurrency_is_the_deployments_clients_not_per_replica(tmp_path: Path) -> None:
    pt = _load_one(tmp_path, {**RUN, "parallel": {"tp": 1, "dp": 4}, "concurrency": 18,
                              "metric": "serving_ttft_ms", "value": 1.0})
    assert pt["batch_size"] == 5  # the static figures' share per replica, rounded up
    assert point_load(pt, 4) == {"concurrency": 18, "num_requests": 160}
    assert point_plan(pt)["workload"]["batch_size"] == 5


def test_rate_and_concurrency_together_are_a_capped_rate(tmp_path: Path) -> None:
    pt = _load_one(tmp_path, {**RUN, "request_rate": 4.0, "metric": "serving_ttft_ms", "value": 1.0})
    assert point_load(pt, 1) == {"request_rate": 4.0, "concurrency": 16, "num_requests": 160}
    open_loop = _load_one(tmp_path, {**RUN, "request_rate": 4.0, "concurrency": None, "num_requests": 500,
                                     "metric": "serving_ttft_ms", "value": 1.0})
    assert point_load(open_loop, 1) == {"request_rate": 4.0, "num_requests": 500}


def test_a_stated_run_length_moves_an_overloaded_queue(tmp_path: Path) -> None:
    """Above the deployment's rate the queue grows with the run: a longer run waits longer."""
    base = {**RUN, "concurrency": None, "request_rate": 200.0, "metric": "serving_e2e_ms", "value": 1.0}
    short = predict(_load_one(tmp_path, {**base, "num_requests": 100})).value
    long = predict(_load_one(tmp_path, {**base, "num_requests": 1000})).value
    assert long > 1.5 * short


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_bad_load_fields_are_named(tmp_path: Path, bad: Any) -> None:
    from tools.core.errors import PdagInputError

    for key in ("concurrency", "num_requests"):
        with pytest.raises(PdagInputError) as e:
            load_measurements(_write(tmp_path, [{**RUN, key: bad, "metric": "serving_ttft_ms", "value": 1.0}]))
        assert e.value.field == f"measurements.points[0].{key}"


@pytest.mark.parametrize(("change", "reason"), [
    ({"concurrency": None}, "concurrency not stated"),
    ({"output_len": None, "concurrency": None}, "output length, concurrency not stated"),
    ({"prefix_caching": {"enabled": True, "shared_prefix_len": 500, "reuse": "multi-turn history"}},
     "hit rate of the reuse (multi-turn history) not stated"),
    ({"model": "nobody/unreleased-model"},
     "model 'nobody/unreleased-model' without a preset (no public config or datasheet figures)"),
])
def test_a_needed_figure_left_out_is_a_reason(change: dict[str, Any], reason: str) -> None:
    assert point_gap({**RUN, "metric": "serving_request_throughput", "value": 1.0, **change}) == reason


def test_unscored_new_metric_is_listed_with_its_reason(tmp_path: Path) -> None:
    pts = [{**RUN, "id": "ok", "metric": "serving_e2e_ms", "value": 2000.0},
           {**RUN, "id": "no-load", "metric": "serving_request_throughput", "value": 9.0, "concurrency": None}]
    report = accuracy_report(load_measurements(_write(tmp_path, pts)), leave_one_out=False)
    assert [r.id for r in report.rows] == ["ok"]
    assert report.unscored == [("no-load", "serving_request_throughput", "concurrency not stated")]


def test_null_dtype_is_the_engines_default(tmp_path: Path) -> None:
    pt = _load_one(tmp_path, {**RUN, "dtype": None, "metric": "serving_ttft_ms", "value": 1.0})
    assert point_plan(pt)["dtype"] == "bf16"


def test_vllms_draft_token_name_is_read() -> None:
    pt = {**RUN, "metric": "serving_ttft_ms", "value": 1.0,
          "speculative": {"method": "mtp", "num_speculative_tokens": 3}}
    assert point_gap(pt) is None
    assert point_plan(pt)["speculative"] == {"method": "mtp", "num_draft_tokens": 3}


def test_a_measured_hit_rate_wins_over_a_shared_prefix_it_contradicts() -> None:
    pt = {**RUN, "metric": "serving_ttft_ms", "value": 1.0, "input_len": 880,
          "prefix_caching": {"enabled": True, "hit_rate": 0.0, "shared_prefix_len": 330}}
    assert point_plan(pt)["prefix_caching"] == {"enabled": True, "hit_rate": 0.0}
    agreeing = {**pt, "prefix_caching": {"enabled": True, "hit_rate": 0.37, "shared_prefix_len": 330}}
    assert point_plan(agreeing)["prefix_caching"] == {"enabled": True, "shared_prefix_len": 330}  # 330/880 = 0.375


def test_reuse_pairs_compare_a_run_with_its_own_baseline(tmp_path: Path) -> None:
    base = {**RUN, "metric": "serving_ttft_ms", "input_len": 4096}
    pts = [{**base, "id": "off", "value": 400.0, "prefix_caching": {"enabled": False}},
           {**base, "id": "on", "value": 100.0, "prefix_caching": {"enabled": True, "shared_prefix_len": 3072}},
           {**base, "id": "other-run", "value": 50.0, "input_len": 2048,
            "prefix_caching": {"enabled": True, "shared_prefix_len": 1024}}]
    points = load_measurements(_write(tmp_path, pts))
    report = accuracy_report(points, leave_one_out=False)
    pairs = reuse_pairs(points, report.rows)
    assert [p.id for p in pairs] == ["on"]  # the other run has no baseline of its own
    rows = {r.id: r for r in report.rows}
    assert pairs[0].measured == pytest.approx(4.0)
    assert pairs[0].predicted == pytest.approx(rows["off"].predicted / rows["on"].predicted)
    assert pairs[0].predicted > 1.2  # reuse shortens pdag's TTFT too
    assert "prefix caching against the same run without reuse" in report.text()


def test_the_prefix_heldout_set_reads_and_scores_what_it_states() -> None:
    points = load_measurements(HELDOUT)
    report = accuracy_report(points, leave_one_out=False)
    assert len(points) == 64 == len(report.rows) + len(report.unscored)
    metrics = {r.metric for r in report.rows}
    assert {"serving_request_throughput", "serving_e2e_ms"} <= metrics
    assert len(report.reuse_pairs) >= 10
    assert all("not stated" in why or "without a preset" in why for _, _, why in report.unscored)


# ---------------------------------------------------------------------------------------------- presets
def test_llama_2_13b_counts_its_published_size() -> None:
    m = load_preset("llama-2-13b")
    assert m.param_count() == pytest.approx(13.0e9, rel=0.01)
    h, i, v, layers = 5120, 13824, 32000, 40
    by_hand = 2 * v * h + layers * (4 * h * h + 3 * h * i + 2 * h) + h  # embeddings, head, layers, final norm
    assert m.param_count() == by_hand


def test_llama_2_13b_kv_bytes_by_hand() -> None:
    m = load_preset("llama-2-13b")
    assert (m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (40, 40, 40, 128)
    assert m.kv_bytes_per_token(2) == 2 * 40 * 128 * 40 * 2 == 819_200  # K and V, 40 heads of 128, 40 layers


def test_llama_13b_and_the_llama_3_checkpoints_resolve() -> None:
    assert resolve_model("llama-13b").id == "llama-2-13b"
    for name in ("meta-llama/Meta-Llama-3-8B-Instruct", "neuralmagic/Meta-Llama-3-8B-Instruct-FP8"):
        assert resolve_model(name).id == "llama-3-8b"


def test_llama_3_8b_is_llama_3_1_8b_shapes_with_8k_context() -> None:
    three, three_one = load_preset("llama-3-8b"), load_preset("llama-3.1-8b")
    assert three.param_count() == three_one.param_count() == pytest.approx(8.03e9, rel=0.01)
    assert three.kv_bytes_per_token(2) == 2 * 8 * 128 * 32 * 2 == three_one.kv_bytes_per_token(2)
    assert three.max_position_embeddings == 8192 < three_one.max_position_embeddings


def test_rtx_4090_figures() -> None:
    g = load_accelerator("rtx-4090")
    assert g.memory_bytes == 24e9 and g.capacity_bytes == 24564 * 2**20
    assert g.memory_bandwidth_bytes_per_s == 1008e9
    assert g.dense_tflops.fp8 == pytest.approx(2 * g.dense_tflops.bf16)  # Ada: FP8 at twice the 16-bit rate
    assert g.intra_node.kind == "pcie"
