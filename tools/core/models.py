"""Model catalog: a normalised ``ModelSpec`` built from a Hugging Face ``config.json``.

Everything downstream (DAG builder, memory model, estimator) sizes weights and KV caches through the
public methods of ``ModelSpec``; the counting is exact arithmetic over the tensors each architecture
declares (no fudge factors).

Conventions
-----------
* A *layer* is a decoder block. ``num_layers`` never includes DeepSeek's multi-token-prediction (MTP)
  module (``mtp_layers`` records how many the checkpoint ships; they are not counted anywhere).
* ``attention_params_per_layer()`` is the attention block's projections, their biases and the norms
  *inside* attention (MLA's ``q_a_layernorm`` / ``kv_a_layernorm``, Qwen3's ``q_norm`` / ``k_norm``)
  plus gpt-oss attention sinks. The two per-layer RMSNorms (before attention, before the FFN) are
  ``layer_norm_params()``.
* ``ffn_params(layer)`` is the dense SwiGLU FFN of ``layer`` (0 for an MoE layer);
  ``moe_params()`` is a whole MoE block (routed experts + shared experts + router).
* Active parameters count everything a token touches: embedding row, attention, norms, dense FFN,
  shared experts, router, ``experts_per_token`` routed experts, LM head.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from functools import cache, lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from knowledge import ROOT as KNOWLEDGE_ROOT
from tools.core.errors import MAX_MATCHED, PdagInputError, closest, shown
from tools.core.formats import format_of_config
from tools.core.layerkinds import IndexerSpec, RecurrentSpec, layer_kind_data

__all__ = [
    "AttentionShape",
    "MLASpec",
    "MoESpec",
    "ModelSpec",
    "SUPPORTED_MODEL_TYPES",
    "for_checkpoint",
    "from_hf_config",
    "load_preset",
    "preset_ids",
    "preset_index",
    "resolve_model",
    "why_no_preset",
]

MODELS_DIR = KNOWLEDGE_ROOT / "models"

# Upper bounds: anything beyond these is refused at once (they are far above any real model).
MAX_LAYERS = 1000
MAX_HIDDEN = 1_000_000
MAX_HEADS = 100_000
MAX_HEAD_DIM = 100_000
MAX_INTERMEDIATE = 10_000_000
MAX_VOCAB = 10_000_000
MAX_EXPERTS = 100_000
MAX_POSITIONS = 1_000_000_000
MAX_LORA_RANK = 1_000_000

# model_type -> family. Architectures are mapped to a model_type when model_type is absent.
SUPPORTED_MODEL_TYPES: dict[str, str] = {
    "llama": "llama",
    "llama4_text": "llama4",
    "mistral": "mistral",
    "ministral": "mistral",
    "ministral3": "mistral",
    "mixtral": "mixtral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
    "deepseek_v2": "deepseek",
    "deepseek_v3": "deepseek",
    "kimi_k2": "deepseek",
    "glm4_moe": "glm4_moe",
    "gpt_oss": "gpt_oss",
    "gemma2": "gemma",
    "gemma3_text": "gemma",
    "gemma4_text": "gemma",
    "phi3": "phi3",
    "olmo2": "olmo2",
    "cohere2": "cohere2",
    "ernie4_5_moe": "ernie4_5_moe",
    # read by the small readers in _READERS (one function per family)
    "gemma": "gemma",
    "qwen2_moe": "qwen2_moe",
    "olmoe": "olmoe",
    "phimoe": "phimoe",
    "minimax_m2": "minimax_m2",
    "glm4": "glm4",
    "hunyuan": "hunyuan",
    "hunyuan_v1_moe": "hunyuan",
    "bailing_moe": "bailing_moe",
    "bailing_moe_v2": "bailing_moe",
    # text decoders of multimodal checkpoints that are another family's decoder (read by that family's reader)
    "qwen3_vl_moe_text": "qwen3_moe",
    "qwen3_vl_text": "qwen3",
    "qwen2_5_vl": "qwen2",
    "qwen2_5_vl_text": "qwen2",
    "qwen2_vl": "qwen2",
    "qwen2_vl_text": "qwen2",
    # layer kinds beyond K/V attention (tools/core/layerkinds.py)
    "qwen3_next": "qwen3_next",
    "qwen3_5_moe_text": "qwen3_next",
    "deepseek_v32": "deepseek",
    "glm_moe_dsa": "deepseek",
    "glm4_moe_lite": "deepseek",
    "nemotron_h": "nemotron_h",
    "granitemoehybrid": "granitemoehybrid",
    "falcon_h1": "falcon_h1",
    "minimax": "minimax",
    "minimax_m1": "minimax",
    "minimax_text_01": "minimax",
    "kimi_linear": "kimi_linear",
    "step3p5": "step3p5",
}
# model_type -> the model_type whose reader reads it: the same decoder under another name (vLLM builds
# Qwen2-VL's and Qwen2.5-VL's language model as Qwen2ForCausalLM, Qwen3-VL's as Qwen3 / Qwen3-MoE decoders)
_SAME_DECODER: dict[str, str] = {"qwen3_vl_moe_text": "qwen3_moe", "qwen3_vl_text": "qwen3", "qwen2_5_vl": "qwen2",
                                 "qwen2_5_vl_text": "qwen2", "qwen2_vl": "qwen2", "qwen2_vl_text": "qwen2",
                                 "qwen3_5_moe_text": "qwen3_next",
                                 # GLM-5: vLLM builds GlmMoeDsaForCausalLM as DeepseekV2ForCausalLM (deepseek_v2.py)
                                 "glm_moe_dsa": "deepseek_v32"}
# DeepSeek-style MLA + MoE decoders; GLM-4.7-Flash (glm4_moe_lite) is DeepSeek-V2's MLA attention with GLM-4.5's MoE
# block (vLLM vllm/model_executor/models/glm4_moe_lite.py), which DeepSeek-V3's reading already is
_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm4_moe_lite")
# Multimodal wrappers: their language model sits under text_config (the vision tower is not priced).
WRAPPER_MODEL_TYPES = ("llama4", "gemma3", "gemma4", "mistral3", "kimi_k25", "qwen3_vl_moe", "qwen3_vl", "qwen2_5_vl",
                       "qwen2_vl", "qwen3_5_moe")
_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma4ForCausalLM": "gemma4_text",
    "Llama4ForCausalLM": "llama4_text",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Phi3ForCausalLM": "phi3",
    "Olmo2ForCausalLM": "olmo2",
    "Cohere2ForCausalLM": "cohere2",
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
    "GemmaForCausalLM": "gemma",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "OlmoeForCausalLM": "olmoe",
    "PhiMoEForCausalLM": "phimoe",
    "MiniMaxM2ForCausalLM": "minimax_m2",
    "Glm4ForCausalLM": "glm4",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen3NextForCausalLM": "qwen3_next",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "NemotronHForCausalLM": "nemotron_h",
    "GraniteMoeHybridForCausalLM": "granitemoehybrid",
    "FalconH1ForCausalLM": "falcon_h1",
    "MiniMaxForCausalLM": "minimax",
    "MiniMaxM1ForCausalLM": "minimax_m1",
    "MiniMaxText01ForCausalLM": "minimax_text_01",
    "HunYuanMoEV1ForCausalLM": "hunyuan_v1_moe",
    "BailingMoeForCausalLM": "bailing_moe",
    "BailingMoeV2ForCausalLM": "bailing_moe_v2",
    "KimiLinearForCausalLM": "kimi_linear",
    "Step3p5ForCausalLM": "step3p5",
}


def _as_number(x: float) -> int | float:
    """Return an int when the value is integral (bf16 sizes), the float otherwise (int4 sizes)."""
    return int(x) if float(x).is_integer() else float(x)


class MLASpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3) dimensions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_LORA_RANK)
    kv_lora_rank: int = Field(ge=1, le=MAX_LORA_RANK)
    qk_nope_head_dim: int = Field(ge=0, le=MAX_HEAD_DIM)
    qk_rope_head_dim: int = Field(ge=0, le=MAX_HEAD_DIM)
    v_head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class AttentionShape(BaseModel):
    """The full-attention layers' own K/V shape where it differs from the windowed layers' (Gemma-4: 4 KV heads of
    512 on its global layers, 16 of 256 on its sliding ones). ``shared_kv``: the layer has no v_proj and its values
    come from the key projection (attention_k_eq_v); the cache still holds K and V, as vLLM loads the key weights
    into both slots. ``num_heads``: the full layers' own query heads (Step-3.5-Flash: 64 against its sliding layers'
    96); None keeps the model's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_kv_heads: int = Field(ge=1, le=MAX_HEADS)
    head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)
    shared_kv: bool = False
    num_heads: int | None = Field(default=None, ge=1, le=MAX_HEADS)


