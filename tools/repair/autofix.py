"""autofix_dag: repair a plan (or a DAG, through its plan) rule by rule, and say what changed and why.

Repairs happen at plan level: each violated rule with a registered fixer proposes an edit, the edit is kept
only if it lowers (errors, warnings), and the loop runs to a fixed point.  Because every kept edit strictly
improves that score, the loop terminates, and running autofix on its own output changes nothing
(idempotent); a valid plan never gets an error.  A DAG is first repaired in place (tools/repair/in_place.py: local
edits to the agent's own drawing, reported as a JSON patch); only when that does not make it valid is it
repaired by fixing its embedded (or inferred) plan and rebuilding it with build_dag, which lays the DAG out
correctly by construction.  The answer says which of the two it did.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, Field

import tools.rules.run  # noqa: F401  (every fixer registered)
from tools.core.absent import without_nulls
from tools.core.build import build_dag, gc_paused
from tools.core.errors import PdagInputError
from tools.core.inputs import check_json_value
from tools.core.plan import Plan
from tools.drafts.size import oversized
from tools.repair.in_place import repair_in_place
from tools.rules.registry import FIXERS, Change, Context, Violation
from tools.rules.validate import load_dag, plan_violations

__all__ = ["AutofixResult", "Alternative", "RemainingViolation", "autofix_dag"]

MAX_STEPS = 24
# Which fixer to try first: what makes the plan parseable, then structure, then GPU counts, then memory.
PRIORITY = [
    "GPU-MIN-ONE", "COMBO-CLOSED-SET", "OBJ-EXPLICIT", "HW-ACCELERATOR-SPEC", "EP-MOE-ONLY", "ADP-MOE-ONLY",
    "ADP-OPT-IN", "DISAGG-OPT-IN", "COMBO-DP-OUTER", "PHASE-SHARED-WEIGHT-LAYOUT", "PP-DEGREE-LE-LAYERS",
    "PP-CONTIGUOUS-LAYERS", "TP-HEADS-DIVISIBLE", "TP-KV-HEADS-DIVISIBLE", "SP-WITH-TP", "EP-EXPERT-NODES-EQ-GPUS",
    "ADP-EP-SPANS-GROUPS", "GPU-DEGREES-DIVIDE-GROUP", "GPU-NO-MULTIPLICATION", "EP-TP-NOT-MULTIPLIED",
    "GPU-EXCEEDS-CLUSTER", "MEM-FITS", "ORDER-REASONING", "DP-NOT-FOR-LATENCY", "SP-DECODE-INEFFECTIVE",
    "EP-EVEN-EXPERTS", "EP-SPANS-STAGE-GROUP", "PP-MEMORY-DRIVEN", "GPU-IDLE",
]
ORDER = {r: i for i, r in enumerate(PRIORITY)}


class RemainingViolation(Violation):
    reason: str = Field(description="why autofix could not repair it")


class Alternative(BaseModel):
    plan: dict[str, Any]
    parallel: dict[str, int]
    gpus_used: int
    max_gpu_bytes: float = Field(description="memory of the most loaded GPU")
    capacity_bytes: float
    prefill_latency_ms: float | None = None
    decode_latency_ms_per_token: float | None = None
    output_tokens_per_s: float | None = None
    note: str


class AutofixResult(BaseModel):
    valid: bool = Field(description="validity after fixing (no error left)")
    changes: list[Change]
    plan: dict[str, Any] | None = Field(None, description="the fixed plan")
    dag: dict[str, Any] | None = Field(None, description="the fixed DAG (for DAG input: rebuilt from the fixed plan)")
    violations: list[RemainingViolation] = Field(description="what is left, each with the reason it stays")
    alternatives: list[Alternative] = Field(default_factory=list, description="other repairs, best first")
    repair: Literal["none", "in_place", "rebuilt"] | None = Field(
        None, description="for a DAG: edited in place (the drawing kept) or rebuilt from its plan")
    patch: list[dict[str, Any]] | None = Field(None, description="the in-place edits as a JSON patch (RFC 6902) "
                                               "against the submitted DAG")
    input: str
    summary: str
    intents_not_kept: list[str] = Field(
        default_factory=list, description="the degrees of the input plan that autofix had to change to clear an "
                                          "error, each with the rule that forced it (empty: the strategy is kept)")
    notes: list[str] = Field(default_factory=list)


def _score(vs: list[Violation]) -> tuple[int, int]:
    e = sum(v.severity == "error" for v in vs)
    return e, len(vs) - e


# Warnings whose repair autofix makes although it changes a degree: the seeds call SP in decode a mistake ("SP is
# largely ineffective", seed 001 section 1.2), no engine launches it (export refuses it), and its repair touches only
# the decode phase, so the plan's own choice of prefill SP is kept.
REPAIRED_WARNINGS = {"SP-DECODE-INEFFECTIVE"}
# Freeing GPUs (e.g. dp 4 -> 1 for latency) leaves them idle: an accepted consequence, not a regression.
CONSEQUENCES = {"GPU-IDLE"}


def _improves(before: list[Violation], after: list[Violation], rule: str) -> bool:
    """Keep a repair when it removes errors, or removes the targeted warning without new rules appearing."""
    e1, _ = _score(before)
    e2, _ = _score(after)
    if e2 != e1:
        return e2 < e1
    n1 = sum(v.rule_id == rule for v in before)
    n2 = sum(v.rule_id == rule for v in after)
    new = {v.rule_id for v in after} - {v.rule_id for v in before}
    return n2 < n1 and new <= CONSEQUENCES and len(after) <= len(before)


_DEGREES = ("dp", "pp", "tp", "ep", "sp", "attn_dp")


def degrees_of(raw: dict[str, Any]) -> dict[str, int]:
    """The parallel degrees a plan states, per phase ('parallel.tp', 'phases.decode.tp'), defaults filled in: the
    user's strategy, which autofix changes only when an error leaves no other way."""
    par = raw.get("parallel") if isinstance(raw.get("parallel"), dict) else {}
    out = {f"parallel.{d}": par.get(d, 1) for d in _DEGREES}
    phases = raw.get("phases") if isinstance(raw.get("phases"), dict) else {}
    for phase, over in sorted(phases.items()):
        if isinstance(over, dict):
            out.update({f"phases.{phase}.{d}": v for d, v in over.items() if d in _DEGREES})
    return out


