"""Physics the estimator must respect: batch-1 decode is a weight stream, engines price collectives their own
way, DeepEP's all-to-all latency is nearly flat in the peer count, wide EP does not lose throughput per GPU."""

from __future__ import annotations

from typing import get_args

import pytest

from tools import estimate_performance
from tools.core.efficiency import efficiency_catalog, efficiency_for, efficiency_source
from tools.core.engine_profile import ENGINE_DIR, ENGINE_IDS, EngineId, engine_profile
from tools.core.errors import PdagInputError
from tools.core.hardware import accelerator_ids, load_accelerator
from tools.core.layout import Layout
from tools.core.memory import memory_report
from tools.core.plan import parse_plan
from tools.estimate.core import PhaseDetail
from tools.estimate.costs import CostModel, Kernel


def plan(model: str, gpu: str, n: int, b: int = 1, i: int = 128, o: int = 128, dtype: str = "bf16",
         engine: str = "generic", options: dict | None = None, **par: int) -> dict:
    return {"model": model, "hardware": {"gpu": gpu, "num_gpus": n}, "parallel": par, "dtype": dtype,
            "workload": {"input_len": i, "output_len": o, "batch_size": b}, "engine": engine,
            "options": options or {}}


@pytest.mark.parametrize(("model", "gpu", "tp"), [("llama-3.1-8b", "h100-sxm", 1), ("llama-2-7b", "a100-80gb", 1),
                                                  ("llama-3.1-70b", "h100-sxm", 4), ("llama-2-70b", "a100-80gb", 8)])
def test_batch1_decode_is_weight_stream_plus_collectives(model: str, gpu: str, tp: int) -> None:
    """TPOT at batch 1 within 10 % of weight bytes / achievable bandwidth + 2 all-reduces per layer + the kernel
    boundaries (six priced kernels and the un-modelled ones per layer, each a few microseconds of bubble even in
    a CUDA graph) + step cost."""
    p = plan(model, gpu, tp, tp=tp)
    full = parse_plan(p)
    eff = efficiency_for(full.accelerator.id)
    weights = max(g.weights_bytes for g in memory_report(full, Layout(full)).per_gpu)
    stream_ms = weights / (full.accelerator.memory_bandwidth_bytes_per_s * eff["small_gemm_memory_efficiency"]) * 1e3
    layers = full.spec.num_layers
    collectives_ms = (2 * layers * eff["allreduce_min_us"] * 1e-3) if tp > 1 else 0.0
    boundaries_ms = layers * (6 * eff["decode_kernel_overhead_us"] + eff["decode_layer_overhead_us"]) * 1e-3
    expected = stream_ms + collectives_ms + boundaries_ms + eff["decode_step_overhead_ms"]
    tpot = estimate_performance(plan=p).decode_latency_ms_per_token
    assert tpot == pytest.approx(expected, rel=0.10)


def test_engines_differ_where_they_should() -> None:
    """Same plan: a custom one-shot all-reduce (vLLM) beats NCCL (generic) at batch-1 TP 8; CUDA graphs make the
    fixed cost of a decode step a fraction of prefill's."""
    p = plan("llama-3.1-70b", "h100-sxm", 8, tp=8)
    generic = estimate_performance(plan=p)
    vllm = estimate_performance(plan={**p, "engine": "vllm"})
    assert vllm.decode_latency_ms_per_token < generic.decode_latency_ms_per_token
    assert vllm.decode.breakdown_ms["communication"] < 0.5 * generic.decode.breakdown_ms["communication"]
    e = efficiency_for("h100-sxm", engine="generic")
    assert e["decode_kernel_overhead_us"] <= e["kernel_overhead_us"]  # graphs drop the host launch, not the bubble
    assert e["decode_step_overhead_ms"] < e["step_overhead_ms"]
    assert any("engine profile 'vllm'" in a for a in vllm.assumptions)


def test_every_engine_profile_loads_with_sources() -> None:
    assert set(ENGINE_IDS) == {f.stem for f in ENGINE_DIR.glob("*.json")} == set(get_args(EngineId))
    for engine in ENGINE_IDS:
        prof = engine_profile(engine)
        assert prof.id == engine
        for key in ("step_overhead_ms", "eager_host_us_per_kernel", "allreduce", "alltoall", "overlap", "kernels"):
            assert prof.sources.get(key), f"{engine}: no source for {key}"
        assert prof.overlap.tp_allreduce == 0.0  # no engine overlaps the TP all-reduce
        for accel, keys in prof.accelerators.items():  # an engine's kernels timed on one GPU: catalog keys only
            assert accel in accelerator_ids() and set(keys) <= set(efficiency_catalog()["defaults"]), (engine, accel)
            assert all(efficiency_for(accel, engine=engine)[k] == v for k, v in keys.items())
            assert all(efficiency_source(k, engine, accel).startswith(f"engine profile knowledge/engines/{engine}")
                       for k in keys)  # an estimate's provenance names the engine's own timing, not the catalog's
    with pytest.raises(PdagInputError):
        engine_profile("nonesuch")


def test_tp_allreduce_is_never_hidden() -> None:
    est = estimate_performance(plan={**plan("llama-3.1-70b", "h100-sxm", 8, b=32, i=2048, tp=8),
                                     "options": {"overlap_comm": True}, "engine": "sglang"})
    assert est.prefill.communication_hidden_ms == 0 and est.decode.communication_hidden_ms == 0


def test_expert_tp_combines_with_an_all_reduce() -> None:
    """Expert-TP (tokens on every expert GPU): no dispatch traffic, the combine costs one TP all-reduce."""
    p = parse_plan(plan("mixtral-8x7b", "h100-sxm", 8, options={"allow_expert_tp": True}, tp=8))
    layout = Layout(p)
    m = CostModel(p, layout, efficiency_for(p.accelerator.id), False)
    gpus = list(range(8))
    dispatch = m.cost({"type": "AllToAllNode", "role": "dispatch", "phase": "decode", "devices": gpus}, 1)
    combine = m.cost({"type": "AllToAllNode", "role": "combine", "phase": "decode", "devices": gpus}, 1)
    tp_sync = m.cost({"type": "AllReduceNode", "role": "tp_sync", "phase": "decode", "devices": gpus}, 1)
    assert dispatch.seconds == 0.0 and combine.seconds == pytest.approx(tp_sync.seconds)


# AITER's tuned fused-MoE table for Qwen3-235B in bf16 on MI300X (ROCm/aiter
# aiter/configs/model_configs/qwen3_235b_bf16_tuned_fmoe.csv at f162697a7b): both expert GEMMs, us, by tokens, for the
# TP4 (384-wide) and TP8 (192-wide) expert slices.
AITER_QWEN3_FMOE_US = {4: {2048: 719.6576, 8192: 2220.8408}, 8: {2048: 475.133, 8192: 1497.0631}}


