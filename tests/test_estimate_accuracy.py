"""Accuracy scoring, calibration overlays and the published measurement file."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import pytest

from tools import estimate_performance
from tools.calibration.accuracy import (
    accuracy_report,
    breakdown,
    calibrate,
    load_measurements,
    point_engine,
    point_gpus,
    point_plan,
    predict,
    publication,
    regimes,
    spearman,
    ttft_bracket,
)
from tools.calibration.track_record import track_record_report, track_record_table
from tools.core.efficiency import efficiency_for
from tools.core.errors import PdagInputError
from tools.estimate.track_record import TRACK_RECORD_FILE


@cache
def _held_out_report():  # noqa: ANN202 - an AccuracyReport
    """Every catalog point scored with each publication held out, serving points by the simulator: the one report
    the committed track record is written from (``track_record_report``, which ``pdag accuracy
    --write-track-record`` runs too); about 5 minutes, so computed once per run."""
    return track_record_report()


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


# ---------------------------------------------------------------------------------------------- data and figures
def test_measurements_cover_several_sources_engines_and_tp() -> None:
    pts = load_measurements()
    assert len(pts) >= 150
    assert len({p["source"] for p in pts}) >= 6
    assert len({p["gpu"] for p in pts}) >= 5
    assert {p["metric"] for p in pts} >= {"ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s"}
    assert sum(1 for p in pts if (p.get("parallel") or {}).get("tp", 1) > 1) >= 60
    ids = [p["id"] for p in pts]
    assert len(ids) == len(set(ids))
    # file defaults reach the points: every point states whether its engine overlapped communication
    assert all(isinstance(p.get("overlap_comm"), bool) for p in pts)
    assert any(p["overlap_comm"] for p in pts) and not all(p["overlap_comm"] for p in pts)


def test_quantized_points_state_their_kv_dtype() -> None:
    """A point measured with quantized weights says which KV cache it ran: the plan default (16-bit, as the engines'
    'auto') is right for most, but an fp8 cache changes the capacity and the attention reads, so it is never left
    to a default; a note that assumes 16-bit must say 16-bit."""
    for p in load_measurements():
        if p.get("dtype", "bf16") not in ("bf16", "fp16"):
            assert p.get("kv_dtype"), p["id"]
            if "16-bit" in (p.get("note") or "") and "assumed" in (p.get("note") or ""):
                assert p["kv_dtype"] in ("bf16", "fp16"), p["id"]


def test_large_scale_moe_points_within_1_3x() -> None:
    """Every published MoE point on 16+ GPUs (SGLang's DeepSeek-V3 on 32 and 72 H100, DeepEP with two-batch overlap)
    is predicted within 1.3x by the catalog factors, and there are at least five of them."""
    pts = [p for p in load_measurements() if "MoE on 16+ GPUs" in regimes(p)]
    assert len(pts) >= 5 and all(point_gpus(p) >= 16 for p in pts)
    for p in pts:
        ratio = predict(p).value / p["value"]
        assert 1 / 1.3 <= ratio <= 1.3, (p["id"], ratio)


def test_a_stated_condition_keeps_a_point_out_of_its_ranking_group() -> None:
    """SGLang's simulated-perfect-EPLB run is the same plan as its default-EPLB run: ranked apart, not as a tie."""
    rows = accuracy_report([p for p in load_measurements() if p["model"] == "deepseek-v3"], leave_one_out=False)
    groups = {r.group for r in rows.rows}
    assert "deepseek-v3@h100-sxm [simulated perfect EPLB]" in groups and "deepseek-v3@h100-sxm" in groups
    (rho,) = [v for k, v in rows.spearman.items() if k.startswith("deepseek-v3@h100-sxm/ttft_ms [")]
    assert rho == pytest.approx(1.0)


IDEAL = {"defaults": {
    "memory_efficiency": 0.98, "small_gemm_memory_efficiency": 0.98, "compute_efficiency_gemm": 0.98,
    "compute_efficiency_gemm_fp8": 0.98, "compute_efficiency_attention": 0.98,
    "compute_efficiency_attention_flashmla": 0.98, "compute_efficiency_experts": 0.98,
    "comm_bandwidth_efficiency": 0.98, "comm_latency_scale": 0.01, "roofline_blend_exponent": 50,
    "kernel_overhead_us": 0, "decode_kernel_overhead_us": 0, "layer_overhead_us": 0, "decode_layer_overhead_us": 0,
    "step_overhead_ms": 0, "decode_step_overhead_ms": 0, "moe_dispatch_overhead_us": 0, "allreduce_min_us": 0,
    "alltoall_min_us": 0, "prefill_host_us_per_kernel": 0, "fp4_upcast_expert_memory_efficiency": 0.98,
    "fp4_upcast_expert_compute_efficiency": 0.98, "compute_efficiency_experts_block_fp8": 0.98,
    "experts_half_speed_width_block_fp8": 0, "mla_prefill_attention_speed": 1, "attention_half_speed_tiles": 0,
    "compute_efficiency_gemm_fp4": 1.96,  # FP4 GEMMs are priced at the fp8 peak: 0.98 of the FP4 peak is 1.96 of it
    "compute_efficiency_experts_mxfp4": 0.98}}
# Published rows that beat the ideal bound of their stated configuration (see their notes and the README): an A100
# Mixtral TP2 2048x2048 row below the HBM bound, its 128-token TTFT at the bound, and a TensorRT-LLM 0.6.1 A100
# Llama-2-70B row that is only out of reach with GQA KV re-read per query head (gqa_decode_kv_rereads = 1).  An
# InferenceMAX TensorRT-LLM row at TP1 and 64 clients (1k/8k) waits in the queue less than Little's law gives from its
# own published throughput and TPOT (about 46 requests running, pdag 44; median wait 57 % of (64 - 46) / rate), and a
# queue's length does not shrink with the efficiencies (its 8k/1k sibling came within reach once a slot's cycle was
# priced with the request's own TPOT, which carries only the other requests' prompts).  InferenceMAX's SGLang
# DeepSeek-R1 H200 8k/1k row at 64 clients sits at the KV capacity's edge (pdag runs 62 of the 64, the run shows no
# queue).
BEYOND_IDEAL = {"imax-dsr1-h200-sglang-fp8-tp8-c64-8k1k-ttft",
                "trtllm090-thr-a100-80gb-mixtral-8x7b-tp2-b32-2048x2048",
                "trtllm090-ttft-a100-80gb-mixtral-8x7b-tp2-128",
                "trtllm061-thr-a100-80gb-llama-2-70b-tp4-b240-128x2048",
                "imax-h200-trt-trt-fp8-tp1-c64-1k8k-ttft"}


COLD_FIRST_RUNS = ("deepseek-v3@b200", "qwen3-235b-a22b@b200", "deepseek-v3@mi300x")


def _cold_first_run(key: str) -> bool:
    """The SGLang cookbook's three MoE TTFT groups: each page's first run after launch (1 client, 10 requests)
    measures a higher median TTFT than the 16-client run after it (DeepSeek-R1 B200 141 vs 132 ms, Qwen3-235B 92 vs
    89 ms, DeepSeek-V3.1 MI300X 214 vs 191 ms, whose mean of 558 ms shows first-use costs), so pdag's rising TTFT
    ranks them 0.5; every other group is held to the bound."""
    return any(key.startswith(f"{g}/serving_ttft_ms [https://github.com/sgl-project/") for g in COLD_FIRST_RUNS)


# GPUStack's Qwen3-8B page runs vLLM (1-8 clients), SGLang and TensorRT-LLM (4 clients) on one H100 at ~230-token
# prompts.  Measured TTFT orders them SGLang 27 ms < TensorRT-LLM 45 < vLLM 60 (flat over 1-8 clients); pdag prices
# SGLang's eager launches within 20 % (28-33 ms) but has no term for the ~40-50 ms the vLLM and TensorRT-LLM serving
# paths add to a short prompt, so it orders them the other way.  The TPOT group (7.1-7.7 ms bf16, 5.6 fp8) differs by
# less than the engines' unmodelled per-step costs.  README.
ENGINE_MISRANKS = ("qwen3-8b@h100-sxm/serving_ttft_ms [GPUStack", "qwen3-8b@h100-sxm/serving_tpot_ms [GPUStack")

# InferenceMAX's gpt-oss-120b TTFT on B200 mixes 1k prompts, whose vLLM and TensorRT-LLM prefill is bound by the host's
# launches (priced: flat in TP, as measured), with 8k prompts whose GPU work pdag prices about 2x too fast (README,
# MoE serving): at TP 2-8 that priced GPU time falls under the same launch floor, so pdag ties the 8k prompts with the
# 1k ones where they measure 2-3x slower.  Ranked 0.57 (0.78 before vLLM's launches were priced); held to 0.5.
MOE_PREFILL_MISRANK = "gpt-oss-120b@b200/serving_ttft_ms [https://github.com/denosys/"


@pytest.mark.slow  # prices every published point: ~13 s; .ci/run runs it
def test_published_points_are_within_the_ideal_bound() -> None:
    """With every efficiency at 0.98 and no overhead, no measured point may be faster than the estimate: a unit slip
    (per node read as per GPU, seconds as ms) or a wrong degree shows up here; known exceptions are listed."""
    beyond = set()
    for p in load_measurements():
        bound = predict(p, IDEAL, "analytic").value
        faster = p["value"] > bound if "tokens_per_s" in p["metric"] else p["value"] < bound
        if faster:
            beyond.add(p["id"])
    assert beyond == BEYOND_IDEAL


@pytest.mark.slow  # prices every catalog point: ~14 s; .ci/run runs it
def test_catalog_accuracy_figures_hold() -> None:
    """Catalog factors and engine profiles (nothing fitted).  Static-batch points (281): median 7.9 %, p90 25.6 %.
    Serving TPOT and throughput of dense models (581 each: NIM, vLLM, InferenceMAX, the SGLang cookbook and GPUStack
    at fixed concurrency): 6.8 % / 18.0 % and 7.2 % / 15.5 %.  MoE serving (InferenceMAX gpt-oss-120b and
    DeepSeek-R1, the SGLang cookbook's DeepSeek and Qwen3 pages, GPUStack's gpt-oss and DeepSeek-R1; 510 each): TPOT
    9.7 % / 26.6 %, throughput 10.5 % / 28.3 %, held with some margin.  Serving TTFT under load is not held to a
    bound: the README states how far it misses."""
    rep = accuracy_report(load_measurements(), leave_one_out=False, serving_model="analytic")
    parts = breakdown(rep.rows)
    static = parts["mode: static batch"]
    assert static["points"] >= 250 and static["median_ape"] <= 0.10 and static["p90_ape"] <= 0.30
    dense = breakdown([r for r in rep.rows if "MoE" not in r.regimes])
    moe = breakdown([r for r in rep.rows if "MoE" in r.regimes])
    for metric in ("metric: serving TPOT", "metric: serving throughput"):
        assert dense[metric]["points"] >= 500 and moe[metric]["points"] >= 400
        assert dense[metric]["median_ape"] <= 0.10 and dense[metric]["p90_ape"] <= 0.25, metric
        assert moe[metric]["median_ape"] <= 0.15 and moe[metric]["p90_ape"] <= 0.40, metric
    rho = [v for k, v in rep.spearman.items()
           if v == v and not _cold_first_run(k) and not k.startswith((*ENGINE_MISRANKS, MOE_PREFILL_MISRANK))]
    assert len(rho) >= 28 and sum(rho) / len(rho) >= 0.95 and min(rho) >= 0.75
    (moe_prefill,) = [v for k, v in rep.spearman.items() if k.startswith(MOE_PREFILL_MISRANK)]
    assert moe_prefill >= 0.5
    assert sum(k.startswith(ENGINE_MISRANKS) for k in rep.spearman) == len(ENGINE_MISRANKS)
    cold = [v for k, v in rep.spearman.items() if _cold_first_run(k)]
    assert len(cold) == 3 and all(v == pytest.approx(0.5) for v in cold)
    assert abs(parts["metric: TPOT"]["median_bias"]) <= 0.10
    assert abs(parts["regime: batch 1"]["median_bias"]) <= 0.10
    assert parts["regime: multi-node"]["points"] >= 2


def test_report_breaks_down_by_metric_regime_and_source() -> None:
    pts = [p for p in load_measurements() if p["id"].startswith(("gptfast-a100-llama-2-7b", "nim180"))]
    rep = accuracy_report(pts, leave_one_out=True)
    assert all(r.loso is not None and r.loo is not None for r in rep.rows)
    d = rep.as_dict()
    assert {"catalog", "leave_one_source_out"} <= set(d["breakdown"])
    assert d["breakdown"]["catalog"]["regime: batch 1"]["points"] == len(pts)
    assert d["breakdown"]["catalog"]["regime: MoE"]["points"] == 0
    assert "leave-one-source-out" in rep.text() and "no published measurement" in rep.text()
    assert {point_engine(p) for p in pts} == {"gpt-fast", "trtllm-cpp"}  # NIM runs TensorRT-LLM engines from C++
    assert "per GPU, engine and engine generation" in rep.text()
    pooled = accuracy_report(pts, leave_one_out=True, fit_key="gpu")
    assert "per GPU, over every engine's points" in pooled.text()
    with pytest.raises(PdagInputError, match="fit_key"):
        accuracy_report(pts, leave_one_out=True, fit_key="publication")


@pytest.mark.slow  # leave-one-source-out refits the scales once per publication, the simulator serves: ~5 minutes
def test_held_out_figures_meet_the_estimator_targets() -> None:
    """Issue 12's targets on scales fitted without the scored publication (leave-one-source-out): median APE
    <= 10 %, p90 <= 30 % over the 368 static-batch points (9.9 % / 25.4 %); no static metric or regime with
    |median bias| > 10 %.  Over all 3,612 points, the serving ones priced by the simulator (the served figures an
    estimate answers), issue 40's targets are median <= 12 %, p90 <= 35 % and serving TTFT within 25 % median: they
    read 10.0 %, 31.5 % and 18.7 % (35.2 % p90 before a prompt riding in an MoE decode step paid its own expert
    reads and ROCm's eager launches were priced at their own host cost, ``host_launch_scale``), held at 35 %.
    Held-out scales are fitted per GPU, engine and engine generation; keyed by GPU and engine only
    (``fit_key="engine"``) the 2024 vLLM V0 runs on MI300X (Oracle, ROCm's blog, dstack's 405B) set an MI300X
    compute scale of 2.0 that is carried to InferenceMAX's vLLM 0.10 runs when InferenceMAX is held out; pooled over
    engines as well, TensorRT-LLM's 2023 H200 runs did the same to the 2025 engines on H200.  The report's
    MoE-per-metric rows are finer cuts and are not held."""
    rep = _held_out_report()
    every = breakdown(rep.rows, "loso")
    assert every["all"]["median_ape"] <= 0.12 and every["all"]["p90_ape"] <= 0.35, every["all"]
    assert every["metric: serving TTFT"]["median_ape"] <= 0.25, every["metric: serving TTFT"]
    static = [r for r in rep.rows if not r.metric.startswith("serving_")]
    parts = breakdown(static, "loso")
    assert parts["all"]["median_ape"] <= 0.10 and parts["all"]["p90_ape"] <= 0.30, parts["all"]
    for name, row in parts.items():
        if row["points"] and name.startswith(("all", "mode:", "metric:", "regime:")):
            assert abs(row["median_bias"]) <= 0.10, (name, row)
    moe_cuts = {k: v for k, v in parts.items() if k.startswith("MoE, ") and v["points"]}
    assert moe_cuts and sum(v["points"] for v in moe_cuts.values()) == parts["regime: MoE"]["points"]
    served = breakdown([r for r in rep.rows if "MoE" not in r.regimes], "loso")
    for metric in ("metric: serving TPOT", "metric: serving throughput"):
        assert served[metric]["median_ape"] <= 0.12 and served[metric]["p90_ape"] <= 0.30, (metric, served[metric])
    loo = breakdown(static, "loo")["all"]
    assert loo["median_ape"] <= 0.13 and loo["p90_ape"] <= 0.31, loo


def test_moe_expert_math_switch() -> None:
    """Without fp8 grouped GEMMs the expert GEMMs of a long Mixtral prefill run at the 16-bit rate: slower."""
    plan = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2},
            "options": {"allow_expert_tp": True}, "dtype": "fp8",
            "workload": {"input_len": 2048, "output_len": 1, "batch_size": 1}}
    fast = estimate_performance(plan=plan).prefill_latency_ms
    slow = estimate_performance(plan=plan, efficiency={"experts_low_precision_math": 0}).prefill_latency_ms
    assert slow > 1.4 * fast


