"""This year's flagship presets copied from verbatim configs (Qwen3.5-397B-A17B, Qwen3-Next-80B-A3B, GLM-4.7,
MiniMax-M2, GLM-5.1):
parameter counts pinned to the published totals, KV and recurrent-state bytes to hand calculations from the
configs, the checkpoints (FP8, NVFP4, Instruct/Thinking) resolving to them, Kimi-K2-Thinking read as the INT4
checkpoint it is, and why vLLM's Kimi-K2 DP16 recipe cannot fit an H800."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge import ROOT
from tools.core.errors import PdagInputError
from tools.core.memory import memory_report
from tools.core.models import from_hf_config, load_preset
from tools.core.plan import parse_plan
from tools.core.quantization import experts_only, weights_of
from tools.engines.launch import import_command
from tools.rules.validate import validate_dag

BF16, FP32 = 2, 4


def config(name: str) -> dict[str, Any]:
    return json.loads((ROOT / "models" / f"{name}.json").read_text(encoding="utf-8"))


def deltanet_state(k_heads: int, v_heads: int, dim: int, kernel: int, ssm_bytes: int) -> int:
    """One gated DeltaNet layer's state per request, as vLLM shapes it: the conv window over q, k and v in 16 bits
    plus the recurrent state (value heads x value dim x key dim) at the SSM dtype."""
    conv = (2 * k_heads * dim + v_heads * dim) * (kernel - 1) * BF16
    return conv + v_heads * dim * dim * ssm_bytes


@pytest.mark.parametrize("key,total", [
    ("qwen3.5-397b-a17b", 397e9),  # vLLM's Qwen3.5 recipe: 397B total
    ("qwen3-next-80b-a3b", 80e9),  # transformers' Qwen3-Next page: 80B total
    ("glm-4.7", 355e9),  # GLM-4.5 report: 355B (the same shapes)
    ("minimax-m2", 230e9),  # MiniMax-M2's README: 230B total
    ("glm-5.1", 744e9),  # vLLM's GLM-5 recipe: 744B
])
def test_presets_match_the_published_totals_within_one_percent(key: str, total: float) -> None:
    spec = load_preset(key)
    assert spec.published_params == total
    assert spec.param_count() == pytest.approx(total, rel=0.01), key


@pytest.mark.parametrize("key,hand", [
    # full-attention layers x 2 (K and V) x KV heads x head_dim x 2 bytes; DeltaNet layers keep no KV
    ("qwen3.5-397b-a17b", 15 * 2 * 2 * 256 * BF16),
    ("qwen3-next-80b-a3b", 12 * 2 * 2 * 256 * BF16),
    ("glm-4.7", 92 * 2 * 8 * 128 * BF16),
    ("minimax-m2", 62 * 2 * 8 * 128 * BF16),
    # MLA: the latent plus its RoPE key, and the sparse-attention indexer's fp8 key with one fp32 scale per 128
    ("glm-5.1", 78 * ((512 + 64) * BF16 + 128 + 4)),
])
def test_kv_bytes_per_token_by_hand(key: str, hand: int) -> None:
    assert load_preset(key).kv_bytes_per_token(BF16) == hand


def test_recurrent_state_per_request_by_hand() -> None:
    # Qwen3.5: 45 DeltaNet layers of 16 key / 64 value heads of 128, kernel 4, state in float32 (mamba_ssm_dtype)
    assert load_preset("qwen3.5-397b-a17b").state_bytes_per_sequence() == 45 * deltanet_state(16, 64, 128, 4, FP32)
    # Qwen3-Next: 36 layers of 16 key / 32 value heads, no state dtype in the config: 16 bits
    assert load_preset("qwen3-next-80b-a3b").state_bytes_per_sequence() == 36 * deltanet_state(16, 32, 128, 4, BF16)


def test_qwen35_state_dtype_follows_the_config() -> None:
    raw = config("qwen3.5-397b-a17b")
    half = json.loads(json.dumps(raw))
    half["text_config"]["mamba_ssm_dtype"] = "bfloat16"
    f32, b16 = from_hf_config(raw), from_hf_config(half)
    assert f32.state_bytes_per_sequence() - b16.state_bytes_per_sequence() == 45 * 64 * 128 * 128 * (FP32 - BF16)
    assert f32.param_count() == b16.param_count()
    assert any("32 bits" in n for n in f32.notes) and not any("32 bits" in n for n in b16.notes)


@settings(max_examples=25, deadline=None)
@given(st.text(min_size=1, max_size=12).filter(lambda s: s not in ("float32", "bfloat16", "float16")))
def test_an_unknown_state_dtype_is_named_by_its_field(dtype: str) -> None:
    raw = config("qwen3.5-397b-a17b")
    raw["text_config"]["mamba_ssm_dtype"] = dtype
    with pytest.raises(PdagInputError) as err:
        from_hf_config(raw)
    assert err.value.field == "hf_config.text_config.mamba_ssm_dtype" and "float32" in str(err.value.allowed)


def test_glm5_is_read_as_deepseek_v32() -> None:
    """vLLM builds GLM-5's GlmMoeDsaForCausalLM as DeepseekV2ForCausalLM: MLA, the indexer, DeepSeek's MoE."""
    spec = load_preset("glm-5.1")
    assert spec.mla is not None and (spec.mla.qk_nope_head_dim, spec.mla.v_head_dim) == (192, 256)
    assert spec.indexer is not None and (spec.indexer.num_heads, spec.indexer.topk) == (32, 2048)
    assert spec.moe is not None and spec.moe.moe_layers[0] == 3 and spec.mtp_layers == 1


def test_mtp_layers_as_the_engines_count_them() -> None:
    assert load_preset("qwen3.5-397b-a17b").mtp_layers == 1  # mtp_num_hidden_layers
    assert load_preset("qwen3-next-80b-a3b").mtp_layers == 1  # none stated: vLLM's default of 1
    assert from_hf_config({**config("qwen3-next-80b-a3b"), "num_nextn_predict_layers": 0}).mtp_layers == 0
    glm = load_preset("glm-4.7")
    assert glm.mtp_layers == 1 and glm.qk_norm and glm.attention_bias and not glm.attention_out_bias


@pytest.mark.parametrize("command,gpu", [
    ("vllm serve zai-org/GLM-4.7-FP8 --tensor-parallel-size 4 --speculative-config.method mtp "
     "--speculative-config.num_speculative_tokens 1", "h200"),
    ("vllm serve Qwen/Qwen3.5-397B-A17B-FP8 --tensor-parallel-size 8 --speculative-config "
     "'{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'", "h200"),
])
def test_the_published_mtp_recipes_validate(command: str, gpu: str) -> None:
    plan = import_command(command, gpu=gpu).plan
    assert plan["speculative"]["method"] == "mtp"
    assert not [v.rule_id for v in validate_dag(plan).violations if v.severity == "error"]


@pytest.mark.parametrize("repo,preset", [
    ("Qwen/Qwen3.5-397B-A17B", "qwen3.5-397b-a17b"),
    ("Qwen/Qwen3.5-397B-A17B-FP8", "qwen3.5-397b-a17b"),
    ("nvidia/Qwen3.5-397B-A17B-NVFP4", "qwen3.5-397b-a17b"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "qwen3-next-80b-a3b"),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "qwen3-next-80b-a3b"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", "qwen3-next-80b-a3b"),
    ("Qwen/Qwen3-Coder-Next", "qwen3-next-80b-a3b"),
    ("zai-org/GLM-4.6", "glm-4.7"),
    ("zai-org/GLM-4.7-FP8", "glm-4.7"),
    ("moonshotai/Kimi-K2-Thinking", "kimi-k2.5"),
    ("nvidia/Kimi-K2-Thinking-NVFP4", "kimi-k2.5"),
    ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
    ("MiniMaxAI/MiniMax-M2", "minimax-m2"),
    ("zai-org/GLM-5.1-FP8", "glm-5.1"),
    ("zai-org/GLM-5", "glm-5.1"),
])
def test_checkpoints_resolve(repo: str, preset: str) -> None:
    assert import_command(f"vllm serve {repo} -tp 8", gpu="h200").plan["model"] == preset
    assert load_preset(repo).id == preset


@pytest.mark.parametrize("repo,fmt", [
    ("Qwen/Qwen3.5-397B-A17B-FP8", "fp8"), ("nvidia/Qwen3.5-397B-A17B-NVFP4", "nvfp4"),
    ("Qwen/Qwen3.5-397B-A17B", None), ("zai-org/GLM-4.7-FP8", "fp8"), ("zai-org/GLM-4.6", None),
    ("MiniMaxAI/MiniMax-M2", "fp8"),  # native FP8: its config's quantization_config
])
def test_the_storage_follows_the_checkpoint(repo: str, fmt: str | None) -> None:
    assert weights_of(parse_plan(import_command(f"vllm serve {repo} -tp 8", gpu="h200").plan)) == fmt


def test_kimi_k2_thinking_is_int4_on_its_routed_experts_with_a_256k_context() -> None:
    thinking = parse_plan(import_command("vllm serve moonshotai/Kimi-K2-Thinking -tp 8", gpu="h200").plan)
    assert weights_of(thinking) == "int4" and experts_only(thinking)
    assert thinking.spec.max_position_embeddings == 262_144
    instruct = parse_plan(import_command("vllm serve moonshotai/Kimi-K2-Instruct -tp 8", gpu="h200").plan)
    assert weights_of(instruct) == "fp8" and instruct.spec.max_position_embeddings == 131_072
    assert memory_report(thinking).weights_bytes < 0.6 * memory_report(instruct).weights_bytes


def test_kimi_k2_dp16_ep_on_h800_is_refused_because_the_weights_do_not_fit() -> None:
    """vLLM's Kimi-K2 recipe, DP16 + EP on 16 H800 with --gpu-memory-utilization 0.85: each GPU holds 1/16 of the
    routed experts plus a full copy of everything else (attention DP), 77.7 GB, more than 85 % of an 80 GB H800
    before any KV cache. The hand count, from Kimi-K2's config: FP8 linear weights (block scales aside) and a
    16-bit embedding and head and router."""
    command = ("vllm serve moonshotai/Kimi-K2-Instruct --trust-remote-code --data-parallel-size 16 "
               "--data-parallel-size-local 8 --enable-expert-parallel --max-num-batched-tokens 8192 "
               "--max-num-seqs 256 --gpu-memory-utilization 0.85")
    plan = import_command(command, gpu="h800").plan
    hidden, layers, moe_layers, experts_per_gpu, expert = 7168, 61, 60, 384 // 16, 2048
    attention = (hidden * 1536 + 1536 * 64 * (128 + 64) + hidden * (512 + 64) + 512 * 64 * (128 + 128)
                 + 64 * 128 * hidden)
    fp8 = (layers * attention + 3 * hidden * 18432 + moe_layers * 3 * hidden * expert * (1 + experts_per_gpu))
    sixteen = (2 * 163840 * hidden + moe_layers * 384 * hidden) * BF16
    report = memory_report(parse_plan(plan))
    assert report.weights_bytes == pytest.approx(fp8 + sixteen, rel=0.002)
    assert report.weights_bytes > 0.85 * 80e9
    assert "MEM-FITS" in [v.rule_id for v in validate_dag(plan).violations if v.severity == "error"]
