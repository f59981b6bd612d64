"""Scoring one case: parse the final answer, re-check it with pdag's core, compare with the case's expectations.

The primary check is that the final plan validates with no error, judged by calling ``tools.validate_dag``
directly (never by trusting the agent's tool results).  Then: the user's constraints are kept, the expected
strategies are (not) used, the plan fits and meets the SLOs, it was validated before being answered, and, for the
scripted agent, every injected mistake was reported by one of its named rules.  Regret compares the answer's
estimate with the best plan of ``tools.search_strategies`` when that function exists.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import tools
from evals.agent import AgentResult
from evals.cases import Case, strategies_used

PLAN_BLOCK = re.compile(r"<plan>(.*?)</plan>", re.DOTALL | re.IGNORECASE)
RULE_ID = re.compile(r"\b[A-Z]{2,}(?:-[A-Z0-9]+)+\b")
# A refusal says that nothing fits or meets the request, in whatever words: "cannot fit", "no configuration ... can
# stream it", "I can't give you a plan", "out of reach", "infeasible" (recorded agents wrote all of these).
CANNOT_FIT = re.compile(r"(cannot|can't|can not|does not|doesn't|won't|will not|no plan)\W+(\w+\W+){0,3}fits?\b"
                        r"|\bno (?:\w+ ){0,3}(?:configuration|layout|plan|deployment)\b"
                        r"|\b(?:can't|cannot|can not) (?:\w+ ){0,3}(?:give|meet|reach|serve|run|fit|stream|plan)\b"
                        r"|\b(?:impossible|infeasible|not feasible|not possible|out of reach)\b", re.I)

__all__ = ["CaseScore", "extract_plan", "reported_rules", "score_case"]


@dataclass
class CaseScore:
    id: str
    passed: bool
    checks: dict[str, bool] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    answer: str = "none"  # plan | declined | malformed | none
    final_plan: dict[str, Any] | None = None
    estimate: dict[str, Any] = field(default_factory=dict)
    mistakes: list[dict[str, Any]] = field(default_factory=list)
    regret: float | None = None
    regret_note: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    retries: int = 0
    seconds: float = 0.0
    stop_reason: str = ""
    tags: list[str] = field(default_factory=list)

    @property
    def mistakes_caught(self) -> int:
        return sum(1 for m in self.mistakes if m["caught_by"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json") if hasattr(obj, "model_dump") else obj


def extract_plan(text: str | None) -> tuple[str, dict[str, Any] | None, str | None]:
    """(kind, plan, problem) from the final text: the last ``<plan>`` block, parsed as JSON.

    ``kind`` is ``plan``, ``declined`` (no block, or a block holding ``null`` / ``{"feasible": false}``),
    ``malformed`` (a block that is not a JSON object) or ``none`` (no final text at all).
    """
    if not text:
        return "none", None, "no final answer"
    blocks = PLAN_BLOCK.findall(text)
    if not blocks:
        if re.search(r"<plan>\s*(?:```(?:json)?\s*)?\{", text, re.I):  # an opened block holding a plan
            return "malformed", None, "unterminated <plan> block"
        return "declined", None, None
    raw = blocks[-1].strip()
    raw = re.sub(r"^```(?:json)?\s*|\s*```$", "", raw)
    try:
        plan = json.loads(raw)
    except ValueError as exc:
        return "malformed", None, f"<plan> block is not JSON: {exc}"
    if plan is None or (isinstance(plan, dict) and plan.get("feasible") is False):
        return "declined", None, None
    if not isinstance(plan, dict):
        return "malformed", None, "<plan> block is not a JSON object"
    return "plan", plan, None


def reported_rules(records: list[dict[str, Any]]) -> set[str]:
    """Rule ids the tools reported during the run (violations, autofix changes, rule ids in error texts)."""
    out: set[str] = set()
    for rec in records:
        if rec.get("type") != "tool_call":
            continue
        payload = rec.get("payload")
        if isinstance(payload, dict):
            for key in ("violations", "changes", "remaining"):
                out |= {str(v["rule_id"]) for v in payload.get(key) or [] if isinstance(v, dict) and "rule_id" in v}
        elif isinstance(payload, str):
            out |= set(RULE_ID.findall(payload))
    return out


def _canonical(plan: dict[str, Any]) -> str | None:
    try:
        from tools.core.plan import parse_plan

        return json.dumps(parse_plan(plan).model_dump(mode="json"), sort_keys=True)
    except Exception:  # noqa: BLE001 - an unparsable plan has no canonical form
        return None


def _validated_in_run(plan: dict[str, Any], records: list[dict[str, Any]]) -> bool:
    """Whether a validate_dag (or autofix_dag) call of the run found exactly this plan valid."""
    target = _canonical(plan)
    for rec in records:
        if rec.get("type") != "tool_call" or rec.get("name") not in ("validate_dag", "autofix_dag"):
            continue
        payload = rec.get("payload")
        if rec.get("is_error") or not isinstance(payload, dict) or not payload.get("valid"):
            continue
        checked = payload.get("plan") if rec["name"] == "autofix_dag" else (rec.get("input") or {}).get("plan")
        if isinstance(checked, dict) and _canonical(checked) == target:
            return True
    return False


def _keeps_setting(case: Case, plan: dict[str, Any]) -> list[str]:
    s, problems = case.setting, []
    hw = plan.get("hardware") or {}
    model = plan.get("model")
    if not isinstance(model, str) or model.lower() != s.model:
        problems.append(f"model changed to {model!r} (asked {s.model})")
    if str(hw.get("gpu", "")).lower() != s.gpu:
        problems.append(f"gpu changed to {hw.get('gpu')!r} (asked {s.gpu})")
    if int(hw.get("num_gpus") or 0) > s.num_gpus:
        problems.append(f"num_gpus {hw.get('num_gpus')} exceeds the cluster's {s.num_gpus}")
    # the precision the user fixed is the checkpoint's: fp8 weights with 16-bit compute keep an fp8 request
    if s.dtype_fixed and s.dtype not in (plan.get("dtype", "bf16"), plan.get("weights")):
        problems.append(f"dtype changed to {plan.get('dtype', 'bf16')} (asked {s.dtype})")
    if plan.get("objective", "latency") != s.objective:
        problems.append(f"objective {plan.get('objective', 'latency')} (asked {s.objective})")
    work = plan.get("workload") or {}
    for key in ("input_len", "output_len"):
        if key in s.workload and work.get(key) != s.workload[key]:
            problems.append(f"workload.{key} {work.get(key)} (asked {s.workload[key]})")
    return problems


def _regret(case: Case, plan: dict[str, Any], estimate: dict[str, Any]) -> tuple[float | None, str | None]:
    """Relative gap to the best plan pdag's own search finds (e2e latency or throughput, per the objective).

    The search gets the answer's batch size and precision, so both sides serve the same workload."""
    search = getattr(tools, "search_strategies", None)
    if search is None:
        return None, "tools.search_strategies not available"
    s, x = case.setting, case.expect
    slo = {"max_ttft_ms": x.ttft_ms, "max_tpot_ms": x.tpot_ms, "min_throughput_tokens_per_s": x.min_output_tokens_per_s}
    try:
        found = _dump(
            search(
                model=s.model,
                hardware={"gpu": s.gpu, "num_gpus": s.num_gpus, "gpus_per_node": s.gpus_per_node},
                workload={**s.workload, **(plan.get("workload") or {})},
                objective=s.objective,
                slo={k: v for k, v in slo.items() if v is not None} or None,
                top_k=1,
                dtype=str(plan.get("dtype", s.dtype)),
            )
        )
    except Exception as exc:  # noqa: BLE001 - regret is informative, never fatal
        return None, f"search_strategies failed: {exc}"[:200]
    top = found.get("top") if isinstance(found, dict) else None
    if not top:
        return None, "search found no plan"
    best = top[0]
    if s.objective == "throughput":
        ours, ref = (estimate.get("static_batch_throughput") or {}).get("output_tokens_per_s"), \
            best.get("throughput_tokens_per_s")
        if ours is None or not ref:
            return None, "no throughput figures"
        return round((ref - ours) / ref, 4), f"best: {best.get('label')}"
    ours, ref = estimate.get("e2e_latency_ms"), best.get("e2e_ms")
    if ours is None or not ref:
        return None, "no latency figures"
    return round((ours - ref) / ref, 4), f"best: {best.get('label')}"


