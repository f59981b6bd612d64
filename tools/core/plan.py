"""The plan an agent drafts (the contract's compact strategy) and its resolved, per-phase form."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tools.core.engine_profile import EngineId
from tools.core.errors import PdagInputError
from tools.core.formats import WeightFormat
from tools.core.hardware import MAX_GPUS, MAX_GPUS_PER_NODE, Accelerator, Cluster, Network, resolve_accelerator
from tools.core.inputs import check_json_value
from tools.core.models import ModelSpec, resolve_model

MAX_DEGREE = 65_536
MAX_SEQ_LEN = 2_097_152
MAX_BATCH = 1_048_576  # a wide-EP replica: e.g. 48 attention-DP ranks x 1408 sequences (LMSYS, GB200)
DEFAULT_GPUS_PER_NODE = 8

Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, ...] = ("prefill", "decode")
Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
DEGREES = ("dp", "pp", "tp", "ep", "sp", "attn_dp")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Degrees(_Strict):
    """Parallel degrees; every field defaults to 1 (no parallelism along that dimension)."""

    dp: int = Field(1, ge=1, le=MAX_DEGREE, description="request-level replicas (DP fan-out at the root)")
    pp: int = Field(1, ge=1, le=MAX_DEGREE, description="pipeline stages, each a contiguous block of layers")
    tp: int = Field(1, ge=1, le=MAX_DEGREE, description="tensor shards inside attention and FFN operators")
    ep: int = Field(1, ge=1, le=MAX_DEGREE, description="Expert nodes (GPUs) each MoE layer is spread over")
    sp: int = Field(1, ge=1, le=MAX_DEGREE, description="sequence shards inside attention")
    attn_dp: int = Field(
        1, ge=1, le=MAX_DEGREE,
        description="attention-DP groups per stage (opt-in via options.allow_attention_dp; SGLang's DP attention)",
    )


class PhaseDegrees(_Strict):
    """Per-phase overrides of `parallel`; unset fields inherit the plan-wide degree."""

    dp: int | None = Field(None, ge=1, le=MAX_DEGREE)
    pp: int | None = Field(None, ge=1, le=MAX_DEGREE)
    tp: int | None = Field(None, ge=1, le=MAX_DEGREE)
    ep: int | None = Field(None, ge=1, le=MAX_DEGREE)
    sp: int | None = Field(None, ge=1, le=MAX_DEGREE)
    attn_dp: int | None = Field(None, ge=1, le=MAX_DEGREE)


class Phases(_Strict):
    prefill: PhaseDegrees | None = None
    decode: PhaseDegrees | None = None


class Hardware(_Strict):
    gpu: str | dict[str, Any] = Field(description="accelerator preset id (e.g. h100-sxm) or an inline object")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs the plan may use")
    gpus_per_node: int = Field(DEFAULT_GPUS_PER_NODE, ge=1, le=MAX_GPUS_PER_NODE,
                               description="GPUs per node sharing the fast interconnect")
    network: Network | None = Field(None, description="scale-out fabric (default: rails, non-blocking)")


class Workload(_Strict):
    input_len: int = Field(2048, ge=1, le=MAX_SEQ_LEN, description="prompt tokens per sequence")
    output_len: int = Field(256, ge=1, le=MAX_SEQ_LEN, description="generated tokens per sequence")
    batch_size: int = Field(1, ge=1, le=MAX_BATCH, description="sequences processed together per DP replica")
    # The load a served request is measured at (tools/estimate/simulate.py), as a benchmark client states it.
    concurrency: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="closed-loop clients (with request_rate: a cap in flight); default: "
        "batch_size per DP replica")
    request_rate: float | None = Field(
        None, gt=0, le=1e6, description="Poisson arrivals, requests/s (open loop)")
    num_requests: int | None = Field(
        None, ge=1, le=100_000, description="requests sent (alone: a burst at t=0); default 10 per client")
    input_len_range: list[int] | None = Field(
        None, min_length=2, max_length=2, description="prompt lengths drawn uniformly from [lo, hi]")
    output_len_range: list[int] | None = Field(
        None, min_length=2, max_length=2, description="output lengths drawn uniformly from [lo, hi]")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="seed of drawn lengths and arrivals")

    @model_validator(mode="after")
    def _ranges_ordered(self) -> Workload:
        for name in ("input_len_range", "output_len_range"):
            r = getattr(self, name)
            if r is not None and not 1 <= r[0] <= r[1] <= MAX_SEQ_LEN:
                raise ValueError(f"{name} must be [lo, hi] with 1 <= lo <= hi <= {MAX_SEQ_LEN}")
        return self


class Options(_Strict):
    allow_expert_tp: bool = Field(False, description="opt in to TP inside experts (seed 000 forbids it by default)")
    layer_split: list[int] | None = Field(
        None, max_length=MAX_DEGREE, description="layers per pipeline stage, in order; default: as even as possible"
    )
    expert_imbalance_ok: bool = Field(False, description="state that an uneven expert split is intended")
    kv_replication_ok: bool = Field(
        False, description="ignored: KV-head replication under tp > kv heads is always allowed (stated as the "
        "TP-KV-REPLICATED warning); kept so that older plans still parse"
    )
    allow_attention_dp: bool = Field(
        False, description="opt in to attention-DP: attention replicated per group, experts spread over the stage"
    )
    disaggregated: bool = Field(
        False, description="prefill and decode on separate GPU pools, each with its own degrees (phases.*)"
    )
    overlap_comm: bool = Field(True, description="estimator: overlap TP all-reduce / EP all-to-all with compute")


# The opt-ins a plan-less DAG may state about itself (its metadata), read by the checkers as the plan's would be.
OPT_INS = ("disaggregated", "allow_attention_dp", "allow_expert_tp", "expert_imbalance_ok")


class EngineOptions(_Strict):
    """Serving-engine settings the estimate depends on; unset ones take the engine profile's value."""

    max_batched_tokens: int | None = Field(
        None, ge=1, le=MAX_SEQ_LEN, description="tokens per engine step, prompt chunks and decodes (vLLM "
        "--max-num-batched-tokens, SGLang --chunked-prefill-size, TRT-LLM --max_num_tokens)")
    graph_max_tokens: int | None = Field(
        None, ge=0, le=MAX_SEQ_LEN, description="largest pass replayed as a CUDA graph (vLLM's largest capture size; "
        "0: none); larger prefills run eagerly")
    max_num_seqs: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="requests a replica runs at once (--max-num-seqs)")
    kv_cache_tokens: int | None = Field(
        None, ge=1, le=2**40, description="KV cache tokens per replica (default: the memory model's)")
    scheduler_ahead: bool | None = Field(
        None, description="scheduler runs a step ahead (vLLM async, SGLang/TRT-LLM overlap "
        "scheduling): a new request waits a step more")


