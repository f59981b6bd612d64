"""Readers for the families the held-out recipe set (evals/recipes_heldout/recipes_2026_11.json) found refused at the
door: Hunyuan-A13B (hunyuan_v1_moe), Ling / Ring 2.0 (bailing_moe), Kimi-Linear (kimi_linear: Kimi Delta Attention
beside MLA) and Step-3.5-Flash (step3p5: sliding layers with their own query heads). No verbatim, citable copy of
these checkpoints' config.json is stored, so no preset ships; the configs below are written from the engines' field
names with the shapes public copies state (each named where it is used), and the counts are checked by hand and
against the published totals. A recipe naming one of these checkpoints is
refused with that fact, and imports once its config is passed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contracts import read_or_named
from tools.core.errors import PdagInputError
from tools.core.models import from_hf_config, load_preset
from tools.engines.launch import import_command
from tools.rules.tp import recurrent_heads_split

BF16 = 2

# Kimi-Linear-48B-A3B: the shapes every public copy of its config.json states (27 layers, hidden 2304, KDA layers and
# full-attention (MLA) layers numbered from 1, 32 KDA heads of 128, kernel 4; MLA with 32 heads, no q_lora_rank,
# kv_lora_rank 512, nope 128 / rope 64 / v 128; 256 experts of 1024 top-8 plus one shared, the first layer dense at
# 9216; vocabulary 163,840; context given as model_max_length).
KIMI_LINEAR: dict[str, Any] = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": 163840,
    "hidden_size": 2304, "head_dim": 72, "intermediate_size": 9216, "num_hidden_layers": 27,
    "num_attention_heads": 32, "num_key_value_heads": 32, "tie_word_embeddings": False, "first_k_dense_replace": 1,
    "moe_intermediate_size": 1024, "moe_layer_freq": 1, "moe_router_activation_func": "sigmoid", "num_experts": 256,
    "num_experts_per_token": 8, "num_shared_experts": 1, "q_lora_rank": None, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True,
    "num_nextn_predict_layers": 0, "model_max_length": 1048576,
    "auto_map": {"AutoConfig": "configuration_kimi.KimiLinearConfig"},
    "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "num_heads": 32,
                           "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                           "short_conv_kernel_size": 4},
}

# Hunyuan-A13B-Instruct: 32 layers, hidden 4096, 32 q / 8 KV heads of 128, 64 experts of 3072 top-8 and one shared MLP
# of 3072 on every layer (per-layer lists, as the published config writes them), q/k norms, tied embeddings, vocabulary
# 128,167, no cross-layer attention.
HUNYUAN_A13B: dict[str, Any] = {
    "architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe", "hidden_size": 4096,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 3072, "vocab_size": 128167, "num_experts": 64, "moe_intermediate_size": [3072] * 32,
    "moe_topk": [8] * 32, "num_shared_expert": [1] * 32, "use_mixed_mlp_moe": True, "use_qk_norm": True,
    "use_cla": False, "attention_bias": False, "tie_word_embeddings": True, "max_position_embeddings": 32768,
}

# Ling-mini-2.0 (bailing_moe, BailingMoeV2ForCausalLM), the Ling 2.0 architecture Ring-1T scales up: 20 layers, hidden
# 2048, the first dense at 5120, 256 experts of 512 top-8 plus one shared of 512 with a routing bias, 16 q / 4 KV heads
# of 128 with q/k norms, vocabulary 157,184, one MTP layer.
LING_MINI_2: dict[str, Any] = {
    "architectures": ["BailingMoeV2ForCausalLM"], "model_type": "bailing_moe", "num_hidden_layers": 20,
    "hidden_size": 2048, "intermediate_size": 5120, "first_k_dense_replace": 1, "moe_intermediate_size": 512,
    "moe_shared_expert_intermediate_size": 512, "num_shared_experts": 1, "num_experts": 256, "num_experts_per_tok": 8,
    "moe_router_enable_expert_bias": True, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
    "use_qk_norm": True, "use_qkv_bias": False, "use_bias": False, "vocab_size": 157184,
    "max_position_embeddings": 32768, "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
    "auto_map": {"AutoConfig": "configuration_bailing_moe_v2.BailingMoeV2Config"},
}

# Step-3.5-Flash: 45 layers, hidden 4096, full attention on every fourth layer (64 q / 8 KV heads of 128), sliding
# layers (window 512) with attention_other_setting's 96 q / 8 KV heads, a head-wise output gate, q/k norms; layers
# 3..44 MoE with 288 experts of 1280 top-8, a routing bias and one shared expert of 1280, the first three dense at
# 11264; vocabulary 128,896; three MTP layers, whose kinds the published layer_types lists too (48 entries).
STEP_3_5_FLASH: dict[str, Any] = {
    "architectures": ["Step3p5ForCausalLM"], "model_type": "step3p5", "hidden_size": 4096, "intermediate_size": 11264,
    "num_hidden_layers": 45, "max_position_embeddings": 262144, "vocab_size": 128896, "num_attention_heads": 64,
    "num_attention_groups": 8, "head_dim": 128, "use_qk_norm": True, "use_moe": True, "moe_num_experts": 288,
    "moe_top_k": 8, "moe_intermediate_size": 1280, "share_expert_dim": 1280,
    "moe_layers_enum": ",".join(str(i) for i in range(3, 45)), "use_moe_router_bias": True, "att_impl_type": "GQA",
    "use_head_wise_attn_gate": True, "sliding_window": 512, "num_nextn_predict_layers": 3,
    "tie_word_embeddings": False,
    "layer_types": ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(48)],
    "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 96,
                                "num_attention_groups": 8, "head_dim": 128},
    "auto_map": {"AutoConfig": "configuration_step3p5.Step3p5Config"},
}


# ----------------------------------------------------------------------------------------------- Kimi-Linear
def test_kimi_linear_counts_every_tensor() -> None:
    """A KDA layer: q/k/v projections and their convolutions, A_log, dt_bias, the low-rank decay and output gates,
    b_proj, o_norm, o_proj; an MLA layer without q_lora_rank. 49.12B in all: the checkpoint's BF16 weights are 98.2 GB
    (49.1B); the README's '48B total parameters' is 2.3 % under (https://github.com/MoonshotAI/Kimi-Linear/blob/
    16a0ae6dfed970c879c78cff3b38114f9450120f/README.md), as is its '3B activated' rounded."""
    spec = from_hf_config(KIMI_LINEAR)
    h, w, d, heads = 2304, 4096, 128, 32
    kda = 3 * h * w + 3 * w * 4 + heads + w + 2 * (d * h + w * d) + heads * h + d + w * h
    assert spec.mixer_params(0) == kda
    mla = h * heads * 192 + h * 576 + 512 + 512 * heads * 256 + heads * 128 * h
    assert spec.mixer_params(3) == mla
    assert spec.param_count() == pytest.approx(49.1e9, rel=0.01)
    assert spec.active_param_count(include_embedding=False) == pytest.approx(3.1e9, rel=0.01)
    assert not spec.is_moe_layer(0) and spec.is_moe_layer(1) and spec.moe.router_bias
    assert spec.remote_code and spec.max_position_embeddings == 1048576


def test_kimi_linear_kv_per_token_and_state_per_request_by_hand() -> None:
    """7 MLA layers keep 512 + 64 latent values per token; 20 KDA layers keep three conv windows (4096 channels x 3
    positions, 16-bit) and a 32 x 128 x 128 recurrent state in float32, as vLLM's kda_state_dtype keeps it."""
    spec = from_hf_config(KIMI_LINEAR)
    assert [i for i in range(27) if not spec.is_recurrent_layer(i)] == [3, 7, 11, 15, 19, 23, 26]
    assert spec.kv_bytes_per_token(BF16) == 7 * 576 * BF16 == 8_064
    assert spec.state_bytes_per_sequence() == 20 * (3 * 4096 * 3 * 2 + 32 * 128 * 128 * 4) == 43_417_600
    assert spec.kv_bytes(1 << 20, BF16) == (1 << 20) * 8_064