def _evaluate(raw: dict[str, Any]) -> tuple[Context, list[Violation]] | None:
    try:
        return plan_violations(raw, build=False)
    except PdagInputError:
        return None


def fix_plan(raw: dict[str, Any]) -> tuple[dict[str, Any], list[Change], Context | None, list[Violation],
                                               list[Any]]:
    """Plan-level repair loop; returns the plan, the kept changes, the final context and violations, and the
    alternatives the last resize search found."""
    state = copy.deepcopy(raw)
    got = _evaluate(state)
    if got is None:
        return state, [], None, [], []
    ctx, vs = got
    changes: list[Change] = []
    blocked: set[str] = set()
    alternatives: list[Any] = []
    visited = {repr(sorted(state.items(), key=str))}
    for _ in range(MAX_STEPS):
        todo = sorted({v.rule_id for v in vs if v.rule_id in FIXERS and v.rule_id not in blocked},
                      key=lambda r: (ORDER.get(r, len(ORDER)), r))
        errors_first = [r for r in todo if any(v.rule_id == r and v.severity == "error" for v in vs)]
        todo = errors_first + [r for r in todo if r not in errors_first]
        if not todo:
            break
        rule = todo[0]
        trial = copy.deepcopy(state)
        try:
            proposed = FIXERS[rule](trial, ctx)
        except Exception as exc:  # a fixer bug must not take the tool down
            ctx.notes.append(f"fixer {rule} failed: {type(exc).__name__}: {exc}")
            proposed = []
        if not proposed:
            blocked.add(rule)
            continue
        warning_only = not any(v.rule_id == rule and v.severity == "error" for v in vs)
        if warning_only and degrees_of(trial) != degrees_of(state) and rule not in REPAIRED_WARNINGS:
            # a warning never changes the user's strategy
            blocked.add(rule)
            ctx.__dict__.setdefault("_kept_degrees", set()).add(rule)
            continue
        after = _evaluate(trial)
        if after is not None and rule in REPAIRED_WARNINGS and _score(after[1])[0] > _score(vs)[0]:
            # the repair exposed an error (a GPU count that now reads as multiplied degrees): repair that too, and
            # keep the whole only when it leaves no more errors than before
            trial, more, sub_ctx, sub_vs, _found = fix_plan(trial)
            if sub_ctx is not None and _score(sub_vs)[0] <= _score(vs)[0]:
                proposed, after = proposed + more, (sub_ctx, sub_vs)
        key = repr(sorted(trial.items(), key=str))
        if after is None or key in visited or not _improves(vs, after[1], rule):
            blocked.add(rule)
            continue
        visited.add(key)
        alternatives = ctx.__dict__.get("_alternatives", alternatives)
        state, (ctx, vs) = trial, after
        changes.extend(proposed)
        blocked = set()
    return state, changes, ctx, vs, alternatives