@pytest.mark.parametrize("tp", [4, 8])
def test_mi300x_fused_moe_follows_aiter_at_prefill_sizes(tp: int) -> None:
    """MI300X's grouped expert GEMMs at prefill sizes run at AITER's published speed for the slice width (within 25 %),
    where one width-independent efficiency priced them up to twice too fast."""
    p = parse_plan(plan("qwen3-235b-a22b", "mi300x", tp, options={"allow_expert_tp": True}, tp=tp))
    m = CostModel(p, Layout(p), efficiency_for("mi300x"), False)
    attrs = {"type": "ExpertNode", "phase": "prefill", "devices": list(range(tp)), "experts": list(range(128))}
    for tokens, us in AITER_QWEN3_FMOE_US[tp].items():
        priced = m.expert(tokens, attrs, {"of": tp}, small=False)
        assert priced.seconds * 1e6 == pytest.approx(us, rel=0.25)


# NVIDIA AIConfigurator's tables (ai-dynamo/aiconfigurator@095f58a51c, systems/data/h200_sxm/moe/<engine>/<version>/
# moe_perf.parquet, balanced routing): DeepSeek-V3's block-fp8 MoE layer on H200, us per layer, by tokens, for the
# full experts (TP1) and TP8's 256-wide slices.
AIC_DSV3_MOE_US = {"sglang": {1: {4096: 4909.0, 8192: 7685.0}, 8: {4096: 1107.0, 8192: 1825.0}},
                   "trtllm": {1: {4096: 5474.0, 8192: 10558.0}, 8: {4096: 2667.0, 8192: 5179.0}}}


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_hopper_block_fp8_experts_follow_each_engines_published_times(engine: str) -> None:
    """The engine's own fused MoE over DeepSeek-V3's block-fp8 experts on H200 at prefill sizes is priced within 25 %
    of its published time, full-width and TP8-sliced alike; the catalog's one width-independent figure priced
    TensorRT-LLM's TP8 slices 3-4x too fast.  Engines without a table (vLLM here) keep the catalog figure."""
    for tp, times in AIC_DSV3_MOE_US[engine].items():
        p = parse_plan(plan("deepseek-v3", "h200", 8, dtype="fp8", engine=engine, options={"allow_expert_tp": True},
                            tp=8))
        m = CostModel(p, Layout(p), efficiency_for("h200", engine=engine), False)
        attrs = {"type": "ExpertNode", "phase": "prefill", "devices": list(range(8)), "experts": list(range(256))}
        for tokens, us in times.items():
            assert m.expert(tokens, attrs, {"of": tp}, small=False).seconds * 1e6 == pytest.approx(us, rel=0.25)
    assert efficiency_for("h200", engine="vllm")["compute_efficiency_experts_block_fp8"] == 0


# The same tables on B200 (systems/data/b200_sxm/moe/trtllm/1.2.0rc5, 16-64 GPUs only): DeepSeek-V3's block-fp8
# expert GEMMs at 8,192 tokens over 16 GPUs (256 rows per expert), fraction of the fp8 peak by slice width.
AIC_B200_TRTLLM_DSV3_SPEED = {1: 0.158, 2: 0.132, 4: 0.098, 8: 0.064}


def test_b200_block_fp8_expert_slices_follow_tensorrt_llms_published_speed() -> None:
    """At the table's rows per expert, TensorRT-LLM's block-fp8 experts on B200 run at its published speed for each
    slice width within 10 %: whole experts about 2.5x the speed of TP8's 256-wide slices."""
    p = parse_plan(plan("deepseek-v3", "b200", 8, dtype="fp8", engine="trtllm", options={"allow_expert_tp": True},
                        tp=8))
    m = CostModel(p, Layout(p), efficiency_for("b200", engine="trtllm"), False)
    attrs = {"type": "ExpertNode", "phase": "prefill", "devices": list(range(8)), "experts": list(range(256))}
    tokens = 8192
    for tp, speed in AIC_B200_TRTLLM_DSV3_SPEED.items():
        flops = tokens * 8 * 2 * 3 * 7168 * 2048 / tp
        cost = m.expert(tokens, attrs, {"of": tp}, small=False)
        priced = flops / (cost.seconds - cost.overhead_s) / load_accelerator("b200").peak_flops("fp8")
        assert priced == pytest.approx(speed, rel=0.10), tp


@pytest.mark.parametrize("gpu, ratio", [("b200", 3072 * 512 / (2880 * 360)), ("h200", 384 / 360),
                                        ("mi300x", 384 / 360)])
def test_mxfp4_experts_do_the_padded_work(gpu: str, ratio: float) -> None:
    """gpt-oss's MXFP4 experts run on zero-padded weights: at TP8 FlashInfer's Blackwell kernel pads the hidden size
    2880 to 3072 and the 360-wide slice to 512, Triton's Hopper kernel and ROCm's pad the slice to 384 only."""
    p = parse_plan(plan("gpt-oss-120b", gpu, 8, options={"allow_expert_tp": True}, tp=8))
    attrs = {"type": "ExpertNode", "phase": "prefill", "devices": list(range(8)), "experts": list(range(128))}
    padded = CostModel(p, Layout(p), efficiency_for(gpu), False).expert(4096, attrs, {"of": 8}, small=False)
    plain_eff = {**efficiency_for(gpu), "mxfp4_expert_hidden_align": 0.0, "mxfp4_expert_inter_align": 0.0}
    plain = CostModel(p, Layout(p), plain_eff, False).expert(4096, attrs, {"of": 8}, small=False)
    assert padded.flops / plain.flops == pytest.approx(ratio, rel=0.01)


# DeepEP low-latency kernels, H800 + CX7 400 Gb/s, 128 tokens per GPU, hidden 7168, top-8, fp8 dispatch
# (https://github.com/deepseek-ai/DeepEP, README "Low-latency kernels with pure RDMA"): dispatch latency in us.
DEEPEP_DISPATCH_US = {16: 118, 32: 155, 64: 173, 128: 192, 256: 194}


def _dispatch_us(ep: int) -> float:
    p = parse_plan(plan("deepseek-v3", "h100-sxm", ep, b=128 * ep, dtype="fp8", engine="sglang",
                        options={"allow_attention_dp": True}, ep=ep, attn_dp=ep))
    m = CostModel(p, Layout(p), efficiency_for(p.accelerator.id, engine="sglang"), False)
    attrs = {"type": "AllToAllNode", "role": "dispatch", "phase": "decode", "devices": list(range(ep))}
    return m.cost(attrs, 128 * ep).seconds * 1e6


def test_all_to_all_latency_is_flat_like_deepep() -> None:
    got = {ep: _dispatch_us(ep) for ep in DEEPEP_DISPATCH_US}
    for ep, us in DEEPEP_DISPATCH_US.items():
        assert got[ep] == pytest.approx(us, rel=0.3), (ep, got[ep])
    assert got[256] / got[16] < 2.2  # DeepEP: 1.64x from EP 16 to EP 256, not 16x


# NVIDIA's AIConfigurator times SGLang's DeepEP low-latency kernels on H100 clusters (DeepSeek-V3: hidden 7168,
# 256 experts, top-8; ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce, aic-core/src/
# aiconfigurator_core/systems/data/h100_sxm/comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet): dispatch +
# combine in us by (nodes of 8 GPUs, tokens per GPU).
AIC_DEEPEP_LL_US = {(1, 8): 30.5, (1, 32): 45.1, (1, 64): 68.7, (1, 128): 112.2,
                    (2, 8): 59.8, (2, 32): 101.0, (2, 64): 160.3, (2, 128): 288.3,
                    (4, 8): 73.8, (4, 32): 140.8, (4, 64): 234.6, (4, 128): 406.3,
                    (8, 8): 78.0, (8, 32): 158.4, (8, 64): 254.3, (8, 128): 471.5}


