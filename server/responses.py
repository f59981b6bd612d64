"""Answer shaping: concise by default, complete on request.

The core returns complete objects (a DeepSeek-V3 DAG on 64 GPUs is ~20k nodes, megabytes of JSON); an agent's
context window cannot take that on every call.  The summary forms below keep what an agent decides with
(GPU count, folded structure, violations grouped by rule) and always say what was left out and how to get it.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer

from server.paging import PAGE_CHARS as PAGE_CHARS
from server.paging import paginate, parse_cursor
from tools.core.render import FoldedDag
from tools.estimate.core import Estimate
from tools.repair.autofix import AutofixResult
from tools.rules.lookup import LookupResult
from tools.rules.validate import ValidationResult
from tools.search.strategies import SearchResult

if TYPE_CHECKING:
    from tools.core.build import BuildResult

Detail = Literal["summary", "full"]

LOCATIONS_SHOWN = 3  # locations listed per violated rule in a summary
GROUPS_SHOWN = 25  # rule groups listed in a summary
LIST_ITEMS_SHOWN = 12  # items of any other list kept in a summary
RULES_IN_FULL = 5  # lookup_rule: rules shown complete in a summary; the rest as id + title + statement
_LOCATION_KEYS = ("node", "nodes", "node_id", "node_ids", "edge", "edges", "field", "path", "location", "where")


class ViolationItem(BaseModel):
    """A violation (detail="full") or all violations of one rule (detail="summary": count + first locations)."""

    model_config = ConfigDict(extra="allow")

    rule_id: str
    severity: str = Field(description="error or warning")
    message: str = Field(description="the first violation's message when grouped")
    count: int | None = Field(None, description="summary only: how many violations of this rule")
    locations: list[str] | None = Field(None, description="summary only: the first few nodes/fields involved")

    @model_serializer(mode="wrap")
    def _drop_unused(self, handler: Any):  # noqa: ANN202 - no return type keeps the field schema
        """A full violation has no count/locations: leave them out rather than send nulls."""
        data = handler(self)
        for key in ("count", "locations"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class Paged(BaseModel):
    """A detail="full" answer too large for one page comes in pages (see server.paging)."""

    # The core result whose other top-level fields the answer passes on, less those its shaping drops: the tool's
    # output schema declares them too (server.tools.output_schema).
    core_result: ClassVar[type[BaseModel] | None] = None
    core_dropped: ClassVar[tuple[str, ...]] = ()

    page: dict[str, Any] | None = Field(None, description="full detail, paged: index, count and the item range "
                                                          "of each list on this page")
    next_cursor: str | None = Field(None, description="call again with cursor=<this> for the next page")


class BuildAnswer(Paged):
    gpus_used: int = Field(description="distinct GPUs the DAG runs on (from the devices, not a product of degrees)")
    gpus_available: int = Field(description="hardware.num_gpus of the plan")
    summary: FoldedDag = Field(description="the DAG folded: replica 0 per phase and stage, identical layers once")
    dag: dict[str, Any] | None = Field(None, description='the DAG in its working form (node-link JSON with folds); '
                                       'only with detail="full"')
    page: dict[str, Any] | None = Field(None, description='one page of the full per-GPU DAG (its nodes, then its '
                                        'edges) and the cursor of the next; only with detail="full"')
    note: str | None = Field(None, description="what was left out and how to get it")


class ValidateAnswer(Paged):
    model_config = ConfigDict(extra="allow")
    core_result = ValidationResult
    core_dropped = ("errors", "warnings")

    valid: bool = Field(description="true when no violation has severity error")
    error_count: int
    warning_count: int
    violations: list[ViolationItem]
    note: str | None = None


class AutofixAnswer(Paged):
    model_config = ConfigDict(extra="allow")
    core_result = AutofixResult

    valid: bool = Field(description="validity after fixing")
    changes: list[ViolationItem] = Field(description="what autofix changed, each with the rule it repairs")
    plan: dict[str, Any] | None = Field(None, description="the fixed plan (when a plan was given)")
    dag: dict[str, Any] | None = Field(None, description='the fixed DAG; only with detail="full"')
    dag_summary: FoldedDag | None = Field(None, description="the fixed DAG, folded (summary detail)")
    violations: list[ViolationItem] = Field(description="what is left after fixing")
    note: str | None = None


class EstimateAnswer(Paged):
    """The estimate's fields (see the contract); long lists are cut in a summary, as `note` says."""

    model_config = ConfigDict(extra="allow")
    core_result = Estimate

    ttft_ms: float | None = Field(None, description="time to first token of a served request at `load`, ms")
    tpot_ms: float | None = Field(None, description="time per output token at `load`, ms")
    load: str | None = None
    prefill_latency_ms: float | None = Field(None, description="a whole static batch's prefill, ms (not the time "
                                                               "to first token)")
    decode_latency_ms_per_token: float | None = Field(None, description="time per output token (one step), ms")
    e2e_latency_ms: float | None = Field(None, description="prefill plus all decode steps for one request, ms")
    throughput: dict[str, Any] | None = Field(None, description="served output_tokens_per_s, deployment, ...")
    kv_cache: dict[str, Any] | None = Field(None, description="bytes_total, bytes_per_gpu_max, ...")
    memory: dict[str, Any] | None = Field(None, description="fits, max_gpu_bytes, capacity_bytes, ...")
    gpus_used: int | None = None
    note: str | None = None


