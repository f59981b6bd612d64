"""Memory model: hand calculations against tools.core.memory.memory_report."""

from __future__ import annotations

import time

import pytest

from tools.core.efficiency import _read_overlay
from tools.core.layout import Layout
from tools.core.memory import memory_report
from tools.core.plan import parse_plan


def plan(model: str, gpu: str, n: int, **kw: object) -> dict:
    par = {k: kw.pop(k) for k in ("dp", "pp", "tp", "ep", "sp") if k in kw}
    wl = {k: kw.pop(k) for k in ("input_len", "output_len", "batch_size") if k in kw}
    return {"model": model, "hardware": {"gpu": gpu, "num_gpus": n}, "parallel": par, "workload": wl, **kw}


def test_llama70b_tp8_weights_per_gpu() -> None:
    p = parse_plan(plan("llama-3.1-70b", "h100-sxm", 8, tp=8))
    spec = p.spec
    emb = spec.embedding_params() + spec.lm_head_params() + spec.final_norm_params()
    norms = spec.num_layers * spec.layer_norm_params()
    sharded = spec.param_count() - emb - norms
    vocab = spec.embedding_params() + spec.lm_head_params()  # split by vocabulary over the 8 TP ranks
    expected = (sharded / 8 + vocab / 8 + spec.final_norm_params() + norms) * 2
    r = memory_report(p)
    assert r.per_gpu[0].weights_bytes == pytest.approx(expected, rel=1e-9)
    # ~70.55e9 params, all of them 1/8 per GPU but the norms (~17.6 GB); replicated embedding and LM head
    # would add 7/8 of the two 128256x8192 matrices (~3.7 GB)
    assert 17.4e9 < r.weights_bytes < 17.9e9
    whole = memory_report(parse_plan(plan("llama-3.1-70b", "h100-sxm", 8, tp=8) | {"engine": "gpt-fast"}))
    assert whole.weights_bytes - r.weights_bytes == pytest.approx(vocab * 7 / 8 * 2, rel=1e-9)
    assert r.fits and len(r.per_gpu) == 8


def test_llama70b_kv_per_token_and_tp_sharding() -> None:
    p = parse_plan(plan("llama-3.1-70b", "h100-sxm", 8, tp=4, batch_size=16, input_len=4096, output_len=512))
    r = memory_report(p)
    assert r.kv_bytes_per_token == 327_680  # 80 layers x 2 x 8 heads x 128 x 2 B
    total = 16 * 4608 * 327_680
    assert r.per_gpu[0].kv_cache_bytes == pytest.approx(total / 4)
    assert r.kv_cache_bytes_total == pytest.approx(total)


def test_kv_replicated_beyond_kv_heads() -> None:
    # Llama-3.1-8B has 8 KV heads: at tp 16 (2 nodes) every GPU holds 1 head, i.e. 2x replication.
    p = parse_plan(plan("llama-3.1-8b", "h100-sxm", 16, tp=16, batch_size=4, input_len=1000, output_len=24))
    r = memory_report(p)
    per_tok = 32 * 2 * 1 * 128 * 2
    assert r.per_gpu[0].kv_cache_bytes == pytest.approx(4 * 1024 * per_tok)
    assert r.kv_cache_bytes_total == pytest.approx(2 * 4 * 1024 * r.kv_bytes_per_token)


def test_mla_latent_replicated_on_tp_ranks() -> None:
    p = parse_plan(plan("deepseek-v3", "h200", 16, tp=8, ep=8, pp=2, dtype="fp8", kv_dtype="fp8", batch_size=2,
                        input_len=1000, output_len=24))
    r = memory_report(p)
    assert r.kv_bytes_per_token == 61 * 576  # (kv_lora_rank 512 + rope 64) x 61 layers x 1 B
    layers0 = len(Layout(p).stage_layers[0])
    assert r.per_gpu[0].kv_cache_bytes == pytest.approx(2 * 1024 * layers0 * 576)
    assert r.per_gpu[7].kv_cache_bytes == r.per_gpu[0].kv_cache_bytes


def test_sp_splits_kv_by_sequence() -> None:
    base = memory_report(parse_plan(plan("llama-3.1-8b", "h100-sxm", 2, tp=1, sp=1, input_len=8192)))
    sp = memory_report(parse_plan(plan("llama-3.1-8b", "h100-sxm", 2, sp=2, input_len=8192)))
    assert sp.per_gpu[0].kv_cache_bytes == pytest.approx(base.per_gpu[0].kv_cache_bytes / 2)