def test_decode_all_to_all_follows_aiconfigurators_deepep_table() -> None:
    """Wide-EP decode's dispatch and combine, priced for SGLang, stay within 25 % of the DeepEP low-latency times
    NVIDIA timed from EP 8 to EP 64 and 8 to 128 tokens per GPU (a source independent of DeepEP's README above)."""
    for (nodes, tokens), us in AIC_DEEPEP_LL_US.items():
        ep = 8 * nodes
        p = parse_plan(plan("deepseek-v3", "h100-sxm", ep, b=tokens * ep, dtype="fp8", engine="sglang",
                            options={"allow_attention_dp": True, "expert_imbalance_ok": True}, ep=ep, attn_dp=ep))
        m = CostModel(p, Layout(p), efficiency_for(p.accelerator.id, engine="sglang"), False)
        got = sum(m.cost({"type": "AllToAllNode", "role": role, "phase": "decode", "devices": list(range(ep))},
                         tokens * ep).seconds for role in ("dispatch", "combine")) * 1e6
        assert got == pytest.approx(us, rel=0.25), (nodes, tokens, got)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_gb200_runs_a_few_percent_faster_than_b200_not_its_peak_ratio(engine: str) -> None:
    """GB200's GPUs are B200 dies with 11 % more listed peak, but AIConfigurator times the engines' GEMMs and
    attention on them only 2-7 % faster: the efficiencies (fractions of each GPU's own peak) say the same."""
    gb, b = efficiency_for("gb200", engine=engine), efficiency_for("b200", engine=engine)
    peak = load_accelerator("gb200").peak_flops("bf16") / load_accelerator("b200").peak_flops("bf16")
    assert peak == pytest.approx(1.11, abs=0.01)  # the catalog's dense bf16 (and fp8) TFLOPs, GB200 over B200
    for key in ("compute_efficiency_gemm", "compute_efficiency_gemm_fp8", "compute_efficiency_gemm_fp4",
                "compute_efficiency_attention"):
        assert 1.0 <= gb[key] * peak / b[key] <= 1.08, key


def test_wide_ep_keeps_throughput_per_gpu() -> None:
    """EP 144 does not lose decode throughput per GPU to EP 72 at the same per-GPU batch (large-scale EP results:
    more GPUs hold fewer experts each, the all-to-all stays nearly flat)."""
    rate = {}
    for ep in (72, 144):
        est = estimate_performance(plan=plan("deepseek-v3", "h200", ep, b=64 * ep, i=2000, o=200, dtype="fp8",
                                             engine="sglang", options={"allow_attention_dp": True,
                                                                       "expert_imbalance_ok": True},
                                             ep=ep, attn_dp=ep))
        rate[ep] = est.static_batch_throughput.decode_tokens_per_s / ep
    assert rate[144] >= 0.98 * rate[72]


def test_imported_plans_carry_their_engine_and_export_to_it() -> None:
    from tools.engines.launch import export_plan, import_command

    r = import_command("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp-size=8 --ep-size 8")
    assert r.plan["engine"] == "sglang"
    assert export_plan(r.plan, force=True).engine == "sglang"  # 671B fp8 on 8 H100 breaks MEM-FITS
    v = import_command("vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4")
    assert v.plan["engine"] == "vllm" and export_plan(v.plan).engine == "vllm"
    with pytest.raises(PdagInputError):  # the generic profile is no launchable engine
        export_plan({**v.plan, "engine": "generic"})


@pytest.mark.parametrize("engine", ["trtllm", "sglang", "gpt-fast"])
def test_search_fast_path_prices_the_engine_like_the_estimate(engine: str) -> None:
    from tools.estimate.fast import FastEstimator

    p = plan("mixtral-8x7b", "h100-sxm", 8, b=16, i=1024, dtype="fp8", engine=engine, ep=8, tp=8)
    est = estimate_performance(plan=p)
    fast = FastEstimator(parse_plan(p))
    assert fast.phase_ms("decode", 16) == pytest.approx(est.decode_latency_ms_per_token, rel=1e-9)
    assert fast.phase_ms("prefill", 16) == pytest.approx(est.prefill_latency_ms, rel=1e-9)


def test_prefill_attention_speed_follows_the_published_length_curve() -> None:
    """Causal prefill attention runs at FlashAttention-3's published speed for its prompt length: 521 of 616
    TFLOPs at 2k tokens, the full figure from 16k on, and slower per FLOP the shorter the prompt."""
    from tools.core.efficiency import attention_length_scale

    assert attention_length_scale(2048) == pytest.approx(521 / 616)
    assert attention_length_scale(16384) == attention_length_scale(65536) == 1.0
    lengths = [64, 256, 512, 700, 1024, 3000, 4096, 10000, 16384]
    scales = [attention_length_scale(n) for n in lengths]
    assert scales == sorted(scales) and 0 < scales[0] < 0.1


def test_prefill_attention_speed_follows_the_published_head_dim_curves() -> None:
    """Narrow heads run slower per FLOP: FlashAttention-3's causal forward at 8k tokens is 460 TFLOPs at head dim 64,
    602 at 128 and 628 at 256; a head dim between two published ones falls between their speeds."""
    from tools.core.efficiency import attention_length_scale

    assert attention_length_scale(8192, 64) == pytest.approx(460 / 616)
    assert attention_length_scale(8192, 256) == pytest.approx(628 / 616)
    assert attention_length_scale(8192, 64) < attention_length_scale(8192, 96) < attention_length_scale(8192, 128)
    assert attention_length_scale(8192, 128) < attention_length_scale(8192, 192) < attention_length_scale(8192, 256)
    assert attention_length_scale(8192, 32) == attention_length_scale(8192, 64)


# AITER's tuned CK a8w8 rowwise GEMM table (ROCm/aiter aiter/configs/a8w8_tuned_gemm.csv at fbb52ddfad, cu_num 304):
# us at 8,192 rows for Llama-3-70B's TP8 qkv (1280 x 8192) and o-proj (8192 x 1024) and its TP1 gate_up (57344 x 8192).
AITER_FP8_GEMM_US = {(1280, 8192): 205.4474, (8192, 1024): 206.612, (57344, 8192): 7243.5376}


def test_mi300x_fp8_gemms_follow_aiters_times_narrow_and_wide() -> None:
    """One fp8 figure priced MI300X's TP8 o-proj 1.4x faster than AITER's time; with the narrow-GEMM law the TP8
    projections and the widest TP1 one land within 20 % of the table."""
    p = parse_plan(plan("llama-3.1-70b", "mi300x", 8, dtype="fp8", tp=8))
    m = CostModel(p, Layout(p), efficiency_for("mi300x"), False)
    rows = 8192
    for (n, k), us in AITER_FP8_GEMM_US.items():
        cost = m.run("prefill", [Kernel(2 * rows * n * k, n * k * m.wb + rows * (n + k) * 2,
                                        speed_scale=m.gemm_speed(n, k))])
        assert (cost.seconds - cost.overhead_s) * 1e6 == pytest.approx(us, rel=0.20), (n, k)