class MoESpec(BaseModel):
    """Mixture-of-experts block, identical on every MoE layer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_experts: int = Field(ge=1, le=MAX_EXPERTS)
    experts_per_token: int = Field(ge=1, le=MAX_EXPERTS)
    num_shared_experts: int = Field(default=0, ge=0, le=MAX_EXPERTS)
    expert_intermediate_size: int = Field(ge=1, le=MAX_INTERMEDIATE)
    # Total intermediate size of all shared experts together (0 if none).
    shared_expert_intermediate_size: int = Field(default=0, ge=0, le=MAX_INTERMEDIATE * 100)
    moe_layers: tuple[int, ...]
    # a per-expert vector on the router (gpt-oss bias, DeepSeek-V3 score correction, Gemma-4's per_expert_scale)
    router_bias: bool = False
    router_input_scale: bool = False  # a learned hidden-sized scale on the router's input (Gemma-4's router.scale)
    shared_expert_gate: bool = False  # a hidden -> 1 sigmoid gate on the shared expert's output (Qwen2-MoE)
    expert_bias: bool = False  # biases inside each expert's projections (gpt-oss)
    # routed experts read and write this width instead of hidden_size, between a down-projection of the token and an
    # up-projection of their sum (Nemotron-3-Super's fc1/fc2_latent_proj); None: the experts work at hidden_size
    latent_size: int | None = Field(default=None, ge=1, le=MAX_HIDDEN)

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token exceeds num_experts")
        if list(self.moe_layers) != sorted(set(self.moe_layers)):
            raise ValueError("moe_layers must be sorted and unique")
        return self


class ModelSpec(BaseModel):
    """A decoder-only transformer, normalised from its Hugging Face config."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    family: str
    model_type: str
    num_layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN)
    num_heads: int = Field(ge=1, le=MAX_HEADS)
    num_kv_heads: int = Field(ge=1, le=MAX_HEADS)
    head_dim: int = Field(ge=1, le=MAX_HEAD_DIM)
    intermediate_size: int = Field(ge=0, le=MAX_INTERMEDIATE)
    vocab_size: int = Field(ge=1, le=MAX_VOCAB)
    tie_embeddings: bool = False
    attention: Literal["mha", "gqa", "mla"]
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    max_position_embeddings: int = Field(default=4096, ge=1, le=MAX_POSITIONS)
    sliding_window: int | None = Field(default=None, ge=1, le=MAX_POSITIONS)
    sliding_window_layers: tuple[int, ...] = ()
    attention_bias: bool = False  # biases on the q/k/v projections
    attention_out_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False  # biases in the dense FFN
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3, Gemma-3, GLM-4.5)
    qk_norm_full: bool = False  # RMSNorm over the whole q and k projections (OLMo-2) instead of per head
    # Gemma-2/3 have four (pre and post attention and FFN); Cohere-2's parallel block has one
    norms_per_layer: int = Field(default=2, ge=1, le=8)
    local_attention: Literal["sliding", "chunked"] = "sliding"  # what the windowed layers do (Llama-4: chunked)
    notes: tuple[str, ...] = ()  # what the reading left out or assumed (vision tower, unread fields)
    vision_encoder: bool = False  # the checkpoint carries a vision tower (vision_config) pdag does not price
    # the config is read only through the repo's own code (auto_map, model_type transformers does not register):
    # engines load it only with their trust-remote-code flag
    remote_code: bool = False
    attention_sinks: bool = False  # one learned sink logit per head (gpt-oss)
    mtp_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)  # DeepSeek MTP modules, never counted
    # layers whose token mixer is recurrent (a fixed state per request, no KV), and the sparse-attention indexer
    recurrent: RecurrentSpec | None = None
    indexer: IndexerSpec | None = None
    attention_output_gate: bool = False  # q_proj also emits a sigmoid gate on the attention output (Qwen3-Next)
    full_layer_shape: AttentionShape | None = None  # the full-attention layers' own KV heads and head size (Gemma-4)
    head_gate: bool = False  # a hidden -> heads projection gating each head's output (Step-3.5's g_proj)
    # layers that attend over an earlier layer's cache and keep none of their own (Gemma-4 E2B / E4B's last
    # num_kv_shared_layers), and layers whose dense FFN is twice intermediate_size (their use_double_wide_mlp)
    kv_shared_layers: tuple[int, ...] = ()
    # the kv_shared_layers compute no K or V either: q_proj and o_proj only (Hunyuan's cross-layer attention, CLA)
    cross_layer_kv: bool = False
    wide_ffn_layers: tuple[int, ...] = ()
    # per-layer embeddings (Gemma-4 E2B / E4B): each token also looks up per_layer_input_width values for every layer
    # in a table of per_layer_input_vocab rows, projected from the embedding too, and each layer gates them in
    per_layer_input_width: int = Field(default=0, ge=0, le=MAX_HIDDEN)
    per_layer_input_vocab: int = Field(default=0, ge=0, le=MAX_VOCAB)
    # layers made of a token mixer alone, without a feed-forward block after it (Nemotron-H's "M" or "*" followed by
    # another mixer); their one norm is the mixer's
    ffn_free_layers: tuple[int, ...] = ()
    ffn_gated: bool = True  # SwiGLU (gate, up, down); False: up -> activation -> down (Nemotron-H's ReLU^2 MLP)
    hf_repo: str | None = None
    # the checkpoint's storage format (its config's quantization_config) and the modules it leaves unquantized
    checkpoint_format: str | None = None
    unquantized_modules: tuple[str, ...] = ()
    fp8_block_scaled: bool = False  # fp8 weights with per-block scales (weight_block_size), DeepSeek-V3's format
    published_params: float | None = None
    published_active_params: float | None = None
    published_active_excludes_embedding: bool = False  # how the source counts active parameters
    source: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.attention == "mla" and self.mla is None:
            raise ValueError("attention 'mla' needs mla dimensions")
        if self.attention != "mla" and self.mla is not None:
            raise ValueError("mla dimensions given for non-MLA attention")
        if self.num_kv_heads > self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("num_kv_heads must divide num_heads")
        if self.moe is not None and any(not 0 <= i < self.num_layers for i in self.moe.moe_layers):
            raise ValueError("moe_layers out of range")
        if any(not 0 <= i < self.num_layers for i in self.sliding_window_layers):
            raise ValueError("sliding_window_layers out of range")
        if self.sliding_window_layers and self.sliding_window is None:
            raise ValueError("sliding_window_layers given without sliding_window")
        if self.recurrent is not None and any(not 0 <= i < self.num_layers for i in self.recurrent.layers):
            raise ValueError("recurrent layers out of range")
        if any(not 0 <= i < self.num_layers for i in self.ffn_free_layers) or (
                self.moe is not None and set(self.ffn_free_layers) & set(self.moe.moe_layers)):
            raise ValueError("ffn_free_layers out of range or MoE")
        if self.indexer is not None and (self.mla is None or not self.mla.q_lora_rank):
            raise ValueError("a sparse-attention indexer needs MLA with a q_lora_rank")
        if any(not 0 <= i < self.num_layers for i in (*self.kv_shared_layers, *self.wide_ffn_layers)):
            raise ValueError("kv_shared_layers or wide_ffn_layers out of range")
        fls = self.full_layer_shape
        if fls is not None and (self.attention == "mla" or (fls.num_heads or self.num_heads) % fls.num_kv_heads):
            raise ValueError("a full-attention layer shape needs GQA attention and KV heads dividing the heads")
        return self

    # ------------------------------------------------------------------ structure
    @property
    def is_moe(self) -> bool:
        return self.moe is not None and len(self.moe.moe_layers) > 0

    def is_moe_layer(self, layer: int) -> bool:
        self._check_layer(layer)
        return layer in self._moe_layer_set()

    def is_sliding_layer(self, layer: int) -> bool:
        self._check_layer(layer)
        return layer in self.sliding_window_layers

    def is_ffn_free(self, layer: int) -> bool:
        """The layer is a token mixer alone (no FFN after it)."""
        self._check_layer(layer)
        return layer in self.ffn_free_layers

    def is_recurrent_layer(self, layer: int) -> bool:
        """The layer mixes tokens through a recurrent state alone (no attention, no KV per token)."""
        self._check_layer(layer)
        return self.recurrent is not None and not self.recurrent.parallel and layer in self._recurrent_set()

    def is_parallel_layer(self, layer: int) -> bool:
        """The layer runs attention and a recurrent mixer side by side (Falcon-H1): KV per token and a state."""
        self._check_layer(layer)
        return self.recurrent is not None and self.recurrent.parallel and layer in self._recurrent_set()

    def has_state(self, layer: int) -> bool:
        """The layer holds a recurrent state per request (alone or beside attention)."""
        self._check_layer(layer)
        return layer in self._recurrent_set()

    def kv_shape(self, layer: int | None = None) -> tuple[int, int]:
        """(KV heads, head size) of ``layer``'s attention: the full-attention layers' own shape where the config gives
        one (Gemma-4), else the model's; without a layer, the windowed layers' (the model's)."""
        fls = self.full_layer_shape
        if layer is not None and fls is not None and not self.is_sliding_layer(layer):
            return fls.num_kv_heads, fls.head_dim
        return self.num_kv_heads, self.head_dim

    def q_heads(self, layer: int | None = None) -> int:
        """Query heads of ``layer``: a full-attention layer's own count where the config gives one (Step-3.5-Flash),
        else the model's; without a layer, the windowed layers' (the model's)."""
        fls = self.full_layer_shape
        if layer is not None and fls is not None and fls.num_heads and not self.is_sliding_layer(layer):
            return fls.num_heads
        return self.num_heads

    @property
    def q_head_counts(self) -> tuple[int, ...]:
        """Every query head count a layer has: what TP must split."""
        fls = self.full_layer_shape
        return tuple(sorted({self.num_heads, (fls.num_heads if fls is not None else None) or self.num_heads}))

    @property
    def kv_head_counts(self) -> tuple[int, ...]:
        """Every KV head count a layer has (one, or two with a full-attention layer shape): what TP must split."""
        fls = self.full_layer_shape
        return (self.num_kv_heads,) if fls is None else tuple(sorted({self.num_kv_heads, fls.num_kv_heads}))

    def _recurrent_set(self) -> frozenset[int]:
        return frozenset(self.recurrent.layers) if self.recurrent is not None else frozenset()

    @property
    def dense_layer_indices(self) -> tuple[int, ...]:
        moe = self._moe_layer_set()
        return tuple(i for i in range(self.num_layers) if i not in moe)

    def _moe_layer_set(self) -> frozenset[int]:
        return frozenset(self.moe.moe_layers) if self.moe is not None else frozenset()

    def _check_layer(self, layer: int) -> None:
        if not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise PdagInputError("layer", f"layer index {layer!r} out of range", f"0..{self.num_layers - 1}")

    # ------------------------------------------------------------------ parameter counts
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def per_layer_input_params(self, layer: int | None = None) -> int:
        """Per-layer embeddings: without a layer, the model's table, its projection from the embedding and that
        projection's norm (beside the embedding); with one, the layer's gate, projection back and norm."""
        w = self.per_layer_input_width
        if not w:
            return 0
        if layer is None:
            return self.per_layer_input_vocab * self.num_layers * w + self.hidden_size * self.num_layers * w + w
        return 2 * self.hidden_size * w + self.hidden_size

    def is_kv_shared(self, layer: int) -> bool:
        """The layer attends over an earlier layer's cache and keeps no KV of its own."""
        self._check_layer(layer)
        return layer in self.kv_shared_layers

    def ffn_width(self, layer: int) -> int:
        """The dense FFN's intermediate size in ``layer`` (twice it in a double-wide layer)."""
        self._check_layer(layer)
        return self.intermediate_size * (2 if layer in self.wide_ffn_layers else 1)

    def lm_head_params(self) -> int:
        """Output projection; 0 when tied to the embedding (the embedding holds the weights)."""
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    def final_norm_params(self) -> int:
        return self.hidden_size

    def layer_norm_params(self, layer: int | None = None) -> int:
        """The RMSNorms of a decoder block: two (before attention, before the FFN/MoE), four in Gemma-2/3; one
        fewer in a layer without an FFN."""
        n = self.norms_per_layer - (1 if layer is not None and self.is_ffn_free(layer) else 0)
        return max(1, n) * self.hidden_size

    def attention_params_per_layer(self, layer: int | None = None) -> int:
        """Attention weights of ``layer`` (a full-attention layer's own shape where it has one); without a layer, of
        the model's common shape."""
        h = self.hidden_size
        if self.attention == "mla":
            m = self.mla
            assert m is not None
            nh = self.num_heads
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * m.qk_head_dim
            else:
                q = h * nh * m.qk_head_dim
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # + kv_a_layernorm
            kv_b = m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
            o = nh * m.v_head_dim * h
            total = q + kv_a + kv_b + o
            if self.indexer is not None and m.q_lora_rank:
                total += self.indexer.params(h, m.q_lora_rank)
            if self.attention_bias:
                total += nh * m.qk_head_dim + m.kv_lora_rank + m.qk_rope_head_dim
            if self.attention_out_bias:
                total += h
            return total
        kv_heads, head_dim = self.kv_shape(layer)
        kv_proj = self.kv_projections(layer)
        q_heads = self.q_heads(layer)
        q_out = q_heads * head_dim
        kv_out = kv_heads * head_dim
        total = h * q_out + kv_proj * h * kv_out + q_out * h
        if self.attention_output_gate:
            total += h * q_out
        if self.attention_bias:
            total += q_out + kv_proj * kv_out
        if self.attention_out_bias:
            total += h
        if self.qk_norm:
            total += (2 if kv_proj else 1) * head_dim
        if self.qk_norm_full:
            total += q_out + kv_out
        if self.attention_sinks:
            total += self.num_heads
        if self.head_gate:
            total += h * q_heads
        return total

    def kv_projections(self, layer: int | None = None) -> int:
        """K/V projections ``layer`` computes: 2; 1 when its values come from the key projection (Gemma-4's
        attention_k_eq_v); 0 in a cross-layer-attention layer reading the previous layer's K and V (Hunyuan's CLA)."""
        if layer is None:
            return 2
        if self.cross_layer_kv and layer in self.kv_shared_layers:
            return 0
        fls = self.full_layer_shape
        return 1 if fls is not None and fls.shared_kv and not self.is_sliding_layer(layer) else 2

    def mixer_params(self, layer: int) -> int:
        """The token mixer of ``layer``: its recurrent block, attention (with any indexer), or both side by side."""
        if self.is_recurrent_layer(layer):
            assert self.recurrent is not None
            return self.recurrent.params(self.hidden_size)
        if self.is_parallel_layer(layer):
            assert self.recurrent is not None
            return self.attention_params_per_layer(layer) + self.recurrent.params(self.hidden_size)
        return self.attention_params_per_layer(layer)

    @property
    def expert_width(self) -> int:
        """The width routed experts read and write: a latent MoE's latent, else hidden_size."""
        return (self.moe.latent_size if self.moe is not None else None) or self.hidden_size

    def _swiglu(self, inter: int, bias: bool, width: int | None = None) -> int:
        mats = 3 if self.ffn_gated else 2
        h = width or self.hidden_size
        n = mats * h * inter
        if bias:
            n += (mats - 1) * inter + h
        return n

    def ffn_params(self, layer: int) -> int:
        """Dense SwiGLU FFN (gate, up, down = 3*h*i; up and down without a gate) of ``layer``; 0 if the layer is
        MoE or has no FFN."""
        if self.is_moe_layer(layer) or self.is_ffn_free(layer):
            return 0
        return self._swiglu(self.ffn_width(layer), self.mlp_bias)

    def expert_params(self) -> int:
        """One routed expert (gate, up, down and any biases)."""
        if self.moe is None:
            return 0
        return self._swiglu(self.moe.expert_intermediate_size, self.moe.expert_bias, self.expert_width)

    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer together (biased like the routed experts)."""
        if self.moe is None or not self.moe.shared_expert_intermediate_size:
            return 0
        return self._swiglu(self.moe.shared_expert_intermediate_size, self.moe.expert_bias)

    def router_params(self) -> int:
        if self.moe is None:
            return 0
        gate = self.hidden_size if self.moe.shared_expert_gate else 0
        gate += self.hidden_size if self.moe.router_input_scale else 0
        latent = 2 * self.hidden_size * self.moe.latent_size if self.moe.latent_size else 0  # replicated like it
        return self.hidden_size * self.moe.num_experts + (self.moe.num_experts if self.moe.router_bias else 0) + gate \
            + latent

    def moe_params(self) -> int:
        """A whole MoE block of one layer: routed experts + shared experts + router."""
        if self.moe is None:
            return 0
        routed = self.moe.num_experts * self.expert_params()
        return routed + self.shared_expert_params() + self.router_params()

    def layer_params(self, layer: int) -> int:
        """Every parameter of decoder block ``layer``."""
        ffn = self.moe_params() if self.is_moe_layer(layer) else self.ffn_params(layer)
        return self.mixer_params(layer) + self.layer_norm_params(layer) + ffn + self.per_layer_input_params(layer)

    def active_layer_params(self, layer: int) -> int:
        """Parameters of ``layer`` one token uses (only ``experts_per_token`` routed experts)."""
        if not self.is_moe_layer(layer):
            return self.layer_params(layer)
        assert self.moe is not None
        ffn = self.moe.experts_per_token * self.expert_params() + self.shared_expert_params()
        return self.mixer_params(layer) + self.layer_norm_params(layer) + ffn + self.router_params() + \
            self.per_layer_input_params(layer)

    def param_count(self) -> int:
        """Total parameters (MTP modules excluded), per-layer embeddings included."""
        layers = sum(self.layer_params(i) for i in range(self.num_layers))
        return self.embedding_params() + self.per_layer_input_params() + layers + self.final_norm_params() + \
            self.lm_head_params()

    def active_param_count(self, include_embedding: bool = True) -> int:
        """Parameters used per token. ``include_embedding=False`` leaves out the input embedding tables
        (lookups, no FLOPs; the per-layer embeddings' table too), which is how some model cards quote active
        parameters. With tied embeddings the shared matrix is always counted once (it is the LM head)."""
        layers = sum(self.active_layer_params(i) for i in range(self.num_layers))
        head = self.vocab_size * self.hidden_size if self.tie_embeddings else self.lm_head_params()
        emb = self.embedding_params() if (include_embedding and not self.tie_embeddings) else 0
        ple = self.per_layer_input_params()
        if ple and not include_embedding:
            ple -= self.per_layer_input_vocab * self.num_layers * self.per_layer_input_width
        return emb + ple + layers + self.final_norm_params() + head

    # ------------------------------------------------------------------ KV cache
    def kv_elements_per_token_per_layer(self, layer: int = 0) -> int:
        """Cached elements per token in ``layer``: K and V heads, or MLA's latent plus its RoPE key; none in a
        recurrent layer (its state is per request: ``state_bytes_per_sequence``) or one reading another's cache."""
        self._check_layer(layer)
        if self.is_recurrent_layer(layer) or layer in self.kv_shared_layers:
            return 0
        if self.attention == "mla":
            assert self.mla is not None
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        kv_heads, head_dim = self.kv_shape(layer)
        return 2 * kv_heads * head_dim

    def kv_tokens_in_layer(self, layer: int, context_len: int) -> int:
        """Tokens ``layer`` keeps in its cache for a sequence of ``context_len`` tokens."""
        if context_len < 0:
            raise PdagInputError("context_len", f"negative context length {context_len}", "an integer >= 0")
        if self.is_sliding_layer(layer) and self.sliding_window is not None:
            return min(context_len, self.sliding_window)
        return context_len

    def indexer_bytes_per_token_per_layer(self, layer: int = 0) -> float:
        """The sparse-attention indexer's own key cache per token in ``layer`` (its fixed fp8 layout), 0 without."""
        if self.indexer is None or self.is_recurrent_layer(layer):
            return 0.0
        return self.indexer.cache_bytes_per_token()

    def state_bytes_per_sequence(self) -> float:
        """Recurrent state one request holds over all recurrent layers (conv + recurrent state), whatever its
        length; 0 for a model without recurrent layers."""
        if self.recurrent is None:
            return 0.0
        return self.recurrent.state_bytes() * len(self.recurrent.layers)

    def kv_bytes(self, context_len: int, dtype_bytes: float) -> int | float:
        """KV-cache bytes for one whole sequence of ``context_len`` tokens (window-capped layers), the indexer's
        key cache included; a recurrent model's fixed state is ``state_bytes_per_sequence``."""
        total = 0.0
        for layer in range(self.num_layers):
            tokens = self.kv_tokens_in_layer(layer, context_len)
            per = self.kv_elements_per_token_per_layer(layer) * dtype_bytes
            total += (per + self.indexer_bytes_per_token_per_layer(layer)) * tokens
        return _as_number(total)

    def kv_bytes_per_token(self, dtype_bytes: float, context_len: int | None = None) -> int | float:
        """KV bytes per token summed over layers. Without ``context_len`` every layer counts in full;
        with it, the average per token of a ``context_len`` sequence (sliding-window layers capped)."""
        if context_len is None:
            total = sum(self.kv_elements_per_token_per_layer(i) for i in range(self.num_layers))
            index = sum(self.indexer_bytes_per_token_per_layer(i) for i in range(self.num_layers))
            return _as_number(total * dtype_bytes + index)
        if context_len <= 0:
            raise PdagInputError("context_len", f"context length {context_len} must be positive",
                                 "an integer >= 1")
        return self.kv_bytes(context_len, dtype_bytes) / context_len


# ====================================================================== HF config normalisation
class _Cfg:
    """Typed, bounded reads from a raw config dict, raising PdagInputError with the field path."""

    def __init__(self, raw: dict[str, Any], prefix: str) -> None:
        self.raw = raw
        self.prefix = prefix

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def int(
        self, key: str, *, default: int | None = None, lo: int = 1, hi: int, required: bool = True
    ) -> int:
        value = self.raw.get(key)
        allowed = f"an integer in {lo}..{hi}"
        if value is None:
            if default is not None or not required:
                return default  # type: ignore[return-value]
            raise PdagInputError(self.path(key), "missing", allowed)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise PdagInputError(self.path(key), f"expected an integer, got {value!r}", allowed)
        if value < lo:
            raise PdagInputError(self.path(key), f"value {value} is too small", allowed)
        if value > hi:
            raise PdagInputError(self.path(key), f"value {value} is absurdly large", allowed)
        return value

    def opt_int(self, key: str, *, lo: int = 1, hi: int) -> int | None:
        return self.int(key, lo=lo, hi=hi, required=False)

    def bool(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise PdagInputError(self.path(key), f"expected true or false, got {value!r}", "a boolean")
        return value

    def int_list(self, key: str, *, hi: int) -> tuple[int, ...]:
        value = self.raw.get(key)
        if value is None:
            return ()
        if not isinstance(value, list | tuple) or any(
            isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < hi for v in value
        ):
            raise PdagInputError(self.path(key), f"expected a list of layer indices, got {value!r}",
                                 f"integers in 0..{hi - 1}")
        return tuple(sorted(set(value)))


def _detect_model_type(raw: dict[str, Any], prefix: str) -> tuple[str, bool]:
    """The config's model_type and whether it is read generically (no family reader, standard fields)."""
    supported = ", ".join(sorted(SUPPORTED_MODEL_TYPES))
    mt = raw.get("model_type")
    if mt is None:
        archs = raw.get("architectures")
        if isinstance(archs, list):
            for arch in archs:
                if arch in _ARCHITECTURES:
                    return _ARCHITECTURES[arch], False
        raise PdagInputError(f"{prefix}.model_type", "missing (and no known entry in architectures)",
                             f"supported model types: {supported}")
    if not isinstance(mt, str):
        raise PdagInputError(f"{prefix}.model_type", f"expected a string, got {shown(mt)}",
                             f"supported model types: {supported}")
    if mt in SUPPORTED_MODEL_TYPES:
        return mt, False
    if mt in WRAPPER_MODEL_TYPES:
        raise PdagInputError(f"{prefix}.text_config", f"a {mt} checkpoint keeps its language model under "
                             "text_config, which is missing", "the config.json with its text_config")
    if all(raw.get(k) is not None for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                             "vocab_size", "intermediate_size")):
        _refuse_generic(raw, prefix)
        return mt, True
    raise PdagInputError(f"{prefix}.model_type", f"unsupported model type {shown(mt)} without the standard fields "
                         "(num_hidden_layers, hidden_size, num_attention_heads, vocab_size, intermediate_size)",
                         f"supported model types: {supported}")


def _quant_config(c: Any) -> dict[str, Any]:
    raw = getattr(c, "raw", None)
    cfg = raw.get("quantization_config") if isinstance(raw, dict) else None
    return cfg if isinstance(cfg, dict) else {}


def _checkpoint_format(c: Any) -> str | None:

    return format_of_config(_quant_config(c))


def _fp8_block_scaled(c: Any) -> bool:
    return _checkpoint_format(c) == "fp8" and bool(_quant_config(c).get("weight_block_size"))


def _unquantized(c: Any) -> tuple[str, ...]:
    """Modules the checkpoint keeps in 16 bits: modules_to_not_convert, or compressed-tensors' and ModelOpt's
    ignore list (Kimi-K2.5's INT4 leaves attention, shared experts and dense MLPs out)."""
    cfg = _quant_config(c)
    mods = cfg.get("modules_to_not_convert") or cfg.get("ignore") or ()
    return tuple(str(m)[:200] for m in mods[:64]) if isinstance(mods, list) else ()


def from_hf_config(
    config: dict[str, Any],
    id: str | None = None,  # noqa: A002 - the public name the callers use
    *,
    field_prefix: str = "hf_config",
    name: str | None = None,
    hf_repo: str | None = None,
    published_params: float | None = None,
    published_active_params: float | None = None,
    published_active_excludes_embedding: bool = False,
    source: str | None = None,
) -> ModelSpec:
    """Normalise a Hugging Face ``config.json`` (as a dict) into a ``ModelSpec``.

    Supports Llama 2/3, Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen3-MoE, DeepSeek-V2/V3 and gpt-oss.
    Any missing, mistyped or absurd field raises ``PdagInputError`` naming ``<field_prefix>.<key>``.
    """
    prefix = field_prefix
    if not isinstance(config, dict):
        raise PdagInputError(prefix, f"expected a JSON object, got {type(config).__name__}",
                             "a Hugging Face config.json object")
    raw = config
    notes: list[str] = []
    # Multimodal wrappers keep the language model under text_config; the vision tower is not priced.
    if "num_hidden_layers" not in raw and isinstance(raw.get("text_config"), dict):
        outer = raw.get("model_type")
        raw = {**raw["text_config"]}
        prefix = f"{prefix}.text_config"
        if "tie_word_embeddings" not in raw and isinstance(config.get("tie_word_embeddings"), bool):
            raw["tie_word_embeddings"] = config["tie_word_embeddings"]  # Gemma-3 and Mistral-3 state it outside
        if "quantization_config" not in raw and isinstance(config.get("quantization_config"), dict):
            raw["quantization_config"] = config["quantization_config"]
        if "model_type" not in raw and outer in WRAPPER_MODEL_TYPES:
            raw["model_type"] = {"llama4": "llama4_text", "gemma3": "gemma3_text", "gemma4": "gemma4_text",
                                 "mistral3": "mistral",
                                 "kimi_k25": "kimi_k2", "qwen3_vl_moe": "qwen3_vl_moe_text",
                                 "qwen3_vl": "qwen3_vl_text", "qwen2_5_vl": "qwen2_5_vl_text",
                                 "qwen2_vl": "qwen2_vl_text", "qwen3_5_moe": "qwen3_5_moe_text"}[outer]
    if isinstance(config.get("vision_config"), dict):  # nested or flat (Qwen2.5-VL keeps its text fields on top)
        notes.append("the vision encoder (vision_config) and its projector are left out: weights, memory and "
                     "time are the language model's, serving text prompts")
    remote_code = "auto_map" in config and config.get("model_type") not in _families()["transformers_model_types"]
    model_type, generic = _detect_model_type(raw, prefix)
    if model_type in _SAME_DECODER:
        notes.append(f"model_type {model_type} is read as {_SAME_DECODER[model_type]} (the same text decoder)")
        model_type = _SAME_DECODER[model_type]
    c = _Cfg(raw, prefix)
    if generic:
        notes.append(_generic_note(raw, model_type, prefix))
    gemma = model_type in ("gemma2", "gemma3_text", "gemma4_text")

    num_layers = c.int("num_hidden_layers", hi=MAX_LAYERS)
    if model_type == "nemotron_h":  # a mixer block and the MLP block after it form one layer
        num_layers = len(_nemotron_blocks(c, num_layers))
    hidden = c.int("hidden_size", hi=MAX_HIDDEN)
    num_heads = c.int("num_attention_heads", hi=MAX_HEADS)
    num_kv_heads = c.int("num_key_value_heads", default=num_heads, hi=MAX_HEADS)
    # Gemma-3's published configs leave the vocabulary and context at the library's defaults.
    vocab = c.int("vocab_size", default=_default(model_type, "vocab_size"), hi=MAX_VOCAB)
    # Kimi-Linear states its context only as model_max_length, which vLLM also reads for the context cap
    context_default = c.int("model_max_length", default=4096, hi=MAX_POSITIONS) if model_type == "kimi_linear" else 4096
    max_pos = c.int("max_position_embeddings", default=_default(model_type, "max_position_embeddings") or
                    context_default, hi=MAX_POSITIONS)
    if num_kv_heads > num_heads or num_heads % num_kv_heads:
        raise PdagInputError(c.path("num_key_value_heads"),
                             f"{num_kv_heads} key/value heads do not divide {num_heads} attention heads",
                             f"a divisor of {num_heads}")
    head_dim = c.opt_int("head_dim", hi=MAX_HEAD_DIM)
    if head_dim is None and model_type in ("nemotron_h", "hunyuan", "hunyuan_v1_moe"):
        head_dim = c.opt_int("attention_head_dim", hi=MAX_HEAD_DIM)
    if head_dim is None and model_type not in _MLA_TYPES:
        if hidden % num_heads:
            raise PdagInputError(c.path("num_attention_heads"),
                                 f"{num_heads} heads do not divide hidden_size {hidden} "
                                 "and no head_dim is given",
                                 f"a divisor of {hidden}, or an explicit head_dim")
        head_dim = hidden // num_heads
    step_full: AttentionShape | None = None
    if model_type == "step3p5":  # the sliding layers' shape is the model's; the full layers keep their own
        num_heads, num_kv_heads, head_dim, step_full = _step3p5_shapes(c, num_heads, head_dim)

    # Gemma, Cohere-2 and ERNIE-4.5 tie their embeddings unless the config says otherwise (library defaults)
    tie = c.bool("tie_word_embeddings", gemma or bool(_default(model_type, "tie_word_embeddings")))
    attention_bias = c.bool("attention_bias", False)
    attention_out_bias = attention_bias
    mlp_bias = c.bool("mlp_bias", False)
    qk_norm = model_type in ("qwen3", "qwen3_moe", "gemma3_text", "gemma4_text", "qwen3_next")
    qk_norm_full = model_type == "olmo2"
    norms = 4 if gemma else 1 if model_type == "cohere2" else 2  # Cohere-2: one LayerNorm feeds both branches
    sinks = False
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    intermediate = 0
    mtp = 0
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    local: Literal["sliding", "chunked"] = "sliding"
    kinds: dict[str, Any] = {}  # recurrent layers, indexer, gates (_layer_kinds)

    def all_layers() -> tuple[int, ...]:
        return tuple(range(num_layers))

    if generic or model_type in ("llama", "mistral", "ministral", "ministral3", "qwen2", "qwen3", "gemma2",
                                 "gemma3_text", "gemma4_text", "phi3", "olmo2", "cohere2", "nemotron_h", "falcon_h1"):
        intermediate = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
    if model_type == "qwen2":
        attention_bias, attention_out_bias = True, False  # Qwen2 has q/k/v biases, none on o_proj
    if gemma:
        notes.append("Gemma soft-capping and query_pre_attn_scalar change numerics only, not bytes or FLOPs")

    if model_type == "mixtral":
        n_exp = c.int("num_local_experts", hi=MAX_EXPERTS)
        k = c.int("num_experts_per_tok", hi=MAX_EXPERTS)
        expert_i = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
        intermediate = expert_i
        moe = _moe(c, n_exp, k, expert_i, 0, 0, all_layers(), False, False)
    elif model_type == "qwen3_moe":
        intermediate = c.int("intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
        n_exp = c.int("num_experts", hi=MAX_EXPERTS)
        k = c.int("num_experts_per_tok", hi=MAX_EXPERTS)
        expert_i = c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE)
        step = c.int("decoder_sparse_step", default=1, hi=MAX_LAYERS)
        mlp_only = set(c.int_list("mlp_only_layers", hi=num_layers))
        layers = tuple(i for i in range(num_layers) if i not in mlp_only and (i + 1) % step == 0)
        if len(layers) < num_layers and intermediate == 0:
            raise PdagInputError(c.path("intermediate_size"), "missing, but some layers are dense",
                                 "a positive integer")
        moe = _moe(c, n_exp, k, expert_i, 0, 0, layers, False, False)
    elif model_type in _MLA_TYPES:
        intermediate = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
        mla = _mla(c)
        head_dim = mla.v_head_dim  # nominal; MLA sizes come from mla.*
        if model_type != "deepseek_v2":
            mtp = c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS)
        if c.has("n_routed_experts"):
            first_dense = c.int("first_k_dense_replace", default=0, lo=0, hi=MAX_LAYERS)
            freq = raw.get("moe_layer_freq", 1)
            if raw.get("mlp_layer_types") is not None:  # transformers' glm4_moe_lite spelling: "dense" / "sparse"
                mlp_kinds = raw["mlp_layer_types"]
                if not isinstance(mlp_kinds, list) or len(mlp_kinds) != num_layers or any(
                        k not in ("dense", "sparse") for k in mlp_kinds):
                    raise PdagInputError(c.path("mlp_layer_types"), "must give each layer's FFN kind",
                                         f"a list of {num_layers} of: dense, sparse")
                layers = tuple(i for i, k in enumerate(mlp_kinds) if k == "sparse")
            elif isinstance(freq, list) and len(freq) == num_layers and all(v in (0, 1) for v in freq):
                layers = tuple(i for i in range(num_layers) if freq[i] and i >= first_dense)
            else:
                f = c.int("moe_layer_freq", default=1, hi=MAX_LAYERS)
                layers = tuple(i for i in range(first_dense, num_layers) if i % f == 0)
            router_bias = model_type != "deepseek_v2" and raw.get("topk_method", "noaux_tc") == "noaux_tc"
            moe = _shared_moe(c, layers, router_bias)
    elif model_type == "kimi_linear":
        intermediate = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
        mla = _mla(c)
        head_dim = mla.v_head_dim  # nominal; MLA sizes come from mla.*
        moe, mtp = _kimi_linear_moe(c, num_layers)
    elif model_type == "gemma4_text" and c.bool("enable_moe_block", False):
        moe, norms = _gemma4_moe(c, num_layers, intermediate), norms + 3
    elif model_type == "qwen3_next":
        moe, intermediate = _qwen_shared_moe(c, num_layers)
        # MTP layers (never counted): Qwen3.5 states mtp_num_hidden_layers; Qwen3-Next's configs state none and
        # vLLM's qwen3_next_mtp.py takes getattr(config, "num_nextn_predict_layers", 1)
        mtp = c.int("mtp_num_hidden_layers", default=c.int("num_nextn_predict_layers", default=1, lo=0,
                                                             hi=MAX_LAYERS), lo=0, hi=MAX_LAYERS)
    elif model_type == "granitemoehybrid":
        moe, intermediate = _granite_moe(c, num_layers)
    elif model_type == "nemotron_h":
        moe = _nemotron_moe(c, c.int("num_hidden_layers", hi=MAX_LAYERS))
        mtp = c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS)
    elif model_type == "glm4_moe":
        intermediate = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
        attention_out_bias = False  # q/k/v biases only (attention_bias); o_proj has none
        qk_norm = c.bool("use_qk_norm", False)
        mtp = c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS)
        first_dense = c.int("first_k_dense_replace", default=1, lo=0, hi=MAX_LAYERS)
        moe = _shared_moe(c, tuple(range(min(first_dense, num_layers), num_layers)), True)
    elif model_type == "ernie4_5_moe":
        moe, intermediate, mtp = _ernie_moe(c, num_layers)
        attention_bias = attention_out_bias = mlp_bias = moe.expert_bias
    elif model_type == "llama4_text":
        intermediate = c.int("intermediate_size_mlp", hi=MAX_INTERMEDIATE)  # the dense layers' width
        expert_i = c.int("intermediate_size", hi=MAX_INTERMEDIATE)  # each expert's, and the shared expert's
        step = c.int("interleave_moe_layer_step", default=1, hi=MAX_LAYERS)
        layers = (c.int_list("moe_layers", hi=num_layers) if c.has("moe_layers")
                  else tuple(range(step - 1, num_layers, step)))
        moe = _moe(c, c.int("num_local_experts", hi=MAX_EXPERTS), c.int("num_experts_per_tok", hi=MAX_EXPERTS),
                   expert_i, 1, expert_i, layers, False, False)
        local = "chunked"
        notes.append("Llama-4 chunked-attention layers keep at most attention_chunk_size tokens of KV, as vLLM's "
                     "hybrid KV manager does when enabled; vLLM disables it by default for chunked attention "
                     "(VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 enables it) and then allocates "
                     "full-length KV on every layer")
    elif model_type in _READERS:
        read = _READERS[model_type](c, num_layers)
        intermediate, moe, mtp, notes = read.intermediate, read.moe, read.mtp, notes + list(read.notes)
        attention_bias, attention_out_bias, qk_norm, qk_norm_full, norms = read.pick(
            attention_bias, attention_out_bias, qk_norm, qk_norm_full, norms)
    elif model_type == "gpt_oss":
        n_exp = c.int("num_local_experts", hi=MAX_EXPERTS)
        k_key = "experts_per_token" if c.has("experts_per_token") else "num_experts_per_tok"
        k = c.int(k_key, hi=MAX_EXPERTS)
        expert_i = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
        intermediate = expert_i
        attention_bias = attention_out_bias = c.bool("attention_bias", True)
        sinks = True
        moe = _moe(c, n_exp, k, expert_i, 0, 0, all_layers(), True, True)

    kinds = _layer_kinds(c, model_type, num_layers, notes)
    if model_type == "step3p5":
        kinds.update(full_layer_shape=step_full, head_gate=c.bool("use_head_wise_attn_gate", False))
    if "recurrent" in kinds:  # its layer_types name linear layers, not windows (_qwen3_next_layers refuses others)
        sliding_window, sliding_layers = None, ()
    else:
        sliding_window, sliding_layers = _windowed_layers(c, model_type, num_layers, max_pos)

    assert head_dim is not None
    attention: Literal["mha", "gqa", "mla"] = (
        "mla" if mla is not None else "mha" if num_kv_heads == num_heads else "gqa"
    )

    spec_id = id or raw.get("_name_or_path") or f"{model_type}-custom"
    try:
        return ModelSpec(
            id=str(spec_id),
            name=name or str(spec_id),
            family=SUPPORTED_MODEL_TYPES.get(model_type, "generic"),
            model_type=model_type,
            num_layers=num_layers,
            hidden_size=hidden,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            intermediate_size=intermediate,
            vocab_size=vocab,
            tie_embeddings=tie,
            attention=attention,
            mla=mla,
            moe=moe,
            max_position_embeddings=max_pos,
            sliding_window=sliding_window,
            sliding_window_layers=sliding_layers,
            attention_bias=attention_bias,
            attention_out_bias=attention_out_bias,
            mlp_bias=mlp_bias,
            qk_norm=qk_norm,
            qk_norm_full=qk_norm_full,
            norms_per_layer=norms,
            local_attention=local,
            notes=tuple(notes),
            vision_encoder=isinstance(config.get("vision_config"), dict),
            remote_code=remote_code,
            attention_sinks=sinks,
            mtp_layers=mtp,
            **kinds,
            hf_repo=hf_repo,
            checkpoint_format=_checkpoint_format(c),
            unquantized_modules=_unquantized(c),
            fp8_block_scaled=_fp8_block_scaled(c),
            published_params=published_params,
            published_active_params=published_active_params,
            published_active_excludes_embedding=published_active_excludes_embedding,
            source=source,
        )
    except ValidationError as exc:  # a cross-field inconsistency the reads above did not catch
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise PdagInputError(f"{prefix}.{loc}" if loc else prefix, err.get("msg", "invalid"), None) from None