# ---------------------------------------------------------------------------------------------- calibration from CSV
CSV_TEXT = """model,gpu,tp,dtype,kv_dtype,input_len,output_len,batch_size,metric,value,overlap_comm
llama-2-7b,h100-sxm,1,fp8,fp8,128,1,1,ttft_ms,7.0,false
llama-2-7b,h100-sxm,1,fp8,fp8,2048,1,1,ttft_ms,36.0,false
llama-2-7b,h100-sxm,1,fp8,fp8,128,2048,112,output_tokens_per_s_per_gpu,6818,false
llama-2-70b,h100-sxm,4,fp8,fp8,2048,1,1,ttft_ms,109,false
"""


def test_calibrate_from_a_small_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "mine.csv"
    src.write_text(CSV_TEXT)
    pts = load_measurements(src)
    assert len(pts) == 4 and pts[3]["parallel"] == {"tp": 4} and pts[0]["overlap_comm"] is False
    out = tmp_path / "overlay.json"
    res = calibrate(pts, gpu="H100-SXM", out=str(out))
    assert res["points"] == 4 and out.exists()
    assert res["median_ape_after"] <= res["median_ape_before"] + 1e-9
    assert "before:" in res["text"] and "after:" in res["text"]
    # prefill TTFTs are compute-bound and the 112-batch throughput memory-bound; nothing here is bound by collectives
    assert "communication" in res["not_fitted"] and "compute" not in res["not_fitted"]
    assert "kept at the catalog's" in res["text"]
    assert not any("distinct configuration" in w for w in res["warnings"])  # 4 configurations, 2 factors fitted
    one = calibrate(pts[:1], gpu="h100-sxm", out=str(tmp_path / "one.json"))
    assert any("1 distinct configuration(s) for 1 fitted factor(s)" in w for w in one["warnings"])
    monkeypatch.setenv("PDAG_EFFICIENCY", str(out))
    est = estimate_performance(plan={"model": "llama-2-7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
                                     "dtype": "fp8"})
    assert any(p.kind == "calibrated" for p in est.provenance)