def test_mi300x_prefill_attention_runs_at_aiters_published_speed() -> None:
    """Causal prefill attention on MI300X runs at AITER's published forward speed (asm kernel, head dim 128:
    541.55 TFLOPs at 16k tokens, 518-551 at 8k), not at FlashAttention-3's H100 share of peak."""
    for tokens, low, high in ((16384, 0.95 * 541.55, 1.05 * 541.55), (8192, 518, 551)):
        p = parse_plan(plan("llama-3.1-8b", "mi300x", 1, b=1, i=tokens))
        m = CostModel(p, Layout(p), efficiency_for("mi300x"), False)
        flops = 1e15
        cost = m.run("prefill", [Kernel(flops, 0.0, attention=True)])
        tflops = flops / (cost.seconds - cost.overhead_s) / 1e12
        assert low <= tflops <= high, tflops


# NVIDIA AIConfigurator's tables (ai-dynamo/aiconfigurator@095f58a51c, systems/data/b200_sxm/attention/vllm/0.19.0/
# context_attention_perf.parquet): vLLM's context attention on B200, head dim 128, one sequence, bf16 KV, us, by the
# heads on the GPU (8 with 1 KV head: Llama-70B at TP8; 64 with 8: TP1) and tokens.
AIC_B200_VLLM_ATTENTION_US = {(8, 1, 1024): 21.3, (8, 1, 8192): 169.1, (64, 8, 1024): 35.6, (64, 8, 8192): 762.5}


def test_prefill_attention_slows_down_when_its_tiles_cannot_fill_the_gpu() -> None:
    """One short prompt with few heads per GPU leaves most SMs idle: vLLM's attention on B200 runs about ten times
    slower per FLOP for a 1k prompt over 8 heads than the benchmark's full GPU.  Priced within 30 % of the published
    times at 1k and 8k tokens, 8 and 64 heads; without the occupancy term the 1k / 8-head case was 7x too fast."""
    for (heads, _kv_heads, tokens), us in AIC_B200_VLLM_ATTENTION_US.items():
        p = parse_plan(plan("llama-3.1-70b", "b200", 8, b=1, i=tokens, engine="vllm", tp=8))
        m = CostModel(p, Layout(p), efficiency_for("b200", engine="vllm"), False)
        flops = 4 * tokens * (tokens / 2) * heads * 128
        kernel = Kernel(flops, 0.0, attention=True, speed_scale=m.prefill_attention_occupancy(1, heads, 1))
        cost = m.run("prefill", [kernel])
        assert (cost.seconds - cost.overhead_s) * 1e6 == pytest.approx(us, rel=0.30), (heads, tokens)
    assert efficiency_for("mi300x")["attention_half_speed_tiles"] == 0  # no published table: not scaled


def test_nvfp4_gemms_on_b200_run_at_their_published_speed() -> None:
    """B200's FP4 tensor cores: NVFP4 GEMMs are priced at the fp8 peak (the catalog lists no FP4 peak) times their
    own measured share of it, not fp8's.  NVIDIA AIConfigurator times TensorRT-LLM 1.2's 8192^3 NVFP4 GEMM on B200
    at 287 us (3,826 TFLOPs; fp8: 504 us) and its Llama-70B gate_up slice at TP8 (7168 x 8192) with 8192 tokens at
    3,643 TFLOPs: priced within 20 %; fp8 weights keep the fp8 figure."""
    def gemm_us(weights: str, n: int, k: int, m_tokens: int) -> float:
        p = parse_plan({**plan("llama-3.1-70b", "b200", 8, dtype="fp8" if weights == "fp8" else "bf16", tp=8),
                        "weights": weights})
        m = CostModel(p, Layout(p), efficiency_for("b200"), False)
        cost = m.run("prefill", [Kernel(2 * m_tokens * n * k, n * k * m.wb + m_tokens * (n + k) * 2)])
        return (cost.seconds - cost.overhead_s) * 1e6

    assert gemm_us("nvfp4", 8192, 8192, 8192) == pytest.approx(287.4, rel=0.20)
    assert gemm_us("nvfp4", 7168, 8192, 8192) == pytest.approx(2 * 8192 * 7168 * 8192 / 3643e12 * 1e6, rel=0.20)
    assert gemm_us("fp8", 8192, 8192, 8192) == pytest.approx(504.0, rel=0.20)


# NVIDIA AIConfigurator's GEMM tables (ai-dynamo/aiconfigurator@095f58a51c, systems/data/<gpu>/gemm/<engine>/
# gemm_perf.parquet, fp8 rows at 8,192 tokens): the per-FLOP speed of Llama-3-70B's four projections (qkv, o,
# gate_up, down) at TP8 over their speed at TP1, from the summed times (derived; sizes between grid points
# log-interpolated).
TP8_OVER_TP1_FP8 = {("h200", "trtllm"): 0.83, ("h200", "vllm"): 0.85, ("b200", "trtllm"): 0.68}


