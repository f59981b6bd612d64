"""The MCP tools: thin wrappers over the core in `tools/`, registered only when their core function exists.

Adding a tool is one decorated function here: `@pdag_tool(core="name_in_tools", ...)`.  The wrapper's
signature is the input schema (made strict below), its return annotation the output schema.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

import tools
from server import responses as R
from server.schemas import OPEN_OBJECT, compact, inline_schema, without_resource_only
from tools.core.absent import NullMeansAbsent
from tools.core.dag import NodeType
from tools.core.engine_profile import EngineId
from tools.core.errors import PdagInputError
from tools.core.inputs import check_json_value
from tools.core.plan import MAX_DRAFT_TOKENS, EngineOptions, Hardware, HFModel, Plan, SpecMethod, WeightFormat, Workload
from tools.estimate.serving import Arrivals, Sla
from tools.rules.lookup import LEVELS, MAX_QUERY, STRATEGIES

logger = logging.getLogger("pdag.server")

ELAPSED_KEY = "io.github.pdag/elapsed_ms"  # _meta key of a call's wall time (not part of the answer)
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

DetailArg = Annotated[
    Literal["summary", "full"],
    Field(description='"summary" (default): concise. "full": everything, in pages'),
]
CursorArg = Annotated[
    str | None,
    Field(description="next_cursor of the previous full page", max_length=40),
]
RenderArg = Annotated[bool, Field(description="add PNG pictures")]
# Five tools take a plan, and each declares its fields with this one schema (strict clients and Gemini take no
# $ref shared across tools): the Plan model's fields and types, without the allowed values of its string fields
# (dtype, engine, weights...; pdag://schema/plan lists them, and an error names them). build_dag validates the
# argument with the Plan model; the tools after it take a plain object the core checks (errors name the field).
PLAN_SCHEMA = WithJsonSchema(inline_schema(Plan, keep_enums=False))
PlanArg = Annotated[Plan, PLAN_SCHEMA, Field(description="the parallel plan (see pdag://schema/plan)")]
OptPlanArg = Annotated[
    dict[str, Any] | None,
    PLAN_SCHEMA,
    Field(description="the parallel plan, as build_dag takes it (pdag://schema/plan); give plan or dag"),
]
# The DAG argument is an open object checked by the core against pdag://schema/dag: a hand-drafted, malformed DAG
# then comes back as STRUCT-* violations with JSON paths instead of an argument error, and the tool list does not
# repeat the 5 kB DAG schema in three tools.
DAG_SCHEMA = WithJsonSchema({**OPEN_OBJECT, "properties": {"nodes": {"type": "array", "items": OPEN_OBJECT},
                                                           "edges": {"type": "array", "items": OPEN_OBJECT}}})
OptDagArg = Annotated[
    dict[str, Any] | None,
    DAG_SCHEMA,
    Field(description="a node-link DAG {nodes: [...], edges: [...]} as build_dag returns with detail=full; "
                      "schema at pdag://schema/dag (checked by the tool, errors name the JSON path)"),
]


@dataclass(frozen=True)
class ToolDef:
    name: str
    core: str
    fn: Callable[..., Any]
    title: str


REGISTRY: list[ToolDef] = []


def pdag_tool(core: str, title: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare an MCP tool backed by `tools.<core>`; its docstring is the description the LLM reads."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY.append(ToolDef(fn.__name__, core, fn, title))
        return fn

    return deco


def core(name: str) -> Callable[..., Any] | None:
    """The core function `tools.<name>`, or None while it has not landed yet."""
    fn = getattr(tools, name, None)
    return fn if callable(fn) else None


def input_error_text(exc: PdagInputError) -> str:
    text = f"invalid `{exc.field}`: {exc.problem}"
    if exc.allowed:
        text += f". Allowed: {exc.allowed}"
    return text


def _fields_at(model: type[BaseModel] | None, path: list[str]) -> list[str] | None:
    """The field names of the (nested) pydantic model at ``path`` below ``model``; None when unknown."""
    for part in path:
        if model is None or part not in model.model_fields:
            return None
        ann = model.model_fields[part].annotation
        model = next((a for a in (ann, *get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return list(model.model_fields) if model is not None else None


def _allowed(err: dict[str, Any], path: list[str], arg_model: type[BaseModel] | None) -> str | None:
    ctx = err.get("ctx") or {}
    kind = err.get("type", "")
    schema = {"plan": " (pdag://schema/plan)", "dag": " (pdag://schema/dag)"}.get(path[0] if path else "", "")
    if kind == "extra_forbidden":
        fields = _fields_at(arg_model, path[:-1])
        if fields:
            return ("arguments " if len(path) == 1 else "fields ") + ", ".join(fields)
        return "only the fields of the published schema" + (schema or " (pdag://schema/plan, pdag://schema/dag)")
    if kind == "literal_error" and "expected" in ctx:
        return str(ctx["expected"])
    if kind in ("model_type", "dict_type"):
        return "a JSON object" + schema
    if kind == "missing":
        return None
    bounds = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "max_length": "at most", "min_length": "at least"}
    parts = [f"{sign} {ctx[k]}" for k, sign in bounds.items() if k in ctx]
    return ", ".join(parts) or None


_UNION_TAGS = frozenset({"str", "HFModel", "Plan", "Dag", "int", "dict[str,any]"})


def argument_error_text(exc: ValidationError, arg_model: type[BaseModel] | None = None) -> str:
    """One readable line per bad field (first 5): the field path, the problem, what is allowed.

    ``arg_model``: the tool's argument model, when the error is about the call's arguments (it names the
    fields allowed next to an unknown one); None for an error the core raised while reading a document."""
    lines = []
    errors = exc.errors(include_url=False)
    for err in errors[:5]:
        path = [str(p) for p in err["loc"] if str(p) not in _UNION_TAGS and "[" not in str(p)]
        top_level_extra = err["type"] == "extra_forbidden" and len(err["loc"]) == 1 and arg_model is not None
        msg = "unknown argument" if top_level_extra else err["msg"]
        allowed = _allowed(err, path, arg_model)
        lines.append(f"invalid `{'.'.join(path) or 'arguments'}`: {msg}" + (f". Allowed: {allowed}" if allowed else ""))
    if len(errors) > 5:
        lines.append(f"... and {len(errors) - 5} more")
    return "; ".join(lines)


def guarded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn anticipated failures into tool errors the model can act on; never leak a traceback or a path."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            result = fn(*args, **kwargs)
            if isinstance(result, CallToolResult):  # timings stay out of the deterministic body
                result.meta = {**(result.meta or {}), ELAPSED_KEY: round((time.perf_counter() - t0) * 1000, 2)}
            return result
        except ToolError:
            raise
        except PdagInputError as exc:
            raise ToolError(input_error_text(exc)) from None
        except ValidationError as exc:
            raise ToolError(argument_error_text(exc)) from None
        except Exception:
            logger.exception("tool %s failed", name)
            raise ToolError(
                "internal error in pdag while handling this call (logged on the server). The input passed the "
                "schema; try a smaller or different plan, or report the plan that caused it."
            ) from None

    return wrapper


class PdagTool(Tool):
    """A tool whose bad arguments are answered like any other tool error, one readable line per field.

    The check runs inside the SDK's tools/call handler (not in a middleware that answers by itself), so an error
    result goes through the same envelope as a successful one: the fields each protocol version carries."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            check_json_value(arguments, "arguments")
            self.fn_metadata.arg_model.model_validate(self.fn_metadata.pre_parse_json(arguments))
        except PdagInputError as exc:
            raise ToolError(f"Error executing tool {self.name}: {input_error_text(exc)}") from None
        except ValidationError as exc:
            text = argument_error_text(exc, self.fn_metadata.arg_model)
            logger.info("tool %s rejected arguments: %s", self.name, text)
            raise ToolError(f"Error executing tool {self.name}: {text}") from None
        return await super().run(arguments, context, convert_result)


