"""The plan an agent drafts (the contract's compact strategy) and its resolved, per-phase form."""

from __future__ import annotations

import difflib
import re
from functools import cache, cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import knowledge
from tools.core.absent import NullMeansAbsent
from tools.core.engine_profile import EngineId
from tools.core.errors import PdagInputError, closest, shown
from tools.core.formats import WeightFormat
from tools.core.hardware import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    Accelerator,
    Cluster,
    Network,
    accelerator_id,
    resolve_accelerator,
)
from tools.core.inputs import check_json_value
from tools.core.models import ModelSpec, for_checkpoint, resolve_model

MAX_DEGREE = 65_536
MAX_SEQ_LEN = 2_097_152
MAX_BATCH = 1_048_576  # a wide-EP replica: e.g. 48 attention-DP ranks x 1408 sequences (LMSYS, GB200)
DEFAULT_GPUS_PER_NODE = 8
REPO_PATTERN = r"^([A-Za-z0-9][\w.\-]*(/[\w.\-]+)?|(/[\w.\-]+)+)$"  # a Hugging Face repo id or an absolute path

Phase = Literal["prefill", "decode"]
PHASES: tuple[Phase, ...] = ("prefill", "decode")
Dtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
DEGREES = ("dp", "pp", "tp", "ep", "sp", "attn_dp", "dcp")


class _Strict(NullMeansAbsent):
    # strict: "2", 2.0 and true are not the integer 2; a wrong type is an input error naming the field
    model_config = ConfigDict(extra="forbid", strict=True)


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
    dcp: int = Field(
        1, ge=1, le=MAX_DEGREE,
        description="decode context parallel (vLLM -dcp), decode only: KV striped by token over dcp ranks of "
        "the TP group, no extra GPUs",
    )


class PhaseDegrees(_Strict):
    """Per-phase overrides of `parallel`; unset fields inherit the plan-wide degree."""

    dp: int | None = Field(None, ge=1, le=MAX_DEGREE, description=Degrees.model_fields["dp"].description)
    pp: int | None = Field(None, ge=1, le=MAX_DEGREE, description=Degrees.model_fields["pp"].description)
    tp: int | None = Field(None, ge=1, le=MAX_DEGREE, description=Degrees.model_fields["tp"].description)
    ep: int | None = Field(None, ge=1, le=MAX_DEGREE, description=Degrees.model_fields["ep"].description)
    sp: int | None = Field(None, ge=1, le=MAX_DEGREE, description=Degrees.model_fields["sp"].description)
    attn_dp: int | None = Field(None, ge=1, le=MAX_DEGREE, description=Degrees.model_fields["attn_dp"].description)


class Phases(_Strict):
    prefill: PhaseDegrees | None = Field(None, description="degrees of the prefill phase that differ from parallel")
    decode: PhaseDegrees | None = Field(None, description="degrees of the decode phase that differ from parallel")


class Hardware(_Strict):
    gpu: str | dict[str, Any] = Field(description="accelerator preset id (e.g. h100-sxm) or an inline object")
    num_gpus: int = Field(ge=1, le=MAX_GPUS, description="GPUs the plan may use")
    gpus_per_node: int = Field(DEFAULT_GPUS_PER_NODE, ge=1, le=MAX_GPUS_PER_NODE,
                               description="GPUs per node sharing the fast interconnect")
    network: Network | None = Field(None, description="scale-out fabric (default: rails, non-blocking)")

    @field_validator("gpu")
    @classmethod
    def _preset_id(cls, gpu: str | dict[str, Any]) -> str | dict[str, Any]:
        """A name that fits one preset (``H100 SXM``) is kept as that preset's id, so answers echo the id; any other
        name is left for ``Plan.accelerator`` / ``parse_plan`` to refuse under the field the caller wrote."""
        if not isinstance(gpu, str):
            return gpu
        try:
            return accelerator_id(gpu)
        except PdagInputError:
            return gpu