@pytest.mark.parametrize(("gpu", "engine"), list(TP8_OVER_TP1_FP8))
def test_narrow_fp8_projections_slow_down_like_the_published_tables(gpu: str, engine: str) -> None:
    """A 70B model's fp8 projections lose speed per FLOP as TP narrows them (qkv 1,280 wide and o-proj 1,024 deep
    at TP8): priced within 15 % of each engine's table, where one flat figure says they keep their speed."""
    def speed(tp: int) -> float:
        p = parse_plan({**plan("llama-3.1-70b", gpu, tp, dtype="fp8", tp=tp), "engine": engine})
        m = CostModel(p, Layout(p), efficiency_for(gpu, None, engine), False)
        h, inter = 8192, 28672
        shapes = [(10240 // tp, h), (h, h // tp), (2 * inter // tp, h), (h, inter // tp)]
        return sum(n * k for n, k in shapes) / sum(n * k / m.gemm_speed(n, k) for n, k in shapes)

    assert speed(8) / speed(1) == pytest.approx(TP8_OVER_TP1_FP8[(gpu, engine)], rel=0.15)


def test_sliding_window_attention_runs_at_its_window_length() -> None:
    """gpt-oss's sliding layers attend over 128 keys: their prefill attention runs at the kernel's speed for a
    128-token sequence, far below the full layers' speed for the whole prompt."""
    from tools.core.efficiency import attention_length_scale

    full = parse_plan(plan("gpt-oss-120b", "h200", 1, b=1, i=8192))
    model = CostModel(full, Layout(full), efficiency_for("h200"), False)
    assert model.prefill_attention_scale == (attention_length_scale(8192, 64), attention_length_scale(128, 64))
    assert model.prefill_attention_scale[1] < model.prefill_attention_scale[0] / 5


def _dsv3(engine: str, input_len: int) -> dict:
    return {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8},
            "options": {"allow_expert_tp": True}, "engine": engine,
            "workload": {"input_len": input_len, "output_len": 2, "batch_size": 1}}


def test_eager_prefill_is_host_bound_for_a_short_prompt() -> None:
    """SGLang PR #12160 logs an eager DeepSeek-V3 prefill of one new token at 82.6 ms per forward (23.1 ms under a
    CUDA graph); the sglang profile's per-kernel host time reproduces it, plus the engine's per-pass step cost.
    vLLM replays a captured graph for a pass this small and stays GPU-bound, decode runs as a graph under both, and
    a long prompt's kernels outlast their launches, so the floor leaves it alone."""
    eager = estimate_performance(plan=_dsv3("sglang", 1))
    compiled = estimate_performance(plan=_dsv3("vllm", 1))
    step = efficiency_for("h200", engine="sglang")["step_overhead_ms"]
    assert eager.prefill_latency_ms - step == pytest.approx(82.6, rel=0.05)
    assert compiled.prefill_latency_ms < 25
    graphed = estimate_performance(plan=_dsv3("sglang", 1), efficiency={"defaults": {"prefill_host_us_per_kernel": 0}})
    assert eager.decode_latency_ms_per_token == pytest.approx(graphed.decode_latency_ms_per_token)
    long_eager = estimate_performance(plan=_dsv3("sglang", 16384)).prefill_latency_ms
    long_free = estimate_performance(plan=_dsv3("sglang", 16384),
                                     efficiency={"defaults": {"prefill_host_us_per_kernel": 0}}).prefill_latency_ms
    assert long_eager == pytest.approx(long_free)
    eager = {"sglang", "trtllm", "vllm"}  # Python launches each op; TensorRT-LLM and vLLM borrow SGLang's figure
    assert all(efficiency_for("h200", engine=e)["prefill_host_us_per_kernel"] > 0 for e in eager)
    assert all(efficiency_for("h200", engine=e)["prefill_host_us_per_kernel"] == 0
               for e in ENGINE_IDS if e not in eager)


def test_vllm_launches_eagerly_only_above_its_graph_capture_size() -> None:
    """vLLM replays a captured CUDA graph for a pass of at most min(2 x max_num_seqs, 512) tokens and runs larger
    ones through the compiled model without a graph: a 512-token Llama-3.1-70B TP8 prompt on B200 pays no host
    time, a 1k one is host-bound near its launches (InferenceMAX's vLLM TTFT is flat in TP there); a benchmark
    that captures larger graphs (``prefill_graph_max_tokens``) or none moves the line."""
    def prefill(i: int, graph_max: int | None = None) -> PhaseDetail:
        eff = None if graph_max is None else {"defaults": {"prefill_graph_max_tokens": graph_max}}
        return estimate_performance(plan=plan("llama-3.1-70b", "b200", 8, i=i, engine="vllm", tp=8),
                                    efficiency=eff).prefill

    assert efficiency_for("b200", engine="vllm")["prefill_graph_max_tokens"] == 512
    graphed, eager = prefill(512), prefill(513)
    assert graphed.host_launch_ms == graphed.host_wait_ms == 0
    assert eager.host_wait_ms > 0 and eager.latency_ms > 1.5 * graphed.latency_ms
    assert eager.latency_ms - eager.step_overhead_ms == pytest.approx(eager.host_launch_ms)
    assert prefill(1024, graph_max=2048).host_launch_ms == 0
    assert prefill(16, graph_max=0).host_wait_ms > 0
    assert estimate_performance(plan=plan("llama-3.1-70b", "b200", 8, i=513, engine="sglang", tp=8)
                                ).prefill.host_launch_ms == pytest.approx(eager.host_launch_ms)


def test_hip_launches_of_an_eager_pass_cost_more_host_time_than_cuda_ones() -> None:
    """The engines' per-launch host time was timed on CUDA; HIP's runtime scales it (``host_launch_scale``, 1.5 on
    MI300X and MI325X, the catalog's ROCm-to-CUDA launch-cost ratio), so an eager 1k-token Llama-3.1-70B prefill at
    TP8 is host-bound at the scaled floor there, a CUDA GPU keeps the engine's figure, and a graphed pass or a long
    GPU-bound prompt is left alone."""
    def prefill(gpu: str, i: int, graph_max: int | None = None) -> PhaseDetail:
        eff = None if graph_max is None else {"defaults": {"prefill_graph_max_tokens": graph_max}}
        return estimate_performance(plan=plan("llama-3.1-70b", gpu, 8, i=i, engine="vllm", tp=8),
                                    efficiency=eff).prefill

    assert efficiency_for("h200", engine="vllm")["host_launch_scale"] == 1.0
    for gpu in ("mi300x", "mi325x"):
        assert efficiency_for(gpu, engine="vllm")["host_launch_scale"] == 1.5
        rocm, cuda = prefill(gpu, 1024), prefill("h200", 1024)
        assert rocm.host_launch_ms == pytest.approx(1.5 * cuda.host_launch_ms)
        assert rocm.latency_ms - rocm.step_overhead_ms == pytest.approx(rocm.host_launch_ms)
        assert prefill(gpu, 1024, graph_max=2048).host_launch_ms == 0
        assert prefill(gpu, 16384).host_wait_ms == 0


def test_tensorrt_llm_engines_from_c_plus_plus_are_not_host_bound() -> None:
    """TensorRT-LLM v0.9.0 (C++ runtime) times a 128-token Llama-2-7B first token at 6.3 ms on one H100: the
    trtllm-cpp profile prices it GPU-bound near that; the PyTorch backend's eager launches would not fit in it."""
    p = plan("llama-2-7b", "h100-sxm", 1, i=128, o=1, tp=1)
    cpp = estimate_performance(plan={**p, "engine": "trtllm-cpp"})
    assert cpp.prefill.host_wait_ms == 0 and cpp.prefill_latency_ms == pytest.approx(6.3, rel=0.3)
    assert estimate_performance(plan={**p, "engine": "trtllm"}).prefill_latency_ms > 6.3 * 1.5


def test_block_fp8_gemms_with_few_rows_run_at_their_published_floor() -> None:
    """SGLang's blockwise-fp8 GEMM timings on Hopper (PRs #5207/#5820) are flat at 10-34 us per GEMM up to ~128
    rows, where HBM speed gives 1-8 us: DeepSeek-V3's small-batch decode on H200 pays that floor on its dense
    projections (fused q_a/kv_a, q_b, o_proj, shared expert), a smaller share of a large batch's step, per-tensor
    fp8 Llama none, and GPUs with no published timing keep the roofline."""
    def step(model: str, gpu: str, batch: int, **extra: object) -> float:
        p = {"model": model, "hardware": {"gpu": gpu, "num_gpus": 8}, "parallel": {"tp": 8}, "dtype": "fp8",
             "workload": {"input_len": 1024, "output_len": 256, "batch_size": batch}, **extra}
        return estimate_performance(plan=p).decode_latency_ms_per_token

    def without_floor(model: str, gpu: str, batch: int, **extra: object) -> float:
        p = {"model": model, "hardware": {"gpu": gpu, "num_gpus": 8}, "parallel": {"tp": 8}, "dtype": "fp8",
             "workload": {"input_len": 1024, "output_len": 256, "batch_size": batch}, **extra}
        return estimate_performance(plan=p, efficiency={"defaults": {"block_fp8_gemm_floor_us": 0},
                                                        "accelerators": {gpu: {"block_fp8_gemm_floor_us": 0}}}
                                    ).decode_latency_ms_per_token

    moe = {"options": {"allow_expert_tp": True}}
    floor_cost = step("deepseek-v3", "h200", 4, **moe) - without_floor("deepseek-v3", "h200", 4, **moe)
    assert 58 * 4 * 9e-3 <= floor_cost <= 61 * 6 * 40e-3  # at least 9 us on four GEMMs a layer, at most 40 on six
    # flat to ~128 rows and only growing past them, so it bounds every batch: no drop where a cut-off would sit
    assert step("deepseek-v3", "h200", 129, **moe) >= step("deepseek-v3", "h200", 128, **moe)
    big, small = step("deepseek-v3", "h200", 512, **moe), step("deepseek-v3", "h200", 4, **moe)
    assert (big - without_floor("deepseek-v3", "h200", 512, **moe)) / big < floor_cost / small
    assert step("llama-3.1-70b", "h200", 4) == pytest.approx(without_floor("llama-3.1-70b", "h200", 4))
    assert step("deepseek-v3", "b200", 4, **moe) == pytest.approx(without_floor("deepseek-v3", "b200", 4, **moe))
    # AITER's CK table on MI300X: five block-fp8 GEMMs of a MoE layer sum to ~57 us at M=16, bytes to ~12 us
    mi_cost = step("deepseek-v3", "mi300x", 4, **moe) - without_floor("deepseek-v3", "mi300x", 4, **moe)
    assert 58 * 25e-3 <= mi_cost <= 61 * 50e-3


def test_eager_launches_bound_the_whole_pass_not_each_node() -> None:
    """Launches are asynchronous: the host runs ahead while long GEMMs execute, so a pass waits for its host only
    when all its launches take longer than all its GPU work.  A 4k-token Llama-3.1-70B prefill on SGLang is
    GPU-bound and prices as if the host were free (a per-node floor would charge every short norm its launch
    time); the one-token DeepSeek-V3 pass of ``test_eager_prefill_is_host_bound_for_a_short_prompt`` is not."""
    p = plan("llama-3.1-70b", "h200", 8, i=4096, engine="sglang", tp=8)
    free = {"defaults": {"prefill_host_us_per_kernel": 0}}
    eager = estimate_performance(plan=p)
    assert eager.prefill.host_launch_ms > 0 and eager.prefill.host_wait_ms == 0
    assert eager.prefill_latency_ms == pytest.approx(estimate_performance(plan=p, efficiency=free).prefill_latency_ms)
    short = estimate_performance(plan=_dsv3("sglang", 1)).prefill
    assert short.host_wait_ms > 0
    assert short.latency_ms - short.step_overhead_ms == pytest.approx(short.host_launch_ms)
    # each pipeline stage has its own host, which enqueues while the earlier stages run: a host-bound PP2 pass
    # takes more than one stage's launches but less than both stages' one after the other
    piped = estimate_performance(plan=plan("llama-3.1-70b", "h200", 8, i=100, engine="sglang", tp=4, pp=2)).prefill
    one_stage = piped.host_launch_ms / 2
    assert one_stage < piped.latency_ms - piped.step_overhead_ms < piped.host_launch_ms


def test_an_eager_prefill_in_a_serving_step_hides_the_decode_it_carries() -> None:
    """Under continuous batching a step that carries a prompt runs eagerly: it takes the longer of its launches and
    its GPU work (decode plus the prompt's), not their sum, so an eager engine's TPOT under load rises by at most
    the share of steps with a prompt times the pass's host time."""
    p = plan("llama-3.1-8b", "h100-sxm", 1, b=64, i=256, o=256, engine="sglang", tp=1)
    eager = estimate_performance(plan=p)
    free = estimate_performance(plan=p, efficiency={"defaults": {"prefill_host_us_per_kernel": 0}})
    host = eager.prefill.host_launch_ms
    assert eager.steady_state_estimate.tpot_ms > free.steady_state_estimate.tpot_ms
    assert eager.steady_state_estimate.tpot_ms <= \
        free.steady_state_estimate.tpot_ms + min(1.0, 64 / 256) * host * (1 + 1e-9)


def test_sharded_block_fp8_moe_and_mla_decode_keep_their_published_floors() -> None:
    """SGLang PR #11816 times Triton's fused MoE over DeepSeek-R1's TP8 expert slices on B200 at 52.65 us for one
    token and 175.80 us for 24, where HBM speed would give 7-117 us; FlashInfer's MLA decode kernel takes 12.3 us at
    batch 1 (vLLM PR #41778).  The B200 estimate prices both within 10 %; H200, with no such figure, is left alone,
    and a DeepEP all-to-all plan (experts whole on their rank) takes another kernel."""
    free = {"defaults": {"fused_moe_floor_us": 0}, "accelerators": {"b200": {"fused_moe_floor_us": 0}}}

    def node_us(gpu: str, batch: int, name: str, eff: dict | None = None, **extra: object) -> float:
        p = {"model": "deepseek-v3", "hardware": {"gpu": gpu, "num_gpus": 8}, "dtype": "fp8", "engine": "sglang",
             "workload": {"input_len": 1024, "output_len": 128, "batch_size": batch}, "parallel": {"tp": 8},
             "options": {"allow_expert_tp": True}, **extra}
        (node,) = [c for c in estimate_performance(plan=p, efficiency=eff).decode.critical_path if c.name == name]
        return node.time_ms / node.count * 1e3

    kernel_us = efficiency_for("b200", engine="sglang")["decode_kernel_overhead_us"]
    assert node_us("b200", 1, "experts") == pytest.approx(52.65 + 3 * kernel_us, rel=0.10)
    assert node_us("b200", 24, "experts") == pytest.approx(175.80 + 3 * kernel_us, rel=0.10)
    assert all(node_us("b200", b, "experts") > node_us("b200", b, "experts", free) for b in (1, 4, 32))
    assert efficiency_for("h200")["fused_moe_floor_us"] == efficiency_for("h200")["mla_decode_floor_us"] == 0
    adp = {"parallel": {"dp": 8, "ep": 8}, "options": {"allow_attention_dp": True}}
    assert node_us("b200", 8, "experts", **adp) == pytest.approx(node_us("b200", 8, "experts", free, **adp))
    assert efficiency_for("b200")["mla_decode_floor_us"] == pytest.approx(12.3)
    no_mla_floor = {"defaults": {"mla_decode_floor_us": 0}, "accelerators": {"b200": {"mla_decode_floor_us": 0}}}
    # the MLA kernel's few latent bytes would take 1-2 us: the floor adds the rest of its 12.3 us, once per layer
    assert 9 < node_us("b200", 1, "attention") - node_us("b200", 1, "attention", no_mla_floor) < 12.3


def test_fp4_experts_stream_at_their_kernels_published_rate_where_they_are_upcast() -> None:
    """Hopper has no FP4 tensor cores: Triton's bf16 x MXFP4 MoE kernel (what vLLM runs gpt-oss with) moved 2290
    GB/s on H200 (triton PR #9248), 0.48 of HBM.  gpt-oss-120b's batch-4 decode on H200 streams its hit experts at
    that rate; on B200 (native FP4) and for bf16 experts the key changes nothing."""
    def tpot(model: str, gpu: str, key: float | None, **extra: object) -> float:
        p = {"model": model, "hardware": {"gpu": gpu, "num_gpus": 1}, "parallel": {"tp": 1},
             "workload": {"input_len": 1024, "output_len": 256, "batch_size": 4}, **extra}
        eff = None if key is None else {"defaults": {"fp4_upcast_expert_memory_efficiency": key},
                                        "accelerators": {gpu: {"fp4_upcast_expert_memory_efficiency": key}}}
        return estimate_performance(plan=p, efficiency=eff).decode_latency_ms_per_token

    assert efficiency_for("h200")["fp4_upcast_expert_memory_efficiency"] == pytest.approx(0.48)
    slow, fast = tpot("gpt-oss-120b", "h200", None), tpot("gpt-oss-120b", "h200", 0.0)
    # 36 layers x ~16 experts hit x 3 x 2880^2 MXFP4 weights (~0.53 B each) at 0.48 instead of 0.78 of 4.8 TB/s
    streamed = 36 * 16 * 3 * 2880 ** 2 * 0.53
    assert slow - fast == pytest.approx(streamed / 4.8e12 * (1 / 0.48 - 1 / 0.78) * 1e3, rel=0.35)
    assert tpot("gpt-oss-120b", "b200", None) == pytest.approx(tpot("gpt-oss-120b", "b200", 0.0))
    assert tpot("mixtral-8x7b", "h200", None) == pytest.approx(tpot("mixtral-8x7b", "h200", 0.0))


def test_upcast_fp4_expert_prefill_matches_gpustacks_saturated_hopper_runs() -> None:
    """GPUStack ran gpt-oss-120b on 2x H100 SXM (vLLM v0.10.2, -tp 2) with every request sent at once: 100
    requests of 32,000 prompt tokens took 98.86 s, 500 of 2,000 took 30.75 s, so one prompt's prefill costs about
    989 and 62 ms.  With the Hopper figure for upcast MXFP4 experts pdag's prefill is within 10 % of both; with
    the generic expert efficiency it was 1.5-1.7x too fast.  Native FP4 (B200) and bf16 experts are unaffected."""
    def prefill(prompt: int, gpu: str = "h100-sxm", key: float | None = None, model: str = "gpt-oss-120b") -> float:
        p = {"model": model, "hardware": {"gpu": gpu, "num_gpus": 2}, "parallel": {"tp": 2},
             "workload": {"input_len": prompt, "output_len": 100, "batch_size": 1}, "engine": "vllm",
             "engine_options": {"max_batched_tokens": 8192}, "options": {"allow_expert_tp": True}}
        eff = None if key is None else {"accelerators": {gpu: {"fp4_upcast_expert_compute_efficiency": key}}}
        return estimate_performance(plan=p, efficiency=eff).prefill_latency_ms

    e = efficiency_for("h100-sxm")  # the full-width figure, at TP2's padded 1,472-wide slices the 0.175 set here
    half = e["fp4_upcast_expert_half_speed_width"]
    assert e["fp4_upcast_expert_compute_efficiency"] * 1472 / (1472 + half) == pytest.approx(0.175, rel=0.01)
    for prompt, measured_ms in ((32_000, 98_860 / 100), (2_000, 30_750 / 500)):
        assert prefill(prompt) == pytest.approx(measured_ms, rel=0.10)
        assert prefill(prompt, key=0.0) < measured_ms / 1.4
    assert prefill(8_000, "b200") == pytest.approx(prefill(8_000, "b200", key=0.0))
    assert prefill(8_000, model="mixtral-8x7b") == pytest.approx(prefill(8_000, model="mixtral-8x7b", key=0.0))


@pytest.mark.parametrize("gpu", ["mi300x", "mi325x"])
def test_gfx942_runs_mxfp4_experts_through_hoppers_upcast_kernel(gpu: str) -> None:
    """vLLM picks Triton's bf16 x MXFP4 matmul_ogs on ROCm short of gfx950 with AITER: MI300X/MI325X price gpt-oss's
    experts with that kernel's figures (Hopper's), not with AITER's bf16 fused MoE, which those runs do not use."""
    def model(g: str) -> CostModel:
        p = parse_plan({**plan("gpt-oss-120b", g, 1), "weights": "mxfp4", "engine": "vllm"})
        return CostModel(p, Layout(p), efficiency_for(g, None, "vllm"), False)

    amd, hopper = model(gpu), model("h200")
    assert (amd.expert_compute_eff, amd.expert_half_width, amd.expert_mem_eff) == \
        (hopper.expert_compute_eff, hopper.expert_half_width, hopper.expert_mem_eff)
    assert amd.expert_compute_eff != amd.eff["compute_efficiency_experts"]


def test_upcast_mxfp4_expert_slices_slow_down_like_the_published_kernel() -> None:
    """NVIDIA's AIConfigurator times vLLM 0.19's gpt-oss MoE module on H200 (8,192 tokens, balanced routing) at 0.504
    of the bf16 peak with whole experts (TP1) and 0.412 with 1,440-wide slices (TP2): a sliced expert runs at 0.82
    of the whole one's speed per FLOP.  pdag's upcast MXFP4 experts follow within 5 %; before, one width-independent
    figure priced every slice at the same speed, so TP8's 360-wide slices came out far too fast."""
    def speed(tp: int) -> float:
        p = parse_plan(plan("gpt-oss-120b", "h200", tp, options={"allow_expert_tp": True}, tp=tp))
        m = CostModel(p, Layout(p), efficiency_for("h200", engine="vllm"), False)
        attrs = {"type": "ExpertNode", "phase": "prefill", "devices": list(range(tp)), "experts": list(range(128))}
        node = m.expert(8192, attrs, {"of": tp}, small=False)
        return 2 * 8192 * 4 * 2880 * 3 * (2880 / tp) / node.seconds  # unpadded FLOPs, as the table counts them

    assert speed(2) / speed(1) == pytest.approx(0.412 / 0.504, rel=0.05)
    assert speed(8) / speed(1) < 0.6


def test_native_mxfp4_expert_prefill_matches_lmsys_blackwell_chart() -> None:
    """LMSYS's gpt-oss blog (late-August 2025 SGLang, bench_one_batch_server, batch 32, --tp 4 on B200) charts about
    160,600 and 163,300 prompt tokens/s at 1k and 8k prompts.  With the Blackwell figure for native MXFP4 experts
    pdag's batch-32 prefill is within 10 % of both; with the generic expert efficiency it was about twice as fast.
    Hopper's upcast experts and bf16 experts are priced by other keys and do not move."""
    def tps(prompt: int, gpu: str = "b200", key: float | None = None, model: str = "gpt-oss-120b") -> float:
        p = {"model": model, "hardware": {"gpu": gpu, "num_gpus": 4}, "parallel": {"tp": 4},
             "workload": {"input_len": prompt, "output_len": 512, "batch_size": 32}, "engine": "sglang",
             "options": {"allow_expert_tp": True}}
        eff = None if key is None else {"accelerators": {gpu: {"compute_efficiency_experts_mxfp4": key}}}
        return 32 * prompt / estimate_performance(plan=p, efficiency=eff).prefill_latency_ms * 1e3

    assert efficiency_for("b200")["compute_efficiency_experts_mxfp4"] == pytest.approx(0.11)
    for prompt, published in ((1024, 160_600), (8192, 163_300)):
        assert tps(prompt) == pytest.approx(published, rel=0.10)
        assert tps(prompt, key=0.0) > 1.6 * published
    assert tps(8192, "h100-sxm") == pytest.approx(tps(8192, "h100-sxm", key=0.5))
    assert tps(8192, model="mixtral-8x7b") == pytest.approx(tps(8192, model="mixtral-8x7b", key=0.5))


@pytest.mark.slow  # tens of seconds (the serving simulator prices every point); .ci/run runs it
def test_vllm_fused_moe_streams_block_fp8_experts_at_its_published_rate() -> None:
    """vLLM PR #13932 times vLLM's fused-MoE kernel on DeepSeek-V3's block-fp8 experts at TP8 on H100: 1732 us per
    layer at 128 tokens (every GPU's 1.41 GB of expert slices).  The vllm profile prices that layer within 10 %;
    SGLang, with no such figure, keeps the catalog rate; DeepEP all-to-all plans (attention-DP + EP) take
    another kernel path and are left alone."""
    def expert_ms(engine: str, **extra: object) -> float:
        p = {"model": "deepseek-v3", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "dtype": "fp8",
             "engine": engine, "workload": {"input_len": 1024, "output_len": 128, "batch_size": 128},
             "parallel": {"tp": 8}, "options": {"allow_expert_tp": True}, **extra}
        e = estimate_performance(plan=p)
        (ex,) = [c for c in e.decode.critical_path if c.name == "experts"]
        return ex.time_ms / ex.count

    assert expert_ms("vllm") == pytest.approx(1.732, rel=0.10)
    assert expert_ms("sglang") < expert_ms("vllm") / 2
    adp = {"parallel": {"dp": 8, "ep": 8}, "options": {"allow_attention_dp": True}}
    assert expert_ms("vllm", **adp) == pytest.approx(expert_ms("sglang", **adp), rel=0.05)


@pytest.mark.parametrize(("gpu", "extra_us"), [("a100-80gb", 7.5), ("h200", 2.5), ("l40s", 3.0)])
def test_weight_only_gemms_pay_their_dequantization_per_gemm_in_decode(gpu: str, extra_us: float) -> None:
    """AWQ/GPTQ 4-bit weights multiplied in 16-bit: each dense GEMM of a decode step costs AIConfigurator's
    measured weight-only floor over bf16's (7.5 / 2.5 / 3 us), four per layer (qkv, o, gate-up, down); prefill, many
    rows per GEMM, is left to the roofline, and 16-bit weights pay nothing."""
    p = plan("qwen2.5-7b", gpu, 1, i=1024, o=256, tp=1)
    p["weights"] = "awq-int4"
    layers = parse_plan(p).spec.num_layers
    cat = efficiency_for(load_accelerator(gpu).id)
    assert cat["weight_only_gemv_extra_us"] == extra_us
    priced = estimate_performance(plan=p)
    free = estimate_performance(plan=p, efficiency={"accelerators": {gpu: {"weight_only_gemv_extra_us": 0.0}}})
    added = priced.decode_latency_ms_per_token - free.decode_latency_ms_per_token
    assert added == pytest.approx(4 * layers * extra_us * 1e-3, rel=0.02)
    assert priced.prefill_latency_ms == pytest.approx(free.prefill_latency_ms, rel=1e-9)
    bf16 = {k: v for k, v in p.items() if k != "weights"}
    assert estimate_performance(plan=bf16).decode_latency_ms_per_token == pytest.approx(
        estimate_performance(plan=bf16, efficiency={"accelerators": {gpu: {"weight_only_gemv_extra_us": 0.0}}})
        .decode_latency_ms_per_token, rel=1e-9)


def _attention_ms(est: object) -> float:
    return sum(c.time_ms for c in est.prefill.critical_path if c.name == "attention")  # type: ignore[attr-defined]


@pytest.mark.parametrize("gpu", ["h200", "gb200"])
def test_fp8_attention_math_runs_a_long_prefills_attention_at_the_fp8_peak(gpu: str) -> None:
    """LMSYS's GB300 long-context post times an e4m3 Q/K/V FMHA at 277 ms for one 128K-token DeepSeek layer on
    GB200, faster than 16-bit math allows: with ``attention_fp8_math`` and an FP8 cache, prefill attention runs at
    the FP8 peak (twice the 16-bit one on Hopper and Blackwell); a 16-bit cache, decode and GPUs without FP8 tensor
    cores are unchanged."""
    p = plan("qwen3-30b-a3b", gpu, 1, i=65536, o=16)
    p["kv_dtype"] = "fp8"
    on = {"accelerators": {gpu: {"attention_fp8_math": 1}}}
    base, fast = estimate_performance(plan=p), estimate_performance(plan=p, efficiency=on)
    acc = load_accelerator(gpu)
    ratio = acc.peak_flops("fp8") / acc.peak_flops("bf16")
    assert ratio == pytest.approx(2.0, rel=0.05)
    # the math halves; the kernel's loads and launch do not (roofline blend)
    assert 0.85 * ratio < _attention_ms(base) / _attention_ms(fast) <= ratio
    assert fast.decode_latency_ms_per_token == pytest.approx(base.decode_latency_ms_per_token, rel=1e-9)
    bf16_cache = {**p, "kv_dtype": "bf16"}
    assert estimate_performance(plan=bf16_cache, efficiency=on).prefill_latency_ms == pytest.approx(
        estimate_performance(plan=bf16_cache).prefill_latency_ms, rel=1e-9)


def test_fp8_attention_math_needs_fp8_tensor_cores() -> None:
    p = plan("llama-3.1-8b", "a100-80gb", 1, i=32768, o=16)
    p["kv_dtype"] = "fp8"
    on = {"accelerators": {"a100-80gb": {"attention_fp8_math": 1}}}
    assert estimate_performance(plan=p, efficiency=on).prefill_latency_ms == pytest.approx(
        estimate_performance(plan=p).prefill_latency_ms, rel=1e-9)


def test_vllm_block_fp8_kernel_rate_applies_to_tp_sliced_experts_only() -> None:
    """vLLM's fused-MoE figure for block-fp8 experts (PR #13932) was timed on experts sliced over TP ranks; an
    outside agent found DeepSeek-R1 at TP 8 x EP 8 (whole experts) priced at it, 2.3x SGLang's same layout."""
    def tpot(engine: str, parallel: dict[str, int], options: dict[str, bool] | None = None) -> float:
        plan = {"model": "deepseek-r1", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": parallel,
                "workload": {"input_len": 2048, "output_len": 1024, "concurrency": 32}, "engine": engine}
        return estimate_performance({**plan, "options": options or {}}).tpot_ms

    whole = tpot("vllm", {"tp": 8, "ep": 8}) / tpot("sglang", {"tp": 8, "ep": 8})
    sliced = tpot("vllm", {"tp": 8}, {"allow_expert_tp": True}) / tpot("sglang", {"tp": 8}, {"allow_expert_tp": True})
    assert 0.85 < whole < 1.15 and sliced > 1.5, (whole, sliced)