def test_csv_errors_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("model,gpu,metric,value\nllama-2-7b,h100-sxm,ttft_ms,7\n")
    with pytest.raises(PdagInputError, match="input_len"):
        load_measurements(bad)
    bad.write_text(CSV_TEXT.replace("7.0,false", "fast,false"))
    with pytest.raises(PdagInputError, match="line 2"):
        load_measurements(bad)


def test_held_out_scoring_fits_nothing_to_a_single_source() -> None:
    from tools.calibration.accuracy import fit_scales

    pts = [p for p in load_measurements() if p["gpu"] == "h200"]
    one = [p for p in pts if "v0.9.0" in p["source"]][:6]
    assert fit_scales(one, rounds=1, min_sources=2) == {}
    assert set(fit_scales(one, rounds=1)) == {"h200"}  # a user's own calibration may use one file


def test_held_out_scales_are_fitted_per_gpu_and_engine() -> None:
    """H200's static points come from TensorRT-LLM's C++ runtime (2023 blogs, 0.9 tables) and from vLLM (its CI
    dashboard, llm-d): a held-out fit keeps the two engines' scales apart, so neither engine's kernels set the
    other's speed; pooled, one scale serves both."""
    from tools.calibration.accuracy import HARDWARE_PARTS, fit_scales, gpu_and_engine, point_engine

    pts = [p for p in load_measurements() if p["gpu"] == "h200" and not p["metric"].startswith("serving_")]
    assert {point_engine(p) for p in pts} == {"trtllm-cpp", "vllm"}
    apart = fit_scales(pts, rounds=1, min_sources=2, parts=HARDWARE_PARTS, key=gpu_and_engine)
    assert set(apart) == {"h200/trtllm-cpp", "h200/vllm"}
    assert apart["h200/trtllm-cpp"] != apart["h200/vllm"]
    assert set(fit_scales(pts, rounds=1, min_sources=2, parts=HARDWARE_PARTS)) == {"h200"}


