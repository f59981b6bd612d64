"""The track record an estimate carries: what published measurements of its regime showed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tools import estimate_performance
from tools.calibration.accuracy import Row
from tools.calibration.track_record import REPORT_OPTIONS, metric_class, track_record_table
from tools.cli import main as cli_main
from tools.estimate.track_record import (
    SERVING_METRICS,
    STATIC_METRICS,
    WARN_BIAS,
    TrackRecord,
    regime_key,
    track_record,
    track_record_warnings,
)

GPT_OSS = {"model": "gpt-oss-120b", "hardware": {"gpu": "h200", "num_gpus": 1}, "parallel": {"tp": 1},
           "weights": "mxfp4", "engine": "vllm",
           "workload": {"input_len": 922, "output_len": 922, "batch_size": 4}}
LLAMA = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
         "workload": {"input_len": 1024, "output_len": 128, "batch_size": 1}}


def test_moe_serving_estimate_warns_that_published_ttft_ran_slower() -> None:
    est = estimate_performance(plan=GPT_OSS)
    assert est.steady_state_estimate is not None
    ttft = next(r for r in est.track_record if r.metric == "TTFT" and "serving" in r.regime)
    assert ttft.regime == "MoE, serving, one node" and ttft.engine == "vllm" and ttft.median_bias < -0.1
    assert ttft.points >= 100
    assert [r.metric for r in est.track_record] == list(STATIC_METRICS + SERVING_METRICS)
    warned = any("TTFT" in w and "leave margin" in w for w in est.warnings)
    assert warned == (abs(ttft.median_bias) >= WARN_BIAS)  # the warning follows the record, whichever way it moves


def test_dense_static_figures_carry_their_record_without_warning() -> None:
    est = estimate_performance(plan=LLAMA)
    assert [(r.regime, r.metric) for r in est.track_record] == \
        [("dense, static batch, one node", m) for m in STATIC_METRICS] + \
        [("dense, serving, one node", m) for m in SERVING_METRICS]
    assert all(r.points > 0 for r in est.track_record)
    assert not any("static batch" in w for w in est.warnings)
    assert all(abs(r.median_bias) < 0.1 for r in est.track_record if "static" in r.regime)


def test_an_engine_with_enough_points_gets_its_own_record() -> None:
    """Engines with enough points in a regime get their own figures (vLLM's and SGLang's MoE serving TTFT read
    differently from each other and from the pool); an engine with too few points falls back to every engine's."""
    def ttft(engine: str) -> TrackRecord:
        return next(r for r in track_record(True, True, False, engine) if r.metric == "TTFT" and "serving" in r.regime)
    sglang, vllm = ttft("sglang"), ttft("vllm")
    assert (sglang.engine, vllm.engine) == ("sglang", "vllm")
    pooled = ttft("gpt-fast")
    assert pooled.engine == "all" and pooled.points > sglang.points + vllm.points
    assert len({sglang.median_bias, vllm.median_bias, pooled.median_bias}) == 3


def test_a_regime_nobody_measured_is_called_unchecked() -> None:
    record = track_record(moe=True, serving=True, multi_node=True)
    served = [r for r in record if r.regime == "MoE, serving, multi-node"]
    assert len(served) == 3 and all(r.points == 0 and r.median_bias is None for r in served)
    warning = next(w for w in track_record_warnings(record) if "serving" in w)
    assert "no published measurement of TTFT, TPOT, throughput" in warning and "unchecked" in warning


METRICS = ["ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s_per_gpu", "serving_ttft_ms", "serving_tpot_ms",
           "serving_output_tokens_per_s_per_gpu"]
rows_strategy = st.lists(st.builds(
    lambda metric, measured, ratio, moe, multi, src, engine: Row(
        "p", "g", metric, measured, measured * ratio, source=f"s{src}", loso=measured * ratio * 1.1,
        regimes=(["MoE"] if moe else []) + (["multi-node"] if multi else []), engine=engine),
    st.sampled_from(METRICS), st.floats(0.1, 1e4), st.floats(0.2, 5.0), st.booleans(), st.booleans(),
    st.integers(0, 3), st.sampled_from(["vllm", "sglang"])), max_size=40)


@given(rows_strategy)
def test_every_row_lands_in_exactly_one_cell_and_its_bias_lies_within_the_cell(rows: list[Row]) -> None:
    cells = track_record_table(rows)["cells"]
    assert sum(c["points"] for k, c in cells.items() if k.count(" | ") == 1) == len(rows)
    for key, cell in cells.items():
        regime, metric, *engine = key.split(" | ")
        mine = [r for r in rows if regime_key("MoE" in r.regimes, r.metric.startswith("serving_"),
                                              "multi-node" in r.regimes) == regime and metric_class(r.metric) == metric
                and (not engine or r.engine == engine[0])]
        assert cell["points"] == len(mine)
        if mine:
            errs = [(r.predicted - r.measured) / r.measured for r in mine]
            assert min(errs) - 1e-3 <= cell["median_bias"] <= max(errs) + 1e-3
            assert cell["p90_error"] <= max(abs(e) for e in errs) + 1e-3
        else:
            assert "median_bias" not in cell and not engine  # an engine cell exists only where it has points


@pytest.mark.parametrize("flags", [["--no-loo"], ["--fit-key", "gpu"], ["evals/measurements/published.json"]])
def test_the_track_record_is_written_only_from_its_one_definition(flags: list[str], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`pdag accuracy --write-track-record` refuses any run other than the catalog's held-out score
    (``track_record_report``), which the slow test recomputes: a file written from a subset, another fit or the
    static fit alone would not be what estimates quote."""
    out = tmp_path / "record.json"
    assert cli_main(["accuracy", *flags, "--write-track-record", str(out)]) == 2
    assert not out.exists() and "--write-track-record" in capsys.readouterr().err
    assert REPORT_OPTIONS == {"leave_one_out": True, "fit_key": "generation", "serving_model": "simulator"}
