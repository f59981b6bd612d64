"""Model catalog: presets, parameter counts against published figures, KV sizes, input errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.core.errors import PdagInputError, closest
from tools.core.models import (
    ModelSpec,
    from_hf_config,
    load_preset,
    preset_ids,
    preset_index,
    resolve_model,
)

REQUIRED = [
    "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b",
    "qwen2.5-72b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b",
]
MOE = [i for i in preset_ids() if preset_index()[i].get("published_active_params")]

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
}


def test_required_presets_present() -> None:
    assert set(REQUIRED) <= set(preset_ids())


@pytest.mark.parametrize("pid", preset_ids())
def test_preset_loads_with_metadata(pid: str) -> None:
    spec = load_preset(pid)
    assert isinstance(spec, ModelSpec)
    assert spec.id == pid
    assert spec.published_params and spec.source and spec.source.startswith("https://")
    assert spec.hf_repo


@pytest.mark.parametrize("pid", preset_ids())
def test_param_count_matches_published(pid: str) -> None:
    spec = load_preset(pid)
    assert spec.published_params is not None
    assert spec.param_count() == pytest.approx(spec.published_params, rel=0.02)


@pytest.mark.parametrize("pid", MOE)
def test_active_params_match_published(pid: str) -> None:
    spec = load_preset(pid)
    assert spec.is_moe and spec.published_active_params is not None
    active = spec.active_param_count(include_embedding=not spec.published_active_excludes_embedding)
    assert active == pytest.approx(spec.published_active_params, rel=0.05)
    assert active < spec.param_count()


@pytest.mark.parametrize("pid", preset_ids())
def test_counts_are_consistent(pid: str) -> None:
    spec = load_preset(pid)
    layers = sum(spec.layer_params(i) for i in range(spec.num_layers))
    assert spec.param_count() == (
        spec.embedding_params() + layers + spec.final_norm_params() + spec.lm_head_params()
    )
    for i in range(spec.num_layers):
        if spec.is_moe_layer(i) or spec.is_ffn_free(i):  # an MoE layer, or a mixer block alone (Nemotron-H)
            assert spec.ffn_params(i) == 0
        else:
            assert spec.ffn_params(i) > 0
    if not spec.is_moe:
        assert spec.active_param_count() == spec.param_count()


def test_docs_list_every_preset() -> None:
    text = (Path(__file__).parents[1] / "docs" / "models.md").read_text(encoding="utf-8")
    assert [pid for pid in preset_ids() if f"`{pid}`" not in text] == []


def test_presets_case_insensitive_and_cached() -> None:
    assert load_preset("Llama-3.1-70B") is load_preset("llama-3.1-70b")
    assert resolve_model(" LLAMA-3.1-8B ").id == "llama-3.1-8b"


def test_llama_70b_structure_and_kv() -> None:
    m = load_preset("llama-3.1-70b")
    assert (m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (80, 64, 8, 128)
    assert m.attention == "gqa" and not m.is_moe and m.sliding_window is None
    assert m.kv_elements_per_token_per_layer(0) == 2 * 8 * 128
    assert m.kv_bytes_per_token(2) == 2 * 8 * 128 * 80 * 2 == 327_680
    assert m.kv_bytes(1000, 2) == 327_680 * 1000
    assert m.kv_bytes_per_token(0.5) == 327_680 / 4


def test_llama_8b_exact_components() -> None:
    m = load_preset("llama-3.1-8b")
    h, i, v = 4096, 14336, 128256
    assert m.embedding_params() == v * h == m.lm_head_params()
    assert m.attention_params_per_layer() == h * 4096 + 2 * h * 1024 + 4096 * h
    assert m.ffn_params(0) == 3 * h * i


def test_deepseek_v3_structure_and_kv() -> None:
    m = load_preset("deepseek-v3")
    assert m.num_layers == 61 and m.mtp_layers == 1
    assert m.attention == "mla" and m.mla is not None
    assert m.mla.kv_lora_rank == 512 and m.mla.qk_rope_head_dim == 64 and m.mla.q_lora_rank == 1536
    assert m.moe is not None
    assert (m.moe.num_experts, m.moe.experts_per_token, m.moe.num_shared_experts) == (256, 8, 1)
    assert m.moe.shared_expert_intermediate_size == 2048 and m.moe.router_bias
    assert [m.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert m.moe.moe_layers == tuple(range(3, 61))
    assert m.ffn_params(0) == 3 * 7168 * 18432
    assert m.expert_params() == 3 * 7168 * 2048
    assert m.kv_elements_per_token_per_layer(10) == 576
    assert m.kv_bytes_per_token(2) == (512 + 64) * 61 * 2
    # 671B excludes the MTP module
    assert m.param_count() == pytest.approx(671e9, rel=0.005)


def test_mixtral_and_qwen_moe_structure() -> None:
    mx = load_preset("mixtral-8x7b")
    assert mx.moe is not None and mx.moe.num_experts == 8 and mx.moe.experts_per_token == 2
    assert mx.moe.moe_layers == tuple(range(32)) and mx.moe.num_shared_experts == 0
    q = load_preset("qwen3-235b-a22b")
    assert q.moe is not None and q.moe.expert_intermediate_size == 1536 and q.num_layers == 94
    assert q.qk_norm and q.head_dim == 128
    q25 = load_preset("qwen2.5-72b")
    assert q25.attention_bias and not q25.attention_out_bias and q25.sliding_window is None


def test_gpt_oss_sliding_window_and_biases() -> None:
    m = load_preset("gpt-oss-120b")
    assert m.sliding_window == 128
    assert m.sliding_window_layers == tuple(range(0, 36, 2))
    assert m.is_sliding_layer(0) and not m.is_sliding_layer(1)
    assert m.attention_bias and m.attention_out_bias and m.attention_sinks
    assert m.moe is not None and m.moe.router_bias and m.moe.expert_bias
    per_layer = 2 * 8 * 64
    # 18 full layers keep 4096 tokens, 18 sliding layers keep 128
    assert m.kv_bytes(4096, 2) == (18 * 4096 + 18 * 128) * per_layer * 2
    assert m.kv_bytes(100, 2) == 36 * 100 * per_layer * 2
    assert m.kv_bytes_per_token(2) == 36 * per_layer * 2
    assert m.kv_bytes_per_token(2, context_len=4096) == pytest.approx(m.kv_bytes(4096, 2) / 4096)


def test_mistral_sliding_window_everywhere() -> None:
    m = load_preset("mistral-7b")
    assert m.sliding_window == 4096 and len(m.sliding_window_layers) == 32
    assert m.kv_bytes(8192, 2) == m.kv_bytes(4096, 2)


def test_unknown_preset_lists_closest() -> None:
    with pytest.raises(PdagInputError) as info:
        load_preset("llama-70b")
    err = info.value
    assert err.field == "model"
    assert "llama-70b" in err.problem
    assert err.allowed and "llama-3.1-70b" in err.allowed
    assert str(err).startswith("model: unknown model 'llama-70b'. Allowed: closest presets:")


def test_closest_fallback() -> None:
    assert closest("zzzzzz", ["b", "a", "c", "d"], n=2) == ["a", "b"]
    assert closest("mixtral-8x7", ["mixtral-8x7b", "llama"], n=1) == ["mixtral-8x7b"]


def test_resolve_model_hf_config() -> None:
    spec = resolve_model({"hf_config": LLAMA_8B})
    assert spec.param_count() == load_preset("llama-3.1-8b").param_count()
    assert resolve_model({"hf_config": LLAMA_8B, "id": "mine"}).id == "mine"
    with pytest.raises(PdagInputError) as info:
        resolve_model(42)  # type: ignore[arg-type]
    assert info.value.field == "model"


@pytest.mark.parametrize("key", ["num_attention_heads", "hidden_size", "num_hidden_layers", "vocab_size"])
def test_missing_field_named(key: str) -> None:
    cfg = dict(LLAMA_8B)
    del cfg[key]
    with pytest.raises(PdagInputError) as info:
        from_hf_config(cfg)
    assert info.value.field == f"hf_config.{key}"
    assert info.value.problem == "missing"
    assert info.value.allowed


def test_wrong_types_and_values_named() -> None:
    for key, bad in [("hidden_size", "big"), ("num_hidden_layers", -3), ("num_attention_heads", True),
                     ("intermediate_size", 1.5)]:
        cfg = dict(LLAMA_8B, **{key: bad})
        with pytest.raises(PdagInputError) as info:
            from_hf_config(cfg)
        assert info.value.field == f"hf_config.{key}"
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(LLAMA_8B, num_key_value_heads=7))
    assert info.value.field == "hf_config.num_key_value_heads"
    with pytest.raises(PdagInputError) as info:
        resolve_model({"hf_config": dict(LLAMA_8B, num_attention_heads=None)})
    assert info.value.field == "model.hf_config.num_attention_heads"


def test_unknown_model_type_is_read_generically_with_a_note() -> None:
    """An unknown model_type with the standard fields is read as a Llama-style decoder, and the note names every
    field the reading did not use; one whose fields change memory or time (a state size) is refused by name."""
    spec = from_hf_config(dict(LLAMA_8B, model_type="newdecoder", rope_theta=5e5, some_flag=True))
    assert spec.family == "generic" and spec.param_count() == from_hf_config(LLAMA_8B).param_count()
    note = " ".join(spec.notes)
    assert "newdecoder" in note and "some_flag" in note and "rope_theta" in note and "hidden_size" not in note
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(LLAMA_8B, model_type="mamba", architectures=["MambaForCausalLM"], ssm_state_size=16))
    assert info.value.field == "hf_config.ssm_state_size"
    assert info.value.allowed and "llama" in info.value.allowed and "deepseek_v3" in info.value.allowed
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(LLAMA_8B, model_type="newdecoder", sliding_window=4096))
    assert info.value.field == "hf_config.sliding_window"
    with pytest.raises(PdagInputError) as info:
        from_hf_config({"model_type": "mamba", "hidden_size": 64})
    assert info.value.field == "hf_config.model_type"
    with pytest.raises(PdagInputError):
        from_hf_config("not a dict")  # type: ignore[arg-type]


def test_architectures_used_when_model_type_missing() -> None:
    cfg = dict(LLAMA_8B)
    del cfg["model_type"]
    assert from_hf_config(cfg).family == "llama"


@pytest.mark.parametrize(
    "key,value",
    [("num_hidden_layers", 1001), ("hidden_size", 2_000_000), ("vocab_size", 10**9),
     ("num_attention_heads", 10**7), ("intermediate_size", 10**12)],
)
def test_absurd_sizes_refused(key: str, value: int) -> None:
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(LLAMA_8B, **{key: value}))
    assert info.value.field == f"hf_config.{key}"


def test_absurd_experts_refused() -> None:
    cfg = {
        "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "num_local_experts": 1_000_000, "num_experts_per_tok": 2,
    }
    with pytest.raises(PdagInputError) as info:
        from_hf_config(cfg)
    assert info.value.field == "hf_config.num_local_experts"
    with pytest.raises(PdagInputError) as info:
        from_hf_config(dict(cfg, num_local_experts=8, num_experts_per_tok=9))
    assert info.value.field == "hf_config.num_experts_per_tok"


def test_deepseek_missing_mla_field() -> None:
    import json

    from tools.core.models import MODELS_DIR

    cfg = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    del cfg["kv_lora_rank"]
    with pytest.raises(PdagInputError) as info:
        from_hf_config(cfg)
    assert info.value.field == "hf_config.kv_lora_rank"


def test_qwen3_moe_mlp_only_layers() -> None:
    import json

    from tools.core.models import MODELS_DIR

    cfg = json.loads((MODELS_DIR / "qwen3-30b-a3b.json").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["mlp_only_layers"] = [0, 47]
    spec = from_hf_config(cfg)
    assert not spec.is_moe_layer(0) and spec.is_moe_layer(1) and not spec.is_moe_layer(47)
    assert spec.ffn_params(0) == 3 * 2048 * 6144
    cfg["mlp_only_layers"] = [99]
    with pytest.raises(PdagInputError) as info:
        from_hf_config(cfg)
    assert info.value.field == "hf_config.mlp_only_layers"


def test_layer_index_checked() -> None:
    m = load_preset("llama-3.1-8b")
    with pytest.raises(PdagInputError):
        m.ffn_params(32)
    with pytest.raises(PdagInputError):
        m.kv_elements_per_token_per_layer(-1)


_int_or_junk = st.one_of(
    st.integers(min_value=-5, max_value=3_000_000),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layers=st.one_of(st.integers(min_value=1, max_value=200), _int_or_junk),
    heads=st.one_of(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), _int_or_junk),
    kv=st.one_of(st.sampled_from([1, 2, 4, 8]), _int_or_junk),
    head_dim=st.one_of(st.sampled_from([32, 64, 128]), st.none(), _int_or_junk),
    hidden=st.one_of(st.sampled_from([256, 1024, 4096, 5120]), _int_or_junk),
    inter=st.one_of(st.integers(min_value=1, max_value=100_000), _int_or_junk),
    vocab=st.one_of(st.integers(min_value=1, max_value=300_000), _int_or_junk),
    tie=st.one_of(st.booleans(), st.none(), st.integers()),
    model_type=st.sampled_from(["llama", "mistral", "qwen2", "qwen3", "llama", "bogus"]),
)
def test_from_hf_config_never_crashes(
    layers, heads, kv, head_dim, hidden, inter, vocab, tie, model_type
) -> None:
    cfg = {
        "model_type": model_type, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "hidden_size": hidden, "intermediate_size": inter, "vocab_size": vocab,
        "tie_word_embeddings": tie,
    }
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    try:
        spec = from_hf_config(cfg)
    except PdagInputError as err:
        assert err.field.startswith("hf_config")
        return
    assert spec.param_count() > 0
    assert spec.kv_bytes_per_token(2) > 0


def _names_people_write() -> list[str]:
    """Every repo name index.json gives a preset, as published and as its instruct and quantised releases."""
    names: list[str] = []
    for entry in preset_index().values():
        repos = [entry.get("hf_repo"), *entry.get("aliases", ()), *(s["repo"] for s in entry.get("same_architecture",
                                                                                                  ()))]
        for repo in filter(None, repos):
            names += [repo, f"{repo}-Instruct", f"{repo}-FP8", f"/models/{repo}/snapshot"]
    return names


@pytest.mark.parametrize("name", _names_people_write())
def test_a_plan_and_an_imported_command_accept_the_same_model_names(name: str) -> None:
    """Two resolvers once disagreed: an imported command read meta-llama/Llama-3.3-70B-Instruct as llama-3.1-70b
    while the same name in a plan was refused as unknown."""
    from tools.engines.launch import model_for_repo

    assert load_preset(name).id == model_for_repo(name)[0]


def test_a_checkpoint_of_the_same_shapes_is_read_with_its_source_in_a_note() -> None:
    spec = load_preset("meta-llama/Llama-3.3-70B-Instruct")
    assert spec.id == "llama-3.1-70b"
    assert any("Llama-3.3-70B-Instruct/blob/main/config.json" in n for n in spec.notes)
    # the note is the loose match's own: the cached preset that exact ids get stays without it
    assert not any("Llama-3.3" in n for n in load_preset("llama-3.1-70b").notes)
