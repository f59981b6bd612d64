"""Static-batch TPOT and TTFT of dense plans never fall when only the batch grows (issue 10: the overlap switch
once made batch 2 faster than batch 1), for every engine, with and without overlap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tools import estimate_performance

LAYOUTS = [("llama-3.1-8b", "h100-sxm", {"tp": 1}), ("llama-3.1-70b", "h100-sxm", {"tp": 8}),
           ("llama-3.1-70b", "a100-80gb", {"tp": 4, "pp": 2}), ("qwen2.5-72b", "h200", {"tp": 4}),
           ("llama-3.1-405b", "h200", {"tp": 8, "pp": 2})]


@settings(max_examples=25, deadline=None)
@given(layout=st.sampled_from(LAYOUTS), engine=st.sampled_from(["generic", "vllm", "sglang", "trtllm", "gpt-fast"]),
       overlap=st.booleans(), batch=st.integers(1, 63), step=st.integers(1, 64), weights=st.sampled_from([None, "fp8"]))
def test_tpot_and_ttft_never_fall_as_the_batch_grows(layout, engine, overlap, batch, step, weights):
    model, gpu, par = layout
    gpus = par.get("tp", 1) * par.get("pp", 1)

    def est(b: int):
        plan = {"model": model, "hardware": {"gpu": gpu, "num_gpus": gpus}, "parallel": par, "engine": engine,
                "workload": {"input_len": 1024, "output_len": 128, "batch_size": b},
                "options": {"overlap_comm": overlap}}
        if weights:
            plan["weights"] = weights
        return estimate_performance(plan=plan)

    small, large = est(batch), est(batch + step)
    assert large.decode_latency_ms_per_token >= small.decode_latency_ms_per_token * (1 - 1e-9)
    assert large.prefill_latency_ms >= small.prefill_latency_ms * (1 - 1e-9)