def _strict(model: type[BaseModel]) -> type[BaseModel]:
    """The SDK's argument model ignores unknown top-level keys; forbid them so typos are reported, not dropped.
    A null optional argument means the argument is absent (tools.core.absent)."""
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return type(model.__name__, (model, NullMeansAbsent), {"model_config": config, "__module__": model.__module__})


def make_tool(d: ToolDef) -> PdagTool:
    """The SDK tool with strict argument validation (full models) and compact advertised schemas."""
    tool = PdagTool.from_function(guarded(d.name, d.fn), name=d.name, title=d.title,
                              description=inspect.cleandoc(d.fn.__doc__ or ""), annotations=READ_ONLY,
                              structured_output=True)
    strict = _strict(tool.fn_metadata.arg_model)
    tool.fn_metadata.arg_model = strict
    tool.parameters = without_resource_only(compact(strict.model_json_schema(by_alias=True), keep_descriptions=2))
    if tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = output_schema(tool.fn_metadata.output_schema,
                                                       inspect.signature(d.fn, eval_str=True).return_annotation)
    return tool


def output_schema(schema: dict[str, Any], answer: Any) -> dict[str, Any]:
    """The answer model's schema, one level deep, plus the top-level fields of the core result it passes on
    (``answer.core_result``, less ``answer.core_dropped``): every key an answer can carry is declared, so clients
    that build types from the output schema (fastmcp's ``.data``) keep them."""
    out = compact(schema, depth=1, keep_descriptions=0)
    core_model = getattr(answer, "core_result", None)
    if isinstance(core_model, type) and issubclass(core_model, BaseModel):
        core_props = compact(core_model.model_json_schema(), depth=1, keep_descriptions=0).get("properties", {})
        props = out.setdefault("properties", {})
        for key, value in core_props.items():
            if key not in props and key not in answer.core_dropped:
                props[key] = value
    return out


