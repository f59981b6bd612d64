"""Serving mode: continuous batching with chunked prefill at a given concurrency, and the best concurrency under
an SLA.

Steady state of one replica holding ``C`` requests in flight (``C`` = the plan's batch_size): every engine step
decodes one token of each running request and carries a share of the prompts of the requests that replace the
finished ones.  A request lives ``output_len`` steps and brings ``input_len`` prompt tokens, so a step carries on
average ``C * input_len / output_len`` prompt tokens, priced as ``C / output_len`` of one request's prefill pass
without what the decode step already pays for everyone: the per-pass host cost and the weights the decode step
reads (``riding_ms``: the GPU's weight bytes at its achievable HBM bandwidth, once per pipeline stage, less the
routed experts none of the step's ``C`` decode tokens reach, which the prompt still reads itself; for a dense model
every weight, ``weights_ms``):

    step = decode_step(C) + (C / output_len) * max(0, prefill_pass(1 request) - prefill_step_overhead - riding_ms(C))

An engine that runs prefill eagerly (no CUDA graph) runs every step that carries a prompt eagerly too: such a step
takes the longer of its GPU work and the host's launches of the prefill pass (``Prefill.host_ms``), so the share
``min(1, C / output_len)`` of steps with a prompt adds whatever of those launches the step's GPU work does not cover.
An engine that replays captured graphs up to a size (vLLM, ``prefill_graph_max_tokens``) runs such a step as a graph
when the request's prompt fits that size (the decode tokens riding along are not counted).

TPOT is one step without the request's own replacement: the steps that decode a request carry the prompts of the
other ``C - 1`` requests' replacements, ``(C - 1) / output_len`` per step, while its own prompt was paid in its TTFT
and the prompt that replaces it comes after its last token (a lone client's TPOT is the bare decode step; the
throughput still pays every prompt).  A new prompt is cut into chunks of at most ``prefill_chunk_tokens - C``
tokens (the step's token budget minus the decode tokens), one chunk per step, so its TTFT is half a step of
waiting, plus the steps the scheduler has already prepared (``a`` = ``scheduler_ahead_steps``: 1 for an engine that
schedules step n+1 while step n runs, as vLLM's async and SGLang's and TensorRT-LLM's overlap schedulers do), plus
``ceil(input_len / chunk)`` steps, plus its own prefill work:

    ttft = (1/2 + a) * step + chunks * decode_step(C) + prefill_pass(1 request)

A lone client (``C = 1``) finds the engine idle and shares no step: its TTFT is its prefill pass.

That TTFT assumes arrivals spread over time (independent users).  Benchmark clients with fixed prompt and output
lengths in a closed loop start together, finish together and come back together, so their prompts arrive in one
burst: ``ttft_lockstep_ms`` is the mean TTFT of such a burst of the running requests, prefilled in steps of
``prefill_chunk_tokens`` tokens that carry no decodes (each step pays the host cost and the weight read once),
request ``k`` waiting for the ``k - 1`` prompts ahead of it and for the rest of the step its prompt ends in (the
prompts that share a step all get their first token when the whole step is done: on average half a step of
tokens more, and the whole burst when it fits one step):

    n = max(1, (R + 1) * P / (2 * chunk) + 1/2)
    tokens = min(R * P, (R + 1) / 2 * P + chunk / 2)
    lockstep = n * (prefill_step_overhead + weights_ms) + max(tokens * m, n * host_ms)

with ``R`` running requests, ``P`` = input_len, ``m`` one prompt token's share of a prefill pass beyond those
fixed costs (GPU work only) and ``host_ms`` an eager engine's launch time per step (0 otherwise).  Clients that
vary their lengths drift apart and measure about the spread end (InferenceMAX's
median TTFT on dense models); fixed-length clients fall between the two or above the lockstep end (NIM 1.8's 70B
rows near the spread end, its 8B rows near or above the lockstep end); an SLA says which to check (``Sla.arrivals``).

Output tokens per second: ``C / step`` per replica, ``1 / TPOT`` per user.  Disaggregated plans are not priced
here: their pools do not share steps (see ``disagg.py``).

The KV cache bounds what runs at once.  An engine that reserves room for the whole output before starting a
request (TensorRT-LLM's default) runs at most ``B`` = the batch that fits at ``input_len + output_len`` tokens; one
that takes pages on demand (vLLM, SGLang) holds on average the prompt and half the output, so about
``B * (input + output) / (input + output / 2)``.  With more clients than that, the rest wait in the queue: a
closed loop of ``C`` clients over ``B`` slots that each take ``T = ttft(B) + (output_len - 1) * tpot(B)`` serves
``B / T`` requests per second, so each waits ``(C / B - 1) * T`` before its prefill starts (Little's law), TPOT
and throughput are those of ``B`` running requests, and TTFT adds the wait.

Speculative decoding and prefix caching (``speculative.py``): ``decode_at`` then gives the time per emitted token
(a speculative step over the tokens it yields), so a step here stands for one token of every running request and
the prompts per step stay ``C / output_len``; a prompt's cached share is not recomputed; a prefix all requests
share is held once, which raises the running capacity.

``best_under_sla`` searches the concurrency (doubling, then bisection: TPOT and TTFT grow with C) for the most
output tokens per second per GPU whose TPOT and TTFT meet the SLA.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.core.absent import NullMeansAbsent
from tools.core.engine_profile import engine_profile
from tools.core.layout import Layout
from tools.core.memory import MemoryReport, state_tokens
from tools.core.plan import Plan
from tools.core.quantization import weight_bytes
from tools.estimate.costs import expert_load
from tools.estimate.fast import FastEstimator
from tools.estimate.speculative import cached_prefill_ms, speculative_pricer

MAX_CONCURRENCY = 65_536


Arrivals = Literal["spread", "lockstep"]


class Sla(NullMeansAbsent):
    """Service-level targets of a serving deployment (each optional)."""

    model_config = ConfigDict(extra="forbid")

    max_tpot_ms: float | None = Field(None, gt=0, description="time per output token under load, ms")
    max_ttft_ms: float | None = Field(None, gt=0, description="time to first token under load, ms")
    arrivals: Arrivals = Field(
        "spread", description="which TTFT the target is checked against: 'spread' (independent users, steady "
                              "state) or 'lockstep' (fixed-length closed-loop benchmark clients whose prompts "
                              "arrive in one burst; the conservative choice)")

    def met(self, serving: Serving) -> bool:
        return (self.max_tpot_ms is None or serving.tpot_ms <= self.max_tpot_ms) and \
            (self.max_ttft_ms is None or serving.ttft_for(self.arrivals) <= self.max_ttft_ms)


class Serving(BaseModel):
    concurrency: int = Field(description="requests in flight per DP replica (continuous batching)")
    running: int = Field(description="requests the KV cache holds at once; the rest of the concurrency waits")
    queue_ms: float = Field(description="wait for a KV slot before a request's prefill starts (0 when all run)")
    prefill_ms: float = Field(description="the request's own prefill pass, the part of TTFT that is not waiting")
    chunk_tokens: int = Field(description="prompt tokens one step takes besides the decode tokens")
    step_ms: float = Field(description="one mixed step: every running request's decode token plus prompt chunks")
    ttft_ms: float = Field(description="time to first token of a new request under this load, arrivals spread")
    ttft_lockstep_ms: float = Field(description="mean time to first token when the clients' prompts arrive in one "
                                                "burst (fixed-length closed-loop benchmarks); >= ttft_ms")
    tpot_ms: float = Field(description="time per output token under this load: a mixed step carrying the other "
                                       "requests' prompts")
    output_tokens_per_s: float = Field(description="whole deployment (all DP replicas)")
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    meets_sla: bool | None = Field(None, description="against the SLA given, if any")

    def ttft_for(self, arrivals: Arrivals) -> float:
        """The TTFT an SLA on ``arrivals`` is checked against."""
        return self.ttft_lockstep_ms if arrivals == "lockstep" else self.ttft_ms


Policy = Literal["vllm", "sglang", "trtllm"]
POLICY_OF_ENGINE: dict[str, Policy] = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "trtllm-cpp": "trtllm",
                                       "generic": "vllm", "gpt-fast": "vllm"}


def default_max_seqs(plan: Plan, policy: str) -> int:
    """The sequence cap an engine runs with when the command sets none (its profile's ``max_num_seqs_default``):
    vLLM's depends on the GPU's memory and excludes the A100."""
    big = plan.accelerator.memory_bytes >= 70 * 2**30 and "a100" not in plan.accelerator.id
    caps = engine_profile(policy).max_num_seqs_default
    assert caps is not None, f"engine profile {policy!r} states no max_num_seqs_default"
    return caps[0 if big else 1]


def sequence_cap(plan: Plan, policy: str) -> int:
    """The most requests one replica runs at once by the engine's sequence cap (the plan's, else the engine's
    default): vLLM's holds for each attention-DP engine, the others' for the whole server."""
    per_engine = plan.parallel.attn_dp if policy == "vllm" else 1
    return (plan.engine_options.max_num_seqs or default_max_seqs(plan, policy)) * per_engine


def running_capacity(plan: Plan, eff: dict[str, float], max_batch_full: int) -> int:
    """Requests the KV cache holds at once per replica, from the batch that fits at the full context
    (``max_batch_full``, the memory report's) and how the engine admits requests (``kv_reserved_output_fraction``:
    1 reserves the whole output up front, 0.5 is the average of on-demand pages).  0: not even one fits."""
    wl = plan.workload
    if max_batch_full < 1:
        return 0
    pc = plan.prefix_caching
    shared = (pc.shared_prefix_len or 0) if pc is not None and pc.enabled else 0  # held once, for every request
    state = state_tokens(plan)  # a recurrent model's state per request, held whatever its length
    held = wl.input_len - shared + eff["kv_reserved_output_fraction"] * wl.output_len + state
    room = max_batch_full * (wl.input_len + wl.output_len + state) - shared
    return max(max_batch_full, int(room / max(1.0, held)))


def weights_ms(plan: Plan, eff: dict[str, float], weight_bytes_per_gpu: float, pp: int) -> float:
    """One read of a GPU's weights at its achievable HBM bandwidth, once per pipeline stage a pass crosses."""
    return pp * weight_bytes_per_gpu / (plan.accelerator.memory_bandwidth_bytes_per_s * eff["memory_efficiency"]) * 1e3


