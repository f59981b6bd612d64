"""Layer kinds beyond K/V attention: recurrent token mixers and DeepSeek's sparse-attention indexer.

A recurrent layer (gated DeltaNet in Qwen3-Next, Kimi Delta Attention in Kimi-Linear, Mamba-2 in Nemotron-H, lightning
attention in MiniMax-Text-01 and M1) replaces attention with a fixed-size state per request: a short convolution
window (none for lightning) and a recurrent matrix, which do not grow with the context; Falcon-H1 runs a Mamba-2 mixer
beside attention instead.  The
DSA indexer (DeepSeek-V3.2) sits beside MLA: it keeps its own per-token key cache (fp8 plus scales) and picks
``topk`` keys for each query, so attention reads ``min(context, topk)`` keys while the indexer scans them all.
Shapes and figures come from ``knowledge/models/layer_kinds.json`` (with their sources).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge import ROOT as KNOWLEDGE_ROOT

__all__ = ["IndexerSpec", "RecurrentSpec", "layer_kind_data"]

MAX_DIM = 1_000_000


@lru_cache(maxsize=1)
def layer_kind_data() -> dict[str, Any]:
    """``knowledge/models/layer_kinds.json``: state dtype and indexer cache layout, with sources."""
    with open(KNOWLEDGE_ROOT / "models" / "layer_kinds.json", encoding="utf-8") as f:
        return json.load(f)


class RecurrentSpec(BaseModel):
    """The recurrent token mixer of ``layers`` (every other layer attends; with ``parallel``, those layers attend too).

    gated_deltanet: ``num_heads`` value heads of ``value_head_dim``, ``num_key_heads`` key heads of ``key_head_dim``.
    mamba2: ``num_heads`` SSM heads of ``value_head_dim`` (mamba_head_dim), ``num_key_heads`` groups (n_groups),
    ``key_head_dim`` the state size (ssm_state_size).
    lightning (MiniMax's linear attention): ``num_heads`` heads, each keeping a ``key_head_dim`` x ``value_head_dim``
    matrix (both the head size), no convolution (``conv_kernel`` 1).
    kda (Kimi Delta Attention): gated DeltaNet's state with a gate per key channel; ``num_heads`` heads for q, k and v
    alike (``num_key_heads`` equal), each with its own short convolution."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["gated_deltanet", "kda", "mamba2", "lightning"]
    layers: tuple[int, ...]
    num_heads: int = Field(ge=1, le=MAX_DIM)
    num_key_heads: int = Field(ge=1, le=MAX_DIM)
    key_head_dim: int = Field(ge=1, le=MAX_DIM)
    value_head_dim: int = Field(ge=1, le=MAX_DIM)
    conv_kernel: int = Field(ge=1, le=1024)
    conv_bias: bool = False
    proj_bias: bool = False
    ssm_state_bytes: float = Field(default=2.0, gt=0, le=8)  # per element of the recurrent (SSM) state
    gated_norm: bool = True  # a gated RMSNorm over the inner width before out_proj (Falcon-H1's mamba_rms_norm)
    out_bias: bool | None = None  # a bias on out_proj; None: as the input projection (proj_bias)
    # the mixer runs beside attention in the same layers and their outputs add (Falcon-H1): those layers keep both
    # attention's KV per token and this state per request
    parallel: bool = False

    @model_validator(mode="after")
    def _check(self) -> RecurrentSpec:
        if list(self.layers) != sorted(set(self.layers)):
            raise ValueError("recurrent layers must be sorted and unique")
        if self.num_heads % self.num_key_heads:
            raise ValueError("key heads (groups) must divide the value (SSM) heads")
        return self

    @property
    def inner(self) -> int:
        """Width of the value stream (GDN value_dim, Mamba-2 intermediate)."""
        return self.num_heads * self.value_head_dim

    @property
    def key_width(self) -> int:
        """GDN: all key heads together (q and k each); Mamba-2: all groups' B (and C) together."""
        return self.num_key_heads * self.key_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the depthwise convolutions: q, k and v (GDN, KDA); x, B and C (Mamba-2)."""
        return 2 * self.key_width + self.inner

    def groups_replicated(self, shards: int) -> bool:
        """Mamba-2 with one group keeps B and C whole on every TP rank (vLLM replicates a single group)."""
        return self.kind == "mamba2" and self.num_key_heads == 1 and shards > 1

    def params(self, hidden: int) -> int:
        """Weights of one recurrent mixer (its norm inside included; the layer's input norm is not)."""
        h, v = hidden, self.num_heads
        conv = self.conv_channels * self.conv_kernel + (self.conv_channels if self.conv_bias else 0)
        if self.kind == "lightning":
            # qkv_proj (3 x heads' width), output_gate, out_proj, an RMSNorm over the heads' width; no biases
            return 4 * h * self.inner + self.inner * h + self.inner
        if self.kind == "kda":
            # q/k/v projections and their convolutions; A_log per head and dt_bias per key channel; the decay gate
            # (f_a hidden -> head_dim, f_b -> keys) and output gate (g_a, g_b -> values) as low-rank pairs; b_proj
            # hidden -> heads; a norm over a value head; o_proj
            d = self.key_head_dim
            gates = 2 * h * d + d * self.key_width + d * self.inner
            return h * (2 * self.key_width + self.inner) + conv + v + self.key_width + gates + h * v + \
                self.value_head_dim + self.inner * h
        if self.kind == "gated_deltanet":
            # in_proj_qkvz, in_proj_ba, conv1d, dt_bias + A_log, gated norm over a value head, out_proj
            proj_in = h * (2 * self.key_width + 2 * self.inner) + h * 2 * v
            return proj_in + conv + 2 * v + self.value_head_dim + self.inner * h
        # Mamba-2: in_proj -> z, xBC, dt; conv1d; dt_bias, A_log, D; gated norm over the inner width; out_proj
        proj_in = h * (self.inner + self.conv_channels + v) + ((self.inner + self.conv_channels + v)
                                                              if self.proj_bias else 0)
        out_bias = self.proj_bias if self.out_bias is None else self.out_bias
        out = self.inner * h + (h if out_bias else 0)
        return proj_in + conv + 3 * v + (self.inner if self.gated_norm else 0) + out

    def state_elements(self, shards: int = 1) -> tuple[float, float]:
        """(conv, recurrent) state elements one request holds in one layer, on one of ``shards`` TP ranks."""
        keys = 2 * self.key_width * (1 if self.groups_replicated(shards) else 1 / shards)
        conv = (self.inner / shards + keys) * (self.conv_kernel - 1)
        return conv, self.num_heads * self.value_head_dim * self.key_head_dim / shards

    def state_bytes(self, shards: int = 1) -> float:
        """Bytes of one request's state in one layer on one TP rank: the conv window at the model's 16 bits, the
        recurrent state at ``ssm_state_bytes`` (the engines' state dtypes)."""
        conv, ssm = self.state_elements(shards)
        return conv * float(layer_kind_data()["recurrent_state_bytes_per_element"]) + ssm * self.ssm_state_bytes

    def scan_flops_per_token(self, shards: int = 1) -> float:
        """Arithmetic of the recurrence per token: the state is read, decayed, updated by an outer product and
        read out by the query, about four multiply-adds per state element (the convolution is negligible)."""
        return 8.0 * self.num_heads * self.value_head_dim * self.key_head_dim / shards


class IndexerSpec(BaseModel):
    """DeepSeek Sparse Attention's lightning indexer: ``num_heads`` scoring heads of ``head_dim``, ``topk`` keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_heads: int = Field(ge=1, le=MAX_DIM)
    head_dim: int = Field(ge=1, le=MAX_DIM)
    topk: int = Field(ge=1, le=1_000_000_000)

    def params(self, hidden: int, q_lora_rank: int) -> int:
        """wq_b, wk, k_norm (LayerNorm: weight and bias), weights_proj: replicated on every TP rank."""
        return q_lora_rank * self.num_heads * self.head_dim + hidden * self.head_dim + 2 * self.head_dim + \
            hidden * self.num_heads

    def cache_bytes_per_token(self) -> float:
        """The indexer's key cache per token per layer: fp8 values plus one scale per block of values."""
        d = layer_kind_data()
        blocks = -(-self.head_dim // int(d["indexer_cache_scale_block"]))
        return float(self.head_dim * d["indexer_cache_value_bytes"] + blocks * d["indexer_cache_scale_bytes"])

    def keys(self, context: float) -> float:
        """Keys each query attends to: the top-k the indexer picks, or all of a shorter context."""
        return min(context, float(self.topk))