def _mla(c: _Cfg) -> MLASpec:
    q_rank = c.opt_int("q_lora_rank", hi=MAX_LORA_RANK)
    return MLASpec(
        q_lora_rank=q_rank,
        kv_lora_rank=c.int("kv_lora_rank", hi=MAX_LORA_RANK),
        qk_nope_head_dim=c.int("qk_nope_head_dim", lo=0, hi=MAX_HEAD_DIM),
        qk_rope_head_dim=c.int("qk_rope_head_dim", lo=0, hi=MAX_HEAD_DIM),
        v_head_dim=c.int("v_head_dim", hi=MAX_HEAD_DIM),
    )


def _moe(
    c: _Cfg,
    num_experts: int,
    experts_per_token: int,
    expert_i: int,
    n_shared: int,
    shared_i: int,
    layers: tuple[int, ...],
    router_bias: bool,
    expert_bias: bool,
    k_field: str = "num_experts_per_tok",
) -> MoESpec:
    if experts_per_token > num_experts:
        raise PdagInputError(c.path(k_field),
                             f"{experts_per_token} experts per token exceeds {num_experts} experts",
                             f"an integer in 1..{num_experts}")
    return MoESpec(
        num_experts=num_experts,
        experts_per_token=experts_per_token,
        num_shared_experts=n_shared,
        expert_intermediate_size=expert_i,
        shared_expert_intermediate_size=shared_i,
        moe_layers=layers,
        router_bias=router_bias,
        expert_bias=expert_bias,
    )