def test_kimi_linear_fields_it_cannot_read_are_named() -> None:
    lin = KIMI_LINEAR["linear_attn_config"]
    for cfg, field in (({**KIMI_LINEAR, "linear_attn_config": {**lin, "full_attn_layers": [4]}},
                        "linear_attn_config.kda_layers"),
                       ({**KIMI_LINEAR, "linear_attn_config": None}, "linear_attn_config"),
                       ({**KIMI_LINEAR, "mla_use_output_gate": True}, "mla_use_output_gate"),
                       ({**KIMI_LINEAR, "routed_expert_hidden_size": 1024}, "routed_expert_hidden_size")):
        with pytest.raises(PdagInputError) as err:
            from_hf_config(cfg)
        assert err.value.field == f"hf_config.{field}"


def test_kda_heads_must_split_whole() -> None:
    spec = from_hf_config(KIMI_LINEAR)
    assert recurrent_heads_split(spec, 8) is None
    assert recurrent_heads_split(spec, 3) == "32 Kimi Delta Attention heads"


# ----------------------------------------------------------------------------------------------- Hunyuan-A13B
def test_hunyuan_a13b_count_kv_and_layers() -> None:
    """80B total / 13B active (https://github.com/tianyu1412/Hunyuan-A13B README, a copy of Tencent's); pdag counts
    80.39B and 12.75B active (tied embedding counted once)."""
    spec = from_hf_config(HUNYUAN_A13B)
    assert spec.param_count() == pytest.approx(80e9, rel=0.01)
    assert spec.active_param_count() == pytest.approx(13e9, rel=0.02)
    assert spec.moe.moe_layers == tuple(range(32)) and spec.moe.shared_expert_intermediate_size == 3072
    assert spec.attention_params_per_layer() == 2 * 4096 * 4096 + 2 * 4096 * 1024 + 2 * 128  # + per-head q/k norms
    assert spec.kv_bytes_per_token(BF16) == 32 * 2 * 8 * 128 * BF16 == 131_072