# Benchmark datasets' length histograms and harness mean lengths (knowledge/serving/length_datasets.json).
LENGTH_DATASETS: dict[str, Any] = knowledge.load_json("serving/length_datasets.json")["datasets"]


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
    length_dataset: Literal["sharegpt"] | None = Field(
        None, description="lengths from this dataset's histogram, at means input_len/output_len (default its own)")

    @model_validator(mode="before")
    @classmethod
    def _dataset_means(cls, data: Any) -> Any:
        """A workload that names a dataset and no lengths takes the dataset's mean lengths as its own."""
        if isinstance(data, dict) and data.get("length_dataset") in LENGTH_DATASETS:
            ds = LENGTH_DATASETS[data["length_dataset"]]
            data = {"input_len": ds["mean_input_tokens"], "output_len": ds["mean_output_tokens"], **data}
        return data

    @model_validator(mode="after")
    def _ranges_ordered(self) -> Workload:
        for name in ("input_len_range", "output_len_range"):
            r = getattr(self, name)
            if r is not None and not 1 <= r[0] <= r[1] <= MAX_SEQ_LEN:
                raise ValueError(f"{name} must be [lo, hi] with 1 <= lo <= hi <= {MAX_SEQ_LEN}")
            if r is not None and self.length_dataset:
                raise ValueError(f"{name} and length_dataset both state the lengths: give one of them")
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
    kv_cache_tokens: int | None = Field(
        None, ge=1, le=2**40, description="KV cache tokens per replica (default: the memory model's)")
    scheduler_ahead: bool | None = Field(
        None, description="scheduler runs a step ahead (vLLM async, SGLang/TRT-LLM overlap "
        "scheduling): a new request waits a step more")
    max_model_len: int | None = Field(
        None, ge=1, le=MAX_SEQ_LEN, description="the engine's context cap as a launch command set it (vLLM "
        "--max-model-len, SGLang --context-length, TRT-LLM --max_seq_len); export writes it back unchanged")
    max_num_seqs: int | None = Field(
        None, ge=1, le=MAX_BATCH, description="the engine's running-sequence cap as a launch command set it "
        "(vLLM --max-num-seqs, per DP engine; SGLang --max-running-requests; TRT-LLM --max_batch_size)")
    extra_args: list[str] | None = Field(
        None, max_length=400, description="arguments of an imported command pdag does not model "
        "(e.g. --trust-remote-code), carried to an export for the same engine unless a flag pdag writes replaces them")


class HFModel(_Strict):
    hf_config: dict[str, Any]


SpecMethod = Literal["mtp", "eagle", "eagle3", "draft_model", "ngram"]
SPEC_METHODS: tuple[str, ...] = ("mtp", "eagle", "eagle3", "draft_model", "ngram")
MAX_DRAFT_TOKENS = 64