# ====================================================================== presets
@lru_cache(maxsize=1)
def preset_index() -> dict[str, dict[str, Any]]:
    """``knowledge/models/index.json``: id -> {file, hf_repo, published_params, ...}."""
    with open(MODELS_DIR / "index.json", encoding="utf-8") as f:
        return json.load(f)


def preset_ids() -> list[str]:
    return sorted(preset_index())


@cache
def _load_preset(key: str) -> ModelSpec:
    entry = preset_index()[key]
    with open(MODELS_DIR / entry["file"], encoding="utf-8") as f:
        config = json.load(f)
    return from_hf_config(
        config,
        id=key,
        field_prefix=f"knowledge/models/{entry['file']}",
        name=entry.get("name") or entry.get("hf_repo") or key,
        hf_repo=entry.get("hf_repo"),
        published_params=entry.get("published_params"),
        published_active_params=entry.get("published_active_params"),
        published_active_excludes_embedding=bool(entry.get("published_active_excludes_embedding", False)),
        source=entry.get("source"),
    )


@lru_cache(maxsize=1)
def _repo_aliases() -> dict[str, str]:
    """Hugging Face repo ids (and their listed variants) of every preset, lower-cased, to the preset id."""
    out: dict[str, str] = {}
    for key, entry in preset_index().items():
        for repo in [entry.get("hf_repo"), *entry.get("aliases", ())]:
            if isinstance(repo, str):
                out.setdefault(repo.lower(), key)
                out.setdefault(repo.lower().rsplit("/", 1)[-1], key)
    return out


# Repo names as people spell them: release and quantization suffixes keep a preset's shapes
_VERSION = re.compile(r"-v\d+(\.\d+)*")
_SUFFIX = re.compile(
    r"(-(instruct|chat|it|base|hf|bf16|fp8|fp4|nvfp4|mxfp4|awq|gptq|int4|int8|w4a16|w8a8|dynamic|block|channel|thinking"
    r"|terminus|kv|ptpc|quark|preview)"
    r"|-quantized\.w\d+a\d+|-v\d+(\.\d+)*|-\d{4})$"
)
_HF_CACHE = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)(?:/snapshots/[^/]+)?/?$")


def hub_repo(name: str) -> str:
    """The repo a Hugging Face hub cache path holds (``.../models--{org}--{name}/snapshots/{revision}``, the layout
    Dynamo, llm-d and KServe manifests serve from), else the name as given."""
    m = _HF_CACHE.search(name.strip())
    return f"{m.group(1)}/{m.group(2)}" if m else name


def base_name(name: str) -> str:
    """A checkpoint's name without its organisation, release and quantization suffixes."""
    base = hub_repo(name).strip().rstrip("/").split("/")[-1].lower()
    while True:
        m = _SUFFIX.search(base)
        if m is None:
            break
        stripped = base[:m.start()]
        # a version is a release of the same model ("-Instruct-v0.3") unless it is all the name's number
        # ("DeepSeek-V3.2": a sparse-attention successor, not a variant of DeepSeek-V3)
        if _VERSION.fullmatch(m.group(0)) and not any(c.isdigit() for c in stripped):
            break
        base = stripped
    return base.removeprefix("meta-")


@lru_cache(maxsize=1)
def _name_index() -> dict[str, tuple[str, str | None]]:
    """Every name a preset answers to -> (preset id, None), or (preset id, the config.json that shows it) for a
    checkpoint of its shapes: its id, repo and listed variants, as named and by base name."""
    out: dict[str, tuple[str, str | None]] = {}
    for pid, entry in preset_index().items():
        out[pid] = (pid, None)
        repo = entry.get("hf_repo")
        if repo:
            out[repo.lower()] = (pid, None)
            out.setdefault(base_name(repo), (pid, None))
        for alias in entry.get("aliases", ()):  # a preset's own repo wins over another's listed variant
            out.setdefault(alias.lower(), (pid, None))
            out.setdefault(base_name(alias), (pid, None))
    for pid, entry in preset_index().items():
        for same in entry.get("same_architecture", ()):
            out.setdefault(same["repo"].lower(), (pid, same["source"]))
            out.setdefault(base_name(same["repo"]), (pid, same["source"]))
    return out


def match_preset(name: str) -> tuple[str, str | None] | None:
    """The preset a checkpoint name means, with a note when it is matched loosely (a listed variant, an
    instruct or quantised release, a local path naming the repo, a checkpoint of the same shapes); None when
    nothing matches.  One resolver for plans and imported commands, so both accept the same names."""
    key = hub_repo(name[:MAX_MATCHED * 2]).strip().rstrip("/").lower()
    pid = _preset_key(key)  # an id, a repo or a listed variant, quantised or not, before any looser reading
    if pid is not None:
        own = str(preset_index()[pid].get("hf_repo") or "").lower()
        if key in (pid, own):
            return pid, None
        base = _load_preset(pid)
        tokens = for_checkpoint(base, key).max_position_embeddings
        window = "" if tokens == base.max_position_embeddings else f", with its own {tokens:,}-token native context"
        return pid, f"model {shown(name)} read as preset {pid!r} (listed as its variant{window})"
    # a local path names its repo in some pair of its directories (/models/nvidia/DeepSeek-R1-FP4/sharded)
    parts = [p for p in key.split("/") if p]
    for cand in [key] + ["/".join(parts[i - 1:i + 1]) for i in range(len(parts) - 2, 0, -1)]:
        for probe, why in ((cand, "the repo its path names"),
                           (base_name(cand), "same architecture as its base checkpoint")):
            found = _name_index().get(probe)
            if found is None:
                continue
            pid, config = found
            if config is not None:
                return pid, f"model {shown(name)} has the shapes of preset {pid!r} (its config.json: {config}); " \
                            f"estimated as {pid}"
            return pid, f"model {shown(name)} read as preset {pid!r} ({why})"
    return None


def _preset_key(key: str) -> str | None:
    """The preset a name means: its id, a repo id or repo name, or either with a quantization suffix."""
    aliases = _repo_aliases()
    for name in (key, key.rsplit("/", 1)[-1]):
        if name in preset_index():
            return name
        if name in aliases:
            return aliases[name]
        for suffix in _families()["repo_suffixes"]:
            if name.endswith(suffix) and name[: -len(suffix)] in aliases:
                return aliases[name[: -len(suffix)]]
    return None


@lru_cache(maxsize=1)
def _no_preset() -> dict[str, tuple[str, dict[str, Any]]]:
    """``knowledge/models/no_preset.json``: lower-cased repo id -> (kind, entry)."""
    with open(MODELS_DIR / "no_preset.json", encoding="utf-8") as f:
        data = json.load(f)
    return {repo.lower(): (kind, entry) for kind in ("no_citable_config", "out_of_scope")
            for entry in data[kind] for repo in entry["repos"]}


def why_no_preset(repo: str, field: str) -> PdagInputError | None:
    """The published fact that keeps a named checkpoint without a preset, as the error to raise: no citable
    config.json for a family pdag reads (the way out: bring the config), or a model outside pdag's scope."""
    known = _no_preset()
    name = repo.strip().rstrip("/").lower()
    hit = known.get(name)
    for suffix in _families()["repo_suffixes"]:
        if hit is None and name.endswith(suffix):
            hit = known.get(name[: -len(suffix)])
    if hit is None:
        return None
    kind, entry = hit
    if kind == "out_of_scope":
        return PdagInputError(field, f"{shown(repo)} is outside pdag's scope: {entry['fact']} ({entry['source']})",
                              "a generative decoder-only model that serves by prefill then token-by-token decode")
    return PdagInputError(
        field, f"no preset for {shown(repo)}: {entry['fact']} ({entry['source']})",
        f"bring the checkpoint's config.json (model_type {entry['model_type']}, which pdag reads): pdag import ... "
        '--hf-config FILE, --model path/to/config.json, {"hf_config": {...}} in a plan, or hf_config over MCP '
        "(import_deployment)")


def load_preset(id: str, *, field: str = "model") -> ModelSpec:  # noqa: A002
    """A preset by id or Hugging Face repo id (case-insensitive; FP8/AWQ/NVFP4 variants map to their base)."""
    how = ("or pass the model's config.json: --model path/to/config.json on the command line, "
           '{"hf_config": {...}} in a plan or over MCP')
    if not isinstance(id, str):
        raise PdagInputError(field, f"expected a preset id string, got {type(id).__name__}",
                             "presets: " + ", ".join(preset_ids()) + "; " + how)
    key = _preset_key(id[:MAX_MATCHED * 2].strip().lower())
    if key is None and (loose := match_preset(id)) is not None:
        pid, note = loose
        spec = _load_preset(pid)
        return spec.model_copy(update={"notes": (*spec.notes, note)}) if note else spec
    if key is None:
        known = why_no_preset(id[:MAX_MATCHED * 2], field)
        if known is not None:
            raise known
        hint = closest(id[:MAX_MATCHED * 2].strip().lower(), preset_ids())
        raise PdagInputError(field, f"unknown model {shown(id)}", "closest presets: " + ", ".join(hint) + "; " + how)
    return _load_preset(key)


