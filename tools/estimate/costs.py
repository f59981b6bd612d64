"""Cost of one DAG node: roofline for compute nodes, alpha-beta for communication nodes.

Every compute node is a short sequence of kernels; each kernel takes
``(t_c^p + t_m^p)^(1/p) + kernel_overhead`` with ``t_c = flops / (peak * eff_compute)`` and
``t_m = bytes / (hbm_bw * eff_mem)``: near the ridge point loads are not hidden behind math, far from it the
larger term wins (``roofline_blend_exponent`` p).  Efficiency factors come from
``knowledge/hardware/efficiency.json`` and the plan's engine profile (see ``tools/core/efficiency.py``);
decode uses the engine's CUDA-graph per-kernel and per-layer overheads.  Every node counts the kernels the host
launches for it (``launches``): an engine that runs prefill eagerly is host-bound when those launches take longer
than the GPU work (``eager_pass``: per pass and pipeline stage, not per node; ``pass_schedule``).

Collectives (alpha-beta on the link the devices share): the TP all-reduce takes the best of ring, one-shot and
two-shot with the engine's small-message floor (NCCL ~20 us, a custom one-shot kernel ~6-8 us) and is never
overlapped.  MoE token exchange depends on where the tokens are:

* tokens replicated over the expert GPUs (attention TP covering the EP group, no attention-DP: expert-TP and
  TP-style EP): each GPU picks its tokens locally (no dispatch traffic) and the combine is an all-reduce;
* otherwise (attention-DP): an all-to-all.  Each source GPU sends its tokens' copies to the GPUs holding their
  experts; copies to GPUs of the same node move over NVLink, the others over the node's NICs (per-GPU RDMA
  bandwidth).  Dispatch uses the engine's payload (fp8 for DeepEP), combine 16-bit.  In prefill an engine with
  node de-duplication (DeepEP normal kernels) sends a token once per remote node and forwards it over NVLink;
  in decode (low-latency kernels) every copy travels.  The latency term is one fixed alpha, not one per peer:
  DeepEP's published dispatch latency grows only 1.6x from EP 16 to EP 256.

Token counts per phase (``batch`` sequences of the DP replica, or of one micro-batch):

* prefill: ``T = batch * input_len`` tokens; causal attention, each query sees on average ``(L+1)/2`` keys
  (sliding-window layers: ``min`` of that and the window), so attention FLOPs grow with ``L^2``;
* decode: ``T = batch`` tokens, each query sees the average context of the output,
  ``input_len + output_len/2`` keys (window-capped); the KV cache of that context is read once per step.

MoE (seed 004 "load imbalance dominates"): with ``T`` tokens routed top-``k`` over ``E`` experts, the routed
token copies landing on an Expert node holding ``e`` experts have mean ``T*k*e/E`` and, per token, the
hypergeometric variance ``k*(e/E)*(1-e/E)*(E-k)/(E-1)``.  The slowest of the ``n`` Expert nodes carries the
expected maximum, approximated as ``mean + sd*sqrt(2 ln n)`` (Gaussian extreme value), capped at
``T*min(k, e)``.  Weight traffic counts the experts that receive at least one token: each is hit with
probability ``1-(1-k/E)^T``, again taking the expected maximum over the Expert nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from tools.core.dag import NodeType
from tools.core.efficiency import attention_length_scale, attention_tiling
from tools.core.engine_features import engine_features, moe_tokens_replicated
from tools.core.formats import format_info, native
from tools.core.hardware import DTYPE_BYTES, Link
from tools.core.layout import Layout
from tools.core.plan import Plan
from tools.core.quantization import attention_unquantized, expert_gemm_dtype, gemm_dtype, storage, weight_bytes

T = NodeType


@dataclass
class NodeCost:
    seconds: float
    kind: str  # compute | memory | communication | overhead
    flops: float = 0.0
    bytes: float = 0.0
    hidden_seconds: float = 0.0  # communication time hidden by overlap (not on the critical path)
    compute_s: float = 0.0  # time of the compute-bound kernels (excluding launch overheads)
    memory_s: float = 0.0  # time of the memory-bound kernels
    overhead_s: float = 0.0  # launch and fixed per-layer overheads
    launches: float = 0.0  # kernels the host launches for this node (eager prefill can be host-bound)
    comm_s: float = 0.0  # an exchange inside a compute node (decode context parallel's merge of partial attention)


def _sum_costs(a: NodeCost, b: NodeCost) -> NodeCost:
    """Two kernels' costs run back to back on the same GPUs (Falcon-H1's attention then its Mamba-2 mixer)."""
    return NodeCost(a.seconds + b.seconds, a.kind if a.seconds >= b.seconds else b.kind, a.flops + b.flops,
                    a.bytes + b.bytes, a.hidden_seconds + b.hidden_seconds, a.compute_s + b.compute_s,
                    a.memory_s + b.memory_s, a.overhead_s + b.overhead_s, a.launches + b.launches, a.comm_s + b.comm_s)


def host_floor(stage_s: list[float], stage_launches: list[float], host_us_per_kernel: float) -> list[float]:
    """Stage times of a pass the host launches kernel by kernel (no CUDA graph).  Launches are asynchronous, so
    the host runs ahead while long kernels execute, but the GPU cannot start a kernel before its launch: a stage
    (one host process per pipeline stage) takes the longer of its GPU time and its launches' host time."""
    return [max(s, n * host_us_per_kernel * 1e-6) for s, n in zip(stage_s, stage_launches, strict=True)]


def eager_pass(stage_s: list[float], stage_launches: list[float], host_us_per_kernel: float) -> float:
    """One pass through the pipeline stages when each stage's host launches its kernels from the pass's start:
    a later stage's host enqueues while the earlier stages run, so stage ``s`` ends at
    ``max(end of stage s-1 + its GPU time, its own launch time)``; with one stage, the longer of the two."""
    end = 0.0
    for s, n in zip(stage_s, stage_launches, strict=True):
        end = max(end + s, n * host_us_per_kernel * 1e-6)
    return end


def _round_up(n: float, align: float) -> float:
    return math.ceil(n / align) * align if align > 0 else n


