"""Layer kinds beyond K/V attention: Qwen3-Next's gated DeltaNet, DeepSeek-V3.2's sparse-attention indexer,
Nemotron-H's Mamba-2 blocks, Falcon-H1's attention and Mamba-2 side by side and MiniMax's lightning attention.
Parameter counts against published totals, KV bytes per token and state bytes per request against hand calculations
from each config, the memory model and the estimator pricing each kind, the TP rule on recurrent heads, and arbitrary
configs of each family (a model or a named field error, never a crash)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge import ROOT
from tests.contracts import read_or_named
from tools.core.dag import NodeType
from tools.core.efficiency import plan_efficiency
from tools.core.errors import PdagInputError
from tools.core.layout import Layout
from tools.core.memory import memory_report
from tools.core.models import from_hf_config, load_preset
from tools.core.plan import parse_plan
from tools.engines.launch import model_for_repo
from tools.estimate.core import estimate_performance
from tools.estimate.costs import CostModel
from tools.rules.tp import recurrent_heads_split

BF16 = 2

# Qwen3-Next-80B-A3B: the fields of Qwen/Qwen3-Next-80B-A3B-Instruct's config.json that size the model
# (https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json; the same values are transformers'
# Qwen3NextConfig defaults, whose docstring names that checkpoint). No preset: no verbatim copy could be cited.
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "intermediate_size": 5120, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "max_position_embeddings": 262144, "tie_word_embeddings": False,
}


def preset_config(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "models" / name).read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------------------------- Qwen3-Next
def test_qwen3_next_counts_the_checkpoints_tensors() -> None:
    """79,674,391,296 weights and 3,874,929,408 used per token: the checkpoint's safetensors total and that total
    less the inactive experts' tensors, as a third-party count from the headers of the same architecture
    (Qwen/Qwen3-Coder-Next) gives them; the card says 80B total ("A3B" rounds the active figure)."""
    spec = from_hf_config(QWEN3_NEXT)
    assert spec.param_count() == 79_674_391_296
    assert spec.param_count() == pytest.approx(80e9, rel=0.01)
    assert spec.active_param_count() == 3_874_929_408


def test_qwen3_next_kv_per_token_and_state_per_request_by_hand() -> None:
    spec = from_hf_config(QWEN3_NEXT)
    # 12 full-attention layers (every 4th): K and V of 2 heads of 256
    assert spec.kv_bytes_per_token(BF16) == 12 * 2 * 2 * 256 * BF16
    # 36 DeltaNet layers: conv over q, k (16 heads of 128 each) and v (32 of 128), kernel 4 keeps 3 columns;
    # recurrent state 32 value heads x 128 x 128; 16-bit
    conv = (2 * 16 * 128 + 32 * 128) * 3
    state = 32 * 128 * 128
    assert spec.state_bytes_per_sequence() == 36 * (conv + state) * BF16
    assert spec.recurrent is not None and spec.recurrent.layers == tuple(i for i in range(48) if (i + 1) % 4)
    # the state does not grow with the context: 128k tokens of KV is the 12 attention layers' alone
    assert spec.kv_bytes(131072, BF16) == 131072 * 12 * 2 * 2 * 256 * BF16


def test_qwen3_next_layer_types_override_the_interval() -> None:
    types = ["linear_attention"] * 47 + ["full_attention"]
    spec = from_hf_config(dict(QWEN3_NEXT, layer_types=types))
    assert spec.recurrent is not None and len(spec.recurrent.layers) == 47
    assert spec.kv_bytes_per_token(BF16) == 2 * 2 * 256 * BF16
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(QWEN3_NEXT, layer_types=["sliding_attention"] * 48))
    assert info.value.field == "hf_config.layer_types"


def test_memory_holds_kv_per_token_and_state_per_sequence() -> None:
    """The worst GPU's cache at tp 2: per token the 12 attention layers' one KV head (2 over 2 ranks), per sequence
    the 36 DeltaNet layers' state split over the 2 ranks by heads."""
    batch, ctx = 8, 4096 + 512
    plan = parse_plan({"model": {"hf_config": QWEN3_NEXT}, "hardware": {"gpu": "h200", "num_gpus": 2},
                       "parallel": {"tp": 2, "ep": 2},
                       "workload": {"batch_size": batch, "input_len": 4096, "output_len": 512}})
    report = memory_report(plan)
    per_token = 12 * 2 * 1 * 256 * BF16
    per_seq = 36 * ((2 * 16 * 128 + 32 * 128) // 2 * 3 + 32 * 128 * 128 // 2) * BF16
    assert report.kv_cache_bytes == pytest.approx(batch * (ctx * per_token + per_seq))
    # the state counts against the batch: at most the sequences whose KV and state fit the room left at this batch
    room = report.capacity_bytes - report.max_gpu_bytes + report.kv_cache_bytes
    assert 8 < report.max_batch_size_that_fits <= room / (ctx * per_token + per_seq) < room / (ctx * per_token) - 50


def _attention_node_cost(plan_dict: dict[str, Any], layer: int, phase: str, batch: int) -> float:
    plan = parse_plan(plan_dict)
    layout = Layout(plan)
    model = CostModel(plan, layout, plan_efficiency(plan), overlap=True)
    spec = plan.spec
    attrs = {"type": NodeType.ATTENTION, "phase": phase, "layer": layer, "devices": [0], "heads": spec.num_heads,
             "kv_heads": None if spec.attention == "mla" else spec.num_kv_heads}
    return model.cost(attrs, batch).seconds


def _plan(model: Any, input_len: int, gpus: int = 8, **parallel: int) -> dict[str, Any]:
    return {"model": model, "hardware": {"gpu": "h200", "num_gpus": gpus},
            "parallel": parallel or {"tp": gpus, "ep": gpus},
            "workload": {"batch_size": 8, "input_len": input_len, "output_len": 256}}


def test_a_deltanet_layer_costs_the_same_at_any_context_an_attention_layer_does_not() -> None:
    model = {"hf_config": QWEN3_NEXT}
    short, long = _plan(model, 2048, 4), _plan(model, 65536, 4)
    rec = [_attention_node_cost(p, 0, "decode", 8) for p in (short, long)]
    full = [_attention_node_cost(p, 3, "decode", 8) for p in (short, long)]
    assert rec[0] == pytest.approx(rec[1])
    assert full[1] > full[0] * 2


# ----------------------------------------------------------------------------------------------- DeepSeek-V3.2
def test_deepseek_v32_total_with_its_mtp_module_matches_the_hub_count() -> None:
    """The Hub counts 685B: the 61 layers, plus the MTP module (one more MoE layer, its eh_proj, two input norms
    and its own embedding, head and final norm). pdag counts the model without it, as for DeepSeek-V3."""
    spec = load_preset("deepseek-v3.2")
    h = spec.hidden_size
    mtp = spec.layer_params(spec.num_layers - 1) + 2 * h * h + 2 * h + spec.embedding_params() + \
        spec.vocab_size * h + h
    assert spec.param_count() + mtp == pytest.approx(685e9, rel=0.01)
    assert spec.active_param_count(include_embedding=False) == pytest.approx(37e9, rel=0.02)
    # the indexer adds wq_b, wk, k_norm and weights_proj to each of V3's layers
    v3 = load_preset("deepseek-v3.1")
    per_layer = 1536 * 64 * 128 + h * 128 + 2 * 128 + h * 64
    assert spec.param_count() - v3.param_count() == 61 * per_layer


def test_deepseek_v32_kv_per_token_by_hand() -> None:
    spec = load_preset("deepseek-v3.2")
    # MLA latent 512 + RoPE key 64 at the KV dtype, plus the indexer's 128 fp8 values and one fp32 scale
    assert spec.kv_bytes_per_token(BF16) == 61 * ((512 + 64) * BF16 + 128 + 4)
    assert spec.kv_bytes_per_token(1) == 61 * ((512 + 64) * 1 + 128 + 4)
    assert spec.state_bytes_per_sequence() == 0


def test_sparse_attention_reads_top_k_keys_in_decode_and_scans_them_all() -> None:
    """At 64k context V3.2's decode attention (top 2048 keys plus the indexer's scan) is cheaper than V3.1's dense
    MLA over every key; at 1k context, where top-k takes them all, the indexer only adds."""
    long = [_attention_node_cost(_plan(m, 65536), 5, "decode", 8) for m in ("deepseek-v3.2", "deepseek-v3.1")]
    short = [_attention_node_cost(_plan(m, 1024), 5, "decode", 8) for m in ("deepseek-v3.2", "deepseek-v3.1")]
    assert long[0] < long[1]
    assert short[0] > short[1]


def test_deepseek_v32_names_resolve_to_the_preset() -> None:
    for name in ("deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2-Exp", "DeepSeek-V3.2"):
        assert load_preset(name).id == "deepseek-v3.2"
    assert model_for_repo("deepseek-ai/DeepSeek-V3.2")[0] == "deepseek-v3.2"


def test_index_cache_skipping_is_refused_by_name() -> None:
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(preset_config("deepseek-v3.2.json"), index_topk_freq=4))
    assert info.value.field == "hf_config.index_topk_freq"