def score_case(case: Case, result: AgentResult, records: list[dict[str, Any]], check_mistakes: bool) -> CaseScore:
    """Score one run against its case."""
    sc = CaseScore(
        id=case.id,
        passed=False,
        turns=result.turns,
        tool_calls=len(result.tool_calls),
        tool_errors=result.tool_errors,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        retries=result.retries,
        seconds=result.seconds,
        stop_reason=result.stop_reason,
        tags=list(case.tags),
    )
    checks = sc.checks
    kind, plan, problem = extract_plan(result.final_text if result.stop_reason == "end_turn" else None)
    sc.answer, sc.final_plan = kind, plan
    checks["answered"] = result.stop_reason == "end_turn" and kind in ("plan", "declined")
    if not checks["answered"]:
        sc.reasons.append(problem or f"run stopped: {result.stop_reason}{' - ' + result.error if result.error else ''}")

    if case.expect.feasible:
        _score_plan(case, plan, records, sc)
    else:
        checks["declined"] = kind == "declined"
        if kind == "plan":
            sc.reasons.append("gave a plan although nothing fits")
        text = result.final_text or ""
        words = [w for w in case.expect.explain if w.lower() not in text.lower()]
        checks["explained"] = bool(CANNOT_FIT.search(text)) and not words
        if not checks["explained"]:
            sc.reasons.append("explanation missing" + (f" (no mention of {', '.join(words)})" if words else ""))

    if check_mistakes and case.mistakes:
        seen = reported_rules(records)
        errors = [str(r.get("payload")) for r in records if r.get("type") == "tool_call" and r.get("is_error")]
        for m in case.mistakes:
            caught = sorted(set(m.rules) & seen)
            if not caught and m.error_match and any(m.error_match in e for e in errors):
                caught = [f"tool error ({m.error_match})"]
            sc.mistakes.append({"id": m.id, "rules": m.rules, "caught_by": caught})
            if not caught:
                sc.reasons.append(f"mistake {m.id} not reported by {'/'.join(m.rules)}")
        checks["mistakes_caught"] = all(m["caught_by"] for m in sc.mistakes)
    sc.passed = all(checks.values())
    return sc


