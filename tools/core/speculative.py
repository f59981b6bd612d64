"""Speculative decoding as data and arithmetic: the acceptance a plan implies, the tokens a step emits, and what
the drafter holds and reads per GPU (shared by memory accounting, validation and the estimator).

Acceptance (knowledge/serving/speculative.json): the first draft token is accepted with probability ``first``,
each later one, given the one before it was, with ``later``; a step emits ``1 + sum_i first * later^(i-1)``
tokens for ``i = 1..k`` (the bonus token from the target included).  A plan's ``acceptance_rate`` sets both;
its ``mean_accepted_tokens`` is taken as stated.

A draft tree (``topk`` > 1, SGLang's EAGLE) verifies ``num_draft_tokens`` candidates but accepts at most one path
through it, ``draft_depth`` tokens deep (its ``num_steps``).  No published model gives a tree's acceptance from a
chain's, so without a stated ``mean_accepted_tokens`` a tree is credited its top-1 path's acceptance at that depth:
a lower bound, since the tree holds that path."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from knowledge import load_json
from tools.core.models import ModelSpec, resolve_model
from tools.core.plan import Plan, Speculative

__all__ = ["Acceptance", "acceptance", "draft_depth", "draft_read_fraction", "draft_spec", "engine_support",
           "spec_data", "tokens_per_step"]

DATA = "serving/speculative.json"


@cache
def spec_data() -> dict[str, Any]:
    return load_json(DATA)  # type: ignore[no-any-return]


def engine_support(engine: str) -> dict[str, Any] | None:
    """What an engine runs (methods, largest top-k, draft TP), None for an engine pdag has no table for."""
    return spec_data()["engines"].get(engine)


@dataclass(frozen=True)
class Acceptance:
    first: float
    later: float
    tokens_per_step: float
    source: str  # "plan" or the published measurement the default comes from


def tokens_per_step(first: float, later: float, k: int) -> float:
    """Expected tokens one verification step emits: the bonus token plus each draft position reached."""
    total, reach = 1.0, first
    for _ in range(k):
        total += reach
        reach *= later
    return total


def draft_depth(spec: Speculative) -> int:
    """Draft positions one step can accept: the chain's length, or a tree's depth (its draft passes)."""
    k = spec.num_draft_tokens
    return min(k, spec.num_steps) if spec.num_steps else k


def acceptance(spec: Speculative) -> Acceptance:
    k = draft_depth(spec)
    if spec.mean_accepted_tokens is not None:
        return Acceptance(float("nan"), float("nan"), spec.mean_accepted_tokens, "plan (mean_accepted_tokens)")
    if spec.acceptance_rate is not None:
        a = spec.acceptance_rate
        return Acceptance(a, a, tokens_per_step(a, a, k), "plan (acceptance_rate)")
    d = spec_data()["methods"][spec.method]
    first, later = d["first_acceptance"], d["later_acceptance"]
    tree = f"a draft tree credited its top-1 path {k} deep (a lower bound; no published tree figure applied); " \
        if spec.topk > 1 else ""
    return Acceptance(first, later, tokens_per_step(first, later, k), f"{tree}published default: {d['note']} "
                      f"({'; '.join(d['sources'])})")


def draft_spec(spec: Speculative) -> ModelSpec | None:
    """The separate draft model's spec (method draft_model with its config stated), else None."""
    if spec.method != "draft_model" or spec.draft_model is None:
        return None
    m = spec.draft_model
    return resolve_model(m if isinstance(m, str) else m.model_dump(), field="speculative.draft_model")


def head_params(plan: Plan) -> dict[str, float]:
    """Parameters of the drafter that are not the target's: ``layer`` (sharded like the target's layers),
    ``replicated`` (fc / eh_proj and a draft LM head, replicated on the attention GPUs), 0 where shared."""
    s = plan.spec
    spec = plan.speculative
    assert spec is not None
    h = s.hidden_size
    if spec.method == "mtp":
        last = max(s.moe.moe_layers) if s.moe else s.num_layers - 1
        per = s.layer_params(last) + 2 * h  # the MTP block's decoder layer, its two input norms
        return {"layer": float(max(1, s.mtp_layers) * per), "replicated": float(max(1, s.mtp_layers) * 2 * h * h)}
    if spec.method in ("eagle", "eagle3"):
        layer = s.attention_params_per_layer() + s.layer_norm_params() + 3 * h * s.intermediate_size
        fc = (3 if spec.method == "eagle3" else 2) * h * h
        head = spec_data()["eagle3_draft_vocab"] * h if spec.method == "eagle3" else 0
        return {"layer": float(layer), "replicated": float(fc + head)}
    return {"layer": 0.0, "replicated": 0.0}


def draft_read_fraction(plan: Plan, tp: int) -> float:
    """Bytes one draft forward pass reads relative to one target decode step, by active parameters (decode is
    bound by weight reads at the batches speculation serves): MTP, one MoE layer plus the shared LM head; an EAGLE
    head, one dense layer plus its fc and LM head; a draft model, its active parameters over its own tp."""
    s, spec = plan.spec, plan.speculative
    if spec is None or spec.method == "ngram":
        return 0.0
    target = float(s.active_param_count())
    if spec.method == "draft_model":
        d = draft_spec(spec)
        if d is None:
            return 0.0
        return d.active_param_count() / target * tp / min(tp, spec.draft_tp or tp)
    if spec.method == "mtp":
        last = max(s.moe.moe_layers) if s.moe else s.num_layers - 1
        active = s.active_layer_params(last) + 2 * s.hidden_size ** 2 + s.lm_head_params()
        return max(1, s.mtp_layers) * active / target
    p = head_params(plan)
    shared_head = 0 if spec.method == "eagle3" else s.lm_head_params()
    return (p["layer"] + p["replicated"] + shared_head) / target
