"""Today's flagships: a model with no preset imported by its config.json (CLI --hf-config, MCP hf_config), the
readers for gemma, qwen2_moe, olmoe, phimoe and minimax_m2 and the multimodal wrappers (kimi_k25, qwen3_vl_moe)
pinned to published totals and to KV bytes counted by hand, and the checkpoints of the new presets resolving."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from knowledge import ROOT
from tools.cli import main
from tools.core.errors import PdagInputError
from tools.core.formats import format_of_checkpoint
from tools.core.models import from_hf_config, load_preset
from tools.core.plan import parse_plan
from tools.core.quantization import experts_only, weight_bytes
from tools.engines.launch import export_plan, import_command, import_deployment
from tools.estimate.core import estimate_performance
from tools.rules.validate import validate_dag

BF16 = 2
# sgl-cookbook's MiniMax-M2 recipe (docs/autoregressive/MiniMax/MiniMax-M2.md) served with MiniMax-M2.1, which has
# no preset (MiniMax-M2 now has one); the user brings the M2-series config, here MiniMax-M2.5's.
M2_COMMAND = "python -m sglang.launch_server --model-path MiniMaxAI/MiniMax-M2.1 --tp-size 4"
M2_REPO = "MiniMaxAI/MiniMax-M2.1"


def m2_config() -> dict[str, Any]:
    return json.loads((ROOT / "models" / "minimax-m2.5.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------ a model with no preset, by its config
def test_a_recipe_for_a_model_with_no_preset_imports_validates_estimates_and_exports_with_its_config() -> None:
    result = import_command(M2_COMMAND, gpu="mi300x", hf_config=m2_config())
    plan = result.plan
    assert plan["model"]["hf_config"]["model_type"] == "minimax_m2" and plan["checkpoint"] == M2_REPO
    assert plan["hardware"]["num_gpus"] == 4 and plan["parallel"]["tp"] == 4
    assert any("hf_config" in n for n in result.notes)
    assert not [v for v in validate_dag(plan).violations if v.severity == "error"]
    assert estimate_performance(plan=plan).tpot_ms > 0
    command = export_plan(plan, "sglang").command
    assert f"--model-path {M2_REPO} " in command  # the export serves the user's checkpoint, not a preset's repo


def test_without_a_config_the_error_names_the_closest_presets_and_the_way_to_bring_one() -> None:
    with pytest.raises(PdagInputError) as err:
        import_command(M2_COMMAND, gpu="mi300x")
    assert err.value.field == "command.model" and M2_REPO in err.value.problem
    assert "minimax-m2.5" in str(err.value.allowed) and "--hf-config" in str(err.value.allowed)
    assert "hf_config" in str(err.value.allowed)


def test_a_bad_config_is_named_by_its_field() -> None:
    bad = {**m2_config(), "num_local_experts": 4}  # fewer experts than experts per token (8)
    with pytest.raises(PdagInputError) as err:
        import_command(M2_COMMAND, gpu="mi300x", hf_config=bad)
    assert err.value.field == "hf_config.num_experts_per_tok"
    with pytest.raises(PdagInputError) as err:
        import_command(M2_COMMAND, gpu="mi300x", hf_config=["not", "a", "config"])  # type: ignore[arg-type]
    assert err.value.field == "hf_config"


def test_cli_import_with_hf_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(m2_config()), encoding="utf-8")
    assert main(["import", M2_COMMAND, "--gpu", "mi300x", "--hf-config", str(path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["checkpoint"] == M2_REPO and plan["model"]["hf_config"]["num_local_experts"] == 256
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan), encoding="utf-8")
    assert main(["export", str(plan_file), "--engine", "sglang"]) == 0
    assert M2_REPO in capsys.readouterr().out


def test_cli_import_without_config_says_how_to_bring_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", M2_COMMAND, "--gpu", "mi300x"]) == 2
    err = capsys.readouterr().err
    assert "command.model" in err and "--hf-config" in err and "Traceback" not in err


def test_mcp_import_takes_hf_config() -> None:
    from mcp import Client

    from server import create_server

    async def call(args: dict[str, Any]) -> tuple[bool, Any]:
        async with Client(create_server(), mode="legacy") as c:
            r = await c.call_tool("import_deployment", args)
        return (not r.is_error), (r.structured_content if not r.is_error else r.content[0].text)

    ok, data = anyio.run(call, {"command": M2_COMMAND, "gpu": "mi300x", "hf_config": m2_config()})
    assert ok and data["valid"] and data["plan"]["checkpoint"] == M2_REPO
    assert data["plan"] == import_deployment(M2_COMMAND, gpu="mi300x", hf_config=m2_config()).plan
    ok, text = anyio.run(call, {"command": M2_COMMAND, "gpu": "mi300x"})
    assert not ok and "command.model" in text and "hf_config" in text and "Traceback" not in text


# ------------------------------------------------------------------ readers: published totals, KV by hand
# Public configs (the fields each reader uses, as published):
# google/gemma-7b config.json (also in transformers-based test fixtures): 28 layers, 16 heads of 256, GeGLU 24576,
# vocabulary 256000, tied embeddings; Gemma report (arXiv 2403.08295) Table 2: 786M embedding + 7751M others.
GEMMA_7B = {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "head_dim": 256, "hidden_size": 3072,
            "intermediate_size": 24576, "max_position_embeddings": 8192, "num_attention_heads": 16,
            "num_hidden_layers": 28, "num_key_value_heads": 16, "vocab_size": 256000}
# Qwen/Qwen2-57B-A14B config.json as NVIDIA TensorRT-LLM's tests copy it (tests/unittest/_torch/modeling/
# test_modeling_qwen_moe.py, QWEN2_57B_A14B_CONFIG); the Hub counts 57.4B.
QWEN2_57B = {"architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_size": 3584,
             "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
             "model_type": "qwen2_moe", "moe_intermediate_size": 2560, "num_attention_heads": 28, "num_experts": 64,
             "num_experts_per_tok": 8, "num_hidden_layers": 28, "num_key_value_heads": 4,
             "shared_expert_intermediate_size": 20480, "sliding_window": 131072, "tie_word_embeddings": False,
             "use_sliding_window": False, "vocab_size": 151936}
# allenai/OLMoE-1B-7B-0924 config.json (the fields a public OLMoE adapter's tests copy); the OLMoE paper (arXiv
# 2409.02060) and the Hub: 6.92B total, 1.28B active.
OLMOE = {"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
         "num_experts": 64, "num_experts_per_tok": 8, "num_attention_heads": 16, "num_key_value_heads": 16,
         "vocab_size": 50304, "tie_word_embeddings": False}
# microsoft/Phi-3.5-MoE-instruct config.json (as mlx-community's Phi-3.5-MoE checkpoint config is quoted in public
# tests); the card: 16 experts of 3.8B, 6.6B active; the Hub counts 41.9B.
PHIMOE = {"model_type": "phimoe", "vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 16,
          "num_experts_per_tok": 2, "max_position_embeddings": 131072, "attention_bias": True, "lm_head_bias": True}


@pytest.mark.parametrize("name,config,total,active", [
    ("gemma-7b", GEMMA_7B, 8.537e9, None),
    ("qwen2-57b-a14b", QWEN2_57B, 57.4e9, None),
    ("olmoe-1b-7b", OLMOE, 6.92e9, 1.28e9),
    ("phi-3.5-moe", PHIMOE, 41.9e9, 6.6e9),
])
def test_new_readers_match_the_published_totals(name: str, config: dict[str, Any], total: float,
                                                 active: float | None) -> None:
    spec = from_hf_config(config)
    assert spec.param_count() == pytest.approx(total, rel=0.01), name
    if active is not None:
        assert spec.active_param_count() == pytest.approx(active, rel=0.01), name


@pytest.mark.parametrize("key,total", [
    ("minimax-m2.5", 230e9), ("minimax-m2.7", 230e9), ("kimi-k2.5", 1026.5e9), ("qwen3-vl-235b-a22b", 235e9),
    ("glm-4.7", 355e9),
])
def test_new_presets_match_the_published_totals(key: str, total: float) -> None:
    spec = load_preset(key)
    assert spec.param_count() == pytest.approx(total, rel=0.01), key
    assert spec.published_params == total


@pytest.mark.parametrize("name,config,hand", [
    # layers x 2 (K and V) x KV heads x head_dim x 2 bytes
    ("gemma-7b", GEMMA_7B, 28 * 2 * 16 * 256 * BF16),
    ("qwen2-57b-a14b", QWEN2_57B, 28 * 2 * 4 * 128 * BF16),
    ("olmoe-1b-7b", OLMOE, 16 * 2 * 16 * 128 * BF16),
    ("phi-3.5-moe", PHIMOE, 32 * 2 * 8 * 128 * BF16),
    ("minimax-m2.5", None, 62 * 2 * 8 * 128 * BF16),
    ("minimax-m2.7", None, 62 * 2 * 8 * 128 * BF16),
    ("kimi-k2.5", None, 61 * (512 + 64) * BF16),  # MLA: the latent plus its RoPE key
    ("qwen3-vl-235b-a22b", None, 94 * 2 * 4 * 128 * BF16),
    ("glm-4.7", None, 92 * 2 * 8 * 128 * BF16),
])
def test_kv_bytes_per_token_by_hand(name: str, config: dict[str, Any] | None, hand: int) -> None:
    spec = from_hf_config(config) if config else load_preset(name)
    assert spec.kv_bytes_per_token(BF16) == hand


def test_minimax_m2_reading() -> None:
    """Full attention everywhere, 256 routed experts with a routing bias and no shared expert, the q/k norms over
    the whole projections, three MTP modules not counted (vLLM minimax_m2.py)."""
    spec = load_preset("minimax-m2.5")
    assert spec.model_type == "minimax_m2" and spec.sliding_window is None and spec.attention == "gqa"
    assert spec.moe is not None and len(spec.moe.moe_layers) == 62 and spec.moe.router_bias
    assert spec.moe.num_shared_experts == 0 and spec.qk_norm_full and not spec.qk_norm and spec.mtp_layers == 3
    assert spec.checkpoint_format == "fp8" and spec.fp8_block_scaled
    assert load_preset("minimax-m2.7").max_position_embeddings == 204800


def test_minimax_lightning_layers_are_refused_not_priced_as_full_attention() -> None:
    cfg = m2_config()
    cfg["attn_type_list"] = [0] * 7 + [1] + [1] * 54
    with pytest.raises(PdagInputError) as err:
        from_hf_config(cfg)
    assert err.value.field == "hf_config.attn_type_list"


def test_glm4_dense_reading_counted_by_hand() -> None:
    """GLM-4-0414's decoder: q/k/v biases without an o_proj bias and four norms per layer (vLLM glm4.py); the
    count is checked term by term, since no stored copy of a glm4 checkpoint's config.json was found."""
    h, layers, heads, kv, d, inter, vocab = 4096, 40, 32, 2, 128, 13696, 151552
    spec = from_hf_config({"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "hidden_size": h,
                           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
                           "head_dim": d, "intermediate_size": inter, "vocab_size": vocab, "attention_bias": True,
                           "tie_word_embeddings": False, "partial_rotary_factor": 0.5})
    attention = h * heads * d * 2 + h * kv * d * 2 + (heads + 2 * kv) * d
    layer = attention + 3 * h * inter + 4 * h
    assert spec.param_count() == 2 * vocab * h + layers * layer + h
    assert spec.kv_bytes_per_token(BF16) == layers * 2 * kv * d * BF16


