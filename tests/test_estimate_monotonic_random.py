"""TPOT and TTFT never fall when only the batch grows, over random valid plans (issue 10, item 6): random
models, GPUs, degrees (TP, PP, EP, SP, attention-DP), weight formats, engines and overlap, kept when
validate_dag accepts them.  The fixed-layout tests (test_estimate_monotonic*.py) pin known regimes; this one
looks for the corners between them, such as an overlap switch that starts at two tokens."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tools import estimate_performance, validate_dag
from tools.core.engine_profile import ENGINE_IDS

MODELS = ["llama-3.1-8b", "qwen3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "deepseek-coder-v2-lite"]
GPUS = ["h100-sxm", "a100-80gb", "h200", "b200", "mi300x"]
WEIGHTS = [None, "fp8", "int4", "awq-int4", "mxfp4"]


@st.composite
def plans(draw: st.DrawFn) -> dict:
    model = draw(st.sampled_from(MODELS))
    moe = model not in ("llama-3.1-8b", "qwen3-8b")
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2]))
    sp = draw(st.sampled_from([1, 2])) if tp == 1 else 1
    ep = draw(st.sampled_from([1, 2, 4, 8])) if moe else 1
    attn_dp = draw(st.sampled_from([1, 2, 4])) if moe and ep > 1 else 1
    width = max(attn_dp * max(tp, sp), ep)
    plan = {"model": model, "hardware": {"gpu": draw(st.sampled_from(GPUS)), "num_gpus": pp * width},
            "parallel": {"tp": tp, "pp": pp, "sp": sp, "ep": ep, "attn_dp": attn_dp},
            "engine": draw(st.sampled_from(ENGINE_IDS)),
            "options": {"overlap_comm": draw(st.booleans()), "allow_expert_tp": moe and ep < width,
                        "allow_attention_dp": attn_dp > 1}}
    weights = draw(st.sampled_from(WEIGHTS))
    if weights is not None:
        plan["weights"] = weights
    return plan


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.filter_too_much])
@given(plan=plans(), batch=st.integers(1, 48), step=st.integers(1, 48), input_len=st.integers(1, 4096))
def test_tpot_and_ttft_never_fall_when_only_the_batch_grows(plan: dict, batch: int, step: int,
                                                            input_len: int) -> None:
    assume(not [v for v in validate_dag(plan).violations if v.severity == "error"])

    def at(b: int):
        workload = {"input_len": input_len, "output_len": 64, "batch_size": b}
        return estimate_performance(plan={**plan, "workload": workload})

    small, large = at(batch), at(batch + step)
    assert large.decode_latency_ms_per_token >= small.decode_latency_ms_per_token * (1 - 1e-9)
    assert large.prefill_latency_ms >= small.prefill_latency_ms * (1 - 1e-9)