def test_vllm_points_state_their_engine_generation() -> None:
    """The held-out fit keeps vLLM's V0 engine (before 0.8, when V1 became the default) apart from V1: every vLLM
    point whose engine names a 0.x build below 0.8, or a 2024 run, says ``engine_generation: v0``, and no later one
    does; the V0 points of one GPU are fitted among themselves."""
    import re

    from tools.calibration.accuracy import gpu_and_engine, gpu_engine_generation

    pts = [p for p in load_measurements() if point_engine(p) == "vllm"]
    for p in pts:
        text = p.get("engine", "")
        m = re.search(r"(?i)vllm[^0-9]{0,12}0\.(\d+)", text)
        old = (m is not None and int(m.group(1)) < 8) or "2024" in text or "oracle.com" in p["source"]
        assert (p.get("engine_generation") == "v0") == old, (p["id"], text[:80])
    v0 = [p for p in pts if p.get("engine_generation") == "v0"]
    assert len(v0) >= 60 and {gpu_engine_generation(p) for p in v0} >= {"mi300x/vllm/v0", "h100-sxm/vllm/v0"}
    assert gpu_engine_generation(v0[0]) != gpu_and_engine(v0[0])


def test_fitted_scales_ignore_a_lone_outlier() -> None:
    """Nine points say memory is priced 2x too slow; one point (an engine quirk) says 20x. The fit follows the
    nine: the outlier must not drag the factor every other point on the GPU shares."""
    from tools.calibration.accuracy import Prediction, _fit_scales

    preds = [Prediction(10.0, {"compute": 0.0, "memory": 10.0, "communication": 0.0, "overhead": 0.0}, "time")
             for _ in range(10)]
    points = [{"value": 5.0} for _ in range(9)] + [{"value": 0.5}]
    s = _fit_scales(points, preds)
    assert s["memory"] == pytest.approx(0.5, rel=0.1)


