"""The held-out recipe set's models (issue 39): Gemma-4 presets from citable configs pinned to the published totals
and to hand-counted KV bytes, releases that keep a preset's shapes with their own context window (GLM-4.5,
Qwen3-235B-A22B 2507), the tensors NVIDIA's NVFP4 releases keep in bf16, and the named refusals for checkpoints with
no citable config or outside pdag's scope."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge import ROOT
from tools.core.errors import PdagInputError
from tools.core.memory import memory_report
from tools.core.models import load_preset
from tools.core.plan import parse_plan
from tools.core.quantization import attention_unquantized, dense_unquantized, weights_of
from tools.engines.launch import export_plan, import_command
from tools.rules.validate import validate_dag

BF16, NVFP4 = 2, 0.5625


def imported(command: str, gpu: str = "h200") -> dict[str, Any]:
    return import_command(command, gpu=gpu).plan


@pytest.mark.parametrize("key,total,active", [
    ("gemma-4-31b", 30.7e9, None),  # Gemma 4 model card: 30.7B (dense)
    ("gemma-4-26b-a4b", 25.2e9, 3.8e9),  # 25.2B total, 3.8B active
])
def test_gemma_4_presets_match_the_cards_totals_within_one_percent(key: str, total: float,
                                                                    active: float | None) -> None:
    spec = load_preset(key)
    assert spec.published_params == total
    assert spec.param_count() == pytest.approx(total, rel=0.01)
    if active is not None:
        assert spec.active_param_count() == pytest.approx(active, rel=0.01)


@pytest.mark.parametrize("key,hand", [
    # sliding layers x 2 (K, V) x KV heads x head_dim + global layers with their own KV heads of 512, in bf16
    ("gemma-4-31b", (50 * 2 * 16 * 256 + 10 * 2 * 4 * 512) * BF16),
    ("gemma-4-26b-a4b", (25 * 2 * 8 * 256 + 5 * 2 * 2 * 512) * BF16),
])
def test_gemma_4_kv_bytes_per_token_by_hand(key: str, hand: int) -> None:
    assert load_preset(key).kv_bytes_per_token(BF16) == hand


@pytest.mark.parametrize("repo,preset", [
    ("google/gemma-4-31B-it", "gemma-4-31b"),
    ("nvidia/Gemma-4-31B-IT-NVFP4", "gemma-4-31b"),
    ("google/gemma-4-26B-A4B-it", "gemma-4-26b-a4b"),
    ("zai-org/GLM-4.5", "glm-4.7"),
    ("zai-org/GLM-4.5-FP8", "glm-4.7"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "qwen3-235b-a22b"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507-FP8", "qwen3-235b-a22b"),
])
def test_checkpoints_resolve(repo: str, preset: str) -> None:
    assert imported(f"vllm serve {repo} -tp 8")["model"] == preset
    assert load_preset(repo).id == preset


@pytest.mark.parametrize("repo,window", [
    ("zai-org/GLM-4.5", 131_072),  # Megatron-Bridge's GLM-4.5 page: 131,072 tokens
    ("zai-org/GLM-4.7", 202_752),  # the preset's own config
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", 262_144),  # the 2507 card: 262,144 natively
    ("Qwen/Qwen3-235B-A22B", 40_960),  # the base config
])
def test_a_release_keeps_its_own_context_window(repo: str, window: int) -> None:
    """The window is what the checkpoint states, not the preset's, so export does not cap a 262k model at 40k."""
    plan = imported(f"python -m sglang.launch_server --model {repo} --tp 8", "b200")
    assert parse_plan(plan).spec.max_position_embeddings == window
    assert f"--context-length {window}" in export_plan(plan, "sglang").command


def test_the_release_context_does_not_change_the_shapes() -> None:
    base = parse_plan(imported("vllm serve Qwen/Qwen3-235B-A22B -tp 8")).spec
    release = parse_plan(imported("vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 -tp 8")).spec
    assert release.param_count() == base.param_count()
    assert release.kv_bytes_per_token(BF16) == base.kv_bytes_per_token(BF16)


def test_nvidias_nvfp4_gemma_keeps_attention_and_embedding_in_bf16() -> None:
    """ModelOpt's ignore list for nvidia/Gemma-4-31B-IT-NVFP4 names every layer's self_attn and the LM head: only the
    MLPs are NVFP4. Hand count at tp 1: attention and the tied embedding in bf16, the MLPs at NVFP4's 0.5625 bytes."""
    plan = parse_plan(imported("vllm serve nvidia/Gemma-4-31B-IT-NVFP4 -tp 1", "b200"))
    assert weights_of(plan) == "nvfp4" and attention_unquantized(plan) and not dense_unquantized(plan)
    spec = plan.spec
    attention = sum(spec.attention_params_per_layer(i) for i in range(60))
    mlp = sum(spec.ffn_params(i) for i in range(60))
    rest = spec.param_count() - attention - mlp  # embedding, norms
    assert memory_report(plan).weights_bytes == pytest.approx((attention + rest) * BF16 + mlp * NVFP4, rel=0.001)
    google = parse_plan(imported("vllm serve google/gemma-4-31B-it -tp 1", "b200"))
    assert not attention_unquantized(google) and weights_of(google) is None


