"""Estimator: contract fields, honesty properties and hand-checked node costs."""

from __future__ import annotations

import math

import pytest

from tools import estimate_performance
from tools.core.build import build_dag
from tools.core.efficiency import efficiency_for
from tools.core.errors import PdagInputError
from tools.core.layout import Layout
from tools.core.plan import parse_plan
from tools.estimate.costs import CostModel, expert_load


def P(model: str, gpu: str, n: int, b: int = 1, i: int = 2048, o: int = 128, dtype: str = "bf16",
      kv_dtype: str | None = None, **par: int) -> dict:
    plan = {"model": model, "hardware": {"gpu": gpu, "num_gpus": n}, "parallel": par,
            "workload": {"input_len": i, "output_len": o, "batch_size": b}, "dtype": dtype}
    return plan | ({"kv_dtype": kv_dtype} if kv_dtype else {})


def est(**kw: object):
    return estimate_performance(plan=P(**kw))  # type: ignore[arg-type]


def test_contract_fields() -> None:
    e = estimate_performance(plan=P("llama-3.1-70b", "h100-sxm", 8, tp=8)).model_dump()
    for key in ("prefill_latency_ms", "decode_latency_ms_per_token", "e2e_latency_ms", "gpus_used"):
        assert e[key] > 0
    assert e["throughput"]["output_tokens_per_s"] > 0
    assert e["kv_cache"]["bytes_total"] > 0 and e["kv_cache"]["bytes_per_gpu_max"] > 0
    assert {"fits", "max_gpu_bytes", "capacity_bytes"} <= set(e["memory"])
    assert e["gpus_used"] == 8
    assert e["e2e_latency_ms"] == pytest.approx(e["prefill_latency_ms"] + 128 * e["decode_latency_ms_per_token"])
    assert 1 <= len(e["critical_path"]["prefill"]) <= 8 and 1 <= len(e["critical_path"]["decode"]) <= 8
    assert e["assumptions"] and e["provenance"] and set(e["bottleneck"]) == {"prefill", "decode"}


def test_accepts_dag_and_rejects_bad_input() -> None:
    plan = P("llama-3.1-8b", "h100-sxm", 1)
    dag = build_dag(plan).dag
    assert estimate_performance(dag=dag).prefill_latency_ms == pytest.approx(
        estimate_performance(plan=plan).prefill_latency_ms)
    with pytest.raises(PdagInputError):
        estimate_performance()
    with pytest.raises(PdagInputError):
        estimate_performance(plan={"model": "nope", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}})
    with pytest.raises(PdagInputError):
        estimate_performance(dag={"nodes": [], "edges": []})


@pytest.mark.parametrize("model,gpu,tp,ep", [("llama-3.1-8b", "h100-sxm", 1, 1), ("mixtral-8x7b", "h100-sxm", 2, 2),
                                             ("deepseek-v3", "h200", 8, 8)])
def test_dp_never_changes_latency_and_scales_throughput(model: str, gpu: str, tp: int, ep: int) -> None:
    dtype = "fp8" if model == "deepseek-v3" else "bf16"
    one = est(model=model, gpu=gpu, n=tp, b=4, dtype=dtype, tp=tp, ep=ep)
    three = est(model=model, gpu=gpu, n=3 * tp, b=4, dtype=dtype, tp=tp, ep=ep, dp=3)
    assert three.prefill_latency_ms == pytest.approx(one.prefill_latency_ms)
    assert three.decode_latency_ms_per_token == pytest.approx(one.decode_latency_ms_per_token)
    assert three.static_batch_throughput.output_tokens_per_s == pytest.approx(
        3 * one.static_batch_throughput.output_tokens_per_s)
    assert three.gpus_used == 3 * one.gpus_used


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-7b", "llama-3.1-70b"])
def test_tp_speeds_up_prefill_and_decode_sublinearly(model: str) -> None:
    t = {tp: est(model=model, gpu="h100-sxm", n=tp, i=4096, tp=tp) for tp in (1, 2, 4, 8) if
         not (model == "llama-3.1-70b" and tp == 1)}
    tps = sorted(t)
    for a, b in zip(tps, tps[1:], strict=False):
        assert t[b].prefill_latency_ms < t[a].prefill_latency_ms
        # decode gains less than the TP ratio
        assert t[a].decode_latency_ms_per_token / t[b].decode_latency_ms_per_token < b / a