@pytest.mark.parametrize("config", [GEMMA_7B, OLMOE, PHIMOE])
def test_a_window_these_readers_cannot_place_is_refused_not_dropped(config: dict[str, Any]) -> None:
    with pytest.raises(PdagInputError) as err:
        from_hf_config({**config, "sliding_window": 4096, "max_position_embeddings": 131072})
    assert err.value.field == "hf_config.sliding_window"
    long_window = {**config, "sliding_window": 131072, "max_position_embeddings": 131072}
    assert from_hf_config(long_window).sliding_window is None  # a window as long as the context changes nothing


def test_qwen2_moe_shared_expert_and_its_gate() -> None:
    spec = from_hf_config(QWEN2_57B)
    assert spec.moe is not None and spec.moe.shared_expert_intermediate_size == 20480
    assert spec.moe.shared_expert_gate and spec.router_params() == 3584 * 64 + 3584
    assert spec.attention_bias and not spec.attention_out_bias
    with pytest.raises(PdagInputError) as err:
        from_hf_config({**QWEN2_57B, "use_sliding_window": True, "sliding_window": 4096})
    assert err.value.field == "hf_config.use_sliding_window"


def test_wrappers_are_read_through_text_config_and_say_the_vision_tower_is_left_out() -> None:
    kimi = load_preset("kimi-k2.5")
    assert kimi.attention == "mla" and kimi.checkpoint_format == "int4" and kimi.max_position_embeddings == 262144
    assert any("vision" in n for n in kimi.notes)
    # its compressed-tensors ignore list keeps attention, shared experts and dense MLPs in 16 bits
    plan = parse_plan({"model": "kimi-k2.5", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8}})
    assert experts_only(plan) and weight_bytes(plan, "attention") == 2 and weight_bytes(plan, "expert") < 1
    vl = load_preset("qwen3-vl-235b-a22b")
    assert vl.model_type == "qwen3_moe" and vl.qk_norm and any("qwen3_vl_moe_text" in n for n in vl.notes)
    assert vl.max_position_embeddings == 262144


