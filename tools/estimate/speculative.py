"""Pricing speculative decoding and prefix caching.

Speculative decoding: one engine step drafts ``k`` tokens per sequence and verifies them, with the target's own next
token, in one target pass over ``k + 1`` tokens per sequence (the GEMMs, experts, collectives and LM head see
``k + 1`` times the tokens; attention reads each sequence's KV once).  The drafter runs ``num_steps`` passes
(``num_draft_tokens`` for a chain; none for n-gram lookup), each priced as the plain decode step scaled by the
bytes the drafter reads relative to the target (``tools.core.speculative.draft_read_fraction``): decode at the
batches speculation serves is bound by weight reads.  A step emits the expected accepted length, so

    step = verify(k + 1) + passes * fraction * plain_step,   TPOT = step / tokens_per_step.

``speculative_step`` is that arithmetic on step times priced elsewhere, for the estimator here and for the serving
simulator, which prices each decode step at its batch with it (``simulate.StepCost``).  Not modelled: the draft's
catch-up pass over the accepted tokens and rejected branches' KV writes.  A draft tree (``topk`` > 1) verifies its
``k + 1`` nodes per sequence like a chain of ``k``; each of its ``num_steps`` draft passes decodes ``topk`` tokens per
sequence (priced as the plain step at ``topk`` times the batch), and it accepts at most ``num_steps`` drafts
(``tools.core.speculative.draft_depth``).

Prefix caching: a prompt's cached share (``plan.prefix_hit_fraction``) is not recomputed, so a prefill pass costs
its fixed step overhead plus ``1 - hit`` of its work; a prefix every request shares is held once in the KV cache,
so each running request holds only its own tokens.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from tools.core.plan import Plan
from tools.core.speculative import acceptance, draft_read_fraction

__all__ = ["PrefixFigures", "SpecStep", "SpeculativeFigures", "cached_prefill_ms", "draft_passes",
           "speculative_pricer", "speculative_step"]


class SpecStep(BaseModel):
    tokens_per_step: float = Field(description="tokens each sequence emits per step (accepted drafts + 1)")
    plain_step_ms: float = Field(description="a decode step of one token per sequence, without speculation")
    verify_ms: float = Field(description="the target's pass over k + 1 tokens per sequence")
    draft_ms: float = Field(description="the drafter's passes")
    step_ms: float = Field(description="verify + draft: one engine step")
    cost_multiplier: float = Field(description="step_ms / plain_step_ms: the extra work per step")
    ms_per_token: float = Field(description="step_ms / tokens_per_step: the static step's cost per token, not a "
                                              "served TPOT")


def speculative_step(plain_step_ms: float, verify_step_ms: float, draft_read_fraction: float, draft_passes: int,
                     tokens_per_step: float, draft_base_ms: float | None = None) -> SpecStep:
    """One speculative engine step from priced step times: what it costs and how many tokens it yields.
    ``draft_base_ms``: the plain step a draft pass is a fraction of, when it decodes more than one token per
    sequence (a tree's ``topk`` branches); else the plain step."""
    draft = draft_passes * draft_read_fraction * (plain_step_ms if draft_base_ms is None else draft_base_ms)
    step = verify_step_ms + draft
    return SpecStep(tokens_per_step=tokens_per_step, plain_step_ms=plain_step_ms, verify_ms=verify_step_ms,
                    draft_ms=draft, step_ms=step, cost_multiplier=step / plain_step_ms if plain_step_ms else 1.0,
                    ms_per_token=step / tokens_per_step)


def draft_passes(plan: Plan) -> int:
    sd = plan.speculative
    if sd is None or sd.method == "ngram":
        return 0
    return sd.num_steps or sd.num_draft_tokens


def speculative_pricer(plan: Plan, tp: int, plain_at: Callable[[int], float],
                       verify_at: Callable[[int], float]) -> Callable[[int], SpecStep]:
    """The step at a batch, from the plain and the verifying decode step at that batch (ms)."""
    sd = plan.speculative
    assert sd is not None
    frac, passes, tps, w = draft_read_fraction(plan, tp), draft_passes(plan), acceptance(sd).tokens_per_step, sd.topk
    return lambda b: speculative_step(plain_at(b), verify_at(b), frac, passes, tps, plain_at(b * w) if w > 1 else None)


def cached_prefill_ms(prefill_ms: float, overhead_ms: float, hit_fraction: float) -> float:
    """A prefill pass whose cached share of the prompt is not recomputed: the fixed overhead plus the rest."""
    return overhead_ms + (1.0 - hit_fraction) * max(0.0, prefill_ms - overhead_ms)


class SpeculativeFigures(BaseModel):
    method: str
    num_draft_tokens: int
    topk: int
    draft_passes: int
    tokens_per_step: float = Field(description="expected accepted length, the bonus token included")
    acceptance_source: str
    draft_read_fraction: float = Field(description="bytes one draft pass reads / one target decode step")
    static: SpecStep = Field(description="at the plan's batch (decode_latency_ms_per_token uses it)")
    tpot_without_ms: float = Field(description="served TPOT at the same load without speculation (simulated, "
                                   "else the continuous-batching model's)")
    tpot_with_ms: float = Field(description="served TPOT with it (= the estimate's tpot_ms)")
    output_tokens_per_s_without: float
    output_tokens_per_s_with: float
    assumptions: list[str]


class PrefixFigures(BaseModel):
    hit_fraction: float = Field(description="share of each prompt served from the cache")
    shared_prefix_len: int = Field(description="prompt tokens every request shares (held once); 0: none stated")
    prefill_ms_without: float = Field(description="one request's prefill pass with nothing cached")
    prefill_ms_with: float
    ttft_without_ms: float | None = Field(None, description="serving TTFT at the same load without cache hits")
    ttft_with_ms: float | None = None
    running_without: int | None = Field(None, description="requests the KV cache holds at once without sharing")
    running_with: int | None = None
    assumptions: list[str]