def test_deepseek_v3_bf16_on_8_h200_does_not_fit() -> None:
    r = memory_report(parse_plan(plan("deepseek-v3", "h200", 8, tp=8, ep=8, weights="bf16")))
    assert not r.fits
    assert r.weights_bytes > 671e9 * 2 / 8  # 168 GB of weights per GPU > 141 GB
    assert r.max_batch_size_that_fits == 0 and r.max_context_that_fits == 0
    assert "does NOT fit" in r.message


def test_deepseek_v3_fp8_16_h200_fits() -> None:
    r = memory_report(parse_plan(plan("deepseek-v3", "h200", 16, tp=8, ep=8, pp=2, dtype="fp8")))
    # ~671e9 params at 1 B over 16 GPUs ~ 42 GB, plus replicated 16-bit embedding/LM head (1.85 GB each).
    assert 40e9 < r.weights_bytes < 50e9
    assert r.fits and r.max_batch_size_that_fits > 1000


def test_expert_weights_follow_ep() -> None:
    p = parse_plan(plan("mixtral-8x7b", "h100-sxm", 8, tp=2, ep=8))
    r = memory_report(p)
    spec = p.spec
    # GPU 7 holds only its expert (1 of 8) of every layer: no attention, no embedding.
    assert r.per_gpu[7].weights_bytes == pytest.approx(32 * spec.expert_params() * 2)
    assert r.per_gpu[7].kv_cache_bytes == 0


def test_pp_splits_weights_and_first_last_stage_hold_embeddings() -> None:
    p = parse_plan(plan("llama-3.1-70b", "h100-sxm", 8, tp=4, pp=2))
    r = memory_report(p)
    s0, s1 = r.per_gpu[0], r.per_gpu[4]
    assert s0.weights_bytes == pytest.approx(s1.weights_bytes, rel=0.01)
    one = memory_report(parse_plan(plan("llama-3.1-70b", "h100-sxm", 4, tp=4)))
    assert s0.weights_bytes < 0.6 * one.weights_bytes


def test_max_batch_is_consistent() -> None:
    d = plan("llama-3.1-70b", "h100-sxm", 8, tp=8, batch_size=8, input_len=2048, output_len=256)
    r = memory_report(parse_plan(d))
    b = r.max_batch_size_that_fits
    d["workload"]["batch_size"] = b
    assert memory_report(parse_plan(d)).fits
    d["workload"]["batch_size"] = b + 1
    assert not memory_report(parse_plan(d)).fits


def test_memory_report_is_fast() -> None:
    p = parse_plan(plan("deepseek-v3", "h200", 64, dp=4, pp=2, tp=8, ep=8, dtype="fp8"))
    memory_report(p)
    t = time.perf_counter()
    for _ in range(10):
        memory_report(p)
    assert (time.perf_counter() - t) / 10 < 0.005


def _dsv3(parallel: dict, batch: int = 64, **kw: object) -> dict:
    return {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8",
            "parallel": parallel, "options": {"allow_attention_dp": True},
            "workload": {"input_len": 2048, "output_len": 256, "batch_size": batch}, **kw}


def test_attention_dp_keeps_kv_per_group() -> None:
    tp = memory_report(parse_plan(_dsv3({"tp": 8, "ep": 8})))
    adp = memory_report(parse_plan(_dsv3({"tp": 1, "attn_dp": 8, "ep": 8})))
    # TP8: the MLA latent of all 64 sequences on every GPU; attention-DP 8: 8 sequences per group's GPU.
    assert adp.kv_cache_bytes == pytest.approx(tp.kv_cache_bytes / 8)
    assert adp.kv_cache_bytes_total == pytest.approx(tp.kv_cache_bytes_total / 8)
    assert adp.max_batch_size_that_fits > 4 * tp.max_batch_size_that_fits
    # attention replicated per group costs weights: more per GPU than TP8 (same experts)
    assert adp.weights_bytes > tp.weights_bytes
    # uneven batch: the fullest group holds ceil(batch / groups) sequences
    odd = memory_report(parse_plan(_dsv3({"tp": 1, "attn_dp": 8, "ep": 8}, batch=9)))
    two = memory_report(parse_plan(_dsv3({"tp": 1, "attn_dp": 8, "ep": 8}, batch=16)))
    assert odd.kv_cache_bytes == pytest.approx(two.kv_cache_bytes)