def test_each_publication_weighs_the_same_in_a_fit() -> None:
    """One publication's 20 rows say memory runs 2x faster than priced; two others, 2 rows each, say the catalog is
    right.  Held-out scoring must not let the long table outvote the two sources that agree."""
    from tools.calibration.accuracy import Prediction, _fit_scales

    pred = Prediction(10.0, {"compute": 0.0, "memory": 10.0, "communication": 0.0, "overhead": 0.0}, "time")
    points = ([{"value": 5.0, "source": "a"}] * 20 + [{"value": 10.0, "source": "b"}] * 2
              + [{"value": 10.0, "source": "c"}] * 2)
    assert _fit_scales(points, [pred] * len(points))["memory"] == pytest.approx(1.0, rel=0.05)


def test_a_part_no_point_measures_keeps_the_catalog() -> None:
    """Decode-bound points (compute about 1 % of their time) cannot say how fast the GPU computes: the fit leaves
    that scale alone instead of carrying noise into prefill.  MI300X's static points outside InferenceMAX and
    dstack's 405B runs are such points (ROCm's blog and dev-docker tables, Oracle's 405B runs); dstack's 32K-token
    prompts are prefill-bound, and with them two publications measure compute."""
    from tools.calibration.accuracy import Prediction, _determined, fit_scales, publication

    decode = Prediction(10.0, {"compute": 0.1, "memory": 9.9, "communication": 0.0, "overhead": 0.0}, "time")
    prefill = Prediction(10.0, {"compute": 8.0, "memory": 2.0, "communication": 0.0, "overhead": 0.0}, "time")
    pts = [{"value": 5.0, "source": s} for s in "ab"]
    assert _determined(pts, [decode, decode], ("compute", "memory"), 2) == ("memory",)
    assert _determined(pts, [prefill, decode], ("compute", "memory"), 2) == ()  # each part by one source only
    assert _determined(pts, [prefill, prefill], ("compute", "memory"), 2) == ("compute",)
    mi = [p for p in load_measurements() if p["gpu"] == "mi300x" and not p["metric"].startswith("serving_")
          and "InferenceMAX" not in publication(p)]
    decode_bound = [p for p in mi if "dstackai" not in publication(p)]
    assert len({publication(p) for p in decode_bound}) >= 2
    assert fit_scales(decode_bound, rounds=1, min_sources=2, parts=("compute", "memory"))["mi300x"]["compute"] == 1.0
    assert fit_scales(mi, rounds=1, min_sources=2, parts=("compute", "memory"))["mi300x"]["compute"] != 1.0


