"""Speculative decoding and prefix caching: plan fields, validation, memory, pricing, engine import/export."""

from __future__ import annotations

import pytest

from tools.core.errors import PdagInputError
from tools.core.plan import parse_plan

R1 = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
      "dtype": "fp8", "engine": "vllm"}


def test_old_plans_parse_without_the_new_fields():
    p = parse_plan(R1)
    assert p.speculative is None and p.prefix_caching is None and p.prefix_hit_fraction == 0.0


def test_fields_parse_and_state_their_hit_fraction():
    p = parse_plan({**R1, "speculative": {"method": "mtp", "num_draft_tokens": 3},
                    "prefix_caching": {"shared_prefix_len": 512}, "workload": {"input_len": 1024}})
    assert p.speculative.num_draft_tokens == 3 and p.prefix_hit_fraction == 0.5
    assert parse_plan({**R1, "prefix_caching": {"enabled": False, "hit_rate": 0.9}}).prefix_hit_fraction == 0.0


@pytest.mark.parametrize("bad", [
    {"speculative": {"method": "medusa"}},
    {"speculative": {"method": "mtp", "acceptance_rate": 0.8, "mean_accepted_tokens": 1.8}},
    {"speculative": {"method": "mtp", "num_draft_tokens": 1, "mean_accepted_tokens": 2.5}},
    {"speculative": {"method": "eagle", "draft_tp": 1}},
    {"prefix_caching": {"shared_prefix_len": 4096}, "workload": {"input_len": 1024}},
    {"prefix_caching": {"shared_prefix_len": 10, "hit_rate": 0.5}},
])
def test_inconsistent_fields_are_input_errors(bad):
    with pytest.raises(PdagInputError):
        parse_plan({**R1, **bad})


def _rules(plan: dict) -> set[str]:
    from tools.rules.validate import validate_dag

    return {v.rule_id for v in validate_dag(plan=plan).violations if v.severity == "error"}


def test_engine_errors_name_the_engine():
    from tools.rules.validate import validate_dag

    found = validate_dag(plan={**R1, "engine": "trtllm", "speculative": {"method": "eagle"}}).violations
    msg = next(v.message for v in found if v.rule_id == "SPEC-ENGINE-SUPPORT")
    assert "TensorRT-LLM" in msg and "eagle" in msg


def test_vllm_allows_a_draft_on_one_gpu_sglang_does_not():
    llama = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
             "speculative": {"method": "draft_model", "draft_model": "llama-3.1-8b", "draft_tp": 1}}
    assert "SPEC-ENGINE-SUPPORT" not in _rules({**llama, "engine": "vllm"})
    assert "SPEC-ENGINE-SUPPORT" in _rules({**llama, "engine": "sglang"})


def test_draft_memory_is_counted_per_gpu():
    from tools.core.memory import memory_report

    plain = memory_report(parse_plan(R1))
    mtp = memory_report(parse_plan({**R1, "speculative": {"method": "mtp"}}))
    ngram = memory_report(parse_plan({**R1, "speculative": {"method": "ngram"}}))
    # one MTP block on 8 GPUs: its 1/8 share of ~11.5 B parameters (fp8 experts), about 1-2 GB per GPU
    assert 1e9 < mtp.weights_bytes - plain.weights_bytes < 2.5e9
    assert mtp.kv_cache_bytes > plain.kv_cache_bytes and mtp.max_batch_size_that_fits < plain.max_batch_size_that_fits
    assert ngram.weights_bytes == plain.weights_bytes


def test_speculative_step_arithmetic():
    from tools.core.speculative import tokens_per_step
    from tools.estimate.speculative import speculative_step

    assert tokens_per_step(0.8, 0.8, 2) == pytest.approx(1 + 0.8 + 0.64)
    st = speculative_step(10.0, 12.0, 0.05, 2, 2.0)
    assert st.step_ms == pytest.approx(13.0) and st.tpot_ms == pytest.approx(6.5)
    assert st.cost_multiplier == pytest.approx(1.3)


def test_published_defaults_reproduce_their_measurements():
    from tools.core.speculative import spec_data, tokens_per_step

    m = spec_data()["methods"]
    assert tokens_per_step(m["mtp"]["first_acceptance"], m["mtp"]["later_acceptance"], 7) == pytest.approx(3.20, abs=.03)
    assert tokens_per_step(m["eagle"]["first_acceptance"], m["eagle"]["later_acceptance"], 2) == pytest.approx(1.89,
                                                                                                          abs=.02)
    assert tokens_per_step(m["eagle3"]["first_acceptance"], m["eagle3"]["later_acceptance"], 7) == pytest.approx(
        3.53, abs=.05)


def test_mtp_lowers_tpot_and_reports_both():
    from tools import estimate_performance

    plan = {**R1, "workload": {"input_len": 1024, "output_len": 1024, "batch_size": 4}}
    plain = estimate_performance(plan=plan)
    mtp = estimate_performance(plan={**plan, "speculative": {"method": "mtp", "num_draft_tokens": 1}})
    sp = mtp.speculative
    assert sp is not None and plain.speculative is None
    assert sp.tpot_without_ms == pytest.approx(plain.serving.tpot_ms)
    assert sp.tpot_with_ms < 0.8 * sp.tpot_without_ms
    assert 1.0 < sp.static.cost_multiplier < sp.tokens_per_step  # more work per step, fewer steps per token
    assert mtp.decode_latency_ms_per_token < plain.decode_latency_ms_per_token
    assert any("k + 1 = 2" in a for a in mtp.assumptions)


def test_perfect_acceptance_bounds_the_speedup():
    from tools import estimate_performance

    plan = {**R1, "speculative": {"method": "ngram", "num_draft_tokens": 3, "mean_accepted_tokens": 4}}
    sp = estimate_performance(plan=plan).speculative
    assert sp.tpot_with_ms == pytest.approx(sp.static.verify_ms / 4, rel=0.3)
    assert sp.tpot_with_ms > sp.tpot_without_ms / 4  # verifying four tokens costs more than decoding one


def test_prefix_hits_cut_ttft_and_a_shared_prefix_raises_capacity():
    from tools import estimate_performance

    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
            "workload": {"input_len": 8192, "output_len": 256, "batch_size": 256}}
    plain = estimate_performance(plan=plan)
    cached = estimate_performance(plan={**plan, "prefix_caching": {"shared_prefix_len": 6144}})
    pf = cached.prefix_caching
    assert pf.ttft_with_ms < pf.ttft_without_ms == pytest.approx(plain.serving.ttft_ms)
    assert pf.running_with > pf.running_without
    assert cached.prefill_latency_ms < plain.prefill_latency_ms