def _memory_options(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[Change]]]:
    """The edits that may make a plan fit that no layout search finds: an fp8 KV cache, fp8 weights, experts
    spread over more GPUs (ep), more pipeline stages (pp), a smaller batch; each as (label, plan, changes)."""
    from tools.core.plan import parse_plan

    try:
        plan = parse_plan(raw)
    except PdagInputError:
        return []
    out: list[tuple[str, dict[str, Any], list[Change]]] = []

    def option(label: str, edit: dict[str, Any], field: str, before: Any, after: Any) -> None:
        trial = copy.deepcopy(raw)
        for key, value in edit.items():
            node = trial
            *path, last = key.split(".")
            for k in path:
                node = node.setdefault(k, {})
            node[last] = value
        out.append((label, trial, [Change(rule_id="MEM-FITS", message=f"{label}: the plan did not fit in GPU memory",
                                          field=f"plan.{field}", before=before, after=after)]))

    if plan.effective_kv_dtype != "fp8":
        option("fp8 KV cache", {"kv_dtype": "fp8"}, "kv_dtype", plan.effective_kv_dtype, "fp8")
    if plan.weights is None and plan.dtype in ("bf16", "fp16"):
        option("fp8 weights", {"dtype": "fp8"}, "dtype", plan.dtype, "fp8")
    par, n = plan.parallel, plan.hardware.num_gpus
    if plan.spec.is_moe and par.ep * 2 <= n and not plan.options.disaggregated:
        option(f"ep {par.ep * 2}", {"parallel.ep": par.ep * 2}, "parallel.ep", par.ep, par.ep * 2)
    if par.pp * 2 <= plan.spec.num_layers and par.pp * 2 * max(par.tp, par.ep, par.sp) * par.dp <= n \
            and not plan.options.disaggregated:
        option(f"pp {par.pp * 2}", {"parallel.pp": par.pp * 2}, "parallel.pp", par.pp, par.pp * 2)
    batch = plan.workload.batch_size
    if batch > 1:
        from tools.core.memory import memory_report

        fits = memory_report(plan).max_batch_size_that_fits or 0
        if 1 <= fits < batch:
            option(f"batch {fits}", {"workload.batch_size": fits}, "workload.batch_size", batch, fits)
    return out


def _fit_by_options(state: dict[str, Any], changes: list[Change]) -> tuple[dict[str, Any], list[Change],
                                                                           list[Alternative]]:
    """MEM-FITS left as an error by the layout search: try the other ways to fit (``_memory_options``, also two at
    once), keep those that clear every error, rank them by the plan's objective (latency: e2e; throughput: output
    tokens/s) after every repair that makes the edits of another one and more (autofix's changes are minimal: fp8
    weights alone before fp8 weights and an fp8 cache), and apply the first; the others come back as alternatives,
    in that order, each a complete repair."""
    from tools.estimate import estimate_performance

    single = _memory_options(state)
    tried = list(single)
    for i, (la, pa, ca) in enumerate(single):  # pairs: an fp8 cache and fp8 weights together, and so on
        later = {c.field for _lb, _pb, cb in single[i + 1:] for c in cb}
        for label, plan, chg in _memory_options(pa):
            if chg[0].field in later:  # the same kind of edit, sized for the plan after the first one
                tried.append((f"{la} + {label}", plan, ca + chg))
    fitting: list[tuple[float, str, dict[str, Any], list[Change], Any]] = []
    for label, plan, chg in tried:
        got = _evaluate(plan)
        if got is None or any(v.severity == "error" for v in got[1]):
            continue
        est = estimate_performance(plan=plan)
        score = est.e2e_latency_ms if plan.get("objective", "latency") == "latency" else \
            -est.throughput.output_tokens_per_s
        fitting.append((score, label, plan, chg, est))
    if not fitting:
        return state, changes, []
    edits = [{(c.field, repr(c.after)) for c in t[3]} for t in fitting]
    more = [any(other < mine for other in edits) for mine in edits]  # another repair makes a subset of these edits
    order = sorted(range(len(fitting)), key=lambda i: (more[i], fitting[i][0], fitting[i][1]))
    fitting = [fitting[i] for i in order]
    _, label, plan, chg, _est = fitting[0]
    objective = plan.get("objective", "latency")
    rest = fitting[1:]
    for c in chg:
        c.message += f" (the best of {len(fitting)} ways to fit for the {objective} objective among those that " \
            "change no more than needed" + \
            (f"; the other {len(rest)} are in alternatives, best first)" if rest else ")")
    alternatives = []
    for rank, (_s, lab, p, _c, est) in enumerate(rest, start=2):
        par = {k.removeprefix("parallel."): v for k, v in degrees_of(p).items() if k.startswith("parallel.")}
        alternatives.append(Alternative(
            plan=p, parallel=par, gpus_used=est.gpus_used, max_gpu_bytes=est.memory.max_gpu_bytes,
            capacity_bytes=est.memory.capacity_bytes, prefill_latency_ms=est.prefill_latency_ms,
            decode_latency_ms_per_token=est.decode_latency_ms_per_token,
            output_tokens_per_s=est.throughput.output_tokens_per_s,
            note=f"MEM-FITS way to fit {rank} of {len(fitting)} for the {objective} objective: {lab} (e2e "
                 f"{est.e2e_latency_ms:.0f} ms, {est.throughput.output_tokens_per_s:.0f} output tok/s)"))
    return plan, changes + chg, alternatives