# ----------------------------------------------------------------------------------------------- Nemotron-H
def test_nemotron_h_56b_count_and_layers() -> None:
    spec = load_preset("nemotron-h-56b")
    assert spec.param_count() == pytest.approx(56e9, rel=0.01)
    assert spec.num_layers == 64  # 54 Mamba-2 + 10 attention blocks, each with the MLP block after it
    assert spec.recurrent is not None and len(spec.recurrent.layers) == 54
    assert len(spec.ffn_free_layers) == 10 and not spec.ffn_gated
    pattern = preset_config("nemotron-h-56b.json")["hybrid_override_pattern"]
    assert pattern.count("-") == spec.num_layers - len(spec.ffn_free_layers)


def test_nemotron_h_kv_per_token_and_state_per_request_by_hand() -> None:
    spec = load_preset("nemotron-h-56b")
    assert spec.kv_bytes_per_token(BF16) == 10 * 2 * 8 * 128 * BF16
    # conv over x (256 heads x 64) and B, C (8 groups x 256 state), kernel 4 keeps 3, in bf16; SSM 256 heads x 64 x
    # 256 in fp32 (vLLM's Nemotron-H default when the config names no mamba_ssm_cache_dtype, as this one does not)
    conv = (256 * 64 + 2 * 8 * 256) * 3
    ssm = 256 * 64 * 256
    assert spec.state_bytes_per_sequence() == 54 * (conv * BF16 + ssm * 4)
    half = from_hf_config(dict(preset_config("nemotron-h-56b.json"), mamba_ssm_cache_dtype="bfloat16"))
    assert half.state_bytes_per_sequence() == 54 * (conv + ssm) * BF16