def test_tp_across_nodes_can_reverse_decode() -> None:
    inside = est(model="llama-3.1-8b", gpu="h100-sxm", n=8, tp=8)
    across = est(model="llama-3.1-8b", gpu="h100-sxm", n=16, tp=16)
    assert across.decode_latency_ms_per_token > inside.decode_latency_ms_per_token


@pytest.mark.parametrize("model,tp", [("llama-3.1-70b", 4), ("qwen2.5-72b", 4), ("mixtral-8x7b", 2)])
def test_pp_does_not_reduce_batch1_decode(model: str, tp: int) -> None:
    base = est(model=model, gpu="h100-sxm", n=tp, tp=tp)
    pp = est(model=model, gpu="h100-sxm", n=2 * tp, tp=tp, pp=2)
    assert pp.decode_latency_ms_per_token >= base.decode_latency_ms_per_token * 0.999
    assert pp.prefill_latency_ms >= base.prefill_latency_ms * 0.999


@pytest.mark.parametrize("model", ["llama-3.1-8b", "mistral-7b"])
def test_prefill_superlinear_in_long_prompts(model: str) -> None:
    a = est(model=model, gpu="h100-sxm", n=1, i=16384)
    b = est(model=model, gpu="h100-sxm", n=1, i=65536)
    if parse_plan(P(model, "h100-sxm", 1)).spec.sliding_window:
        assert b.prefill_latency_ms > 3.5 * a.prefill_latency_ms
    else:
        assert b.prefill_latency_ms > 4.5 * a.prefill_latency_ms


def test_decode_grows_with_context() -> None:
    a = est(model="llama-3.1-8b", gpu="h100-sxm", n=1, b=16, i=1024)
    b = est(model="llama-3.1-8b", gpu="h100-sxm", n=1, b=16, i=16384)
    assert b.decode_latency_ms_per_token > a.decode_latency_ms_per_token


def test_kv_bytes_follow_formula() -> None:
    g = est(model="llama-3.1-70b", gpu="h100-sxm", n=8, b=2, i=1000, o=24, tp=8)
    assert g.kv_cache.bytes_per_token == 80 * 2 * 8 * 128 * 2
    assert g.kv_cache.bytes_total == pytest.approx(2 * 1024 * 327_680)
    assert g.kv_cache.bytes_per_gpu_max == pytest.approx(2 * 1024 * 327_680 / 8)
    m = est(model="deepseek-v3", gpu="h200", n=8, b=2, i=1000, o=24, dtype="fp8", tp=8, ep=8)
    assert m.kv_cache.bytes_per_token == 61 * (512 + 64) * 2  # fp8 weights, 16-bit cache (the engines' default)
    m = est(model="deepseek-v3", gpu="h200", n=8, b=2, i=1000, o=24, dtype="fp8", kv_dtype="fp8", tp=8, ep=8)
    assert m.kv_cache.bytes_per_token == 61 * (512 + 64)
    assert m.kv_cache.bytes_per_gpu_max == pytest.approx(2 * 1024 * 61 * 576)  # latent whole on each TP rank


def test_ep_time_not_below_balanced() -> None:
    for model, gpu, n, ep, dt in (("mixtral-8x7b", "h100-sxm", 8, 8, "bf16"), ("deepseek-v3", "h200", 8, 8, "fp8"),
                                  ("qwen3-30b-a3b", "h100-sxm", 4, 4, "bf16")):
        plan = P(model, gpu, n, b=8, dtype=dt, tp=n, ep=ep)
        real = estimate_performance(plan=plan)
        even = estimate_performance(plan=plan, balanced_experts=True)
        assert real.prefill_latency_ms >= even.prefill_latency_ms
        assert real.decode_latency_ms_per_token >= even.decode_latency_ms_per_token
    mean, worst, hit_mean, hit_worst = expert_load(1000, 8, 256, 32, 8)
    assert mean == pytest.approx(1000 * 8 * 32 / 256) and worst > mean and hit_worst >= hit_mean


def test_overlap_is_switchable() -> None:
    # engines never overlap the TP all-reduce: a dense TP plan is unchanged by the switch
    plan = P("llama-3.1-70b", "h100-sxm", 8, b=8, tp=8)
    on = estimate_performance(plan=plan, overlap=True)
    off = estimate_performance(plan=plan, overlap=False)
    assert on.prefill_latency_ms == off.prefill_latency_ms
    assert any("overlap_comm on" in a for a in on.assumptions)
    assert any("overlap_comm off" in a for a in off.assumptions)
    # SGLang's two-batch overlap hides part of the EP all-to-all of an attention-DP plan
    moe = {**P("deepseek-v3", "h200", 16, b=256, i=1024, ep=16, attn_dp=16), "engine": "sglang",
           "options": {"allow_attention_dp": True}}
    on, off = estimate_performance(plan=moe, overlap=True), estimate_performance(plan=moe, overlap=False)
    assert on.decode_latency_ms_per_token < off.decode_latency_ms_per_token
    assert on.decode.communication_hidden_ms > 0 == off.decode.communication_hidden_ms