# Cross-layer attention as Hunyuan-Large turns it on (use_cla, cla_share_factor 2: each odd layer reads the K and V of
# the layer before it), here on A13B's shapes; the engines' Hunyuan code builds those layers with q_proj and o_proj
# only (vLLM vllm/model_executor/models/hunyuan_v1.py, the cross-attention layers).
HUNYUAN_CLA: dict[str, Any] = {**HUNYUAN_A13B, "use_cla": True, "cla_share_factor": 2}


def test_hunyuan_cross_layer_attention_halves_the_kv_and_drops_the_kv_projections() -> None:
    spec, plain = from_hf_config(HUNYUAN_CLA), from_hf_config(HUNYUAN_A13B)
    assert spec.kv_shared_layers == tuple(range(1, 32, 2)) and spec.cross_layer_kv
    assert spec.kv_bytes_per_token(BF16) == 16 * 2 * 8 * 128 * BF16 == plain.kv_bytes_per_token(BF16) // 2
    q, kv = 4096 * 32 * 128, 4096 * 8 * 128
    assert spec.attention_params_per_layer(0) == 2 * q + 2 * kv + 2 * 128
    assert spec.attention_params_per_layer(1) == 2 * q + 128  # q_proj, o_proj and the query norm only
    assert plain.param_count() - spec.param_count() == 16 * (2 * kv + 128)
    assert from_hf_config({**HUNYUAN_CLA, "cla_share_factor": 1}).kv_shared_layers == ()


def test_hunyuan_reads_single_values_dense_configs_and_names_what_it_cannot_price() -> None:
    flat = {**HUNYUAN_A13B, "moe_intermediate_size": 3072, "moe_topk": 8, "num_shared_expert": 1}
    assert from_hf_config(flat).param_count() == from_hf_config(HUNYUAN_A13B).param_count()
    dense = from_hf_config({**HUNYUAN_A13B, "num_experts": 1})
    assert dense.moe is None and dense.ffn_params(0) == 3 * 4096 * 3072
    skipped = from_hf_config({**HUNYUAN_A13B, "moe_layer_num_skipped": 2})
    assert skipped.moe.moe_layers == tuple(range(2, 32))
    for cfg, field in (({**HUNYUAN_A13B, "use_cla": True, "cla_share_factor": 0}, "cla_share_factor"),
                       ({**HUNYUAN_A13B, "moe_topk": [8] * 31 + [2]}, "moe_topk"),
                       ({**HUNYUAN_A13B, "sliding_window": 4096}, "sliding_window")):
        with pytest.raises(PdagInputError) as err:
            from_hf_config(cfg)
        assert err.value.field == f"hf_config.{field}"