def test_a_flat_qwen2_5_vl_config_reads_as_its_qwen2_decoder() -> None:
    """Qwen2.5-VL keeps the text fields at the top of its config beside vision_config; its language model is Qwen2
    (vLLM builds it as Qwen2ForCausalLM): the same count as the qwen2 reading, and the vision tower said left out."""
    text = json.loads((ROOT / "models" / "qwen2.5-72b.json").read_text(encoding="utf-8"))
    vl = {**text, "model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
          "vision_config": {"depth": 32, "hidden_size": 1280}}
    spec, base = from_hf_config(vl), from_hf_config(text)
    assert spec.param_count() == base.param_count() and spec.attention_bias and not spec.attention_out_bias
    assert any("vision" in n for n in spec.notes) and not any("vision" in n for n in base.notes)


# ------------------------------------------------------------------ checkpoints that resolve to the new presets
@pytest.mark.parametrize("repo,preset", [
    ("MiniMaxAI/MiniMax-M2.7", "minimax-m2.7"),
    ("nvidia/MiniMax-M2.5-NVFP4", "minimax-m2.5"),
    ("moonshotai/Kimi-K2.5", "kimi-k2.5"),
    ("moonshotai/Kimi-K2.6", "kimi-k2.5"),
    ("Qwen/Qwen3-VL-235B-A22B-Instruct", "qwen3-vl-235b-a22b"),
    ("amd/gpt-oss-120b-w-mxfp4-a-fp8", "gpt-oss-120b"),
    ("zai-org/GLM-4.7-FP8", "glm-4.7"),
])
def test_checkpoints_resolve(repo: str, preset: str) -> None:
    assert import_command(f"vllm serve {repo} -tp 8", gpu="h200").plan["model"] == preset
    assert load_preset(repo).id == preset


def test_a_quark_name_states_the_weights_first() -> None:
    """amd/gpt-oss-120b-w-mxfp4-a-fp8 stores MXFP4 weights (FP8 is the activations')."""
    assert format_of_checkpoint("amd/gpt-oss-120b-w-mxfp4-a-fp8") == "mxfp4"
    assert format_of_checkpoint("Qwen/Qwen3-32B-FP8") == "fp8"
    assert format_of_checkpoint("meta-llama/Llama-3.1-8B") is None