class Speculative(_Strict):
    """Speculative decoding: a cheap drafter proposes ``num_draft_tokens`` tokens, the target verifies them (and
    adds one of its own) in one step.  Acceptance defaults per method to published measurements
    (knowledge/serving/speculative.json)."""

    method: SpecMethod = Field(description="drafter: mtp (the checkpoint's own multi-token-prediction layers), "
                               "eagle / eagle3 (a one-layer head on the target's hidden states), draft_model (a "
                               "separate smaller model), ngram (lookup in the prompt and output, no network)")
    num_draft_tokens: int = Field(1, ge=1, le=MAX_DRAFT_TOKENS, description="draft tokens proposed per step (k): "
                                  "vLLM num_speculative_tokens, SGLang --speculative-num-draft-tokens minus one")
    topk: int = Field(1, ge=1, le=MAX_DRAFT_TOKENS, description="branches per draft step (a draft tree when > 1; "
                      "SGLang --speculative-eagle-topk)")
    num_steps: int | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS, description="draft forward passes per step "
                                  "(SGLang --speculative-num-steps); default: num_draft_tokens (a chain)")
    acceptance_rate: float | None = Field(None, gt=0, lt=1, description="probability each draft token is accepted "
                                          "given the one before was; default: the method's published figure")
    mean_accepted_tokens: float | None = Field(None, ge=1, le=MAX_DRAFT_TOKENS + 1, description="tokens emitted "
                                               "per step, the bonus token included (vLLM's acceptance length, "
                                               "SGLang's accept length); overrides acceptance_rate")
    draft_checkpoint: str | None = Field(None, max_length=200, pattern=REPO_PATTERN,
                                         description="Hugging Face repo (or absolute path) of the EAGLE head or "
                                         "draft model the engine loads")
    draft_model: str | HFModel | None = Field(None, description="draft_model only: the draft's preset id or "
                                              "{'hf_config': {...}}, priced with its own weights and KV")
    draft_tp: int | None = Field(None, ge=1, le=MAX_DEGREE, description="draft_model only: the draft's tensor "
                                 "parallelism; default: the target's tp")

    @model_validator(mode="after")
    def _consistent(self) -> Speculative:
        if self.acceptance_rate is not None and self.mean_accepted_tokens is not None:
            raise ValueError("give acceptance_rate or mean_accepted_tokens, not both")
        depth = min(self.num_draft_tokens, self.num_steps or self.num_draft_tokens)  # a tree accepts one path
        if self.mean_accepted_tokens is not None and self.mean_accepted_tokens > depth + 1:
            what = "num_draft_tokens" if depth == self.num_draft_tokens else "the tree's depth num_steps"
            raise ValueError(f"mean_accepted_tokens {self.mean_accepted_tokens:g} exceeds {what} + 1 = {depth + 1}")
        if self.method != "draft_model" and (self.draft_model is not None or self.draft_tp is not None):
            raise ValueError("draft_model and draft_tp belong to method draft_model")
        return self


class PrefixCaching(_Strict):
    """Reuse of the KV cache of prompt prefixes already seen (vLLM automatic prefix caching, SGLang's radix cache,
    TensorRT-LLM KV block reuse)."""

    enabled: bool = Field(True, description="the engine keeps and reuses cached prefixes")
    shared_prefix_len: int | None = Field(None, ge=0, le=MAX_SEQ_LEN, description="prompt tokens every request "
                                          "shares (system prompt, few-shot examples): computed once, held once")
    hit_rate: float | None = Field(None, ge=0, le=1, description="share of prompt tokens found in the cache "
                                   "(multi-turn reuse); default: shared_prefix_len / input_len, else 0")

    @model_validator(mode="after")
    def _one_measure(self) -> PrefixCaching:
        if self.shared_prefix_len is not None and self.hit_rate is not None:
            raise ValueError("give shared_prefix_len or hit_rate, not both")
        return self