def _reason(v: Violation, ctx: Context | None, tried: set[str]) -> str:
    if v.rule_id in ("MEM-FITS", "GPU-EXCEEDS-CLUSTER") and ctx is not None and ctx.plan is not None:
        from tools.rules.memory import unfit_reason

        return unfit_reason(ctx.plan)
    if v.severity == "warning" and v.rule_id in FIXERS:
        return ("a warning, left as is: its repair would change the plan's parallel degrees, which autofix changes "
                "only to clear an error (the plan stays valid): " + (v.hint or "review it"))
    if v.severity == "warning":
        return "a warning, left as is (the plan stays valid): " + (v.hint or "review it")
    if v.rule_id in FIXERS:
        return "the repair for this rule did not improve the plan without breaking another rule; " + (v.hint or "")
    return "no automatic repair exists for this rule: " + (v.hint or "change the plan by hand")


def _alternatives(found: list[Any], base: dict[str, Any]) -> list[Alternative]:
    from tools.rules.memory import apply_candidate

    out = []
    try:
        from tools.estimate import estimate_performance
    except Exception:  # the estimator may not exist yet
        estimate_performance = None
    for c in found[:3]:
        p = copy.deepcopy(base)
        apply_candidate(p, c, "MEM-FITS", "alternative")
        alt = Alternative(plan=p, parallel={"dp": c.dp, "pp": c.pp, "tp": c.tp, "ep": c.ep}, gpus_used=c.gpus,
                          max_gpu_bytes=c.report.max_gpu_bytes, capacity_bytes=c.report.capacity_bytes,
                          note=f"dp {c.dp} x pp {c.pp} x W {c.width}: {c.report.max_gpu_bytes / 1e9:.1f} GB of "
                               f"{c.report.capacity_bytes / 1e9:.1f} GB on the busiest GPU")
        if estimate_performance is not None:
            try:
                est = estimate_performance(plan=p)
                data = est.model_dump() if hasattr(est, "model_dump") else dict(est)
                alt.prefill_latency_ms = data.get("prefill_latency_ms")
                alt.decode_latency_ms_per_token = data.get("decode_latency_ms_per_token")
                alt.output_tokens_per_s = (data.get("throughput") or {}).get("output_tokens_per_s")
            except Exception:  # an estimate is a bonus, never a reason to fail
                pass
        out.append(alt)
    return out


# Opt-in strategies: when autofix turns one off, setting its option instead is offered as an alternative.
OPT_INS = {"ADP-OPT-IN": "allow_attention_dp", "DISAGG-OPT-IN": "disaggregated"}