def test_nemotron_ffn_blocks_without_a_mixer_are_refused_by_field() -> None:
    cfg = preset_config("nemotron-h-56b.json")
    for pattern in ("E" + cfg["hybrid_override_pattern"][1:], "-" + cfg["hybrid_override_pattern"][1:]):
        with pytest.raises(PdagInputError) as info:
            from_hf_config(dict(cfg, hybrid_override_pattern=pattern))
        assert info.value.field == "hf_config.hybrid_override_pattern"


def test_nemotron_3_super_latent_experts() -> None:
    """120B total / 12B active (the name and card): 512 experts of 2688 working in a 1024-wide latent, with the
    down- and up-projection around them counted once per MoE layer; the MTP module is not counted."""
    spec = load_preset("nemotron-3-super-120b-a12b")
    assert spec.param_count() == pytest.approx(120e9, rel=0.01)
    assert spec.active_param_count(include_embedding=False) == pytest.approx(12e9, rel=0.03)
    assert spec.expert_width == 1024 and spec.expert_params() == 2 * 1024 * 2688
    assert spec.router_params() == 4096 * 512 + 512 + 2 * 4096 * 1024
    assert spec.mtp_layers == 1
    full_width = from_hf_config({k: v for k, v in preset_config("nemotron-3-super-120b-a12b.json").items()
                                 if k != "moe_latent_size"})
    assert full_width.param_count() - spec.param_count() == 40 * (512 * 2 * (4096 - 1024) * 2688 - 2 * 4096 * 1024)
    assert spec.kv_bytes_per_token(BF16) == 8 * 2 * 2 * 128 * BF16


def test_nemotron_3_nano_count_kv_and_state() -> None:
    """31.6B total (the Hub's count), 3.5B active (the card's); 23 Mamba-2 + MoE layers and 6 attention layers."""
    spec = load_preset("nemotron-3-nano-30b-a3b")
    assert spec.param_count() == pytest.approx(31.6e9, rel=0.01)
    assert spec.active_param_count() == pytest.approx(3.5e9, rel=0.03)
    assert spec.moe is not None and len(spec.moe.moe_layers) == 23 and spec.moe.router_bias
    assert spec.expert_params() == 2 * 2688 * 1856  # up and down, no gate
    assert spec.kv_bytes_per_token(BF16) == 6 * 2 * 2 * 128 * BF16
    # conv over x (64 heads x 64) and B, C (8 groups x 128) in bf16; SSM 64 x 64 x 128 in fp32 (the config says so)
    assert spec.state_bytes_per_sequence() == 23 * ((64 * 64 + 2 * 8 * 128) * 3 * BF16 + 64 * 64 * 128 * 4)
    assert load_preset("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8").id == "nemotron-3-nano-30b-a3b"


def test_nemotron_estimate_names_the_mixers_and_their_state() -> None:
    est = estimate_performance(parse_plan(_plan("nemotron-h-56b", 4096, 4, tp=4)))
    assert {c.name for c in est.decode.critical_path} >= {"mamba2 mixer", "attention", "ffn"}
    assert any("Mamba-2" in a and "per request" in a for a in est.assumptions)
    assert est.kv_cache.state_bytes_per_sequence == load_preset("nemotron-h-56b").state_bytes_per_sequence() > 9e8