def available_tools() -> list[Tool]:
    """Tools whose core function exists now, in registry order (tools/list order is deterministic)."""
    out: list[Tool] = []
    for d in REGISTRY:
        if core(d.core) is None:
            logger.info("tool %s not registered: tools.%s does not exist yet", d.name, d.core)
            continue
        out.append(make_tool(d))
    return out


def _key(**args: Any) -> dict[str, Any]:
    """A call's arguments as JSON data: the key of its cached pages."""
    return {k: v.model_dump(mode="json", exclude_unset=True) if isinstance(v, BaseModel) else v
            for k, v in args.items()}


def _plan_or_dag(plan: dict[str, Any] | None, dag: dict[str, Any] | None) -> dict[str, Any]:
    """The core's keyword arguments: the plan as the caller wrote it and/or the DAG.  The core checks them and
    says what is wrong when neither (or, where it takes one, both) is given."""
    kwargs: dict[str, Any] = {}
    if plan is not None:
        kwargs["plan"] = plan
    if dag is not None:
        kwargs["dag"] = dag
    return kwargs


# ---------------------------------------------------------------------------------------------- the tools


@pdag_tool(core="build_dag", title="Build the execution DAG of a plan")
def build_dag(plan: PlanArg, detail: DetailArg = "summary", cursor: CursorArg = None) -> R.BuildAnswer:
    """Turn a parallel plan into its explicit execution DAG and report how many GPUs it really uses.

    Use it right after drafting a plan to see what pdag derives from the degrees: DP fan-out, prefill and
    decode branches, pipeline stages and, per layer, TP/SP shards, EP expert nodes and every communication
    node. `gpus_used` counts distinct devices (compare with hardware.num_gpus): a replica's stage uses
    max(tp, sp, ep) GPUs; degrees are not multiplied. validate_dag checks the plan.
    Attention-DP and per-phase pools need their opt-ins (validate_dag names them).
    Example: {"plan": {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
    "parallel": {"tp": 8}}}
    Returns gpus_used, gpus_available and a folded summary. detail="full" adds the DAG's working form, then
    the per-GPU DAG in pages: pass `next_cursor` back as `cursor` until absent.
    More: pdag://tools/build_dag.
        """
    fn, pager = core("build_dag"), core("build_dag_page")
    assert fn is not None and pager is not None
    result = fn(plan)
    if detail != "full":
        return R.to_result(R.answer_data(R.shape_build(result, detail)))  # type: ignore[return-value]
    return R.to_result(R.answer_data(R.shape_build_full(result, cursor, lambda c, n: pager(plan, c, n))))  # type: ignore[return-value]