def decode_read_bytes(plan: Plan, layout: Layout, weight_bytes_per_gpu: float, tokens: float) -> float:
    """Of a GPU's weight bytes, those a decode step of ``tokens`` tokens reads: every weight but the routed experts
    none of its tokens reach (``costs.expert_load``: the experts hit on the busiest expert GPU).  Only these reads
    are shared with a prompt riding in the step: a few decode tokens of a many-expert MoE reach a few experts, while
    a prompt of hundreds of tokens reaches nearly all of them and reads the rest itself."""
    spec, moe = plan.spec, plan.spec.moe
    if moe is None:
        return weight_bytes_per_gpu
    pool, ep = layout.pools["decode"], layout.phases["decode"].ep
    expert_tp = pool.group_width // ep if plan.options.allow_expert_tp and ep < pool.group_width else 1
    held = math.ceil(moe.num_experts / ep)
    layers = max(sum(1 for i in stage if spec.is_moe_layer(i)) for stage in pool.stage_layers)
    experts = layers * held * spec.expert_params() / expert_tp * weight_bytes(plan, "expert")
    hit = expert_load(tokens, moe.experts_per_token, moe.num_experts, held, ep)[3] if tokens > 0 else 0.0
    return max(0.0, weight_bytes_per_gpu - experts * (1 - hit / held))