@pytest.mark.parametrize("metric, field", [("serving_ttft_ms", "ttft_ms"), ("serving_tpot_ms", "tpot_ms"),
                                           ("serving_output_tokens_per_s", "output_tokens_per_s"),
                                           ("serving_output_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu")])
def test_serving_metrics_score_the_continuous_batching_estimate(metric: str, field: str) -> None:
    """A benchmark at fixed concurrency is scored against the estimate's serving block, not the static batch, and
    its parts still add up to the value (the fits rely on it)."""
    pt = {"id": "s", "model": "llama-3.1-70b", "gpu": "h100-sxm", "parallel": {"tp": 2}, "dtype": "fp8",
          "kv_dtype": "bf16", "input_len": 2000, "output_len": 500, "batch_size": 32, "metric": metric, "value": 1.0,
          "engine": "vLLM"}
    pred = predict(pt, serving_model="analytic")
    serving = estimate_performance(plan=point_plan(pt)).steady_state_estimate
    assert serving is not None and pred.value == pytest.approx(getattr(serving, field))
    total = sum(pred.parts.values())
    assert (pred.numerator / total if pred.kind == "rate" else total) == pytest.approx(pred.value)
    static = predict({**pt, "metric": metric.removeprefix("serving_")})
    assert static.value != pytest.approx(pred.value)