def _opt_in_alternatives(original: dict[str, Any] | None, changes: list[Change]) -> list[Alternative]:
    """The input plan with the opt-in(s) autofix turned off set instead: as it stands when that is valid, else
    repaired the same way (the fewest, smallest changes), so the strategy drawn is offered whenever it can run."""
    opts = sorted({OPT_INS[c.rule_id] for c in changes if c.rule_id in OPT_INS})
    if not opts or original is None:
        return []
    from tools.core.memory import memory_report

    alt = copy.deepcopy(original)
    alt["options"] = {**(alt.get("options") or {}), **dict.fromkeys(opts, True)}
    try:
        alt, fixed, _c, vs, _found = fix_plan(alt)
        if any(v.severity == "error" for v in vs):
            return []
        ctx, _vs = plan_violations(alt, build=False)
        if ctx.plan is None or ctx.layout is None:
            return []
        report = memory_report(ctx.plan, ctx.layout)
    except Exception:  # an alternative is a bonus, never a reason to fail
        return []
    d = ctx.plan.parallel
    figures: dict[str, Any] = {}
    try:  # priced like the other alternatives, so that they compare
        from tools.estimate import estimate_performance

        est = estimate_performance(plan=alt)
        figures = {"prefill_latency_ms": est.prefill_latency_ms, "decode_latency_ms_per_token":
                   est.decode_latency_ms_per_token, "output_tokens_per_s": est.throughput.output_tokens_per_s}
    except Exception:  # an estimate is a bonus, never a reason to fail
        pass
    opted = ", ".join("options." + o for o in opts)
    how = "valid with that opt-in" if not fixed else "valid with that opt-in after " + "; ".join(
        f"{c.field.removeprefix('plan.')} {c.before} -> {c.after} ({c.rule_id})" for c in fixed if c.field)
    return [Alternative(plan=alt, parallel={k: getattr(d, k) for k in ("dp", "pp", "tp", "ep", "sp", "attn_dp")},
                        gpus_used=ctx.layout.gpus_needed, max_gpu_bytes=report.max_gpu_bytes,
                        capacity_bytes=report.capacity_bytes, **figures,
                        note=f"keep the plan as drawn and opt in ({opted} = true): {how}, beyond the seeds' default "
                             "rules")]


def _finish(state: dict[str, Any], changes: list[Change], found: list[Any], kind: str,
            dag: dict[str, Any] | None = None, notes: list[str] | None = None,
            original: dict[str, Any] | None = None, fits: list[Alternative] | None = None) -> AutofixResult:
    try:
        ctx, vs = plan_violations(state, build=True)
    except PdagInputError as exc:
        v = RemainingViolation(rule_id="STRUCT-SCHEMA", severity="error", message=str(exc),
                               reason="the plan cannot be parsed; fix this field by hand")
        return AutofixResult(valid=False, changes=changes, plan=state, violations=[v], input=kind,
                             summary=f"not fixed: {exc}", notes=notes or [])
    tried = {c.rule_id for c in changes}
    left = [RemainingViolation(**v.model_dump(), reason=_reason(v, ctx, tried)) for v in vs]
    lost = _intents_not_kept(original, state, changes) if original is not None else []
    errors = sum(v.severity == "error" for v in left)
    if errors:
        summary = f"{len(changes)} change(s); {errors} error(s) could not be fixed"
    else:
        summary = f"valid after {len(changes)} change(s)" if changes else "valid: nothing to change"
    return AutofixResult(
        valid=errors == 0, changes=changes, plan=state, dag=dag, violations=left,
        alternatives=_opt_in_alternatives(original, changes) + (fits or [])
        + (_alternatives(found, state) if found else []),
        input=kind, summary=summary, intents_not_kept=lost,
        notes=(notes or []) + ctx.notes + ([f"could not keep: {'; '.join(lost)}"] if lost else []) + _sp_kept(ctx),
    )


def _sp_kept(ctx: Context) -> list[str]:
    """SP the repaired plan keeps is the plan's own choice, valid in pdag's model; say before an agent exports it that
    export_plan writes no engine command for it (tools/engines/launch.py refuses sp > 1 for every engine)."""
    if ctx.layout is None:
        return []
    kept = {ph: pl.sp for ph, pl in sorted(ctx.layout.phases.items()) if pl.sp > 1}
    if not kept:
        return []
    return [f"kept {', '.join(f'{ph} sp = {sp}' for ph, sp in kept.items())} (the plan's choice; pdag prices it): "
            "export_plan launches no engine with SP, so set sp = 1 for a launch command"]