class Plan(_Strict):
    """The compact strategy of the contract: model, hardware, degrees, optional per-phase overrides."""

    model: str | HFModel = Field(description="model preset id, or {'hf_config': {...}}")
    checkpoint: str | None = Field(
        None, max_length=200, pattern=REPO_PATTERN,
        description="Hugging Face repo the engine serves (e.g. an Instruct or quantised variant of the preset), or "
        "an absolute local path to a converted checkpoint; default: the preset's base repo",
    )
    hardware: Hardware
    parallel: Degrees = Field(default_factory=Degrees)
    phases: Phases = Field(default_factory=Phases)
    workload: Workload = Field(default_factory=Workload)
    dtype: Dtype = Field("bf16", description="compute and activation dtype (bf16, fp16; fp8/int8/int4 also set the "
                                            "weight storage when weights is not stated)")
    kv_dtype: Dtype | None = Field(
        None, description="KV cache dtype; default: the activations' 16-bit type (bf16, or fp16 for an fp16 plan), "
                          "as vLLM, SGLang and TensorRT-LLM keep it unless told to quantize it; fp8 weights alone do "
                          "not make an fp8 cache")
    objective: Literal["latency", "throughput"] = Field(
        "latency", description="what search ranks and repairs keep: time per request, or tokens per second")
    options: Options = Field(default_factory=Options)
    weights: WeightFormat | None = Field(
        None, description="checkpoint weight storage (knowledge/hardware/quantization.json); default: dtype")
    engine: EngineId = Field(
        "generic", description="serving engine the estimate assumes (knowledge/engines/<id>.json): per-pass and "
                               "per-kernel overheads, CUDA graphs, all-reduce and all-to-all implementation, overlap")
    engine_options: EngineOptions = Field(default_factory=EngineOptions)
    speculative: Speculative | None = Field(None, description="speculative decoding (none: one token per step)")
    prefix_caching: PrefixCaching | None = Field(
        None, description="prefix caching and the workload's reuse (none: no cache hits priced, the engine's "
                          "default setting exported)")
    decode_engine_options: EngineOptions | None = Field(
        None, description="disaggregated: the decode pool's engine options when they differ from engine_options "
                          "(the prefill pool's)")

    @model_validator(mode="after")
    def _split_entries_positive(self) -> Plan:
        if self.options.layer_split is not None and any(n < 0 for n in self.options.layer_split):
            raise ValueError("layer_split entries must be >= 0")
        wl = self.workload
        if wl.concurrency is not None and wl.request_rate is None and "batch_size" not in wl.model_fields_set:
            # clients in flight in all, shared by the decode replicas: the static figures price the same load
            share = -(-wl.concurrency // max(1, self.degrees("decode").dp))
            derived = wl.model_copy(update={"batch_size": share})
            derived.__pydantic_fields_set__.discard("batch_size")  # the load's share (batch_from_load)
            object.__setattr__(self, "workload", derived)
        pc = self.prefix_caching
        if pc is not None and (pc.shared_prefix_len or 0) > self.workload.input_len:
            raise ValueError(f"prefix_caching.shared_prefix_len {pc.shared_prefix_len} exceeds workload.input_len "
                             f"{self.workload.input_len}")
        return self

    @property
    def batch_from_load(self) -> bool:
        """The batch is the clients' share (workload.concurrency), not a stated batch_size: the engine runs what its
        KV cache holds and queues the rest, so a batch that does not fit at full length is a queue, not a failure."""
        wl = self.workload
        return wl.concurrency is not None and wl.request_rate is None and "batch_size" not in wl.model_fields_set

    @property
    def prefix_hit_fraction(self) -> float:
        """Share of each prompt's tokens served from the prefix cache (0 without prefix caching or reuse)."""
        pc = self.prefix_caching
        if pc is None or not pc.enabled:
            return 0.0
        if pc.hit_rate is not None:
            return pc.hit_rate
        return (pc.shared_prefix_len or 0) / self.workload.input_len

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

    @property
    def served_repo(self) -> str | None:
        """The repo the engine serves, which says how its weights are stored: ``checkpoint``, else the model name
        when it is a repo id rather than the preset's own id (``...-Instruct-FP8`` names an fp8 checkpoint of its
        preset, as import_deployment reads a command's model), else the preset's base repo.  Every tool prices and
        launches this one repo."""
        if self.checkpoint:
            return self.checkpoint
        if isinstance(self.model, str) and self.model.strip().lower() != self.spec.id:
            return self.model.strip()
        return self.spec.hf_repo

    @cached_property
    def spec(self) -> ModelSpec:
        spec = resolve_model(self.model if isinstance(self.model, str) else self.model.model_dump())
        return for_checkpoint(spec, self.checkpoint or (self.model if isinstance(self.model, str) else None))

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


def _allowed_for(error: dict[str, Any], root: str) -> str | None:
    ctx = error.get("ctx") or {}
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        loc = tuple(str(x) for x in error["loc"])
        section = _SECTIONS.get(loc[:-1]) if root == "plan" else None
        if section is None:
            return "only the documented fields (see the plan JSON Schema)"
        near = closest(loc[-1], section.model_fields)
        return (f"closest: {', '.join(near)}; " if near else "") + "fields here: " + ", ".join(section.model_fields)
    if kind == "literal_error" and "expected" in ctx:
        return str(ctx["expected"])
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "max_length": "at most"}
    bounds = [f"{signs[k]} {v}" for k, v in ctx.items() if k in signs]
    return ", ".join(bounds) or None