class HFModel(_Strict):
    hf_config: dict[str, Any]


class Plan(_Strict):
    """The compact strategy of the contract: model, hardware, degrees, optional per-phase overrides."""

    model: str | HFModel = Field(description="model preset id, or {'hf_config': {...}}")
    checkpoint: str | None = Field(
        None, max_length=200, pattern=r"^([A-Za-z0-9][\w.\-]*(/[\w.\-]+)?|(/[\w.\-]+)+)$",
        description="Hugging Face repo the engine serves (e.g. an Instruct or quantised variant of the preset), or "
        "an absolute local path to a converted checkpoint; default: the preset's base repo",
    )
    hardware: Hardware
    parallel: Degrees = Field(default_factory=Degrees)
    phases: Phases = Field(default_factory=Phases)
    workload: Workload = Field(default_factory=Workload)
    dtype: Dtype = "bf16"
    kv_dtype: Dtype | None = Field(
        None, description="KV cache dtype; default: the activations' 16-bit type (bf16, or fp16 for an fp16 plan), "
                          "as vLLM, SGLang and TensorRT-LLM keep it unless told to quantize it; fp8 weights alone do "
                          "not make an fp8 cache")
    objective: Literal["latency", "throughput"] = "latency"
    options: Options = Field(default_factory=Options)
    weights: WeightFormat | None = Field(
        None, description="checkpoint weight storage (knowledge/hardware/quantization.json); default: dtype")
    engine: EngineId = Field(
        "generic", description="serving engine the estimate assumes (knowledge/engines/<id>.json): per-pass and "
                               "per-kernel overheads, CUDA graphs, all-reduce and all-to-all implementation, overlap")
    engine_options: EngineOptions = Field(default_factory=EngineOptions)

    @model_validator(mode="after")
    def _split_entries_positive(self) -> Plan:
        if self.options.layer_split is not None and any(n < 0 for n in self.options.layer_split):
            raise ValueError("layer_split entries must be >= 0")
        return self

    def degrees(self, phase: Phase) -> Degrees:
        """The degrees in force for one phase (plan-wide degrees with that phase's overrides)."""
        override = getattr(self.phases, phase)
        if override is None:
            return self.parallel
        return self.parallel.model_copy(update=override.model_dump(exclude_none=True))

    @property
    def model_id(self) -> str:
        if isinstance(self.model, str):
            return self.model.lower()
        cfg = self.model.hf_config
        return str(cfg.get("_name_or_path") or cfg.get("model_type") or "custom")

    @cached_property
    def spec(self) -> ModelSpec:
        return resolve_model(self.model if isinstance(self.model, str) else self.model.model_dump())

    @cached_property
    def accelerator(self) -> Accelerator:
        return resolve_accelerator(self.hardware.gpu)

    @cached_property
    def cluster(self) -> Cluster:
        return Cluster(
            accelerator=self.accelerator,
            num_gpus=self.hardware.num_gpus,
            gpus_per_node=self.hardware.gpus_per_node,
            network=self.hardware.network or Network(),
        )

    @property
    def effective_kv_dtype(self) -> Dtype:
        """The KV cache's dtype: as given, else the activations' 16-bit type, as vLLM, SGLang and TensorRT-LLM
        store it unless told otherwise (knowledge/engines.md, 'KV cache dtype'): quantized weights alone do
        not quantize the cache."""
        return self.kv_dtype or ("fp16" if self.dtype == "fp16" else "bf16")