def host_us_per_kernel(eff: dict[str, float], phase: str, tokens: int) -> float:
    """The host time per launch a pass of ``tokens`` tokens waits for: prefill only (decode replays a CUDA graph),
    and only above the largest pass the engine captured in a graph (``prefill_graph_max_tokens``).  The engine's
    figure was timed on CUDA; the accelerator's runtime scales it (``host_launch_scale``: HIP's launches cost more)."""
    if phase != "prefill" or tokens <= eff["prefill_graph_max_tokens"]:
        return 0.0
    return eff["prefill_host_us_per_kernel"] * eff["host_launch_scale"]


def pass_schedule(phase: str, stage_s: list[float], launches: list[float], micro: int,
                  micro_s: list[float] | None, micro_launches: list[float] | None,
                  host_us_per_kernel: float) -> tuple[float, float, bool]:
    """A phase's latency from its stages, shared by ``core._phase`` and the fast path: one pass (host-bound where an
    eager host is slower, ``eager_pass``) or, when that is faster, ``micro`` micro-batches piped through the stages
    (prefill: ``(m + pp - 1)`` times the slowest stage; decode: the slowest stage ``m`` times, at least one
    micro-batch's pass).  Returns (latency, the GPU's part of it, whether the pipe was taken), in seconds."""
    gpu = sum(stage_s)
    latency = max(gpu, eager_pass(stage_s, launches, host_us_per_kernel)) if host_us_per_kernel else gpu
    if micro_s is None or micro_launches is None:
        return latency, gpu, False
    if phase == "prefill":
        slowest = max(host_floor(micro_s, micro_launches, host_us_per_kernel)) if host_us_per_kernel else max(micro_s)
        piped, piped_gpu = (micro + len(micro_s) - 1) * slowest, (micro + len(micro_s) - 1) * max(micro_s)
    else:
        piped = piped_gpu = max(sum(micro_s), micro * max(micro_s))
    if piped < latency:
        return piped, piped_gpu, True
    return latency, gpu, False


@dataclass
class Kernel:
    flops: float
    bytes: float
    attention: bool = False
    sliding: bool = False  # attention over a sliding window (its length, not the prompt's, sets the kernel's speed)
    small: bool = False  # weight-streaming GEMM with few tokens
    experts: bool = False  # grouped GEMM over routed experts
    mla: bool = False  # MLA decode attention over the latent (FlashMLA where the engine has it)
    block_gemms: int = 0  # dense weight GEMMs this kernel stands for (block-fp8 floor, weight-only de-quantization)
    memory_efficiency: float = 0.0  # the kernel's own published share of HBM bandwidth (0: the catalog's)
    floor_s: float = 0.0  # the kernel's published minimum time on this GPU at this size (0: none)
    speed_scale: float = 1.0  # below the kernel family's usual speed: narrow expert slices, an engine's MLA prefill
    sixteen: bool = False  # a 16-bit GEMM in a plan whose other GEMMs run in fp8/int8 (unquantized attention)


def expert_load(tokens: float, k: int, num_experts: int, held: int, ranks: int) -> tuple[float, float, float, float]:
    """(mean, expected max) routed token copies per Expert node and (mean, expected max) experts hit."""
    if held <= 0 or tokens <= 0:
        return 0.0, 0.0, 0.0, 0.0
    frac = held / num_experts
    mean = tokens * k * frac
    var_tok = k * frac * (1 - frac) * ((num_experts - k) / (num_experts - 1) if num_experts > 1 else 0.0)
    z = math.sqrt(2 * math.log(ranks)) if ranks > 1 else 0.0
    worst = min(mean + z * math.sqrt(tokens * var_tok), tokens * min(k, held))
    p_hit = 1 - (1 - k / num_experts) ** tokens
    hit_mean = held * p_hit
    hit_max = min(held, hit_mean + z * math.sqrt(held * p_hit * (1 - p_hit)), max(1.0, math.ceil(worst)))
    return mean, max(mean, worst), hit_mean, max(hit_mean, hit_max)