def _intents_not_kept(original: dict[str, Any], state: dict[str, Any], changes: list[Change]) -> list[str]:
    """Each degree of the input plan that the repaired plan changed, with the error rule(s) whose repair did."""
    before, after = degrees_of(original), degrees_of(state)
    out = []
    for key in sorted(set(before) | set(after)):
        if before.get(key, 1) == after.get(key, 1) and key in before:
            continue
        if key not in before and after.get(key) == before.get("parallel." + key.rsplit(".", 1)[1], 1):
            continue
        rules = sorted({c.rule_id for c in changes if c.field == f"plan.{key}"}) or sorted(
            {c.rule_id for c in changes if c.field and c.field.removeprefix("plan.").startswith(
                key.rsplit(".", 1)[0])}) or sorted({c.rule_id for c in changes if c.severity == "error"})
        out.append(f"{key} {before.get(key, 1)} -> {after.get(key, 1)} (forced by {', '.join(rules) or 'a repair'})")
    return out


def _plan_dict(plan: Any) -> dict[str, Any]:
    if isinstance(plan, Plan):
        return plan.model_dump(mode="json", exclude_none=True)
    if not isinstance(plan, dict):
        raise PdagInputError("plan", f"expected a plan JSON object, got {type(plan).__name__}", "a plan object")
    return without_nulls(Plan, plan)  # a null field is absent (tools.core.absent): not repaired, not echoed