@pdag_tool(core="validate_dag", title="Check a plan or DAG against the rules")
def validate_dag(plan: OptPlanArg = None, dag: OptDagArg = None, detail: DetailArg = "summary",
                 cursor: CursorArg = None) -> R.ValidateAnswer:
    """Check a plan (or a DAG) against pdag's rule catalog and say whether it is valid.

    Use it on every plan before you present it, and again after any change. It checks the degrees against
    the model (heads by TP, experts by EP, layers by PP), the GPU count, memory fit, phase consistency and
    the DAG structure. Attention-DP and per-phase pools are errors without their opt-in
    (options.allow_attention_dp, options.disaggregated). Valid means no violation of severity "error";
    warnings are advice. Give `plan` (preferred) or `dag` (from build_dag with detail="full"), not both.
    Example: {"plan": {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
    "parallel": {"tp": 8, "ep": 8}}}
    Returns valid, error_count, warning_count and violations grouped by rule_id (count, first message, first
    locations); lookup_rule explains a rule_id and its fix. It fixes nothing (autofix_dag).
    More: pdag://tools/validate_dag.
        """
    fn = core("validate_dag")
    assert fn is not None
    return R.respond("validate_dag", _key(plan=plan, dag=dag, detail=detail), detail, cursor,  # type: ignore[return-value]
                     lambda: R.shape_validate(fn(**_plan_or_dag(plan, dag)), detail))


@pdag_tool(core="autofix_dag", title="Repair a plan or DAG")
def autofix_dag(plan: OptPlanArg = None, dag: OptDagArg = None, detail: DetailArg = "summary",
                cursor: CursorArg = None) -> R.AutofixAnswer:
    """Repair rule violations of a plan (or DAG) with deterministic, minimal changes, then re-validate.

    Use it after validate_dag reports errors you want fixed mechanically (a TP degree that does not divide
    the heads, more GPUs than available, EP on a dense model). Read `changes` before accepting the result: a
    fix can change degrees your objective depended on. A strategy used without its opt-in is turned off, and
    `alternatives` offers the plan as drawn with the opt-in set. Give `plan` (preferred) or `dag`, not both.
    Example: {"plan": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4},
    "parallel": {"tp": 3}}}
    Returns valid (after fixing), changes (each with rule_id, severity, message), the fixed plan (the fixed
    DAG with detail="full"), alternatives and the violations left. It repairs; it neither optimises nor
    estimates. More: pdag://tools/autofix_dag.
        """
    fn = core("autofix_dag")
    assert fn is not None
    return R.respond("autofix_dag", _key(plan=plan, dag=dag, detail=detail), detail, cursor,  # type: ignore[return-value]
                     lambda: R.shape_autofix(fn(**_plan_or_dag(plan, dag)), detail))


@pdag_tool(core="estimate_performance", title="Estimate latency, throughput and memory")
def estimate_performance(plan: OptPlanArg = None, dag: OptDagArg = None,
                         sla: Annotated[Sla | None, Field(description="TPOT/TTFT targets under load: adds "
                                                          "best_under_sla")] = None,
                         detail: DetailArg = "summary", cursor: CursorArg = None,
                         render: RenderArg = False) -> R.EstimateAnswer:
    """Estimate a plan's latency, throughput, KV cache and memory with pdag's analytical model.

    Use it on a valid plan (validate_dag first) to compare alternatives or to check an objective or SLO.
    Figures are estimates, not measurements: trust differences between plans more than absolute values.
    Give `plan`, or a `dag` carrying its plan; `sla` adds best_under_sla.
    Example: {"plan": {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
    "parallel": {"tp": 8}, "workload": {"input_len": 2048, "output_len": 256, "batch_size": 8}}}
    Returns ttft_ms, tpot_ms, throughput (served at the workload's load, as `scheduler` runs it), the static
    batch's prefill_latency_ms (not TTFT), decode_latency_ms_per_token, e2e_latency_ms,
    kv_cache, memory (fits, max_gpu_bytes, capacity_bytes), gpus_used, each phase's bottleneck and critical path.
    `render`: true adds images. More (pools, KV hand-off, every field): pdag://tools/estimate_performance.
        """
    fn = core("estimate_performance")
    assert fn is not None
    kwargs = _plan_or_dag(plan, dag)
    result = R.respond("estimate_performance", _key(plan=plan, dag=dag, sla=sla, detail=detail), detail, cursor,
                       lambda: R.shape_estimate(fn(**kwargs, sla=sla), detail))
    if render:
        from server.pictures import plan_images
        from tools.estimate.core import resolve_plan

        result = plan_images(result, resolve_plan(kwargs.get("plan"), kwargs.get("dag")))
    return result  # type: ignore[return-value]