def riding_ms(plan: Plan, layout: Layout, eff: dict[str, float], weight_bytes_per_gpu: float, pp: int,
              ) -> Callable[[int], float]:
    """The weight reads (ms) a decode step of ``d`` sequences shares with a prompt riding in it
    (``decode_read_bytes`` of its decode tokens: ``k + 1`` per sequence when it verifies ``k`` draft tokens)."""
    queries = plan.speculative.num_draft_tokens + 1 if plan.speculative else 1
    return lambda d: weights_ms(plan, eff, decode_read_bytes(plan, layout, weight_bytes_per_gpu, d * queries), pp)


def memory_limits(plan: Plan, eff: dict[str, float], mem: MemoryReport, prefill_pp: int) -> tuple[int, float]:
    """What the memory report fixes for every concurrency: the requests that run at once (``running_capacity``)
    and one read of the weights (``weights_ms``: what prompts prefilled together share), for ``continuous``."""
    return (min(sequence_cap(plan, POLICY_OF_ENGINE.get(plan.engine, "vllm")),
                running_capacity(plan, eff, mem.max_batch_size_that_fits)),
            weights_ms(plan, eff, mem.weights_bytes, prefill_pp))


@dataclass(frozen=True)
class Prefill:
    """One request's prefill pass: its latency (ms, with the step overhead), the host's time to launch its
    kernels when the engine runs prefill eagerly, and the part of ``ms`` the GPU spent waiting for those launches
    (both 0 under a CUDA graph or a compiled runtime)."""

    ms: float
    host_ms: float = 0.0
    wait_ms: float = 0.0