class SearchAnswer(Paged):
    """Ranked plans with their estimates; long lists are cut in a summary, as `note` says."""

    model_config = ConfigDict(extra="allow")
    core_result = SearchResult
    core_dropped = ("notes",)

    top: list[dict[str, Any]] = Field(description="best plans for the objective, best first")
    note: str | None = None


class Checked(Paged):
    """A plan another tool produced, checked against the rules on the way out (validate_dag's summary)."""

    model_config = ConfigDict(extra="allow")

    valid: bool = Field(description="the plan has no violation of severity error")
    error_count: int
    warning_count: int
    violations: list[ViolationItem] = Field(description="grouped by rule (summary) or one by one (full)")
    note: str | None = None


class ImportAnswer(Checked):
    engine: str = Field(description="the engine the command starts: vllm, sglang or trtllm")
    plan: dict[str, Any] = Field(description="the deployment as a pdag plan, ready for estimate_performance, "
                                             "autofix_dag or export_plan")
    notes: list[str] = Field(description="what the import assumed, defaulted or could not express")


class ExportAnswer(Checked):
    engine: str
    command: str = Field(description="the launch command, one line per server when the engine needs several")
    gpus: int = Field(description="GPUs the engine will use, counted its way")
    config: dict[str, Any] | None = Field(None, description="TensorRT-LLM: the --config YAML options")
    decode_config: dict[str, Any] | None = Field(None, description="disaggregated TensorRT-LLM: the decode pool's")
    pool_servers: dict[str, int] | None = Field(None, description="disaggregated: servers per pool, prefill first")
    argv: list[list[str]] | None = Field(None, description='each server as an argument list; detail="full"')
    servers: int = Field(1, description="independent servers, each its own endpoint behind a load balancer")
    engine_version: str | None = Field(None, description="the engine release whose flag table the command follows")
    flag_problems: list[str] = Field(default_factory=list, description="flags or values that release refuses")
    notes: list[str] = Field(description="what the command cannot say or does differently from the plan")


class RuleBrief(BaseModel):
    id: str
    title: str
    statement: str
    severity: str


class LookupAnswer(LookupResult, Paged):
    more: list[RuleBrief] = Field(default_factory=list, description="further matches, briefly (summary detail)")
    note: str | None = None


