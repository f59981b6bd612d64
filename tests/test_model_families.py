"""Model families read from their config.json: parameter counts against the published totals, KV bytes per
token against a hand calculation from the config, window-capped KV at 128k context, per-layer kinds, names that
resolve to presets, and arbitrary config input (a model or a PdagInputError naming the field, never a crash)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge import ROOT
from tools.core.errors import PdagInputError
from tools.core.models import from_hf_config, load_preset, preset_index
from tools.core.working import layer_kind

BF16 = 2
CTX_128K = 131072

# GLM-4.5 (zai-org/GLM-4.5, 355B total / 32B active per its model card): the config's fields as published
# (hidden 5120, 92 layers, 96 q / 8 KV heads of 128, dense width 12288, 160 experts of 1536 + 1 shared, top-8,
# first 3 layers dense, q/k/v bias, qk-norm, vocabulary 151552, one MTP layer); the same values appear in THUDM's
# slime launch script scripts/models/glm4.5-355B-A32B.sh.
GLM45 = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "hidden_size": 5120, "num_hidden_layers": 92,
    "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "attention_bias": True, "use_qk_norm": True, "vocab_size": 151552,
    "max_position_embeddings": 131072, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    "partial_rotary_factor": 0.5, "routed_scaling_factor": 2.5,
}


# Command R7B (CohereForAI/c4ai-command-r7b-12-2024), cohere2: the shapes as the checkpoint's module tree prints them
# in a stored copy of its 4-bit re-upload's card (https://hf-proxy.robus.us.kg/Svngoku/c4ai-command-r7b-12-2024-4bit/
# resolve/main/README.md: Embedding(256000, 4096), 32 decoder layers, q_proj 4096->4096, k/v_proj 4096->1024,
# gate/up_proj 4096->14336), with the window the transformers docs give (docs/source/en/model_doc/cohere2.md: three
# sliding layers of 4096 tokens, then one global layer) in the sliding_window_pattern form Hub configs still carry.
R7B = {
    "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 4096, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 256000,
    "sliding_window": 4096, "sliding_window_pattern": 4, "max_position_embeddings": 131072,
}
# ERNIE-4.5-21B-A3B, ernie4_5_moe: the values transformers' Ernie4_5_MoeConfig defaults to, which its docstring says
# "yield a similar configuration to that of baidu/ERNIE-4.5-21B-A3B-PT" (configuration_ernie4_5_moe.py @ 001f85b3);
# no stored copy of the checkpoint's own config.json was found.
ERNIE_21B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "vocab_size": 103424,
    "hidden_size": 2560, "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20,
    "num_key_value_heads": 4, "max_position_embeddings": 131072, "tie_word_embeddings": True, "use_bias": False,
    "moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64, "moe_num_shared_experts": 2,
    "moe_layer_start_index": 1, "moe_layer_end_index": -1, "moe_layer_interval": 1,
}


@pytest.mark.parametrize("key,tolerance", [
    ("llama-4-maverick", 0.01), ("deepseek-v3.1", 0.01), ("kimi-k2", 0.01),
    ("qwen3-32b", 0.01), ("gemma-3-27b", 0.01), ("gemma-2-27b", 0.01),
    ("phi-4", 0.001),  # 14.6595B counted vs 14.66B published (the card rounds to 14B)
    # Meta's 109B counts the vision encoder too (~0.8B), which pdag leaves out of the language model
    ("llama-4-scout", 0.015),
])
def test_parameter_count_matches_the_published_total(key: str, tolerance: float) -> None:
    spec = load_preset(key)
    assert spec.published_params
    assert spec.param_count() == pytest.approx(spec.published_params, rel=tolerance), key


def test_kimi_k2_total_matches_the_hub_count_not_the_rounded_1t() -> None:
    """The card rounds to 1T; the Hub's count (1026.5B, as a stored copy reproduces it) pins pdag's to 0.01 %."""
    spec = load_preset("kimi-k2")
    assert spec.published_params == 1026.5e9
    assert spec.param_count() == pytest.approx(1026.5e9, rel=1e-3)
    assert spec.param_count() != pytest.approx(1e12, rel=0.02)


@pytest.mark.parametrize("key", ["qwen3-0.6b", "qwen3-1.7b", "qwen3-32b"])
def test_qwen3_dense_sizes_match_the_cards_non_embedding_figure(key: str) -> None:
    """The cards round the totals to a tenth of a billion (0.6B, 1.7B); their non-embedding figures pin closer."""
    spec = load_preset(key)
    published = preset_index()[key]["published_non_embedding_params"]
    non_embedding = spec.param_count() - spec.embedding_params() - spec.lm_head_params()
    assert non_embedding == pytest.approx(published, rel=0.01)


def test_active_parameters_of_the_moe_flagships() -> None:
    for key in ("llama-4-scout", "llama-4-maverick", "kimi-k2", "deepseek-v3.1"):
        spec = load_preset(key)
        active = spec.active_param_count(include_embedding=not spec.published_active_excludes_embedding)
        assert active == pytest.approx(spec.published_active_params, rel=0.03), key


def test_glm45_reader_matches_the_published_total() -> None:
    spec = from_hf_config(GLM45)
    assert spec.param_count() == pytest.approx(355e9, rel=0.01)
    assert spec.active_param_count(include_embedding=False) == pytest.approx(32e9, rel=0.03)
    assert spec.moe is not None and spec.moe.moe_layers[0] == 3 and spec.moe.shared_expert_intermediate_size == 1536
    assert spec.mtp_layers == 1 and spec.qk_norm and spec.attention_bias and not spec.attention_out_bias


@pytest.mark.parametrize("key,config,hand", [
    # layers x 2 (K and V) x KV heads x head_dim x 2 bytes
    ("gemma-3-27b", None, 62 * 2 * 16 * 128 * BF16),
    ("gemma-2-27b", None, 46 * 2 * 16 * 128 * BF16),
    ("llama-4-scout", None, 48 * 2 * 8 * 128 * BF16),
    ("qwen3-32b", None, 64 * 2 * 8 * 128 * BF16),
    ("qwen3-0.6b", None, 28 * 2 * 8 * 128 * BF16),
    ("phi-4", None, 40 * 2 * 10 * 128 * BF16),
    # MLA: one latent (kv_lora_rank 512) plus its RoPE key (64) per layer
    ("kimi-k2", None, 61 * (512 + 64) * BF16),
    ("deepseek-v3.1", None, 61 * (512 + 64) * BF16),
    ("glm-4.5", GLM45, 92 * 2 * 8 * 128 * BF16),
    ("command-r7b", R7B, 32 * 2 * 8 * 128 * BF16),
    ("ernie-4.5-21b-a3b", ERNIE_21B, 28 * 2 * 4 * 128 * BF16),
])
def test_kv_bytes_per_token_by_hand(key: str, config: dict[str, Any] | None, hand: int) -> None:
    spec = from_hf_config(config) if config else load_preset(key)
    assert spec.kv_bytes_per_token(BF16) == hand


def test_gemma3_kv_at_128k_is_capped_on_the_sliding_layers() -> None:
    """Every sixth Gemma-3 layer is global (10 of 62); the other 52 keep 1,024 tokens, as vLLM's hybrid KV
    manager allocates them, not 128k."""
    spec = load_preset("gemma-3-27b")
    per_layer_token = 2 * 16 * 128 * BF16
    full = [i for i in range(62) if not spec.is_sliding_layer(i)]
    assert full == list(range(5, 62, 6))
    assert spec.kv_bytes(CTX_128K, BF16) == per_layer_token * (10 * CTX_128K + 52 * 1024)
    assert spec.kv_bytes(CTX_128K, BF16) < 0.2 * spec.kv_bytes_per_token(BF16) * CTX_128K


def test_gemma2_kv_at_128k_is_capped_on_the_sliding_layers() -> None:
    spec = load_preset("gemma-2-27b")
    assert spec.sliding_window_layers == tuple(range(0, 46, 2))  # even layers slide, odd layers are global
    assert spec.kv_bytes(CTX_128K, BF16) == 2 * 16 * 128 * BF16 * (23 * CTX_128K + 23 * 4096)


def test_llama4_chunked_layers_cap_at_the_chunk_and_nope_layers_stay_global() -> None:
    spec = load_preset("llama-4-scout")
    assert spec.local_attention == "chunked" and spec.sliding_window == 8192
    assert [i for i in range(48) if not spec.is_sliding_layer(i)] == list(range(3, 48, 4))
    assert spec.kv_bytes(CTX_128K, BF16) == 2 * 8 * 128 * BF16 * (12 * CTX_128K + 36 * 8192)
    assert any("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE" in n for n in spec.notes)
    maverick = load_preset("llama-4-maverick")  # interleave_moe_layer_step 2: MoE on odd layers, dense on even
    assert maverick.moe is not None and maverick.moe.moe_layers == tuple(range(1, 48, 2))
    assert maverick.ffn_params(0) == 3 * 5120 * 16384  # the dense layers' own width (intermediate_size_mlp)


def test_layer_kinds_cut_the_folds_where_the_pattern_changes() -> None:
    spec = load_preset("gemma-3-27b")
    kinds = [layer_kind(spec, i) for i in range(12)]
    assert kinds[:6] == [(False, True)] * 5 + [(False, False)]
    spec = load_preset("llama-4-maverick")
    # global (NoPE) layers 3, 7, ... are all odd, hence MoE: dense-chunked, MoE-chunked, MoE-global
    assert {layer_kind(spec, i) for i in range(48)} == {(False, True), (True, True), (True, False)}


def test_phi4_preset_has_no_window_and_untied_embeddings() -> None:
    """Its config states sliding_window 16384 = max_position_embeddings: a window as long as the context."""
    spec = load_preset("phi-4")
    assert spec.sliding_window is None and not spec.sliding_window_layers and not spec.tie_embeddings
    assert spec.kv_bytes(16384, BF16) == 40 * 2 * 10 * 128 * BF16 * 16384


def test_cohere2_reader_reads_the_window_pattern_one_norm_and_tied_embeddings() -> None:
    spec = from_hf_config(R7B)
    h, kv, inter, vocab = 4096, 8 * 128, 14336, 256000
    layer = 2 * h * h + 2 * h * kv + 3 * h * inter + h  # q, o; k, v; gate, up, down; one LayerNorm (parallel block)
    assert spec.tie_embeddings and spec.norms_per_layer == 1
    assert spec.param_count() == vocab * h + 32 * layer + h
    # the card's "7 billion parameters" is the non-embedding count (6.98B); the tied 1.05B embedding makes 8.03B
    assert spec.param_count() - spec.embedding_params() == pytest.approx(7e9, rel=0.01)
    full = [i for i in range(32) if not spec.is_sliding_layer(i)]
    assert full == list(range(3, 32, 4)) and spec.sliding_window == 4096
    assert spec.kv_bytes(CTX_128K, BF16) == 2 * kv * BF16 * (8 * CTX_128K + 24 * 4096)
    # the same pattern stated as layer_types, as newer Hub configs do
    typed = dict(R7B, layer_types=["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(32)])
    del typed["sliding_window_pattern"]
    assert from_hf_config(typed).sliding_window_layers == spec.sliding_window_layers
    assert from_hf_config({k: v for k, v in R7B.items() if k != "model_type"}).model_type == "cohere2"


def test_ernie45_moe_reader_places_dense_and_moe_layers_from_the_config() -> None:
    spec = from_hf_config(ERNIE_21B)
    h, vocab, expert = 2560, 103424, 3 * 2560 * 1536
    attn = 2 * h * h + 2 * h * 4 * 128
    moe_layer = attn + 2 * h + 64 * expert + 3 * h * (2 * 1536) + h * 64 + 64  # routed, 2 shared, router + bias
    dense_layer = attn + 2 * h + 3 * h * 12288
    assert spec.moe is not None and spec.moe.moe_layers == tuple(range(1, 28))  # moe_layer_start_index 1
    assert spec.param_count() == vocab * h + dense_layer + 27 * moe_layer + h
    # published 21B total / 3B active (transformers model_doc/ernie4_5_moe.md): pdag's 21.83B is 3.9 % over the
    # rounded total; active 3.35B counts the tied 0.26B LM head, 3.09B without it
    assert spec.param_count() == pytest.approx(21e9, rel=0.05)
    assert spec.active_param_count() - vocab * h == pytest.approx(3e9, rel=0.05)
    spaced = from_hf_config(dict(ERNIE_21B, moe_layer_interval=2, moe_layer_end_index=20))
    assert spaced.moe is not None and spaced.moe.moe_layers == tuple(range(1, 21, 2))
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(ERNIE_21B, moe_k=65))
    assert info.value.field == "hf_config.moe_k"


def test_an_unknown_type_with_ernie_style_experts_is_refused_not_read_dense() -> None:
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(ERNIE_21B, model_type="ernie4_5_vl_moe"))
    assert info.value.field == "hf_config.moe_num_experts"


def test_multimodal_wrappers_say_the_vision_encoder_is_left_out() -> None:
    for key in ("gemma-3-27b",):
        assert any("vision encoder" in n for n in load_preset(key).notes)
    mistral3 = {"model_type": "mistral3", "vision_config": {"hidden_size": 1024}, "text_config": {
        "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 32768, "vocab_size": 131072, "max_position_embeddings": 131072,
        "sliding_window": None}}
    spec = from_hf_config(mistral3)
    assert spec.model_type == "mistral" and any("vision encoder" in n for n in spec.notes)
    assert spec.param_count() == pytest.approx(23.6e9, rel=0.01)  # Mistral-Small-3.1's language model


@pytest.mark.parametrize("name,key", [
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"), ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek-v3.1"), ("Qwen/Qwen3-32B-FP8", "qwen3-32b"),
    ("Qwen/Qwen3-32B-AWQ", "qwen3-32b"), ("nvidia/DeepSeek-R1-FP4", "deepseek-r1"),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick"), ("google/gemma-3-27b-it", "gemma-3-27b"),
    ("microsoft/phi-4", "phi-4"),
])
def test_hugging_face_repo_ids_resolve_to_presets(name: str, key: str) -> None:
    assert load_preset(name).id == key


def test_unknown_model_says_a_config_can_be_passed() -> None:
    with pytest.raises(PdagInputError) as info:
        load_preset("someone/Unknown-Model-70B")
    assert "--model path/to/config.json" in (info.value.allowed or "") and "hf_config" in (info.value.allowed or "")


@pytest.mark.parametrize("model_type,field", [
    ("minimax_m1", "attn_type_list"), ("falcon_h1", "mamba_n_heads"), ("minimax", "layer_types")])
def test_a_config_relabelled_as_a_stateful_family_is_refused_by_the_field_it_lacks(model_type: str, field: str) -> None:
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(GLM45, model_type=model_type))
    assert info.value.field == f"hf_config.{field}"


def test_a_linear_attention_layer_type_is_refused_not_priced_as_full() -> None:
    cfg = dict(load_preset_config("qwen3-32b"), layer_types=["linear_attention"] + ["full_attention"] * 63)
    with pytest.raises(PdagInputError) as info:
        from_hf_config(cfg)
    assert info.value.field == "hf_config.layer_types"


def load_preset_config(key: str) -> dict[str, Any]:
    with open(ROOT / "models" / preset_index()[key]["file"], encoding="utf-8") as f:
        return json.load(f)


_json = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**12) | st.floats(allow_nan=False)
                     | st.text(max_size=20), lambda inner: st.lists(inner, max_size=5)
                     | st.dictionaries(st.text(max_size=12), inner, max_size=5), max_leaves=20)
_keys = st.sampled_from(["model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                         "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "sliding_window",
                         "layer_types", "text_config", "n_routed_experts", "moe_intermediate_size",
                         "interleave_moe_layer_step", "attention_chunk_size", "no_rope_layers",
                         "sliding_window_pattern", "first_k_dense_replace", "kv_lora_rank", "mlp_only_layers",
                         "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "num_kv_shared_layers",
                         "hidden_size_per_layer_input", "enable_moe_block", "num_experts", "top_k_experts"])


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(["gemma-3-27b", "llama-4-scout", "kimi-k2", "qwen3-32b", "gemma-2-27b", "R7B",
                             "ERNIE_21B", "GEMMA4_E2B", "GEMMA4_26B_A4B"]),
       edits=st.dictionaries(_keys, _json, max_size=4), extra=st.dictionaries(st.text(max_size=8), _json, max_size=3))
def test_any_config_gives_a_model_or_a_named_input_error(base: str, edits: dict[str, Any],
                                                         extra: dict[str, Any]) -> None:
    named = {"R7B": R7B, "ERNIE_21B": ERNIE_21B, "GEMMA4_E2B": GEMMA4_E2B, "GEMMA4_26B_A4B": GEMMA4_26B_A4B}
    cfg = json.loads(json.dumps(named[base])) if base.isupper() else load_preset_config(base)
    target = cfg["text_config"] if "text_config" in cfg and "text_config" not in edits else cfg
    target.update(extra)
    target.update(edits)
    try:
        spec = from_hf_config(cfg)
    except PdagInputError as exc:
        assert exc.field.startswith("hf_config")
    else:
        assert spec.param_count() > 0 and spec.kv_bytes(1000, BF16) >= 0


# ----------------------------------------------------------------------------------------------- GLM-4.7-Flash
GLM47_FLASH_COOKBOOK = "python -m sglang.launch_server --model zai-org/GLM-4.7-Flash --attention-backend triton --tp 1"


def test_glm_4_7_flash_is_deepseek_mla_with_glms_moe() -> None:
    """glm4_moe_lite: 30B total in SGLang's cookbook (pdag 29.94B); one MLA latent of 512 + 64 per token and layer;
    the first layer dense, the other 46 MoE with one shared expert and a routing bias per expert."""
    spec = load_preset("zai-org/GLM-4.7-Flash")
    assert spec.id == "glm-4.7-flash" and spec.attention == "mla" and spec.family == "deepseek"
    assert spec.param_count() == pytest.approx(30e9, rel=0.01)
    assert spec.kv_bytes_per_token(BF16) == 47 * (512 + 64) * BF16 == 54_144
    assert spec.moe is not None and spec.moe.moe_layers == tuple(range(1, 47)) and spec.moe.router_bias
    assert spec.shared_expert_params() == 3 * 2048 * 1536
    # transformers' own spelling of the layer pattern reads the same model; a wrong entry is named
    cfg = load_preset_config("glm-4.7-flash")
    typed = {**cfg, "mlp_layer_types": ["dense"] + ["sparse"] * 46}
    assert from_hf_config(typed).param_count() == spec.param_count()
    with pytest.raises(PdagInputError) as err:
        from_hf_config({**cfg, "mlp_layer_types": ["moe"] * 47})
    assert err.value.field == "hf_config.mlp_layer_types"


def test_glm_4_7_flash_cookbook_command_imports_validates_estimates_exports(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from tools.cli import main

    assert main(["import", GLM47_FLASH_COOKBOOK, "--gpu", "b200"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["model"] == "glm-4.7-flash"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    for command in ("validate", "estimate"):
        assert main([command, str(path)]) == 0
    capsys.readouterr()
    assert main(["export", str(path)]) == 0
    assert "--model-path zai-org/GLM-4.7-Flash --tp-size 1" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- Gemma-4
# google/gemma-4-31B-it's config.json as transformers 5.7 loads it (a third-party printout of Gemma4Config; the text
# fields here are copied from it, the vision tower reduced to its model_type). The preset gemma-4-31b holds the
# config as NVIDIA's NVFP4 release copies it; tests/test_presets_heldout.py pins it.
GEMMA4_31B = {
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "tie_word_embeddings": True,
    "text_config": {
        "attention_bias": False, "attention_k_eq_v": True, "enable_moe_block": False, "final_logit_softcapping": 30.0,
        "global_head_dim": 512, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 5376,
        "hidden_size_per_layer_input": 0, "intermediate_size": 21504,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10, "max_position_embeddings": 262144,
        "model_type": "gemma4_text", "num_attention_heads": 32, "num_experts": None, "num_global_key_value_heads": 4,
        "num_hidden_layers": 60, "num_key_value_heads": 16, "num_kv_shared_layers": 0, "sliding_window": 1024,
        "tie_word_embeddings": True, "use_double_wide_mlp": False, "vocab_size": 262144},
    "vision_config": {"model_type": "gemma4_vision"},
}
GEMMA4_COOKBOOK = "sglang serve --model-path google/gemma-4-31B-it --tp 2"


def test_gemma_4_global_layers_carry_their_own_kv_shape() -> None:
    """30.7B (the published language-model figure; the ~550M vision tower left out): 50 sliding layers with 16 KV
    heads of 256, 10 global ones with 4 KV heads of 512 whose values come from the key projection (no v_proj)."""
    spec = from_hf_config(GEMMA4_31B)
    assert spec.param_count() == pytest.approx(30.7e9, rel=0.01)
    h = 5376
    sliding = 2 * h * 32 * 256 + 2 * h * 16 * 256 + 2 * 256
    full = 2 * h * 32 * 512 + h * 4 * 512 + 2 * 512  # q and o, one k (no v), q/k norms
    assert spec.attention_params_per_layer(0) == sliding and spec.attention_params_per_layer(5) == full
    assert spec.kv_shape(0) == (16, 256) and spec.kv_shape(5) == (4, 512)
    # KV per token: 50 x 2 x 16 x 256 + 10 x 2 x 4 x 512 elements; at 128k the sliding layers keep 1,024 tokens
    assert spec.kv_bytes_per_token(BF16) == (50 * 2 * 16 * 256 + 10 * 2 * 4 * 512) * BF16 == 901_120
    assert spec.kv_bytes(CTX_128K, BF16) == (50 * 1024 * 16_384 + 10 * CTX_128K * 8_192)


# Gemma-4 E2B: the text fields several third-party readers copy from google/gemma-4-E2B-it's config.json
GEMMA4_E2B = {"model_type": "gemma4", "tie_word_embeddings": True, "text_config": {
    "model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 35, "intermediate_size": 6144,
    "num_attention_heads": 8, "head_dim": 256, "global_head_dim": 512, "vocab_size": 262144, "num_key_value_heads": 1,
    "num_kv_shared_layers": 20, "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144,
    "sliding_window": 512, "max_position_embeddings": 131072, "final_logit_softcapping": 30.0, "attention_bias": False,
    "attention_k_eq_v": False, "use_double_wide_mlp": True, "enable_moe_block": False, "tie_word_embeddings": True,
    "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7}}


def test_gemma_4_e2b_per_layer_embeddings_and_shared_kv() -> None:
    """2.3B effective parameters as published (5.1B with per-layer embeddings and the audio and vision towers): the
    262,144 x 35 x 256 per-layer table is what the effective count leaves out. The last 20 layers keep no KV (they
    read the last earlier layer of their kind) and have a 12,288-wide FFN; 15 layers' KV per token remains."""
    spec = from_hf_config(GEMMA4_E2B)
    table = 262_144 * 35 * 256
    assert spec.param_count() - table == pytest.approx(2.3e9, rel=0.01)
    assert spec.ffn_width(14) == 6144 and spec.ffn_width(15) == 12288 and spec.is_kv_shared(15)
    own = [i for i in range(35) if not spec.is_kv_shared(i)]
    assert spec.kv_bytes_per_token(BF16) == sum(2 * 1 * (512 if i % 5 == 4 else 256) for i in own) * BF16 == 18_432
    assert spec.kv_bytes(CTX_128K, BF16) == (12 * 512 * 1024 + 3 * CTX_128K * 2048)
    with pytest.raises(PdagInputError) as err:
        from_hf_config({**GEMMA4_E2B, "text_config": {**GEMMA4_E2B["text_config"], "num_kv_shared_layers": 35}})
    assert err.value.field == "hf_config.text_config.num_kv_shared_layers"