# ----------------------------------------------------------------------------------------------- Granite-4
# Granite-4.0-H-Small: the fields a third-party write-up lists from ibm-granite/granite-4.0-h-small's config.json
# ("relevant fields only"; https://huggingface.co/ibm-granite/granite-4.0-h-small/blob/main/config.json), 36 Mamba-2
# and 4 attention layers (their positions do not change the count); the Mamba head and group counts it leaves out
# take transformers' defaults (128 heads, 1 group). IBM's card: 32B total, 9B active.
GRANITE_H_SMALL = {
    "model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 72, "num_experts_per_tok": 10, "shared_intermediate_size": 1536,
    "intermediate_size": 768, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2,
    "tie_word_embeddings": True, "vocab_size": 100352, "max_position_embeddings": 131072,
    "layer_types": (["mamba"] * 9 + ["attention"]) * 4,
}


def test_granite_4_h_small_count_kv_and_state() -> None:
    spec = from_hf_config(GRANITE_H_SMALL)
    assert spec.param_count() == pytest.approx(32e9, rel=0.01)
    assert spec.active_param_count() == pytest.approx(9e9, rel=0.03)
    assert spec.kv_bytes_per_token(BF16) == 4 * 2 * 8 * 128 * BF16
    # Mamba width 2 x 4096 = 8192 in 128 heads of 64; conv over x and one group's B and C (state 128)
    conv = (8192 + 2 * 1 * 128) * 3
    ssm = 128 * 64 * 128
    assert spec.state_bytes_per_sequence() == 36 * (conv + ssm) * BF16
    assert spec.moe is not None and spec.moe.shared_expert_intermediate_size == 1536 and spec.is_moe_layer(0)


def test_granite_without_experts_reads_its_shared_mlp_as_the_dense_ffn() -> None:
    spec = from_hf_config(dict(GRANITE_H_SMALL, num_local_experts=0))
    assert spec.moe is None and spec.intermediate_size == 1536
    assert spec.ffn_params(0) == 3 * 4096 * 1536


# ----------------------------------------------------------------------------------------------- Falcon-H1
FALCON_README_COMMAND = "vllm serve tiiuae/Falcon-H1-0.5B-Instruct --tensor-parallel-size 2 --data-parallel-size 1"


def _falcon_tensors(cfg: dict[str, Any]) -> int:
    """Every tensor of transformers' FalconH1ForCausalLM for this config, written out from its modules."""
    h, n_layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    inner = cfg["mamba_n_heads"] * cfg["mamba_d_head"]
    conv_dim = inner + 2 * cfg["mamba_n_groups"] * cfg["mamba_d_state"]
    attention = h * q + 2 * h * kv + q * h  # q, k, v, o without biases
    mamba = (h * (inner + conv_dim + cfg["mamba_n_heads"])  # in_proj: gate, x B C, dt
             + conv_dim * cfg["mamba_d_conv"] + conv_dim  # depthwise conv1d with its bias
             + 3 * cfg["mamba_n_heads"]  # dt_bias, A_log, D (no gated norm: mamba_rms_norm false)
             + inner * h)  # out_proj
    mlp = 3 * h * cfg["intermediate_size"]
    layer = attention + mamba + mlp + 2 * h  # input_layernorm, pre_ff_layernorm
    return 2 * vocab * h + n_layers * layer + h  # untied embedding and lm_head, final norm


def test_falcon_h1_counts_every_tensor_of_both_mixers() -> None:
    """521,411,104: attention and the Mamba-2 mixer in each of the 36 layers, the total a third-party card lists for
    tiiuae/Falcon-H1-0.5B-Base (the README rounds it to 0.5B)."""
    cfg = preset_config("falcon-h1-0.5b.json")
    spec = load_preset("falcon-h1-0.5b")
    assert spec.param_count() == _falcon_tensors(cfg) == spec.published_params == 521_411_104
    assert spec.param_count() == pytest.approx(0.5e9, rel=0.05)
    assert all(spec.is_parallel_layer(i) and not spec.is_recurrent_layer(i) for i in range(36))
    assert spec.mixer_params(0) > spec.attention_params_per_layer()


def test_falcon_h1_keeps_kv_per_token_and_state_per_request_in_every_layer() -> None:
    spec = load_preset("falcon-h1-0.5b")
    assert spec.kv_bytes_per_token(BF16) == 36 * 2 * 2 * 64 * BF16 == 18_432
    conv = (24 * 64 + 2 * 1 * 128) * (4 - 1)
    ssm = 24 * 64 * 128
    assert spec.state_bytes_per_sequence() == 36 * (conv + ssm) * BF16 == 14_542_848
    assert spec.kv_bytes(8192, BF16) == 8192 * 18_432  # no layer is capped or KV-free