def _infer_plan(ctx: Context, dag: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """A plan for a plan-less DAG: model from 'model', degrees from its shard counts, GPUs from its devices."""
    model = dag.get("model")
    if ctx.spec is None or not isinstance(model, str):
        return None, ("the DAG names no known model (field 'model'), so pdag cannot infer a plan to rebuild it from; "
                      "add 'model' (a preset id) or a 'plan'")
    deg = dict(ctx.inferred_degrees)
    if not ctx.spec.is_moe:
        deg["ep"] = 1
    from tools.core.hardware import accelerator_id

    devs = {d for n in ctx.real_nodes for d in ctx.devices[n]}
    named = ctx.claims.get("gpu")  # the RequestNode's meta or the draft's metadata, as validate read them
    try:
        gpu, how = (accelerator_id(named), "named by the DAG") if isinstance(named, str) else ("h100-sxm", "assumed")
    except PdagInputError as exc:
        gpu, how = "h100-sxm", f"assumed: the DAG's {named!r} is not one preset ({exc.problem})"
    plan = {"model": model, "hardware": {"gpu": gpu, "num_gpus": max(len(devs), 1)}, "parallel": deg}
    return plan, f"inferred plan {deg} from the DAG's shards on {gpu} GPUs ({how})"


def autofix_dag(plan: Plan | dict[str, Any] | None = None, dag: dict[str, Any] | None = None) -> AutofixResult:
    """Repair a plan or DAG.  Raises PdagInputError only when the input is not a plan or a DAG."""
    if (plan is None) == (dag is None):
        raise PdagInputError("plan" if plan is None else "dag", "give exactly one of plan or dag",
                             "autofix_dag(plan={...}) or autofix_dag(dag={...})")
    if dag is not None and oversized(dag) is None:  # one over the size limit is refused unread by load_dag
        check_json_value(dag, "dag")
    with gc_paused():
        if plan is not None:
            raw = _plan_dict(plan)
            plan_violations(raw, build=False)  # raises PdagInputError for what is not a plan at all
            state, changes, _ctx, vs, found = fix_plan(raw)
            fits: list[Alternative] = []
            if any(v.rule_id == "MEM-FITS" and v.severity == "error" for v in vs):
                state, changes, fits = _fit_by_options(state, changes)
            return _finish(state, changes, found, "plan", original=raw, fits=fits)
        return _fix_dag(dag)


def _fix_dag(dag: Any) -> AutofixResult:
    from tools.rules.validate import check

    ctx, _ = load_dag(dag)
    read = list(ctx.notes)  # how the draft was read: every answer says it, whichever way the repair goes
    before = check(ctx)
    if isinstance(dag, dict) and oversized(dag):  # refused unread: nothing to repair or rebuild from
        left = [RemainingViolation(**v.model_dump(), reason="the document is over the size limit") for v in before]
        return AutofixResult(valid=False, changes=[], dag=None, violations=left, input="dag",
                             summary="not fixed: the document is over the size limit", notes=ctx.notes)
    # one reader: the document repaired, and the one a plan is inferred from, is the one validate judged
    doc = ctx.read_doc if ctx.read_doc is not None else dag
    as_read = ["edits and their patch apply to the DAG as read (in pdag's own vocabulary, returned whole), not to "
               "the draft's spelling"] if isinstance(doc, dict) and doc is not dag and doc != dag else []
    notes: list[str] = list(read)
    local: list[Change] = []
    if any(v.severity == "error" for v in before) and isinstance(doc, dict) and isinstance(doc.get("nodes"), list) \
            and isinstance(doc.get("edges", []), list):
        fixed, local, patch, left = repair_in_place(doc)
        if local and not any(v.severity == "error" for v in left):
            return _in_place(fixed, local, patch, left, ctx.raw_plan, read + as_read)
        if local:
            rules = sorted({v.rule_id for v in left if v.severity == "error"})
            notes.append(f"{len(local)} local repair(s) were not enough ({', '.join(rules[:5])} remain): the "
                         "structure is beyond local repair")
    if ctx.plan is not None and ctx.raw_plan is not None:
        raw = ctx.raw_plan
    else:
        inferred, why = _infer_plan(ctx, doc) if isinstance(doc, dict) and "nodes" in doc else (None, "not a DAG")
        if inferred is None:
            if local:  # no plan to rebuild from: hand back what the local repairs achieved
                return _in_place(fixed, local, patch, left, None, [*read, *as_read, why])
            left_ = [RemainingViolation(**v.model_dump(), reason=why) for v in before]
            errors = sum(v.severity == "error" for v in left_)
            return AutofixResult(valid=errors == 0, changes=[], dag=dag, violations=left_, input="dag",
                                 summary="valid: nothing to change" if not errors else f"not fixed: {why}",
                                 notes=ctx.notes)
        raw, notes = inferred, [*read, why]
    state, changes, _c, left_vs, found = fix_plan(raw)
    fits: list[Alternative] = []
    if any(v.rule_id == "MEM-FITS" and v.severity == "error" for v in left_vs):
        state, changes, fits = _fit_by_options(state, changes)
    if not changes and not any(v.severity == "error" for v in before):
        return _finish(state, [], found, "dag", dag, notes)  # nothing to repair: keep the DAG as drawn
    graph_rules = sorted({v.rule_id for v in before if v.location.nodes or v.rule_id.startswith("STRUCT")})
    try:
        rebuilt = build_dag(state).dag
    except PdagInputError as exc:
        return _finish(state, changes, found, "dag", None, notes + [f"could not rebuild the DAG: {exc}"], fits=fits)
    for rid in graph_rules:
        changes.append(Change(rule_id=rid, message="rebuilt the DAG from its plan with build_dag, which places every "
                              "shard, collective and KV edge by construction; the hand-drawn structure that broke this "
                              "rule is gone", field="dag"))
    if not graph_rules:  # the drawing is replaced all the same: that is a change the answer must list
        errors = [v.rule_id for v in before if v.severity == "error"]
        changes.append(Change(rule_id=errors[0] if errors else "STRUCT-SCHEMA", message="replaced the submitted "
                              "drawing with the DAG build_dag lays out for its (repaired) plan; nothing of the "
                              "drawing is kept", field="dag"))
    out = _finish(state, changes, found, "dag", rebuilt, notes, original=raw, fits=fits)
    out.repair = "rebuilt"
    out.summary += "; the DAG was rebuilt from its plan (the drawing could not be repaired in place)"
    return out


def _in_place(fixed: dict[str, Any], changes: list[Change], patch: list[dict[str, Any]], left: list[Violation],
              plan: dict[str, Any] | None, notes: list[str] | None = None) -> AutofixResult:
    """The agent's own DAG, repaired by local edits (each change, and the whole JSON patch, say what)."""
    from tools.rules.causes import group_causes

    left = group_causes(left, None)
    rest = [RemainingViolation(**v.model_dump(), reason="no local repair for it: fix by hand, or give the DAG a plan "
                               "(autofix then rebuilds it)") for v in left]
    errors = sum(v.severity == "error" for v in rest)
    summary = (f"repaired in place: {len(changes)} edit(s) to the submitted DAG" if not errors else
               f"{len(changes)} edit(s) made in place; {errors} error(s) remain")
    return AutofixResult(valid=errors == 0, changes=changes, plan=plan, dag=fixed, violations=rest, input="dag",
                         summary=summary, repair="in_place", patch=patch, notes=notes or [])