Strategy = Literal[STRATEGIES]  # type: ignore[valid-type]
Level = Literal[LEVELS]  # type: ignore[valid-type]
NodeTypeName = Literal[tuple(t.value for t in NodeType)]  # type: ignore[valid-type]


@pdag_tool(core="lookup_rule", title="Look up pdag's parallelism rules")
def lookup_rule(
    rule_id: Annotated[str | None, Field(description="a rule id, case-insensitive, e.g. TP-HEADS-DIVISIBLE",
                                         max_length=80)] = None,
    query: Annotated[str | None, Field(description="free text, e.g. 'why can TP not span nodes'",
                                       max_length=MAX_QUERY)] = None,
    strategy: Annotated[Strategy | None, Field(description="only rules about this strategy")] = None,
    phase: Annotated[Literal["prefill", "decode", "both"] | None,
                     Field(description="only rules for this phase (plus those for both)")] = None,
    node_type: Annotated[NodeTypeName | None, Field(description="only rules about this DAG node type")] = None,
    layer: Annotated[Level | None, Field(description="only rules at this level of the plan/DAG")] = None,
    limit: Annotated[int, Field(ge=1, le=25, description="most rules to return (1-25)")] = 10,
    detail: DetailArg = "summary",
    cursor: CursorArg = None,
) -> R.LookupAnswer:
    """Find pdag's rules for parallel inference plans: by id, by free-text question, or by topic.

    Use it when validate_dag or autofix_dag cites a rule_id you need to understand, or before planning to
    learn the constraints of a strategy (e.g. strategy="EP"). Give rule_id for one rule; otherwise a query
    (ranked by relevance) and/or the filters strategy, phase, node_type, layer (combined with AND).
    Example: {"rule_id": "TP-HEADS-DIVISIBLE"} or {"query": "KV cache size with MLA", "limit": 3}.
    Each rule has its rationale, seed source, checker, fixer, examples and related ids.
    By default the first 5 matches are complete and the rest brief (id, title, statement). An unknown id is
    an error that lists the closest ids.
    """
    fn = core("lookup_rule")
    assert fn is not None
    args = dict(rule_id=rule_id, query=query, strategy=strategy, phase=phase, node_type=node_type, layer=layer,
                limit=limit)
    return R.respond("lookup_rule", _key(detail=detail, **args), detail, cursor,  # type: ignore[return-value]
                     lambda: R.shape_lookup(fn(**args), detail))


class SloArg(NullMeansAbsent):
    """Service-level objectives a searched plan must meet."""

    model_config = ConfigDict(extra="forbid")

    max_ttft_ms: float | None = Field(None, gt=0, le=3_600_000, description="max time to first token, ms")
    max_tpot_ms: float | None = Field(None, gt=0, le=3_600_000, description="max time per output token, ms")
    min_throughput_tokens_per_s: float | None = Field(None, gt=0, le=1e12,
                                                      description="min output tokens/s of the whole deployment")
    arrivals: Arrivals = Field(
        "spread", description="serving: check max_ttft_ms against spread arrivals or 'lockstep' (benchmark "
                              "clients whose prompts arrive in one burst; conservative)")


class SpecArg(NullMeansAbsent):
    """The speculative decoding search may choose (a plan's speculative states the rest)."""

    model_config = ConfigDict(extra="forbid")

    method: SpecMethod
    num_draft_tokens: int = Field(1, ge=1, le=MAX_DRAFT_TOKENS, description="most draft tokens tried")