@cache
def _value_spellings() -> dict[str, str]:
    """Other spellings of the plan's values (knowledge/plan_vocabulary.json 'values') -> the plan's own."""
    table = knowledge.load_json("plan_vocabulary.json").get("values", {})
    return {_key(alias): canon for canon, aliases in table.items() for alias in aliases}


def _problem(error: dict[str, Any]) -> str:
    """pydantic's message, except for a value outside a fixed set: the value itself, and the plan's spelling of it
    when it is another name for one (knowledge/plan_vocabulary.json 'values': 'bfloat16' is 'bf16')."""
    if error.get("type") != "literal_error" or not isinstance(error.get("input"), str):
        return str(error["msg"])
    value = error["input"]
    spelt = _value_spellings().get(_key(value))
    if spelt is not None and repr(spelt) in str((error.get("ctx") or {}).get("expected", "")):
        return f"{shown(value)} is written {spelt!r} in a plan"
    return f"{shown(value)} is not one of the values this field takes"


def validation_error_to_input_error(exc: ValidationError, root: str) -> PdagInputError:
    """Turn pydantic's report into one error that names every bad field, what was wrong and what is allowed."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    problem = _problem(first)
    others = [f"{_field_path(e['loc'], root)}: {_problem(e)}" + (f" (allowed: {e['ctx']['expected']})" if e.get(
        "type") == "literal_error" and "expected" in (e.get("ctx") or {}) else "") for e in errors[1:5]]
    if len(errors) > 5:
        others.append(f"... and {len(errors) - 5} more")
    if others:
        problem += "; also " + "; ".join(others)
    return PdagInputError(_field_path(first["loc"], root), problem, _allowed_for(first, root))


_SECTIONS: dict[tuple[str, ...], type[BaseModel]] = {
    (): Plan, ("parallel",): Degrees, ("phases",): Phases, ("phases", "prefill"): PhaseDegrees,
    ("phases", "decode"): PhaseDegrees, ("hardware",): Hardware, ("workload",): Workload, ("options",): Options,
    ("engine_options",): EngineOptions}
_VOCABULARY_SECTION = {(): "plan", ("phases", "prefill"): "parallel", ("phases", "decode"): "parallel"}


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@cache
def _aliases(section: str) -> dict[str, str]:
    table = knowledge.load_json("plan_vocabulary.json").get(section, {})
    return {_key(alias): field for field, aliases in table.items() for alias in aliases}


@cache
def _foreign(section: str) -> frozenset[str]:
    """Names of strategies outside the plan (knowledge/plan_vocabulary.json 'foreign'): never read as a field."""
    return frozenset(_key(n) for n in knowledge.load_json("plan_vocabulary.json").get("foreign", {}).get(section, []))


def _elsewhere(where: tuple[str, ...], name: Any) -> str | None:
    """The plan field a name in the wrong section stands for (knowledge/plan_vocabulary.json 'elsewhere')."""
    table = knowledge.load_json("plan_vocabulary.json").get("elsewhere", {}).get(where[0] if where else "plan", {})
    return table.get(name) if isinstance(name, str) else None


def _meant(where: tuple[str, ...], name: str) -> str | None:
    """The field a misspelled or foreign field name means: an alias from knowledge/plan_vocabulary.json, else a
    close spelling of one of the section's fields; None when nothing is close (e.g. 'cp', another strategy)."""
    model = _SECTIONS.get(where)
    section = _VOCABULARY_SECTION.get(where, where[-1] if where else "plan")
    if model is None or not isinstance(name, str) or _key(name) in _foreign(section):
        return None
    fields = list(model.model_fields)
    names = {**{_key(f): f for f in fields}, **{a: f for a, f in _aliases(section).items() if f in fields}}
    near = difflib.get_close_matches(_key(name), list(names), n=1, cutoff=0.75)
    return names[near[0]] if near else None


