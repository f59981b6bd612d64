"""Serving mode: continuous batching with chunked prefill at a given concurrency, and the best concurrency under
an SLA.

Steady state of one replica holding ``C`` requests in flight (``C`` = the plan's batch_size): every engine step
decodes one token of each running request and carries a share of the prompts of the requests that replace the
finished ones.  A request lives ``output_len`` steps and brings ``input_len`` prompt tokens, so a step carries on
average ``C * input_len / output_len`` prompt tokens, priced as ``C / output_len`` of one request's prefill pass
(without its per-pass host cost, which the step already pays):

    step = decode_step(C) + (C / output_len) * (prefill_pass(1 request) - prefill_step_overhead)

TPOT is one step.  A new prompt is cut into chunks of at most ``prefill_chunk_tokens - C`` tokens (the step's
token budget minus the decode tokens), one chunk per step, so its TTFT is half a step of waiting, plus
``ceil(input_len / chunk)`` steps, plus its own prefill work:

    ttft = step / 2 + chunks * decode_step(C) + prefill_pass(1 request)

Output tokens per second: ``C / step`` per replica, ``1 / step`` per user.  The mixed step counts the prompt's
weight reads again although the decode step already streams the weights (pessimistic for short prompts).
Disaggregated plans are not priced here: their pools do not share steps (see ``disagg.py``).

``best_under_sla`` searches the concurrency (doubling, then bisection: TPOT and TTFT grow with C) for the most
output tokens per second per GPU whose TPOT and TTFT meet the SLA.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from tools.plan import Plan

MAX_CONCURRENCY = 65_536


class Sla(BaseModel):
    """Service-level targets of a serving deployment (each optional)."""

    model_config = ConfigDict(extra="forbid")

    max_tpot_ms: float | None = Field(None, gt=0, description="time per output token under load, ms")
    max_ttft_ms: float | None = Field(None, gt=0, description="time to first token under load, ms")

    def met(self, ttft_ms: float, tpot_ms: float) -> bool:
        return (self.max_tpot_ms is None or tpot_ms <= self.max_tpot_ms) and \
            (self.max_ttft_ms is None or ttft_ms <= self.max_ttft_ms)


class Serving(BaseModel):
    concurrency: int = Field(description="requests in flight per DP replica (continuous batching)")
    chunk_tokens: int = Field(description="prompt tokens one step takes besides the decode tokens")
    step_ms: float = Field(description="one mixed step: every running request's decode token plus prompt chunks")
    ttft_ms: float = Field(description="time to first token of a new request under this load")
    tpot_ms: float = Field(description="time per output token under this load (one mixed step)")
    output_tokens_per_s: float = Field(description="whole deployment (all DP replicas)")
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    meets_sla: bool | None = Field(None, description="against the SLA given, if any")


def continuous(plan: Plan, eff: dict[str, float], concurrency: int, prefill_one_ms: float, decode_ms: float,
               dp: int, gpus: int, sla: Sla | None = None) -> Serving:
    """The steady state at ``concurrency`` from one request's prefill pass and the decode step at that batch."""
    wl = plan.workload
    pre_step = eff["step_overhead_ms"]
    chunk = max(1, int(eff["prefill_chunk_tokens"]) - concurrency)
    step = decode_ms + concurrency / wl.output_len * max(0.0, prefill_one_ms - pre_step)
    chunks = math.ceil(wl.input_len / chunk)
    ttft = step / 2 + chunks * decode_ms + prefill_one_ms
    per_replica = concurrency / (step / 1e3)
    return Serving(concurrency=concurrency, chunk_tokens=chunk, step_ms=step, ttft_ms=ttft, tpot_ms=step,
                   output_tokens_per_s=per_replica * dp, output_tokens_per_s_per_gpu=per_replica * dp / gpus,
                   output_tokens_per_s_per_user=1e3 / step, meets_sla=sla.met(ttft, step) if sla else None)


def best_under_sla(plan: Plan, sla: Sla, max_concurrency: int, eff: dict[str, float] | None = None,
                   overlap: bool | None = None) -> Serving | None:
    """The concurrency with the most output tokens/s per GPU that meets ``sla`` (None if even one request
    misses it), searched on the fast per-layer estimator with the estimate's efficiency keys and overlap."""
    from tools.estimate.fast import FastEstimator

    fast = FastEstimator(plan, eff=eff, overlap=overlap)
    dp, gpus = fast.layout.dp, fast.layout.gpus_needed
    pre1 = fast.phase_ms("prefill", 1)

    def at(c: int) -> Serving:
        return continuous(plan, fast.eff, c, pre1, fast.phase_ms("decode", c), dp, gpus, sla)

    top = max(1, min(max_concurrency, MAX_CONCURRENCY))
    best = at(1)
    if not best.meets_sla:
        return None
    lo, hi = 1, None
    c = 2
    while c <= top:
        s = at(c)
        if not s.meets_sla:
            hi = c
            break
        lo, best = c, max(best, s, key=lambda x: x.output_tokens_per_s_per_gpu)
        c *= 2
    if hi is None and lo < top:
        s = at(top)
        if s.meets_sla:
            return max(best, s, key=lambda x: x.output_tokens_per_s_per_gpu)
        hi = top
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        s = at(mid)
        if s.meets_sla:
            lo, best = mid, max(best, s, key=lambda x: x.output_tokens_per_s_per_gpu)
        else:
            hi = mid
    return best
