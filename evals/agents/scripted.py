"""A deterministic stand-in for the model, answering the real Anthropic client through respx.

Per case it behaves like a careful model that starts from a flawed draft: it drafts the case's plan (mistakes
included), builds and validates it, reads the violations, applies its own fix for each mistake whose rule id
was reported, falls back on ``lookup_rule`` + ``autofix_dag`` for errors it cannot explain (adopting the fixed
plan only if it keeps the user's constraints; when autofix turned off an opt-in strategy, attention-DP or
disaggregated serving, and offers the drafted plan with the opt-in set as an alternative, it keeps its layout and
takes that alternative), re-validates, estimates the valid plan and answers with a ``<plan>`` block.  When
nothing fits it estimates the memory shortfall and says what would be needed.

Everything it knows comes from the case file and from the tool results in the request it receives.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import httpx

from evals.cases import Case, merge_patch

GB = 1e9
MAX_REPAIR_ROUNDS = 4
OPT_INS = ("allow_attention_dp", "disaggregated")  # strategies a plan must ask for; autofix offers the opt-in

__all__ = ["ScriptedModel", "message_json"]


def message_json(
    msg_id: str, model: str, content: list[dict[str, Any]], stop_reason: str, usage: tuple[int, int]
) -> dict[str, Any]:
    """A Messages API response body."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def _tokens(obj: Any) -> int:
    """A deterministic token count stand-in: about four characters per token."""
    return max(1, len(json.dumps(obj, separators=(",", ":"))) // 4)


def _p(plan: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments carrying a copy of the plan."""
    return {"plan": copy.deepcopy(plan)}


def _degrees(plan: dict[str, Any]) -> str:
    par = plan.get("parallel") or {}
    text = ", ".join(f"{k}={par.get(k, 1)}" for k in ("dp", "pp", "tp", "ep", "sp"))
    if par.get("attn_dp", 1) != 1:
        text += f", attn_dp={par['attn_dp']}"
    phases = {k: v for k, v in (plan.get("phases") or {}).items() if v}
    text += f"; phase overrides {json.dumps(phases, separators=(',', ':'))}" if phases else ""
    opted = sorted(k for k in OPT_INS if (plan.get("options") or {}).get(k) is True)
    return text + (f"; opted in: {', '.join(opted)}" if opted else "")


def _without_options(plan: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in plan.items() if k != "options"}


class ScriptedModel:
    """A respx side effect: one instance per case run, advancing one step per Messages API call."""

    def __init__(self, case: Case, model: str = "pdag-scripted") -> None:
        self.case = case
        self.model = model
        if case.draft is None:
            raise ValueError(f"case {case.id} has no scripted draft (a session task): score it with --agent sessions")
        self.plan: dict[str, Any] = copy.deepcopy(case.draft)
        self.applied: list[str] = []  # mistake ids fixed so far
        self.reported: list[str] = []  # rule ids the tools reported
        self.rounds = 0
        self.autofix_tried = False
        self.filled = False  # DP added once on idle GPUs, when a throughput plan validates with GPU-IDLE
        self.infeasible = False
        self.calls = 0
        self.dag_edits = [m.dag_edit for m in case.mistakes if m.dag_edit is not None]
        self.dag_sent = False

    # -- HTTP side ----------------------------------------------------------------------------------------
    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.calls += 1
        content = self.step(body["messages"])
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        usage = (_tokens(body.get("messages")) + _tokens(body.get("tools")), _tokens(content))
        reply = message_json(f"msg_scripted_{self.calls:02d}", self.model, content, stop, usage)
        return httpx.Response(200, json=reply)

    # -- the "model" --------------------------------------------------------------------------------------
    def step(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The content blocks of the next assistant turn, given the conversation so far."""
        if len(messages) == 1:
            if self.dag_edits:
                text = self._opening() + " I will draw the DAG myself, starting from build_dag's full DAG."
                built = self.plan
                for edit in self.dag_edits:
                    built = merge_patch(built, edit.build)
                return self._turn(text, [("build_dag", {"plan": built, "detail": "full"})])
            return self._turn(self._opening(), [("build_dag", _p(self.plan)), ("validate_dag", _p(self.plan))])
        results = self._last_results(messages)
        if self.rounds >= MAX_REPAIR_ROUNDS:
            return [self._text("I could not reach a valid plan within my repair budget; no plan is given.")]
        if "estimate_performance" in results:
            return [self._text(self._answer(results["estimate_performance"]))]
        if "autofix_dag" in results:
            return self._after_autofix(*results["autofix_dag"])
        if "validate_dag" in results:
            return self._after_validate(*results["validate_dag"])
        if "build_dag" in results and self.dag_edits and not self.dag_sent:
            return self._draw_dag(*results["build_dag"])
        return self._turn("Validating the current plan.", [("validate_dag", _p(self.plan))])

    def _draw_dag(self, payload: Any, is_error: bool) -> list[dict[str, Any]]:
        """Apply the case's DAG edits (the mistakes drawn by hand) to the full DAG and validate that DAG."""
        self.dag_sent = True
        dag = payload.get("dag") if isinstance(payload, dict) and not is_error else None
        if not isinstance(dag, dict) or "nodes" not in dag:
            return self._turn(
                "build_dag gave no full DAG; validating the plan instead.", [("validate_dag", _p(self.plan))]
            )
        dag = copy.deepcopy(dag)
        for edit in self.dag_edits:
            for node in dag["nodes"]:
                if node.get("type") in edit.node_types:
                    node.update(edit.set)
            if edit.plan and isinstance(dag.get("plan"), dict):
                dag["plan"] = merge_patch(dag["plan"], edit.plan)
        text = "Drew my DAG: " + "; ".join(m.description for m in self.case.mistakes if m.dag_edit) + ". Validating it."
        return self._turn(text, [("validate_dag", {"dag": dag})])

    def _opening(self) -> str:
        s = self.case.setting
        return (
            f"Planning {s.model} on {s.num_gpus} x {s.gpu} for {s.objective}. Reasoning order: model structure, "
            f"then PP/EP, then TP/SP, DP last. First draft: {_degrees(self.plan)}. Building and validating it."
        )

    def _after_validate(self, payload: Any, is_error: bool) -> list[dict[str, Any]]:
        self.rounds += 1
        if is_error or not isinstance(payload, dict):
            pending = [m for m in self.case.mistakes if m.fix is not None and m.id not in self.applied]
            if not pending:
                return [self._text(f"The tools rejected my plan and I cannot see why: {str(payload)[:300]}")]
            for m in pending:
                self._apply(m.id, m.fix)
            note = f"The tool rejected the plan ({str(payload)[:160]}). Correcting: " + "; ".join(
                m.description for m in pending
            )
            return self._turn(note, [("validate_dag", _p(self.plan))])
        violations = [v for v in payload.get("violations") or [] if isinstance(v, dict)]
        ids = [str(v.get("rule_id")) for v in violations]
        self.reported += [i for i in ids if i not in self.reported]
        matched = [
            m for m in self.case.mistakes if m.fix is not None and m.id not in self.applied and set(m.rules) & set(ids)
        ]
        if matched:
            for m in matched:
                self._apply(m.id, m.fix)
            fixes = "; ".join(f"{'/'.join(sorted(set(m.rules) & set(ids)))}: {m.description}" for m in matched)
            text = f"The validator reported {', '.join(ids)}. Fixing my own mistakes: {fixes}. New plan: " + _degrees(
                self.plan
            )
            return self._turn(text, [("validate_dag", _p(self.plan))])
        errors = [v for v in violations if v.get("severity") == "error"]
        used, have = payload.get("gpus_used"), (self.plan.get("hardware") or {}).get("num_gpus")
        if (not errors and "GPU-IDLE" in ids and self.case.setting.objective == "throughput" and not self.filled
                and isinstance(used, int) and isinstance(have, int) and 0 < used < have and have % used == 0):
            # autofix leaves a warning's degree change to the user: follow the warning's hint, as a user would
            self.filled = True
            par = self.plan.setdefault("parallel", {})
            par["dp"] = int(par.get("dp", 1)) * (have // used)
            text = f"Valid, but GPU-IDLE: {used} of {have} GPUs used. For throughput, DP replicas on the idle GPUs: " \
                + _degrees(self.plan)
            return self._turn(text, [("validate_dag", _p(self.plan))])
        if not errors and payload.get("valid", True):
            note = " Remaining warnings accepted: " + ", ".join(ids) + "." if ids else ""
            return self._turn(
                "The plan validates." + note + " Estimating it.", [("estimate_performance", _p(self.plan))]
            )
        if not self.autofix_tried:
            first = str(errors[0].get("rule_id")) if errors else ids[0]
            text = f"I do not know how to fix {first} myself; looking it up and asking autofix_dag."
            return self._turn(text, [("lookup_rule", {"rule_id": first}), ("autofix_dag", _p(self.plan))])
        self.infeasible = True
        return self._turn(
            "No repair keeps the user's constraints; measuring the shortfall.",
            [("estimate_performance", _p(self.plan))],
        )

    def _after_autofix(self, payload: Any, is_error: bool) -> list[dict[str, Any]]:
        self.autofix_tried = True
        result = payload if isinstance(payload, dict) and not is_error else {}
        fixed = result.get("plan")
        changes = [str(c.get("rule_id", "?")) for c in result.get("changes") or [] if isinstance(c, dict)]
        useful = isinstance(fixed, dict) and bool(changes or result.get("valid"))
        kept = self._opt_in_alternative(result.get("alternatives"))
        if kept is not None:
            self.plan = kept["plan"]
            text = (
                f"autofix_dag would undo the layout I chose ({', '.join(changes) or 'no changes listed'}); its "
                f"alternative keeps my degrees and opts in ({kept.get('note', 'no note')}). Adopting that and "
                "re-validating it."
            )
            return self._turn(text, [("validate_dag", _p(self.plan))])
        if useful and self._keeps_setting(fixed):
            self.plan = fixed
            text = f"autofix_dag changed the plan ({', '.join(changes) or 'no changes listed'}); re-validating it."
            return self._turn(text, [("validate_dag", _p(self.plan))])
        self.infeasible = True
        why = "it changed what the user fixed" if useful else "it found no fix"
        text = f"autofix_dag cannot help ({why}). Estimating memory to say what would be needed."
        return self._turn(text, [("estimate_performance", _p(self.plan))])

    def _answer(self, result: tuple[Any, bool]) -> str:
        payload, is_error = result
        est = payload if isinstance(payload, dict) and not is_error else {}
        if self.infeasible:
            return self._infeasible_answer(est)
        thr = (est.get("throughput") or {}).get("output_tokens_per_s")
        mem = est.get("memory") or {}
        fixed = [m for m in self.case.mistakes if m.id in self.applied]
        lines = [
            "<plan>",
            json.dumps(self.plan, indent=1),
            "</plan>",
            f"Degrees: {_degrees(self.plan)}; objective {self.case.setting.objective}.",
            f"GPUs used: {est.get('gpus_used', '?')} of {self.plan['hardware']['num_gpus']}; fits in memory: "
            f"{mem.get('fits', '?')}.",
            f"Estimates: TTFT {est.get('prefill_latency_ms', '?')} ms, "
            f"TPOT {est.get('decode_latency_ms_per_token', '?')} ms, "
            f"throughput {thr if thr is not None else '?'} tokens/s.",
        ]
        if fixed:
            lines.append("Repaired from my first draft: " + "; ".join(m.description for m in fixed) + ".")
        return "\n".join(lines)

    def _infeasible_answer(self, est: dict[str, Any]) -> str:
        s = self.case.setting
        mem = est.get("memory") or {}
        used, cap = mem.get("max_gpu_bytes"), mem.get("capacity_bytes")
        text = [f"No plan fits: {s.model} at {s.dtype} cannot fit on {s.num_gpus} x {s.gpu}."]
        if used and cap:
            need = 2 ** math.ceil(math.log2(max(1.0, s.num_gpus * used / cap)))
            text.append(
                f"The most loaded GPU would need {used / GB:.0f} GB but has {cap / GB:.0f} GB. It would need at least"
                f" {need} x {s.gpu} GPUs (with PP/TP across them), GPUs with more memory, or a lower precision."
            )
        else:
            text.append("It would need more GPUs or GPUs with more memory, or a lower precision.")
        text.append("Rules reported: " + ", ".join(self.reported) + ".")
        return "\n".join(text)

    # -- helpers -------------------------------------------------------------------------------------------
    def _opt_in_alternative(self, alternatives: Any) -> dict[str, Any] | None:
        """An autofix alternative that is the plan as drafted with only an opt-in added: the strategy was meant."""
        for alt in alternatives if isinstance(alternatives, list) else []:
            plan = alt.get("plan") if isinstance(alt, dict) else None
            if not isinstance(plan, dict) or _without_options(plan) != _without_options(self.plan):
                continue
            added = {k for k, v in (plan.get("options") or {}).items() if v != (self.plan.get("options") or {}).get(k)}
            if added and added <= set(OPT_INS) and self._keeps_setting(plan):
                return alt
        return None

    def _apply(self, mistake_id: str, fix: dict[str, Any]) -> None:
        self.plan = merge_patch(self.plan, fix)
        self.applied.append(mistake_id)

    def _keeps_setting(self, plan: dict[str, Any]) -> bool:
        s = self.case.setting
        hw = plan.get("hardware") or {}
        model = plan.get("model")
        return (
            isinstance(model, str)
            and model.lower() == s.model
            and str(hw.get("gpu", "")).lower() == s.gpu
            and int(hw.get("num_gpus") or 0) <= s.num_gpus
            and (not s.dtype_fixed or plan.get("dtype", "bf16") == s.dtype)
        )

    def _turn(self, text: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        blocks = [self._text(text)]
        for k, (name, args) in enumerate(calls):
            blocks.append({"type": "tool_use", "id": f"toolu_{self.calls:02d}_{k}", "name": name, "input": args})
        return blocks

    @staticmethod
    def _text(text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    @staticmethod
    def _last_results(messages: list[dict[str, Any]]) -> dict[str, tuple[Any, bool]]:
        """Tool name -> (parsed payload, is_error) for the tool results in the last user message."""
        names: dict[str, str] = {}
        for msg in messages:
            if msg["role"] == "assistant" and isinstance(msg["content"], list):
                names.update({b["id"]: b["name"] for b in msg["content"] if b.get("type") == "tool_use"})
        out: dict[str, tuple[Any, bool]] = {}
        last = messages[-1]["content"]
        for block in last if isinstance(last, list) else []:
            if block.get("type") != "tool_result":
                continue
            raw = block.get("content")
            if isinstance(raw, list):
                raw = "".join(part.get("text", "") for part in raw if isinstance(part, dict))
            try:
                payload = json.loads(raw)
            except (TypeError, ValueError):
                payload = raw
            out[names.get(block["tool_use_id"], "?")] = (payload, bool(block.get("is_error")))
        return out
