"""A discrete-event simulator of the serving engine under a benchmark client's load, priced by the cost model.

Why: a user judges a deployment by what a benchmark client sees at a load (TTFT, TPOT, throughput at a concurrency
or a request rate), and those figures come from queueing and from how the engine forms each step, which a static
batch or a steady-state formula does not show (bursts of prompts, the long-output tail of a finite run, a KV cache
that runs out and preempts).

Clients (``Load``), as ``vllm bench serve`` defines them (``../shared/notes/serving.md`` §1, [VS]):

* closed loop of ``C`` clients (``--request-rate inf --max-concurrency C``): every client sends its first request at
  t = 0 and its next one the moment the previous one ends, until ``num_requests`` are sent; with fixed lengths the
  rounds after the first are simulated with the clients' phases spread over a round (``_burst_then_spread``);
* open loop at ``request_rate`` (Poisson, i.e. gamma gaps of shape 1, rescaled so that the last arrival lands at
  ``N / rate`` as the client does), optionally capped at ``concurrency`` in flight: a capped request waits in the
  client and its TTFT starts when it is sent (the client's ``client_queue_time`` is not part of TTFT);
* a burst: ``num_requests`` sent at t = 0 (``--request-rate inf`` without a cap).

Lengths are fixed, drawn uniformly from ``[lo, hi]``, or drawn from a dataset's length histogram scaled to the
stated means (``length_dataset``, ``_Lengths``), with a seeded generator.  Metrics as the client computes
them: TTFT = first token - send; TPOT = (E2E - TTFT) / (output_len - 1) per request (requests of one token left
out); ITL = the gaps between a request's tokens, pooled over all tokens; throughput = output tokens / the run's
wall time, ramp and drain included.

One engine step per replica, formed as its scheduler forms it (``plan.engine``):

* vLLM V1 (``vllm/v1/core/sched/scheduler.py`` at 00024d314514900f361ad072af6931e403b7f589, [VSC]): a token budget
  of ``max_num_batched_tokens`` per step; RUNNING requests first, in order, each taking ``min(remaining, budget)``
  tokens (one for a decode, a chunk of an unfinished prompt); when the KV cache has no page for a running request,
  the last running request is preempted (pages freed, its prompt and generated tokens recomputed later) and put at
  the front of the waiting queue; WAITING requests are admitted first come, first served, only in a step that
  preempted nothing, while fewer than ``max_num_seqs`` run and the free pages hold the request's whole current
  sequence (its prompt, and after a preemption the tokens it had generated; the admission gate
  ``allocate_slots(full_sequence_must_fit=scheduler_reserve_full_isl)``, ``vllm/v1/core/kv_cache_manager.py`` at
  003df2961dd8830c317a61f9745ccd557da9fa06, which stops chunked prefill from admitting a request on its first
  chunk alone and thrashing the cache), though only its first chunk's pages are taken then;
* SGLang (``python/sglang/srt/managers/scheduler.py``, ``get_next_batch_to_run``, [SGS]): prefill first; a step is
  a prefill batch of waiting prompts (at most ``chunked_prefill_size`` tokens, one prompt carried over in chunks)
  whenever one can be formed, else a decode step of every running request; admission reserves KV for part of the
  running requests' remaining outputs (``new_token_ratio``) and takes a prompt only when the pages left hold its
  uncached prompt and its remaining output clipped at ``SGLANG_CLIP_MAX_NEW_TOKENS`` (``PrefillAdder.add_one_req``);
  a decode step that finds no page retracts the newest request to the waiting queue;
* TensorRT-LLM (in-flight batching, GUARANTEED_NO_EVICT capacity policy by default, [TRTS][TRTF]): every generation
  request and context chunks of admitted requests share a step of at most ``max_num_tokens`` tokens; a request is
  admitted only when pages for its prompt and its whole output are free, so nothing is ever evicted.

With ``scheduler_ahead`` (vLLM async scheduling, SGLang and TensorRT-LLM overlap schedulers) a step is scheduled
while the previous one runs, so a request joins a step only if it arrived before the previous step started.

Step time comes from the cost model (``fast.py``'s per-layer sub-DAGs, priced for other lengths with
``FastEstimator.for_lengths``) as a cost surface of the step's mix, evaluated lazily and cached per shape:
a decode step of ``d`` sequences at mean context ``c`` is linear in ``c`` between two priced contexts and
interpolated between priced batch sizes; a prefill of ``k`` chunks of mean length ``L`` is the prefill pass of ``k``
prompts of ``L`` tokens (interpolated on a geometric grid of ``L``); a mixed step adds that pass's GPU work beyond
what it shares with the decode step (the step overhead and the weights that step reads: all of a dense model's,
but of an MoE's routed experts only those its decode tokens reach, ``serving.riding_ms``; a prompt of hundreds of
tokens reaches nearly every expert and reads the others itself) to the decode step.
Runs of decode-only steps between events (a completion, an arrival, the KV cache running out) are advanced in
one go: their times grow linearly with the context, so their sum is closed-form.

Speculative decoding (``plan.speculative``, ``speculative.py``): a decode step of ``d`` sequences costs
``speculative_step`` at that batch (the verify pass over ``k + 1`` tokens per sequence, from sub-DAGs priced with
``decode_queries = k + 1``, plus the draft passes) and advances each request by the expected accepted length,
carried per request in fixed point so whole tokens come out deterministically (the last step's overshoot is capped
at the output); KV pages grow by the tokens emitted, and vLLM and TensorRT-LLM count ``k + 1`` tokens per decode
against the step's budget.  A draft tree (``topk`` > 1) verifies its ``k + 1`` nodes and drafts ``topk`` tokens per
sequence in each pass (the plain step at ``topk`` times the batch).  ITL is then the gap between steps (a step's
tokens arrive as one chunk).

Prefix caching (``plan.prefix_caching``, ``PrefixPricing``), as vLLM V1's KV cache manager does it
(``vllm/v1/core/kv_cache_manager.py`` ``get_computed_blocks`` and ``vllm/v1/core/block_pool.py``,
https://github.com/vllm-project/vllm/tree/main/vllm/v1/core; SGLang's radix cache,
``python/sglang/srt/mem_cache/radix_cache.py``, does the same with pages of one token): on admission a request's
cached prefix is looked up; its tokens count as computed, so only the uncached suffix is scheduled in the token
budget and priced; a hit covers whole pages only and never the prompt's last token (the engine recomputes it for
the logits: ``max_cache_hit_length = num_tokens - 1``).  A prefix every prompt shares (``shared_prefix_len``) is
cached once the first request has computed it; its pages are then held once and referenced by every running
request that hit it; when no running request references them they stay cached but count as free, and the first
allocation that needs them evicts the prefix (the engines free unreferenced cached pages least recently used
first; here the shared prefix is the only cached entry), so the next request misses and computes it again.  With
``hit_rate`` (a conversation's earlier turns) that share of each prompt is found cached, in pages the request holds
itself (its own history, not shared).  The suffix still attends to the cached keys: a chunk of ``n`` tokens after
``c`` cached ones costs what a prompt of ``c + n`` tokens costs beyond one of ``c`` (the GEMMs of ``n`` tokens, the
attention of ``n`` queries over ``c + n`` keys), priced as that work beyond the plain chunk's, and at least one read
of the ``c`` cached tokens' keys and values (``cached_attention_ms``); a later chunk of a prompt split over steps is
priced the same way over the chunks computed before it, with or without caching.  vLLM's cascade attention (vLLM PR
#11635, ``use_cascade_attention`` in ``vllm/v1/attention/backends/flash_attn.py``) reads a prefix that every running
request holds once per decode step instead of once per request, when it is at least 256 tokens and at least 8
requests run (``_Engine.read_ctx``; not for MLA or sliding-window attention, whose backends do not run it).
Disaggregated, the prefill pool reuses the prefix as above; a vLLM decode replica looks its own cache up before it
pulls a prompt's KV and asks the connector only for the rest (``get_num_new_matched_tokens`` returns the prompt less
``num_computed_tokens``, the local hit: ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``), so the
shared prefix it received with the first request is held once and not moved again (the hand-off of a hit moves only
the suffix: the link latency plus that share of the bytes).  SGLang's and TensorRT-LLM's decode pools are given the
whole prompt each time here: SGLang's decode servers run a chunk cache, not the radix cache
(``_handle_pd_disaggregation`` in ``python/sglang/srt/server_args.py``; ``--disaggregation-decode-enable-radix-cache``,
which lifts it, is not modelled), and no source was found for reuse on TensorRT-LLM's generation servers.
Without hits (no prefix_caching, disabled, or a zero share) the engines run the plain code paths, so the results
are those of a plan without it.

KV pages: ``kv_cache_tokens`` per replica (the engine option, else the room the memory model leaves once the weights,
the reserve and one step of the token budget are held, ``memory.kv_cache_tokens``: the engines size the cache at
start-up, whatever the workload's context), in pages of ``block_size`` tokens; a request holds the pages of the tokens
it has, and gets more as they grow.  DP replicas and the ``attn_dp`` ranks of a replica each run their own scheduler,
queue and cache (a rank holds its share of the replica's KV); a new request goes to one of them as the engine's
front end routes it (``_Dispatch``: vLLM the least loaded, SGLang round-robin), and the ranks of a replica step
together at the slowest rank's time, since its MoE layers gather every rank's tokens (``_rank_groups``,
``_lockstep``); when the replicas of each pool, the clients and the requests divide by the same ``g`` and every
request has the same lengths (closed loop or burst), one ``g``-th of the deployment is simulated and counted ``g``
times (``symmetric_shares``).  Disaggregated plans: a prefill pool and a decode pool of replicas, each
with its own queue; a prompt's KV moves after its prefill (``kv_handoff`` for one request) and the request then
waits for admission on its decode replica; its first token is streamed after its first decode step there.  A replica
holds its decoding requests as one cohort (``_DecodeCohort``; a disaggregated decode replica under any scheduler, an
aggregated one under vLLM's or TensorRT-LLM's, without speculation or prefix caching), stepped in O(log n) per step
plus the prompts being computed beside it, with the same result as request by request.

Recurrent layers (gated DeltaNet, Mamba-2): each runnable sequence's fixed state is set aside from the KV room
first, and at most as many sequences run as their KV and state fit at the plan's context (``_state_room``).

Deterministic: same plan, same load, same seed, same result, byte for byte.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from operator import itemgetter
from typing import Literal

from pydantic import BaseModel, Field

from tools.core.errors import PdagInputError
from tools.core.handoff import kv_handoff
from tools.core.memory import kv_cache_tokens, memory_report, state_tokens
from tools.core.plan import LENGTH_DATASETS, Plan, Workload
from tools.core.speculative import acceptance, draft_read_fraction
from tools.estimate.fast import FastEstimator, PriceBook
from tools.estimate.serving import POLICY_OF_ENGINE, Policy, default_max_seqs, riding_ms, weights_ms
from tools.estimate.speculative import draft_passes, speculative_step

# KV page size in tokens: vLLM's block_size 16, SGLang's page_size 1, TensorRT-LLM's tokens_per_block 32
# (assumptions: the engines' documented defaults at the time of writing; a page is only the rounding of a request).
BLOCK_TOKENS = {"vllm": 16, "sglang": 1, "trtllm": 32}
# SGLang reserves new_token_ratio x (remaining max_new_tokens) of every running request before admitting a prompt;
# the ratio starts high and decays towards a floor while nothing is retracted.  One constant stands for it here, a
# fraction so that a request's reserve is integer arithmetic and a cohort's sum is closed-form (``_DecodeCohort``).
SGLANG_NEW_TOKEN_RATIO = Fraction(2, 5)
# SGLang counts at most this many of a request's remaining output tokens when it checks room for it
# (CLIP_MAX_NEW_TOKENS, default 4096, env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION; PrefillAdder.add_one_req in
# python/sglang/srt/managers/schedule_policy.py, https://github.com/sgl-project/sglang).
SGLANG_CLIP_MAX_NEW_TOKENS = 4096
MAX_REQUESTS = 100_000
# Speculative decoding: the expected tokens a step emits are carried per request in fixed point (1/2^20 of a token),
# so that whole tokens come out deterministically and a run of steps is closed-form in integers.
SPEC_ONE = 1 << 20


def emitted(credit: int, steps: int, per_step: int) -> tuple[int, int]:
    """Whole tokens ``steps`` speculative steps emit and the fraction carried after them (``credit`` and
    ``per_step`` in 1/SPEC_ONE of a token): a run of steps emits what the steps one by one would."""
    total = credit + steps * per_step
    return total // SPEC_ONE, total % SPEC_ONE


def steps_to(tokens: int, credit: int, per_step: int) -> int:
    """The fewest speculative steps that emit ``tokens`` tokens (at least one step)."""
    return max(1, -(-(tokens * SPEC_ONE - credit) // per_step))
_BIG = 1 << 60


class Load(BaseModel):
    """The load a served request is measured at (the plan's workload fields, resolved)."""

    mode: Literal["closed", "poisson", "burst"]
    concurrency: int | None = Field(description="closed loop: clients; poisson: cap on requests in flight")
    request_rate: float | None = Field(description="poisson: requests per second")
    num_requests: int
    input_len_range: tuple[int, int]
    output_len_range: tuple[int, int]
    seed: int
    dataset: str | None = Field(None, description="lengths drawn from this dataset's histogram (``_Lengths``)")
    means: tuple[int, int] = Field((0, 0), description="with a dataset: the mean lengths its draws are scaled to")

    def describe(self) -> str:
        lens = (f"{_span(self.input_len_range)} in / {_span(self.output_len_range)} out tokens")
        if self.dataset:
            name = LENGTH_DATASETS[self.dataset]["name"]
            lens = f"{name} lengths, mean {self.means[0]} in / {self.means[1]} out tokens"
        if self.mode == "closed":
            who = f"{self.concurrency} client" + ("" if self.concurrency == 1 else "s")
            return f"closed loop of {who}, {self.num_requests} requests, {lens}"
        if self.mode == "burst":
            return f"burst of {self.num_requests} requests sent at once, {lens}"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        return f"Poisson arrivals at {self.request_rate:g} req/s{cap}, {self.num_requests} requests, {lens}"


def _span(r: tuple[int, int]) -> str:
    return str(r[0]) if r[0] == r[1] else f"{r[0]}-{r[1]}"


def load_mode(wl: Workload) -> Literal["closed", "poisson", "burst"]:
    """The load's kind: Poisson arrivals at a request rate, a burst of num_requests with no clients, else a closed
    loop of clients."""
    if wl.request_rate is not None:
        return "poisson"
    return "burst" if wl.concurrency is None and wl.num_requests is not None else "closed"


def resolve_load(plan: Plan, dp: int) -> Load:
    """The workload's load with its defaults: a closed loop of ``batch_size`` clients per DP replica, 10 requests
    per client (InferenceX's ``--num-prompts``), clamped to [64, 4000]."""
    wl = plan.workload
    ins = tuple(wl.input_len_range or (wl.input_len, wl.input_len))
    outs = tuple(wl.output_len_range or (wl.output_len, wl.output_len))
    mode = load_mode(wl)
    conc = wl.concurrency if mode == "poisson" else None if mode == "burst" else wl.concurrency or wl.batch_size * dp
    base = conc or 64
    n = wl.num_requests or min(4000, max(64, 10 * base))
    extra: dict[str, object] = {}
    if wl.length_dataset:
        draw = _Lengths(wl.length_dataset, (wl.input_len, wl.output_len))
        ins, outs = draw.spans
        extra = {"dataset": wl.length_dataset, "means": (wl.input_len, wl.output_len)}
    return Load(mode=mode, concurrency=conc, request_rate=wl.request_rate, num_requests=min(n, MAX_REQUESTS),
                input_len_range=(ins[0], ins[1]), output_len_range=(outs[0], outs[1]), seed=wl.seed, **extra)


class _Lengths:
    """Prompt and output lengths drawn from a dataset's histograms (``knowledge/serving/length_datasets.json``):
    a bin by its count, a length uniformly inside it, scaled so that the draws' expected mean is the stated one.

    Why: a benchmark harness that replays a dataset (``vllm bench serve --dataset-name sharegpt``) sends mostly
    short prompts and a long tail; a uniform range of the same mean has neither the tail that fills a step nor the
    many short requests, and the imbalance between DP ranks comes from exactly that spread."""

    def __init__(self, name: str, means: tuple[int, int]) -> None:
        ds = LENGTH_DATASETS[name]
        self.parts = []
        for key, mean in (("input", means[0]), ("output", means[1])):
            edges, counts = ds[f"{key}_bin_edges_tokens"], ds[f"{key}_counts"]
            total = sum(counts)
            centre = sum(c * (edges[i] + edges[i + 1] - 1) / 2 for i, c in enumerate(counts)) / total
            self.parts.append((edges, list(itertools.accumulate(counts)), total, mean / centre))

    @property
    def spans(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The shortest and longest lengths a draw can give, prompt and output."""
        lo = [max(1, round(edges[0] * scale)) for edges, _, _, scale in self.parts]
        hi = [max(1, round((edges[-1] - 1) * scale)) for edges, _, _, scale in self.parts]
        return (lo[0], hi[0]), (lo[1], hi[1])

    def draw(self, rng: random.Random) -> tuple[int, int]:
        out = []
        for edges, cum, total, scale in self.parts:
            i = bisect.bisect_right(cum, rng.randrange(total))
            out.append(max(1, round(rng.randint(edges[i], edges[i + 1] - 1) * scale)))
        return out[0], out[1]


# ---------------------------------------------------------------------------------------------- results
class Stat(BaseModel):
    mean: float
    p50: float
    p90: float
    p99: float


class SimResult(BaseModel):
    """What a benchmark client prints for the run (all times in ms)."""

    load: str = Field(description="the simulated load, in words")
    engine: str = Field(description="the scheduler simulated (vllm, sglang or trtllm)")
    requests: int
    ttft_ms: Stat
    tpot_ms: Stat
    itl_ms: Stat = Field(description="gaps between consecutive tokens, pooled over every token (weighted by token)")
    e2e_ms: Stat
    queue_ms: Stat = Field(description="from sending to the first step that schedules the request")
    duration_ms: float = Field(description="the run's wall time, first send to last token (a burst's makespan)")
    output_tokens_per_s: float = Field(description="whole deployment")
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float = Field(description="1000 / mean TPOT")
    request_throughput_per_s: float
    mean_in_flight: float = Field(description="time-averaged requests sent and not finished (Little's law: "
                                              "request throughput x mean E2E)")
    max_running: int = Field(description="most requests running at once on one engine (a replica, or one "
                                         "attention-DP rank of it)")
    mean_running: float = Field(description="time-averaged requests running (holding KV) per engine (a replica, "
                                            "or one attention-DP rank of it)")
    preemptions: int = Field(description="requests preempted (vLLM) or retracted (SGLang) for lack of KV pages")
    kv_cache_tokens: int = Field(description="tokens the KV cache of one (decode) replica holds")
    kv_peak_fraction: float = Field(description="largest share of an engine's KV pages in use (a replica, or one "
                                              "attention-DP rank of it)")
    steps: int = Field(description="engine steps simulated, summed over every engine (replica or attention-DP rank)")


# ---------------------------------------------------------------------------------------------- cost surface
def _grid_below(x: float, ratio: float) -> tuple[int, int]:
    """Neighbouring points of a grid of integers 1, 2, ... growing by ``ratio`` that bracket ``x``."""
    if x <= 1:
        return 1, 1
    k = math.floor(math.log(x) / math.log(ratio))
    lo = max(1, round(ratio ** k))
    hi = max(lo + 1, round(ratio ** (k + 1)))
    while hi < x:  # rounding at small k
        lo, hi = hi, max(hi + 1, round(hi * ratio))
    while lo > x:
        lo -= 1
    return lo, hi


@dataclass(frozen=True)
class SpecPricing:
    """A speculative plan's step (``tools.estimate.speculative``): the verifying pass's sub-DAGs (k + 1 tokens per
    sequence), the drafter's passes and the bytes each reads relative to a plain step, the expected tokens per step."""

    verify: FastEstimator
    read_fraction: float
    passes: int
    tokens_per_step: float
    topk: int = 1  # a draft tree's branches: each draft pass decodes topk tokens per sequence


def spec_pricing(plan: Plan, fast: FastEstimator) -> SpecPricing | None:
    """How the simulator prices a speculative plan's decode steps (None: no speculation)."""
    sd = plan.speculative
    if sd is None:
        return None
    verify = FastEstimator(plan, fast.layout, fast.eff, fast.model.overlap, decode_queries=sd.num_draft_tokens + 1)
    return SpecPricing(verify, draft_read_fraction(plan, fast.layout.phases["decode"].tp), draft_passes(plan),
                       acceptance(sd).tokens_per_step, sd.topk)


@dataclass(frozen=True)
class PrefixPricing:
    """What a replica's prefix cache serves (module doc): the tokens every prompt shares, or the share of each
    prompt its own earlier turns left cached; ``cascade``: the engine reads a prefix every running request shares
    once per decode step (vLLM's cascade attention)."""

    shared_tokens: int
    hit_fraction: float
    cascade: bool = False


# vLLM's cascade attention (``use_cascade_attention`` in vllm/v1/attention/backends/flash_attn.py, the FlashAttention
# and FlashInfer backends; MLA backends and sliding-window layers do not run it): used only when the prefix every
# scheduled request shares is at least 256 tokens and at least 8 requests run
CASCADE_MIN_PREFIX_TOKENS = 256
CASCADE_MIN_REQUESTS = 8


def prefix_pricing(plan: Plan) -> PrefixPricing | None:
    """How the simulator serves a plan's prefix caching (None: no hit is possible, the plain engine)."""
    pc = plan.prefix_caching
    if pc is None or not pc.enabled or not (pc.hit_rate or pc.shared_prefix_len):
        return None
    shared = 0 if pc.hit_rate else pc.shared_prefix_len or 0
    spec = plan.spec
    cascade = POLICY_OF_ENGINE.get(plan.engine, "vllm") == "vllm" and shared >= CASCADE_MIN_PREFIX_TOKENS \
        and spec.attention != "mla" and not spec.sliding_window_layers and spec.sliding_window is None
    return PrefixPricing(shared, pc.hit_rate or 0.0, cascade)


class StepCost:
    """Time of one engine step of any token mix, from the plan's priced sub-DAGs (module doc); cached per shape.
    With ``spec``, a decode step is the speculative step (``speculative_step``: verify + draft passes)."""

    def __init__(self, fast: FastEstimator, shared_ms: float, ctx_lo: int, ctx_hi: int,
                 spec: SpecPricing | None = None, decode_shared: Callable[[int], float] | None = None) -> None:
        self.fast = fast
        self.spec = spec
        self._var_v: dict[int, FastEstimator] = {}  # the verifying pass per context
        self.pre_fixed_ms = fast.eff["step_overhead_ms"] + shared_ms
        self._decode_shared = decode_shared  # weight reads (ms) a decode step of d sequences shares with a prompt
        self._shared: dict[int, float] = {}
        self.ctx = (max(1, ctx_lo), max(ctx_lo + 1, ctx_hi))
        self._var: dict[tuple[int, int], FastEstimator] = {}
        self._dec: dict[int, tuple[float, float]] = {}
        self._pre: dict[tuple[int, int], float] = {}
        self._line: dict[int, tuple[float, float]] = {}  # decode_line per batch, interpolation included
        self._pass: dict[tuple[int, int], float] = {}  # prefill_ms per (tokens, chunks)
        self._kv_read: float | None = None

    def _at(self, input_len: int, output_len: int) -> FastEstimator:
        key = (input_len, output_len)
        hit = self._var.get(key)
        if hit is None:
            hit = self._var[key] = self.fast.for_lengths(input_len, output_len)
        return hit

    def _decode_line(self, d: int) -> tuple[float, float]:
        hit = self._dec.get(d)
        if hit is None:
            c0, c1 = self.ctx
            t0 = self._at(c0, 1).phase_ms("decode", d)
            t1 = self._at(c1, 1).phase_ms("decode", d)
            if self.spec is not None:
                t0, t1 = self._spec_ms(c0, d, t0), self._spec_ms(c1, d, t1)
            slope = max(0.0, (t1 - t0) / (c1 - c0))
            hit = self._dec[d] = (t0 - slope * (c0 + 0.5), slope)
        return hit

    def _spec_ms(self, ctx: int, d: int, plain_ms: float) -> float:
        sp = self.spec
        assert sp is not None
        v = self._var_v.get(ctx)
        if v is None:
            v = self._var_v[ctx] = sp.verify.for_lengths(ctx, 1)
        tree = self._at(ctx, 1).phase_ms("decode", d * sp.topk) if sp.topk > 1 else None
        return speculative_step(plain_ms, v.phase_ms("decode", d), sp.read_fraction, sp.passes,
                                sp.tokens_per_step, tree).step_ms

    def decode_line(self, d: int) -> tuple[float, float]:
        """(intercept, slope per token of mean context) of a decode step of ``d`` sequences."""
        hit = self._line.get(d)
        if hit is None:
            hit = self._line[d] = self._interpolated_line(d)
        return hit

    def _interpolated_line(self, d: int) -> tuple[float, float]:
        lo, hi = _grid_below(d, 1.25)
        a0, b0 = self._decode_line(lo)
        if hi == lo or d == lo:
            return a0, b0
        a1, b1 = self._decode_line(hi)
        w = (d - lo) / (hi - lo)
        return a0 + w * (a1 - a0), b0 + w * (b1 - b0)

    def decode_ms(self, d: int, ctx_sum: float) -> float:
        a, b = self.decode_line(d)
        return a + b * ctx_sum / d

    def _prefill(self, k: int, length: int) -> float:
        key = (k, length)
        hit = self._pre.get(key)
        if hit is None:
            hit = self._pre[key] = self._at(length, 1).phase_ms("prefill", k)
        return hit

    def prefill_ms(self, tokens: int, chunks: int) -> float:
        """A pass over ``chunks`` prompt chunks holding ``tokens`` tokens (their mean length interpolated)."""
        hit = self._pass.get((tokens, chunks))
        if hit is None:
            hit = self._pass[(tokens, chunks)] = self._interpolated_pass(tokens, chunks)
        return hit

    def _interpolated_pass(self, tokens: int, chunks: int) -> float:
        k = max(1, chunks)
        mean = tokens / k
        lo, hi = _grid_below(mean, 1.15)
        t0 = self._prefill(k, lo)
        if hi == lo or mean == lo:
            return t0
        t1 = self._prefill(k, hi)
        return t0 + (mean - lo) / (hi - lo) * (t1 - t0)

    def cached_attention_ms(self, cached: int, tokens: int) -> float:
        """What a chunk of ``tokens`` after ``cached`` cached tokens costs beyond a prompt of ``tokens`` tokens: a
        prompt of ``cached + tokens`` less one of ``cached`` (that chunk's work with the cached keys in its
        attention) less the plain chunk's work beyond the pass's fixed costs; and at least one read of the cached
        keys and values, which the attention kernel streams however few queries the chunk has (a prefix hit whose
        uncached suffix is a few tokens is bound by that read, as a decode step is): the plain decode step's cost
        per token of context."""
        work = self.prefill_ms(cached + tokens, 1) - self.prefill_ms(cached, 1) \
            - (self.prefill_ms(tokens, 1) - self.pre_fixed_ms)
        return max(0.0, work, self.kv_read_ms_per_token() * cached)

    def kv_read_ms_per_token(self) -> float:
        """A one-sequence plain decode step's cost per token of context: reading that token's keys and values."""
        if self._kv_read is None:
            c0, c1 = self.ctx
            self._kv_read = max(0.0, (self._at(c1, 1).phase_ms("decode", 1) - self._at(c0, 1).phase_ms("decode", 1))
                                / (c1 - c0))
        return self._kv_read

    def riding_fixed_ms(self, d: int) -> float:
        """What a prompt's pass shares with the decode step of ``d`` sequences it rides in: the step overhead and the
        weights that step reads (all of them, but for an MoE's routed experts only those its tokens reach)."""
        if self._decode_shared is None:
            return self.pre_fixed_ms
        hit = self._shared.get(d)
        if hit is None:
            hit = self._shared[d] = self.fast.eff["step_overhead_ms"] + self._decode_shared(d)
        return hit

    def step_ms(self, tokens: int, chunks: int, d: int, ctx_sum: float) -> float:
        if tokens <= 0:
            return self.decode_ms(d, ctx_sum) if d else 0.0
        pre = self.prefill_ms(tokens, chunks)
        if not d:
            return pre
        return self.decode_ms(d, ctx_sum) + max(0.0, pre - self.riding_fixed_ms(d))


# ---------------------------------------------------------------------------------------------- requests
@dataclass(eq=False, slots=True)
class _Req:
    rid: int
    client: int
    in_len: int
    out_len: int
    sent_ms: float = 0.0
    ready_ms: float = 0.0  # when it reached the engine it waits in
    prompt: int = 0  # tokens to (re)compute before the next token: the prompt, plus generated tokens after preemption
    computed: int = 0  # of ``prompt``
    generated: int = 0
    blocks: int = 0
    scheduled_ms: float = -1.0
    first_ms: float = -1.0
    last_ms: float = 0.0
    done_ms: float = -1.0
    prefilled: bool = False  # disaggregated: its prompt is done on the prefill pool
    base: int = 0  # tokens generated before the current prompt was (re)formed: they are part of ``prompt``
    credit: int = 0  # speculative decoding: the fraction of a token carried to the next step, in 1/SPEC_ONE
    shared: int = 0  # prefix caching: pages of ``blocks`` that are the shared prefix's (held once, not its own)


@dataclass(slots=True)
class _Plan:
    """One planned engine iteration: an explicit step or a run of ``k`` decode-only steps."""

    start_ms: float
    end_ms: float
    k: int = 1
    a_ms: float = 0.0  # decode run: step i (0-based) takes a_ms + b_ms * i
    b_ms: float = 0.0
    chunks: list[tuple[_Req, int]] = field(default_factory=list)
    decodes: list[_Req] = field(default_factory=list)
    grown: bool = False  # every running request takes part and has the pages of its tokens after the step
    pooled: bool = False  # formed by the engine's _DecodeCohort: its requests advance there, not one by one
    # an attention-DP rank's explicit step, timed by its group (``_lockstep``): its decodes' time, priced as every
    # rank holding them, its prompt tokens, and the attention its chunks pay over keys already cached
    dec_ms: float = 0.0
    tokens: int = 0
    cached_ms: float = 0.0


class _Engine:
    """One replica's scheduler, KV pages and clock (``role``: both, prefill or decode)."""

    def __init__(self, idx: int, role: str, policy: Policy, cost: StepCost, budget: int, max_seqs: int,
                 kv_tokens: int, ahead: bool, spec_q: int = 0, width: int = 1,
                 prefix: PrefixPricing | None = None, copies: int = 1) -> None:
        self.idx, self.role, self.policy, self.cost = idx, role, policy, cost
        # an attention-DP rank: its step is priced as ``copies`` ranks holding its mix (``_rank_groups``), and the
        # ranks of its group (``peers``, None alone) step together
        self.copies = copies
        self.peers: list[_Engine] | None = None
        self.inbound = 0  # requests routed here and not yet arrived (a prompt's KV in transit): waiting, to a router
        # speculative decoding: tokens a decode step emits, in 1/SPEC_ONE (0: one token, no speculation), and the
        # step budget a decode takes (k + 1: vLLM and TensorRT-LLM count the verified drafts)
        self.spec_q, self.width = spec_q, width
        self.budget, self.max_seqs, self.ahead = max(1, budget), max(1, max_seqs), ahead
        self.bs = BLOCK_TOKENS[policy]
        self.capacity = max(1, kv_tokens // self.bs)
        self.free = self.capacity
        self.waiting: deque[_Req] = deque()
        self.running: list[_Req] = []
        self.plan: _Plan | None = None
        self.version = 0
        self.prev_start = -1.0  # start of the step before the one being formed
        self.steps = 0
        self.preemptions = 0
        self.max_running = 0
        self.peak_used = 0
        self.run_area = 0.0  # running requests x ms
        # at least the pages the running requests' held tokens lack (sum of pages(held) - blocks over those short):
        # decode runs allocate no pages, so it grows by ceil(k / bs) a request per run; 0 after a step that grew all
        self.lacking = 0
        # (summed context, fewest tokens left) of the running requests, all decoding, as the pass that processed the
        # last step left them (non-speculative only): the next decode run needs no pass of its own
        self.summary: tuple[int, int] | None = None
        # SGLang's admission reserve (pages) of the running requests outside the cohort, kept as they join and leave
        # (a request's share is 0 once its output is complete, so one that finishes leaves nothing); None once a
        # step advanced them, summed again when an admission asks (a Poisson trickle asks far less often than every
        # step); 0 while the cohort holds every running request and sums theirs in closed form
        self.reserving = policy == "sglang" and role != "prefill"
        self.reserve: int | None = 0
        # a decode pool's running requests held as one cohort (no speculation): steps cost O(log n), not O(n)
        pooled = (role == "decode" or role == "both" and policy != "sglang") and prefix is None
        self.cohort = _DecodeCohort(self.bs, policy != "trtllm") if pooled and not spec_q else None
        # prefix caching (None: no hits): the shared prefix's cached pages (0: not cached), the running requests
        # referencing them, and how many of the free pages are that unreferenced, evictable prefix; a decode
        # replica is given one only where it reuses a shared prefix it received (``_setup``)
        self.prefix = prefix
        self.prefix_pages = self.prefix_refs = self.evictable = 0

    # -- tokens a decode step emits
    def emits(self, r: _Req, k: int) -> int:
        """Tokens ``r`` emits in its next ``k`` decode steps (speculative: the carried fraction plus ``k`` steps'
        expected tokens, whole tokens only, capped at its output)."""
        if not self.spec_q:
            return k
        return min(r.out_len - r.generated, emitted(r.credit, k, self.spec_q)[0])

    def _most(self, k: int) -> int:
        """The most tokens any request emits in ``k`` decode steps."""
        return k if not self.spec_q else (SPEC_ONE - 1 + k * self.spec_q) // SPEC_ONE

    def _steps_left(self, r: _Req) -> int:
        """Decode steps until ``r``'s output is complete."""
        left = r.out_len - r.generated
        return steps_to(left, r.credit, self.spec_q) if self.spec_q else left

    def advance(self, r: _Req, k: int) -> None:
        """``r`` took part in ``k`` decode steps: its tokens (the last step may overshoot: capped at the output)."""
        if not self.spec_q:
            r.generated += k
            return
        n, r.credit = emitted(r.credit, k, self.spec_q)
        r.generated = min(r.out_len, r.generated + n)

    # -- KV pages
    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    @staticmethod
    def _held(r: _Req) -> int:
        """Tokens in ``r``'s KV: its (re)computed prompt and the tokens generated since."""
        return r.computed + r.generated - r.base

    def _release(self, r: _Req) -> None:
        self.free += r.blocks - r.shared
        r.blocks = 0
        if r.shared:
            r.shared = 0
            self.prefix_refs -= 1
            if not self.prefix_refs:  # unreferenced: cached, free, evictable
                self.free += self.prefix_pages
                self.evictable = self.prefix_pages

    # -- prefix caching (module doc)
    def _settle(self) -> None:
        """Evict the unreferenced shared prefix once allocations have taken the free pages it stood in."""
        if self.evictable > self.free:
            self.prefix_pages = self.evictable = 0

    def _cached(self, r: _Req) -> tuple[int, int]:
        """(tokens of ``r``'s prompt found cached, pages of them that are the shared prefix's)."""
        pf, bs = self.prefix, self.bs
        assert pf is not None
        most = (r.prompt - 1) // bs  # whole pages, never the last token
        if pf.hit_fraction:
            return min(most, int(pf.hit_fraction * r.in_len) // bs) * bs, 0
        self._settle()
        pages = min(most, self.prefix_pages)
        return pages * bs, pages

    def _prefix_need(self, r: _Req) -> int:
        """Free pages admitting ``r`` asks for (``_gate``), less the shared prefix's pages running requests hold."""
        _, pages = self._cached(r)
        held = pages if self.prefix_refs else 0  # a referenced prefix's pages are not among the free
        return self._pages(self._gate(r)) - held

    def read_ctx(self, d: int, ctx: int) -> int:
        """The context ``d`` decodes read in a step: their summed context, less the copies of the shared prefix
        that vLLM's cascade attention does not read (it attends every query to a prefix all running requests hold
        once, then to each request's own suffix, and merges the two)."""
        pf = self.prefix
        if pf is None or not pf.cascade or not self.prefix_refs or self.prefix_refs != len(self.running) \
                or len(self.running) < CASCADE_MIN_REQUESTS or self.prefix_pages * self.bs < CASCADE_MIN_PREFIX_TOKENS:
            return ctx
        return ctx - (d - 1) * self.prefix_pages * self.bs

    def prefix_hit(self, r: _Req) -> None:
        """Admitting ``r``: its cached tokens count as computed, the shared prefix's pages become its first."""
        cached, pages = self._cached(r)
        r.computed = cached
        if pages:
            if not self.prefix_refs:
                self.free -= self.prefix_pages
                self.evictable = 0
            self.prefix_refs += 1
            r.shared = r.blocks = pages

    def prefix_computed(self, r: _Req) -> None:
        """``r`` computed past the shared prefix while none was cached: its pages become the cached prefix."""
        pf = self.prefix
        assert pf is not None
        pages = pf.shared_tokens // self.bs
        if pages and not self.prefix_pages and not r.shared and r.computed >= pages * self.bs:
            self.prefix_pages, self.prefix_refs, r.shared = pages, 1, pages

    def _reserve_whole(self, r: _Req) -> None:
        """TensorRT-LLM (GUARANTEED_NO_EVICT): the pages of a request's prompt and whole output, taken at admission
        (beside the shared prefix's it references)."""
        own = self._pages(r.in_len + r.out_len) - r.shared
        self.free -= own
        r.blocks = own + r.shared

    def _grow(self, r: _Req, tokens: int) -> bool:
        """Pages for ``r`` to hold ``tokens`` tokens; False when the cache has too few."""
        if tokens <= r.blocks * self.bs or self.policy == "trtllm":  # fits its pages (TensorRT-LLM: reserved)
            return True
        need = -(-tokens // self.bs) - r.blocks
        if need <= self.free:
            if need > 0:
                self.free -= need
                r.blocks += need
            return True
        return False

    # -- admission
    def eligible(self, r: _Req, start: float) -> bool:
        cutoff = self.prev_start if self.ahead and self.prev_start >= 0 else start
        return r.ready_ms <= cutoff + 1e-9

    def reserve_of(self, left: int) -> int:
        """Pages SGLang reserves for a running request with ``left`` (>= 0) output tokens to go."""
        return -(-(left * SGLANG_NEW_TOKEN_RATIO.numerator // SGLANG_NEW_TOKEN_RATIO.denominator) // self.bs)

    def _sglang_reserve(self) -> int:
        if self.reserve is None:
            p, q, bs = SGLANG_NEW_TOKEN_RATIO.numerator, SGLANG_NEW_TOKEN_RATIO.denominator, self.bs
            self.reserve = sum(-(-((r.out_len - r.generated) * p // q) // bs) for r in self.running)
        cohort = self.cohort
        return self.reserve + (cohort.reserve() if cohort is not None and cohort.active else 0)

    def _gate(self, r: _Req) -> int:
        """Tokens a waiting request must find room for before it is admitted (module doc): vLLM its whole current
        sequence, SGLang that and its remaining output (clipped), TensorRT-LLM its prompt and whole output; on a
        decode replica the KV that arrived and the next token (TensorRT-LLM: the whole request)."""
        if self.role == "decode":  # TensorRT-LLM reserves the whole request there too, as on an aggregated replica
            return r.in_len + (r.out_len if self.policy == "trtllm" else r.generated + 1)
        if self.policy == "trtllm":
            return r.in_len + r.out_len
        if self.policy == "sglang" and self.role != "prefill":
            return r.prompt + min(r.out_len - r.generated, SGLANG_CLIP_MAX_NEW_TOKENS)
        return r.prompt

    def _admissible(self, r: _Req) -> bool:
        if len(self.running) >= self.max_seqs:
            return False
        need = self._prefix_need(r) if self.prefix is not None else self._pages(self._gate(r))
        if self.policy == "sglang" and self.role != "prefill":
            need += self._sglang_reserve()
        return need <= self.free

    # -- forming a step
    def form(self, start: float) -> _Plan | None:
        """The next iteration starting at ``start`` (None: nothing to run)."""
        summary, self.summary = self.summary, None
        if not self.running and not self.waiting:
            return None
        if self.cohort is not None and self.cohort.active:
            pooled = self.cohort.form(self, start)
            if pooled is not None:
                return pooled
            self.cohort.release(self)  # a step it cannot form (pages or budget short): request by request
        if self.prefix is not None:
            p = self._form(start, summary)
            self._settle()
            return p
        return self._form(start, summary)

    def _form(self, start: float, summary: tuple[int, int] | None) -> _Plan | None:
        if self.role != "prefill" and self.running and self._nothing_to_admit(start):
            run = self._decode_run(start, summary)
            if run is not None:
                return run
        if self.policy == "sglang":
            return self._form_sglang(start)
        return self._form_budget(start)

    def _nothing_to_admit(self, start: float) -> bool:
        """No waiting request this step could admit (with no unfinished prompt, only decodes can run)."""
        for r in self.waiting:
            if not self.eligible(r, start):
                return False  # it becomes eligible after one step: plan one step at a time
        if self.waiting:
            return not self._admissible(self.waiting[0])
        return True

    def _decode_run(self, start: float, summary: tuple[int, int] | None = None) -> _Plan | None:
        """A run of decode-only steps up to the next event; None if a prompt is unfinished or the next step finds
        no page (then an explicit step is formed, which preempts).  ``summary``: the running requests' context and
        fewest tokens left, when the last step's pass found every one decoding."""
        rs = self.running
        d, bs = len(rs), self.bs
        if summary is not None:
            ctx, k = summary
        else:
            ctx, k = 0, _BIG
            for r in rs:  # one pass: no unfinished prompt, the context, the fewest tokens left
                if r.computed < r.prompt:
                    return None
                g = r.generated
                ctx += r.in_len + g
                if r.out_len - g < k:
                    k = r.out_len - g
        if self.spec_q:
            k = min(self._steps_left(r) for r in rs)
        # k more tokens each need at most ceil(k / bs) pages beyond their held tokens' pages: when that and the
        # pages lacking fit, the exact count (_steps_of_pages) does too
        most = self._most(k)
        if self.policy != "trtllm" and d * -(-most // bs) + self.lacking > self.free:
            self.lacking = sum(max(0, -(-(r.computed + r.generated - r.base) // bs) - r.blocks) for r in rs)
            if d * -(-most // bs) + self.lacking > self.free:
                k = min(k, self._steps_of_pages(rs, k))
        if self.waiting and self.policy == "sglang":
            k = min(k, 1)
        if k < 1:
            return None
        a, b = self.cost.decode_line(d * self.copies)
        a_ms, b_ms = a + b * self.read_ctx(d, ctx) / d, b
        if self.spec_q:  # the context grows by the expected tokens per step
            b_ms = b * self.spec_q / SPEC_ONE
        end = start + k * a_ms + b_ms * k * (k - 1) / 2
        return _Plan(start, end, k=k, a_ms=a_ms, b_ms=b_ms, decodes=rs[:])

    def _steps_of_pages(self, rs: list[_Req], limit: int) -> int:
        """Decode steps (at most ``limit``, the fewest tokens any of ``rs`` has left) the free pages allow before one
        of ``rs`` needs a page that is not there."""
        bs, free = self.bs, self.free

        def fits(k: int) -> bool:  # the new pages k more tokens of each need, counted until they exceed the free
            need = 0
            for r in rs:
                extra = -(-(r.computed + r.generated - r.base + self.emits(r, k)) // bs) - r.blocks
                if extra > 0:
                    need += extra
                    if need > free:
                        return False
            return True
        if fits(limit):  # the usual case: pages to spare until the next request ends
            return limit
        if not fits(1):
            return 0
        lo, hi = 1, 2
        while hi <= limit and fits(hi):
            lo, hi = hi, hi * 2
        hi = min(hi, limit + 1)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _preempt(self, victim: _Req) -> None:
        self.running.remove(victim)
        if self.reserving and self.reserve is not None:
            self.reserve -= self.reserve_of(victim.out_len - victim.generated)
        self._release(victim)
        victim.prompt = victim.in_len + victim.generated
        victim.base = victim.generated
        victim.computed = 0
        self.waiting.appendleft(victim)
        self.preemptions += 1

    def _form_budget(self, start: float) -> _Plan:
        """vLLM V1 and TensorRT-LLM: running first, then waiting, under one token budget."""
        budget = self.budget
        chunks: list[tuple[_Req, int]] = []
        decodes: list[_Req] = []
        preempted = False
        running, bs, trt, width = self.running, self.bs, self.policy == "trtllm", self.width
        i, ctx = 0, 0
        for r in running:  # the leading decodes (most of a step), one token each, as long as pages are free
            if budget <= 0 or r.computed < r.prompt:
                break
            if not trt:
                held = r.computed + r.generated - r.base + (self.emits(r, 1) if self.spec_q else 1)
                if held > r.blocks * bs:  # _grow inlined
                    need = -(-held // bs) - r.blocks
                    if need > self.free:
                        break  # the loop below preempts
                    self.free -= need
                    r.blocks += need
            decodes.append(r)
            ctx += r.in_len + r.generated
            budget -= width
            i += 1
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.prompt - r.computed, budget) if r.computed < r.prompt else self.emits(r, 1)
            # within its pages (the common decode) it needs none; else _grow finds pages or preempts the last
            fits = trt or r.computed + r.generated - r.base + n <= r.blocks * bs
            while not fits and not self._grow(r, self._held(r) + n):
                victim = running[-1]
                self._preempt(victim)
                preempted = True
                if victim is r:
                    break
            else:
                if r.computed < r.prompt:
                    chunks.append((r, n))
                    budget -= n
                else:
                    decodes.append(r)
                    ctx += r.in_len + r.generated
                    budget -= width
                i += 1
                continue
            break
        if not preempted:
            ctx += self._admit(start, budget, chunks, decodes)
        plan = self._priced(start, chunks, decodes, ctx)
        plan.grown = len(decodes) + len(chunks) == len(running)
        return plan

    def _admit(self, start: float, budget: int, chunks: list[tuple[_Req, int]], decodes: list[_Req]) -> int:
        """vLLM V1 and TensorRT-LLM: waiting requests admitted first come, first served into what is left of the
        step's budget (their chunks, or a decode replica's arrived requests' decodes); the context they add."""
        ctx, width = 0, self.width
        while self.waiting and budget > 0 and self.eligible(self.waiting[0], start):
            r = self.waiting[0]
            if not self._admissible(r):
                break
            self.waiting.popleft()
            if self.role == "decode":  # its KV arrived: it decodes from its generated first token
                if self.prefix is not None:  # the shared prefix this replica holds: not received again
                    self.prefix_hit(r)
                r.computed = r.prompt
                if self.policy == "trtllm":
                    self._reserve_whole(r)
                self._grow(r, self._held(r) + self.emits(r, 1))
                if self.prefix is not None:  # the first to arrive: its prefix pages become the cached prefix
                    self.prefix_computed(r)
                self.running.append(r)
                decodes.append(r)
                ctx += r.in_len + r.generated
                budget -= width
                continue
            if self.prefix is not None:
                self.prefix_hit(r)
            n = min(r.prompt - r.computed, budget)
            if self.policy == "trtllm":
                self._reserve_whole(r)
            else:
                self._grow(r, r.computed + n)
            self.running.append(r)
            chunks.append((r, n))
            budget -= n
        return ctx

    def _form_sglang(self, start: float) -> _Plan:
        """SGLang: a prefill batch whenever one can be formed, else a decode step (retracting when pages run out)."""
        budget = self.budget
        chunks: list[tuple[_Req, int]] = []
        for r in self.running:  # the chunked request carries over first
            if r.computed < r.prompt and budget > 0:
                n = min(r.prompt - r.computed, budget)
                if self._grow(r, r.computed + n):
                    chunks.append((r, n))
                    budget -= n
        while self.waiting and budget > 0 and self.eligible(self.waiting[0], start) and self.role != "decode":
            r = self.waiting[0]
            if not self._admissible(r):
                break
            self.waiting.popleft()
            if self.prefix is not None:
                self.prefix_hit(r)
            n = min(r.prompt - r.computed, budget)
            self._grow(r, r.computed + n)
            self.running.append(r)
            if self.reserving and self.reserve is not None:
                self.reserve += self.reserve_of(r.out_len - r.generated)
            chunks.append((r, n))
            budget -= n
        if chunks:
            return self._priced(start, chunks, [])
        if self.role == "decode":  # admit arrived KV, then decode everyone
            while self.waiting and self.eligible(self.waiting[0], start) and self._admissible(self.waiting[0]):
                r = self.waiting.popleft()
                r.computed = r.prompt
                self._grow(r, self._held(r))
                self.running.append(r)
                if self.reserve is not None:
                    self.reserve += self.reserve_of(r.out_len - r.generated)
        decodes = [r for r in self.running if r.computed >= r.prompt]
        bs, spec = self.bs, self.spec_q
        # the pages each decode's next token(s) take (a retraction frees the victim's, leaves the others' as they are)
        needs = [max(0, -(-(r.computed + r.generated - r.base + (self.emits(r, 1) if spec else 1)) // bs) - r.blocks)
                 for r in decodes]
        need = sum(needs)
        while decodes and need > self.free:
            victim = decodes.pop()  # retract the newest
            need -= needs.pop()
            self._preempt(victim)
        for r, n in zip(decodes, needs, strict=True):
            if n:
                r.blocks += n
        self.free -= need
        plan = self._priced(start, [], decodes)
        plan.grown = len(decodes) == len(self.running)  # every running request decodes with its next pages
        return plan

    def _priced(self, start: float, chunks: list[tuple[_Req, int]], decodes: list[_Req], ctx: int | None = None,
                ) -> _Plan:
        """The step's plan, timed by the cost surface (``ctx``: the decodes' summed context, when known)."""
        tokens = sum(n for _, n in chunks)
        if ctx is None:
            ctx = sum(r.in_len + r.generated for r in decodes)
        if self.prefix is not None and decodes:
            ctx = self.read_ctx(len(decodes), ctx)
        if self.copies > 1:  # an attention-DP rank: its group times the step (``_lockstep``)
            g = self.copies
            cached = sum(self.cost.cached_attention_ms(r.computed, n) for r, n in chunks if r.computed)
            plan = _Plan(start, start, chunks=chunks, decodes=decodes, tokens=tokens, cached_ms=cached,
                         dec_ms=self.cost.decode_ms(len(decodes) * g, ctx * g) if decodes else 0.0)
            plan.end_ms = start + _group_step_ms([plan], self.cost, g)  # alone; its group's step replaces it
            return plan
        ms = self.cost.step_ms(tokens, len(chunks), len(decodes), ctx) if (chunks or decodes) else 0.0
        # a chunk attends to every key its prompt already has in the cache: found cached, or computed by its earlier
        # chunks (a long prompt split over steps pays its quadratic attention as one pass would)
        ms += sum(self.cost.cached_attention_ms(r.computed, n) for r, n in chunks if r.computed)
        return _Plan(start, start + ms, chunks=chunks, decodes=decodes)

    # -- running an iteration
    def step_end(self, p: _Plan, i: int) -> float:
        """End of the ``i``-th step (1-based) of a decode run."""
        return p.start_ms + i * p.a_ms + p.b_ms * i * (i - 1) / 2

    def truncate(self, at_ms: float) -> bool:
        """Cut a planned decode run at the first step ending at or after ``at_ms``; True if it changed."""
        p = self.plan
        if p is None or p.k <= 1 or p.end_ms <= at_ms:
            return False
        lo, hi = 1, p.k
        while lo < hi:
            mid = (lo + hi) // 2
            if self.step_end(p, mid) >= at_ms:
                hi = mid
            else:
                lo = mid + 1
        if lo >= p.k:
            return False
        p.k, p.end_ms = lo, self.step_end(p, lo)
        return True


class _DecodeCohort:
    """The decoding requests of a replica held as one cohort: every running request of a disaggregated decode replica,
    or the leading running requests of an aggregated vLLM or TensorRT-LLM replica whose prompts are computed (the
    rest of its running list, prompts being computed in chunks, stays request by request; no speculation).

    Why: every step of such a replica decodes all of them, one token each, so their state moves in lockstep.  A
    request is kept as ``K`` (tokens held = K + clock) and ``F`` (it finishes when the clock reaches F); the pages
    every request holds after the last step that grew them are ceil((K + grown) / bs) (less the pages a prompt just
    computed lacks for its sampled token, kept apart until the next step grows them), so the pages of all of them at
    any clock are summed from the count of requests per residue of K modulo the page size.  SGLang's
    admission reserve, floor((p (F - clock) + s) / Q) per request (``SGLANG_NEW_TOKEN_RATIO`` = p/q rounded up to
    pages: Q = q * bs), is summed the same way from the count of requests per residue of F modulo Q.  A step then
    costs a heap operation per request that ends instead of a pass over all of them, and forms and ends exactly as
    ``_Engine._form_budget`` (or ``_form_sglang``), ``_decode_run`` and the run loop would (the same pages, prices,
    gaps and order of completion).  When a step needs more pages than are free (a preemption or retraction) or more
    tokens than the budget, the requests get their own state back (``release``) and the engine goes on request by
    request; it gathers them again (``resume``) after a step that grew every running request.  A prompt computed by
    a step joins at the end (prompts finish in the running list's order, as the budget goes to the first ones).
    """

    def __init__(self, bs: int, paged: bool) -> None:
        self.bs = bs
        self.paged = paged  # False: TensorRT-LLM, whose requests hold their pages from admission (none to grow)
        self.active = True
        self.clock = 0  # decode steps taken by every request in the cohort
        self.grown = 0  # clock at which every request's pages were last grown to its held tokens
        self.last_ms = 0.0  # when every request in the cohort emitted its last token
        self.heap: list[tuple[int, int, int, _Req]] = []  # (F, admission order, K, request)
        self.k_sum = 0
        self.k_pages = 0  # sum of K // bs
        self.residues = [0] * bs  # requests per K mod bs
        self.res_q = SGLANG_NEW_TOKEN_RATIO.denominator * bs
        self.f_sum = 0  # sum of F
        self.f_residues = [0] * self.res_q  # requests per F mod res_q
        self.order = 0
        self.short: dict[int, int] = {}  # pages a request lacks of ceil((K + grown) / bs), by admission order
        self.short_sum = 0
        self.fresh = 0  # requests admitted by the step being formed (their first token ends it)

    def _pages(self, x: int) -> int:
        """Pages the cohort's requests hold at ``x`` tokens past their K: the sum of ceil((K + x) / bs), i.e. of
        (K // bs) + (x - 1) // bs + 1, plus one for each K whose residue r has r + (x - 1) % bs >= bs."""
        b, c = divmod(x - 1, self.bs)
        return self.k_pages + len(self.heap) * (b + 1) + (sum(self.residues[self.bs - c:]) if c else 0)

    def reserve(self) -> int:
        """SGLang's admission reserve of the cohort's requests: the sum of ``_Engine.reserve_of`` their tokens left."""
        p, q, c, n = SGLANG_NEW_TOKEN_RATIO.numerator, self.res_q, self.clock, len(self.heap)
        s = SGLANG_NEW_TOKEN_RATIO.denominator * (self.bs - 1)
        rest = sum(m * ((p * (f - c) + s) % q) for f, m in enumerate(self.f_residues) if m)
        return (p * (self.f_sum - n * c) + n * s - rest) // q

    def join(self, r: _Req) -> None:
        """``r`` joins at the end (the running list's order: a decode replica's arrived request, or a prompt the step
        that just ended computed); the pages it lacks of ceil((K + grown) / bs) (a just-computed prompt's sampled
        token may have none yet) are kept apart until the next step grows them."""
        k = r.computed + r.generated - r.base - self.clock
        f = r.out_len - r.generated + self.clock
        heapq.heappush(self.heap, (f, self.order, k, r))
        short = -(-(k + self.grown) // self.bs) - r.blocks if self.paged else 0
        if short:
            self.short[self.order] = short
            self.short_sum += short
        self.order += 1
        self.k_sum += k
        self.k_pages += k // self.bs
        self.residues[k % self.bs] += 1
        self.f_sum += f
        self.f_residues[f % self.res_q] += 1

    def _own(self, entry: tuple[int, int, int, _Req]) -> _Req:
        """A request's own fields, as processing it one by one would have left them."""
        f, order, k, r = entry
        r.generated = r.out_len - (f - self.clock)
        if self.paged:
            r.blocks = -(-(k + self.grown) // self.bs) - self.short.get(order, 0)
        r.last_ms = self.last_ms
        return r

    def _grew(self) -> None:
        """A step grew every request's pages to its held tokens and one more."""
        self.grown = self.clock + 1
        if self.short:
            self.short.clear()
            self.short_sum = 0

    def form(self, e: _Engine, start: float) -> _Plan | None:
        """The step ``e`` forms (None: one the cohort cannot form)."""
        if len(self.heap) == len(e.running) and e.running and e._nothing_to_admit(start):
            run = self._run(e, start)
            if run is not None:
                return run
        return self._step_sglang(e, start) if e.policy == "sglang" else self._step(e, start)

    def _run(self, e: _Engine, start: float) -> _Plan | None:
        """``_decode_run``: decode-only steps until the first request ends or a page is missing."""
        d = len(self.heap)
        k = self.heap[0][0] - self.clock
        base = self._pages(self.grown) - self.short_sum
        if self.paged and self._pages(self.clock + k) - base > e.free:
            if self._pages(self.clock + 1) - base > e.free:
                return None
            lo, hi = 1, k  # the most steps the free pages allow
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._pages(self.clock + mid) - base <= e.free:
                    lo = mid
                else:
                    hi = mid
            k = lo
        if e.waiting and e.policy == "sglang":
            k = 1
        ctx = self.k_sum + d * self.clock
        a, b = e.cost.decode_line(d * e.copies)
        a_ms = a + b * ctx / d
        end = start + k * a_ms + b * k * (k - 1) / 2
        return _Plan(start, end, k=k, a_ms=a_ms, b_ms=b, decodes=e.running[:], pooled=True)

    def _step(self, e: _Engine, start: float) -> _Plan | None:
        """``_form_budget`` with the cohort's requests decoding first: the rest of the running list (aggregated:
        prompts being computed) takes its chunks, then waiting requests are admitted.  None (nothing changed) when a
        page or the budget is short or a decode follows a prompt: request by request then."""
        d = len(self.heap)
        grow = self._pages(self.clock + 1) - self._pages(self.grown) + self.short_sum if self.paged else 0
        if d > e.budget or grow > e.free:
            return None
        budget, free = e.budget - d, e.free - grow
        running = e.running
        chunks: list[tuple[_Req, int]] = []
        if len(running) > d:  # aggregated: the prompts being computed, as _form_budget's second loop takes them
            bs, pages = e.bs, []
            for i in range(d, len(running)):
                if budget <= 0:
                    break
                r = running[i]
                if r.computed >= r.prompt:
                    return None
                n = min(r.prompt - r.computed, budget)
                need = max(0, -(-(r.computed + r.generated - r.base + n) // bs) - r.blocks) if self.paged else 0
                if need > free:
                    return None  # it would preempt
                free -= need
                pages.append(need)
                chunks.append((r, n))
                budget -= n
            for (r, _), need in zip(chunks, pages, strict=True):
                r.blocks += need
        e.free = free
        self._grew()
        decodes = running[:d]
        ctx = self.k_sum + d * self.clock + (e._admit(start, budget, chunks, decodes) if e.waiting else 0)
        for i in range(d, len(decodes)):  # a decode replica's arrived requests decode from this step
            self.join(decodes[i])
        self.fresh = len(decodes) - d
        plan = e._priced(start, chunks, decodes, ctx)
        plan.grown = len(decodes) + len(chunks) == len(running)
        plan.pooled = True
        return plan

    def _step_sglang(self, e: _Engine, start: float) -> _Plan | None:
        """``_form_sglang`` of a decode replica: arrived requests join while their pages and the reserve fit, then
        every running request decodes; None (nothing changed) when the decodes' pages are short (it retracts)."""
        free, reserve, n = e.free, self.reserve(), len(self.heap)
        joining = []
        for r in e.waiting:
            if not e.eligible(r, start) or n + len(joining) >= e.max_seqs \
                    or e._pages(r.in_len + r.generated + 1) + reserve > free:
                break
            free -= e._pages(r.prompt + r.generated - r.base)
            reserve += e.reserve_of(r.out_len - r.generated)
            joining.append(r)
        grow = self._pages(self.clock + 1) - self._pages(self.grown) + self.short_sum
        grow += sum(e._pages(r.in_len + r.generated + 1) - e._pages(r.in_len + r.generated) for r in joining)
        if grow > free:
            return None
        e.free = free - grow
        ctx = self.k_sum + n * self.clock
        self._grew()
        for r in joining:
            e.waiting.popleft()
            r.computed = r.prompt
            r.blocks = e._pages(e._held(r) + 1)
            e.running.append(r)
            ctx += r.in_len + r.generated
            self.join(r)
        self.fresh = len(joining)
        plan = e._priced(start, [], e.running[:], ctx)
        plan.grown = plan.pooled = True
        return plan

    def complete(self, p: _Plan, t: float, rec: _Recorder) -> list[_Req]:
        """End ``p`` at ``t``: the requests that finish, in the order of the running list."""
        if p.k > 1:
            rec.run(p.a_ms, p.b_ms, p.k, len(p.decodes))
        else:
            old = len(p.decodes) - self.fresh
            if old:
                rec.singles.append((t - self.last_ms, old))
            for r in p.decodes[old:]:
                if r.first_ms < 0:
                    r.first_ms = t
                else:  # re-admitted after a preemption: the gap since its last token
                    rec.singles.append((t - r.last_ms, 1))
            self.fresh = 0
        self.clock += p.k
        self.last_ms = t
        done = []
        while self.heap and self.heap[0][0] <= self.clock:
            entry = heapq.heappop(self.heap)
            self.k_sum -= entry[2]
            self.k_pages -= entry[2] // self.bs
            self.residues[entry[2] % self.bs] -= 1
            self.f_sum -= entry[0]
            self.f_residues[entry[0] % self.res_q] -= 1
            done.append(entry)
        done.sort(key=lambda x: x[1])
        out = [self._own(x) for x in done]
        if self.short:
            for x in done:
                self.short_sum -= self.short.pop(x[1], 0)
        return out

    def release(self, e: _Engine) -> None:
        """Give every running request its own state back; the engine goes on request by request."""
        for entry in self.heap:
            self._own(entry)
        # the pages the cohort's held tokens lack (the rest of the running list, prompts, lack none)
        e.lacking = self._pages(self.clock) - self._pages(self.grown) + self.short_sum
        if e.reserving:
            e.reserve = None  # summed from the requests' own state when an admission asks
        self._clear()
        self.active = False

    def _clear(self) -> None:
        self.heap.clear()
        self.k_sum = self.k_pages = self.f_sum = self.short_sum = 0
        self.short.clear()
        self.residues = [0] * self.bs
        self.f_residues = [0] * self.res_q

    def resume(self, e: _Engine, t: float) -> None:
        """Gather the running requests again, the leading ones whose prompts are computed (each decoded or
        computed its prompt in the step that ended at ``t``); not when one holds more pages than its tokens fill."""
        self.clock = self.grown = 0
        self.last_ms = t
        for r in e.running:
            if r.computed < r.prompt:
                break
            if self.paged and r.blocks > -(-(r.computed + r.generated - r.base) // self.bs):
                self._clear()
                return
            self.join(r)
        self.active = True
        e.reserve = 0  # the cohort's sum stands for it (SGLang: a decode replica, every running request)


class _Recorder:
    """Inter-token gaps: single tokens' gaps as (gap, how many) (the requests of a step that last emitted at the
    same instant share one gap, recorded once), decode runs' as (gap, tokens) pairs."""

    def __init__(self) -> None:
        self.singles: list[tuple[float, int]] = []  # (gap, tokens of one token each)
        self.itl: list[tuple[float, float]] = []  # (gap, tokens)

    def run(self, a_ms: float, b_ms: float, k: int, d: int) -> None:
        if k <= 2:
            for i in range(k):
                self.itl.append((a_ms + b_ms * i, float(d)))
            return
        h = k // 2
        self.itl.append((a_ms + b_ms * (h - 1) / 2, float(d * h)))
        self.itl.append((a_ms + b_ms * (h + (k - 1)) / 2, float(d * (k - h))))

    def counts(self) -> Counter[tuple[float, float]]:
        """How many times each (gap, tokens) pair was recorded."""
        out: Counter[tuple[float, float]] = Counter(self.itl)
        for gap, c in self.singles:
            out[(gap, 1.0)] += c
        return out


# ---------------------------------------------------------------------------------------------- the simulation
def _lengths(rng: random.Random, span: tuple[int, int]) -> int:
    return span[0] if span[0] == span[1] else rng.randint(span[0], span[1])


def _arrivals(load: Load, rng: random.Random) -> list[float]:
    """Open-loop send times (ms): gamma(1) gaps rescaled so the last lands at N / rate, as vllm bench does."""
    n, rate = load.num_requests, load.request_rate or 1.0
    gaps = [rng.expovariate(1.0) for _ in range(n)]
    total = sum(gaps) or 1.0
    scale = n / rate * 1e3 / total
    out, t = [], 0.0
    for g in gaps:
        t += g * scale
        out.append(t)
    return out


def _stat(xs: list[float]) -> Stat:
    """Mean and percentiles with numpy's linear interpolation, as the benchmark clients compute them; the mean sums
    the sorted values (the order fixes the float rounding, so the bytes of the result)."""
    if not xs:
        return Stat(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    ys = sorted(xs)
    mean = sum(ys) / float(len(ys))

    def q(f: float) -> float:
        pos = f * (len(ys) - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)

    return Stat(mean=mean, p50=q(0.5), p90=q(0.9), p99=q(0.99))


def _weighted_stat(counts: Counter[tuple[float, float]]) -> Stat:
    """Token-weighted mean and percentiles of (value, weight) pairs given as counts of each distinct pair: the
    sorted distinct pairs stand for their repeats (weights are whole token counts, so cumulative weights are exact
    and a repeat's value is its pair's)."""
    if not counts:
        return Stat(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    # the pairs are distinct, so ordering the items by pair alone is ordering them: about twice as fast as comparing
    # (pair, count) items (2x on a 1,024-client run's 8,000 pairs)
    pairs = sorted(counts.items(), key=itemgetter(0))
    total = sum(w * c for (_, w), c in pairs)
    mean = sum(itertools.chain.from_iterable(itertools.repeat(x * w, c) for (x, w), c in pairs)) / total
    ends = list(itertools.accumulate(w * c for (_, w), c in pairs))

    def q(f: float) -> float:
        return pairs[min(len(pairs) - 1, bisect.bisect_left(ends, f * total - 1e-9))][0][0]

    return Stat(mean=mean, p50=q(0.5), p90=q(0.9), p99=q(0.99))


@dataclass
class _Setup:
    policy: Policy
    engines: list[_Engine]
    prefill_pool: list[int]  # engine indices receiving new requests
    decode_pool: list[int]  # disaggregated: engines receiving transferred KV (else empty)
    transfer_ms: float
    gpus: int
    kv_tokens: int
    transfer_fixed_ms: float = 0.0  # of transfer_ms, the link latency a transfer pays whatever its size
    ranks: tuple[int, int] = (1, 1)  # engines (attention-DP ranks) per replica of the prefill (or only) and decode pool


def _kv_tokens(plan: Plan, room: int, context: int) -> int:
    """A replica's KV pages in tokens: the engine option, else the room the memory model leaves, and at least one
    sequence of the pool's context (a plan that does not fit in memory is still estimated, as if one did)."""
    return plan.engine_options.kv_cache_tokens or max(room, context)


def _state_room(plan: Plan, kv_tokens: int, mem_batch: int, seqs: int, context: int) -> tuple[int, int]:
    """(KV tokens, sequences) of a replica's cache once recurrent layers' fixed state per sequence is set aside.

    The states are held for the running sequences whatever their length (vLLM's hybrid allocator keeps a state's
    pages per running request), so at most ``mem_batch`` run (the count whose KV and state fit at the plan's
    context; a static cap, where vLLM would admit more shorter ones) and their states come out of the room, which
    keeps at least one sequence of the plan's ``context``."""
    state = state_tokens(plan)
    if not state or plan.engine_options.kv_cache_tokens:
        return kv_tokens, seqs
    running = max(1, min(seqs, mem_batch))
    return max(context, kv_tokens - running * state), running


def _setup(plan: Plan, fast: FastEstimator, load: Load, eff: dict[str, float], decode_fast: FastEstimator | None,
           ) -> _Setup:
    policy = POLICY_OF_ENGINE.get(plan.engine, "vllm")
    layout = fast.layout
    seqs = plan.engine_options.max_num_seqs or default_max_seqs(plan, policy)
    budget = int(eff["prefill_chunk_tokens"])
    ahead = eff["scheduler_ahead_steps"] >= 0.5
    mem = memory_report(plan, layout)
    ins, outs = load.input_len_range, load.output_len_range
    pp = layout.pools["prefill"].pp
    shared = weights_ms(plan, eff, mem.weights_bytes, pp)
    sp = spec_pricing(plan, fast)
    pf = prefix_pricing(plan)
    cost = StepCost(fast, shared, ins[0], ins[1] + outs[1], sp, riding_ms(plan, layout, eff, mem.weights_bytes, pp))
    # speculative: each decode step emits the expected accepted tokens and takes k + 1 of a token budget
    spec_q = round(sp.tokens_per_step * SPEC_ONE) if sp else 0
    width = plan.speculative.num_draft_tokens + 1 if plan.speculative and policy != "sglang" else 1
    room = kv_cache_tokens(plan, layout)
    if not layout.disaggregated:
        groups = layout.phases["decode"].attn_dp
        context = plan.workload.input_len + plan.workload.output_len
        kv, seqs = _state_room(plan, _kv_tokens(plan, room["both"], context), mem.max_batch_size_that_fits, seqs,
                               context)
        # a rank holds its share of the replica's KV, and at least one sequence of the plan's context (``_kv_tokens``)
        rank_kv = max(kv // groups, context)
        engines = [_Engine(i, "both", policy, cost, budget, seqs, rank_kv, ahead, spec_q, width, pf, groups)
                   for i in range(layout.dp * groups)]
        _rank_groups(engines, groups)
        return _Setup(policy, engines, list(range(len(engines))), [], 0.0, layout.gpus_needed, kv, ranks=(groups, 1))
    p_pool, d_pool = layout.pools["prefill"], layout.pools["decode"]
    p_groups, d_groups = layout.phases["prefill"].attn_dp, layout.phases["decode"].attn_dp
    kv_p = _kv_tokens(plan, room["prefill"], plan.workload.input_len)
    kv_d = _kv_tokens(plan, room["decode"], plan.workload.input_len + plan.workload.output_len)
    assert decode_fast is not None
    dcost = StepCost(decode_fast, 0.0, ins[0], ins[1] + outs[1], sp)
    n_p, n_d = p_pool.dp * p_groups, d_pool.dp * d_groups
    kv_pr = max(kv_p // p_groups, plan.workload.input_len)
    kv_dr = max(kv_d // d_groups, plan.workload.input_len + plan.workload.output_len)
    engines = [_Engine(i, "prefill", policy, cost, budget, seqs, kv_pr, ahead, prefix=pf, copies=p_groups)
               for i in range(n_p)]
    # vLLM's decode instance looks its local prefix cache up before it pulls a prompt's KV and pulls only the rest
    # (module doc), so a shared prefix it already holds is neither received nor held again
    d_pf = pf if policy == "vllm" and pf is not None and pf.shared_tokens else None
    decoders = [_Engine(n_p + j, "decode", policy, dcost, budget, seqs, kv_dr, ahead, spec_q, width, d_pf, d_groups)
                for j in range(n_d)]
    _rank_groups(engines, p_groups)
    _rank_groups(decoders, d_groups)
    hand = kv_handoff(plan, layout, eff, 1).seconds_per_batch * 1e3
    fixed = kv_handoff(plan, layout, eff, 0).seconds_per_batch * 1e3
    return _Setup(policy, engines + decoders, list(range(n_p)), list(range(n_p, n_p + n_d)), hand,
                  layout.gpus_needed, kv_d, fixed, (p_groups, d_groups))


def _rank_groups(engines: list[_Engine], groups: int) -> None:
    """Tie each replica's attention-DP ranks (``groups`` consecutive engines) into one lockstep group.

    Why: with attention-DP each group of GPUs runs its own scheduler, queue and KV (vLLM: one engine core per DP
    rank, ``--max-num-seqs`` per rank, docs/serving/data_parallel_deployment.md; SGLang: one scheduler per DP rank
    behind its data-parallel controller, notes §4 [VDP][SDPC]), but the MoE layers between the attention layers
    gather every rank's tokens, so a rank cannot start its next step before the slowest one has finished this one
    (vLLM: idle ranks run dummy forward passes while any rank is busy [VDP]).  Each rank's step is priced as
    ``groups`` ranks all holding its own mix (the balanced replica's step when every rank holds the same), and the
    group's step takes the slowest rank's time (``run``: ``plan_group``)."""
    if groups <= 1:
        return
    for i in range(0, len(engines), groups):
        peers = engines[i:i + groups]
        for e in peers:
            e.peers = peers


def simulate(plan: Plan, load: Load | None = None, eff: dict[str, float] | None = None,
             overlap: bool | None = None, prices: PriceBook | None = None) -> SimResult:
    """Simulate the plan's serving engine under ``load`` (default: the workload's, ``resolve_load``); ``prices``:
    phase prices shared with other plans' simulations (a search's), which price the same phases once.  Without it
    the run keeps its own, so that the two step loops of a closed loop (``_burst_then_spread``) price each step
    shape once between them."""
    fast = FastEstimator(plan, eff=eff, overlap=overlap, prices=prices or PriceBook())
    decode_fast = None
    if fast.layout.disaggregated:
        decode_fast = fast  # the fast estimator prices each phase on its own pool's layout
    load = load or resolve_load(plan, fast.layout.dp if not fast.layout.disaggregated else
                                fast.layout.pools["decode"].dp)
    setup = _setup(plan, fast, load, fast.eff, decode_fast)
    _check_fits(setup, load)
    g = symmetric_shares(setup, load)
    if _phases_spread(load):
        return _burst_then_spread(plan, fast, load, setup, _setup(plan, fast, load, fast.eff, decode_fast), g, g)
    if g > 1:
        return run(plan, fast, load, _one_share(setup, g), copies=g)
    return run(plan, fast, load, setup)


def _phases_spread(load: Load) -> bool:
    """A closed loop of several clients sending requests of one fixed length, for more than one round: the loads
    whose later rounds ``_burst_then_spread`` builds.  Drawn lengths are left to the step loop: their requests end
    in different steps, which pulls the clients apart (slowly where the lengths differ by a few per cent)."""
    fixed = load.input_len_range[0] == load.input_len_range[1] and load.output_len_range[0] == load.output_len_range[1]
    return load.mode == "closed" and fixed and 1 < (load.concurrency or 0) < load.num_requests


def _burst_then_spread(plan: Plan, fast: FastEstimator, load: Load, first: _Setup, rest: _Setup, g: int,
                       copies: int) -> SimResult:
    """A fixed-length closed loop as a benchmark client measures it: the first round is a burst, the rounds after
    it a closed loop whose clients' phases are spread over a round.

    Why: the clients send every client's first request at once after their warm-up has drained (AIPerf waits for all
    warm-up responses before profiling and then drops all credits at once, ai-dynamo/aiperf docs/tutorials/warmup.md
    at 13992dbd96879c76e9584f2e8dc05db49bee6cf2; perf_analyzer joins its warm-up threads,
    ``ConcurrencyManager::PerformWarmup`` in triton-inference-server/perf_analyzer src/concurrency_manager.cc at
    263c5f6e0c7a6c15472a54409174981f67930cfe; ``vllm bench serve`` gathers its warm-up tasks before the main run,
    vllm/benchmarks/serve.py), so the first round is a burst.  After it, a step loop with identical requests stays
    in convoys (requests that got their first token in one step end in one step, come back together and fill one
    long mixed step again), which real clients and frontends, handling responses and requests one at a time, break
    up: NIM's Llama-3.3-70B TP2 sweeps (200/200 at 150 and 250 clients) measure 196 and 264 ms, a burst round plus
    spread rounds gives 179 and 266 ms, the convoy 648 and 738 ms.  The rounds after
    the first are therefore simulated as a closed loop whose clients start at seeded points of one stratum each of
    the burst round's duration; its requests follow the burst's, and the two runs' requests, gaps, steps and
    in-flight areas add up (Little's law holds over the whole, and no more than the clients are in flight).  The
    phases are drawn for one of the ``g`` identical shares (``symmetric_shares``) and each is sent to every share,
    so that simulating one share (``copies`` = ``g``) or the whole deployment (``copies`` = 1) agree."""
    share = (load.concurrency or 1) // g
    one, two = (first, rest) if copies == 1 else (_one_share(first, copies), _one_share(rest, copies))
    burst = _events(plan, fast, load.model_copy(update={"num_requests": load.concurrency}), one, copies)
    round_ms = max(r.done_ms for r in burst[0])
    rng = random.Random(f"phases {load.seed}")
    phases = [(i + rng.random()) * round_ms / share for i in range(share)]
    later = load.model_copy(update={"num_requests": load.num_requests - (load.concurrency or 0)})
    spread = _events(plan, fast, later, two, copies, [t for t in phases for _ in range(g // copies)])
    # the later rounds follow the burst's, less the spread run's mean start: in the client, every client's next
    # request leaves the moment its previous one ends; the spread run's own ramp-up would add that idle time
    shift = round_ms - sum(phases) / share
    for r in spread[0]:
        r.sent_ms += shift
        r.first_ms += shift
        r.done_ms += shift
        r.scheduled_ms += shift
    rec = _Recorder()
    for part in (burst[1], spread[1]):
        rec.singles += part.singles
        rec.itl += part.itl
    for a, b in zip(one.engines, two.engines, strict=True):
        b.steps += a.steps
        b.preemptions += a.preemptions
        b.run_area += a.run_area
        b.peak_used = max(a.peak_used, b.peak_used)
        b.max_running = max(a.max_running, b.max_running)
    return _result(load, two, burst[0] + spread[0], rec, burst[2] + spread[2], copies)


def symmetric_shares(setup: _Setup, load: Load) -> int:
    """How many identical shares the deployment and its load split into: the largest ``g`` dividing the prefill (or
    only) pool's replicas, the decode pool's, the clients and the requests, when every request has the same lengths
    and all are sent at t = 0 or by a closed loop (Poisson arrivals dealt round-robin are not alike per share).
    Why: replicas with identical schedulers, caches and request streams run identical steps, so one share simulated
    and counted ``g`` times is the deployment; it is the balanced split a load balancer keeps (vLLM's DP client
    routes to the least loaded engine, SGLang's shortest_queue; notes §4), whereas dealing a whole deployment's
    requests round-robin in event order only adds which replica's step ends first at a shared instant."""
    fixed = load.input_len_range[0] == load.input_len_range[1] and load.output_len_range[0] == load.output_len_range[1]
    if load.mode == "poisson" or not fixed:
        return 1
    return math.gcd(len(setup.prefill_pool) // setup.ranks[0], len(setup.decode_pool) // setup.ranks[1],
                    load.concurrency or 0, load.num_requests)


def _one_share(setup: _Setup, g: int) -> _Setup:
    """The first ``1/g`` of each pool's replicas, whole with their ranks (GPUs and KV per replica kept: per-GPU
    figures are the whole's)."""
    n_p, n_d = len(setup.prefill_pool) // g, len(setup.decode_pool) // g
    engines = [setup.engines[i] for i in setup.prefill_pool[:n_p] + setup.decode_pool[:n_d]]
    for i, e in enumerate(engines):
        e.idx = i
    return _Setup(setup.policy, engines, list(range(n_p)), list(range(n_p, n_p + n_d)), setup.transfer_ms,
                  setup.gpus, setup.kv_tokens, setup.transfer_fixed_ms, setup.ranks)


def _check_fits(setup: _Setup, load: Load) -> None:
    """A request the KV cache of its replica cannot hold even alone would wait forever (engines refuse it): say so
    instead of simulating a queue that never drains."""
    for e in setup.engines:
        need = load.input_len_range[1] + (0 if e.role == "prefill" else load.output_len_range[1])
        if e._pages(need) > e.capacity:
            raise PdagInputError(
                "workload", f"a request of up to {need:,} tokens does not fit the KV cache of one replica "
                f"({e.capacity * e.bs:,} tokens once the weights are held), so the engine could never run it",
                "shorter requests, fp8 KV (kv_dtype), more GPUs per replica, or engine_options.kv_cache_tokens")


class _Dispatch:
    """Which engine (DP replica, or attention-DP rank) a new request goes to, as the engine's front end chooses.

    * vLLM: the least loaded rank by ``4 x waiting + running``, scanned from rank 0, the first of equal scores
      (``DPLBAsyncMPClient.get_core_engine_for_request`` in ``vllm/v1/engine/core_client.py``, notes §4 [VCC]; the
      client bumps its own waiting count as it routes, so between the coordinator's 100 ms snapshots its counts
      are the engines' own, which is what is used here);
    * SGLang: round-robin, the data-parallel controller's ``--load-balance-method`` default
      (``python/sglang/srt/managers/data_parallel_controller.py``, notes §4 [SDPC]); disaggregated decode ranks are
      dealt the same way (the router pairs prefill and decode workers at random [SPD]);
    * TensorRT-LLM: round-robin (an assumption: its attention-DP request balancing was not read).

    Why: requests of different lengths or arrivals leave ranks unevenly loaded, and under attention-DP the slowest
    rank sets every rank's step (``_rank_groups``)."""

    def __init__(self, policy: Policy, engines: list[_Engine]) -> None:
        self.engines = engines
        self.least = policy == "vllm"
        self.turn: dict[int, int] = {}  # round-robin position per pool (keyed by its first engine)

    def __call__(self, pool: list[int]) -> _Engine:
        engines = self.engines
        if len(pool) == 1:
            return engines[pool[0]]
        if self.least:
            best, score = pool[0], _BIG
            for i in pool:
                e = engines[i]
                s = 4 * (len(e.waiting) + e.inbound) + len(e.running)
                if s < score:
                    best, score = i, s
            return engines[best]
        n = self.turn.get(pool[0], 0)
        self.turn[pool[0]] = n + 1
        return engines[pool[n % len(pool)]]


def _lockstep(peers: list[_Engine], t: float) -> float | None:
    """Plan one step (or run of decode steps) of an attention-DP group at ``t``; its end (None: no rank has work).

    Every rank forms its own step (idle ranks none).  A step's decodes take the slowest rank's time, each rank's
    priced as the whole group holding its mix (attention reads each rank's own KV; the experts' weights are read
    once a step whatever the split), while the prompt chunks of all ranks share the experts' GEMMs, so their work
    beyond the step's fixed costs is the pass over all of them, as on one scheduler (``StepCost.step_ms``); a
    chunk's attention over keys already cached is its own rank's, the slowest rank's counted.  A balanced group
    (every rank the same mix) is priced exactly as one scheduler over all of it.  The group takes as many steps as
    the shortest run, and a run's step ``i`` takes the largest intercept plus the largest slope times ``i`` (the
    exact maximum when one rank is the slowest throughout, the usual case).  Each rank's plan then carries the
    group's timing."""
    plans = []
    for e in peers:
        e.plan = e.form(t)
        if e.plan is not None:
            plans.append(e.plan)
    if not plans:
        return None
    k = min(p.k for p in plans)
    if k > 1:  # every rank is in a run of decode steps
        a = max(p.a_ms for p in plans)
        b = max(p.b_ms for p in plans)
        end = t + k * a + b * k * (k - 1) / 2
        for p in plans:
            p.k, p.a_ms, p.b_ms, p.end_ms = k, a, b, end
        return end
    step = _group_step_ms(plans, peers[0].cost, peers[0].copies)
    for p in plans:
        if p.k > 1:
            p.k, p.a_ms = 1, step
        p.end_ms = t + step
    return t + step


def _group_step_ms(plans: list[_Plan], cost: StepCost, copies: int) -> float:
    """One step of an attention-DP group of ``copies`` ranks that formed ``plans`` (``_lockstep``): the slowest
    rank's decodes (priced as every rank holding them), the pass over every rank's prompt chunks beyond what it
    shares with those decodes, the slowest rank's cached attention."""
    dec = max(p.a_ms + p.dec_ms for p in plans)  # a run's first step (a_ms), or an explicit step's decodes
    tokens = sum(p.tokens for p in plans)
    step = dec
    if tokens:
        pre = cost.prefill_ms(tokens, sum(len(p.chunks) for p in plans))
        d = max(len(p.decodes) for p in plans) * copies
        step = dec + max(0.0, pre - cost.riding_fixed_ms(d)) if dec else pre
    return step + max(p.cached_ms for p in plans)


def run(plan: Plan, fast: FastEstimator, load: Load, setup: _Setup, copies: int = 1,
        starts: list[float] | None = None) -> SimResult:
    """The event loop (module doc) and the client's figures of it; with ``copies``, ``setup`` is one of that many
    identical shares of the deployment (``symmetric_shares``): it serves its share of ``load`` and the result counts
    every share.  A closed loop's clients send their first requests at ``starts`` (ms; default all at 0)."""
    return _result(load, setup, *_events(plan, fast, load, setup, copies, starts), copies)


def _events(plan: Plan, fast: FastEstimator, load: Load, setup: _Setup, copies: int = 1,
            starts: list[float] | None = None) -> tuple[list[_Req], _Recorder, float]:
    """The event loop of ``run``: the requests, the gaps and the in-flight area its figures are made of.  Apart so
    that the two runs of a closed loop (``_burst_then_spread``) make one set of figures, not three (the statistics
    over thousands of requests and gaps were a fifth of a 1,024-client search's simulations)."""
    rng = random.Random(load.seed)
    if copies > 1:
        load = load.model_copy(update={"num_requests": load.num_requests // copies,
                                       "concurrency": load.concurrency // copies if load.concurrency else None})
    n = load.num_requests
    if load.dataset:
        draw = _Lengths(load.dataset, load.means)
        lens = [draw.draw(rng) for _ in range(n)]
    else:
        lens = [(_lengths(rng, load.input_len_range), _lengths(rng, load.output_len_range)) for _ in range(n)]
    engines = setup.engines
    heap: list[tuple[float, int, int, int, int]] = []  # (time, order, kind, engine or request, version)
    order = 0
    ARRIVE, STEP, SEND = 0, 1, 2
    reqs: list[_Req] = []
    pick = _Dispatch(setup.policy, engines)
    rec = _Recorder()
    in_flight = 0
    client_queue: deque[int] = deque()
    sent = 0
    area = 0.0
    last_t = 0.0

    def push(t: float, kind: int, who: int, version: int = 0) -> None:
        nonlocal order
        heapq.heappush(heap, (t, order, kind, who, version))
        order += 1

    def plan_engine(e: _Engine, t: float) -> None:
        if e.peers is not None:
            plan_group(e.peers, t)
            return
        p = e.form(t)
        e.plan = p
        e.version += 1
        if p is not None:
            push(p.end_ms, STEP, e.idx, e.version)

    def plan_group(peers: list[_Engine], t: float) -> None:
        """Every rank of an attention-DP group forms its step at ``t``; the group's step lasts as long as its
        slowest rank's (``_lockstep``), and one event ends it, under the first rank's index and version."""
        lead = peers[0]
        end = _lockstep(peers, t)
        lead.version += 1
        if end is not None:
            push(end, STEP, lead.idx, lead.version)

    def deliver(e: _Engine, r: _Req, t: float) -> None:
        r.ready_ms = t
        e.waiting.append(r)
        if e.peers is not None:  # the group's step (or run) in progress is cut where a lone engine's would be
            live = [x for x in e.peers if x.plan is not None]
            if not live:
                plan_group(e.peers, t)
            elif [x.truncate(t) for x in live][0]:
                lead = e.peers[0]
                lead.version += 1
                push(live[0].plan.end_ms, STEP, lead.idx, lead.version)  # type: ignore[union-attr]
            return
        if e.plan is None:
            plan_engine(e, t)
        elif e.truncate(t):
            e.version += 1
            push(e.plan.end_ms, STEP, e.idx, e.version)

    def send(t: float) -> None:
        nonlocal sent, in_flight
        i = sent
        sent += 1
        in_flight += 1
        r = _Req(i, i, lens[i][0], lens[i][1], sent_ms=t, prompt=lens[i][0])
        reqs.append(r)
        deliver(pick(setup.prefill_pool), r, t)

    waiting_starts = 0  # closed loop: clients whose first request is not sent yet
    if load.mode == "closed" and starts:
        waiting_starts = min(len(starts), n)
        for t0 in starts[:waiting_starts]:
            push(t0, SEND, -1)
    elif load.mode == "closed":
        for _ in range(min(load.concurrency or 1, n)):
            send(0.0)
    elif load.mode == "burst":
        for _ in range(n):
            send(0.0)
    else:
        for i, t in enumerate(_arrivals(load, rng)):
            push(t, SEND, i)

    def finish(r: _Req, t: float) -> None:
        nonlocal in_flight
        r.done_ms = t
        in_flight -= 1
        if load.mode == "closed" and sent + waiting_starts < n:
            send(t)
        elif load.mode == "poisson" and client_queue:
            client_queue.popleft()
            send(t)

    def process(e: _Engine, t: float) -> None:
        """The end of ``e``'s planned step (or run) at ``t``: tokens, first tokens, completions, hand-offs."""
        p = e.plan
        assert p is not None
        e.steps += p.k
        e.lacking = 0 if p.grown else e.lacking + len(p.decodes) * -(-e._most(p.k) // e.bs)
        e.run_area += (len(p.decodes) + len(p.chunks)) * (t - p.start_ms)
        e.prev_start = p.start_ms if p.k == 1 else e.step_end(p, p.k - 1)
        for r, n_tok in p.chunks:
            if r.scheduled_ms < 0:
                r.scheduled_ms = p.start_ms
            r.computed += n_tok
            if e.prefix is not None and e.prefix.shared_tokens:
                e.prefix_computed(r)
        done: list[_Req] = []
        # the context and fewest tokens left of the decodes that go on, summed in this pass for the next run
        ctx, least, spec = 0, _BIG, e.spec_q
        cohort = e.cohort
        if p.pooled:
            assert cohort is not None
            done = cohort.complete(p, t, rec)
        else:
            k = p.k
            if k > 1:  # a run of decode-only steps: its gaps are recorded as the run
                rec.run(p.a_ms, p.b_ms, k, len(p.decodes))
            singles = rec.singles
            last, same = -1.0, 0  # consecutive requests whose last token came at the same instant: one gap
            # a decode's scheduled_ms is set: it was set when its prompt (or, disaggregated, its prefill) ran
            for r in p.decodes:
                if k == 1:
                    if r.first_ms >= 0:
                        if r.last_ms == last:
                            same += 1
                        else:
                            if same:
                                singles.append((t - last, same))
                            last, same = r.last_ms, 1
                    else:
                        r.first_ms = t  # disaggregated: the first token streams after the first decode step
                if spec:
                    e.advance(r, k)
                else:
                    r.generated += k
                r.last_ms = t
                left = r.out_len - r.generated
                if left <= 0:
                    done.append(r)
                else:
                    ctx += r.in_len + r.generated
                    if left < least:
                        least = left
            if same:
                singles.append((t - last, same))
        every = not p.chunks and len(p.decodes) == len(e.running)  # every running request decoded
        if e.reserving and not p.pooled:
            e.reserve = None  # the requests advanced: SGLang's reserve is summed again when an admission asks
        if every and not spec and not p.pooled:
            e.summary = (ctx, least)  # every running request decoded: the pass above saw them all
        for r, _ in p.chunks:
            if r.computed >= r.prompt:  # the step that ends a prompt samples the next token
                if r.first_ms < 0 and e.role != "prefill":
                    r.first_ms = t
                elif e.role != "prefill":
                    rec.singles.append((t - r.last_ms, 1))
                if e.role == "prefill":
                    r.prefilled = True
                    e.running.remove(r)
                    e._release(r)
                    dst = pick(setup.decode_pool)
                    dst.inbound += 1
                    r.generated = 1
                    r.last_ms = t
                    hand = setup.transfer_ms
                    if dst.prefix is not None and dst.prefix_pages:  # only the part it does not hold moves
                        held = min(dst.prefix_pages * dst.bs, r.in_len - 1)
                        hand = setup.transfer_fixed_ms + (hand - setup.transfer_fixed_ms) * (1 - held / r.in_len)
                    push(t + hand, ARRIVE, r.rid, dst.idx)
                    continue
                e.lacking += 1  # its pages cover the prompt, not the sampled token: at most one page short
                r.generated += 1
                r.last_ms = t
                if r.generated >= r.out_len:
                    done.append(r)
                elif cohort is not None and p.pooled:
                    cohort.join(r)
        used = e.capacity - e.free
        e.peak_used = max(e.peak_used, used)
        e.max_running = max(e.max_running, len(e.running))
        if len(done) > 1:  # one pass over the running list (finish never forms a step on this engine)
            gone = set(done)
            e.running[:] = [r for r in e.running if r not in gone]
        elif done:
            e.running.remove(done[0])
        for r in done:
            e._release(r)
            finish(r, t)
        if cohort is not None and not cohort.active and (not e.running or p.grown and p.k == 1):
            cohort.resume(e, t)

    while heap:
        t, _, kind, who, version = heapq.heappop(heap)
        area += in_flight * (t - last_t)
        last_t = t
        if kind == SEND:
            if who < 0:  # a closed-loop client's first request (``starts``)
                waiting_starts -= 1
                send(t)
                continue
            if load.concurrency and in_flight >= load.concurrency:
                client_queue.append(who)
            else:
                send(t)
            continue
        if kind == ARRIVE:  # a prompt's KV reaches its decode replica
            engines[version].inbound -= 1
            deliver(engines[version], reqs[who], t)
            continue
        e = engines[who]
        if e.peers is not None:  # an attention-DP group's step: every rank that had one
            if version != e.version:
                continue
            ran = [x for x in e.peers if x.plan is not None]
            if not ran:
                continue
            for x in ran:
                process(x, t)
            for x in e.peers:  # idle ranks waited through the same step
                x.prev_start = ran[0].prev_start
            plan_group(e.peers, t)
            continue
        if version != e.version or e.plan is None:
            continue
        process(e, t)
        plan_engine(e, t)
    return reqs, rec, area


def _result(load: Load, setup: _Setup, reqs: list[_Req], rec: _Recorder, area: float, copies: int = 1,
            ) -> SimResult:
    """The client's figures; every request and step of the simulated share counted ``copies`` times."""
    done = [r for r in reqs if r.done_ms >= 0] * copies
    itl = rec.counts()
    for pair in itl:
        itl[pair] *= copies
    start = min((r.sent_ms for r in reqs), default=0.0)
    end = max((r.done_ms for r in done), default=start)
    dur = max(end - start, 1e-9)
    ttft = [r.first_ms - r.sent_ms for r in done]
    tpot = [(r.done_ms - r.first_ms) / (r.out_len - 1) for r in done if r.out_len > 1]
    e2e = [r.done_ms - r.sent_ms for r in done]
    queue = [max(0.0, r.scheduled_ms - r.sent_ms) for r in done]
    out_tokens = sum(r.out_len for r in done)
    tp = _stat(tpot)
    thr = out_tokens / dur * 1e3
    kv_frac = max((e.peak_used / e.capacity for e in setup.engines), default=0.0)
    return SimResult(
        load=load.describe(), engine=setup.policy, requests=len(done), ttft_ms=_stat(ttft), tpot_ms=tp,
        itl_ms=_weighted_stat(itl), e2e_ms=_stat(e2e), queue_ms=_stat(queue), duration_ms=dur,
        output_tokens_per_s=thr, output_tokens_per_s_per_gpu=thr / max(1, setup.gpus),
        output_tokens_per_s_per_user=1e3 / tp.mean if tp.mean > 0 else 0.0,
        request_throughput_per_s=len(done) / dur * 1e3, mean_in_flight=area * copies / dur,
        max_running=max((e.max_running for e in setup.engines), default=0),
        mean_running=sum(e.run_area for e in setup.engines if e.role != "prefill")
        / (dur * max(1, sum(e.role != "prefill" for e in setup.engines))),
        preemptions=sum(e.preemptions for e in setup.engines) * copies, kv_cache_tokens=setup.kv_tokens,
        kv_peak_fraction=kv_frac, steps=sum(e.steps for e in setup.engines) * copies)