def test_held_out_hardware_scales_ignore_serving_points() -> None:
    """A serving figure also holds scheduling and front-end time: it must not move a GPU's fitted compute or memory
    speed, so training on serving points alone leaves the catalog prediction."""
    from tools.calibration.accuracy import _held_out

    pts = load_measurements()
    serving = [p for p in pts if p["metric"].startswith("serving_") and p["gpu"] == "h100-sxm"]
    static = next(p for p in pts if p["gpu"] == "h100-sxm" and not p["metric"].startswith("serving_"))
    assert len({p["source"] for p in serving}) >= 2
    slow = [{**p, "value": p["value"] * (0.2 if "tokens_per_s" in p["metric"] else 5)} for p in serving]
    held = _held_out([static], slow, {0})
    assert held[0] == pytest.approx(predict(static).value)


@pytest.mark.slow  # tens of seconds (the serving simulator prices every point); .ci/run runs it
def test_serving_ttft_under_load_is_bracketed_where_nothing_queues() -> None:
    """pdag's serving TTFT is the spread-arrival end and ttft_lockstep_ms the burst end.  Where the KV cache holds
    every client: fixed-length clients (NIM) are never below the first and mostly between the two (the rest are
    above: NIM's 8B rows with short prompts, where the host is the bottleneck; README); clients with jittered
    lengths (InferenceMAX, the vLLM blog) drift apart, and for dense models their median TTFT sits nearer the
    spread end (MoE prefill is under-predicted about 2x, README)."""
    pts = [p for p in load_measurements() if p["metric"] == "serving_ttft_ms" and p["batch_size"] > 1]
    unqueued = [p for p in pts if estimate_performance(plan=point_plan(p)).steady_state_estimate.queue_ms == 0]
    rows = accuracy_report(unqueued, leave_one_out=False, serving_model="analytic").rows
    fixed = [r for r in rows if "fixed-length clients" in r.regimes]
    b = ttft_bracket(fixed)
    assert b["points"] >= 50
    assert b["below"] == 0 and b["between"] >= 0.6 * b["points"], b
    jittered = [r for r in rows if "jittered-length clients" in r.regimes and "MoE" not in r.regimes]
    assert len(jittered) >= 400
    nearer = [r for r in jittered if abs(math.log(r.measured / r.predicted)) < abs(math.log(r.measured / r.lockstep))]
    assert len(nearer) >= 0.85 * len(jittered), (len(nearer), len(jittered))


@pytest.mark.slow  # shares the held-out report with the test above
def test_committed_track_record_is_what_the_catalog_scores_today() -> None:
    """Estimates quote knowledge/accuracy/track_record.json; a change to the model or the measurements must
    regenerate it (`pdag accuracy --write-track-record knowledge/accuracy/track_record.json`).  The command and this
    test score through one function (``track_record_report``: the simulator's served figures), so a file written
    from any other definition fails here."""
    committed = json.loads(TRACK_RECORD_FILE.read_text(encoding="utf-8"))
    assert committed == json.loads(json.dumps(track_record_table(_held_out_report().rows)))
    moe_ttft = committed["cells"]["MoE, serving, one node | TTFT"]
    assert moe_ttft["points"] >= 400 and moe_ttft["median_bias"] < 0  # published MoE prompts still ran slower


def test_pages_of_one_publication_are_held_out_together() -> None:
    """The SGLang cookbook's four model pages share a harness and a team, and so do GPUStack's Performance Lab
    pages, LMSYS's gpt-oss blog and its chart file, the two GB200 decode logs of one reproduction, and TensorRT-LLM's
    two H200 blogs of 2023:
    leave-one-source-out holds each set out as one publication, so none of its pages trains the scales that score
    another."""
    pts = load_measurements()
    sets = (("sglcb-", 4), ("gpustack-", 3), ("lmsys-gptoss-", 2),
            ("sglang-gb200-deepseek-v3-nvfp4-ep48-decode-b1024-", 2), ("trtllm2023-", 2))
    for prefix, pages in sets:
        group = [p for p in pts if p["id"].startswith(prefix)]
        assert len({p["source"] for p in group}) >= pages and len({publication(p) for p in group}) == 1
    assert all(publication(p) == p["source"] for p in pts if not p["id"].startswith(tuple(s for s, _ in sets)))


UNSCORED = Path(__file__).parent.parent / "evals" / "measurements_unscored"