@dataclass
class CostModel:
    plan: Plan
    layout: Layout
    eff: dict[str, float]
    overlap: bool
    balanced_experts: bool = False
    decode_queries: int = 1  # tokens per sequence in a decode step: k + 1 when it verifies k draft tokens
    _cache: dict[tuple[Any, ...], NodeCost] = field(default_factory=dict)
    _links: dict[tuple[int, ...], Link] = field(default_factory=dict)

    def __post_init__(self) -> None:
        plan, acc = self.plan, self.plan.accelerator
        self.spec = plan.spec
        self.features = engine_features(plan, self.eff, self.overlap)  # what export writes for the engine to run
        self.wb = weight_bytes(plan, "dense")  # storage, not compute (tools/core/quantization.py)
        self.wba = weight_bytes(plan, "attention")  # 16-bit where the checkpoint leaves attention unquantized
        self.xb = weight_bytes(plan, "expert")
        self.hb = max(DTYPE_BYTES[plan.dtype], 2.0)
        self.kvb = DTYPE_BYTES[plan.effective_kv_dtype]
        self.ab = self.eff["activation_bytes"]
        self.gemm_dtype = self.gemm_compute_dtype()
        # attention projections kept in 16 bits by a checkpoint whose other GEMMs run in fp8/int8 (Meta's FP8 405B)
        self.attn16 = attention_unquantized(plan) and self.gemm_dtype not in ("bf16", "fp16")
        e = self.eff
        fmt = storage(plan)
        # 4-bit weights on FP4 tensor cores (their GEMMs priced at the stand-in peak), not upcast to 16-bit
        fp4 = format_info(fmt)["compute"] == "fp4" and self.gemm_dtype not in ("bf16", "fp16")
        low = "_fp8" if self.gemm_dtype in ("fp8", "int8") else ""  # the keys of fp8/int8 GEMMs, else 16-bit ones
        self.eff_gemm = (fp4 and e["compute_efficiency_gemm_fp4"]) or e["compute_efficiency_gemm" + low]
        law = "_fp4" if fp4 else low
        self.gemm_half = (e["gemm_half_speed_n" + law], e["gemm_half_speed_k" + law])
        ref = e["gemm_reference_width"]
        self.gemm_ref_speed = self._narrow(ref, ref)
        self.blend = max(1.0, e["roofline_blend_exponent"])
        self.peak_gemm = acc.peak_flops(self.gemm_dtype)
        self.peak_expert = acc.peak_flops(expert_gemm_dtype(plan))  # experts-only checkpoints (gpt-oss MXFP4)
        self.peak_attn = acc.peak_flops("bf16" if acc.supports("bf16") else "fp16")
        # an engine that multiplies an FP8 cache's Q, K and V in FP8 (e4m3 FMHA) runs prefill attention at FP8 peak
        fp8_attn = e["attention_fp8_math"] >= 0.5 and self.kvb == 1 and acc.supports("fp8")
        self.peak_attn_prefill = acc.peak_flops("fp8") if fp8_attn else self.peak_attn
        self.hbm = acc.memory_bandwidth_bytes_per_s
        wl = plan.workload
        self.input_len, self.output_len = wl.input_len, wl.output_len
        self.decode_context = wl.input_len + wl.output_len / 2
        spec = self.spec
        head_dim = spec.mla.qk_head_dim if spec.attention == "mla" and spec.mla else spec.head_dim
        window = min(wl.input_len, spec.sliding_window or wl.input_len)
        self.prefill_attention_scale = (attention_length_scale(wl.input_len, head_dim),
                                        attention_length_scale(window, head_dim))  # full, sliding layers
        self.attention_tiles = attention_tiling()  # (benchmark's query tiles, queries per tile)
        self.mxfp4_experts = fmt == "mxfp4" and spec.is_moe
        self.block_fp8 = self.gemm_dtype == "fp8" and spec.fp8_block_scaled and fmt == "fp8"
        # dense weights stored below 16 bits but multiplied in 16-bit: the kernel de-quantizes them (W4A16, W8A16)
        self.weight_only = self.gemm_dtype in ("bf16", "fp16") and self.wb < 2.0
        upcast = format_info(fmt)["compute"] == "fp4" and not native(fmt, acc)  # 4-bit formats without FP4 cores
        self.expert_mem_eff = self.eff["fp4_upcast_expert_memory_efficiency"] if upcast else 0.0  # 0: no figure
        # grouped expert GEMMs: a figure for the weight format where one is known, else the generic one; block-fp8
        # experts (never upcast: their format is fp8) bring their own narrow-slice law with their figure
        upcast_eff = self.eff["fp4_upcast_expert_compute_efficiency"] if upcast else 0.0
        block_eff = self.eff["compute_efficiency_experts_block_fp8"] if self.block_fp8 else 0.0
        mxfp4_eff = self.eff["compute_efficiency_experts_mxfp4"] if self.mxfp4_experts and not upcast else 0.0
        self.expert_compute_eff = upcast_eff or block_eff or mxfp4_eff or self.eff["compute_efficiency_experts"]
        # each figure's narrow-slice law: the upcast kernel's and block-fp8's own, else the generic one
        self.expert_half_width = self.eff["fp4_upcast_expert_half_speed_width" if upcast_eff else
                                          "experts_half_speed_width_block_fp8" if block_eff else
                                          "experts_half_speed_width"]

    def _narrow(self, n: float, k: float) -> float:
        a, b = self.gemm_half
        return n / (n + a) * k / (k + b)

    def gemm_speed(self, n: float, k: float) -> float:
        """A dense GEMM's speed relative to the catalog's figure, by its per-GPU output width ``n`` and reduction
        depth ``k``: narrow GEMMs leave tiles idle and spend longer in prologue and epilogue, the more so the
        faster their math (low precision), so speed ~ n / (n + a) * k / (k + b) relative to a square GEMM of
        ``gemm_reference_width``, whose speed the catalog states; wider or deeper ones run faster than it."""
        if not (self.gemm_half[0] or self.gemm_half[1]) or n <= 0 or k <= 0:
            return 1.0
        return self._narrow(n, k) / self.gemm_ref_speed

    def gemm_compute_dtype(self) -> str:
        """fp8/int8 weights use those tensor cores when the GPU has them; otherwise (int4, or fp8 on Ampere)
        weights are de-quantised in the kernel and the math runs in 16-bit (weight-only quantisation)."""
        return gemm_dtype(self.plan)

    # ------------------------------------------------------------------ kernels
    def run(self, phase: str, kernels: list[Kernel]) -> NodeCost:
        e = self.eff
        total = flops = nbytes = 0.0
        t_c = t_m = 0.0
        launch = e["decode_kernel_overhead_us" if phase == "decode" else "kernel_overhead_us"] * 1e-6
        p = self.blend
        for k in kernels:
            if k.mla and e["mla_decode_flash"] >= 0.5:
                peak = self.peak_attn * e["compute_efficiency_attention_flashmla"]
            elif k.attention and phase == "prefill":
                peak = self.peak_attn_prefill * e["compute_efficiency_attention"] * k.speed_scale * \
                    self.prefill_attention_scale[k.sliding]
            elif k.attention:
                peak = self.peak_attn * e["compute_efficiency_attention"] * k.speed_scale
            elif k.experts:
                # grouped expert GEMMs use the low-precision tensor cores only where the engine has such kernels
                low = e["experts_low_precision_math"] >= 0.5
                peak = (self.peak_expert if low else self.peak_attn) * self.expert_compute_eff * k.speed_scale
            elif k.sixteen:
                peak = self.peak_attn * e["compute_efficiency_gemm"] * k.speed_scale
            else:
                peak = self.peak_gemm * self.eff_gemm * k.speed_scale
            if k.memory_efficiency:  # a kernel with its own published streaming rate
                bw = self.hbm * k.memory_efficiency
            else:
                bw = self.hbm * (e["small_gemm_memory_efficiency"] if k.small else e["memory_efficiency"])
            tc, tm = k.flops / peak, k.bytes / bw
            both = (tc ** p + tm ** p) ** (1 / p) if tc > 0 and tm > 0 else tc + tm
            if k.block_gemms and self.block_fp8 and e["block_fp8_gemm_floor_us"] > 0:
                # block-scaled fp8 GEMMs run at a latency floor, not at HBM speed: published times are flat up to
                # ~128 rows and only grow past them, so it bounds every row count; past the largest published shape
                # the extra bytes stream at the roofline's rate
                slow = min(k.bytes, k.block_gemms * e["block_fp8_gemm_floor_max_bytes"])
                tm = max(tm, k.block_gemms * e["block_fp8_gemm_floor_us"] * 1e-6
                         + slow / (e["block_fp8_gemm_floor_gb_s"] * 1e9) + (k.bytes - slow) / bw)
                both = max(both, tm)
            if k.block_gemms and k.small and self.weight_only:
                # a weight-only GEMM with few rows pays a fixed de-quantization cost per GEMM beyond the bytes
                extra = k.block_gemms * e["weight_only_gemv_extra_us"] * 1e-6
                tm, both = tm + extra, both + extra
            if k.floor_s > both:  # a published kernel time above the roofline's: the kernel's own floor
                tm = max(tm, k.floor_s)
                both = k.floor_s
            # the blend's excess over the larger term is charged to the larger term's kind
            t_c += both if tc >= tm else 0.0
            t_m += both if tm > tc else 0.0
            total += both + launch
            flops += k.flops
            nbytes += k.bytes
        over = total - t_c - t_m
        # a block-scaled fp8 GEMM first quantizes its activations per 128-column group: one more launch each
        quant = sum(k.block_gemms for k in kernels) if self.block_fp8 else 0
        return NodeCost(total, "compute" if t_c >= t_m else "memory", flops, nbytes, 0.0, t_c, t_m, over,
                        float(len(kernels) + quant))

    def tokens(self, phase: str, batch: int) -> int:
        return batch * self.input_len if phase == "prefill" else batch * self.decode_queries

    def keys_per_query(self, phase: str, sliding: bool, dense: bool = False) -> float:
        """Keys one query attends to on average: the causal prefix, capped by a window or, under sparse attention,
        by the indexer's top-k (``dense``: every key, what the indexer itself scores)."""
        w = self.spec.sliding_window if sliding and self.spec.sliding_window else None
        idx = None if dense else self.spec.indexer
        if phase == "prefill":
            avg = (self.input_len + 1) / 2
            if idx is not None and self.input_len > idx.topk:  # positions past top-k read exactly top-k keys
                k, n = idx.topk, self.input_len
                return (k * (k + 1) / 2 + (n - k) * k) / n
            return min(avg, w) if w else avg
        if idx is not None:
            return idx.keys(self.decode_context)
        return min(self.decode_context, w) if w else self.decode_context

    def prefill_attention_occupancy(self, batch: int, heads: int, sp: int) -> float:
        """How fully a prefill attention kernel's work fills the GPU, relative to the FlashAttention-3 benchmark the
        speed-by-length curve comes from (16k tokens of 16 heads: 2,048 query tiles of 128 rows).  The kernel runs
        one tile per (sequence, head, tile of queries); with few of them (one short prompt, few heads per GPU) the SMs
        idle: speed ~ tiles / (tiles + attention_half_speed_tiles)."""
        half = self.eff["attention_half_speed_tiles"]
        if half <= 0:
            return 1.0
        ref, rows = self.attention_tiles
        tiles = batch * heads * math.ceil(self.input_len / sp / rows)
        return (tiles / (tiles + half)) / (ref / (ref + half))

    # ------------------------------------------------------------------ node costs
    def cost(self, attrs: dict[str, Any], batch: int) -> NodeCost:
        return self.cost_keyed(self.node_key(attrs), attrs, batch)

    def node_key(self, attrs: dict[str, Any]) -> tuple[Any, ...]:
        """What a node's cost depends on besides the batch (its kind, shard and link): equal keys, equal costs.
        Apart from ``cost`` so that a caller pricing the same nodes at many batches (``fast.FastEstimator``, the
        serving simulator's cost surface) works it out once per node."""
        ntype = attrs["type"]
        phase = attrs.get("phase") or "prefill"
        layer = attrs.get("layer")
        sliding = bool(layer is not None and self.spec.sliding_window_layers and self.spec.is_sliding_layer(layer))
        recurrent = bool(layer is not None and self.spec.recurrent is not None and self.spec.has_state(layer))
        # a layer reading an earlier layer's cache writes none, and a double-wide FFN costs twice (Gemma-4 E2B)
        own = (self.spec.is_kv_shared(layer), self.spec.ffn_width(layer)) if self._in_range(layer) else None
        meta = attrs.get("meta") or {}
        devices = attrs["devices"]
        return (ntype, phase, attrs.get("role"), attrs.get("heads"), attrs.get("kv_heads"),
                meta.get("of"), meta.get("seq_shards"), meta.get("vocab_shards"), len(attrs.get("experts") or ()),
                sliding, recurrent, own, len(devices), self.link(devices) if len(devices) > 1 else None)

    def cost_keyed(self, key: tuple[Any, ...], attrs: dict[str, Any], batch: int) -> NodeCost:
        """``cost`` of a node whose ``node_key`` is ``key``."""
        hit = self._cache.get((key, batch))
        if hit is None:
            hit = self._cost(key[0], key[1], batch, attrs, attrs.get("meta") or {}, key[9], key[10])
            self._cache[(key, batch)] = hit
        return hit

    def _in_range(self, layer: Any) -> bool:
        """A node's layer index that names one of the model's layers (a drafted DAG may carry others)."""
        return isinstance(layer, int) and not isinstance(layer, bool) and 0 <= layer < self.spec.num_layers

    def crosses_nodes(self, devices: list[int]) -> bool:
        return self.plan.cluster.crosses_domains(devices)

    def link(self, devices: list[int]) -> Link:
        """The link a group of GPUs talks over, once per group (every node's cost key asks for it)."""
        key = tuple(devices)
        hit = self._links.get(key)
        if hit is None:
            c = self.plan.cluster
            # a plan that asks for more GPUs than it has is treated as crossing nodes
            hit = c.accelerator.inter_node if max(devices) >= c.num_gpus else c.link_for(devices)
            self._links[key] = hit
        return hit

    def _cost(self, ntype: str, phase: str, batch: int, attrs: dict[str, Any], meta: dict[str, Any],
              sliding: bool, recurrent: bool = False) -> NodeCost:
        spec, e = self.spec, self.eff
        tok = self.tokens(phase, batch)
        h, ab = spec.hidden_size, self.ab
        small = phase == "decode"
        parallel = recurrent and self.spec.recurrent is not None and self.spec.recurrent.parallel
        if ntype == T.ATTENTION and parallel:  # Falcon-H1: attention and the Mamba-2 mixer run one after the other
            return _sum_costs(self.attention(phase, batch, attrs, meta, sliding),
                              self.recurrent_mixer(phase, batch, attrs, meta))
        if ntype == T.ATTENTION and recurrent:
            return self.recurrent_mixer(phase, batch, attrs, meta)
        if ntype == T.ATTENTION:
            return self.attention(phase, batch, attrs, meta, sliding)
        if ntype == T.KV_CACHE and recurrent and not parallel:  # the mixer reads and writes its state in place
            return NodeCost(0.0, "memory")
        layer = attrs.get("layer") if self._in_range(attrs.get("layer")) else None
        if ntype in (T.KV_CACHE, T.KV_TRANSFER) and layer is not None and spec.is_kv_shared(layer):
            return NodeCost(0.0, "memory")  # the layer reads an earlier layer's cache and keeps none
        if ntype == T.NORM:
            c = self.run(phase, [Kernel(0.0, 2 * tok * h * ab, small=True)])
            if attrs.get("role") in ("pre_attention", "pre_ffn"):
                extra = e["decode_layer_overhead_us" if phase == "decode" else "layer_overhead_us"] * 0.5e-6
                c.seconds += extra
                c.overhead_s += extra
            return c
        if ntype == T.FFN:
            dense = spec.ffn_width(layer) if layer is not None else spec.intermediate_size
            inter = spec.moe.shared_expert_intermediate_size if (attrs.get("role") == "shared_expert"
                                                                  and spec.moe) else dense
            i_l = inter / max(1, int(meta.get("of", 1)))
            g = 2 if spec.ffn_gated else 1  # gate and up, or up alone (ReLU^2 MLP)
            return self.run(phase, [
                Kernel(2 * tok * h * g * i_l, g * h * i_l * self.wb + tok * (h + g * i_l) * ab, small=small,
                       block_gemms=1, speed_scale=self.gemm_speed(g * i_l, h)),
                Kernel(tok * g * i_l, tok * (g + 1) * i_l * ab, small=True),
                Kernel(2 * tok * i_l * h, i_l * h * self.wb + tok * (i_l + h) * ab, small=small, block_gemms=1,
                       speed_scale=self.gemm_speed(h, i_l)),
            ])
        if ntype == T.EXPERT:
            return self.expert(tok, attrs, meta, small)
        if ntype == T.ROUTER:
            assert spec.moe is not None
            n_e = spec.moe.num_experts
            kernels = [Kernel(2 * tok * h * n_e, h * n_e * self.hb + tok * (h * ab + n_e * 4), small=small),
                       Kernel(tok * n_e * 4, tok * n_e * 4 * 2, small=True)]
            lat = spec.moe.latent_size
            if lat:  # a latent MoE's down- and up-projection around the experts, replicated like the router
                kernels.append(Kernel(4 * tok * h * lat, 2 * h * lat * self.hb + 2 * tok * (h + lat) * ab, small=small))
            c = self.run(phase, kernels)
            if not self.tokens_replicated(phase):  # permutation into the all-to-all send buffers
                c.seconds += e["moe_dispatch_overhead_us"] * 1e-6
                c.overhead_s += e["moe_dispatch_overhead_us"] * 1e-6
            return c
        if ntype == T.EMBEDDING:
            return self.run(phase, [Kernel(0.0, 2 * tok * h * self.hb, small=True)])
        if ntype == T.LM_HEAD:
            v = spec.vocab_size / max(1, int(meta.get("vocab_shards", 1) or 1))
            rows = batch if phase == "prefill" else tok  # verification takes logits at every drafted position
            return self.run(phase, [Kernel(2 * rows * h * v, h * v * self.hb + rows * v * 4, small=True),
                             Kernel(rows * v * 4, rows * v * 8, small=True)])  # sampling / softmax
        if ntype == T.KV_CACHE:
            kv_local = self.kv_elems_local(attrs)
            sp = max(1, int(meta.get("seq_shards", 1) or 1))
            if phase == "prefill":
                per_gpu = tok / max(1, self.attn_sp(attrs)) * kv_local * self.kvb
                return self.run(phase, [Kernel(0.0, per_gpu, small=True)])
            # a new token's KV lands on one rank of its DCP group
            return self.run(phase, [Kernel(0.0, tok * kv_local * self.kvb / sp / self.dcp, small=True)])
        if ntype in (T.ALL_REDUCE, T.ALL_GATHER, T.REDUCE_SCATTER, T.ALL_TO_ALL, T.SEND_RECV, T.KV_TRANSFER):
            return self.comm(ntype, phase, batch, attrs)
        return NodeCost(0.0, "overhead")

    def attn_sp(self, attrs: dict[str, Any]) -> int:
        phase = attrs.get("phase") or "prefill"
        return self.layout.phases[phase].sp  # type: ignore[index]

    def recurrent_shards(self, attrs: dict[str, Any]) -> int:
        """TP ranks a recurrent mixer is split over: its node's share of heads, as attention's."""
        return max(1, round(self.spec.num_heads / (attrs.get("heads") or self.spec.num_heads)))

    def recurrent_mixer(self, phase: str, batch: int, attrs: dict[str, Any], meta: dict[str, Any]) -> NodeCost:
        """A gated DeltaNet / Mamba-2 layer on one TP rank: input projection, short convolution and recurrence
        (a fixed number of multiply-adds per state element and token; each sequence's state written once after
        prefill, read and written back in place at every decode step), gated norm and output projection; no KV and
        no dependence on the context length."""
        spec, ab, wb = self.spec, self.ab, self.wba
        rec = spec.recurrent
        assert rec is not None
        h = spec.hidden_size
        shards = self.recurrent_shards(attrs)
        sp = max(1, int(meta.get("seq_shards", 1) or 1))
        tok = self.tokens(phase, batch) / sp
        small = phase == "decode"
        out_w = rec.inner * h / shards
        in_w = rec.params(h) / shards - out_w
        width = in_w / h
        state = batch * rec.state_bytes(shards) * (2 if phase == "decode" else 1)
        return self.run(phase, self._sixteen_bit([
            Kernel(2 * tok * in_w, in_w * wb + tok * (h + width) * ab, small=small, block_gemms=1,
                   speed_scale=self.gemm_speed(width, h)),
            Kernel(tok * rec.scan_flops_per_token(shards), state + tok * (rec.conv_channels / shards + rec.inner /
                   shards) * 2 * ab, small=True),
            Kernel(2 * tok * out_w, out_w * wb + tok * (rec.inner / shards + h) * ab, small=small, block_gemms=1,
                   speed_scale=self.gemm_speed(h, rec.inner / shards)),
        ]))

    def indexer_kernels(self, phase: str, batch: int, tok: float, sp: int) -> list[Kernel]:
        """DeepSeek sparse attention's indexer on one rank (replicated, not split by TP): its projections from the
        query latent and the hidden state, then one score per (query, key, indexer head) over every cached key,
        reading the indexer's fp8 key cache in decode."""
        spec, ab = self.spec, self.ab
        idx, m = spec.indexer, spec.mla
        assert idx is not None and m is not None and m.q_lora_rank
        h = spec.hidden_size
        w = idx.params(h, m.q_lora_rank)
        keys = self.keys_per_query(phase, False, dense=True)
        width = idx.num_heads * idx.head_dim
        read = batch * keys / sp * idx.cache_bytes_per_token() if phase == "decode" else tok * width * ab
        return [Kernel(2 * tok * w, w * self.wba + tok * (h + width) * ab, small=phase == "decode", block_gemms=1,
                       speed_scale=self.gemm_speed(width, m.q_lora_rank)),
                Kernel(2 * tok * keys * width, read, attention=True)]

    def kv_elems_local(self, attrs: dict[str, Any]) -> float:
        spec = self.spec
        if spec.attention == "mla":
            return float(spec.kv_elements_per_token_per_layer(0))
        kv_heads, head_dim = spec.kv_shape(attrs.get("layer"))  # a full-attention layer's own shape (Gemma-4)
        return 2.0 * (attrs.get("kv_heads") or kv_heads) * head_dim

    def _sixteen_bit(self, kernels: list[Kernel]) -> list[Kernel]:
        """The attention node's projection GEMMs in 16-bit math where the checkpoint keeps them unquantized (no
        block-scaled or weight-only path: their weights are plain bf16)."""
        if not self.attn16:
            return kernels
        for k in kernels:
            if not k.attention:
                k.sixteen, k.block_gemms = True, 0
        return kernels

    def attention(self, phase: str, batch: int, attrs: dict[str, Any], meta: dict[str, Any],
                  sliding: bool) -> NodeCost:
        spec, ab, wb = self.spec, self.ab, self.wba
        h = spec.hidden_size
        sp = max(1, int(meta.get("seq_shards", 1) or 1))
        hq = attrs.get("heads") or spec.num_heads
        tok = self.tokens(phase, batch) / sp
        keys = self.keys_per_query(phase, sliding)
        small = phase == "decode"
        if spec.attention == "mla":
            m = spec.mla
            assert m is not None
            ql, kvl, rope, nope, vd = m.q_lora_rank or 0, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, \
                m.v_head_dim
            qk = m.qk_head_dim
            q_w = (h * ql + ql * hq * qk) if ql else h * hq * qk
            kva_w = h * (kvl + rope)
            kvb_w = kvl * hq * (nope + vd)
            o_w = hq * vd * h
            kernels = [Kernel(2 * tok * (q_w + kva_w), (q_w + kva_w) * wb + tok * (h + hq * qk + kvl + rope) * ab,
                              small=small, block_gemms=2 if ql else 1,  # fused q_a/kv_a, then q_b
                              speed_scale=self.gemm_speed((q_w + kva_w) / h, h))]
            if phase == "prefill":  # naive form: expand the latent to per-head K and V
                kernels.append(Kernel(2 * tok * kvb_w, kvb_w * wb + tok * (kvl + hq * (nope + vd)) * ab,
                                      speed_scale=self.gemm_speed(hq * (nope + vd), kvl)))
                kernels.append(Kernel(2 * tok * keys * hq * (qk + vd),
                                      tok * hq * (2 * qk + 2 * vd) * ab, attention=True,
                                      speed_scale=self.eff["mla_prefill_attention_speed"] *
                                      self.prefill_attention_occupancy(batch, hq, sp)))
            else:  # absorbed form: attend over the cached latent directly
                kernels.append(Kernel(2 * tok * hq * nope * kvl, kvl * hq * nope * wb + tok * hq * (nope + kvl) * ab,
                                      small=True))
                # the latent is whole on every TP rank; decode context parallel leaves 1/dcp of its tokens on each,
                # which then attends for the dcp x hq heads of its DCP group (the same FLOPs)
                ctx_bytes = batch * keys * (kvl + rope) * self.kvb / self.dcp
                kernels.append(Kernel(2 * tok * keys * hq * (2 * kvl + rope), ctx_bytes / sp, attention=True, mla=True,
                                      floor_s=self.eff["mla_decode_floor_us"] * 1e-6))
                kernels.append(Kernel(2 * tok * hq * kvl * vd, kvl * hq * vd * wb + tok * hq * (kvl + vd) * ab,
                                      small=True))
            kernels.append(Kernel(2 * tok * o_w, o_w * wb + tok * (hq * vd + h) * ab, small=small, block_gemms=1,
                                  speed_scale=self.gemm_speed(h, hq * vd)))
            if spec.indexer is not None:
                kernels.extend(self.indexer_kernels(phase, batch, tok, sp))
            return self._with_dcp(phase, self.run(phase, self._sixteen_bit(kernels)), tok, hq, kvl + rope, kvl,
                                  attrs)
        layer = attrs.get("layer")
        kv_heads, d = spec.kv_shape(layer)  # a full-attention layer's own shape (Gemma-4)
        hkv = attrs.get("kv_heads") or kv_heads
        gate = hq if spec.attention_output_gate else 0  # Qwen3-Next's q_proj also emits an output gate per head
        kv_proj = spec.kv_projections(layer if isinstance(layer, int) and 0 <= layer < spec.num_layers else None)
        qkv_w = h * (hq + gate + kv_proj * hkv) * d  # no v_proj (Gemma-4's k_eq_v), no k/v at all (Hunyuan's CLA)
        o_w = hq * d * h
        kernels = [Kernel(2 * tok * qkv_w, qkv_w * wb + tok * (h + (hq + 2 * hkv) * d) * ab, small=small,
                          block_gemms=1, speed_scale=self.gemm_speed((hq + 2 * hkv) * d, h))]
        if phase == "prefill":
            kernels.append(Kernel(4 * tok * keys * hq * d, tok * (2 * hq + 2 * hkv) * d * ab, attention=True,
                                  sliding=sliding, speed_scale=self.prefill_attention_occupancy(batch, hq, sp)))
        else:
            # a decode kernel without GQA support streams each K/V head once per query head of its group
            reread = 1 + self.eff["gqa_decode_kv_rereads"] * (max(1, hq // max(1, hkv)) - 1)
            kv_bytes = batch * keys / sp / self.dcp * 2 * hkv * d * self.kvb * reread
            kernels.append(Kernel(4 * tok * keys * hq * d, kv_bytes + tok * 2 * hq * d * ab, attention=True))
        kernels.append(Kernel(2 * tok * o_w, o_w * wb + tok * (hq * d + h) * ab, small=small, block_gemms=1,
                              speed_scale=self.gemm_speed(h, hq * d)))
        return self._with_dcp(phase, self.run(phase, self._sixteen_bit(kernels)), tok, hq, d, d, attrs)

    @property
    def dcp(self) -> int:
        return self.layout.phases["decode"].dcp

    def _with_dcp(self, phase: str, cost: NodeCost, tok: float, heads: int, q_dim: int, o_dim: int,
                  attrs: dict[str, Any]) -> NodeCost:
        """Decode attention under decode context parallel: each of the ``dcp`` ranks holds a token slice of the
        KV its DCP group shares, so the group's queries are all-gathered (``tok x heads x q_dim`` per rank), each
        rank attends over its slice for all of them, and the partial outputs with their log-sum-exps (fp32) are
        reduce-scattered back to the ranks owning the heads: vLLM's default ``ag_rs`` exchange."""
        n = self.dcp
        if phase != "decode" or n <= 1:
            return cost
        first = min(attrs.get("devices") or [0])
        group = list(range(first - first % n, first - first % n + n))
        link = self.link(group)
        bw = link.bandwidth_bytes_per_s * self.eff["comm_bandwidth_efficiency"]
        alpha = link.latency_us * self.eff["comm_latency_scale"] * 1e-6
        floor = max(alpha, self.eff["allreduce_min_us"] * 1e-6)
        gather = n * tok * heads * q_dim * self.ab
        scatter = n * tok * heads * (o_dim * self.ab + 4)
        t = (n - 1) / n * (gather + scatter) / bw + 2 * floor
        return replace(cost, seconds=cost.seconds + t, bytes=cost.bytes + gather + scatter, comm_s=t,
                       launches=cost.launches + 2)

    def expert(self, tok: float, attrs: dict[str, Any], meta: dict[str, Any], small: bool) -> NodeCost:
        spec = self.spec
        moe = spec.moe
        assert moe is not None
        phase = attrs.get("phase") or "prefill"
        held = len(attrs.get("experts") or ())
        etp = max(1, int(meta.get("of", 1) or 1))
        ranks = self.layout.phases[attrs.get("phase") or "prefill"].ep  # type: ignore[index]
        mean, worst, hit_mean, hit_worst = expert_load(tok, moe.experts_per_token, moe.num_experts, held, ranks)
        load, hit = (mean, hit_mean) if self.balanced_experts else (worst, hit_worst)
        h, i_l = spec.expert_width, moe.expert_intermediate_size / etp
        if self.mxfp4_experts:  # the engines' MXFP4 MoE kernels run on zero-padded expert weights
            h, i_l = _round_up(h, self.eff["mxfp4_expert_hidden_align"]), \
                _round_up(i_l, self.eff["mxfp4_expert_inter_align"])
        g = 2 if spec.ffn_gated else 1  # gate and up, or up alone (Nemotron-3's ReLU^2 experts)
        w1 = hit * g * h * i_l * self.xb
        w2 = hit * i_l * h * self.xb
        # 4-bit experts upcast in the kernel, or block-fp8 experts split over TP ranks through the engine's fused-MoE
        # kernel (tokens replicated: no all-to-all path), stream at those kernels' published rates; the block-fp8
        # figure was timed on TP-sliced experts, whose narrow slices it reflects, so whole experts (EP) keep the
        # catalog's rate
        sharded = self.block_fp8 and self.tokens_replicated(phase) and etp > 1
        rate = self.expert_mem_eff or (self.eff["fused_moe_block_fp8_memory_efficiency"] if sharded else 0.0)
        # where a fused-MoE kernel over TP-sharded block-fp8 experts has been timed at few tokens, its time is a
        # fixed floor plus the bytes of the experts hit at a slower rate; the two GEMMs share it by their bytes
        floor_us = self.eff["fused_moe_floor_us"]
        floor = floor_us * 1e-6 + (w1 + w2) / (self.eff["fused_moe_floor_gb_s"] * 1e9) \
            if sharded and floor_us > 0 and w1 + w2 > 0 else 0.0
        f1, f2 = (floor * w1 / (w1 + w2), floor * w2 / (w1 + w2)) if floor else (0.0, 0.0)
        half = self.expert_half_width
        width = i_l / (i_l + half) if half > 0 else 1.0
        return self.run(phase, [
            Kernel(2 * load * h * g * i_l, w1 + load * (h + g * i_l) * self.ab, small=small, experts=True,
                   memory_efficiency=rate, floor_s=f1, speed_scale=width),
            Kernel(load * g * i_l, load * (g + 1) * i_l * self.ab, small=True),
            Kernel(2 * load * i_l * h, w2 + load * (i_l + h) * self.ab, small=small, experts=True,
                   memory_efficiency=rate, floor_s=f2, speed_scale=width),
        ])

    # ------------------------------------------------------------------ communication
    def tokens_replicated(self, phase: str) -> bool:
        """Every expert GPU already holds every token of the layer: no dispatch, the combine is an all-reduce."""
        pl = self.layout.phases[phase]  # type: ignore[index]
        return moe_tokens_replicated(pl.attn_dp, pl.tp, pl.ep)

    def comm(self, ntype: str, phase: str, batch: int, attrs: dict[str, Any], tok: float | None = None) -> NodeCost:
        """One collective of ``batch`` sequences (``tok`` tokens when given: the overlap floor prices one token)."""
        e, spec = self.eff, self.spec
        devices = attrs["devices"]
        n = len(devices)
        tok = self.tokens(phase, batch) if tok is None else tok
        size = tok * spec.hidden_size * self.ab
        if n <= 1 and ntype != T.SEND_RECV:
            return NodeCost(0.0, "communication")
        link = self.link(devices)
        bw = link.bandwidth_bytes_per_s * e["comm_bandwidth_efficiency"]
        alpha = link.latency_us * e["comm_latency_scale"] * 1e-6
        role = attrs.get("role")
        overlap_key = "tp_overlap_fraction"
        if ntype == T.ALL_TO_ALL and self.tokens_replicated(phase):
            if role == "dispatch":  # each GPU selects its experts' tokens from its own copy
                return NodeCost(0.0, "communication")
            t = self.all_reduce(n, size, link, bw, alpha)
        elif ntype == T.ALL_REDUCE:
            t = self.all_reduce(n, size, link, bw, alpha)
        elif ntype in (T.ALL_GATHER, T.REDUCE_SCATTER):
            if role == "logits":  # one row of logits per sequence (the last prompt token in prefill)
                size = batch * spec.vocab_size * self.ab
            switched = link.kind in ("nvlink", "xgmi")
            t = (n - 1) / n * size / bw + max(((n - 1) if not switched else 1) * alpha, e["allreduce_min_us"] * 1e-6)
        elif ntype == T.ALL_TO_ALL:
            t = self.all_to_all(phase, tok, devices, role)
            overlap_key = ""
        elif ntype == T.KV_TRANSFER:
            layer = attrs.get("layer")
            if layer is not None and spec.recurrent is not None and spec.is_recurrent_layer(layer):
                layer_kv = batch * spec.recurrent.state_bytes()  # a recurrent layer hands over its state
            else:
                layer_kv = self.tokens("prefill", batch) * (self.kv_elems_local({"layer": layer})
                                                            * self.kvb + spec.indexer_bytes_per_token_per_layer())
                if layer is not None and spec.recurrent is not None and spec.is_parallel_layer(layer):
                    layer_kv += batch * spec.recurrent.state_bytes()  # Falcon-H1: its KV and its state
            t = alpha + layer_kv / max(1, n) / bw
        else:  # SEND_RECV: activations of the batch between two pipeline stages
            t = alpha + size / bw
        hidden = 0.0
        if self.overlap and role in ("tp_sync", "sp_sync", "dispatch", "combine") and tok > 1:
            # overlap splits the tokens into two micro-batches, each paying at least one token's exchange: it
            # hides at most the time the extra tokens add, so a bigger batch never makes the collective faster
            floor = self.comm(ntype, phase, batch, attrs, tok=1).seconds
            share = e[overlap_key] if overlap_key else self.features.ep_overlap_fraction
            hidden = max(0.0, min(t * share, t - floor))
        return NodeCost(t - hidden, "communication", 0.0, size, hidden, launches=1.0)

    def all_reduce(self, n: int, size: float, link: Link, bw: float, alpha: float) -> float:
        """Fastest of ring, one-shot and two-shot (switched intra-node fabric) or ring and tree (network).  Each is
        latency plus transfer (alpha-beta): the latency part is never below the engine's small-message floor, and
        the floor adds to the transfer rather than hiding it (a 1-4 MB all-reduce on 6-8 H100s takes the floor
        plus its bytes at about 0.6-0.75 of NVLink bandwidth: vLLM PR #24111's isolated benchmark).  Two-shot is
        two synchronised phases, so it pays the floor twice: the same benchmark's 2-stage kernel sits about 15 us
        above its transfer time where the 1-stage kernel sits about 6 us above its own."""
        floor = self.eff["allreduce_min_us"] * 1e-6
        options = [2 * (n - 1) / n * size / bw + max(2 * (n - 1) * alpha, floor)]  # ring
        if link.kind in ("nvlink", "xgmi"):
            options.append((n - 1) * size / bw + max(alpha, floor))  # one-shot: read every peer's buffer
            options.append(2 * (n - 1) / n * size / bw + 2 * max(alpha, floor))  # two-shot: reduce-scatter + gather
        else:
            options.append(2 * size / bw + max(2 * math.ceil(math.log2(n)) * alpha, floor))  # tree
        return min(options)

    def all_to_all(self, phase: str, tok: float, devices: list[int], role: str | None) -> float:
        """One MoE dispatch or combine over ``devices`` (see the module doc): NVLink and NIC traffic in parallel,
        one fixed latency."""
        e, spec = self.eff, self.spec
        n = len(devices)
        k = spec.moe.experts_per_token if spec.moe else 1
        elem = e["dispatch_bytes"] if role == "dispatch" else self.ab
        per_src = tok / n * spec.expert_width * elem  # one copy of one source GPU's tokens (a latent MoE's latent)
        c = self.plan.cluster
        gpn = max(1, min(c.gpus_per_node, n))
        nodes = max(1, math.ceil(n / gpn)) if self.crosses_nodes(devices) else 1
        intra = self.plan.accelerator.intra_node.for_group(gpn)
        nvl_bw = intra.bandwidth_bytes_per_s * e["comm_bandwidth_efficiency"]
        floor = e["alltoall_min_us"] * 1e-6
        if nodes == 1:
            return floor + k * (n - 1) / n * per_src / nvl_bw
        net = self.link(devices)
        net_bw = net.bandwidth_bytes_per_s * e["comm_bandwidth_efficiency"]
        local = gpn / n  # share of the expert GPUs in the sender's node
        if phase == "prefill" and self.features.prefill_node_dedup:
            remote_copies = (nodes - 1) * (1 - (1 - 1 / nodes) ** k)  # distinct remote nodes a token reaches
            nvl_copies = k  # local copies plus forwarding of received copies inside the destination node
        else:
            remote_copies = k * (1 - local)
            nvl_copies = k * local
        return floor + net.latency_us * 1e-6 + max(remote_copies * per_src / net_bw, nvl_copies * per_src / nvl_bw)