@pdag_tool(core="search_strategies", title="Search for the best parallel plans")
def search_strategies(
    model: Annotated[str | HFModel, Field(description="model preset id (pdag://models) or {'hf_config': {...}}")],
    hardware: Annotated[Hardware, Field(description="gpu preset id, num_gpus available, gpus_per_node")],
    workload: Annotated[Workload | None, Field(description="input_len, output_len (tokens); concurrency (total "
                                                           "in flight: every plan compared at it) or batch_size "
                                                           "(per replica; searched if both omitted for "
                                                           "throughput)")] = None,
    objective: Annotated[Literal["latency", "throughput"], Field(description="what to optimise")] = "latency",
    slo: Annotated[SloArg | None, Field(description="optional SLOs; plans missing one rank last")] = None,
    top_k: Annotated[int, Field(ge=1, le=20, description="plans to return, best first")] = 5,
    dtype: Annotated[Literal["bf16", "fp16", "fp8", "int8", "int4"], Field(description="compute dtype")] = "bf16",
    weights: Annotated[WeightFormat | None, Field(description="default: the checkpoint's")] = None,
    attention_dp: Annotated[bool, Field(description="also try attention-DP (MoE)")] = True,
    allow_expert_tp: Annotated[bool, Field(description="also try TP inside experts (MoE; vLLM's default without "
                                                       "expert parallelism; disallowed unless opted in)")] = False,
    disaggregated: Annotated[bool | None, Field(description="also try separate prefill/decode pools (default: "
                                                            ">= 2 GPUs)")] = None,
    engine: Annotated[EngineId, Field(description="engine profile")] = "generic",
    engine_options: Annotated[EngineOptions | None, Field(description="as plan.engine_options")] = None,
    serving: Annotated[bool | None, Field(description="rank by served figures (default: when the workload "
                                                      "states concurrency or request_rate)")] = None,
    checkpoint: Annotated[str | None, Field(max_length=200, description="HF repo served")] = None,
    unlaunchable: Annotated[bool, Field(description="also list plans no engine launches")] = False,
    speculative: Annotated[SpecArg | None, Field(description="allowed: the best plans try none and 1..k, "
                                                 "served")] = None,
    detail: DetailArg = "summary",
    cursor: CursorArg = None,
    render: RenderArg = False,
) -> R.SearchAnswer:
    """Enumerate the valid parallel plans (DP/PP/TP/EP/SP) for a model on a cluster, estimate each, rank them.

    Use it to start planning, or to check that a hand-made plan is not far from the best; then validate_dag
    and estimate_performance the plan you pick (each returned `plan` passes to them as is, opt-ins included).
    It also tries attention-DP layouts for MoE models (`attention_dp`) and disaggregated prefill/decode pools
    (`disaggregated`, on with >= 2 GPUs); false turns either off.
    Example: {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
    "workload": {"input_len": 2048, "output_len": 256}, "objective": "latency"}
    Returns `top` (ranked plans: label, plan, gpus_used, ttft_ms, tpot_ms, e2e_ms, throughput, memory, SLOs
    met), a `pareto` frontier, the best aggregated and disaggregated plans compared, and the alternatives each
    rule rejected. `render`: true adds an image of the Pareto front.
    """
    fn = core("search_strategies")
    assert fn is not None
    args = dict(
        model=model if isinstance(model, str) else model.model_dump(mode="json"),
        hardware=hardware.model_dump(mode="json", exclude_unset=True),
        workload=None if workload is None else workload.model_dump(mode="json", exclude_unset=True),
        objective=objective,
        slo=None if slo is None else slo.model_dump(mode="json", exclude_none=True),
        top_k=top_k,
        dtype=dtype,
        weights=weights,
        attention_dp=attention_dp,
        disaggregated=disaggregated,
        engine=engine,
        engine_options=None if engine_options is None else engine_options.model_dump(exclude_none=True) or None,
        serving=serving,
    )
    if checkpoint is not None:
        args["checkpoint"] = checkpoint
    if unlaunchable:
        args["unlaunchable"] = True
    if allow_expert_tp:
        args["allow_expert_tp"] = True
    if speculative is not None:
        args["speculative"] = speculative.model_dump(mode="json", exclude_unset=True)
    if not render:
        return R.respond("search_strategies", _key(detail=detail, **args), detail, cursor,  # type: ignore[return-value]
                         lambda: R.shape_search(fn(**args), detail))
    from server.pictures import search_images

    result = fn(**args)
    answer = R.respond("search_strategies", _key(detail=detail, **args), detail, cursor,
                       lambda: R.shape_search(result, detail))
    return search_images(answer, result)  # type: ignore[return-value]


MAX_COMMAND = 20_000  # characters of a pasted launch command (a Kubernetes manifest's args run to a few kB)
ConfigArg = Annotated[
    dict[str, Any] | None,
    Field(description="the command's --config / --extra_llm_api_options YAML, as a JSON object"),
]
ReplicasArg = Annotated[int, Field(ge=1, le=100_000, description="servers running the command (plain DP)")]