def test_unscored_measurements_keep_their_evidence() -> None:
    """Published points kept out of the scored corpus each say why, and the reason is checked, not asserted: the
    NeMo table's Llama-2-13B rows beat the ideal bound of bf16 weights (so its precision is not what its rows were
    encoded with); the 405B offline rows left out do not fit the KV cache at once (vLLM ran them in waves) while
    every scored row of the same CSV does; the DeepSeek-R1 rows come from engine builds of February-March 2025,
    before those engines took up the DeepSeek kernels the profiles price."""
    files = {f.name: json.loads(f.read_text(encoding="utf-8")) for f in sorted(UNSCORED.glob("*.json"))}
    assert len(files) == 4 and all(d.get("verdict") and d["points"] for d in files.values())
    nemo = load_measurements(UNSCORED / "nemo_llama2_table.json")
    rows13 = [p for p in nemo if p["id"].startswith("nemo-l2-13b-")]
    assert len(rows13) == 10 and all(p["value"] < predict(p, IDEAL).value for p in rows13)
    waves = load_measurements(UNSCORED / "dstack_405b_offline_waves.json")
    scored = [p for p in load_measurements() if p["id"].startswith("blind3-l405-")]
    assert len(waves) + len(scored) == 21
    assert not any(estimate_performance(plan=point_plan(p)).memory.fits for p in waves)
    assert all(estimate_performance(plan=point_plan(p)).memory.fits for p in scored)
    argonne = {p["id"]: p for p in load_measurements(UNSCORED / "blind_fourth_round_unscored.json")}
    assert sum(p["id"].startswith("blind4-argonne") and p["batch_size"] > 1 for p in argonne.values()) == 30
    ref = {p["id"]: p for p in load_measurements()}
    trt = ref["trtllm090-thr-a100-80gb-llama-2-70b-tp4-b64-2048x2048"]  # tokens/s per GPU, same plan
    lmd = ref["lmdeploy010-thr-a100-80gb-llama-2-70b-tp4-b64-2048x2048"]  # tokens/s of the 4 GPUs
    same = argonne["blind4-argonne-a100-llama-2-70b-tp4-b64-2048x2048-e2e"]
    assert same["batch_size"] == trt["batch_size"] == lmd["batch_size"] == 64
    for e2e_s in (64 * 2048 / (4 * trt["value"]), 64 * 2048 / lmd["value"]):
        assert same["value"] / 1000 > 4 * e2e_s  # the harness, not the GPUs, sets Argonne's batched time
    early = load_measurements(UNSCORED / "dstack_deepseek_r1_early_2025.json")
    builds = ("0.4.2", "0.4.3", "0.7.3", "0.7.4", "0.17")
    assert len(early) == 135 and all(any(b in p["engine"] for b in builds) for p in early)


def test_request_rate_points_are_priced_under_poisson_arrivals(tmp_path) -> None:
    """Published sweeps over a request rate (vllm bench serve --request-rate) are scored at that rate, capped at
    the run's max concurrency when it states one."""
    import json as _json

    from tools.calibration.accuracy import load_measurements, point_load
    from tools.core.errors import PdagInputError

    base = {"source": "x", "engine": "vLLM", "model": "llama-3.1-8b", "gpu": "h100-sxm", "parallel": {"tp": 1},
            "input_len": 1000, "output_len": 200, "metric": "serving_ttft_ms", "value": 50}
    f = tmp_path / "rate.json"
    f.write_text(_json.dumps({"points": [{**base, "id": "open", "request_rate": 4, "client_lengths": "sharegpt"},
                                         {**base, "id": "capped", "request_rate": 4, "batch_size": 8}]}))
    open_, capped = load_measurements(f)
    assert point_load(open_, 1)["request_rate"] == 4 and "concurrency" not in point_load(open_, 1)
    # a ShareGPT replay draws from the dataset's histogram at the row's mean lengths; SGLang's random dataset
    # (ShareGPT text, random lengths) stays uniform from 1
    assert point_load(open_, 1)["length_dataset"] == "sharegpt" and "input_len_range" not in point_load(open_, 1)
    rnd = {**open_, "table": "sglang.bench_serving --dataset-name random"}
    assert point_load(rnd, 1)["input_len_range"] == [1, 1999]
    assert point_load(capped, 2) == {"request_rate": 4.0, "concurrency": 16}
    f.write_text(_json.dumps({"points": [{**base, "id": "bad", "request_rate": -1}]}))
    with pytest.raises(PdagInputError) as exc:
        load_measurements(f)
    assert exc.value.field.endswith("request_rate")