def continuous(plan: Plan, eff: dict[str, float], concurrency: int, prefill: Prefill,
               decode_at: Callable[[int], float], dp: int, gpus: int, capacity: int, shared_ms: float,
               sla: Sla | None = None, riding: Callable[[int], float] | None = None) -> Serving:
    """The steady state at ``concurrency`` from one request's prefill pass and the decode step at a batch
    (``decode_at``); at most ``capacity`` requests run (0: no limit known), the rest queue.  ``shared_ms``: one
    read of the weights (``weights_ms``), what prompts prefilled together share; ``riding``: what a prompt's chunks
    share with the decode step of that many sequences they ride in (``riding_ms``; None: ``shared_ms``)."""
    wl = plan.workload
    pre_step = eff["step_overhead_ms"]
    running = concurrency if capacity < 1 else min(concurrency, capacity)
    decode_ms = decode_at(running)
    chunk = max(1, int(eff["prefill_chunk_tokens"]) - running)
    prompts = running / wl.output_len  # prompts per step
    ride = riding(running) if riding is not None else shared_ms
    work = max(0.0, prefill.ms - prefill.wait_ms - pre_step - ride)  # GPU work one prompt adds to a step
    step = _mixed_step(decode_ms, prompts, work, prefill.host_ms)
    tpot = _mixed_step(decode_ms, (running - 1) / wl.output_len, work, prefill.host_ms)
    chunks = math.ceil(wl.input_len / chunk)
    ahead = eff["scheduler_ahead_steps"]
    service_ttft = prefill.ms if concurrency == 1 else (0.5 + ahead) * step + chunks * decode_ms + prefill.ms
    queue = (concurrency / running - 1) * (service_ttft + (wl.output_len - 1) * tpot)
    ttft = queue + service_ttft
    per_replica = running / (step / 1e3)
    sv = Serving(concurrency=concurrency, running=running, queue_ms=queue, prefill_ms=prefill.ms,
                 chunk_tokens=chunk, step_ms=step, ttft_ms=ttft,
                 ttft_lockstep_ms=queue + max(service_ttft, burst_ttft(plan, eff, running, prefill, shared_ms)),
                 tpot_ms=tpot, output_tokens_per_s=per_replica * dp,
                 output_tokens_per_s_per_gpu=per_replica * dp / gpus, output_tokens_per_s_per_user=1e3 / tpot)
    if sla:
        sv.meets_sla = sla.met(sv)
    return sv


def _mixed_step(decode_ms: float, prompts: float, work: float, host_ms: float) -> float:
    """A step that decodes every running request and carries ``prompts`` prompts' prefill work on average; an
    eager engine's steps with a prompt take at least the host's launches of the prefill pass (``host_ms``)."""
    mixed = min(prompts, 1.0)  # share of steps that carry a prompt and so run eagerly
    host_wait = mixed * max(0.0, host_ms - decode_ms - prompts / mixed * work) if host_ms and mixed else 0.0
    return decode_ms + prompts * work + host_wait


def burst_ttft(plan: Plan, eff: dict[str, float], running: int, prefill: Prefill, shared_ms: float) -> float:
    """Mean TTFT of ``running`` prompts that arrive together and are prefilled first come, first served in steps
    of ``prefill_chunk_tokens`` tokens (module doc); a lone prompt's is its prefill pass.  An eager engine's step
    takes at least its launches' host time, whatever the tokens it carries."""
    if running <= 1:
        return prefill.ms
    p = plan.workload.input_len
    fixed = eff["step_overhead_ms"] + shared_ms
    per_token = max(0.0, prefill.ms - prefill.wait_ms - fixed) / p
    chunk = max(1.0, eff["prefill_chunk_tokens"])
    mean_steps = max(1.0, (running + 1) * p / (2 * chunk) + 0.5)  # each needs one
    tokens = min(running * p, (running + 1) / 2 * p + chunk / 2)  # up to the end of the step its prompt ends in
    return mean_steps * fixed + max(tokens * per_token, mean_steps * prefill.host_ms)


def best_under_sla(plan: Plan, sla: Sla, max_concurrency: int, shared_ms: float, eff: dict[str, float] | None = None,
                   overlap: bool | None = None, riding: Callable[[int], float] | None = None) -> Serving | None:
    """The concurrency with the most output tokens/s per GPU that meets ``sla`` (None if even one request
    misses it), searched on the fast per-layer estimator with the estimate's efficiency keys and overlap."""

    fast = FastEstimator(plan, eff=eff, overlap=overlap)
    dp, gpus = fast.layout.dp, fast.layout.gpus_needed
    ms, host, wait = fast.phase_parts("prefill", 1)
    pre1 = Prefill(cached_prefill_ms(ms, fast.eff["step_overhead_ms"], plan.prefix_hit_fraction), host, wait)
    decode_at: Callable[[int], float] = lambda b: fast.phase_ms("decode", b)  # noqa: E731
    if plan.speculative is not None:
        verify = FastEstimator(plan, fast.layout, fast.eff, overlap, plan.speculative.num_draft_tokens + 1)
        step = speculative_pricer(plan, fast.layout.phases["decode"].tp, decode_at,
                                  lambda b: verify.phase_ms("decode", b))
        decode_at = lambda b: step(b).ms_per_token  # noqa: E731

    def at(c: int) -> Serving:
        return continuous(plan, fast.eff, c, pre1, decode_at, dp, gpus, max_concurrency, shared_ms, sla, riding)

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