def test_disaggregated_pools_accounted_separately() -> None:
    p = parse_plan({"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
                    "parallel": {"tp": 8}, "phases": {"decode": {"dp": 2, "tp": 4}},
                    "options": {"disaggregated": True},
                    "workload": {"input_len": 2048, "output_len": 256, "batch_size": 16}})
    r = memory_report(p)
    assert r.pools is not None and set(r.pools) == {"prefill", "decode"}
    assert len(r.per_gpu) == 8 + 4  # prefill replica 0 (TP8) and decode replica 0 (TP4)
    pre = [g for g in r.per_gpu if g.gpu < 8]
    dec = [g for g in r.per_gpu if g.gpu >= 8]
    # prefill GPUs hold the prompt's KV (2048 tokens, 1 KV head), decode GPUs the whole context (2 heads)
    assert pre[0].kv_cache_bytes == pytest.approx(16 * 2048 * 327_680 / 8)
    assert dec[0].kv_cache_bytes == pytest.approx(16 * 2304 * 327_680 / 4)
    assert r.max_batch_size_that_fits == min(v.max_batch_size_that_fits for v in r.pools.values())


def test_remembered_reports_follow_the_plan_and_the_overlay(tmp_path, monkeypatch) -> None:
    """The report is remembered per plan and in-memory overlay; a changed plan, a changed overlay or an overlay file
    (named in the call or by PDAG_EFFICIENCY, whose contents may change) is accounted afresh."""
    p = parse_plan(plan("llama-3.1-70b", "h100-sxm", 8, tp=8))
    first = memory_report(p)
    assert memory_report(p) is first
    bigger = memory_report(parse_plan(plan("llama-3.1-70b", "h100-sxm", 8, tp=8, batch_size=64)))
    assert bigger.kv_cache_bytes > first.kv_cache_bytes
    tight = memory_report(p, efficiency={"defaults": {"fragmentation_fraction": 0.5}})
    assert tight.max_batch_size_that_fits < first.max_batch_size_that_fits
    f = tmp_path / "overlay.json"
    f.write_text('{"defaults": {"fragmentation_fraction": 0.5}}')
    monkeypatch.setenv("PDAG_EFFICIENCY", str(f))
    assert memory_report(p).max_batch_size_that_fits == tight.max_batch_size_that_fits
    f.write_text('{"defaults": {"fragmentation_fraction": 0.3}}')
    _read_overlay.cache_clear()  # the overlay reader keeps the files it parsed
    assert memory_report(p).max_batch_size_that_fits > tight.max_batch_size_that_fits


def test_max_context_stops_at_the_models_window() -> None:
    """Found by a recorded agent session: 2,097,152 tokens 'fit' for Llama-3.1-8B, whose window is 131,072."""
    r = memory_report(parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
                                  "parallel": {"tp": 8}}))
    assert r.max_context_that_fits == 131072 < r.max_tokens_per_sequence_that_fit


@pytest.mark.parametrize(("model", "gpu", "n", "par"), [
    ("llama-3.1-8b", "h100-sxm", 1, {}), ("llama-3.1-70b", "h100-sxm", 8, {"tp": 4, "dp": 2}),
    ("qwen3-8b", "rtx-4090", 1, {}), ("deepseek-v3", "h200", 16, {"tp": 8, "ep": 8, "pp": 2})])
def test_the_kv_cache_is_the_room_the_weights_leave_whatever_the_context(model: str, gpu: str, n: int,
                                                                         par: dict) -> None:
    """An engine sizes its KV cache at start-up: for full-attention models the tokens it holds do not depend on the
    workload's lengths, and they are at least what whole sequences at the plan's context would take (the old sizing,
    which rounds the room down to max_batch_size_that_fits sequences)."""
    from tools.core.memory import kv_cache_tokens

    rooms = []
    for lengths in ({"input_len": 1024, "output_len": 128}, {"input_len": 20480, "output_len": 128},
                    {"input_len": 7000, "output_len": 3000}):
        p = parse_plan(plan(model, gpu, n, **par, dtype="fp8" if model == "deepseek-v3" else "bf16", **lengths))
        room = kv_cache_tokens(p)["both"]
        mem = memory_report(p)
        assert room >= mem.max_batch_size_that_fits * (lengths["input_len"] + lengths["output_len"])
        rooms.append(room)
    assert len(set(rooms)) == 1 and rooms[0] > 0


def test_the_kv_cache_of_each_disaggregated_pool() -> None:
    p = parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 3},
                    "phases": {"prefill": {"dp": 1}, "decode": {"dp": 2, "tp": 1}},
                    "options": {"disaggregated": True}, "workload": {"input_len": 4096, "output_len": 256}})
    from tools.core.memory import kv_cache_tokens

    rooms = kv_cache_tokens(p)
    pools = memory_report(p).pools
    assert set(rooms) == {"prefill", "decode"} and pools is not None
    assert rooms["prefill"] >= pools["prefill"].max_batch_size_that_fits * 4096
    assert rooms["decode"] >= pools["decode"].max_batch_size_that_fits * (4096 + 256)