def test_not_fitting_plan_still_estimated() -> None:
    e = estimate_performance(plan={**P("deepseek-v3", "h200", 8, tp=8, ep=8), "weights": "bf16"})  # 1.3 TB
    assert not e.fits and e.warnings and e.prefill_latency_ms > 0


# ------------------------------------------------------------------ node costs by hand
def _model(plan: dict, overlap: bool = False) -> tuple[CostModel, dict[str, float]]:
    p = parse_plan(plan)
    eff = efficiency_for(p.accelerator.id)
    return CostModel(p, Layout(p), eff, overlap), eff


def test_ffn_node_cost_by_hand() -> None:
    m, e = _model(P("llama-3.1-8b", "h100-sxm", 2, i=4096, tp=2))
    attrs = {"type": "FFNNode", "phase": "prefill", "devices": [0], "meta": {"of": 2}, "layer": 0}
    c = m.cost(attrs, 1)
    tok, h, i_l = 4096, 4096, 14336 / 2
    peak = 989.5e12 * e["compute_efficiency_gemm"]
    a, b, ref = e["gemm_half_speed_n"], e["gemm_half_speed_k"], e["gemm_reference_width"]

    def speed(n: float, k: float) -> float:  # the narrow-GEMM law, relative to the reference square GEMM
        return n / (n + a) * k / (k + b) / (ref / (ref + a) * ref / (ref + b))

    gemms = 2 * tok * h * 2 * i_l / speed(2 * i_l, h) + 2 * tok * i_l * h / speed(h, i_l)
    # compute-bound: the two GEMMs at peak*eff times their shape's speed (their weight loads add in quadrature, a
    # fraction of a percent here) plus a memory-bound activation kernel and 3 launches
    act = tok * 3 * i_l * 2 / (3.35e12 * e["small_gemm_memory_efficiency"])
    assert c.seconds == pytest.approx(gemms / peak + act + 3 * e["kernel_overhead_us"] * 1e-6, rel=0.02)
    assert c.kind == "compute"


def test_decode_attention_reads_kv() -> None:
    m, e = _model(P("llama-3.1-8b", "h100-sxm", 1, b=32, i=8192, o=128))
    attrs = {"type": "AttentionNode", "phase": "decode", "devices": [0], "heads": 32, "kv_heads": 8, "layer": 0}
    c = m.cost(attrs, 32)
    ctx = 8192 + 64
    kv = 32 * ctx * 2 * 8 * 128 * 2
    assert c.bytes >= kv
    assert c.kind == "memory"
    assert c.seconds >= kv / (3.35e12 * e["memory_efficiency"])


def test_allreduce_cost_by_hand() -> None:
    m, e = _model(P("llama-3.1-70b", "h100-sxm", 8, i=4096, tp=8))
    attrs = {"type": "AllReduceNode", "phase": "prefill", "devices": list(range(8)), "role": "tp_sync"}
    c = m.cost(attrs, 1)
    size = 4096 * 8192 * 2
    bw = 450e9 * e["comm_bandwidth_efficiency"]
    floor = e["allreduce_min_us"] * 1e-6  # latency part: at least the engine's floor, added to the transfer
    ring = 2 * 7 / 8 * size / bw + max(14 * 2e-6, floor)
    two_shot = 2 * 7 / 8 * size / bw + 2 * max(2e-6, floor)  # two synchronised phases
    assert c.seconds == pytest.approx(min(ring, two_shot), rel=1e-6)
    assert c.seconds > floor + 2 * 7 / 8 * size / bw - 1e-12
    # across two nodes the slow network link is used
    m2, _ = _model(P("llama-3.1-70b", "h100-sxm", 16, i=4096, tp=16))
    c2 = m2.cost({**attrs, "devices": list(range(16))}, 1)
    assert c2.seconds > 5 * c.seconds


def test_expert_load_formula() -> None:
    mean, worst, _, _ = expert_load(4096, 2, 8, 1, 8)
    sd = math.sqrt(4096 * 2 * (1 / 8) * (7 / 8) * (6 / 7))
    assert worst == pytest.approx(mean + sd * math.sqrt(2 * math.log(8)))
    assert expert_load(10, 2, 8, 8, 1)[1] == pytest.approx(20)  # one rank holds all: no imbalance


