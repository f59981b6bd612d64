"""Serving-engine profiles (``knowledge/engines/<id>.json``): what an engine does that changes the estimate.

Engines differ in fixed cost per forward pass (scheduler, sampling, Python), whether decode runs as a captured
CUDA graph (kernel launches replayed without the host, so per-kernel gaps shrink), how they all-reduce (NCCL
rings versus a custom one-shot kernel over NVLink peer memory), how they move MoE tokens (NCCL all-to-all
versus DeepEP with fp8 dispatch), which collectives they overlap with compute (none overlap the TP all-reduce;
some overlap EP dispatch/combine with two micro-batches) and which kernels they ship.  A profile turns those
facts into efficiency keys (``efficiency_keys``) that sit between the per-accelerator factors and a user's
calibration overlay (see ``efficiency.py``).  Every figure carries a source in the profile's ``sources``.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from knowledge import ROOT, load_json
from tools.core.errors import PdagInputError

ENGINE_DIR = ROOT / "engines"

Kernel = Literal["vocab_parallel", "flash_attention", "flashmla", "fp8_gemm", "fp8_grouped_gemm", "deepgemm",
                 "custom_allreduce", "deepep", "gqa_decode"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PerPhase(_Strict):
    prefill: float = Field(ge=0)
    decode: float = Field(ge=0)


class AllReduceImpl(_Strict):
    implementation: Literal["nccl", "custom_one_shot"] = Field(
        description="nccl: ring/tree kernels; custom_one_shot: every rank reads its peers' buffers over NVLink")
    min_us: float = Field(ge=0, description="floor of a small-message all-reduce inside one node")


class AllToAllImpl(_Strict):
    implementation: Literal["nccl", "deepep"]
    min_us: float = Field(ge=0, description="fixed latency of one dispatch or combine, nearly flat in the peer count")
    dispatch_bytes: float = Field(gt=0, le=2, description="bytes per hidden element sent by dispatch (fp8 = 1)")
    node_dedup_prefill: bool = Field(
        description="prefill sends a token once per destination node and forwards it over NVLink (DeepEP normal "
                    "kernels); decode sends one copy per expert (low-latency kernels)")
    launch_flags: list[str] = Field(
        default_factory=list,
        description="the launch flags that select this all-to-all where the engine's default EP path is another "
                    "(export writes them wherever the estimate prices an all-to-all); empty: the default")
    prefill_pool_launch_flags: list[str] = Field(
        default_factory=list,
        description="where the engine picks its all-to-all kernels per server: the flags of a disaggregated prefill "
                    "pool (node-deduplicating kernels, priced only there); empty: one choice for every server")


class Overlap(_Strict):
    tp_allreduce: float = Field(ge=0, le=0.95, description="fraction of TP all-reduce time hidden behind compute")
    ep_alltoall: float = Field(ge=0, le=0.95,
                               description="fraction of EP dispatch/combine hidden (two-batch / dual micro-batch)")
    launch_flag: str = Field(
        "", description="the launch flag that turns on the EP overlap priced above when the engine leaves it off by "
                        "default: importing a command sets options.overlap_comm from it, export names it; empty: "
                        "no such switch")


class Scheduler(_Strict):
    ahead_steps: int = Field(
        ge=0, le=1, description="steps the scheduler runs ahead of the GPU: 1 when it prepares step n+1 while step n "
                                "runs (overlap / async scheduling), so a request arriving under load misses the step "
                                "already prepared and waits one step more before its prefill; 0: it joins the next")
    on_flag: str = Field("", description="launch flag that turns it on where the default is off; empty: none")
    off_flag: str = Field("", description="launch flag that turns it off; empty: none")
    off_config_key: str = Field("", description="boolean option of the engine's config file that turns it off when "
                                                "true (TensorRT-LLM's --config YAML); empty: none")


class EngineProfile(_Strict):
    id: str
    name: str
    description: str
    cuda_graphs: dict[Literal["prefill", "decode"], bool]
    step_overhead_ms: PerPhase = Field(description="fixed host-side cost of one forward pass")
    kernel_overhead_us: PerPhase = Field(description="launch gap and tail per kernel")
    layer_overhead_us: PerPhase = Field(description="small un-modelled kernels per decoder layer")
    eager_host_us_per_kernel: float = Field(
        ge=0, description="host time (Python, framework dispatch, launch) per modelled kernel of a pass that runs "
                          "eagerly (a phase without CUDA graphs): such a node takes at least this long per kernel "
                          "even when the GPU would finish sooner; 0 for compiled or C++ runtimes")
    prefill_graph_max_tokens: int = Field(
        ge=0, description="the largest pass (tokens) the engine replays from a captured CUDA graph although its "
                          "prefill is otherwise eager: a prefill pass of at most this many tokens pays no eager "
                          "host time; 0: every prefill pass runs eagerly")
    graph_tokens_per_seq: float = Field(
        0, ge=0, description="where the default capture size follows the batch limit (vLLM): it is "
                             "min(this x max running sequences, prefill_graph_max_tokens); 0: it does not")
    fused_moe_block_fp8_memory_efficiency: float = Field(
        ge=0, le=1, description="share of HBM bandwidth at which the engine's fused-MoE kernel streams block-scaled "
                                "fp8 experts when every GPU holds the tokens (expert-TP, no all-to-all); 0: no "
                                "published figure, the catalog's memory efficiency")
    allreduce: AllReduceImpl
    alltoall: AllToAllImpl
    overlap: Overlap
    scheduler: Scheduler
    kv_admission: Literal["reserve_full", "on_demand"] = Field(
        description="how the scheduler admits a request into the KV cache: reserve_full holds room for the prompt "
                    "and every output token before it starts (never evicts); on_demand takes pages as tokens "
                    "arrive and preempts when the cache runs out, so on average a running request holds its "
                    "prompt and half its output")
    kernels: list[Kernel]
    online_quant_load: Literal["layer_by_layer", "whole_model"] = Field(
        "layer_by_layer", description="how the engine loads a 16-bit checkpoint it quantizes to fp8 while loading "
                                      "(--quantization fp8): whole_model allocates every linear weight in 16 bits "
                                      "and quantizes after the last shard, so the load peaks at the 16-bit weights; "
                                      "layer_by_layer quantizes each layer as it arrives")
    prefix_caching_default: bool = Field(
        False, description="the engine keeps and reuses prompt prefixes unless a launch flag turns it off: a command "
                           "without the flag imports as prefix_caching enabled")
    window_kv: list[Literal["sliding", "chunked"]] = Field(
        default_factory=list, description="kinds of local-attention layer whose KV the engine's cache keeps to the "
                                          "window by default; on the others it allocates full-length KV")
    window_kv_env: dict[Literal["sliding", "chunked"], str] = Field(
        default_factory=dict, description="environment assignment that makes the engine keep that kind to its "
                                          "window (export writes it before the command)")
    long_context_env: str | None = Field(
        None, description="environment assignment without which the engine refuses a context cap beyond the model's "
                          "max_position_embeddings (none: no such override known)")
    max_num_seqs_default: tuple[int, int] | None = Field(
        None, description="requests the engine runs at once when the command sets no cap: on GPUs of 70 GiB or more "
                          "other than the A100, and on the others (vLLM sizes it by GPU memory)")
    graph_max_batch_default: int | None = Field(
        None, description="the largest decode batch the engine captures in a CUDA graph by default")
    accelerators: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="kernel speeds measured for this engine on one accelerator (efficiency keys by accelerator id): "
                    "they win over the catalog's figures for that accelerator, which hold for every engine")
    sources: dict[str, str] = Field(description="public source (or 'assumption: why') of every figure above")

    def efficiency_keys(self) -> dict[str, float]:
        """The efficiency keys this profile sets (see ``knowledge/hardware/efficiency.json`` for their meaning)."""
        k = set(self.kernels)
        return {
            "step_overhead_ms": self.step_overhead_ms.prefill,
            "decode_step_overhead_ms": self.step_overhead_ms.decode,
            "kernel_overhead_us": self.kernel_overhead_us.prefill,
            "decode_kernel_overhead_us": self.kernel_overhead_us.decode,
            "layer_overhead_us": self.layer_overhead_us.prefill,
            "prefill_host_us_per_kernel": 0.0 if self.cuda_graphs["prefill"] else self.eager_host_us_per_kernel,
            "prefill_graph_max_tokens": float(self.prefill_graph_max_tokens),
            "fused_moe_block_fp8_memory_efficiency": self.fused_moe_block_fp8_memory_efficiency,
            "decode_layer_overhead_us": self.layer_overhead_us.decode,
            "allreduce_min_us": self.allreduce.min_us,
            "alltoall_min_us": self.alltoall.min_us,
            "dispatch_bytes": self.alltoall.dispatch_bytes,
            "alltoall_node_dedup": 1.0 if self.alltoall.node_dedup_prefill else 0.0,
            "tp_overlap_fraction": self.overlap.tp_allreduce,
            "ep_overlap_fraction": self.overlap.ep_alltoall,
            "experts_low_precision_math": 1.0 if k & {"fp8_grouped_gemm", "deepgemm"} else 0.0,
            "mla_decode_flash": 1.0 if "flashmla" in k else 0.0,
            "kv_reserved_output_fraction": 1.0 if self.kv_admission == "reserve_full" else 0.5,
            "scheduler_ahead_steps": float(self.scheduler.ahead_steps),
        }

    def default_graph_max_tokens(self, max_seqs: int) -> int:
        """The largest pass graphed by default when the server runs at most ``max_seqs`` sequences."""
        if self.graph_tokens_per_seq <= 0:
            return self.prefill_graph_max_tokens
        return min(int(self.graph_tokens_per_seq * max_seqs), self.prefill_graph_max_tokens)

    def accelerator_keys(self, accel_id: str) -> dict[str, float]:
        """The efficiency keys measured for this engine's kernels on ``accel_id`` (none for most pairs)."""
        return {k: float(v) for k, v in (self.accelerators.get(accel_id) or {}).items()}