def for_checkpoint(spec: ModelSpec, repo: str | None) -> ModelSpec:
    """The preset as the served checkpoint ships it: a release of the same shapes whose card states a longer
    native context (``checkpoint_contexts`` in index.json: Qwen3-235B-A22B's 2507 releases, 262,144 tokens against
    the base's 40,960) takes that window, so exports and fits do not cap it at the base's."""
    if not repo or spec.id not in preset_index():
        return spec
    contexts = {k.lower(): v for k, v in preset_index()[spec.id].get("checkpoint_contexts", {}).items()}
    tokens = contexts.get(repo.strip().rstrip("/").lower())
    if tokens is None or tokens == spec.max_position_embeddings:
        return spec
    note = (f"{repo.strip()} states a native context of {tokens:,} tokens (the preset's config: "
            f"{spec.max_position_embeddings:,}); the same shapes otherwise")
    return spec.model_copy(update={"max_position_embeddings": tokens, "notes": (*spec.notes, note)})


def resolve_model(model: str | dict[str, Any] | ModelSpec, *, field: str = "model") -> ModelSpec:
    """A preset id, ``{"hf_config": {...}}`` (optionally with ``id``/``name``), or a ModelSpec."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, str):
        return load_preset(model, field=field)
    if isinstance(model, dict):
        if "hf_config" in model:
            extra = set(model) - {"hf_config", "id", "name"}
            if extra:
                raise PdagInputError(f"{field}.{sorted(extra)[0]}", "unexpected key", "hf_config, id, name")
            mid = model.get("id")
            if mid is not None and not isinstance(mid, str):
                raise PdagInputError(f"{field}.id", f"expected a string, got {mid!r}", "a string")
            return from_hf_config(model["hf_config"], id=mid, field_prefix=f"{field}.hf_config",
                                  name=model.get("name") if isinstance(model.get("name"), str) else None)
        if "model_type" in model or "architectures" in model:  # a bare config.json
            return from_hf_config(model, field_prefix=field)
    raise PdagInputError(field, f"cannot use {type(model).__name__} as a model",
                         'a preset id (e.g. "llama-3.1-70b") or {"hf_config": {...}}')


@lru_cache(maxsize=1)
def _families() -> dict[str, Any]:
    """``knowledge/models/families.json``: library defaults per family and the generic reader's field lists."""
    with open(MODELS_DIR / "families.json", encoding="utf-8") as f:
        return json.load(f)


def _default(model_type: str, key: str) -> Any:
    return _families()["defaults"].get(model_type, {}).get(key)


def _shared_moe(c: _Cfg, layers: tuple[int, ...], router_bias: bool) -> MoESpec:
    """DeepSeek/Kimi/GLM-style MoE: routed experts plus n_shared_experts of the same width."""
    expert_i = c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE)
    n_shared = c.int("n_shared_experts", default=0, lo=0, hi=MAX_EXPERTS)
    return _moe(c, c.int("n_routed_experts", hi=MAX_EXPERTS), c.int("num_experts_per_tok", hi=MAX_EXPERTS),
                expert_i, n_shared, n_shared * expert_i, layers, router_bias, False)


def _ernie_moe(c: _Cfg, num_layers: int) -> tuple[MoESpec, int, int]:
    """ERNIE-4.5 MoE: layer i is MoE when (i + 1) % moe_layer_interval == 0 and it lies within
    moe_layer_start_index..moe_layer_end_index (-1: the last layer), else a dense FFN of intermediate_size;
    shared experts are one FFN of moe_num_shared_experts x moe_intermediate_size; the router carries a
    per-expert score-correction bias; use_bias puts biases on every projection. Returns the MoE block, the
    dense width and the MTP layers (never counted)."""
    raw_end = c.raw.get("moe_layer_end_index", _default("ernie4_5_moe", "moe_layer_end_index"))
    end = num_layers - 1 if raw_end == -1 else c.int("moe_layer_end_index", lo=0, hi=MAX_LAYERS)
    start = c.int("moe_layer_start_index", default=_default("ernie4_5_moe", "moe_layer_start_index"), lo=0,
                  hi=MAX_LAYERS)
    every = c.int("moe_layer_interval", default=_default("ernie4_5_moe", "moe_layer_interval"), hi=MAX_LAYERS)
    layers = tuple(i for i in range(num_layers) if (i + 1) % every == 0 and start <= i <= end)
    expert_i = c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE)
    n_shared = c.int("moe_num_shared_experts", default=_default("ernie4_5_moe", "moe_num_shared_experts"), lo=0,
                     hi=MAX_EXPERTS)
    dense_i = c.int("intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
    if len(layers) < num_layers and dense_i == 0:
        raise PdagInputError(c.path("intermediate_size"), "missing, but some layers are dense", "a positive integer")
    bias = c.bool("use_bias", False)
    moe = _moe(c, c.int("moe_num_experts", hi=MAX_EXPERTS), c.int("moe_k", hi=MAX_EXPERTS), expert_i, n_shared,
               n_shared * expert_i, layers, True, bias, "moe_k")
    return moe, dense_i, c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS)


# ====================================================================== small family readers
@dataclass(frozen=True)
class _Read:
    """What a family reader found: its FFN/MoE layout, MTP modules, notes, and the attention and norm details
    where the family departs from the Llama defaults (None keeps the default)."""

    intermediate: int = 0
    moe: MoESpec | None = None
    mtp: int = 0
    notes: tuple[str, ...] = ()
    attention_bias: bool | None = None
    attention_out_bias: bool | None = None
    qk_norm: bool | None = None
    qk_norm_full: bool | None = None
    norms: int | None = None

    def pick(self, attention_bias: bool, attention_out_bias: bool, qk_norm: bool, qk_norm_full: bool,
             norms: int) -> tuple[bool, bool, bool, bool, int]:
        """The reader's values where it states them, the defaults given where it does not."""
        return (attention_bias if self.attention_bias is None else self.attention_bias,
                attention_out_bias if self.attention_out_bias is None else self.attention_out_bias,
                qk_norm if self.qk_norm is None else self.qk_norm,
                qk_norm_full if self.qk_norm_full is None else self.qk_norm_full,
                norms if self.norms is None else self.norms)


def _no_window(c: _Cfg) -> None:
    """These families know no windowed layers: a window shorter than the context, with no layer_types saying which
    layers use it, would be dropped, so it is refused instead."""
    window = c.opt_int("sliding_window", hi=MAX_POSITIONS)
    max_pos = c.raw.get("max_position_embeddings")
    if window is not None and c.raw.get("layer_types") is None and not (isinstance(max_pos, int) and window >= max_pos):
        raise PdagInputError(c.path("sliding_window"), f"a {window}-token window, but this family's reader knows no "
                             "windowed layers and pdag refuses rather than price it as full attention",
                             "null, a window as long as max_position_embeddings, or layer_types naming the layers")


def _every_layer_moe(c: _Cfg, num_layers: int, experts_key: str, router_bias: bool) -> MoESpec:
    """Routed experts of intermediate_size on every layer, no shared expert (OLMoE, PhiMoE, MiniMax-M2)."""
    expert_i = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
    return _moe(c, c.int(experts_key, hi=MAX_EXPERTS), c.int("num_experts_per_tok", hi=MAX_EXPERTS), expert_i, 0, 0,
                tuple(range(num_layers)), router_bias, False)


def _read_gemma(c: _Cfg, num_layers: int) -> _Read:
    """Gemma (v1): a Llama-style decoder whose GeGLU FFN has the same three projections; head_dim is stated and
    the embeddings are tied (families.json defaults); no window and no soft-capping (transformers GemmaConfig,
    vLLM vllm/model_executor/models/gemma.py)."""
    _no_window(c)
    return _Read(intermediate=c.int("intermediate_size", hi=MAX_INTERMEDIATE))


def _read_glm4(c: _Cfg, num_layers: int) -> _Read:
    """GLM-4-0414 (glm4, dense): a Llama-style FFN, q/k/v biased when attention_bias and o_proj never, and four
    RMSNorms per layer (input, post_self_attn, post_attention, post_mlp); num_nextn_predict_layers MTP layers
    are dropped by the engines (vLLM vllm/model_executor/models/glm4.py, Glm4Attention and Glm4DecoderLayer)."""
    _no_window(c)
    return _Read(intermediate=c.int("intermediate_size", hi=MAX_INTERMEDIATE),
                 mtp=c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS),
                 attention_bias=c.bool("attention_bias", False), attention_out_bias=False, norms=4)


def _read_qwen2_moe(c: _Cfg, num_layers: int) -> _Read:
    """Qwen1.5/Qwen2-MoE: layer i is MoE unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step != 0
    (dense layers: intermediate_size); one shared expert of shared_expert_intermediate_size behind a hidden -> 1
    sigmoid gate; q/k/v biases as Qwen2 (vLLM vllm/model_executor/models/qwen2_moe.py, Qwen2MoeSparseMoeBlock)."""
    if c.bool("use_sliding_window", False):
        raise PdagInputError(c.path("use_sliding_window"), "Qwen2-MoE's sliding-window layer rule is not read; pdag "
                             "refuses rather than price it as full attention", "false (as published configs state)")
    moe, dense_i = _qwen_shared_moe(c, num_layers)
    return _Read(intermediate=dense_i, moe=moe,
                 attention_bias=True, attention_out_bias=False)


def _read_olmoe(c: _Cfg, num_layers: int) -> _Read:
    """OLMoE: every layer MoE (num_experts of intermediate_size, top num_experts_per_tok), no shared expert;
    q_norm and k_norm are RMSNorms over the whole q and k projections (transformers OlmoeAttention; vLLM
    vllm/model_executor/models/olmoe.py). clip_qkv clamps values only."""
    _no_window(c)
    moe = _every_layer_moe(c, num_layers, "num_experts", False)
    return _Read(intermediate=moe.expert_intermediate_size, moe=moe, qk_norm=False, qk_norm_full=True)


def _read_phimoe(c: _Cfg, num_layers: int) -> _Read:
    """Phi-3.5-MoE (phimoe): every layer MoE (num_local_experts of intermediate_size, top num_experts_per_tok);
    q/k/v/o biased when attention_bias; its two per-layer norms are LayerNorms with a bias each (four hidden-sized
    vectors). vLLM vllm/model_executor/models/phimoe.py."""
    _no_window(c)
    moe = _every_layer_moe(c, num_layers, "num_local_experts", False)
    bias = c.bool("attention_bias", False)
    note = ("PhiMoE's final LayerNorm bias and lm_head bias (hidden_size + vocab_size parameters) are not counted"
            if c.bool("lm_head_bias", False) else "PhiMoE's final LayerNorm bias (hidden_size parameters) is not "
            "counted")
    return _Read(intermediate=moe.expert_intermediate_size, moe=moe, notes=(note,), attention_bias=bias,
                 attention_out_bias=bias, norms=4)