# ---------------------------------------------------------------------------------- attention-DP
def _dsv3(parallel: dict, batch: int) -> dict:
    return {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8",
            "kv_dtype": "fp8", "parallel": parallel, "options": {"allow_attention_dp": True},
            "workload": {"input_len": 2048, "output_len": 256, "batch_size": batch}}


TP8_EP8 = {"tp": 8, "ep": 8}
ADP8_EP8 = {"tp": 1, "attn_dp": 8, "ep": 8}


def test_attention_dp_wins_at_large_batch_not_at_batch_one() -> None:
    tp, adp = estimate_performance(_dsv3(TP8_EP8, 1)), estimate_performance(_dsv3(ADP8_EP8, 1))
    assert adp.decode_latency_ms_per_token >= tp.decode_latency_ms_per_token  # one group works, seven idle
    assert adp.static_batch_throughput.decode_tokens_per_s <= tp.static_batch_throughput.decode_tokens_per_s
    big = 512
    tp, adp = estimate_performance(_dsv3(TP8_EP8, big)), estimate_performance(_dsv3(ADP8_EP8, big))
    assert adp.fits and tp.fits
    assert adp.static_batch_throughput.decode_tokens_per_s > 1.05 * tp.static_batch_throughput.decode_tokens_per_s
    assert adp.kv_cache.bytes_per_gpu_max == pytest.approx(tp.kv_cache.bytes_per_gpu_max / 8)
    assert adp.memory.max_batch_size_that_fits > tp.memory.max_batch_size_that_fits
    names = {c.name for c in adp.decode.critical_path}
    assert "tp all-reduce" not in names and "ep dispatch (all-to-all)" in names
    assert any("attention-DP" in a for a in adp.assumptions)


def test_attention_dp_groups_take_their_share_of_the_batch() -> None:
    from tools.estimate.core import node_costs

    costs = node_costs(_dsv3(ADP8_EP8, 64))
    attn = costs["r0.decode.L10.attn.g0.t0"]
    assert attn.seconds == pytest.approx(node_costs(_dsv3(ADP8_EP8, 57))["r0.decode.L10.attn.g0.t0"].seconds)
    assert attn.seconds < node_costs(_dsv3(ADP8_EP8, 65))["r0.decode.L10.attn.g0.t0"].seconds  # ceil(65/8) = 9
    # dispatch carries every group's tokens: 64 routed sequences, not 8
    assert costs["r0.decode.L10.dispatch"].bytes == pytest.approx(64 * 7168 * 2, rel=0.01)


def test_fast_estimator_matches_the_dag_estimate() -> None:
    from tools.estimate.fast import FastEstimator

    for plan in (_dsv3(ADP8_EP8, 24), _dsv3({"tp": 2, "attn_dp": 4, "ep": 8, "pp": 2}, 7),
                 P("llama-3.1-70b", "h100-sxm", 8, b=5, tp=4, pp=2), DISAGG):
        e = estimate_performance(plan)
        h = FastEstimator(parse_plan(plan)).headline(plan["workload"]["batch_size"])
        assert h.ttft_ms == pytest.approx(e.prefill_latency_ms, rel=1e-9)
        assert h.tpot_ms == pytest.approx(e.decode_latency_ms_per_token, rel=1e-9)
        assert h.throughput.output_tokens_per_s == pytest.approx(e.static_batch_throughput.output_tokens_per_s,
                                                                  rel=1e-9)


# ---------------------------------------------------------------------------------- disaggregated
DISAGG = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
          "parallel": {"tp": 8}, "phases": {"decode": {"dp": 1, "tp": 8}}, "options": {"disaggregated": True},
          "workload": {"input_len": 8192, "output_len": 256, "batch_size": 8}}


def _with(plan: dict, **changes: object) -> dict:
    out = {**plan, **{k: v for k, v in changes.items() if k not in ("input_len",)}}
    if "input_len" in changes:
        out["workload"] = {**plan["workload"], "input_len": changes["input_len"]}
    return out