def test_nvfp4_qwen35_keeps_its_shared_experts_in_bf16() -> None:
    """NVIDIA's Qwen3.5-397B NVFP4 ignore list adds mlp.shared_expert: only the routed experts are 4-bit."""
    nvfp4 = parse_plan(imported("vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 -tp 4", "b200"))
    assert attention_unquantized(nvfp4) and dense_unquantized(nvfp4)
    spec = nvfp4.spec
    assert spec.moe is not None
    shared = sum(1 for i in range(spec.num_layers) if spec.is_moe_layer(i)) * spec.shared_expert_params()
    forced = parse_plan({**imported("vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 -tp 4", "b200"),
                         "checkpoint": "someone/Qwen3.5-397B-A17B-NVFP4"})  # same format, no ignore list known
    assert not dense_unquantized(forced)
    gap = memory_report(nvfp4).weights_bytes - memory_report(forced).weights_bytes
    assert gap > shared * (BF16 - NVFP4) / 4  # the shared experts (and attention) at 2 bytes instead of 0.5625


NO_PRESET = json.loads((ROOT / "models" / "no_preset.json").read_text(encoding="utf-8"))
UNCITED = [repo for entry in NO_PRESET["no_citable_config"] for repo in entry["repos"]]
OUT_OF_SCOPE = [repo for entry in NO_PRESET["out_of_scope"] for repo in entry["repos"]]


@settings(max_examples=40, deadline=None)
@given(repo=st.sampled_from(UNCITED), suffix=st.sampled_from(["", "-FP8", "-AWQ", "-NVFP4"]),
       upper=st.booleans())
def test_a_checkpoint_without_a_citable_config_is_refused_with_the_fact_and_the_way_out(
        repo: str, suffix: str, upper: bool) -> None:
    name = (repo + suffix).upper() if upper else repo + suffix
    with pytest.raises(PdagInputError) as err:
        import_command(f"vllm serve {name} -tp 8", gpu="h200")
    assert err.value.field == "command.model"
    assert "no verbatim copy" in err.value.problem and "https://" in err.value.problem
    assert "--hf-config" in err.value.allowed and "hf_config" in err.value.allowed
    with pytest.raises(PdagInputError) as direct:
        load_preset(name)
    assert direct.value.field == "model" and direct.value.problem == err.value.problem.replace(
        "command.model", "model")


@pytest.mark.parametrize("repo", OUT_OF_SCOPE)
def test_a_reranker_is_named_outside_pdags_scope(repo: str) -> None:
    with pytest.raises(PdagInputError) as err:
        import_command(f"vllm serve {repo} --tensor_parallel_size 2", gpu="l4")
    assert "outside pdag's scope" in err.value.problem and "decode" in err.value.allowed
    assert "no preset" not in err.value.problem


def test_an_unlisted_unknown_model_still_names_the_closest_presets() -> None:
    with pytest.raises(PdagInputError) as err:
        import_command("vllm serve example-org/Totally-New-Model-9B -tp 1", gpu="h200")
    assert "no preset matches" in err.value.problem and "--hf-config" in err.value.allowed


def test_the_cookbooks_gemma_4_31b_and_glm_45_lines_go_end_to_end() -> None:
    for command, gpu in (("sglang serve --model-path google/gemma-4-31B-it --tp 2", "h200"),
                         ("python -m sglang.launch_server --model zai-org/GLM-4.5 --tp 8", "mi300x")):
        plan = imported(command, gpu)
        assert not [v.rule_id for v in validate_dag(plan).violations if v.severity == "error"]
        assert export_plan(plan, "sglang").gpus == plan["hardware"]["num_gpus"]


KIMI_DP16 = ("vllm serve moonshotai/Kimi-K2-Instruct --trust-remote-code --data-parallel-size 16 "
             "--data-parallel-size-local 8 --enable-expert-parallel --max-num-batched-tokens 8192 "
             "--max-num-seqs 256 --gpu-memory-utilization 0.85")


@pytest.mark.parametrize("share,named", [("0.85", True), ("0.99", False), ("abc", False)])
def test_the_refusal_names_a_memory_share_smaller_than_the_weights(share: str, named: bool) -> None:
    """vLLM's Kimi-K2 DP16 + EP recipe on 16 H800: --gpu-memory-utilization is a share of the device total, so at
    0.85 vLLM may use 68 GB of an 80 GB H800 for everything, less than the 77.7 GB of weights one GPU holds (1/16 of
    the routed experts plus a full copy of the rest): MEM-FITS says so. At 0.99 (79.2 GB) it is still refused, but
    not for the share; a value that is no fraction is not read."""
    plan = imported(KIMI_DP16.replace("0.85", share), "h800")
    fits = [v for v in validate_dag(plan).violations if v.rule_id == "MEM-FITS"]
    assert fits
    assert ("--gpu-memory-utilization 0.85 gives vLLM 68.0 GB" in fits[0].message) == named
    weights = memory_report(parse_plan(plan)).weights_bytes
    if share != "abc":
        assert (weights > float(share) * 80e9) == named