def _field_path(loc: tuple[Any, ...], root: str) -> str:
    parts = [root]
    for item in loc:
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
        elif item in ("str", "HFModel", "dict[str,any]"):
            continue
        else:
            parts.append(str(item))
    return ".".join(parts)


def _allowed_for(error: dict[str, Any]) -> str | None:
    ctx = error.get("ctx") or {}
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "only the documented fields (see the plan JSON Schema)"
    if kind == "literal_error" and "expected" in ctx:
        return str(ctx["expected"])
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "max_length": "at most"}
    bounds = [f"{signs[k]} {v}" for k, v in ctx.items() if k in signs]
    return ", ".join(bounds) or None


def validation_error_to_input_error(exc: ValidationError, root: str) -> PdagInputError:
    """Turn pydantic's report into one error that names every bad field, what was wrong and what is allowed."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    problem = first["msg"]
    others = [f"{_field_path(e['loc'], root)}: {e['msg']}" for e in errors[1:5]]
    if len(errors) > 5:
        others.append(f"... and {len(errors) - 5} more")
    if others:
        problem += "; also " + "; ".join(others)
    return PdagInputError(_field_path(first["loc"], root), problem, _allowed_for(first))


def parse_plan(data: Plan | dict[str, Any]) -> Plan:
    """Validate a plan and resolve its model and GPU, raising PdagInputError with field paths."""
    if isinstance(data, Plan):
        plan = data
    else:
        if not isinstance(data, dict):
            raise PdagInputError("plan", f"expected a JSON object, got {type(data).__name__}", "a plan object")
        check_json_value(data, "plan")
        try:
            plan = Plan.model_validate(data)
        except ValidationError as exc:
            raise validation_error_to_input_error(exc, "plan") from None
    try:
        plan.spec  # noqa: B018 - resolve now so unknown ids fail here, with closest ids
    except PdagInputError as exc:
        raise PdagInputError(f"plan.model{_suffix(exc.field, 'model')}", exc.problem, exc.allowed) from None
    try:
        plan.accelerator  # noqa: B018
    except PdagInputError as exc:
        raise PdagInputError(f"plan.hardware.gpu{_suffix(exc.field, 'gpu')}", exc.problem, exc.allowed) from None
    _check_size(plan)
    return plan


def _check_size(plan: Plan) -> None:
    """A plan may need at most MAX_GPUS GPUs, the largest cluster pdag plans for: beyond that no answer can be
    right, and the per-GPU accounting (memory per GPU of a replica) would grow without bound."""
    total = 0
    for phase in PHASES if plan.options.disaggregated else PHASES[:1]:
        d = [plan.degrees(p) for p in (PHASES if not plan.options.disaggregated else (phase,))]
        width = max(max(x.attn_dp * max(x.tp, x.sp), x.ep) for x in d)
        pp, dp = max(x.pp for x in d), max(x.dp for x in d)
        if pp * width > MAX_GPUS:
            where = f"plan.phases.{phase}" if plan.options.disaggregated else "plan.parallel"
            raise PdagInputError(where, f"one replica would need pp x max(attn_dp x max(tp, sp), ep) = {pp} x "
                                 f"{width} = {pp * width:,} GPUs, above the {MAX_GPUS:,} GPUs pdag plans for",
                                 f"degrees whose replica fits in {MAX_GPUS:,} GPUs")
        total += dp * pp * width
    if total > MAX_GPUS:
        raise PdagInputError("plan.parallel.dp", f"the plan would need {total:,} GPUs, above the {MAX_GPUS:,} GPUs "
                             "pdag plans for", f"fewer replicas (dp) or smaller degrees; at most {MAX_GPUS:,} GPUs")


def _suffix(field: str, head: str) -> str:
    """Keep the sub-path of a nested error (e.g. 'hf_config.num_attention_heads') under the plan field."""
    if field in ("", head):
        return ""
    return "." + field.removeprefix(head + ".")