def _read_minimax_m2(c: _Cfg, num_layers: int) -> _Read:
    """MiniMax-M2/M2.5/M2.7: full softmax attention on every layer (attn_type_list all 1), every layer MoE
    (num_local_experts of intermediate_size, top num_experts_per_tok, a per-expert routing bias when
    use_routing_bias), no shared expert; use_qk_norm with qk_norm_type per_layer is an RMSNorm over the whole q
    and k projections; num_mtp_modules MTP modules (not counted). vLLM vllm/model_executor/models/minimax_m2.py
    (MiniMaxM2Attention q_norm of head_dim * total_num_heads, MiniMaxM2MoE)."""
    types = c.raw.get("attn_type_list")
    if types is not None and (not isinstance(types, list) or len(types) != num_layers or any(t != 1 for t in types)):
        raise PdagInputError(c.path("attn_type_list"), "MiniMax-M2 is read with full attention (1) on every layer; a "
                             "lightning linear-attention layer (0) keeps a recurrent state this reader does not "
                             "price", f"a list of {num_layers} ones")
    if c.int("shared_intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE):
        raise PdagInputError(c.path("shared_intermediate_size"), "the engines' MiniMax-M2 model has no shared "
                             "expert", "0")
    _no_window(c)
    norm_type = c.raw.get("qk_norm_type", "per_layer")
    if norm_type != "per_layer":
        raise PdagInputError(c.path("qk_norm_type"), f"unknown q/k norm type {shown(norm_type)}", "per_layer")
    moe = _every_layer_moe(c, num_layers, "num_local_experts", c.bool("use_routing_bias", False))
    return _Read(intermediate=moe.expert_intermediate_size, moe=moe,
                 mtp=c.int("num_mtp_modules", default=0, lo=0, hi=MAX_LAYERS),
                 attention_bias=c.bool("attention_bias", False), attention_out_bias=False, qk_norm=False,
                 qk_norm_full=c.bool("use_qk_norm", False))


def _read_minimax(c: _Cfg, num_layers: int) -> _Read:
    """MiniMax-Text-01 / M1 (and transformers' minimax): every layer MoE, num_local_experts of intermediate_size, top
    num_experts_per_tok, no router bias; a shared MLP of shared_intermediate_size mixed in by a hidden -> 1
    coefficient when it is set; attention without biases or q/k norms (vLLM
    vllm/model_executor/models/minimax_text_01.py, MiniMaxText01DecoderLayer). The layer pattern is read by
    _minimax_lightning (called first here too, so that a config without the pattern is named by it, not by an expert
    field); postnorm and the alpha/beta residual scales change numerics only."""
    _minimax_lightning(c, num_layers)
    for key in ("num_local_experts", "shared_intermediate_size"):
        if isinstance(c.raw.get(key), list):
            raise PdagInputError(c.path(key), "a per-layer list is not read", "one integer for every layer")
    if c.raw.get("sliding_window") is not None:
        raise PdagInputError(c.path("sliding_window"), "a window on MiniMax's softmax layers is not read; pdag refuses "
                             "rather than price it as full attention", "null (as published configs state)")
    moe = _every_layer_moe(c, num_layers, "num_local_experts", False)
    shared = c.int("shared_intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
    if shared:
        moe = moe.model_copy(update={"num_shared_experts": 1, "shared_expert_intermediate_size": shared,
                                     "shared_expert_gate": True})
    return _Read(intermediate=moe.expert_intermediate_size, moe=moe, attention_bias=False, attention_out_bias=False,
                 notes=("vLLM's model registry lists MiniMax-Text-01 and M1 as removed in v0.23; MiniMax's vLLM guide "
                        "serves them with vLLM 0.8.3 or later",))


def _same_per_layer(c: _Cfg, key: str, num_layers: int, *, default: int | None = None, lo: int = 1,
                    hi: int) -> int:
    """A field Hunyuan states either once or once per layer (a list); a list must repeat one value, as the published
    checkpoints' do, since pdag prices one MoE block for every MoE layer."""
    value = c.raw.get(key)
    if isinstance(value, list):
        if len(value) != num_layers or any(v != value[0] for v in value):
            raise PdagInputError(c.path(key), "a per-layer list with differing values is not read (one MoE block is "
                                 "priced for every layer)", f"one integer, or a list of {num_layers} equal integers")
        return _Cfg({key: value[0]}, c.prefix).int(key, lo=lo, hi=hi)
    return c.int(key, default=default, lo=lo, hi=hi)


def _read_hunyuan(c: _Cfg, num_layers: int) -> _Read:
    """Hunyuan-A13B (hunyuan_v1_moe; older copies say hunyuan): MoE on layer i when num_experts > 1 and
    i >= moe_layer_num_skipped, num_experts experts of moe_intermediate_size, top moe_topk (each an integer or a list
    of one per layer), no router bias; use_mixed_mlp_moe adds a shared MLP of intermediate_size x num_shared_expert;
    q/k RMSNorms per head with use_qk_norm; biases on q/k/v and o_proj with attention_bias (vLLM
    vllm/model_executor/models/hunyuan_v1.py: HunYuanSparseMoeBlock, HunYuanAttention, HunYuanDecoderLayer).
    Cross-layer attention (use_cla) is read by _layer_kinds."""
    _no_window(c)
    dense_i = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
    bias = c.bool("attention_bias", False)
    read = _Read(intermediate=dense_i, attention_bias=bias, attention_out_bias=bias,
                 qk_norm=c.bool("use_qk_norm", False))
    experts = _same_per_layer(c, "num_experts", num_layers, default=1, hi=MAX_EXPERTS)
    if experts <= 1:
        return read
    skipped = c.int("moe_layer_num_skipped", default=0, lo=0, hi=MAX_LAYERS)
    shared = _same_per_layer(c, "num_shared_expert", num_layers, default=1, lo=0, hi=MAX_EXPERTS) \
        if c.bool("use_mixed_mlp_moe", False) else 0
    moe = _moe(c, experts, _same_per_layer(c, "moe_topk", num_layers, default=1, hi=MAX_EXPERTS),
               _same_per_layer(c, "moe_intermediate_size", num_layers, default=dense_i, hi=MAX_INTERMEDIATE),
               1 if shared else 0, shared * dense_i, tuple(range(min(skipped, num_layers), num_layers)), False, False,
               "moe_topk")
    return dataclass_replace(read, moe=moe)


def _read_bailing(c: _Cfg, num_layers: int) -> _Read:
    """Ling / Ring (bailing_moe, BailingMoeV2ForCausalLM): layers from first_k_dense_replace on are MoE, num_experts
    of moe_intermediate_size, top num_experts_per_tok, a per-expert score-correction bias with
    moe_router_enable_expert_bias, num_shared_experts as one MLP of moe_shared_expert_intermediate_size (else
    moe_intermediate_size) times their number; the first layers dense at intermediate_size; one fused q/k/v with biases
    under use_qkv_bias, per-head q/k RMSNorms under use_qk_norm; num_nextn_predict_layers MTP layers never counted
    (vLLM vllm/model_executor/models/bailing_moe.py: BailingAttention, BailingMoE, BailingMoeBlock). use_bias (biases
    on every projection) is refused: the published 2.0 configs state false."""
    if c.bool("use_bias", False):
        raise PdagInputError(c.path("use_bias"), "biases on every projection are not priced", "false (as the Ling and "
                             "Ring 2.0 configs state)")
    _no_window(c)
    first_dense = c.int("first_k_dense_replace", default=0, lo=0, hi=MAX_LAYERS)
    dense_i = c.int("intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
    if first_dense and not dense_i:
        raise PdagInputError(c.path("intermediate_size"), "missing, but the first layers are dense",
                             "a positive integer")
    expert_i = c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE)
    n_shared = c.int("num_shared_experts", default=0, lo=0, hi=MAX_EXPERTS)
    shared_i = c.int("moe_shared_expert_intermediate_size", default=expert_i, hi=MAX_INTERMEDIATE) * n_shared
    moe = _moe(c, c.int("num_experts", hi=MAX_EXPERTS), c.int("num_experts_per_tok", hi=MAX_EXPERTS), expert_i,
               n_shared, shared_i, tuple(range(min(first_dense, num_layers), num_layers)),
               c.bool("moe_router_enable_expert_bias", False), False)
    qkv_bias = c.bool("use_qkv_bias", False)
    return _Read(intermediate=dense_i, moe=moe, mtp=c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS),
                 attention_bias=qkv_bias, attention_out_bias=False, qk_norm=c.bool("use_qk_norm", False),
                 notes=("Ling/Ring's norm_head, partial rotary embedding and grouped sigmoid routing change numerics "
                        "only",))


def _kimi_linear_moe(c: _Cfg, num_layers: int) -> tuple[MoESpec | None, int]:
    """Kimi-Linear's MoE: layer i is MoE when num_experts is set, i >= first_k_dense_replace and i % moe_layer_freq == 0
    (the others dense at intermediate_size); num_experts of moe_intermediate_size, top num_experts_per_token, shared
    experts as one MLP of num_shared_experts x moe_intermediate_size, a score-correction bias per expert with sigmoid
    routing (vLLM vllm/model_executor/models/kimi_linear.py, KimiMoE and KimiDecoderLayer). Returns the block and the
    MTP layers (never counted). Kimi-K3's latent experts and output-gated MLA are refused, not priced as these."""
    for key in ("routed_expert_hidden_size", "attn_res_block_size"):
        if c.raw.get(key) is not None:
            raise PdagInputError(c.path(key), "a Kimi-K3 field this reader does not price (latent experts, attention "
                                 "residual blocks)", "a Kimi-Linear config without it")
    if c.bool("mla_use_output_gate", False):
        raise PdagInputError(c.path("mla_use_output_gate"), "an output gate on MLA is not priced", "false")
    mtp = c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS)
    if not c.has("num_experts"):
        return None, mtp
    first_dense = c.int("first_k_dense_replace", default=0, lo=0, hi=MAX_LAYERS)
    every = c.int("moe_layer_freq", default=1, hi=MAX_LAYERS)
    expert_i = c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE)
    n_shared = c.int("num_shared_experts", default=0, lo=0, hi=MAX_EXPERTS)
    sigmoid = c.raw.get("moe_router_activation_func", "sigmoid") == "sigmoid"
    moe = _moe(c, c.int("num_experts", hi=MAX_EXPERTS), c.int("num_experts_per_token", hi=MAX_EXPERTS), expert_i,
               n_shared, n_shared * expert_i, tuple(i for i in range(first_dense, num_layers) if i % every == 0),
               sigmoid, False, "num_experts_per_token")
    return moe, mtp


def _kimi_linear_layers(c: _Cfg, num_layers: int) -> RecurrentSpec:
    """Kimi-Linear's Kimi Delta Attention layers: ``linear_attn_config.kda_layers`` and ``full_attn_layers`` number the
    layers from 1 and together list each once (the MLA layers are the full ones); num_heads heads of head_dim for q, k
    and v, each with a short convolution of short_conv_kernel_size (vLLM vllm/model_executor/models/kimi_linear.py,
    KimiDeltaAttention; transformers-side config configuration_kimi.py: is_kda_layer(i) tests i + 1 in kda_layers)."""
    lin = c.raw.get("linear_attn_config")
    key = c.path("linear_attn_config")
    if not isinstance(lin, dict):
        raise PdagInputError(key, "missing: it says which layers are KDA and sizes them", "an object with kda_layers, "
                             "full_attn_layers, num_heads, head_dim")
    sub = _Cfg(lin, key)
    kda = sub.int_list("kda_layers", hi=num_layers + 1)
    full = sub.int_list("full_attn_layers", hi=num_layers + 1)
    if sorted([*kda, *full]) != list(range(1, num_layers + 1)):
        raise PdagInputError(sub.path("kda_layers"), "kda_layers and full_attn_layers must together list every layer "
                             "once, numbered from 1", f"1..{num_layers} split between the two lists")
    heads = sub.int("num_heads", hi=MAX_HEADS)
    d = sub.int("head_dim", hi=MAX_HEAD_DIM)
    return RecurrentSpec(kind="kda", layers=tuple(i - 1 for i in kda), num_heads=heads, num_key_heads=heads,
                         key_head_dim=d, value_head_dim=d, conv_kernel=sub.int("short_conv_kernel_size", default=4,
                                                                                 hi=1024),
                         ssm_state_bytes=float(layer_kind_data()["state_dtype_bytes"][layer_kind_data()[
                             "kda_recurrent_state_dtype"]]))


def _step3p5_shapes(c: _Cfg, heads: int, head_dim: int) -> tuple[int, int, int, AttentionShape | None]:
    """Step-3.5-Flash's two attention shapes: the full layers use num_attention_heads query heads and
    num_attention_groups KV heads; the sliding layers take attention_other_setting's (96 query heads against 64 in the
    published config). Returns the sliding shape as the model's (heads, KV heads, head size) and the full layers' own
    (vLLM vllm/model_executor/models/step3p5.py, Step3p5DecoderLayer)."""
    kv = c.int("num_attention_groups", hi=MAX_HEADS)
    if heads % kv:
        raise PdagInputError(c.path("num_attention_groups"), f"{kv} KV heads do not divide {heads} attention heads",
                             f"a divisor of {heads}")
    other = c.raw.get("attention_other_setting")
    if other is None:
        return heads, kv, head_dim, None
    o = _Cfg(other if isinstance(other, dict) else {}, c.path("attention_other_setting"))
    if not isinstance(other, dict) or other.get("attention_type") != "sliding_attention":
        raise PdagInputError(o.prefix, "expected the sliding layers' shape", 'an object with attention_type '
                             '"sliding_attention", num_attention_heads, num_attention_groups')
    s_heads = o.int("num_attention_heads", hi=MAX_HEADS)
    s_kv = o.int("num_attention_groups", default=kv, hi=MAX_HEADS)
    s_dim = o.int("head_dim", default=head_dim, hi=MAX_HEAD_DIM)
    if s_heads % s_kv:
        raise PdagInputError(o.path("num_attention_groups"), f"{s_kv} KV heads do not divide {s_heads} attention "
                             "heads", f"a divisor of {s_heads}")
    full = AttentionShape(num_kv_heads=kv, head_dim=head_dim, num_heads=heads)
    same = full == AttentionShape(num_kv_heads=s_kv, head_dim=s_dim, num_heads=s_heads)
    return s_heads, s_kv, s_dim, None if same else full


def _step3p5_moe_layers(c: _Cfg, num_layers: int) -> tuple[int, ...]:
    """moe_layers_enum: the MoE layers as a comma-separated string (the published config) or a list; without it every
    layer but the first (the checkpoint's own modeling code); indices past the decoder (MTP layers) are left out."""
    raw = c.raw.get("moe_layers_enum")
    if raw is None:
        return tuple(range(1, num_layers))
    parts = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else None
    items = [int(v) if isinstance(v, str) and v.strip().isdigit() else v for v in parts or ()
             if not (isinstance(v, str) and not v.strip())]
    if parts is None or any(isinstance(v, bool) or not isinstance(v, int) for v in items):
        raise PdagInputError(c.path("moe_layers_enum"), f"expected layer indices, got {shown(raw)}",
                             "a comma-separated string or a list of layer indices")
    if any(i < 0 for i in items):
        raise PdagInputError(c.path("moe_layers_enum"), "a negative layer index", f"indices in 0..{num_layers - 1}")
    return tuple(sorted({i for i in items if i < num_layers}))


def _read_step3p5(c: _Cfg, num_layers: int) -> _Read:
    """Step-3.5-Flash (step3p5): dense layers of intermediate_size, MoE on the moe_layers_enum layers with
    moe_num_experts experts of moe_intermediate_size, top moe_top_k, a routing bias with use_moe_router_bias, one
    shared expert of share_expert_dim; per-head q/k RMSNorms with use_qk_norm; num_nextn_predict_layers MTP layers
    never counted (vLLM vllm/model_executor/models/step3p5.py; the checkpoint's modeling_step3p5.py). The attention
    shapes and the head-wise gate are read by _step3p5_shapes and from_hf_config."""
    if c.raw.get("att_impl_type", "GQA") != "GQA":
        raise PdagInputError(c.path("att_impl_type"), f"attention {shown(c.raw.get('att_impl_type'))} is not read",
                             "GQA")
    dense_i = c.int("intermediate_size", hi=MAX_INTERMEDIATE)
    read = _Read(intermediate=dense_i, mtp=c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS),
                 attention_bias=c.bool("attention_bias", False), attention_out_bias=False,
                 qk_norm=c.bool("use_qk_norm", False),
                 notes=("Step-3.5's per-layer RoPE bases, partial rotary factors and SwiGLU clamps change numerics "
                        "only",))
    if not c.bool("use_moe", True) or not c.has("moe_num_experts"):
        return read
    shared = c.int("share_expert_dim", default=0, lo=0, hi=MAX_INTERMEDIATE)
    moe = _moe(c, c.int("moe_num_experts", hi=MAX_EXPERTS), c.int("moe_top_k", hi=MAX_EXPERTS),
               c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE), 1 if shared else 0, shared,
               _step3p5_moe_layers(c, num_layers), c.bool("use_moe_router_bias", False), False, "moe_top_k")
    return dataclass_replace(read, moe=moe)


_READERS: dict[str, Callable[[_Cfg, int], _Read]] = {
    "minimax": _read_minimax,
    "minimax_m1": _read_minimax,
    "minimax_text_01": _read_minimax,
    "gemma": _read_gemma,
    "qwen2_moe": _read_qwen2_moe,
    "olmoe": _read_olmoe,
    "phimoe": _read_phimoe,
    "minimax_m2": _read_minimax_m2,
    "glm4": _read_glm4,
    "hunyuan": _read_hunyuan,
    "hunyuan_v1_moe": _read_hunyuan,
    "bailing_moe": _read_bailing,
    "bailing_moe_v2": _read_bailing,
    "step3p5": _read_step3p5,
}


_WINDOWED = {"sliding_attention": "sliding", "chunked_attention": "chunked"}
_LAYER_KINDS = ("full_attention", "sliding_attention", "chunked_attention")


