"""Per-GPU memory accounting of a plan: weights, KV cache, activations, communication buffers, reserve.

Computed arithmetically from the layout (no DAG walk), for every distinct GPU of replica 0: all DP replicas
are identical copies, so replica 0 is representative.  Every term follows ARCHITECTURE.md's sharding rules.

Weights (``plan.dtype``; embedding, LM head, norms and router stay 16-bit when the dtype is 8-bit or less,
as quantised checkpoints such as DeepSeek-V3 FP8 or AWQ/GPTQ models ship them; quantisation scales ignored):

* attention of every layer of the GPU's stage, on the attention GPUs (``max(tp, sp)``), divided by the
  head shards (MLA: the down-projections ``q_a``/``kv_a`` and their norms are replicated, the rest sharded);
* dense FFN and shared experts divided by ``tp`` on the first ``tp`` GPUs;
* routed experts: the Expert node of a GPU holds ``num_experts/ep`` experts (split over ``W/ep`` GPUs with
  ``allow_expert_tp``);
* the two layer norms and the router replicated on the attention GPUs;
* embedding on stage 0, final norm and LM head on the last stage, replicated on the attention GPUs.

KV cache: ``batch * (input_len + output_len)`` tokens per layer of the stage (sliding-window layers capped),
GQA/MHA KV heads divided by the head shards until they run out (then one head per shard, i.e. replicated),
an MLA latent whole on every attention GPU, tokens divided by ``sp``; ``plan.effective_kv_dtype``.
Decode context parallel (``dcp``, vLLM's ``-dcp``) stripes that replicated cache by token over ``dcp`` ranks of
the TP group, so each holds ``1/dcp`` of it (in a pool that serves decode; prefill writes the striped cache).
DeepSeek-V3.2's indexer adds its own fp8 key cache per token and layer, whole on every attention GPU.  A
recurrent layer (gated DeltaNet, Mamba-2) holds no KV but a fixed conv + recurrent state per sequence, split by
heads like attention, at the engines' 16-bit state dtype (``knowledge/models/layer_kinds.json``), so it counts
against the batch and not the context; its weights are split by heads like attention's.  A Falcon-H1 layer runs
attention and a Mamba-2 mixer side by side, so it holds both its KV per token and that state.
The larger of the prefill and decode layouts counts (they differ only in ``sp``).

Activations (peak prefill working set, 16-bit): with ``T = min(batch*input_len, prefill_chunk_tokens)``
tokens in one forward pass, a GPU holds the residual stream and its normalised copy (``2*T*h``) plus the
largest operator's working set: attention ``T*(q_local + 2*kv_local + q_local)*head_dim`` (flash attention:
no ``L^2`` score matrix), dense FFN ``T*2*i/tp`` (gate and up outputs) or MoE ``T*k*(e_local/E)*2*i_e``
(tokens routed to the GPU's experts) and, on the last stage, fp32 logits of the batch ``batch*vocab*4``.

Communication buffers: TP all-reduce staging ``2*T*h`` (in and out) when ``tp > 1``; EP dispatch and
combine buffers ``2*T*k*h`` when ``ep > 1`` (every routed token copy sent and received once).

Attention-DP (opt-in, ``attn_dp = a``): the ``a`` attention groups of a stage each hold ``ceil(batch/a)``
sequences (rounded up: the fullest group counts), so KV cache, attention/dense-FFN activations and TP
buffers follow the group's share; attention, dense FFN and shared experts are replicated per group (sharded
by ``tp`` inside it); routed experts and the EP buffers see every group's tokens.

Disaggregated serving (opt-in): each pool is accounted with its own layout.  A prefill GPU holds the KV of
``batch * input_len`` tokens (until it is handed to decode) and the prefill activations; a decode GPU holds
``batch * (input_len + output_len)`` tokens of KV and the activations of one token per sequence.  The report's
top-level figures are those of the fuller pool; ``pools`` gives each pool's own.

Speculative decoding (``plan.speculative``): an MTP block is one more decoder layer on the last stage, sharded
like the target's (its embedding and LM head are the target's), plus its replicated ``eh_proj``, with one more
layer of KV; an EAGLE head is one dense layer of the target's shape on the last stage with its fc (and EAGLE-3's
reduced-vocabulary LM head), 16-bit, one layer of KV; a draft model sits on the first ``draft_tp`` GPUs of stage 0
with its own weights and KV split by its tp.  Lookahead slots (k tokens per sequence) are not counted.

Reserve: ``runtime_reserve_bytes`` (CUDA context, workspaces, NCCL, CUDA graphs) plus
``fragmentation_fraction`` of capacity; both from ``knowledge/hardware/efficiency.json``.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from math import ceil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tools.core.efficiency import ENV_VAR, Overlay, plan_efficiency
from tools.core.engine_profile import engine_profile
from tools.core.formats import checkpoint_format
from tools.core.hardware import DTYPE_BYTES
from tools.core.layout import Layout, PhaseLayout, Pool, vocab_shards
from tools.core.models import ModelSpec
from tools.core.plan import MAX_BATCH, MAX_SEQ_LEN, Plan
from tools.core.quantization import storage, weight_bytes
from tools.core.speculative import draft_spec, head_params

__all__ = ["GpuMemory", "MemoryReport", "PoolMemory", "engine_window_kv", "kv_cache_tokens", "memory_report",
           "one_sequence_tokens", "state_tokens"]

GB = 1e9


class GpuMemory(BaseModel):
    gpu: int = Field(description="global GPU id (replica 0)")
    stage: int
    local: int = Field(description="index inside the stage group")
    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    comm_buffer_bytes: float
    reserved_bytes: float
    total_bytes: float


class PoolMemory(BaseModel):
    fits: bool
    max_gpu_bytes: float
    worst_gpu: int
    kv_cache_bytes: float = Field(description="of the pool's fullest GPU")
    max_batch_size_that_fits: int = Field(description="largest batch per replica of this pool")


class MemoryReport(BaseModel):
    fits: bool
    capacity_bytes: float
    max_gpu_bytes: float
    worst_gpu: int
    weights_bytes: float = Field(description="of the worst GPU")
    kv_cache_bytes: float = Field(description="of the worst GPU")
    activation_bytes: float = Field(description="of the worst GPU")
    comm_buffer_bytes: float = Field(description="of the worst GPU")
    reserved_bytes: float = Field(description="of the worst GPU")
    per_gpu: list[GpuMemory] = Field(description="every GPU of replica 0 (other replicas are identical copies)")
    max_batch_size_that_fits: int = Field(description="largest batch per replica at this context (0: none)")
    max_context_that_fits: int = Field(description="largest tokens per sequence at this batch, at most the model's "
                                                   "context window (0: none)")
    max_tokens_per_sequence_that_fit: int = Field(
        0, description="tokens per sequence the KV room holds at this batch, not capped at the model's window (how "
                       "much room a longer context cap would find)")
    load_peak_bytes: float | None = Field(
        None, description="the worst GPU while the engine loads a 16-bit checkpoint it quantizes to fp8 whole-model "
                          "(16-bit weights + reserve, before any KV is allocated); None: no such load peak")
    kv_bytes_per_token: float = Field(description="KV bytes per token of the whole model (all layers)")
    kv_cache_bytes_total: float = Field(description="KV of the whole deployment (all replicas, with replication)")
    message: str
    pools: dict[str, PoolMemory] | None = Field(
        None, description="disaggregated serving: each pool's fullest GPU and largest batch (None: aggregated)")


@dataclass
class _Terms:
    """Memory of one GPU as a function of batch, context and prefill tokens."""

    gpu: int
    stage: int
    local: int
    weights: float
    kv_full: float  # KV bytes per (sequence x token) over the GPU's full-attention layers
    kv_window: float  # same over its sliding-window layers (tokens capped at the window)
    window: int
    resid_per_token: float  # residual stream and its normalised copy, per token of the GPU's own share
    act_per_token: float  # largest attention / dense-FFN working set, per token of the GPU's own share
    logits_per_seq: float
    comm_per_token: float
    groups: int = 1  # attention-DP groups sharing the batch: the GPU's group holds ceil(batch / groups)
    expert_act_per_token: float = 0.0  # routed-expert working set: every group's tokens reach the experts
    shared_per_token: float = 0.0  # EP dispatch/combine buffers, per token of all groups
    state_per_seq: float = 0.0  # recurrent layers' fixed state per sequence (conv + recurrent), whatever its length

    def seqs(self, batch: int) -> int:
        return ceil(batch / self.groups)

    def kv(self, batch: int, context: int) -> float:
        return self.seqs(batch) * (self.kv_full * context + self.kv_window * min(context, self.window)
                                   + self.state_per_seq)

    def tokens(self, batch: int, prompt: int, chunk: int) -> tuple[int, int]:
        """(tokens of the GPU's group, tokens of all groups) in one forward pass."""
        own = min(self.seqs(batch) * prompt, chunk)
        return own, min(batch * prompt, chunk * self.groups)

    def act(self, batch: int, prompt: int, chunk: int) -> float:
        own, every = self.tokens(batch, prompt, chunk)
        work = max(self.act_per_token * own, self.expert_act_per_token * every)
        return self.resid_per_token * own + work + self.logits_per_seq * self.seqs(batch)

    def comm(self, batch: int, prompt: int, chunk: int) -> float:
        own, every = self.tokens(batch, prompt, chunk)
        return self.comm_per_token * own + self.shared_per_token * every

    def total(self, batch: int, context: int, prompt: int, chunk: int) -> float:
        return self.weights + self.kv(batch, context) + self.act(batch, prompt, chunk) + self.comm(batch, prompt, chunk)


def state_tokens(plan: Plan) -> int:
    """A sequence's recurrent state (all recurrent layers) in tokens of KV: what it takes from the cache's room
    whatever its length, for capacity counted in tokens.  0 for a model without recurrent layers."""
    spec = plan.spec
    state = spec.state_bytes_per_sequence()
    per_token = float(spec.kv_bytes_per_token(DTYPE_BYTES[plan.effective_kv_dtype]))
    return ceil(state / per_token) if state > 0 and per_token > 0 else 0


def unfit_hint(plan: Plan, layout: Layout | None, report: MemoryReport | None = None) -> str:
    """What to change when a plan does not fit, named for the case: weights the whole cluster cannot hold need more
    GPUs or fewer bytes per weight (no batch or context helps); weights alone over one GPU need spreading (wider TP
    while the NVLink domain allows it, else PP); otherwise the batch or context is what is too large.  A MoE layout
    whose experts sit whole on fewer GPUs than its TP group first says how to spread them."""
    usable = report.capacity_bytes - report.reserved_bytes if report is not None else 0.0
    if report is not None and report.weights_bytes > usable:
        weights = sum(g.weights_bytes for g in report.per_gpu)  # one replica's weights, replicated parts included
        need = ceil(weights / usable) if usable > 0 else 0
        if need > plan.hardware.num_gpus or usable <= 0:
            per = weight_bytes(plan, "expert" if plan.spec.is_moe else "dense")
            smaller = "fp8 or 4-bit weights, " if per > 1.5 else "4-bit weights, " if per > 0.75 else ""
            return (f"the weights alone need about {need} GPUs of this kind ({weights / 1e9:,.0f} GB at "
                    f"{usable / 1e9:.0f} GB each) and the cluster has {plan.hardware.num_gpus}: use more GPUs, "
                    f"{smaller}or a larger accelerator; no batch or context size helps")
    if plan.spec.is_moe and layout is not None:
        width = max(p.tp * p.attn_dp for p in layout.phases.values())
        ep = max(p.ep for p in layout.phases.values())
        if ep < width and not plan.options.allow_expert_tp:
            return (f"spread the experts: ep {width} (or options.allow_expert_tp to shard them over the {width} TP "
                    "ranks, as vLLM and SGLang do without EP); then pp, or shrink the batch/context")
    if report is None or layout is None:
        return "raise tp (within a node), then pp, or shrink the batch/context"
    tp = max(p.tp for p in layout.phases.values())
    wider = "raise pp" if tp >= plan.cluster.nvlink_domain else f"raise tp up to {plan.cluster.nvlink_domain} (the " \
        "NVLink domain), then pp"
    if report.weights_bytes > usable:
        return f"the weights alone overflow one GPU: {wider}"
    if report.max_batch_size_that_fits >= 1 and plan.workload.batch_size > report.max_batch_size_that_fits:
        return (f"at most {report.max_batch_size_that_fits} sequences per replica fit at this context: lower the "
                f"batch, or fp8 KV (kv_dtype), or {wider}")
    return f"shorten the context, fp8 KV (kv_dtype), or {wider}"


def load_queues(plan: Plan, report: MemoryReport) -> bool:
    """The clients' share of a stated load does not fit at full length but one sequence does: the engine runs
    ``report.max_batch_size_that_fits`` per replica and queues the rest, a served load rather than a plan that
    cannot start (vLLM, SGLang and TensorRT-LLM all admit requests while KV pages are free)."""
    loads = report.load_peak_bytes is None or report.load_peak_bytes <= report.capacity_bytes
    return plan.batch_from_load and not report.fits and report.max_batch_size_that_fits >= 1 and loads


def _attention_split(plan: Plan, layer: int | None = None) -> tuple[int, int]:
    """(replicated, sharded) attention parameters of ``layer`` (of the common shape without one) under TP."""
    spec = plan.spec
    total = spec.attention_params_per_layer(layer)
    if spec.attention != "mla":
        return 0, total
    m = spec.mla
    assert m is not None
    h = spec.hidden_size
    rep = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    if m.q_lora_rank:
        rep += h * m.q_lora_rank + m.q_lora_rank
        if spec.indexer is not None:  # the sparse-attention indexer runs whole on every rank
            rep += spec.indexer.params(h, m.q_lora_rank)
    return rep, total - rep


def _kv_heads_local(plan: Plan, pl: PhaseLayout, layer: int | None = None) -> int:
    spec = plan.spec
    return max(1, ceil(spec.kv_shape(layer)[0] / pl.head_shards))


def _kv_elems_local(plan: Plan, pl: PhaseLayout, layer: int | None = None) -> float:
    """KV elements per token of ``layer`` (a windowed layer's without one) held by one attention GPU."""
    spec = plan.spec
    if spec.attention == "mla":
        return float(spec.kv_elements_per_token_per_layer(0))
    return 2.0 * _kv_heads_local(plan, pl, layer) * spec.kv_shape(layer)[1]


def _gpu_terms(plan: Plan, pool: Pool, phases: list[PhaseLayout], eff: dict[str, float]) -> list[_Terms]:
    """One entry per GPU of replica 0 of ``pool``, which runs ``phases`` (both in aggregated serving)."""
    spec = plan.spec
    wb = weight_bytes(plan, "dense")  # storage of dense FFN weights (tools/core/quantization.py)
    wba = weight_bytes(plan, "attention")  # attention projections: 16-bit where the checkpoint leaves them so
    xb = weight_bytes(plan, "expert")
    hb = max(DTYPE_BYTES[plan.dtype], 2.0)  # embedding, LM head, norms, router
    kvb = DTYPE_BYTES[plan.effective_kv_dtype]
    ab = eff["activation_bytes"]
    h = spec.hidden_size
    rep_attn, shard_attn = _attention_split(plan)
    tp = max(p.tp for p in phases)
    ep = max(p.ep for p in phases) if spec.is_moe else 1
    w = pool.group_width
    attn_width = max(p.attn_width for p in phases)
    groups = max(p.attn_dp for p in phases)
    # decode context parallel stripes the one cache by token over dcp TP ranks, also while prefill writes it
    dcp = max(p.dcp for p in phases)
    moe = spec.moe
    expert_tp = w // ep if (spec.is_moe and plan.options.allow_expert_tp and ep < w) else 1
    n_exp = moe.num_experts if moe else 0
    base, extra = divmod(n_exp, ep) if moe else (0, 0)
    window = spec.sliding_window or 0
    sd = plan.speculative
    method = sd.method if sd is not None else None
    draft = draft_spec(sd) if sd is not None else None
    draft_tp = min(tp, (sd.draft_tp or tp) if sd is not None else tp)
    out: list[_Terms] = []
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s, layers in enumerate(pool.stage_layers):
        n_moe = sum(1 for i in layers if spec.is_moe_layer(i))
        n_dense = len(layers) - n_moe
        dense_ffn = sum(spec.ffn_params(i) for i in layers)
        # layers reading an earlier layer's cache (Gemma-4 E2B / E4B) keep none of their own
        n_shared_kv = sum(1 for i in layers if spec.is_kv_shared(i))
        n_slide = sum(1 for i in layers if spec.is_sliding_layer(i) and not spec.is_kv_shared(i))
        n_rec = sum(1 for i in layers if spec.is_recurrent_layer(i))  # a fixed state, no KV per token
        n_state = sum(1 for i in layers if spec.has_state(i))  # with Falcon-H1's attention-and-Mamba layers
        n_full = len(layers) - n_slide - n_rec - n_shared_kv
        wide = max((spec.ffn_width(i) for i in layers if spec.ffn_params(i)), default=spec.intermediate_size)
        # a full-attention layer may have its own KV shape (Gemma-4): price it as the stage's first such layer
        full = next((i for i in layers if not spec.is_sliding_layer(i) and not spec.is_recurrent_layer(i)), None)
        attn_rep = sum(_attention_split(plan, i)[0] for i in layers if not spec.is_recurrent_layer(i))
        attn_shard = sum(_attention_split(plan, i)[1] for i in layers if not spec.is_recurrent_layer(i))
        last = s == pool.pp - 1
        for local in range(w):
            gpu = pool.device(0, s, local)
            # index inside the GPU's attention group (attention-DP repeats attention, KV and dense FFN per group)
            j = local % attn_width if local < groups * attn_width else local
            # GPUs of a stage come in a few shapes: price each shape once (a replica may span 65,536 GPUs)
            key = (len(layers), n_moe, dense_ffn, n_slide, n_rec, n_state, n_shared_kv, s == 0, last, j < attn_width,
                   j < tp, tuple(local < pl.attention_gpus for pl in phases), local < ep * expert_tp,
                   (local // expert_tp) < extra, draft is not None and local < draft_tp)
            if key in shapes:
                out.append(_Terms(gpu, s, local, **shapes[key]))
                continue
            weights = 0.0
            kv_elems = kv_slide = index_bytes = state = 0.0
            act_attn = 0.0
            for pl in phases:
                if local < pl.attention_gpus:
                    kv_elems = max(kv_elems, _kv_elems_local(plan, pl, full) / pl.sp / dcp)
                    kv_slide = max(kv_slide, _kv_elems_local(plan, pl) / pl.sp / dcp)
                    index_bytes = max(index_bytes, spec.indexer_bytes_per_token_per_layer() / pl.sp / dcp)
                    if spec.recurrent is not None:  # split by heads like attention; every sequence shard holds it
                        state = max(state, n_state * spec.recurrent.state_bytes(pl.head_shards))
                    q_local = max(spec.q_head_counts) / pl.head_shards
                    for layer in (None, full):  # the windowed (common) shape and a full layer's own
                        kv_local = 0 if spec.attention == "mla" else _kv_heads_local(plan, pl, layer)
                        hd = spec.mla.qk_head_dim if spec.mla else spec.kv_shape(layer)[1]
                        act_attn = max(act_attn, (2 * q_local + 2 * kv_local) * hd / pl.sp)
            attn_gpu = j < attn_width
            if attn_gpu:
                shards = min(p.head_shards for p in phases if local < p.attention_gpus)
                weights += (attn_rep + attn_shard / shards) * wba
                weights += sum(spec.layer_norm_params(i) + spec.per_layer_input_params(i) for i in layers) * hb
                if n_state:
                    assert spec.recurrent is not None
                    weights += n_state * spec.recurrent.params(h) / shards * wba
                if moe:
                    weights += n_moe * spec.router_params() * hb
                vocab = min(vocab_shards(plan, p) for p in phases)  # split by vocabulary over the TP ranks
                if s == 0:  # the embedding and any per-layer embeddings, split by vocabulary like it
                    weights += (spec.embedding_params() + spec.per_layer_input_params()) / vocab * hb
                if last:
                    head = spec.lm_head_params() or (spec.embedding_params() if pool.pp > 1 else 0)
                    weights += (head / vocab + spec.final_norm_params()) * hb
            act_ffn = act_exp = 0.0
            if j < tp:
                weights += dense_ffn / tp * wb
                if moe:
                    weights += n_moe * spec.shared_expert_params() / tp * wb
                if n_dense:
                    act_ffn = 2 * wide / tp
                if moe and n_moe:
                    act_ffn = max(act_ffn, 2 * moe.shared_expert_intermediate_size / tp)
            if moe and n_moe and local < ep * expert_tp:
                k = local // expert_tp
                held = base + (1 if k < extra else 0)
                weights += n_moe * held * spec.expert_params() / expert_tp * xb
                routed = moe.experts_per_token * held / n_exp
                act_exp = routed * 2 * moe.expert_intermediate_size / expert_tp
            extra_w, extra_kv_layers, extra_kv = _draft_terms(plan, method, draft, draft_tp, last, s == 0, local,
                                                              attn_gpu, j < tp, phases, kvb)
            if method == "mtp" and last:  # the MTP block's decoder layer, sharded like the target's own
                shards = min(p.head_shards for p in phases if local < p.attention_gpus) if attn_gpu else 1
                one = ((rep_attn + shard_attn / shards) * wba + spec.layer_norm_params() * hb) if attn_gpu else 0.0
                if moe:
                    one += spec.router_params() * hb if attn_gpu else 0.0
                    one += spec.shared_expert_params() / tp * wb if j < tp else 0.0
                    if local < ep * expert_tp:
                        one += (base + (1 if local // expert_tp < extra else 0)) * spec.expert_params() / expert_tp * xb
                elif j < tp:
                    one += spec.ffn_params(spec.num_layers - 1) / tp * wb
                extra_w += max(1, spec.mtp_layers) * one
            weights += extra_w
            resid = 2 * h if attn_gpu or act_ffn or act_exp else 0
            logits = spec.vocab_size * 4.0 if (last and attn_gpu) else 0.0
            comm = shared = 0.0
            if tp > 1 and j < tp:
                comm += 2 * h * ab
            if moe and n_moe and ep > 1 and local < ep * expert_tp:
                shared += 2 * moe.experts_per_token * spec.expert_width * ab / ep
            shapes[key] = dict(
                weights=weights, kv_full=(n_full + extra_kv_layers) * (kv_elems * kvb + index_bytes) + extra_kv,
                state_per_seq=state,
                kv_window=n_slide * kv_slide * kvb, window=window,
                resid_per_token=resid * ab, act_per_token=max(act_attn, act_ffn) * ab, logits_per_seq=logits,
                comm_per_token=comm, groups=groups if attn_gpu else 1, expert_act_per_token=act_exp * ab,
                shared_per_token=shared,
            )
            out.append(_Terms(gpu, s, local, **shapes[key]))
    return out


def _draft_terms(plan: Plan, method: str | None, draft: ModelSpec | None, draft_tp: int, last: bool, first: bool,
                 local: int, attn_gpu: bool, ffn_gpu: bool, phases: list[PhaseLayout],
                 kvb: float) -> tuple[float, int, float]:
    """What the drafter adds to one GPU beyond an MTP block's layer (priced in the caller, which knows the
    target's sharding): weights (bytes), extra target-shaped KV layers, other KV bytes per sequence and token.
    An MTP block and an EAGLE head sit on the last stage with one KV layer each; a draft model on the first
    ``draft_tp`` GPUs of stage 0 with its own KV, split by its tp; n-gram adds nothing."""
    spec = plan.spec
    hb = 2.0  # draft heads and their fc ship in 16 bits
    if method in ("mtp", "eagle", "eagle3") and last:
        p = head_params(plan)
        w = p["replicated"] * hb if attn_gpu else 0.0
        if method != "mtp":
            tp = max(pl.tp for pl in phases)
            shards = min(pl.head_shards for pl in phases if local < pl.attention_gpus) if attn_gpu else 1
            w += (spec.attention_params_per_layer() / shards + spec.layer_norm_params()) * hb if attn_gpu else 0.0
            w += 3 * spec.hidden_size * spec.intermediate_size / tp * hb if ffn_gpu else 0.0
        layers = max(1, spec.mtp_layers) if method == "mtp" else 1
        return w, layers, 0.0
    if draft is not None and first and local < draft_tp:
        return draft.param_count() * hb / draft_tp, 0, float(draft.kv_bytes_per_token(kvb)) / draft_tp
    return 0.0, 0, 0.0


@dataclass
class _PoolTerms:
    """The GPUs of one pool with the tokens they hold: context (KV) and prompt tokens per pass (activations)."""

    name: str
    terms: list[_Terms]
    dp: int
    context: int
    prompt: int

    @cached_property
    def distinct(self) -> list[_Terms]:
        """One GPU per distinct set of terms: GPUs of a stage mostly repeat a few shapes, and the largest-batch
        and largest-context searches need only those (they would otherwise scale with pp x group width)."""
        out: dict[tuple[Any, ...], _Terms] = {}
        for t in self.terms:
            out.setdefault((t.weights, t.kv_full, t.kv_window, t.window, t.resid_per_token, t.act_per_token,
                            t.logits_per_seq, t.comm_per_token, t.groups, t.expert_act_per_token,
                            t.shared_per_token, t.state_per_seq), t)
        return list(out.values())

    def worst(self, batch: int, context: int | None, chunk: int, fixed: float) -> float:
        ctx = self.context if context is None else context
        prompt = self.prompt if context is None or self.prompt == 1 else ctx
        return max(t.total(batch, ctx, prompt, chunk) for t in self.distinct) + fixed


def _pools(plan: Plan, layout: Layout, eff: dict[str, float]) -> list[_PoolTerms]:
    wl = plan.workload
    if not layout.disaggregated:
        return [_PoolTerms("both", _gpu_terms(plan, layout.pools["prefill"], list(layout.phases.values()), eff),
                           layout.dp, wl.input_len + wl.output_len, wl.input_len)]
    return [
        _PoolTerms("prefill", _gpu_terms(plan, layout.pools["prefill"], [layout.phases["prefill"]], eff),
                   layout.pools["prefill"].dp, wl.input_len, wl.input_len),
        _PoolTerms("decode", _gpu_terms(plan, layout.pools["decode"], [layout.phases["decode"]], eff),
                   layout.pools["decode"].dp, wl.input_len + wl.output_len, 1),
    ]


def _largest(fits: Callable[[int], bool], hi: int) -> int:
    """Largest n in [0, hi] with fits(n) (fits monotone decreasing); 0 if none."""
    if not fits(1):
        return 0
    lo, n = 1, 2
    while n <= hi and fits(n):
        lo, n = n, n * 2
    hi = min(hi, n)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def kv_cache_tokens(plan: Plan, layout: Layout | None = None, efficiency: Overlay = None) -> dict[str, int]:
    """Tokens of KV one replica's cache holds, per pool (``both``, or ``prefill`` and ``decode``).

    Why: an engine sizes its KV cache once, at start-up, from what is left of each GPU after the weights, the
    reserve and one profiled step of its token budget (vLLM: ``Worker.determine_available_memory`` in
    ``vllm/v1/worker/gpu_worker.py``, then ``available // page bytes`` blocks; SGLang's ``mem_fraction_static`` and
    TensorRT-LLM's ``free_gpu_memory_fraction`` likewise), and hands pages to requests as their tokens arrive.  The
    cache does not depend on the workload, so what runs at once is bounded by the tokens the running requests hold,
    not by a count of sequences at the plan's full context (``max_batch_size_that_fits``, rounded down).  A token's
    bytes on a GPU are its full-attention layers' plus its sliding-window layers' at the pool's context (a window
    layer keeps at most its window), averaged per token; a recurrent state is per sequence, set aside by the caller
    (``state_tokens``).  The fullest GPU of a replica bounds it; attention-DP groups each hold their own share."""
    layout = layout or Layout(plan)
    eff = plan_efficiency(plan, efficiency)
    cap = float(plan.accelerator.capacity_bytes)
    reserved = eff["runtime_reserve_bytes"] + eff["fragmentation_fraction"] * cap
    chunk = int(eff["prefill_chunk_tokens"])
    out: dict[str, int] = {}
    for pt in _pools(plan, layout, eff):
        ctx = max(1, pt.context)
        prompt = chunk if pt.prompt > 1 else 1  # the profiled step: a full token budget (a decode pool: one token)
        most: float | None = None
        for t in pt.distinct:
            per_token = (t.kv_full * ctx + t.kv_window * min(ctx, t.window)) / ctx
            if per_token <= 0:
                continue
            room = cap - reserved - t.weights - t.act(t.groups, prompt, chunk) - t.comm(t.groups, prompt, chunk)
            tokens = max(0.0, room) / per_token * t.groups
            most = tokens if most is None else min(most, tokens)
        out[pt.name] = int(most) if most is not None else 0
    return out


_CACHE: OrderedDict[str, MemoryReport] = OrderedDict()
_ONE_CACHE: OrderedDict[tuple[str, bool], int] = OrderedDict()  # one_sequence_tokens'
_CACHE_SIZE = 16
_LOCK = threading.Lock()


def memory_report(plan: Plan, layout: Layout | None = None, efficiency: Overlay = None) -> MemoryReport:
    """Per-GPU memory of replica 0 of ``plan`` and whether the most loaded GPU fits (see module doc).

    Remembers its last few answers: autofix re-validates the same plan several times, and a replica thousands of
    GPUs wide takes most of a second to account.  An overlay read from a file is not remembered (the file may
    change, as may the one ``PDAG_EFFICIENCY`` names); the layout is a function of the plan, so the plan and an
    in-memory overlay make the key."""
    if isinstance(efficiency, str | Path) or (efficiency is None and os.environ.get(ENV_VAR)):
        return _memory_report(plan, layout, efficiency)
    key = plan.model_dump_json() + json.dumps(efficiency, sort_keys=True, default=str)
    with _LOCK:  # the MCP server may run tools on worker threads
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    report = _memory_report(plan, layout, efficiency)
    with _LOCK:
        _CACHE[key] = report
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return report


def _memory_report(plan: Plan, layout: Layout | None, efficiency: Overlay) -> MemoryReport:
    layout = layout or Layout(plan)
    eff = plan_efficiency(plan, efficiency)
    spec, wl = plan.spec, plan.workload
    cap = float(plan.accelerator.capacity_bytes)
    reserved = eff["runtime_reserve_bytes"] + eff["fragmentation_fraction"] * cap
    chunk = int(eff["prefill_chunk_tokens"])
    pools = _pools(plan, layout, eff)
    batch = wl.batch_size
    per_gpu: list[GpuMemory] = []
    pool_worst: dict[str, GpuMemory] = {}
    for pt in pools:
        for t in pt.terms:
            kv = t.kv(batch, pt.context)
            act, comm = t.act(batch, pt.prompt, chunk), t.comm(batch, pt.prompt, chunk)
            g = GpuMemory.model_construct(  # tens of thousands for a wide replica: skip re-validation
                gpu=t.gpu, stage=t.stage, local=t.local, weights_bytes=t.weights, kv_cache_bytes=kv,
                activation_bytes=act, comm_buffer_bytes=comm, reserved_bytes=reserved,
                total_bytes=t.weights + kv + act + comm + reserved,
            )
            per_gpu.append(g)
            if pt.name not in pool_worst or g.total_bytes > pool_worst[pt.name].total_bytes:
                pool_worst[pt.name] = g
    worst = max(per_gpu, key=lambda g: g.total_bytes)
    load_peak = _online_quant_peak(plan, layout, eff, reserved)
    fits = worst.total_bytes <= cap and (load_peak is None or load_peak <= cap)

    def batch_fits_in(pt: _PoolTerms) -> Callable[[int], bool]:
        return lambda b: pt.worst(b, None, chunk, reserved) <= cap

    def context_fits(c: int) -> bool:
        return all(pt.worst(batch, c, chunk, reserved) <= cap for pt in pools)

    pool_batch = {pt.name: _largest(batch_fits_in(pt), MAX_BATCH) for pt in pools}
    max_batch = min(pool_batch.values())
    kv_room = _largest(context_fits, MAX_SEQ_LEN)
    max_ctx = min(kv_room, spec.max_position_embeddings)  # no sequence is longer than the model's window
    context = wl.input_len + wl.output_len
    kvb = DTYPE_BYTES[plan.effective_kv_dtype]
    kv_per_token = float(spec.kv_bytes_per_token(kvb))
    kv_total = sum(sum(t.kv(batch, pt.context) for t in pt.terms) * pt.dp for pt in pools)
    verdict = "fits" if fits else "does NOT fit"
    message = (
        f"{verdict}: worst GPU {worst.gpu} needs {worst.total_bytes / GB:.1f} GB of {cap / GB:.1f} GB "
        f"(weights {worst.weights_bytes / GB:.1f}, KV {worst.kv_cache_bytes / GB:.1f}, "
        f"activations {worst.activation_bytes / GB:.1f}, comm {worst.comm_buffer_bytes / GB:.2f}, "
        f"reserve {reserved / GB:.1f}); max batch {max_batch} at {context} tokens, "
        f"max context {max_ctx} at batch {batch}"
    )
    if load_peak is not None:
        message += (f"; loading the 16-bit checkpoint before quantizing it to fp8 ({engine_profile(plan.engine).name}) "
                    f"peaks at {load_peak / GB:.1f} GB")
    by_pool = None
    if layout.disaggregated:
        by_pool = {
            name: PoolMemory(fits=g.total_bytes <= cap, max_gpu_bytes=g.total_bytes, worst_gpu=g.gpu,
                             kv_cache_bytes=g.kv_cache_bytes, max_batch_size_that_fits=pool_batch[name])
            for name, g in pool_worst.items()
        }
        message += "; " + ", ".join(f"{n} pool max batch {pool_batch[n]}" for n in ("prefill", "decode"))
    return MemoryReport(
        fits=fits, capacity_bytes=cap, max_gpu_bytes=worst.total_bytes, worst_gpu=worst.gpu,
        weights_bytes=worst.weights_bytes, kv_cache_bytes=worst.kv_cache_bytes,
        activation_bytes=worst.activation_bytes, comm_buffer_bytes=worst.comm_buffer_bytes,
        reserved_bytes=reserved, per_gpu=per_gpu, max_batch_size_that_fits=max_batch,
        max_context_that_fits=max_ctx, max_tokens_per_sequence_that_fit=kv_room, load_peak_bytes=load_peak,
        kv_bytes_per_token=kv_per_token,
        kv_cache_bytes_total=kv_total,
        message=message, pools=by_pool,
    )


def _online_quant_peak(plan: Plan, layout: Layout, eff: dict[str, float], reserved: float) -> float | None:
    """The worst GPU's memory while an engine that quantizes whole-model (``online_quant_load``) loads a 16-bit
    checkpoint for fp8 weights: its 16-bit weights and the reserve, before any KV cache exists.  None when the plan
    serves stored weights or the engine quantizes layer by layer (its peak stays near the fp8 weights)."""
    if storage(plan) != "fp8" or checkpoint_format(plan.served_repo, plan.spec) not in (None, "bf16", "fp16"):
        return None
    if engine_profile(plan.engine).online_quant_load != "whole_model":
        return None
    sixteen = plan.model_copy(update={"dtype": "bf16", "weights": None})
    return max(t.weights for pt in _pools(sixteen, layout, eff) for t in pt.distinct) + reserved


def one_sequence_tokens(plan: Plan, windowed: bool = True) -> int:
    """Tokens of one sequence (batch 1) the plan's memory holds beside its weights, as an engine's start-up check
    counts them: with ``windowed``, a windowed layer keeps its window plus one step's new tokens (vLLM's hybrid
    manager reserves both for a request); without, every layer keeps them all, as an engine whose cache allocates
    full-length KV on local layers does.  Remembers its last few answers, as ``memory_report`` does: search asks
    it of every layout once per engine that could launch it."""
    if os.environ.get(ENV_VAR):  # an overlay file may change between calls
        return _one_sequence_tokens(plan, windowed)
    key = (plan.model_dump_json(), windowed)
    with _LOCK:
        if key in _ONE_CACHE:
            _ONE_CACHE.move_to_end(key)
            return _ONE_CACHE[key]
    tokens = _one_sequence_tokens(plan, windowed)
    with _LOCK:
        _ONE_CACHE[key] = tokens
        while len(_ONE_CACHE) > _CACHE_SIZE:
            _ONE_CACHE.popitem(last=False)
    return tokens


def _one_sequence_tokens(plan: Plan, windowed: bool) -> int:
    one = plan.model_copy(update={"workload": plan.workload.model_copy(update={"batch_size": 1})})
    layout = Layout(one)
    eff = plan_efficiency(one, None)
    cap = float(one.accelerator.capacity_bytes)
    reserved = eff["runtime_reserve_bytes"] + eff["fragmentation_fraction"] * cap
    chunk = int(eff["prefill_chunk_tokens"])

    def engine_view(t: _Terms) -> _Terms:
        if windowed:
            return replace(t, window=t.window + chunk)
        return replace(t, kv_full=t.kv_full + t.kv_window, kv_window=0.0)

    pools = [_PoolTerms(pt.name, [engine_view(t) for t in pt.terms], pt.dp, pt.context, pt.prompt)
             for pt in _pools(one, layout, eff)]
    return _largest(lambda c: all(pt.worst(1, c, chunk, reserved) <= cap for pt in pools), MAX_SEQ_LEN)


def engine_window_kv(plan: Plan, engine: str | None = None) -> tuple[bool, list[str]]:
    """Whether ``engine``'s KV cache (default: the plan's) keeps the plan's windowed layers to their window, as this
    module prices them, else full-length KV on them; and the environment assignments that make it do so, which
    export writes (vLLM's hybrid KV manager for chunked local attention, which an EAGLE drafter rules out;
    ``window_kv`` and ``window_kv_env`` of knowledge/engines/<id>.json)."""
    spec = plan.spec
    if not (spec.sliding_window and spec.sliding_window_layers):
        return True, []
    prof = engine_profile(engine or plan.engine)
    if spec.local_attention in prof.window_kv:
        return True, []
    env = prof.window_kv_env.get(spec.local_attention)
    eagle = plan.speculative is not None and plan.speculative.method in ("eagle", "eagle3")
    return (True, [env]) if env and not eagle else (False, [])