@pdag_tool(core="import_deployment", title="Read an engine's launch command into a plan")
def import_deployment(
    command: Annotated[str, Field(min_length=1, max_length=MAX_COMMAND,
                                  description="the pasted launch command line")],
    gpu: Annotated[str, Field(max_length=80, description="accelerator preset (pdag://hardware)")] = "h100-sxm",
    gpus_per_node: Annotated[int, Field(ge=1, le=1024)] = 8,
    engine_config: ConfigArg = None,
    replicas: ReplicasArg = 1,
    decode_command: Annotated[str | None, Field(max_length=MAX_COMMAND,
                                                description="disaggregated: the decode pool's command")] = None,
    decode_engine_config: Annotated[dict[str, Any] | None,
                                    Field(description="the decode pool's YAML, if not engine_config")] = None,
    decode_replicas: ReplicasArg = 1,
    workload: Annotated[Workload | None, Field(description="the user's load (a command states none); default: "
                                                           "batch 1, 2048 in / 256 out")] = None,
    objective: Annotated[Literal["latency", "throughput"] | None, Field(description="the user's goal; default "
                                                                                  "latency")] = None,
    hf_config: Annotated[dict[str, Any] | None, Field(description="the checkpoint's config.json, for a model with "
                                                                  "no preset")] = None,
    detail: DetailArg = "summary",
    cursor: CursorArg = None,
) -> R.ImportAnswer:
    """Turn an engine's launch command (vLLM, SGLang, TensorRT-LLM, Dynamo workers) into a pdag plan; check it.

    Use it to judge a deployment or recipe the user has ("is this command right for my model?"). Flags are read
    as the engine reads them (parallel sizes, attention-DP, quantization, KV dtype, limits; its --config YAML as
    engine_config) and GPUs counted its way. Disaggregated: prefill pool in `command`, decode pool in
    `decode_command`. Then estimate_performance or autofix_dag the returned `plan`.
    Example: {"command": "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 8", "gpu": "h100-sxm"}
    Returns engine, plan, notes (assumptions, what the plan cannot express), valid and violations by rule.
    """
    fn, check = core("import_deployment"), core("validate_dag")
    assert fn is not None and check is not None
    args = dict(command=command, gpu=gpu, gpus_per_node=gpus_per_node, engine_config=engine_config,
                replicas=replicas, decode_command=decode_command, decode_engine_config=decode_engine_config,
                decode_replicas=decode_replicas)
    if workload is not None:
        args["workload"] = workload.model_dump(mode="json", exclude_unset=True)
    if objective is not None:
        args["objective"] = objective
    if hf_config is not None:
        args["hf_config"] = hf_config

    def make() -> R.ImportAnswer:
        result = fn(**args)
        return R.shape_import(result, check(plan=result.plan), detail)

    return R.respond("import_deployment", _key(detail=detail, **args), detail, cursor, make)  # type: ignore[return-value]


@pdag_tool(core="export_plan", title="Write a plan as an engine's launch command")
def export_plan(
    plan: Annotated[dict[str, Any], PLAN_SCHEMA, Field(description="the plan to launch, as build_dag takes it "
                                                                   "(pdag://schema/plan)")],
    engine: Annotated[Literal["vllm", "sglang", "trtllm"] | None,
                      Field(description="target engine; default: plan.engine")] = None,
    force: Annotated[bool, Field(description="export a plan validate refuses")] = False,
    engine_version: Annotated[str | None, Field(max_length=40)] = None,
    detail: DetailArg = "summary",
    cursor: CursorArg = None,
) -> R.ExportAnswer:
    """Write a plan as the launch command of vLLM, SGLang or TensorRT-LLM (trtllm-serve), and check the plan.

    Use it to hand the user the command that runs a chosen plan: a line per server, node or pool; TensorRT-LLM's
    options as --config YAML (`config`). A plan validate refuses, or the engine cannot launch, is an error.
    Example: {"plan": {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
    "parallel": {"tp": 8}}, "engine": "vllm"}
    Returns engine, command (a line per server), gpus, config where it applies, notes, valid and violations;
    detail="full" adds argv.
    """
    fn, check = core("export_plan"), core("validate_dag")
    assert fn is not None and check is not None
    return R.respond("export_plan", _key(plan=plan, engine=engine, force=force, engine_version=engine_version,  # type: ignore[return-value]
                                         detail=detail), detail, cursor,
                     lambda: R.shape_export(fn(plan, engine, force=force, engine_version=engine_version),
                                            check(plan=plan), detail))