def _windowed_layers(c: _Cfg, model_type: str, num_layers: int, max_pos: int) -> tuple[int | None, tuple[int, ...]]:
    """The window (sliding, or Llama-4's chunk) and the layers it applies to, as the config states them:
    ``layer_types`` when given, else the family's rule (its engines' and library's reading)."""
    raw = c.raw
    if model_type == "llama4_text":
        chunk = c.opt_int("attention_chunk_size", hi=MAX_POSITIONS)
        types = raw.get("layer_types")
        if types is not None:
            layers = _typed_layers(c, num_layers, "chunked_attention")
        else:
            nope = raw.get("no_rope_layers")
            if isinstance(nope, list) and nope:
                if len(nope) != num_layers or any(v not in (0, 1) for v in nope):
                    raise PdagInputError(c.path("no_rope_layers"), "must give 0 or 1 per layer",
                                         f"a list of {num_layers} zeros and ones")
                layers = tuple(i for i, v in enumerate(nope) if v)
            else:
                every = c.int("no_rope_layer_interval", default=_default(model_type, "no_rope_layer_interval"),
                              hi=MAX_LAYERS)
                layers = tuple(i for i in range(num_layers) if (i + 1) % every)
        return (chunk, layers) if chunk is not None and layers else (None, ())
    if model_type == "step3p5" and isinstance(raw.get("layer_types"), list):
        mtp = c.int("num_nextn_predict_layers", default=0, lo=0, hi=MAX_LAYERS)
        if len(raw["layer_types"]) == num_layers + mtp:  # the published list names the MTP layers' kinds too
            c = _Cfg({**raw, "layer_types": raw["layer_types"][:num_layers]}, c.prefix)
            raw = c.raw
    window = c.opt_int("sliding_window", hi=MAX_POSITIONS)
    if window is None:
        window = _default(model_type, "sliding_window")
    if raw.get("layer_types") is not None:
        layers = _typed_layers(c, num_layers, "sliding_attention")
        if layers and window is None:
            raise PdagInputError(c.path("sliding_window"), "missing, but layer_types has sliding layers",
                                 "a positive integer")
    elif model_type in ("qwen2", "qwen3", "qwen3_moe"):
        layers = ()
        if c.bool("use_sliding_window", False) and window is not None:
            first = c.int("max_window_layers", default=num_layers, lo=0, hi=MAX_LAYERS)
            layers = tuple(range(min(first, num_layers), num_layers))
    elif model_type == "gemma2":
        layers = tuple(range(0, num_layers, 2))  # even layers slide, odd layers are global
    elif model_type in ("gemma3_text", "cohere2"):
        every = c.int("sliding_window_pattern", default=_default(model_type, "sliding_window_pattern"),
                      hi=MAX_LAYERS)
        layers = tuple(i for i in range(num_layers) if (i + 1) % every)
    elif model_type in ("mistral", "mixtral", "ministral", "ministral3", "phi3") and window is not None:
        layers = tuple(range(num_layers))
    else:
        layers = ()
    if not layers or window is None:
        return None, ()
    if window >= max_pos and model_type != "gpt_oss":
        return None, ()  # a window as long as the context changes nothing
    return window, layers


def _typed_layers(c: _Cfg, num_layers: int, windowed: str) -> tuple[int, ...]:
    """Layers ``layer_types`` marks ``windowed``; a kind pdag cannot price (linear attention, Mamba) is refused."""
    types = c.raw.get("layer_types")
    if not isinstance(types, list) or len(types) != num_layers:
        raise PdagInputError(c.path("layer_types"), "must list one attention type per layer",
                             f"a list of {num_layers} strings")
    for t in types:
        if t not in _LAYER_KINDS:
            raise PdagInputError(c.path("layer_types"),
                                 f"layer kind {shown(t)} is not priced yet (pdag refuses rather than price it "
                                 "as full attention)", ", ".join(_LAYER_KINDS))
    return tuple(i for i, t in enumerate(types) if t == windowed)


def _generic_note(raw: dict[str, Any], model_type: str, prefix: str) -> str:
    """An unknown model_type read as a Llama-style decoder: say so and name every field left unread."""
    read = set(_families()["generic"]["read"])
    unused = sorted(str(k)[:60] for k in raw if k not in read)
    listed = ", ".join(unused[:80]) + (f" and {len(unused) - 80} more" if len(unused) > 80 else "")
    return (f"{prefix}.model_type {shown(model_type)} has no reader: read generically as a Llama-style decoder "
            "(RMSNorm, SwiGLU FFN, GQA attention); fields not used: " + (listed or "none"))


def _refuse_generic(raw: dict[str, Any], prefix: str) -> None:
    """A field that changes memory or time must not be dropped by the generic reading: refuse, naming it."""
    for key in _families()["generic"]["changes_memory_or_time"]:
        value = raw.get(key)
        if value not in (None, 0, False, [], {}, ""):
            raise PdagInputError(f"{prefix}.{key}",
                                 f"this model_type has no reader and {key} changes memory or time; pdag refuses "
                                 "rather than price it as a plain decoder",
                                 "a supported model_type: " + ", ".join(sorted(SUPPORTED_MODEL_TYPES)))
    types = raw.get("layer_types")
    if isinstance(types, list) and any(t != "full_attention" for t in types):
        raise PdagInputError(f"{prefix}.layer_types", "this model_type has no reader and its layer pattern "
                             "changes memory or time", "only full_attention layers, or a supported model_type")
    if raw.get("sliding_window") not in (None, 0):
        raise PdagInputError(f"{prefix}.sliding_window", "this model_type has no reader and which layers use "
                             "the window is unknown", "a supported model_type: "
                             + ", ".join(sorted(SUPPORTED_MODEL_TYPES)))


# ====================================================================== layer kinds beyond K/V attention
def _layer_kinds(c: _Cfg, model_type: str, num_layers: int, notes: list[str]) -> dict[str, Any]:
    """ModelSpec fields for recurrent layers and the sparse-attention indexer (tools/core/layerkinds.py), with a
    note saying what is priced per layer kind; empty for a model of K/V attention only."""
    if model_type == "qwen3_next":
        rec = _qwen3_next_layers(c, num_layers)
        state = ("16-bit, as vLLM's mamba cache dtypes default" if rec.ssm_state_bytes == 2 else
                 f"the conv window in 16 bits, the recurrent state in {rec.ssm_state_bytes * 8:g} bits as the "
                 "config's mamba_ssm_dtype says and vLLM keeps it")
        notes.append(f"{len(rec.layers)} of {num_layers} layers are gated DeltaNet (linear attention): each holds a "
                     f"fixed conv + recurrent state per request ({state}), no KV "
                     f"per token; the other {num_layers - len(rec.layers)} are gated full attention with KV")
        return {"recurrent": rec, "attention_output_gate": True}
    if model_type == "deepseek_v32":
        for key in ("index_topk_freq", "index_topk_pattern", "index_skip_topk_offset"):
            if c.raw.get(key) is not None:
                raise PdagInputError(c.path(key), "IndexCache top-k skipping is not priced yet; pdag refuses rather "
                                     "than price every layer's indexer", "a config without it (DeepSeek-V3.2's own)")
        if not c.has("q_lora_rank"):
            raise PdagInputError(c.path("q_lora_rank"), "missing: the sparse-attention indexer projects from the "
                                 "query latent", "a positive integer")
        idx = IndexerSpec(num_heads=c.int("index_n_heads", hi=MAX_HEADS), head_dim=c.int("index_head_dim",
                          hi=MAX_HEAD_DIM), topk=c.int("index_topk", hi=MAX_POSITIONS))
        notes.append(f"DeepSeek sparse attention: each query attends to the indexer's top {idx.topk} keys (all of a "
                     f"shorter context); the indexer ({idx.num_heads} heads of {idx.head_dim}) scores every key and "
                     f"keeps its own fp8 key cache of {idx.cache_bytes_per_token():g} bytes per token per layer beside "
                     "MLA's latent; its scoring is priced at 16-bit attention speed (the engines' fp8 kernels are "
                     "faster: an upper bound)")
        return {"indexer": idx}
    if model_type == "nemotron_h":
        blocks = _nemotron_blocks(c, c.int("num_hidden_layers", hi=MAX_LAYERS))
        heads = c.int("mamba_num_heads", hi=MAX_HEADS)
        groups = c.int("n_groups", default=1, hi=MAX_HEADS)
        if heads % groups:
            raise PdagInputError(c.path("n_groups"), f"{groups} groups do not divide {heads} Mamba heads",
                                 f"a divisor of {heads}")
        rec = RecurrentSpec(kind="mamba2", layers=tuple(i for i, (mixer, _) in enumerate(blocks) if mixer == "M"),
                            num_heads=heads, num_key_heads=groups,
                            key_head_dim=c.int("ssm_state_size", hi=MAX_HEAD_DIM),
                            value_head_dim=c.int("mamba_head_dim", hi=MAX_HEAD_DIM),
                            conv_kernel=c.int("conv_kernel", default=4, hi=1024),
                            conv_bias=c.bool("use_conv_bias", True),
                            proj_bias=c.bool("mamba_proj_bias", c.bool("use_bias", False)),
                            ssm_state_bytes=_ssm_cache_bytes(c))
        alone = tuple(i for i, (_, ffn) in enumerate(blocks) if not ffn)
        moe_blocks = sum(1 for _, ffn in blocks if ffn == "E")
        latent = c.raw.get("moe_latent_size") if moe_blocks else None
        if latent:
            notes.append(f"MoE blocks project each token to a {latent}-wide latent for the routed experts and back "
                         "(fc1/fc2_latent_proj, replicated like the router): the experts and the all-to-all work at "
                         "that width")
        notes.append(f"hybrid_override_pattern: {len(rec.layers)} Mamba-2 and {len(blocks) - len(rec.layers)} "
                     "attention blocks, each read with the MLP or MoE block after it as one layer "
                     f"({moe_blocks} MoE, {len(alone)} without an FFN); a Mamba-2 layer holds a fixed state per "
                     "request, no KV per token: "
                     f"the conv window in 16 bits and the SSM state in {rec.ssm_state_bytes * 8:g} bits (vLLM's "
                     "Nemotron-H default: the config's mamba_ssm_cache_dtype, else float32); MLPs are up -> ReLU^2 -> "
                     "down (no gate)")
        return {"recurrent": rec, "ffn_free_layers": alone, "ffn_gated": False}
    if model_type == "falcon_h1":
        rec = _falcon_h1_mamba(c, num_layers)
        notes.append(f"every one of the {num_layers} layers runs attention and a Mamba-2 mixer side by side and adds "
                     "their outputs (Falcon-H1's parallel hybrid): each layer keeps attention's KV per token and a "
                     "fixed conv + SSM state per request (16-bit); the muP multipliers change numerics only")
        return {"recurrent": rec}
    if model_type == "gemma4_text":
        return _gemma4_layers(c, num_layers, notes)
    if SUPPORTED_MODEL_TYPES.get(model_type) == "hunyuan" and c.bool("use_cla", False):
        factor = c.int("cla_share_factor", default=1, hi=MAX_LAYERS)
        shared = tuple(i for i in range(num_layers) if i % factor)
        if shared:
            notes.append(f"cross-layer attention (cla_share_factor {factor}): {len(shared)} of {num_layers} layers "
                         "attend over the K and V of the layer before them, with no k/v projections and no KV of "
                         "their own")
        return {"kv_shared_layers": shared, "cross_layer_kv": True}
    if model_type == "kimi_linear":
        rec = _kimi_linear_layers(c, num_layers)
        notes.append(f"{len(rec.layers)} of {num_layers} layers are Kimi Delta Attention (linear attention): each "
                     "holds a fixed state per request, the q/k/v convolution windows in 16 bits and the recurrent "
                     f"{rec.num_heads} x {rec.key_head_dim} x {rec.value_head_dim} state in "
                     f"{rec.ssm_state_bytes * 8:g} bits (vLLM's KDA state dtypes), no KV per token; the other "
                     f"{num_layers - len(rec.layers)} are MLA with its latent KV")
        return {"recurrent": rec}
    if SUPPORTED_MODEL_TYPES.get(model_type) == "minimax":
        rec = _minimax_lightning(c, num_layers)
        notes.append(f"{len(rec.layers)} of {num_layers} layers are lightning attention (linear attention): each holds "
                     f"a fixed {rec.num_heads} x {rec.key_head_dim} x {rec.value_head_dim} state per request (16-bit, "
                     "as vLLM's linear-attention state dtype), no KV per token; the other "
                     f"{num_layers - len(rec.layers)} are softmax attention with KV")
        return {"recurrent": rec}
    if model_type == "granitemoehybrid":
        rec = _granite_mamba(c, num_layers)
        notes.append(f"{len(rec.layers)} of {num_layers} layers are Mamba-2 (a fixed conv + SSM state per request, "
                     "16-bit, no KV per token), the others attention; Granite's embedding, residual, attention and "
                     "logit multipliers change numerics only")
        return {"recurrent": rec}
    return {}


def _granite_default(c: _Cfg, key: str, *, lo: int = 1, hi: int) -> int:
    default = layer_kind_data()["defaults"]["granitemoehybrid"][key]
    return c.int(key, default=default, lo=lo, hi=hi)


def _granite_mamba(c: _Cfg, num_layers: int) -> RecurrentSpec:
    """Granite-4's Mamba-2 layers: ``layer_types`` ("mamba" / "attention"; all Mamba when absent), heads of
    ``mamba_d_head`` (``auto``: mamba_expand x hidden / heads)."""
    key = "layer_types" if c.raw.get("layer_types") is not None else "layers_block_type"
    types = c.raw.get(key)
    if types is None:
        layers = tuple(range(num_layers))
    elif not isinstance(types, list) or len(types) != num_layers or any(t not in ("mamba", "attention") for t in types):
        raise PdagInputError(c.path(key), "must list one layer kind per layer", f"a list of {num_layers} of: mamba, "
                             "attention")
    else:
        layers = tuple(i for i, t in enumerate(types) if t == "mamba")
    heads = _granite_default(c, "mamba_n_heads", hi=MAX_HEADS)
    groups = _granite_default(c, "mamba_n_groups", hi=MAX_HEADS)
    inner = _granite_default(c, "mamba_expand", hi=1024) * c.int("hidden_size", hi=MAX_HIDDEN)
    if c.raw.get("mamba_d_head", "auto") == "auto":
        if inner % heads:
            raise PdagInputError(c.path("mamba_n_heads"), f"{heads} heads do not divide the Mamba width {inner}",
                                 f"a divisor of {inner}")
        d_head = inner // heads
    else:
        d_head = c.int("mamba_d_head", hi=MAX_HEAD_DIM)
    if heads % groups:
        raise PdagInputError(c.path("mamba_n_groups"), f"{groups} groups do not divide {heads} Mamba heads",
                             f"a divisor of {heads}")
    return RecurrentSpec(kind="mamba2", layers=layers, num_heads=heads, num_key_heads=groups,
                         key_head_dim=_granite_default(c, "mamba_d_state", hi=MAX_HEAD_DIM), value_head_dim=d_head,
                         conv_kernel=_granite_default(c, "mamba_d_conv", hi=1024),
                         conv_bias=c.bool("mamba_conv_bias", True), proj_bias=c.bool("mamba_proj_bias", False))