# ----------------------------------------------------------------------------------------------- Ling / Ring 2.0
def test_ling_mini_2_counts_the_readmes_figures() -> None:
    """Ling-mini-2.0: '16B total parameters, only 1.4B are activated per input token (non-embedding 789M)'
    (https://github.com/ant-yy/Ling-V2/blob/main/README.md, a copy of inclusionAI's Ling-V2 README): pdag counts
    16.26B, 1.43B active, 789.1M without the embedding and the LM head."""
    spec = from_hf_config(LING_MINI_2)
    assert spec.active_param_count(include_embedding=False) - spec.lm_head_params() == pytest.approx(789e6, rel=0.001)
    assert spec.param_count() == pytest.approx(16e9, rel=0.02)  # the README's 16B is rounded
    assert spec.active_param_count() == pytest.approx(1.4e9, rel=0.03)
    assert spec.moe.moe_layers == tuple(range(1, 20)) and spec.moe.router_bias and spec.mtp_layers == 1
    assert spec.kv_bytes_per_token(BF16) == 20 * 2 * 4 * 128 * BF16 == 40_960
    assert spec.remote_code  # bailing_moe is read through the repo's own code (trust-remote-code on export)


def test_bailing_fields_it_cannot_price_are_named() -> None:
    for cfg, field in (({**LING_MINI_2, "use_bias": True}, "use_bias"),
                       ({**LING_MINI_2, "intermediate_size": None}, "intermediate_size")):
        with pytest.raises(PdagInputError) as err:
            from_hf_config(cfg)
        assert err.value.field == f"hf_config.{field}"
    v1 = from_hf_config({k: v for k, v in LING_MINI_2.items() if k != "first_k_dense_replace"})
    assert v1.moe.moe_layers == tuple(range(20))  # Ling 1.x: every layer MoE


# ----------------------------------------------------------------------------------------------- Step-3.5-Flash
def test_step_3_5_flash_counts_each_layers_own_heads() -> None:
    """The README (https://github.com/stepfun-ai/Step-3.5-Flash/blob/fabede3d3c40a5c567c86f206557e44dd652ae28/
    README.md, 4.1): '196.81B (196B Backbone + 0.81B Head)' total, '~11B' active, 45 layers, hidden 4096, 288 routed
    experts + 1 shared, top-8. pdag counts 196.96B (MTP layers left out) and 11.46B active without the embedding."""
    spec = from_hf_config(STEP_3_5_FLASH)
    h = 4096
    full = 2 * h * 64 * 128 + 2 * h * 8 * 128 + 2 * 128 + h * 64  # q, o; k, v; q/k norms; head-wise gate
    assert spec.attention_params_per_layer(0) == full
    assert spec.attention_params_per_layer(1) == full + 2 * h * 32 * 128 + h * 32  # 96 query heads
    assert spec.q_heads(0) == 64 and spec.q_heads(1) == 96 and spec.q_head_counts == (64, 96)
    assert spec.param_count() == pytest.approx(196.81e9, rel=0.01)
    assert spec.active_param_count(include_embedding=False) == pytest.approx(11e9, rel=0.05)
    assert spec.moe.moe_layers == tuple(range(3, 45)) and spec.mtp_layers == 3 and spec.moe.router_bias


def test_step_3_5_flash_kv_per_token_by_hand() -> None:
    """12 full layers keep every token, 33 sliding layers at most 512: at 128k, 12 x 4096 B plus the windows."""
    spec = from_hf_config(STEP_3_5_FLASH)
    assert len(spec.sliding_window_layers) == 33 and spec.sliding_window == 512
    assert spec.kv_bytes_per_token(BF16) == 45 * 2 * 8 * 128 * BF16 == 184_320
    assert spec.kv_bytes(131072, BF16) == 12 * 4096 * 131072 + 33 * 4096 * 512


def test_step_3_5_flash_fields_it_cannot_read_are_named() -> None:
    other = STEP_3_5_FLASH["attention_other_setting"]
    for cfg, field in (({**STEP_3_5_FLASH, "att_impl_type": "MFA"}, "att_impl_type"),
                       ({**STEP_3_5_FLASH, "moe_layers_enum": "3,x"}, "moe_layers_enum"),
                       ({**STEP_3_5_FLASH, "attention_other_setting": {**other, "attention_type": "chunked"}},
                        "attention_other_setting"),
                       ({**STEP_3_5_FLASH, "attention_other_setting": {**other, "num_attention_groups": 7}},
                        "attention_other_setting.num_attention_groups"),
                       ({**STEP_3_5_FLASH, "layer_types": ["full_attention"] * 40}, "layer_types")):
        with pytest.raises(PdagInputError) as err:
            from_hf_config(cfg)
        assert err.value.field == f"hf_config.{field}"
    same = from_hf_config({k: v for k, v in STEP_3_5_FLASH.items() if k != "attention_other_setting"})
    assert same.q_head_counts == (64,) and same.full_layer_shape is None