def test_gemma_4_e2b_memory_and_search_follow_each_layer() -> None:
    from tools.core.memory import memory_report
    from tools.core.plan import parse_plan
    from tools.estimate.core import estimate_performance
    from tools.estimate.fast import FastEstimator

    plan = {"model": {"hf_config": GEMMA4_E2B}, "hardware": {"gpu": "h200", "num_gpus": 2}, "parallel": {"pp": 2},
            "workload": {"batch_size": 8, "input_len": 4096, "output_len": 256}}
    spec = from_hf_config(GEMMA4_E2B)
    report = memory_report(parse_plan(plan))
    assert report.kv_cache_bytes == pytest.approx(8 * spec.kv_bytes(4096 + 256, BF16))
    full = estimate_performance(plan)
    fast = FastEstimator(parse_plan(plan)).headline(8)
    assert fast.ttft_ms == pytest.approx(full.prefill_latency_ms, rel=1e-9)
    assert fast.tpot_ms == pytest.approx(full.decode_latency_ms_per_token, rel=1e-9)


# Gemma-4 26B-A4B: the text fields a third-party card copies from google/gemma-4-26B-A4B-it's config.json
GEMMA4_26B_A4B = {
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "text_config": {"model_type": "gemma4_text", "num_hidden_layers": 30, "hidden_size": 2816,
                    "num_attention_heads": 16, "num_key_value_heads": 8, "num_global_key_value_heads": 2,
                    "head_dim": 256, "global_head_dim": 512, "intermediate_size": 2112, "moe_intermediate_size": 704,
                    "num_experts": 128, "top_k_experts": 8, "enable_moe_block": True, "sliding_window": 1024,
                    "max_position_embeddings": 262144, "attention_k_eq_v": True, "vocab_size": 262144,
                    "tie_word_embeddings": True,
                    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5}}