def as_dict(obj: Any) -> dict[str, Any]:
    """A core result (pydantic model or dict) as plain JSON data."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, Mapping):
        return json.loads(json.dumps(obj, default=str))
    raise TypeError(f"unexpected core result {type(obj).__name__}")


def _location(v: Mapping[str, Any]) -> str | None:
    for key in _LOCATION_KEYS:
        value = v.get(key)
        if value in (None, "", [], {}):
            continue
        if isinstance(value, Mapping):  # e.g. {"nodes": [...], "field": "plan.parallel.tp"}
            inner = _location(value)
            if inner:
                return inner
            continue
        if isinstance(value, list):
            shown = ", ".join(str(x) for x in value[:2])
            return shown + (f" (+{len(value) - 2})" if len(value) > 2 else "")
        return str(value)
    return None


def group_by_rule(items: Iterable[Mapping[str, Any]]) -> list[ViolationItem]:
    """One item per (rule id, severity), errors first, each with its count and first few locations."""
    groups: dict[tuple[str, str], ViolationItem] = {}
    for v in items:
        key = (str(v.get("rule_id", "?")), str(v.get("severity", "error")))
        g = groups.get(key)
        if g is None:
            g = groups[key] = ViolationItem(rule_id=key[0], severity=key[1], message=str(v.get("message", "")),
                                            count=0, locations=[])
            if v.get("hint"):
                g.hint = str(v["hint"])  # type: ignore[attr-defined]  # extra field: how to fix it
        g.count = (g.count or 0) + 1
        loc = _location(v)
        if loc and g.locations is not None and len(g.locations) < LOCATIONS_SHOWN:
            g.locations.append(loc)
    out = sorted(groups.values(), key=lambda g: (g.severity != "error", -(g.count or 0), g.rule_id))
    for g in out:
        if not g.locations:
            g.locations = None
    return out


def _counts(violations: list[Mapping[str, Any]]) -> tuple[int, int]:
    errors = sum(1 for v in violations if v.get("severity", "error") == "error")
    return errors, len(violations) - errors


def _shape_violations(raw: list[Mapping[str, Any]], detail: Detail, tool: str) -> tuple[list[ViolationItem], str]:
    if detail == "full":
        return [ViolationItem.model_validate(dict(v)) for v in raw], ""
    roots = [v for v in raw if not v.get("caused_by")]
    follow = Counter(str(v["caused_by"]).split(" at ")[0] for v in raw if v.get("caused_by"))
    groups = group_by_rule(roots)
    for g in groups:
        if follow.get(g.rule_id):
            g.consequences = follow[g.rule_id]  # type: ignore[attr-defined]  # extra: errors this root explains
    note = ""
    if follow:
        note = (f"{sum(follow.values())} more violation(s) follow from the root causes shown (counted in "
                f"'consequences'); fix those first, or call {tool} with detail=\"full\" to list them. ")
    if len(groups) > GROUPS_SHOWN:
        note += f"{len(groups) - GROUPS_SHOWN} more rule groups not shown. "
        groups = groups[:GROUPS_SHOWN]
    if any((g.count or 0) > LOCATIONS_SHOWN for g in groups) or note:
        note += f'Violations are grouped by rule with the first {LOCATIONS_SHOWN} locations; call {tool} with ' \
                'detail="full" for every violation.'
    return groups, note


def shape_build(result: BuildResult, detail: Detail) -> BuildAnswer:
    nodes = result.summary.total_nodes
    return BuildAnswer(
        gpus_used=result.gpus_used,
        gpus_available=result.gpus_available,
        summary=result.summary,
        note=f'Folded summary only: the full DAG ({nodes:,} nodes) is omitted. Call build_dag with detail="full" '
        "for the DAG's working form and the full node-link JSON in pages, or pass the plan itself to validate_dag "
        "/ estimate_performance.",
    )


def _size(x: Any) -> int:
    return len(json.dumps(x, separators=(",", ":"), ensure_ascii=False, default=str))


def shape_build_full(result: BuildResult, cursor: str | None, pager: Callable[..., Any]) -> BuildAnswer:
    """One page of build_dag's full answer: first the working form (paged along its lists when it is large),
    then the expanded per-GPU DAG, nodes and then edges, produced lazily by ``pager`` from its own cursor. When
    the working form fits on the first page with room to spare, that page starts the expansion too."""
    budget = PAGE_CHARS - _size(result.summary.model_dump(mode="json")) - 2_000
    part, _, rest = (cursor or "dag:0").partition(":")
    base = {"gpus_used": result.gpus_used, "gpus_available": result.gpus_available, "summary": result.summary}
    if part == "dag":
        dag_pages = paginate(result.dag, budget)
        k = parse_cursor(rest or None, len(dag_pages))
        dag = {key: v for key, v in dag_pages[k].items() if key not in ("page", "next_cursor")}
        info = dag_pages[k].get("page", {"index": 0, "count": 1, "items": {}})
        room = budget - _size(dag)
        if len(dag_pages) == 1 and room > PAGE_CHARS // 10:
            first = pager(None, room)
            return BuildAnswer(**base, dag=dag, page=as_dict(first), next_cursor=first.cursor)
        nxt = f"dag:{k + 1}" if k + 1 < len(dag_pages) else "nodes:0"
        return BuildAnswer(**base, dag=dag, page={"part": "dag", **info, "cursor": nxt}, next_cursor=nxt)
    page = pager(cursor, budget)
    return BuildAnswer(**base, page=as_dict(page), next_cursor=page.cursor)


def shape_validate(result: Any, detail: Detail) -> ValidateAnswer:
    data = as_dict(result)
    raw = list(data.pop("violations", []) or [])
    errors, warnings = _counts(raw)
    items, note = _shape_violations(raw, detail, "validate_dag")
    for key in ("error_count", "warning_count", "errors", "warnings"):  # recounted above from the violations
        data.pop(key, None)
    extra_note = data.pop("note", None)
    if detail == "summary":
        data, cut = trim(data)
        if cut:
            note = (note + " " if note else "") + cut
    note = " ".join(x for x in (extra_note, note) if x) or None
    return ValidateAnswer(valid=bool(data.pop("valid", errors == 0)), error_count=errors, warning_count=warnings,
                          violations=items, note=note, **data)


def shape_autofix(result: Any, detail: Detail) -> AutofixAnswer:
    data = as_dict(result)
    raw_changes = list(data.pop("changes", []) or [])
    raw_left = list(data.pop("violations", []) or [])
    left, note = _shape_violations(raw_left, detail, "autofix_dag")
    if detail == "full":
        changes = [ViolationItem.model_validate(dict(c)) for c in raw_changes]
    else:
        changes = group_by_rule(raw_changes) if len(raw_changes) > GROUPS_SHOWN else \
            [ViolationItem.model_validate(dict(c)) for c in raw_changes]
    dag = data.pop("dag", None)
    dag_summary = None
    notes = [n for n in (data.pop("note", None), note) if n]
    if dag is not None and detail == "summary":
        try:
            dag_summary = fold_dag_json(dag)
            notes.append('The fixed DAG is shown folded; call autofix_dag with detail="full" for its node-link JSON.')
        except ValidationError:  # a malformed hand-drawn DAG that autofix could not rebuild: as given, or edited
            notes.append(("The edited DAG is not repeated (its edits are in `patch`; detail=\"full\" returns it "
                          "whole)" if data.get("patch") else "The DAG was not changed and is not repeated")
                         + ": it does not match pdag://schema/dag, so it cannot be folded (see the violations).")
        dag = None
    if detail == "summary":
        data, cut = trim(data)
        if cut:
            notes.append(cut)
    return AutofixAnswer(valid=bool(data.pop("valid", not any(v.severity == "error" for v in left))),
                         changes=changes, plan=data.pop("plan", None), dag=dag, dag_summary=dag_summary,
                         violations=left, note=" ".join(notes) or None, **data)


ESTIMATE_DROPPED = ("per_gpu", "provenance", "assumptions", "track_record",  # bulky in a summary (the worst GPU,
                    # totals and the track record's warnings stay); then the static and analytic rates beside the
                    # served ones, which agents took for a second TTFT, TPOT and throughput of the same plan
                    "steady_state_estimate", "static_batch_throughput", "tpot_with_prefill_ms")
# Repeats in the core's result: the per-phase critical path and bottleneck are already under prefill/decode,
# `fits` under memory, the KV totals under kv_cache.
ESTIMATE_REPEATS = (("critical_path",), ("bottleneck",), ("fits",), ("memory", "kv_bytes_per_token"),
                    ("memory", "kv_cache_bytes_total"))


def shape_estimate(result: Any, detail: Detail) -> EstimateAnswer:
    data = as_dict(result)
    note = data.pop("note", None)
    if detail == "summary":
        dropped: list[str] = []
        for path in ESTIMATE_REPEATS:
            holder = data
            for key in path[:-1]:
                holder = holder.get(key) if isinstance(holder, dict) else None
            if isinstance(holder, dict):
                holder.pop(path[-1], None)
        # the overlap of communication changes every figure: say it even when the other assumptions are left out
        overlap = [a for a in data.get("assumptions") or [] if isinstance(a, str) and a.startswith("overlap_comm")]
        data = round_floats(drop_keys(data, ESTIMATE_DROPPED, dropped))
        data, cut = trim(data)
        parts = [note] if note else []
        parts += [f"Priced with {a}." for a in overlap]
        if dropped:
            parts.append(f"Omitted: {', '.join(sorted(set(dropped)))}; numbers rounded to 4 significant digits.")
        if cut:
            parts.append(cut)
        parts.append('Call estimate_performance with detail="full" for every figure and its provenance.')
        note = " ".join(parts)
    return EstimateAnswer(note=note, **data)


def _checked(validation: Any, detail: Detail, tool: str) -> dict[str, Any]:
    """The ``Checked`` fields of a validate_dag result, violations shaped as ``tool`` answers them."""
    raw = list(as_dict(validation).get("violations") or [])
    errors, warnings = _counts(raw)
    items, note = _shape_violations(raw, detail, tool)
    if errors:
        note = (f"The plan breaks {errors} rule(s) of severity error: the engine may refuse it or run it other "
                "than pdag prices it; autofix_dag repairs it. " + note).strip()
    return {"valid": errors == 0, "error_count": errors, "warning_count": warnings, "violations": items,
            "note": note or None}


def shape_import(result: Any, validation: Any, detail: Detail) -> ImportAnswer:
    data = as_dict(result)
    return ImportAnswer(engine=data["engine"], plan=data["plan"], notes=data.get("notes") or [],
                        **_checked(validation, detail, "import_deployment"))


def shape_export(result: Any, validation: Any, detail: Detail) -> ExportAnswer:
    data = as_dict(result)
    if detail != "full":
        data.pop("argv", None)
    return ExportAnswer(**data, **_checked(validation, detail, "export_plan"))


REPEAT_KEPT = ("label", "batch_size", "in_flight", "ttft_ms", "tpot_ms", "throughput_tokens_per_s",
               "throughput_per_gpu", "user_tokens_per_s", "basis")  # what a repeated plan keeps in a summary


def _name_repeats(data: dict[str, Any]) -> bool:
    """In place: Pareto and best-of-kind entries that repeat a plan of ``top`` name it (``same_plan_as``) and keep
    only their figures; agents read each plan once (a search answer repeated most plans up to four times)."""
    where = {(e.get("label"), e.get("batch_size")): f"top[{i}]" for i, e in enumerate(data.get("top") or [])
             if isinstance(e, dict) and "label" in e}
    named = False

    def short(entry: Any) -> Any:
        nonlocal named
        at = where.get((entry.get("label"), entry.get("batch_size"))) if isinstance(entry, dict) else None
        if at is None:
            return entry
        named = True
        return {k: entry[k] for k in REPEAT_KEPT if k in entry} | {"same_plan_as": at}

    data["pareto"] = [short(e) for e in data.get("pareto") or []]
    for side in ("best_aggregated", "best_disaggregated"):
        data[side] = short(data.get(side))
    return named


def drop_empty(data: Any) -> Any:
    """Keys whose value is null, {} or [] removed at any depth: absent and null mean the same to every tool."""
    if isinstance(data, dict):
        out = {k: drop_empty(v) for k, v in data.items()}
        return {k: v for k, v in out.items() if v is not None and v != {} and v != []}
    if isinstance(data, list):
        return [drop_empty(v) for v in data]
    return data


def shape_search(result: Any, detail: Detail) -> SearchAnswer:
    data = as_dict(result)
    notes = data.pop("notes", None) or []
    if detail == "summary":
        if _name_repeats(data):
            notes.append("Entries of pareto and best_* that repeat a plan of top name it (same_plan_as).")
        data = round_floats({k: drop_empty(v) if k in ("top", "pareto", "best_aggregated", "best_disaggregated")
                             else v for k, v in data.items()})
        data, cut = trim(data)
        if cut:
            notes.append(cut + ' Call search_strategies with detail="full" for all of it.')
    sentences = (n[:1].upper() + n[1:] + ("" if n.endswith(".") else ".") for n in notes if n)
    return SearchAnswer(note=" ".join(sentences) or None, **data)


def drop_keys(data: Any, keys: tuple[str, ...], dropped: list[str], where: str = "") -> Any:
    """Remove the named keys at any depth, recording their paths."""
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            path = f"{where}.{k}" if where else k
            if k in keys:
                dropped.append(path)
                continue
            out[k] = drop_keys(v, keys, dropped, path)
        return out
    if isinstance(data, list):
        return [drop_keys(v, keys, dropped, where) for v in data]
    return data


def round_floats(data: Any, digits: int = 4) -> Any:
    """Floats to `digits` significant digits: estimates are not that precise, and each digit costs tokens."""
    if isinstance(data, float):
        return float(f"{data:.{digits}g}")
    if isinstance(data, dict):
        return {k: round_floats(v, digits) for k, v in data.items()}
    if isinstance(data, list):
        return [round_floats(v, digits) for v in data]
    return data


def shape_lookup(result: LookupResult, detail: Detail) -> LookupAnswer:
    rules = result.rules
    if detail == "full" or len(rules) <= RULES_IN_FULL:
        return LookupAnswer(**result.model_dump())
    more = [RuleBrief(id=r.id, title=r.title, statement=r.statement, severity=r.severity)
            for r in rules[RULES_IN_FULL:]]
    return LookupAnswer(
        rules=rules[:RULES_IN_FULL],
        total_matches=result.total_matches,
        conflicts=result.conflicts,
        more=more,
        note=f"The first {RULES_IN_FULL} matches are complete; the other {len(more)} are listed briefly. Call "
        'lookup_rule with rule_id=<id> for one of them, or detail="full" for all.',
    )


def trim(data: Any, path: str = "") -> tuple[Any, str]:
    """Cut lists longer than LIST_ITEMS_SHOWN anywhere in the data; say which were cut."""
    cuts: list[str] = []

    def walk(x: Any, where: str) -> Any:
        if isinstance(x, list):
            if len(x) > LIST_ITEMS_SHOWN:
                cuts.append(f"{where or 'answer'} ({len(x)} items)")
                x = x[:LIST_ITEMS_SHOWN]
            return [walk(v, f"{where}[]") for v in x]
        if isinstance(x, dict):
            return {k: walk(v, f"{where}.{k}" if where else k) for k, v in x.items()}
        return x

    out = walk(data, path)
    if not cuts:
        return out, ""
    return out, f"Lists cut to their first {LIST_ITEMS_SHOWN} items: {', '.join(cuts[:5])}."


def fold_dag_json(dag: Mapping[str, Any]) -> FoldedDag:
    """Fold a node-link DAG document (e.g. autofix's fixed DAG) for a summary."""
    from tools.core.dag import Dag, json_to_graph
    from tools.core.render import fold

    return fold(json_to_graph(Dag.model_validate(dag)))


def _first_non_finite(data: Any, where: str = "") -> str | None:
    stack = [(data, where)]
    while stack:
        x, path = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return path or "answer"
        if isinstance(x, dict):
            stack.extend((v, f"{path}.{k}" if path else k) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(x))
    return None


def answer_data(answer: BaseModel) -> dict[str, Any]:
    """The answer as JSON data, top-level ``None`` fields dropped (a summary does not list ``"dag": null``).
    A non-finite figure is refused: JSON has no number for it, and the output schema promises numbers."""
    data = {k: v for k, v in answer.model_dump(mode="json").items() if v is not None}
    bad = _first_non_finite(data)
    if bad is not None:
        raise ToolError(f"the answer's `{bad}` is not a finite number: the input's figures are outside what pdag "
                        "can compute with (check hardware bandwidths and TFLOPS, and workload sizes)")
    return data


def to_result(data: dict[str, Any]) -> CallToolResult:
    """Compact JSON text for the model (no indentation: ~30% fewer tokens) plus the same data as structured
    content."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


_PAGES: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()  # the last few paged answers, by call
_PAGES_KEPT = 4
_PAGES_LOCK = threading.Lock()  # sync tools run in worker threads


def respond(tool: str, args: dict[str, Any], detail: Detail, cursor: str | None,
            make: Callable[[], BaseModel]) -> CallToolResult:
    """The tool's answer: ``make()`` shaped as JSON; with detail="full", the page ``cursor`` names. The pages
    of recent full answers are kept, so walking the cursor does not recompute a large answer per page (the
    core is deterministic: the same arguments give the same pages)."""
    if detail != "full" and cursor is None:
        return to_result(answer_data(make()))
    key = tool + json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    with _PAGES_LOCK:
        pages = _PAGES.get(key)
        if pages is not None:
            _PAGES.move_to_end(key)
    if pages is None:
        pages = paginate(answer_data(make()))
        with _PAGES_LOCK:
            _PAGES[key] = pages
            while len(_PAGES) > _PAGES_KEPT:
                _PAGES.popitem(last=False)
    return to_result(pages[parse_cursor(cursor, len(pages))])