def _falcon_h1_mamba(c: _Cfg, num_layers: int) -> RecurrentSpec:
    """Falcon-H1's Mamba-2 mixer, beside attention in every layer: inner width ``mamba_d_ssm`` (else the stated heads'
    width, else mamba_expand x hidden), heads of ``mamba_d_head`` (``auto``: the inner width over the heads), a gated
    norm only with ``mamba_rms_norm``, ``mamba_proj_bias`` on in_proj and ``projectors_bias`` on out_proj (transformers
    FalconH1Mixer). ``attn_layer_indices`` (attention on some layers only) is refused: no published config sets it."""
    if c.raw.get("attn_layer_indices") is not None:
        raise PdagInputError(c.path("attn_layer_indices"), "attention on some layers only is not read: pdag prices "
                             "Falcon-H1 with attention and Mamba-2 in every layer", "null (as published configs state)")
    defaults = layer_kind_data()["defaults"]["falcon_h1"]
    hidden = c.int("hidden_size", hi=MAX_HIDDEN)
    heads = c.int("mamba_n_heads", hi=MAX_HEADS)  # required with the state size: every published config states both
    groups = c.int("mamba_n_groups", default=defaults["mamba_n_groups"], hi=MAX_HEADS)
    auto = c.raw.get("mamba_d_head", "auto") == "auto"
    inner = c.int("mamba_d_ssm", default=0, lo=0, hi=MAX_INTERMEDIATE)
    if not inner:  # the heads' width when they are stated (the only width transformers accepts), else expand x hidden
        inner = heads * c.int("mamba_d_head", hi=MAX_HEAD_DIM) if not auto else \
            c.int("mamba_expand", default=defaults["mamba_expand"], hi=1024) * hidden
    if auto:
        if inner % heads:
            raise PdagInputError(c.path("mamba_n_heads"), f"{heads} heads do not divide the Mamba width {inner}",
                                 f"a divisor of {inner}")
        d_head = inner // heads
    else:
        d_head = c.int("mamba_d_head", hi=MAX_HEAD_DIM)
        if d_head * heads != inner:
            raise PdagInputError(c.path("mamba_d_head"), f"{heads} heads of {d_head} are not the Mamba width {inner}",
                                 f"{inner // heads if inner % heads == 0 else 'auto'}")
    if heads % groups:
        raise PdagInputError(c.path("mamba_n_groups"), f"{groups} groups do not divide {heads} Mamba heads",
                             f"a divisor of {heads}")
    return RecurrentSpec(kind="mamba2", layers=tuple(range(num_layers)), num_heads=heads, num_key_heads=groups,
                         key_head_dim=c.int("mamba_d_state", hi=MAX_HEAD_DIM),
                         value_head_dim=d_head, conv_kernel=c.int("mamba_d_conv", default=defaults["mamba_d_conv"],
                                                                  hi=1024),
                         conv_bias=c.bool("mamba_conv_bias", True), proj_bias=c.bool("mamba_proj_bias", False),
                         out_bias=c.bool("projectors_bias", False), gated_norm=c.bool("mamba_rms_norm", False),
                         parallel=True)


def _gemma4_layers(c: _Cfg, num_layers: int, notes: list[str]) -> dict[str, Any]:
    """Gemma-4's layer kinds beyond Gemma-3's (vLLM vllm/model_executor/models/gemma4.py, Gemma4DecoderLayer,
    Gemma4Attention, Gemma4Model): the global (full-attention) layers' global_head_dim and, with attention_k_eq_v,
    num_global_key_value_heads and no v_proj; the last num_kv_shared_layers layers attending over the cache of the
    last earlier layer of their kind (none of their own), their FFN twice as wide with use_double_wide_mlp; per-layer
    embeddings of hidden_size_per_layer_input (E2B / E4B)."""
    out: dict[str, Any] = {}
    head_dim = c.int("head_dim", hi=MAX_HEAD_DIM)
    kv_heads = c.int("num_key_value_heads", hi=MAX_HEADS)
    shared = c.bool("attention_k_eq_v", False)
    shape = AttentionShape(num_kv_heads=c.int("num_global_key_value_heads", default=kv_heads, hi=MAX_HEADS)
                           if shared else kv_heads,
                           head_dim=c.int("global_head_dim", default=head_dim, hi=MAX_HEAD_DIM), shared_kv=shared)
    if shape != AttentionShape(num_kv_heads=kv_heads, head_dim=head_dim):
        heads = c.int("num_attention_heads", hi=MAX_HEADS)
        if heads % shape.num_kv_heads:
            raise PdagInputError(c.path("num_global_key_value_heads"), f"{shape.num_kv_heads} KV heads do not divide "
                                 f"{heads} attention heads", f"a divisor of {heads}")
        values = ", values from the key projection (no v_proj; vLLM still caches K and V)" if shared else ""
        notes.append(f"Gemma-4's full-attention layers have their own shape: {shape.num_kv_heads} KV heads of "
                     f"{shape.head_dim}{values}, against {kv_heads} of {head_dim} on the sliding layers")
        out["full_layer_shape"] = shape
    n_shared = c.int("num_kv_shared_layers", default=0, lo=0, hi=num_layers - 1)
    if n_shared:
        out["kv_shared_layers"] = tuple(range(num_layers - n_shared, num_layers))
        if c.bool("use_double_wide_mlp", False):
            out["wide_ffn_layers"] = out["kv_shared_layers"]
        notes.append(f"the last {n_shared} layers attend over the cache of the last earlier layer of their kind and "
                     "keep no KV of their own" + (", with a dense FFN twice as wide" if "wide_ffn_layers" in out
                                                   else ""))
    width = c.int("hidden_size_per_layer_input", default=0, lo=0, hi=MAX_HIDDEN)
    if width:
        out["per_layer_input_width"] = width
        out["per_layer_input_vocab"] = c.int("vocab_size_per_layer_input", default=c.int("vocab_size", hi=MAX_VOCAB),
                                             hi=MAX_VOCAB)
        notes.append(f"per-layer embeddings: a {out['per_layer_input_vocab']:,}-row table of {width} values per layer "
                     "(a lookup, stored beside the embedding) and each layer's gate and projection of them; their "
                     "compute, under 2 % of an FFN's, is not priced")
    return out


def _gemma4_moe(c: _Cfg, num_layers: int, dense_i: int) -> MoESpec:
    """Gemma-4's MoE block (26B-A4B, enable_moe_block): on every layer the dense MLP of intermediate_size runs beside
    num_experts routed GELU experts of moe_intermediate_size (top_k_experts per token) and their outputs add, so the
    MLP is read as an always-on shared expert; the router carries a per-expert output scale and a hidden-sized input
    scale, and the block three more RMSNorms (vLLM vllm/model_executor/models/gemma4.py, Gemma4Router, Gemma4MoE,
    Gemma4DecoderLayer)."""
    key = "moe_intermediate_size" if c.has("moe_intermediate_size") else "expert_intermediate_size"
    moe = _moe(c, c.int("num_experts", hi=MAX_EXPERTS), c.int("top_k_experts", hi=MAX_EXPERTS),
               c.int(key, hi=MAX_INTERMEDIATE), 1, dense_i, tuple(range(num_layers)), True, False, "top_k_experts")
    return moe.model_copy(update={"router_input_scale": True})


def _minimax_lightning(c: _Cfg, num_layers: int) -> RecurrentSpec:
    """MiniMax's lightning-attention layers: ``attn_type_list`` (0 lightning, 1 softmax; the published MiniMax-Text-01
    and M1 configs) or transformers' ``layer_types`` (linear_attention / full_attention); one of them is required, as
    the library's alternating default is no published pattern. Each lightning layer has the attention heads and head
    size, and keeps one head_dim x head_dim matrix per head (vLLM MiniMaxText01LinearAttention, cache shape)."""
    key = next((k for k in ("attn_type_list", "decoder_attention_types", "layer_types") if c.raw.get(k) is not None),
               "layer_types" if c.raw.get("model_type") == "minimax" else "attn_type_list")
    types = c.raw.get(key)
    codes = {0: 0, 1: 1} if key != "layer_types" else {"linear_attention": 0, "full_attention": 1}
    if not isinstance(types, list) or len(types) != num_layers or any(
            isinstance(t, bool) or t not in codes for t in types):
        allowed = "0 (lightning) or 1 (softmax)" if key != "layer_types" else "linear_attention or full_attention"
        raise PdagInputError(c.path(key), "must give each layer's attention kind", f"a list of {num_layers} of: "
                             + allowed)
    heads = c.int("num_attention_heads", hi=MAX_HEADS)
    d = c.int("head_dim", default=0, lo=0, hi=MAX_HEAD_DIM) or c.int("hidden_size", hi=MAX_HIDDEN) // heads
    return RecurrentSpec(kind="lightning", layers=tuple(i for i, t in enumerate(types) if codes[t] == 0),
                         num_heads=heads, num_key_heads=heads, key_head_dim=d, value_head_dim=d, conv_kernel=1)


def _granite_moe(c: _Cfg, num_layers: int) -> tuple[MoESpec | None, int]:
    """Granite-4's FFN on every layer: routed experts of intermediate_size plus a shared MLP of
    shared_intermediate_size, or (no experts) the shared MLP alone as the dense FFN."""
    shared = _granite_default(c, "shared_intermediate_size", lo=0, hi=MAX_INTERMEDIATE)
    experts = _granite_default(c, "num_local_experts", lo=0, hi=MAX_EXPERTS)
    if experts == 0:
        if shared == 0:
            raise PdagInputError(c.path("shared_intermediate_size"), "0 with no experts: the layers have no FFN",
                                 "a positive integer")
        return None, shared
    moe = _moe(c, experts, _granite_default(c, "num_experts_per_tok", hi=MAX_EXPERTS),
               _granite_default(c, "intermediate_size", hi=MAX_INTERMEDIATE), 1 if shared else 0, shared,
               tuple(range(num_layers)), False, False)
    return moe, 0


def _ssm_cache_bytes(c: _Cfg) -> float:
    """Bytes per element of Nemotron-H's SSM state as vLLM keeps it: the config's mamba_ssm_cache_dtype, else fp32."""
    return _state_dtype_bytes(c, "mamba_ssm_cache_dtype", layer_kind_data()["nemotron_h_ssm_cache_dtype"])


def _state_dtype_bytes(c: _Cfg, key: str, default: str) -> float:
    """Bytes per element of a recurrent state whose dtype the config names in ``key`` (vLLM takes it from there
    when --mamba-ssm-cache-dtype is auto: Nemotron-H's mamba_ssm_cache_dtype, Qwen3.5's mamba_ssm_dtype)."""
    name = c.raw.get(key, default)
    sizes = layer_kind_data()["state_dtype_bytes"]
    if name not in sizes:
        raise PdagInputError(c.path(key), f"unknown state dtype {shown(name)}", ", ".join(sizes))
    return float(sizes[name])


def _nemotron_blocks(c: _Cfg, num_hidden_layers: int) -> list[tuple[str, str]]:
    """Nemotron-H's ``hybrid_override_pattern``, one character per block (M Mamba-2, * attention, - MLP, E MoE), as
    pdag layers: each mixer block with the FFN block that follows it ("-", "E", or "" for none)."""
    pattern = c.raw.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != num_hidden_layers or set(pattern) - set("M*-E"):
        raise PdagInputError(c.path("hybrid_override_pattern"),
                             f"expected one block kind per layer, got {shown(pattern)}",
                             f"a string of {num_hidden_layers} characters from M (Mamba-2), * (attention), - (MLP), "
                             "E (MoE)")
    blocks: list[tuple[str, str]] = []
    for i, ch in enumerate(pattern):
        if ch in "-E":
            if not blocks or blocks[-1][1]:
                raise PdagInputError(c.path("hybrid_override_pattern"), f"block {i} is an FFN without a mixer block "
                                     "before it, which pdag cannot read as a layer",
                                     "each - or E right after an M or *")
            blocks[-1] = (blocks[-1][0], ch)
        else:
            blocks.append((ch, ""))
    return blocks


def _nemotron_moe(c: _Cfg, num_hidden_layers: int) -> MoESpec | None:
    """Nemotron-3's E blocks: routed ReLU^2 experts of moe_intermediate_size with a score-correction bias on the
    router, plus shared experts of moe_shared_expert_intermediate_size in all (None without E blocks)."""
    blocks = _nemotron_blocks(c, num_hidden_layers)
    layers = tuple(i for i, (_, ffn) in enumerate(blocks) if ffn == "E")
    if not layers:
        return None
    shared = c.int("moe_shared_expert_intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
    n_shared = c.int("n_shared_experts", default=1 if shared else 0, lo=0, hi=MAX_EXPERTS)
    moe = _moe(c, c.int("n_routed_experts", hi=MAX_EXPERTS), c.int("num_experts_per_tok", hi=MAX_EXPERTS),
               c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE), n_shared if shared else 0, shared, layers,
               True, False)
    latent = c.opt_int("moe_latent_size", hi=MAX_HIDDEN)  # Nemotron-3-Super: experts in a projected width
    return moe.model_copy(update={"latent_size": latent}) if latent else moe


def _qwen3_next_layers(c: _Cfg, num_layers: int) -> RecurrentSpec:
    """Qwen3-Next's gated DeltaNet layers: ``layer_types`` when stated, else every ``full_attention_interval``-th
    layer attends and the rest are linear (the library's default)."""
    if c.bool("use_sliding_window", False):
        raise PdagInputError(c.path("use_sliding_window"), "a sliding window on Qwen3-Next's attention layers is not "
                             "priced", "false")
    types = c.raw.get("layer_types")
    if types is not None:
        kinds = ("linear_attention", "full_attention")
        if not isinstance(types, list) or len(types) != num_layers or any(t not in kinds for t in types):
            raise PdagInputError(c.path("layer_types"), "must list one layer kind per layer",
                                 f"a list of {num_layers} of: " + ", ".join(kinds))
        layers = tuple(i for i, t in enumerate(types) if t == "linear_attention")
    else:
        every = c.int("full_attention_interval", default=4, hi=MAX_LAYERS)
        layers = tuple(i for i in range(num_layers) if (i + 1) % every)
    v_heads = c.int("linear_num_value_heads", hi=MAX_HEADS)
    k_heads = c.int("linear_num_key_heads", hi=MAX_HEADS)
    if v_heads % k_heads:
        raise PdagInputError(c.path("linear_num_key_heads"), f"{k_heads} key heads do not divide {v_heads} value heads",
                             f"a divisor of {v_heads}")
    return RecurrentSpec(kind="gated_deltanet", layers=layers, num_heads=v_heads, num_key_heads=k_heads,
                         key_head_dim=c.int("linear_key_head_dim", hi=MAX_HEAD_DIM),
                         value_head_dim=c.int("linear_value_head_dim", hi=MAX_HEAD_DIM),
                         conv_kernel=c.int("linear_conv_kernel_dim", default=4, hi=1024),
                         ssm_state_bytes=_state_dtype_bytes(c, "mamba_ssm_dtype", "bfloat16"))


def _qwen_shared_moe(c: _Cfg, num_layers: int) -> tuple[MoESpec, int]:
    """Qwen2-MoE's and Qwen3-Next's MoE (Qwen3-MoE's layer rule) with one sigmoid-gated shared expert of
    shared_expert_intermediate_size, and the dense layers' intermediate size."""
    intermediate = c.int("intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
    step = c.int("decoder_sparse_step", default=1, hi=MAX_LAYERS)
    mlp_only = set(c.int_list("mlp_only_layers", hi=num_layers))
    layers = tuple(i for i in range(num_layers) if i not in mlp_only and (i + 1) % step == 0)
    if len(layers) < num_layers and intermediate == 0:
        raise PdagInputError(c.path("intermediate_size"), "missing, but some layers are dense", "a positive integer")
    shared = c.int("shared_expert_intermediate_size", default=0, lo=0, hi=MAX_INTERMEDIATE)
    moe = _moe(c, c.int("num_experts", hi=MAX_EXPERTS), c.int("num_experts_per_tok", hi=MAX_EXPERTS),
               c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE), 1 if shared else 0, shared, layers, False, False)
    return moe.model_copy(update={"shared_expert_gate": bool(shared)}), intermediate  # sigmoid-gated, as Qwen2-MoE