def test_disaggregated_fields_and_rates() -> None:
    e = estimate_performance(DISAGG)
    assert e.pools is not None and e.kv_transfer is not None and e.pool_balance is not None
    pre, dec = e.pools["prefill"], e.pools["decode"]
    assert e.gpus_used == 16 and pre.gpus == dec.gpus == 8
    assert e.prefill_latency_ms == pytest.approx(e.prefill.latency_ms + e.kv_transfer.ms)
    rate = min(pre.requests_per_s, dec.requests_per_s)
    assert e.static_batch_throughput.output_tokens_per_s == pytest.approx(rate * 256)
    assert e.pool_balance == pytest.approx(pre.requests_per_s / dec.requests_per_s)
    assert e.balanced_prefill_per_decode == pytest.approx(dec.requests_per_s_per_replica
                                                          / pre.requests_per_s_per_replica)
    assert "inter-node" in e.kv_transfer.link  # prefill GPUs 0-7, decode 8-15: two nodes
    # logical bytes: 8192 tokens x 80 layers x 2 x 8 KV heads x 128 x 2 B
    assert e.kv_transfer.bytes_per_request == pytest.approx(8192 * 327_680)


def test_disaggregation_removes_prefill_interference_from_tpot() -> None:
    agg = estimate_performance({**DISAGG, "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "phases": {},
                                "options": {}})
    dis = estimate_performance(DISAGG)
    assert dis.decode_latency_ms_per_token <= agg.decode_latency_ms_per_token * (1 + 1e-9)
    # under continuous batching the aggregated decode also pays for the prefill passes in between
    assert dis.tpot_with_prefill_ms < 0.8 * agg.tpot_with_prefill_ms
    assert agg.tpot_with_prefill_ms == pytest.approx(agg.e2e_latency_ms / 256)


def test_kv_transfer_scales_with_input_and_kv_dtype() -> None:
    base = estimate_performance(DISAGG).kv_transfer
    longer = estimate_performance(_with(DISAGG, input_len=16384)).kv_transfer
    fp8 = estimate_performance(_with(DISAGG, kv_dtype="fp8")).kv_transfer
    assert base and longer and fp8
    assert longer.bytes_per_request == pytest.approx(2 * base.bytes_per_request)
    assert longer.ms > 1.9 * base.ms
    assert fp8.bytes_per_request == pytest.approx(base.bytes_per_request / 2)
    assert fp8.ms < 0.6 * base.ms
    # resharding TP8 -> TP4 on the decode side: each decode GPU receives twice as much
    tp4 = estimate_performance({**DISAGG, "phases": {"decode": {"dp": 1, "tp": 4}}}).kv_transfer
    assert tp4 and tp4.bytes_per_request == pytest.approx(base.bytes_per_request) and tp4.ms > 1.5 * base.ms


def test_mla_transfers_fewer_bytes_than_gqa() -> None:
    mla = estimate_performance({"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 16}, "dtype": "fp8",
                                "parallel": {"tp": 8, "ep": 8}, "phases": {"decode": {"dp": 1}},
                                "options": {"disaggregated": True},
                                "workload": {"input_len": 8192, "output_len": 256, "batch_size": 8}})
    gqa = estimate_performance({**DISAGG, "model": "llama-3.1-405b", "dtype": "fp8",
                                "hardware": {"gpu": "h200", "num_gpus": 16}})
    assert mla.kv_transfer and gqa.kv_transfer
    assert mla.kv_transfer.bytes_per_request < 0.25 * gqa.kv_transfer.bytes_per_request


def test_an_expert_tp_combine_is_named_for_the_all_reduce_it_is_priced_as() -> None:
    """Expert-TP (tokens on every expert GPU) combines with an all-reduce, not an all-to-all: the priced path says
    so, while attention-DP + EP keeps its all-to-all dispatch and combine."""
    tp = estimate_performance(_dsv3(TP8_EP8, 4))
    names = {c.name for c in tp.decode.critical_path} | {c.name for c in tp.prefill.critical_path}
    assert "ep combine (all-reduce)" in names and not any("all-to-all" in n for n in names)
    adp = estimate_performance(_dsv3(ADP8_EP8, 4))
    assert "ep combine (all-to-all)" in {c.name for c in adp.decode.critical_path}


def test_an_unfit_moe_plan_says_how_to_spread_its_experts() -> None:
    """TP 8 with ep 1 and no expert-TP opt-in puts every expert on one GPU; the estimate's warning, like MEM-FITS's
    hint, names both ways out (an agent importing `--tp 8` by hand falls into this)."""
    plan = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8}, "dtype": "fp8"}
    est = estimate_performance(plan=plan)
    (warning,) = [w for w in est.warnings if "does not fit" in w]
    assert "ep 8" in warning and "allow_expert_tp" in warning
    fixed = estimate_performance(plan={**plan, "parallel": {"tp": 8, "ep": 8}})
    assert not any("does not fit" in w for w in fixed.warnings)