# ----------------------------------------------------------------------------------------------- recipes
RECIPE_MODELS = ["tencent/Hunyuan-A13B-Instruct", "inclusionAI/Ring-1T-FP8", "stepfun-ai/Step-3.5-Flash",
                 "moonshotai/Kimi-Linear-48B-A3B-Instruct"]


@pytest.mark.parametrize("repo", RECIPE_MODELS)
def test_a_recipe_without_a_stored_config_names_the_fact(repo: str) -> None:
    with pytest.raises(PdagInputError) as err:
        import_command(f"vllm serve {repo} --tensor-parallel-size 4 --trust-remote-code", gpu="h200")
    assert err.value.field == "command.model" and "no verbatim copy of its config.json" in err.value.problem
    assert "--hf-config" in str(err.value.allowed)
    with pytest.raises(PdagInputError) as err:
        load_preset(repo)
    assert "no verbatim copy of its config.json" in err.value.problem and "config.json" in str(err.value.allowed)


@pytest.mark.parametrize(("command", "gpu", "config", "mixer"), [
    ("SGLANG_ROCM_FUSED_DECODE_MLA=0 python3 -m sglang.launch_server --model-path "
     "moonshotai/Kimi-Linear-48B-A3B-Instruct --tokenizer-path moonshotai/Kimi-Linear-48B-A3B-Instruct --tp 4 "
     "--trust-remote-code", "mi300x", KIMI_LINEAR, "kda mixer"),
    ("VLLM_ROCM_USE_AITER=1 vllm serve tencent/Hunyuan-A13B-Instruct --tensor-parallel-size 2 --trust-remote-code",
     "mi300x", HUNYUAN_A13B, None),
    ("sglang serve --model-path stepfun-ai/Step-3.5-Flash --tp 4 --ep 4", "h200", STEP_3_5_FLASH, None),
    ("vllm serve tencent/Hunyuan-A13B-Instruct --tensor-parallel-size 4 --trust-remote-code", "h100-sxm", HUNYUAN_CLA,
     None),
])
def test_the_recipes_import_validate_estimate_and_export_with_the_config(
        tmp_path: Any, capsys: pytest.CaptureFixture[str], command: str, gpu: str, config: dict[str, Any],
        mixer: str | None) -> None:
    from tools.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    assert main(["import", command, "--gpu", gpu, "--hf-config", str(cfg)]) == 0
    plan = json.loads(capsys.readouterr().out)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    assert main(["estimate", str(path)]) == 0
    if mixer:
        assert mixer in capsys.readouterr().out
    assert main(["export", str(path)]) == 0
    assert "--trust-remote-code" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- any config
SIZE = st.one_of(st.integers(min_value=0, max_value=64), st.sampled_from([-1, 2**40, "8", None, 1.5, True, [4, 4]]))
FIELDS = {
    "kimi_linear": (KIMI_LINEAR, ["num_hidden_layers", "num_attention_heads", "num_experts", "num_experts_per_token",
                                  "num_shared_experts", "first_k_dense_replace", "moe_layer_freq", "kv_lora_rank",
                                  "moe_intermediate_size"]),
    "hunyuan_v1_moe": (HUNYUAN_A13B, ["num_hidden_layers", "num_experts", "moe_topk", "num_shared_expert",
                                      "moe_intermediate_size", "moe_layer_num_skipped", "num_key_value_heads"]),
    "hunyuan": (HUNYUAN_CLA, ["num_hidden_layers", "num_experts", "moe_topk", "cla_share_factor",
                              "intermediate_size", "num_key_value_heads", "num_attention_heads"]),
    "bailing_moe": (LING_MINI_2, ["num_hidden_layers", "num_experts", "num_experts_per_tok", "num_shared_experts",
                                  "first_k_dense_replace", "moe_shared_expert_intermediate_size", "head_dim"]),
    "step3p5": (STEP_3_5_FLASH, ["num_hidden_layers", "num_attention_heads", "num_attention_groups", "moe_num_experts",
                                 "moe_top_k", "share_expert_dim", "sliding_window", "num_nextn_predict_layers"]),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_any_config_of_these_families_reads_or_names_its_field(family: str, data: st.DataObject) -> None:
    base, fields = FIELDS[family]
    cfg = dict(base, hidden_size=data.draw(st.sampled_from([64, 128, 256])), vocab_size=1000)
    for key in data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=4, unique=True)):
        cfg[key] = data.draw(SIZE)
    read_or_named(cfg)