def _score_plan(case: Case, plan: dict[str, Any] | None, records: list[dict[str, Any]], sc: CaseScore) -> None:
    checks = sc.checks
    if plan is None:
        checks["valid"] = False
        if sc.answer == "declined":
            sc.reasons.append("declined although a valid plan exists")
        return
    try:
        report = _dump(tools.validate_dag(plan=plan))
        errors = [v for v in report.get("violations") or [] if v.get("severity") == "error"]
        checks["valid"] = bool(report.get("valid")) and not errors
        if not checks["valid"]:
            sc.reasons.append("invalid: " + ", ".join(sorted({str(v.get("rule_id")) for v in errors})))
    except Exception as exc:  # noqa: BLE001 - a plan the core rejects is invalid
        checks["valid"] = False
        sc.reasons.append(f"invalid input: {exc}"[:300])
        return
    problems = _keeps_setting(case, plan)
    checks["setting_kept"] = not problems
    sc.reasons += problems
    used = strategies_used(plan)
    missing = [s for s in case.expect.must_use if s not in used]
    banned = [s for s in case.expect.must_not_use if s in used]
    checks["strategies"] = not missing and not banned
    if missing:
        sc.reasons.append("should use " + ", ".join(missing))
    if banned:
        sc.reasons.append("should not use " + ", ".join(banned))
    checks["validated_before_answer"] = _validated_in_run(plan, records)
    if not checks["validated_before_answer"]:
        sc.reasons.append("final plan was never validated as such during the run")
    try:
        est = _dump(tools.estimate_performance(plan=plan))
    except Exception as exc:  # noqa: BLE001
        checks["estimated"] = False
        sc.reasons.append(f"estimate failed: {exc}"[:300])
        return
    sc.estimate = {
        "gpus_used": est.get("gpus_used"),
        "prefill_latency_ms": est.get("prefill_latency_ms"),
        "decode_latency_ms_per_token": est.get("decode_latency_ms_per_token"),
        "e2e_latency_ms": est.get("e2e_latency_ms"),
        # the static batch's rate, like the latencies above and the search figures regret compares against
        "output_tokens_per_s": (est.get("static_batch_throughput") or {}).get("output_tokens_per_s"),
        "fits": (est.get("memory") or {}).get("fits"),
    }
    checks["fits"] = bool(sc.estimate["fits"])
    if not checks["fits"]:
        sc.reasons.append("does not fit in memory")
    slo = []
    e, x = sc.estimate, case.expect
    if x.ttft_ms is not None and not (e["prefill_latency_ms"] or float("inf")) <= x.ttft_ms:
        slo.append(f"TTFT {e['prefill_latency_ms']} ms > {x.ttft_ms}")
    if x.tpot_ms is not None and not (e["decode_latency_ms_per_token"] or float("inf")) <= x.tpot_ms:
        slo.append(f"TPOT {e['decode_latency_ms_per_token']} ms > {x.tpot_ms}")
    if x.min_output_tokens_per_s is not None and not (e["output_tokens_per_s"] or 0) >= x.min_output_tokens_per_s:
        slo.append(f"throughput {e['output_tokens_per_s']} < {x.min_output_tokens_per_s} tokens/s")
    checks["slo"] = not slo
    sc.reasons += slo
    sc.regret, sc.regret_note = _regret(case, plan, est)
