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
The larger of the prefill and decode layouts counts (they differ only in ``sp``).

Activations (peak prefill working set, 16-bit): with ``T = min(batch*input_len, prefill_chunk_tokens)``
tokens in one forward pass, a GPU holds the residual stream and its normalised copy (``2*T*h``) plus the
largest operator's working set: attention ``T*(q_local + 2*kv_local + q_local)*head_dim`` (flash attention:
no ``L^2`` score matrix), dense FFN ``T*2*i/tp`` (gate and up outputs) or MoE ``T*k*(e_local/E)*2*i_e``
(tokens routed to the GPU's experts) and, on the last stage, fp32 logits of the batch ``batch*vocab*4``.

Communication buffers: TP all-reduce staging ``2*T*h`` (in and out) when ``tp > 1``; EP dispatch and
combine buffers ``2*T*k*h`` when ``ep > 1`` (every routed token copy sent and received once).

Reserve: ``runtime_reserve_bytes`` (CUDA context, workspaces, NCCL, CUDA graphs) plus
``fragmentation_fraction`` of capacity; both from ``knowledge/hardware/efficiency.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import ceil

from pydantic import BaseModel, Field

from tools.estimate.efficiency import Overlay, efficiency_for
from tools.hardware import DTYPE_BYTES
from tools.layout import Layout, PhaseLayout
from tools.plan import MAX_BATCH, MAX_SEQ_LEN, Plan

__all__ = ["GpuMemory", "MemoryReport", "memory_report"]

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
    max_context_that_fits: int = Field(description="largest tokens per sequence at this batch (0: none)")
    kv_bytes_per_token: float = Field(description="KV bytes per token of the whole model (all layers)")
    kv_cache_bytes_total: float = Field(description="KV of the whole deployment (all replicas, with replication)")
    message: str


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
    act_per_token: float
    logits_per_seq: float
    comm_per_token: float

    def kv(self, batch: int, context: int) -> float:
        return batch * (self.kv_full * context + self.kv_window * min(context, self.window))

    def act(self, batch: int, tokens: int) -> float:
        return self.act_per_token * tokens + self.logits_per_seq * batch

    def comm(self, tokens: int) -> float:
        return self.comm_per_token * tokens


def _attention_split(plan: Plan) -> tuple[int, int]:
    """(replicated, sharded) attention parameters per layer under TP."""
    spec = plan.spec
    total = spec.attention_params_per_layer()
    if spec.attention != "mla":
        return 0, total
    m = spec.mla
    assert m is not None
    h = spec.hidden_size
    rep = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    if m.q_lora_rank:
        rep += h * m.q_lora_rank + m.q_lora_rank
    return rep, total - rep


def _kv_heads_local(plan: Plan, pl: PhaseLayout) -> int:
    spec = plan.spec
    return max(1, ceil(spec.num_kv_heads / pl.head_shards))


def _kv_elems_local(plan: Plan, pl: PhaseLayout) -> float:
    """KV elements per token per layer held by one attention GPU."""
    spec = plan.spec
    if spec.attention == "mla":
        return float(spec.kv_elements_per_token_per_layer(0))
    return 2.0 * _kv_heads_local(plan, pl) * spec.head_dim


def _gpu_terms(plan: Plan, layout: Layout, eff: dict[str, float]) -> list[_Terms]:
    spec = plan.spec
    wb = DTYPE_BYTES[plan.dtype]
    hb = max(wb, 2.0)  # embedding, LM head, norms, router
    kvb = DTYPE_BYTES[plan.effective_kv_dtype]
    ab = eff["activation_bytes"]
    h = spec.hidden_size
    rep_attn, shard_attn = _attention_split(plan)
    phases = list(layout.phases.values())
    tp = max(p.tp for p in phases)
    ep = max(p.ep for p in phases) if spec.is_moe else 1
    w = layout.group_width
    attn_width = max(p.attn_width for p in phases)
    moe = spec.moe
    expert_tp = w // ep if (spec.is_moe and plan.options.allow_expert_tp and ep < w) else 1
    n_exp = moe.num_experts if moe else 0
    base, extra = divmod(n_exp, ep) if moe else (0, 0)
    window = spec.sliding_window or 0
    out: list[_Terms] = []
    for s, layers in enumerate(layout.stage_layers):
        n_moe = sum(1 for i in layers if spec.is_moe_layer(i))
        n_dense = len(layers) - n_moe
        dense_ffn = sum(spec.ffn_params(i) for i in layers)
        n_slide = sum(1 for i in layers if spec.is_sliding_layer(i))
        n_full = len(layers) - n_slide
        last = s == layout.pp - 1
        for local in range(w):
            gpu = layout.device(0, s, local)
            weights = 0.0
            kv_elems = 0.0
            act_attn = 0.0
            for pl in phases:
                if local < pl.attn_width:
                    kv_elems = max(kv_elems, _kv_elems_local(plan, pl) / pl.sp)
                    q_local = spec.num_heads / pl.head_shards
                    kv_local = 0 if spec.attention == "mla" else _kv_heads_local(plan, pl)
                    hd = spec.mla.qk_head_dim if spec.mla else spec.head_dim
                    act_attn = max(act_attn, (2 * q_local + 2 * kv_local) * hd / pl.sp)
            attn_gpu = local < attn_width
            if attn_gpu:
                shards = min(p.head_shards for p in phases if local < p.attn_width)
                weights += len(layers) * ((rep_attn + shard_attn / shards) * wb + spec.layer_norm_params() * hb)
                if moe:
                    weights += n_moe * spec.router_params() * hb
                if s == 0:
                    weights += spec.embedding_params() * hb
                if last:
                    head = spec.lm_head_params() or (spec.embedding_params() if layout.pp > 1 else 0)
                    weights += (head + spec.final_norm_params()) * hb
            act_ffn = 0.0
            if local < tp:
                weights += dense_ffn / tp * wb
                if moe:
                    weights += n_moe * spec.shared_expert_params() / tp * wb
                if n_dense:
                    act_ffn = 2 * spec.intermediate_size / tp
                if moe and n_moe:
                    act_ffn = max(act_ffn, 2 * moe.shared_expert_intermediate_size / tp)
            if moe and n_moe and local < ep * expert_tp:
                k = local // expert_tp
                held = base + (1 if k < extra else 0)
                weights += n_moe * held * spec.expert_params() / expert_tp * wb
                routed = moe.experts_per_token * held / n_exp
                act_ffn = max(act_ffn, routed * 2 * moe.expert_intermediate_size / expert_tp)
            resid = 2 * h if attn_gpu or act_ffn else 0
            act_per_token = (resid + max(act_attn, act_ffn)) * ab
            logits = spec.vocab_size * 4.0 if (last and attn_gpu) else 0.0
            comm = 0.0
            if tp > 1 and local < tp:
                comm += 2 * h * ab
            if moe and n_moe and ep > 1 and local < ep * expert_tp:
                comm += 2 * moe.experts_per_token * h * ab / ep
            out.append(_Terms(
                gpu=gpu, stage=s, local=local, weights=weights,
                kv_full=n_full * kv_elems * kvb, kv_window=n_slide * kv_elems * kvb, window=window,
                act_per_token=act_per_token, logits_per_seq=logits, comm_per_token=comm,
            ))
    return out


def _worst_total(terms: list[_Terms], batch: int, context: int, prompt: int, chunk: int, fixed: float) -> float:
    tokens = min(batch * prompt, chunk)
    return max(t.weights + t.kv(batch, context) + t.act(batch, tokens) + t.comm(tokens) for t in terms) + fixed


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


def memory_report(plan: Plan, layout: Layout | None = None, efficiency: Overlay = None) -> MemoryReport:
    """Per-GPU memory of replica 0 of ``plan`` and whether the most loaded GPU fits (see module doc)."""
    layout = layout or Layout(plan)
    eff = efficiency_for(plan.accelerator.id, efficiency)
    spec, wl = plan.spec, plan.workload
    cap = float(plan.accelerator.memory_bytes)
    reserved = eff["runtime_reserve_bytes"] + eff["fragmentation_fraction"] * cap
    chunk = int(eff["prefill_chunk_tokens"])
    terms = _gpu_terms(plan, layout, eff)
    batch, context = wl.batch_size, wl.input_len + wl.output_len
    tokens = min(batch * wl.input_len, chunk)
    per_gpu: list[GpuMemory] = []
    for t in terms:
        kv, act, comm = t.kv(batch, context), t.act(batch, tokens), t.comm(tokens)
        per_gpu.append(GpuMemory(
            gpu=t.gpu, stage=t.stage, local=t.local, weights_bytes=t.weights, kv_cache_bytes=kv,
            activation_bytes=act, comm_buffer_bytes=comm, reserved_bytes=reserved,
            total_bytes=t.weights + kv + act + comm + reserved,
        ))
    worst = max(per_gpu, key=lambda g: g.total_bytes)
    fits = worst.total_bytes <= cap

    def batch_fits(b: int) -> bool:
        return _worst_total(terms, b, context, wl.input_len, chunk, reserved) <= cap

    def context_fits(c: int) -> bool:
        return _worst_total(terms, batch, c, c, chunk, reserved) <= cap

    max_batch = _largest(batch_fits, MAX_BATCH)
    max_ctx = _largest(context_fits, MAX_SEQ_LEN)
    kvb = DTYPE_BYTES[plan.effective_kv_dtype]
    kv_per_token = float(spec.kv_bytes_per_token(kvb))
    kv_total = sum(t.kv(batch, context) for t in terms) * layout.dp
    verdict = "fits" if fits else "does NOT fit"
    message = (
        f"{verdict}: worst GPU {worst.gpu} needs {worst.total_bytes / GB:.1f} GB of {cap / GB:.1f} GB "
        f"(weights {worst.weights_bytes / GB:.1f}, KV {worst.kv_cache_bytes / GB:.1f}, "
        f"activations {worst.activation_bytes / GB:.1f}, comm {worst.comm_buffer_bytes / GB:.2f}, "
        f"reserve {reserved / GB:.1f}); max batch {max_batch} at {context} tokens, "
        f"max context {max_ctx} at batch {batch}"
    )
    return MemoryReport(
        fits=fits, capacity_bytes=cap, max_gpu_bytes=worst.total_bytes, worst_gpu=worst.gpu,
        weights_bytes=worst.weights_bytes, kv_cache_bytes=worst.kv_cache_bytes,
        activation_bytes=worst.activation_bytes, comm_buffer_bytes=worst.comm_buffer_bytes,
        reserved_bytes=reserved, per_gpu=per_gpu, max_batch_size_that_fits=max_batch,
        max_context_that_fits=max_ctx, kv_bytes_per_token=kv_per_token, kv_cache_bytes_total=kv_total,
        message=message,
    )
