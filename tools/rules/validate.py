"""validate_dag: a plan or a DAG (possibly hand-drafted and malformed) -> every rule it breaks, where and why.

A DAG is checked first against the published JSON Schema (errors carry the JSON path), then loaded leniently
(unknown node fields go to ``meta``, bad values are dropped) so that the rules still run on what is there.
A plan is checked at plan level (degrees, divisibility, GPU counts, memory) and at graph level on the DAG
pdag builds from it.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Literal

import jsonschema
import networkx as nx
from pydantic import BaseModel, Field, ValidationError

from tools.core.absent import without_nulls
from tools.core.build import build_working, estimated_node_count, gc_paused
from tools.core.dag import MAX_EDGES, MAX_NODES, MAX_WORKING_NODES, Dag, Node, dag_json_schema
from tools.core.errors import PdagInputError
from tools.core.inputs import check_json_value
from tools.core.layout import Layout
from tools.core.models import resolve_model
from tools.core.normalize import Inference, normalize
from tools.core.plan import Plan, parse_plan, screen_plan
from tools.core.working import (
    WorkingDag,
    apply_layer_folds,
    fold_drawn_replicas,
    folds_from_repeat,
    kv_hand_offs,
    merge_rank_collectives,
    read_folds,
)
from tools.drafts.dialect import read_legend, translate
from tools.drafts.implicit import make_explicit
from tools.drafts.size import oversized
from tools.drafts.vocabulary import closest_types, is_int
from tools.rules.causes import group_causes
from tools.rules.registry import CHECKERS, Context, Violation
from tools.rules.run import run_checkers

__all__ = ["ValidationResult", "validate_dag", "check", "load_dag"]

SEVERITY_ORDER = {"error": 0, "warning": 1}
CLAIM_KEYS = ("gpus_used", "estimate", "options", "gpu")  # what a document states about itself, checked against it
MAX_SCHEMA_ERRORS = 25


class ValidationResult(BaseModel):
    valid: bool = Field(description="true when there is no violation of severity error")
    violations: list[Violation]
    errors: int
    warnings: int
    rules_checked: int = Field(description="rules whose checkers ran on this input")
    input: Literal["plan", "dag"]
    gpus_used: int | None = Field(None, description="distinct GPUs the DAG uses (None if it could not be built)")
    summary: str
    notes: list[str] = Field(default_factory=list)


# ----------------------------------------------------------------------------------------------- DAG loading
_INT_FIELDS = ("replica", "stage", "layer", "tp_rank", "sp_rank", "ep_rank", "attn_group", "heads", "kv_heads",
               "repeat")
_STR_FIELDS = ("op", "role")


def _schema_rule(path: list[Any], validator: str) -> str:
    last = [p for p in path if isinstance(p, str)]
    tail = last[-1] if last else ""
    if path[:1] in (["nodes"], ["edges"]) and tail == "type":
        return "STRUCT-KNOWN-TYPES"
    if path[:1] == ["nodes"] and tail == "devices":
        return "STRUCT-DEVICES-ASSIGNED"
    return "STRUCT-SCHEMA"


def _json_path(path: list[Any]) -> str:
    out = "dag"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _schema_errors(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(rule id, JSON path, message) for each way ``doc`` breaks the published schema (first 25)."""
    try:
        Dag.model_validate(doc)
        return []
    except ValidationError:
        pass
    validator = jsonschema.Draft202012Validator(dag_json_schema())
    out: list[tuple[str, str, str]] = []
    for err in validator.iter_errors(doc):
        path = list(err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else ""
            rule = "STRUCT-DEVICES-ASSIGNED" if missing == "devices" else "STRUCT-SCHEMA"
        else:
            rule = _schema_rule(path, str(err.validator))
        message = err.message
        if rule == "STRUCT-KNOWN-TYPES" and path[:1] == ["nodes"]:
            near = closest_types(err.instance)
            message = (f"node type {err.instance!r} is not one pdag knows; "
                       + (f"did you mean {', '.join(near)}?" if near else "no type it knows is spelled near it")
                       + " (the DAG schema's node types; knowledge/dag_vocabulary.json lists the other spellings "
                       "pdag reads)")
        out.append((rule, _json_path(path), message[:300]))
        if len(out) >= MAX_SCHEMA_ERRORS:
            break
    return out


def _clean_node(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep what is usable of a node: right-typed known fields; unknown fields move into meta."""
    node: dict[str, Any] = {"type": raw.get("type") if isinstance(raw.get("type"), str) else "?"}
    devs = raw.get("devices")
    node["devices"] = sorted({d for d in devs if is_int(d) and d >= 0}) if isinstance(devs, list) else []
    meta = dict(raw["meta"]) if isinstance(raw.get("meta"), dict) else {}
    known = set(Node.model_fields)
    for k, v in raw.items():
        if k in ("id", "type", "devices", "meta"):
            continue
        if k in _INT_FIELDS:
            if is_int(v) and v >= 0:
                node[k] = v
        elif k in _STR_FIELDS:
            if isinstance(v, str):
                node[k] = v
        elif k == "phase":
            if v in ("prefill", "decode"):
                node[k] = v
        elif k in ("layers", "experts"):
            if isinstance(v, list) and all(is_int(x) for x in v):
                node[k] = list(v)
        elif k not in known:
            meta[k] = v
    if meta:
        node["meta"] = meta
    return node


def load_dag(dag: Any) -> tuple[Context, list[Violation]]:
    """A context over a DAG document, plus the violations found while loading it (schema, limits)."""
    if not isinstance(dag, dict):
        raise PdagInputError("dag", f"expected a DAG JSON object, got {type(dag).__name__}",
                             "an object with 'nodes' and 'edges' (see the published DAG JSON Schema)")
    too_big = oversized(dag)
    if too_big:
        ctx = Context()
        ctx.schema_errors.append(("STRUCT-NODE-LIMIT", *too_big))
        return ctx, []
    claims: dict[str, Any] = {}
    # short keys explained in a legend, read before a pasted "dag" block is unwrapped: the legend sits beside it
    dag, legend_read = read_legend(dag)
    if "nodes" not in dag and isinstance(dag.get("dag"), dict):  # a build_dag answer pasted whole
        claims = {k: dag[k] for k in CLAIM_KEYS if k in dag}
        dag = dag["dag"]
    dag, read_as, refused = translate(dag)
    dag, drawn = make_explicit(dag)
    read_as = legend_read + read_as + drawn
    if "nodes" not in dag:
        raise PdagInputError("dag.nodes", "missing: this is not a DAG",
                             "a DAG object with 'nodes' and 'edges' lists; a plan goes in the 'plan' argument")
    nodes, edges = dag.get("nodes"), dag.get("edges", [])
    if not isinstance(nodes, list):
        raise PdagInputError("dag.nodes", f"expected a list of nodes, got {type(nodes).__name__}", "a list")
    if not isinstance(edges, list):
        raise PdagInputError("dag.edges", f"expected a list of edges, got {type(edges).__name__}", "a list")
    ctx = Context()
    ctx.read_doc = dag
    ctx.notes.extend(read_as)
    if len(nodes) > MAX_NODES or len(edges) > MAX_EDGES:
        ctx.schema_errors.append(("STRUCT-NODE-LIMIT", "dag.nodes",
                                  f"the DAG has {len(nodes):,} nodes and {len(edges):,} edges; the limit is "
                                  f"{MAX_NODES:,} nodes and {MAX_EDGES:,} edges, so it was refused unread"))
        return ctx, []
    doc = {k: v for k, v in dag.items() if k not in CLAIM_KEYS}
    claims.update({k: dag[k] for k in CLAIM_KEYS if k in dag})
    ctx.claims = claims
    ctx.schema_errors.extend(("STRUCT-ONE-READING", path, message) for path, message in refused)
    ctx.schema_errors.extend(_schema_errors(doc))

    g = nx.DiGraph()
    seen: set[str] = set()
    for raw in nodes:
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
            continue
        nid = raw["id"]
        if nid in seen:
            ctx.duplicate_ids.append(nid)
            continue
        seen.add(nid)
        g.add_node(nid, **_clean_node(raw))
    for raw in edges:
        if not isinstance(raw, dict):
            continue
        u, v = raw.get("source"), raw.get("target")
        if not isinstance(u, str) or not isinstance(v, str):
            continue
        if u not in g or v not in g:
            ctx.dangling.append((u, v))
            continue
        t = raw.get("type", "data")
        g.add_edge(u, v, type=t if isinstance(t, str) else "?")
    ctx.set_working(working_of(g, dag.get("folds"), ctx.schema_errors))
    req = [n for n, t in g.nodes(data="type") if t == "RequestNode"]
    if req:
        meta = g.nodes[req[0]].get("meta") or {}
        for k in CLAIM_KEYS:
            if k in meta and k not in ctx.claims:
                ctx.claims[k] = meta[k]

    extra: list[Violation] = []
    plan_raw = dag.get("plan")
    if isinstance(plan_raw, dict):
        ctx.raw_plan = plan_raw
        try:
            ctx.plan = parse_plan(plan_raw)
            ctx.layout = Layout(ctx.plan)
            ctx.spec = ctx.plan.spec
        except PdagInputError as exc:
            ctx.schema_errors.append(("STRUCT-SCHEMA", f"dag.{exc.field}", f"the embedded plan is unusable: "
                                      f"{exc.problem}" + (f" (allowed: {exc.allowed})" if exc.allowed else "")))
    if ctx.spec is None and isinstance(dag.get("model"), str):
        with contextlib.suppress(PdagInputError):
            ctx.spec = resolve_model(dag["model"])
    return ctx, extra


def working_of(g: nx.DiGraph, folds: Any, problems: list[tuple[str, str, str]]) -> WorkingDag:
    """The working form of a loaded document: normalized (canonical order, inferred attributes), then folded by
    the folds it states (unusable ones reported as schema errors) or by the symmetry of its drawn replicas."""
    reps: list[Any] = []
    lays: list[Any] = []
    merged = merge_rank_collectives(g)
    hand_offs = kv_hand_offs(g)
    if folds is None:  # nodes that say how many layers they stand for mean the folds they do not state
        folds = folds_from_repeat(g)
    if folds is not None:
        reps, lays, bad = read_folds(folds, g)
        problems.extend(("STRUCT-SCHEMA", path, msg) for path, msg in bad)
    g, inferences = normalize(g, lays)
    inferences = ([Inference(n, "devices", devs, why) for n, devs, why in merged]
                  + [Inference(n, "type", t, why) for n, t, why in hand_offs] + inferences)
    if folds is None:
        return WorkingDag(g, fold_drawn_replicas(g), inferences=inferences)
    apply_layer_folds(g, lays)
    return WorkingDag(g, reps, lays, inferences)


# ----------------------------------------------------------------------------------------------- plan context
def plan_context(plan: Plan | dict[str, Any], build: bool = True) -> tuple[Context, list[Violation]]:
    """Context of a plan: raw-dict rules first (a plan breaking them cannot be parsed), then the built graph."""
    if isinstance(plan, Plan):
        raw = plan.model_dump(mode="json", exclude_none=True)
    elif isinstance(plan, dict):
        raw = without_nulls(Plan, plan)  # the raw-dict rules read null as absent, as the Plan model does
    else:
        raise PdagInputError("plan", f"expected a plan JSON object, got {type(plan).__name__}", "a plan object")
    if isinstance(plan, dict):
        screen_plan(raw)  # wrong types, misspelled fields, unknown presets: input errors, as in every tool
    ctx = Context(raw_plan=raw)
    early = run_checkers(ctx, ["raw"])
    if early:
        return ctx, early
    parsed = plan if isinstance(plan, Plan) else parse_plan(raw)
    ctx.plan, ctx.spec, ctx.layout = parsed, parsed.spec, Layout(parsed)
    count = estimated_node_count(ctx.layout)
    if count > MAX_WORKING_NODES:  # build_dag refuses this plan: say so as the rule it breaks
        ctx.schema_errors.append(("STRUCT-NODE-LIMIT", "plan.parallel", f"this plan's working DAG (one replica "
                                  f"per pool) would have about {count:,} nodes, above the limit of "
                                  f"{MAX_WORKING_NODES:,}; build_dag refuses it"))
        return ctx, []
    if not build:
        return ctx, []
    ctx.set_working(build_working(parsed, ctx.layout))
    ctx.from_plan = True
    return ctx, []


def plan_violations(plan: Plan | dict[str, Any], build: bool = True) -> tuple[Context, list[Violation]]:
    """Violations of a plan; ``build=False`` checks the plan level only (no DAG), which autofix uses to score
    candidate repairs quickly.  Raises PdagInputError when it is not a plan."""
    ctx, early = plan_context(plan, build)
    if early:
        return ctx, sort_violations(early)
    return ctx, check(ctx)


def check(ctx: Context) -> list[Violation]:
    """Run every applicable checker over a context (schema violations included), in deterministic order."""
    out = run_checkers(ctx, ["any"])
    if any(r == "STRUCT-NODE-LIMIT" for r, _, _ in ctx.schema_errors) and ctx.plan is None:
        return sort_violations(out)
    stages: list[Any] = []
    if ctx.plan is not None:
        stages.append("plan")
    if ctx.graph is not None:
        stages.append("graph")
    out.extend(run_checkers(ctx, stages))
    ctx.violations = out
    out.extend(run_checkers(ctx, ["late"]))
    return sort_violations(out)


def sort_violations(vs: list[Violation]) -> list[Violation]:
    return sorted(vs, key=lambda v: (SEVERITY_ORDER[v.severity], v.rule_id, v.location.field or "",
                                     v.location.nodes, v.message))


def result_of(ctx: Context, violations: list[Violation], kind: Literal["plan", "dag"],
              notes: list[str] | None = None) -> ValidationResult:
    violations = group_causes(violations, ctx.graph)
    errors = sum(v.severity == "error" for v in violations)
    warnings = len(violations) - errors
    gpus = ctx.gpus_used if ctx.graph is not None else None
    if errors:
        roots = [v for v in violations if v.severity == "error" and v.caused_by is None]
        rules = sorted({v.rule_id for v in roots})
        follow = errors - len(roots)
        summary = (f"invalid: {len(roots)} root error(s) ({', '.join(rules[:8])}{'...' if len(rules) > 8 else ''})"
                   + (f" and {follow} error(s) following from them" if follow else ""))
    else:
        summary = "valid"
    if warnings:
        summary += f", {warnings} warning(s)"
    return ValidationResult(
        valid=errors == 0, violations=violations, errors=errors, warnings=warnings,
        rules_checked=len(CHECKERS), input=kind, gpus_used=gpus, summary=summary,
        notes=list(notes or []) + ctx_notes(ctx),
    )


def ctx_notes(ctx: Context) -> list[str]:
    notes = list(ctx.notes)
    spec = ctx.spec if ctx.spec is not None else (ctx.plan.spec if ctx.plan is not None else None)
    notes += [f"model: {n}" for n in (spec.notes if spec is not None else ()) if f"model: {n}" not in notes]
    if ctx.inferences:
        shown = "; ".join(i.text() for i in ctx.inferences[:2])
        notes.append(f"{len(ctx.inferences)} attribute(s) were inferred from the structure, e.g. {shown}")
    return notes


def validate_dag(plan: Plan | dict[str, Any] | None = None, dag: dict[str, Any] | None = None) -> ValidationResult:
    """Check a plan (dict or Plan) or a DAG (node-link JSON) against every rule of the catalog.

    Raises PdagInputError only when the input is not a plan or a DAG at all (naming the field)."""
    if dag is not None and oversized(dag) is None:  # one over the size limit is refused unread by load_dag
        check_json_value(dag, "dag")
    with gc_paused():  # tens of thousands of small acyclic objects: the cyclic GC would rescan them all
        return _validate(plan, dag)


def _validate(plan: Any, dag: Any) -> ValidationResult:
    if (plan is None) == (dag is None):
        raise PdagInputError("plan" if plan is None else "dag", "give exactly one of plan or dag",
                             "validate_dag(plan={...}) or validate_dag(dag={...})")
    if plan is not None:
        ctx, early = plan_context(plan)
        if early:
            note = "the plan cannot be built until these are fixed; other rules were not checked"
            return result_of(ctx, sort_violations(early), "plan", [note])
        return result_of(ctx, check(ctx), "plan")
    ctx, _ = load_dag(copy.copy(dag))
    return result_of(ctx, check(ctx), "dag")