_JSON_KINDS = {str: "text", bool: "a boolean", int: "an integer", float: "a number", list: "a list", dict: "an object",
               type(None): "null"}


def _what(kind: str) -> str:
    return {"int_type": "an integer", "bool_type": "true or false", "string_type": "text", "float_type": "a number",
            "list_type": "a list", "dict_type": "an object", "model_type": "an object", "model_attributes_type":
            "an object"}.get(kind, kind.removesuffix("_type").replace("_", " "))


def screen_plan(raw: dict[str, Any], root: str = "plan") -> None:
    """Refuse, in one PdagInputError that lists every one of them, the mistakes of a plan that are mistakes of
    input rather than of strategy: a value of the wrong type, a field name that spells another field, a model or
    GPU preset that does not exist or an inline accelerator object that is incomplete or out of bounds (all
    reported, so a fix of one does not reveal the other).  Every tool runs
    this first, so each classifies these the same way; bounds and unknown strategies are left to the rules.
    ``root`` prefixes the field paths ("" for a tool whose arguments are the plan's sections, as search's are)."""
    problems: dict[str, tuple[str, str | None]] = {}
    try:
        Plan.model_validate(raw)
    except ValidationError as exc:
        wrong: dict[str, set[str]] = {}
        for e in exc.errors(include_url=False):
            path, kind = _field_path(e["loc"], "plan"), e["type"]
            if kind.endswith("_type") and "input" in e:
                wrong.setdefault(path, set()).add(_what(kind))
                problems[path] = (f"expected {' or '.join(sorted(wrong[path]))}, got "
                                  f"{_JSON_KINDS.get(type(e['input']), 'a value')} {shown(e['input'])}", None)
            elif kind == "extra_forbidden":
                where, name = tuple(str(x) for x in e["loc"][:-1]), e["loc"][-1]
                moved = _elsewhere(where, name)
                meant = None if moved else _meant(where, name)
                if moved:
                    problems[path] = (f"'{name}' is not set per phase: it belongs in '{moved}'", f"'{moved}'")
                elif meant:
                    problems[path] = (f"unknown field '{name}' (did you mean '{meant}'?)",
                                      f"'{'.'.join((*where, meant))}' (the plan JSON Schema lists the fields)")
    model, hardware = raw.get("model"), raw.get("hardware")
    if isinstance(model, str):
        try:
            resolve_model(model)
        except PdagInputError as exc:
            problems["plan.model"] = (exc.problem, exc.allowed)
    if isinstance(hardware, dict) and isinstance(hardware.get("gpu"), str):
        try:
            resolve_accelerator(hardware["gpu"])
        except PdagInputError as exc:
            problems["plan.hardware.gpu"] = (exc.problem, exc.allowed)
    elif isinstance(hardware, dict) and isinstance(hardware.get("gpu"), dict):  # an inline accelerator object
        try:
            resolve_accelerator(hardware["gpu"], field="hardware.gpu")
        except PdagInputError as exc:
            problems[f"plan.{exc.field}"] = (f"{exc.problem} (an inline accelerator states its memory, memory "
                                             "bandwidth, dense compute per dtype and interconnect bandwidths)",
                                             exc.allowed)
    if problems:
        if root != "plan":
            problems = {".".join(x for x in (root, f.removeprefix("plan").lstrip(".")) if x): p
                        for f, p in problems.items()}
        (field, (problem, allowed)), *rest = problems.items()
        also = [f"{f}: {p}" + (f" ({a})" if a else "") for f, (p, a) in rest]
        raise PdagInputError(field, problem + ("; also " + "; ".join(also) if also else ""), allowed)


def parse_plan(data: Plan | dict[str, Any]) -> Plan:
    """Validate a plan and resolve its model and GPU, raising PdagInputError with field paths."""
    if isinstance(data, Plan):
        plan = data
    else:
        if not isinstance(data, dict):
            raise PdagInputError("plan", f"expected a JSON object, got {type(data).__name__}", "a plan object")
        check_json_value(data, "plan")
        screen_plan(data)
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
