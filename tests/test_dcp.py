"""Decode context parallel (vLLM -dcp): KV striped by token inside the decode TP group, validated and priced."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import estimate_performance, validate_dag
from tools.core.errors import PdagInputError
from tools.core.memory import memory_report
from tools.core.plan import parse_plan

DSV3 = "deepseek-v3"  # MLA: one latent per token, replicated on every TP rank


def _dsv3(dcp: int, tp: int = 8, batch: int = 32, **extra: Any) -> dict[str, Any]:
    return {"model": DSV3, "hardware": {"gpu": "h200", "num_gpus": tp}, "dtype": "fp8",
            "parallel": {"tp": tp, "ep": tp, "dcp": dcp},
            "workload": {"input_len": 8192, "output_len": 1024, "batch_size": batch}, **extra}


def _rules(plan: dict[str, Any]) -> set[str]:
    return {v.rule_id for v in validate_dag(plan=plan).violations}


def test_mla_kv_per_gpu_is_one_nth_and_max_batch_grows() -> None:
    """DeepSeek-V3 on 8 H200 at TP 8 keeps its latent on all 8 ranks; -dcp 8 leaves one eighth on each."""
    base = memory_report(parse_plan(_dsv3(1)))
    for n in (2, 4, 8):
        mem = memory_report(parse_plan(_dsv3(n)))
        assert mem.kv_cache_bytes == pytest.approx(base.kv_cache_bytes / n, rel=1e-12)
        assert mem.weights_bytes == base.weights_bytes
        assert mem.max_batch_size_that_fits > base.max_batch_size_that_fits * (n - 1)
        assert mem.max_tokens_per_sequence_that_fit > base.max_tokens_per_sequence_that_fit * (n - 1)
        assert mem.kv_bytes_per_token == base.kv_bytes_per_token  # the model's KV, not one GPU's


def test_gqa_kv_replicated_by_tp_is_striped_and_unreplicated_kv_is_refused() -> None:
    """Qwen3-235B has 4 KV heads: TP 8 holds each twice, so dcp 2 halves KV per GPU; Llama-3.1-70B's 8 KV heads
    are already split by TP 8, so there is nothing to stripe (vLLM bounds dcp by tp / kv heads)."""
    qwen = {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8",
            "parallel": {"tp": 8, "ep": 8}}
    one = memory_report(parse_plan(qwen))
    two = memory_report(parse_plan({**qwen, "parallel": {"tp": 8, "ep": 8, "dcp": 2}}))
    assert two.kv_cache_bytes == pytest.approx(one.kv_cache_bytes / 2)
    assert "DCP-WITHIN-KV-REPLICATION" not in _rules({**qwen, "parallel": {"tp": 8, "ep": 8, "dcp": 2}})
    assert "DCP-WITHIN-KV-REPLICATION" in _rules({**qwen, "parallel": {"tp": 8, "ep": 8, "dcp": 4}})
    llama = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8, "dcp": 2}}
    assert "DCP-WITHIN-KV-REPLICATION" in _rules(llama)


def test_dcp_needs_no_opt_in_and_is_not_decode_sp() -> None:
    rules = _rules(_dsv3(8))
    assert not {r for r in rules if r.startswith("DCP-") or r.startswith("SP-") or r.startswith("ADP-")}
    assert validate_dag(plan=_dsv3(8)).valid
    assert "DCP-DIVIDES-TP" in _rules(_dsv3(3))
    assert "DCP-NO-DECODE-SP" in _rules({**_dsv3(2), "phases": {"decode": {"sp": 2}}})


def test_dcp_is_set_once_in_parallel() -> None:
    """A phase override of dcp is an input error that names parallel.dcp (not a guess at another degree)."""
    with pytest.raises(PdagInputError) as exc:
        validate_dag(plan={**_dsv3(1), "phases": {"decode": {"dcp": 2}}})
    assert exc.value.field == "plan.phases.decode.dcp" and "parallel.dcp" in exc.value.problem


def test_decode_step_reads_less_kv_and_pays_the_exchange() -> None:
    """The step's attention reads 1/N of the context per GPU and gains the all-gather of queries and the
    reduce-scatter of partial outputs with their log-sum-exps; prefill is unchanged."""
    base, dcp = estimate_performance(_dsv3(1)), estimate_performance(_dsv3(8))
    assert dcp.prefill_latency_ms == pytest.approx(base.prefill_latency_ms)
    assert dcp.decode.communication_ms > base.decode.communication_ms
    assert dcp.decode.breakdown_ms["memory"] < base.decode.breakdown_ms["memory"]
    assert any("decode context parallel dcp = 8" in a for a in dcp.assumptions)
    assert not any("decode context parallel" in a for a in base.assumptions)
    # the serving simulator holds the KV the memory report leaves room for
    assert dcp.served.kv_cache_tokens > base.served.kv_cache_tokens * 7


def test_exchange_grows_with_the_batch() -> None:
    small, large = estimate_performance(_dsv3(8, batch=8)), estimate_performance(_dsv3(8, batch=256))
    assert large.decode.communication_ms > small.decode.communication_ms


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2, 4, 8, 16]), data=st.data())
def test_kv_per_gpu_scales_as_one_over_dcp_for_any_divisor(tp: int, data: st.DataObject) -> None:
    dcp = data.draw(st.sampled_from([d for d in range(1, tp + 1) if tp % d == 0]))
    plan = _dsv3(dcp, tp=tp, batch=4)
    base = memory_report(parse_plan(_dsv3(1, tp=tp, batch=4)))
    mem = memory_report(parse_plan(plan))
    assert mem.kv_cache_bytes * dcp == pytest.approx(base.kv_cache_bytes, rel=1e-12)
    assert mem.max_batch_size_that_fits >= base.max_batch_size_that_fits
    assert parse_plan(plan).degrees("prefill").dcp == dcp  # plan-wide, but only decode's layout stripes
    bad = data.draw(st.integers(min_value=2, max_value=32).filter(lambda n: tp % n != 0))
    assert "DCP-DIVIDES-TP" in _rules(_dsv3(bad, tp=tp, batch=4))


def test_search_fast_path_prices_dcp_like_the_estimate() -> None:
    from tools.estimate.fast import FastEstimator

    plan = _dsv3(8, batch=48)
    e = estimate_performance(plan)
    h = FastEstimator(parse_plan(plan)).headline(48)
    assert h.tpot_ms == pytest.approx(e.decode_latency_ms_per_token, rel=1e-9)
    assert h.ttft_ms == pytest.approx(e.prefill_latency_ms, rel=1e-9)


def test_disaggregated_decode_pool_stripes_and_receives_one_nth() -> None:
    """dcp is the decode pool's: its GPUs hold and receive 1/N of the latent copies, the prefill pool is unchanged."""
    def plan(dcp: int) -> dict[str, Any]:
        return {**_dsv3(dcp), "hardware": {"gpu": "h200", "num_gpus": 16},
                "phases": {"prefill": {"dp": 1}, "decode": {"dp": 1}}, "options": {"disaggregated": True}}
    base, dcp = estimate_performance(plan(1)), estimate_performance(plan(8))
    assert base.memory.pools is not None and dcp.memory.pools is not None
    assert dcp.memory.pools["prefill"].kv_cache_bytes == base.memory.pools["prefill"].kv_cache_bytes
    assert dcp.memory.pools["decode"].kv_cache_bytes == pytest.approx(base.memory.pools["decode"].kv_cache_bytes / 8)
    assert base.kv_transfer is not None and dcp.kv_transfer is not None
    assert dcp.kv_transfer.wire_bytes_per_request == pytest.approx(base.kv_transfer.wire_bytes_per_request / 8)
    assert dcp.kv_transfer.bytes_per_request == base.kv_transfer.bytes_per_request
