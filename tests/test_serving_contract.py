"""The contract's served figures: top-level ttft_ms / tpot_ms at the stated load, one meaning of TTFT everywhere."""

from __future__ import annotations

import re
from pathlib import Path

from tools import estimate_performance
from tools.estimate.core import Estimate

ROOT = Path(__file__).resolve().parent.parent
AGG = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
       "workload": {"input_len": 2048, "output_len": 256, "batch_size": 64}}
DISAGG = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
          "parallel": {"tp": 8}, "options": {"disaggregated": True},
          "workload": {"input_len": 2048, "output_len": 256, "batch_size": 64}}


def test_top_level_ttft_and_tpot_are_served_figures() -> None:
    est = estimate_performance(plan=AGG)
    data = est.model_dump()
    for key in ("ttft_ms", "tpot_ms", "prefill_latency_ms", "load"):
        assert key in data
    assert est.load
    # a served request's first token does not wait for 64 prompts prefilled in one pass
    assert est.ttft_ms < est.prefill_latency_ms


def test_disaggregated_ttft_is_per_request_like_aggregated() -> None:
    agg, dis = estimate_performance(plan=AGG), estimate_performance(plan=DISAGG)
    # the static batch's prefill of 64 prompts is seconds; one request's TTFT is not
    assert dis.prefill_latency_ms > 2 * dis.ttft_ms
    assert 0.2 < dis.ttft_ms / agg.ttft_ms < 5


def _mentions_ttft(text: str) -> bool:
    return bool(re.search(r"time to first token|\bTTFT\b", text, re.IGNORECASE))


def test_prefill_latency_is_never_called_time_to_first_token() -> None:
    desc = Estimate.model_fields["prefill_latency_ms"].description or ""
    assert "not" in desc and "ttft_ms" in desc
    from server.responses import EstimateAnswer

    answer = EstimateAnswer.model_fields["prefill_latency_ms"].description or ""
    assert "not the time to first token" in answer
    tools_text = (ROOT / "server" / "tools.py").read_text(encoding="utf-8")
    assert "prefill_latency_ms (time to first token)" not in tools_text
    metrics = (ROOT / "knowledge" / "09_metrics_and_objectives.md").read_text(encoding="utf-8")
    row = next(line for line in metrics.splitlines() if line.startswith("| `prefill_latency_ms`"))
    assert not _mentions_ttft(row.replace("not a served request's time to first token", ""))


def test_concurrency_alone_sets_the_batch_the_static_figures_price() -> None:
    """'concurrency: 128' with no batch_size gave TTFT/TPOT for 128 clients beside a batch-1 throughput (297 tok/s
    against 5,310 at batch 128): the static figures now price the same load, shared by the decode replicas."""
    from tools.core.plan import parse_plan

    one = parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4},
                      "parallel": {"dp": 4}, "workload": {"concurrency": 128}})
    assert one.workload.batch_size == 32
    stated = parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4},
                         "parallel": {"dp": 4}, "workload": {"concurrency": 128, "batch_size": 8}})
    assert stated.workload.batch_size == 8
    rate = parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
                       "workload": {"concurrency": 64, "request_rate": 2.0}})
    assert rate.workload.batch_size == 1  # a cap on an open loop is not the load