def test_falcon_h1_memory_holds_both_caches_split_by_heads() -> None:
    """At tp 2: one of the 2 KV heads per rank, the Mamba heads split in two, the one group's B and C whole."""
    batch, ctx = 8, 4096 + 512
    plan = parse_plan({"model": "falcon-h1-0.5b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                       "parallel": {"tp": 2}, "workload": {"batch_size": batch, "input_len": 4096, "output_len": 512}})
    per_token = 36 * 2 * 1 * 64 * BF16
    per_seq = 36 * ((24 * 64 // 2 + 2 * 128) * 3 + 24 * 64 * 128 // 2) * BF16
    assert memory_report(plan).kv_cache_bytes == pytest.approx(batch * (ctx * per_token + per_seq))


def test_a_falcon_h1_layer_prices_attention_and_the_mamba_mixer() -> None:
    """The layer's mixer node costs its attention (growing with the context) plus the Mamba-2 scan (not growing):
    more than the same attention in a plain decoder, and more at a long context than at a short one."""
    cfg = preset_config("falcon-h1-0.5b.json")
    plain = {k: v for k, v in cfg.items() if not k.startswith(("mamba", "ssm", "attn_layer"))}
    plain.update(model_type="llama", architectures=["LlamaForCausalLM"])
    for phase in ("prefill", "decode"):
        falcon, llama = (_attention_node_cost(_plan(m, 4096, 2, tp=2), 0, phase, 8)
                         for m in ("falcon-h1-0.5b", {"hf_config": plain}))
        assert falcon > llama
    short, long = (_attention_node_cost(_plan("falcon-h1-0.5b", n, 2, tp=2), 0, "decode", 8) for n in (1024, 16000))
    assert long > short
    est = estimate_performance(parse_plan(_plan("falcon-h1-0.5b", 4096, 2, tp=2)))
    assert "attention and mamba2 mixer" in {c.name for c in est.decode.critical_path}
    assert est.kv_cache.state_bytes_per_sequence == 14_542_848


def test_falcon_h1_readmes_vllm_command_imports_validates_estimates_exports(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The Falcon-H1 README's vLLM line (its 1B model name replaced by the 0.5B preset's checkpoint) goes through
    the CLI: import, validate, estimate, export, and the export names the checkpoint and its TP."""
    from tools.cli import main

    assert main(["import", FALCON_README_COMMAND, "--gpu", "h100-sxm"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["model"] == "falcon-h1-0.5b" and plan["parallel"]["tp"] == 2
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    assert "valid" in capsys.readouterr().out
    assert main(["estimate", str(path)]) == 0
    assert "recurrent state per sequence" in capsys.readouterr().out
    assert main(["export", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tiiuae/Falcon-H1-0.5B-Instruct" in out and "--tensor-parallel-size 2" in out


def test_falcon_h1_fields_it_cannot_read_are_named() -> None:
    cfg = preset_config("falcon-h1-0.5b.json")
    for bad, field in (({"attn_layer_indices": [0, 1]}, "attn_layer_indices"),
                       ({"mamba_d_ssm": 2000}, "mamba_d_head"), ({"mamba_n_groups": 5}, "mamba_n_groups")):
        with pytest.raises(PdagInputError) as err:
            from_hf_config({**cfg, **bad})
        assert err.value.field == f"hf_config.{field}"
    assert recurrent_heads_split(load_preset("falcon-h1-0.5b"), 8) is None
    assert recurrent_heads_split(load_preset("falcon-h1-0.5b"), 16) == "24 Mamba heads"


# ----------------------------------------------------------------------------------------------- MiniMax lightning
# MiniMax-Text-01: the shapes its model card lists (https://github.com/MiniMax-AI/MiniMax-01/blob/
# 3c6375c22a892bb04b1fd341bd6bcb7463fcb6fc/MiniMax-Text-01-Model-Card.md: 80 layers, a softmax layer after every 7
# lightning layers, 64 heads of 128, 32 experts of 9216 top-2, hidden 6144, vocabulary 200,064, RoPE on half the head)
# with the 8 KV heads the published config states. No preset: no verbatim copy of the config could be cited.
MINIMAX_TEXT_01 = {
    "architectures": ["MiniMaxText01ForCausalLM"], "model_type": "minimax_text_01", "hidden_size": 6144,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "rotary_dim": 64,
    "intermediate_size": 9216, "num_local_experts": 32, "num_experts_per_tok": 2, "shared_intermediate_size": 0,
    "vocab_size": 200064, "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1] * 10, "max_position_embeddings": 10240000,
    "tie_word_embeddings": False, "postnorm": True, "layernorm_full_attention_alpha": 3.5565588200778455,
}
MINIMAX_GUIDE_COMMAND = ("python3 -m vllm.entrypoints.api_server --model MiniMaxAI/MiniMax-Text-01 "
                         "--tensor-parallel-size 8 --trust-remote-code --quantization experts_int8 "
                         "--max_model_len 4096 --dtype bfloat16")


def test_minimax_text_01_counts_the_cards_totals() -> None:
    """456B total; 45.9B activated, which the card counts without the embedding and the LM head."""
    spec = from_hf_config(MINIMAX_TEXT_01)
    assert spec.param_count() == pytest.approx(456e9, rel=0.01)
    active = spec.active_param_count(include_embedding=False) - spec.lm_head_params()
    assert active == pytest.approx(45.9e9, rel=0.01)
    # a lightning layer: qkv, output gate and out_proj over 64 x 128, its norm; a softmax layer: GQA with 8 KV heads
    assert spec.mixer_params(0) == 5 * 6144 * 8192 + 8192
    assert spec.mixer_params(7) == 2 * 6144 * 8192 + 2 * 6144 * 8 * 128


def test_minimax_kv_per_token_and_lightning_state_per_request_by_hand() -> None:
    spec = from_hf_config(MINIMAX_TEXT_01)
    assert [i for i in range(80) if not spec.is_recurrent_layer(i)] == list(range(7, 80, 8))
    assert spec.kv_bytes_per_token(BF16) == 10 * 2 * 8 * 128 * BF16 == 40_960
    assert spec.state_bytes_per_sequence() == 70 * 64 * 128 * 128 * BF16 == 146_800_640
    assert spec.kv_bytes(1 << 20, BF16) == (1 << 20) * 40_960  # a million tokens: KV of the 10 softmax layers only


def test_minimax_layer_types_spelling_and_missing_pattern() -> None:
    """transformers' minimax spells the pattern as layer_types; a config with neither spelling is refused by it."""
    tf = {k: v for k, v in MINIMAX_TEXT_01.items() if k != "attn_type_list"}
    tf.update(model_type="minimax", layer_types=(["linear_attention"] * 7 + ["full_attention"]) * 10)
    assert from_hf_config(tf).recurrent == from_hf_config(MINIMAX_TEXT_01).recurrent
    for cfg, field in (({**tf, "layer_types": None}, "layer_types"),
                       ({**MINIMAX_TEXT_01, "attn_type_list": [True] * 80}, "attn_type_list"),
                       ({**MINIMAX_TEXT_01, "num_local_experts": [32] * 80}, "num_local_experts"),
                       ({**MINIMAX_TEXT_01, "sliding_window": 4096}, "sliding_window")):
        with pytest.raises(PdagInputError) as err:
            from_hf_config(cfg)
        assert err.value.field == f"hf_config.{field}"


def test_minimax_guides_vllm_command_imports_validates_estimates_and_export_names_the_removal(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """MiniMax's vLLM guide line for MiniMax-Text-01 with the config: --quantization experts_int8 is read as int8
    routed experts (quantized while loading) beside 16-bit attention, so the guide's 8 H800 hold it; it validates and
    estimates (70 lightning layers priced as a constant-state mixer). The vLLM export is refused: vLLM serves these
    architectures only up to v0.23.0, and pdag writes commands for a later release."""
    from tools.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MINIMAX_TEXT_01), encoding="utf-8")
    assert main(["import", MINIMAX_GUIDE_COMMAND, "--gpu", "h800", "--hf-config", str(cfg)]) == 0
    out = capsys.readouterr()
    plan = json.loads(out.out)
    assert "not mapped" not in out.err and plan["weights"] == "experts-int8" and plan["parallel"]["tp"] == 8
    spec = from_hf_config(MINIMAX_TEXT_01)
    experts = 80 * 32 * spec.expert_params()
    hand = (experts * 1.0006 + (spec.param_count() - experts) * BF16) / 8
    assert memory_report(parse_plan(plan)).weights_bytes == pytest.approx(hand, rel=0.01)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    assert main(["estimate", str(path)]) == 0
    assert "lightning mixer" in capsys.readouterr().out
    assert main(["export", str(path)]) == 2
    err = capsys.readouterr().err
    assert "v0.23.0" in err and "pull/45993" in err
    bf16 = {**plan, "weights": None}
    path.write_text(json.dumps(bf16), encoding="utf-8")
    assert main(["validate", str(path)]) == 1
    assert "MEM-FITS" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- TP rule
def test_recurrent_heads_must_split_whole() -> None:
    next_spec = from_hf_config(QWEN3_NEXT)
    assert recurrent_heads_split(next_spec, 16) is None
    assert recurrent_heads_split(next_spec, 32) == "16 linear-attention key heads"
    nemo = load_preset("nemotron-h-56b")
    assert recurrent_heads_split(nemo, 8) is None
    assert recurrent_heads_split(nemo, 16) == "8 Mamba groups (n_groups)"
    one_group = from_hf_config(dict(preset_config("nemotron-h-56b.json"), n_groups=1))
    assert recurrent_heads_split(one_group, 16) is None  # a single group is replicated on every rank
    lightning = from_hf_config(MINIMAX_TEXT_01)
    assert recurrent_heads_split(lightning, 8) is None
    assert recurrent_heads_split(lightning, 48) == "64 lightning-attention heads"


# ----------------------------------------------------------------------------------------------- any config
SIZE = st.one_of(st.integers(min_value=1, max_value=64), st.sampled_from([0, -1, 2**40, "8", None, 1.5, True]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(["qwen3_next", "deepseek_v32", "nemotron_h", "granitemoehybrid", "falcon_h1",
                               "minimax_text_01"]), data=st.data())
def test_any_config_of_a_family_reads_or_names_its_field(family: str, data: st.DataObject) -> None:
    base = {"qwen3_next": QWEN3_NEXT, "deepseek_v32": preset_config("deepseek-v3.2.json"),
            "nemotron_h": preset_config("nemotron-h-56b.json"), "granitemoehybrid": GRANITE_H_SMALL,
            "falcon_h1": preset_config("falcon-h1-0.5b.json"), "minimax_text_01": MINIMAX_TEXT_01}[family]
    fields = {
        "qwen3_next": ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "linear_num_key_heads",
                       "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                       "linear_conv_kernel_dim", "full_attention_interval", "num_experts", "num_experts_per_tok",
                       "shared_expert_intermediate_size", "decoder_sparse_step"],
        "deepseek_v32": ["index_topk", "index_head_dim", "index_n_heads", "q_lora_rank", "kv_lora_rank",
                         "num_hidden_layers", "first_k_dense_replace"],
        "nemotron_h": ["mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel",
                       "num_hidden_layers", "num_key_value_heads"],
        "granitemoehybrid": ["mamba_n_heads", "mamba_n_groups", "mamba_d_state", "mamba_d_head", "mamba_expand",
                             "num_local_experts", "num_experts_per_tok", "shared_intermediate_size",
                             "intermediate_size", "num_hidden_layers", "layer_types"],
        "falcon_h1": ["mamba_n_heads", "mamba_n_groups", "mamba_d_state", "mamba_d_head", "mamba_d_ssm",
                      "mamba_expand", "mamba_d_conv", "num_hidden_layers", "num_key_value_heads", "head_dim"],
        "minimax_text_01": ["num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                            "num_local_experts", "num_experts_per_tok", "shared_intermediate_size", "attn_type_list"],
    }[family]
    cfg = dict(base, hidden_size=data.draw(st.sampled_from([64, 128, 256])), vocab_size=1000)
    for key in data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=4, unique=True)):
        cfg[key] = data.draw(SIZE)
    if family == "nemotron_h" and data.draw(st.booleans()):
        n = data.draw(st.integers(min_value=1, max_value=12))
        cfg["hybrid_override_pattern"] = data.draw(st.text(alphabet="M*-E", min_size=n, max_size=n))
        cfg["num_hidden_layers"] = n
    spec = read_or_named(cfg)
    if spec is None:
        return
    if spec.recurrent is not None:
        assert spec.kv_bytes(4096, BF16) == spec.kv_bytes(4096, BF16)  # deterministic and finite
        assert all((spec.kv_elements_per_token_per_layer(i) == 0) != spec.recurrent.parallel
                   for i in spec.recurrent.layers)


# ----------------------------------------------------------------------------------------------- fast = full
@pytest.mark.parametrize("plan", [
    _plan({"hf_config": QWEN3_NEXT}, 4096, 8, tp=4, ep=4, pp=2),
    _plan("deepseek-v3.2", 8192, 16, tp=8, ep=8, pp=2),
    _plan("nemotron-h-56b", 4096, 8, tp=4, pp=2),
    _plan("falcon-h1-0.5b", 4096, 4, tp=2, pp=2),
    _plan({"hf_config": {**MINIMAX_TEXT_01, "num_hidden_layers": 16, "attn_type_list": [0] * 7 + [1] + [0] * 7 + [1]}},
          4096, 8, tp=4, ep=4, pp=2),
], ids=["qwen3-next", "deepseek-v3.2", "nemotron-h", "falcon-h1", "minimax-lightning"])
def test_search_prices_each_layer_kind_as_the_full_estimate_does(plan: dict[str, Any]) -> None:
    from tools.estimate.fast import FastEstimator

    e = estimate_performance(plan)
    h = FastEstimator(parse_plan(plan)).headline(plan["workload"]["batch_size"])
    assert h.ttft_ms == pytest.approx(e.prefill_latency_ms, rel=1e-9)
    assert h.tpot_ms == pytest.approx(e.decode_latency_ms_per_token, rel=1e-9)


# ----------------------------------------------------------------------------------------------- over MCP
@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_an_agent_plans_the_new_kinds_by_name_or_config_over_mcp() -> None:
    from mcp import Client

    from server import create_server

    async with Client(create_server(), raise_exceptions=True) as client:
        cases = (("deepseek-ai/DeepSeek-V3.2", "sparse attention", {"tp": 16, "ep": 16}),
                 ("nemotron-h-56b", "Mamba-2", {"tp": 4}),
                 ({"hf_config": QWEN3_NEXT}, "gated DeltaNet", {"tp": 4, "ep": 4}),
                 ("tiiuae/Falcon-H1-0.5B-Instruct", "side by side", {"tp": 2}),
                 ({"hf_config": MINIMAX_TEXT_01}, "lightning attention", {"tp": 8, "ep": 8}))
        for model, said, parallel in cases:
            plan = {"model": model, "hardware": {"gpu": "h200", "num_gpus": parallel["tp"]}, "parallel": parallel,
                    "workload": {"input_len": 4096, "output_len": 512, "batch_size": 8}}
            r = await client.call_tool("estimate_performance", {"plan": plan, "detail": "full"})
            assert not r.is_error, r.content[0].text
            assert any(said in a for a in r.structured_content["assumptions"]), model


def test_disaggregated_handoff_moves_the_attention_kv_and_the_state() -> None:
    """Prefill hands decode the 12 attention layers' KV of the prompt and the 36 DeltaNet layers' final state."""
    from tools.core.handoff import kv_handoff

    plan = parse_plan({"model": {"hf_config": QWEN3_NEXT}, "hardware": {"gpu": "h200", "num_gpus": 4},
                       "parallel": {"tp": 2, "ep": 2}, "options": {"disaggregated": True},
                       "workload": {"batch_size": 4, "input_len": 8192, "output_len": 256}})
    h = kv_handoff(plan, Layout(plan), plan_efficiency(plan), 1)
    kv = 8192 * 12 * 2 * 2 * 256 * BF16
    state = 36 * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * BF16
    assert h.bytes_per_request == kv + state
    assert h.wire_bytes_per_request == kv + state  # 2 KV heads over 2 ranks: nothing replicated


def test_running_capacity_counts_each_request_state() -> None:
    """Requests the cache runs at once: the room at full context (KV and state of the batch that fits) over what one
    request holds, its KV on average plus its whole state; the state's share shrinks the on-demand headroom."""
    from tools.core.efficiency import efficiency_for
    from tools.core.memory import state_tokens
    from tools.estimate.serving import running_capacity

    plan = parse_plan(_plan({"hf_config": QWEN3_NEXT}, 4096, 4, tp=4, ep=4))
    eff = efficiency_for(plan.accelerator.id, engine="vllm")
    s = state_tokens(plan)
    spec = plan.spec
    assert s == -(-spec.state_bytes_per_sequence() // spec.kv_bytes_per_token(BF16)) > 1000
    held = 4096 + eff["kv_reserved_output_fraction"] * 256
    assert running_capacity(plan, eff, 100) == int(100 * (4096 + 256 + s) / (held + s))
    assert running_capacity(plan, eff, 100) < int(100 * (4096 + 256) / held)


def test_sglangs_qwen3_next_tp8_recipe_plans_with_its_config() -> None:
    """SGLang's cookbook serves Qwen3-Next with --tp 8 and no EP (experts tensor-sharded): 24 runs of alternating
    layer kinds stay within the working form's node bound (Expert nodes drawn one per GPU, not one per expert)."""
    from tools.core.build import build_working, estimated_node_count

    plan = parse_plan({"model": {"hf_config": QWEN3_NEXT}, "hardware": {"gpu": "b200", "num_gpus": 8},
                       "parallel": {"tp": 8}, "options": {"allow_expert_tp": True}, "engine": "sglang"})
    layout = Layout(plan)
    drawn = build_working(plan, layout).graph.number_of_nodes()
    assert drawn <= estimated_node_count(layout) < 20_000
    assert estimate_performance(plan).memory.fits


def test_each_layers_hand_off_moves_what_the_layer_keeps() -> None:
    """A DeltaNet layer's KV-transfer node moves its state (batch x 1.1 MB), an attention layer's the prompt's KV
    (batch x 8192 tokens x 24 KiB): at this prompt the state is the smaller."""
    plan = parse_plan({"model": {"hf_config": QWEN3_NEXT}, "hardware": {"gpu": "h200", "num_gpus": 4},
                       "parallel": {"tp": 2, "ep": 2}, "options": {"disaggregated": True},
                       "workload": {"batch_size": 4, "input_len": 8192, "output_len": 256}})
    model = CostModel(plan, Layout(plan), plan_efficiency(plan), overlap=False)
    attrs = {"type": NodeType.KV_TRANSFER, "phase": "decode", "devices": [0, 1, 2, 3]}
    state, kv = (model.cost({**attrs, "layer": layer}, 4).seconds for layer in (0, 3))
    assert 0 < state < kv