ENGINE_IDS: tuple[str, ...] = ("generic", "vllm", "sglang", "trtllm", "trtllm-cpp", "gpt-fast")
EngineId = Literal["generic", "vllm", "sglang", "trtllm", "trtllm-cpp", "gpt-fast"]
ENGINE_KEYS = frozenset({
    "step_overhead_ms", "decode_step_overhead_ms", "kernel_overhead_us", "decode_kernel_overhead_us",
    "layer_overhead_us", "decode_layer_overhead_us", "prefill_host_us_per_kernel", "prefill_graph_max_tokens",
    "fused_moe_block_fp8_memory_efficiency", "allreduce_min_us",
    "alltoall_min_us", "dispatch_bytes", "alltoall_node_dedup", "tp_overlap_fraction", "ep_overlap_fraction",
    "experts_low_precision_math", "mla_decode_flash", "kv_reserved_output_fraction", "scheduler_ahead_steps"})


@cache
def engine_profile(engine: str = "generic") -> EngineProfile:
    """The profile of ``engine`` (one of ``ENGINE_IDS``), read once from ``knowledge/engines/<id>.json``."""
    key = str(engine).strip().lower()
    if key not in ENGINE_IDS:
        raise PdagInputError("engine", f"unknown engine {engine!r}", ", ".join(ENGINE_IDS))
    profile = EngineProfile.model_validate(load_json(f"engines/{key}.json"))
    if profile.id != key:
        raise PdagInputError("engine", f"knowledge/engines/{key}.json declares id {profile.id!r}", key)
    missing = [f"accelerators.{a}" for a in profile.accelerators if f"accelerators.{a}" not in profile.sources]
    if missing:
        raise PdagInputError("engine", f"knowledge/engines/{key}.json gives no source for {', '.join(missing)}",
                             "a 'sources' entry per accelerator")
    return profile