def test_gemma_4_moe_block_runs_beside_the_mlp() -> None:
    """25.2B total and 3.8B active as published: every layer's dense MLP (2112) runs beside 128 GELU experts of 704,
    top-8, read as an always-on shared expert; the router adds a per-expert scale and a hidden-sized input scale."""
    spec = from_hf_config(GEMMA4_26B_A4B)
    assert spec.param_count() == pytest.approx(25.2e9, rel=0.01)
    assert spec.active_param_count() == pytest.approx(3.8e9, rel=0.01)
    assert spec.moe is not None and spec.moe.shared_expert_intermediate_size == 2112
    assert spec.router_params() == 2816 * 128 + 128 + 2816
    assert spec.layer_norm_params(0) == 7 * 2816
    assert spec.kv_bytes_per_token(BF16) == (25 * 2 * 8 * 256 + 5 * 2 * 2 * 512) * BF16 == 225_280


def test_gemma_4_memory_and_tp_split_each_layer_kind(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """At tp 2 each GPU holds half of both kinds' KV heads (8 of 16, 2 of 4); at tp 8 the 4 global KV heads are
    replicated (the rule says so) while the 16 sliding ones still split. SGLang's cookbook line for the 31B goes
    through import, validate, estimate and export with the config."""
    from tools.cli import main
    from tools.core.memory import memory_report
    from tools.core.plan import parse_plan
    from tools.rules.validate import validate_dag

    plan = {"model": {"hf_config": GEMMA4_31B}, "hardware": {"gpu": "h200", "num_gpus": 2}, "parallel": {"tp": 2},
            "workload": {"batch_size": 4, "input_len": 8192, "output_len": 256}}
    ctx = 8192 + 256
    per_seq = (50 * 1024 * 2 * 8 * 256 + 10 * ctx * 2 * 2 * 512) * BF16
    assert memory_report(parse_plan(plan)).kv_cache_bytes == pytest.approx(4 * per_seq)
    wide = validate_dag({**plan, "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8}})
    assert wide.valid and any(v.rule_id == "TP-KV-REPLICATED" for v in wide.violations)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(GEMMA4_31B), encoding="utf-8")
    assert main(["import", GEMMA4_COOKBOOK, "--gpu", "h200", "--hf-config", str(cfg)]) == 0
    path = tmp_path / "plan.json"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    for command in ("validate", "estimate"):
        assert main([command, str(path)]) == 0
    capsys.readouterr()
    assert main(["export", str(path)]) == 0
    assert "--model-path google/gemma-4-31B-it --tp-size 2" in capsys.readouterr().out


def test_gemma_4_search_prices_each_layer_kind_as_the_full_estimate_does() -> None:
    from tools.core.plan import parse_plan
    from tools.estimate.core import estimate_performance
    from tools.estimate.fast import FastEstimator

    plan = {"model": {"hf_config": GEMMA4_31B}, "hardware": {"gpu": "h200", "num_gpus": 4},
            "parallel": {"tp": 2, "pp": 2}, "workload": {"batch_size": 8, "input_len": 8192, "output_len": 256}}
    full = estimate_performance(plan)
    fast = FastEstimator(parse_plan(plan)).headline(8)
    assert fast.ttft_ms == pytest.approx(full.prefill_latency_ms, rel=1e-9)
    assert fast.tpot_ms == pytest.approx(full.decode_latency_ms_per_token, rel=1e-9)


def test_tp_must_split_both_kv_head_counts() -> None:
    """TP-KV-HEADS-DIVISIBLE judges the global layers' own KV head count too: 3 global KV heads neither divide by
    nor divide tp 4, although the sliding layers' 8 do; tp 3 is refused by the 8, and the fix lands on a degree
    both accept."""
    from tools.repair.autofix import autofix_dag
    from tools.rules.validate import validate_dag

    text = {**GEMMA4_31B["text_config"], "num_attention_heads": 24, "num_key_value_heads": 8,
            "num_global_key_value_heads": 3, "num_hidden_layers": 12, "layer_types": (["sliding_attention"] * 5 +
                                                                                       ["full_attention"]) * 2}
    model = {"hf_config": {**GEMMA4_31B, "text_config": text}}
    for tp, kv in ((4, "3"), (3, "8")):
        plan = {"model": model, "hardware": {"gpu": "h200", "num_gpus": tp}, "parallel": {"tp": tp}}
        found = [v for v in validate_dag(plan).violations if v.rule_id == "TP-KV-HEADS-DIVISIBLE"]
        assert found and f"{kv} KV heads" in found[0].message
    fixed = autofix_dag({"model": model, "hardware": {"gpu": "h200", "num_gpus": 4}, "parallel": {"tp": 4}})
    tp = fixed.plan["parallel"]["tp"]
    assert all(k % tp == 0 or tp % k == 0 for k in (8, 3)) and 24 % tp == 0


def test_new_family_measurements_load_and_fit_their_gpus() -> None:
    """The SGLang cookbook's GLM-4.7-Flash and Gemma-4 points (kept beside the scored corpus, scored by pdag accuracy
    on their own) load as measurements whose plans fit the GPUs they ran on."""
    from tools.calibration.accuracy import load_measurements, point_plan
    from tools.estimate.core import estimate_performance

    pts = load_measurements(ROOT.parent / "evals" / "new_families" / "glm47_flash_sglang_cookbook.json")
    assert len(pts) == 19 and {p["model"] for p in pts} == {"glm-4.7-flash"}
    assert estimate_performance(plan=point_plan(pts[0])).memory.fits
    gemma = load_measurements(ROOT.parent / "evals" / "new_families" / "gemma4_sglang_cookbook.json")
    assert len(gemma) == 25
    assert all(p["model"]["hf_config"]["text_config"]["model_type"] == "gemma4_text" for p in gemma)
    assert all(estimate_performance(plan=point_plan(p)).memory.fits for p in gemma if p["batch_size"] == 1)
