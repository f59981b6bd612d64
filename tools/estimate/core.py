"""estimate_performance: critical-path latency, throughput, KV cache and memory of a plan.

How (seed 004): build the plan's DAG, cost every node of replica 0 (roofline / alpha-beta, see ``costs.py``),
and take the node-weighted longest path of each phase's sub-DAG (a dynamic programme over
``networkx.topological_sort``).  DP replicas are identical and independent: they never change latency and
multiply throughput.  Identical layers cost the same (costs are cached by node shape).

Pipeline parallelism:

* prefill: the whole batch as one pass (sum of the stages, plus the stage transfers); with ``batch > 1``
  and ``pp > 1`` the batch may instead be split into ``m = min(batch, pp)`` micro-batches, taking
  ``(m + pp - 1) * slowest_stage(batch/m)``; the smaller of the two is reported.
* decode: a token must pass every stage, so one step of the batch takes the full critical path; with
  ``batch >= 2`` the batch is split into ``m = min(batch, pp)`` micro-batches cycling through the pipeline,
  and a step takes ``max(critical_path(batch/m), m * slowest_stage(batch/m))``; the bubble (idle share of
  the stages) is ``1 - m/pp``.  Batch 1 gets no speed-up from PP.

Attention-DP (opt-in): each of the ``attn_dp`` groups runs attention, KV cache, dense FFN, norms, embedding and
LM head on its own ``ceil(batch / attn_dp)`` sequences (rounded up: the critical path runs through the fullest
group); the AllToAll dispatch/combine and the Expert nodes carry every group's tokens.

Disaggregated serving (opt-in): each pool is costed with its own layout (its own pp, tp, ep, attention-DP).
TTFT is the prefill pool's latency plus the KV hand-off to the decode pool (``disagg.py``), TPOT the decode
pool's step with no prefill passes in between, and the throughput the smaller of the pools' request rates
times ``output_len``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from typing import Any

import networkx as nx
from pydantic import BaseModel, Field, ValidationError

from tools.core.build import build_graph, build_working, devices_used, gc_paused
from tools.core.dag import CONTROL_TYPES, NodeType
from tools.core.efficiency import Overlay, efficiency_source, load_overlay, plan_efficiency
from tools.core.errors import PdagInputError
from tools.core.handoff import kv_handoff
from tools.core.layout import Layout
from tools.core.memory import MemoryReport, load_queues, memory_report, unfit_hint
from tools.core.plan import Plan, Workload, parse_plan, validation_error_to_input_error
from tools.core.quantization import (
    attention_unquantized,
    dense_unquantized,
    expert_gemm_dtype,
    experts_only,
    storage,
)
from tools.core.shares import per_gpu_form
from tools.core.speculative import acceptance, draft_read_fraction
from tools.estimate.costs import CostModel, NodeCost, host_floor, host_us_per_kernel, pass_schedule
from tools.estimate.headline import KvTransfer, PoolRate, Throughput, headline, node_batch
from tools.estimate.serving import Prefill, Serving, Sla, best_under_sla, continuous, memory_limits, riding_ms
from tools.estimate.simulate import POLICY_OF_ENGINE, SimResult, load_mode
from tools.estimate.simulate import simulate as simulate_serving
from tools.estimate.speculative import (
    PrefixFigures,
    SpeculativeFigures,
    cached_prefill_ms,
    draft_passes,
    speculative_pricer,
)
from tools.estimate.track_record import TrackRecord, track_record, track_record_warnings

__all__ = ["Estimate", "PhasePath", "estimate_performance", "replica_graph"]


class Contributor(BaseModel):
    name: str = Field(description="operator kind on the critical path (e.g. attention, tp all-reduce)")
    node: str = Field(description="one example node id")
    kind: str = Field(description="compute | memory | communication | overhead")
    time_ms: float
    share: float
    count: int = Field(description="nodes of this kind on the critical path")


class PhaseDetail(BaseModel):
    latency_ms: float
    critical_path_ms: float
    step_overhead_ms: float
    tokens: int = Field(description="tokens processed in one pass of the replica")
    micro_batches: int
    bubble_fraction: float
    stage_ms: list[float] = Field(description="time of each pipeline stage on the critical path")
    communication_ms: float
    communication_hidden_ms: float = Field(description="communication time hidden by overlap")
    host_launch_ms: float = Field(0.0, description="host time to launch every kernel of the pass (each pipeline "
                                                   "stage's host) when the engine runs this phase eagerly (no CUDA "
                                                   "graph); 0 otherwise")
    host_wait_ms: float = Field(0.0, description="time the GPUs wait for those launches (host-bound pass): the part "
                                                 "of latency_ms beyond the GPU work")
    breakdown_ms: dict[str, float] = Field(
        description="latency split into compute-bound, memory-bound, communication and overhead time")
    critical_path: list[Contributor]
    bottleneck: str


class PathStep(BaseModel):
    node: str = Field(description="node id (replica 0)")
    name: str = Field(description="operator kind, as in Contributor.name")
    kind: str = Field(description="compute | memory | communication | overhead")
    stage: int
    layer: int | None
    ms: float


class PhasePath(BaseModel):
    """The critical path one phase's latency was taken from, node by node (what a timeline draws).

    With ``micro_batches > 1`` the steps are one micro-batch's path and the pipeline schedule repeats them
    (see the module doc); ``latency_ms`` is then the scheduled time, not the sum of the steps."""

    phase: str
    stages: int
    micro_batches: int
    steps: list[PathStep]
    latency_ms: float = Field(description="the phase's latency without the engine step overhead")
    step_overhead_ms: float


class KvCache(BaseModel):
    bytes_per_token: float = Field(description="whole model, all layers")
    bytes_total: float = Field(description="all replicas, with TP replication of KV heads")
    bytes_per_gpu_max: float
    per_gpu: dict[int, float] = Field(description="KV bytes per GPU of replica 0")
    state_bytes_per_sequence: float = Field(0.0, description="recurrent layers' fixed state per sequence, all layers")


class DeploymentThroughput(BaseModel):
    """Output rates of the whole deployment, from the serving simulation when it ran (the served figures beside
    ttft_ms and tpot_ms), else from the static batch; ``basis`` says which, so no answer mixes the two."""

    output_tokens_per_s: float = Field(description="whole deployment (all DP replicas)")
    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float = Field(description="what one request sees while it decodes")
    basis: str = Field(description="'served at <load>' (the simulation); without one (simulate=False), the "
                                   "'steady-state estimate' or the 'static batch' that ttft_ms and tpot_ms come from")


class Provenance(BaseModel):
    figure: str
    kind: str = Field(description="catalog | modelled | assumption | calibrated")
    value: str
    source: str


class Estimate(BaseModel):
    ttft_ms: float = Field(
        description="time to first token of a served request at the load the workload states (`load`): what "
                    "'time to first token' means everywhere in pdag; aggregated and disaggregated plans alike")
    tpot_ms: float = Field(
        description="time per output token of a served request at that load, (e2e - ttft) / (output_len - 1)")
    ttft_p50_ms: float | None = Field(None, description="median TTFT at the load (null where not known)")
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = Field(None, description="median TPOT at the load (null where not known)")
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    load: str = Field("", description="the load ttft_ms and tpot_ms are stated at (the workload's, or the default)")
    prefill_latency_ms: float = Field(
        description="the prefill pass of one whole static batch of batch_size prompts (plus its KV hand-off when "
                    "disaggregated): the static view, not a served request's time to first token (see ttft_ms)")
    decode_latency_ms_per_token: float
    e2e_latency_ms: float
    tpot_with_prefill_ms: float = Field(
        description="the static batch's e2e per output token: its decode step plus its prefill pass spread over "
                    "the output (disaggregated: the decode step); not a served TPOT (see tpot_ms)")
    throughput: DeploymentThroughput = Field(
        description="the served output rate at `load` (the simulation), whole deployment, per GPU and per user; "
                    "`basis` says which")
    static_batch_throughput: Throughput = Field(
        description="the static batch's rates (every sequence starts and finishes together): the seeds' view")
    scheduler: str = Field("", description="the engine scheduler the served figures simulate, and why that one")
    kv_cache: KvCache
    memory: MemoryReport
    gpus_used: int
    fits: bool
    prefill: PhaseDetail
    decode: PhaseDetail
    critical_path: dict[str, list[Contributor]]
    bottleneck: dict[str, str]
    assumptions: list[str]
    provenance: list[Provenance]
    warnings: list[str]
    pools: dict[str, PoolRate] | None = Field(None, description="disaggregated: the prefill and decode pools")
    kv_transfer: KvTransfer | None = Field(None, description="disaggregated: the KV hand-off between the pools")
    pool_balance: float | None = Field(None, description="disaggregated: prefill pool rate / decode pool rate")
    balanced_prefill_per_decode: float | None = Field(
        None, description="disaggregated: prefill replicas per decode replica that would balance the rates")
    balanced_split: dict[str, int] | None = Field(
        None, description="disaggregated: prefill and decode replicas that best balance hardware.num_gpus")
    steady_state_estimate: Serving | None = Field(
        None, description="aggregated: the analytic steady-state model of continuous batching at batch_size in "
                          "flight per replica, what search pre-ranks with; not the served figures (ttft_ms, tpot_ms "
                          "and throughput are the simulation's)")
    served: SimResult | None = Field(
        None, description="the serving simulation behind ttft_ms and tpot_ms: TTFT, TPOT, ITL, E2E and queue time "
                          "(mean, p50, p90, p99), throughput per deployment, GPU and user, preemptions and KV use")
    best_under_sla: Serving | None = Field(
        None, description="with an SLA: the concurrency giving the most output tokens/s per GPU within it "
                          "(null when even one request misses it)")
    speculative: SpeculativeFigures | None = Field(
        None, description="speculative decoding: tokens per step, the step's cost, TPOT and throughput with and "
                          "without it, and what was assumed")
    prefix_caching: PrefixFigures | None = Field(
        None, description="prefix caching: the cached share, prefill and TTFT with and without hits, capacity")
    track_record: list[TrackRecord] = Field(
        default_factory=list, description="how far pdag's figures of this regime (model family, static batch or "
                                          "serving, one node or several) landed from published measurements")

    def summary(self) -> str:
        """A readable multi-line breakdown (the CLI prints it)."""
        lines = [
            f"served at {self.load}: TTFT {self.ttft_ms:.1f} ms | TPOT {self.tpot_ms:.2f} ms"
            + (f" (p50/p99 TTFT {self.ttft_p50_ms:.1f}/{self.ttft_p99_ms:.1f} ms, TPOT {self.tpot_p50_ms:.2f}/"
               f"{self.tpot_p99_ms:.2f} ms)" if self.ttft_p50_ms is not None and self.ttft_p99_ms is not None
               and self.tpot_p50_ms is not None and self.tpot_p99_ms is not None else ""),
            f"static batch: prefill {self.prefill_latency_ms:.2f} ms"
            + (" (after prefix-cache hits)" if self.prefix_caching and self.prefix_caching.hit_fraction else "")
            + " | decode "
            f"{self.decode_latency_ms_per_token:.3f} ms/token"
            + (" (speculative steps over the tokens they accept)" if self.speculative is not None else "")
            + f" | e2e {self.e2e_latency_ms:.1f} ms | GPUs {self.gpus_used}",
            f"throughput ({'served, same load' if self.served else self.throughput.basis}): "
            f"{self.throughput.output_tokens_per_s:,.0f} output tok/s "
            f"deployment ({self.throughput.output_tokens_per_s_per_gpu:,.1f}/GPU, "
            f"{self.throughput.output_tokens_per_s_per_user:,.1f}/user)",
            f"KV cache: {self.kv_cache.bytes_per_token:,.0f} B/token"
            + (f" + {self.kv_cache.state_bytes_per_sequence / 1e6:,.1f} MB of recurrent state per sequence"
               if self.kv_cache.state_bytes_per_sequence else "")
            + f", total {self.kv_cache.bytes_total / 1e9:.2f} GB, "
            f"max/GPU {self.kv_cache.bytes_per_gpu_max / 1e9:.2f} GB",
            f"memory: {self.memory.message}",
        ]
        if self.pools and self.kv_transfer:
            pre, dec = self.pools["prefill"], self.pools["decode"]
            lines.append(
                f"disaggregated: prefill {pre.label} ({pre.gpus} GPUs) {pre.requests_per_s:.2f} req/s, decode "
                f"{dec.label} ({dec.gpus} GPUs) {dec.requests_per_s:.2f} req/s, balance {self.pool_balance:.2f} "
                f"(balanced: {self.balanced_prefill_per_decode:.2f} prefill per decode replica"
                + (f"; {self.balanced_split}" if self.balanced_split else "") + ")")
            lines.append(f"KV hand-off: {self.kv_transfer.bytes_per_request / 1e6:.1f} MB per request "
                         f"({self.kv_transfer.wire_bytes_per_request / 1e6:.1f} MB on the wire), "
                         f"{self.kv_transfer.ms:.2f} ms per batch over {self.kv_transfer.link}")
        if self.served:
            s = self.served
            lines.append(f"simulated scheduler {self.scheduler or s.engine}: "
                         f"ITL {s.itl_ms.mean:.2f} ms, E2E {s.e2e_ms.mean / 1e3:,.2f} s, "
                         f"queue {s.queue_ms.mean:,.1f} ms, "
                         f"{s.mean_running:.1f} running on average (most {s.max_running}), {s.preemptions} "
                         f"preemptions, KV peak {s.kv_peak_fraction:.0%} of {s.kv_cache_tokens:,} tokens, "
                         f"run {s.duration_ms / 1e3:,.1f} s")
        if self.served is None and self.steady_state_estimate:  # no simulation: the analytic model is all there is
            sv = self.steady_state_estimate
            lines.append(f"steady-state estimate (analytic, {sv.concurrency} in flight per replica): TTFT "
                         f"{sv.ttft_ms:.1f} ms, TPOT {sv.tpot_ms:.2f} ms, {sv.output_tokens_per_s_per_gpu:,.1f} "
                         "tok/s/GPU" + ("" if sv.meets_sla is None else f", SLA {'met' if sv.meets_sla else 'missed'}"))
        if self.speculative:
            sp = self.speculative
            lines.append(f"speculative {sp.method} k={sp.num_draft_tokens}: {sp.tokens_per_step:.2f} tokens per step, "
                         f"step x{sp.static.cost_multiplier:.2f} of a plain one; serving TPOT "
                         f"{sp.tpot_with_ms:.2f} ms (without {sp.tpot_without_ms:.2f} ms), "
                         f"{sp.output_tokens_per_s_with:,.0f} tok/s (without {sp.output_tokens_per_s_without:,.0f})")
        if self.prefix_caching:
            pf = self.prefix_caching
            lines.append(f"prefix caching: {pf.hit_fraction:.0%} of each prompt cached; prefill "
                         f"{pf.prefill_ms_with:.1f} "
                         f"ms (without {pf.prefill_ms_without:.1f} ms)"
                         + (f", serving TTFT {pf.ttft_with_ms:.1f} ms (without {pf.ttft_without_ms:.1f} ms)"
                            if pf.ttft_with_ms is not None and pf.ttft_without_ms is not None else ""))
        if self.best_under_sla:
            b = self.best_under_sla
            lines.append(f"best under the SLA: {b.concurrency} in flight per replica, "
                         f"{b.output_tokens_per_s_per_gpu:,.1f} tok/s/GPU (TTFT {b.ttft_ms:.1f} ms, in lockstep "
                         f"{b.ttft_lockstep_ms:,.1f} ms, TPOT {b.tpot_ms:.2f} ms)")
        for phase in ("prefill", "decode"):
            d: PhaseDetail = getattr(self, phase)
            lines.append(f"{phase}: {d.latency_ms:.3f} ms, bottleneck {d.bottleneck}; stages "
                         + ", ".join(f"{s:.2f}" for s in d.stage_ms) + " ms"
                         + (f"; {d.micro_batches} micro-batches, bubble {d.bubble_fraction:.0%}" if d.micro_batches > 1
                            or d.bubble_fraction else ""))
            for c in d.critical_path:
                lines.append(f"  {c.name:<28} {c.kind:<13} {c.time_ms:9.3f} ms {c.share:6.1%}  x{c.count}")
        if self.warnings:
            lines += [f"warning: {w}" for w in self.warnings]
        lines.append("assumptions:")
        lines += [f"  - {a}" for a in self.assumptions]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- input
def resolve_plan(plan: Plan | dict[str, Any] | None, dag: Any) -> Plan:
    if plan is not None:
        return parse_plan(plan)
    if dag is None:
        raise PdagInputError("plan", "give a plan (or a dag built from one)", "plan={...} or dag={...}")
    data = dag.model_dump() if isinstance(dag, BaseModel) else dag
    if not isinstance(data, dict):
        raise PdagInputError("dag", f"expected a DAG JSON object, got {type(dag).__name__}", "a DAG object")
    inner = data.get("dag") if isinstance(data.get("dag"), dict) else data  # a build_dag result
    embedded = inner.get("plan")
    if not isinstance(embedded, dict):
        raise PdagInputError("dag.plan", "this DAG does not carry the plan it was built from",
                             "a DAG produced by build_dag (it embeds its plan), or pass plan=")
    try:
        return parse_plan(embedded)
    except PdagInputError as exc:
        raise PdagInputError("dag." + exc.field, exc.problem, exc.allowed) from None


# ---------------------------------------------------------------------------------------------- paths
_NAMES = {
    NodeType.ATTENTION: "attention",
    NodeType.FFN: "ffn",
    NodeType.EXPERT: "experts",
    NodeType.ROUTER: "router",
    NodeType.NORM: "norms/elementwise",
    NodeType.EMBEDDING: "embedding",
    NodeType.LM_HEAD: "lm head",
    NodeType.KV_CACHE: "kv-cache write",
    NodeType.ALL_REDUCE: "all-reduce",
    NodeType.ALL_GATHER: "all-gather",
    NodeType.REDUCE_SCATTER: "reduce-scatter",
    NodeType.ALL_TO_ALL: "all-to-all",
    NodeType.SEND_RECV: "pipeline send/recv",
    NodeType.KV_TRANSFER: "kv reshard",
}


def _label(attrs: dict[str, Any], replicated: bool = False) -> str:
    """A node's name in a priced path.  Where every expert GPU already holds the tokens (expert-TP, TP-style EP) the
    DAG's all-to-all combine is priced as the all-reduce engines run, and named so."""
    base = _NAMES.get(attrs["type"], str(attrs["type"]))
    mixer = (attrs.get("meta") or {}).get("mixer")
    if mixer and attrs["type"] == NodeType.ATTENTION:  # a recurrent layer's mixer drawn in attention's place
        return f"{mixer.replace('_', ' ')} mixer"
    role = attrs.get("role")
    if role in ("dispatch", "combine"):
        if replicated and attrs["type"] == NodeType.ALL_TO_ALL:
            base = "all-reduce"
        return f"ep {role} ({base})"
    if role == "shared_expert":
        return "shared expert ffn"
    if role == "tp_sync":
        return "tp all-reduce"
    if role == "sp_sync":
        return "sp all-gather"
    return base


class _PhaseGraph:
    """Replica 0's nodes of one phase in topological order, with predecessors inside the phase."""

    def __init__(self, graph: nx.DiGraph, order: list[str], phase: str, skip: frozenset[str] = frozenset()) -> None:
        self.graph = graph
        self.phase = phase
        nodes = graph._node  # plain dict access: this runs over every node
        # control nodes (stages, MoE fan-outs) stay in, with zero cost: they carry the pipeline edges
        self.order = [v for v in order if (nodes[v].get("phase") or "prefill") == phase
                      and nodes[v]["type"] not in skip]
        members = set(self.order)
        self.preds = {v: [u for u in graph._pred[v] if u in members] for v in self.order}
        # a node of a layer fold stands for `repeat` identical layers: its time counts that many times (the
        # critical path is additive over identical layers, each starting from one join of the previous one)
        self.repeats = {v: r for v in self.order if (r := nodes[v].get("repeat") or 1) > 1}
        self._launched: dict[int, list[list[str]]] = {}

    def launched(self, pp: int) -> list[list[str]]:
        """Per pipeline stage, the nodes its host process launches: every node of the stage on the stage's first
        GPU, on or off the critical path (a host launches parallel branches too).  Depends on the graph only, so
        it is worked out once per stage count, not per priced batch."""
        hit = self._launched.get(pp)
        if hit is None:
            nodes = self.graph._node
            by_stage: list[list[str]] = [[] for _ in range(pp)]
            for v in self.order:
                by_stage[min(nodes[v].get("stage") or 0, pp - 1)].append(v)
            hit = []
            for vs in by_stage:
                lead = min((d for v in vs for d in nodes[v]["devices"]), default=None)
                hit.append([v for v in vs if lead in nodes[v]["devices"]])
            self._launched[pp] = hit
        return hit

    def longest(self, weight: dict[str, float]) -> tuple[float, list[str]]:
        """Heaviest chain of node costs, relaxed along networkx's topological order.

        Deliberately not ``nx.dag_longest_path``: it weighs edges, so every call would first rewrite one weight
        per edge of the phase (tens of thousands), and the whole estimate took twice as long (measured: 38 ->
        73 ms for Llama-3.1-70B on 8 GPUs, over the 50 ms target) for the same path and length."""
        dist: dict[str, float] = {}
        best: dict[str, str | None] = {}
        for v in self.order:
            top, arg = 0.0, None
            for u in self.preds[v]:
                if dist[u] > top:
                    top, arg = dist[u], u
            dist[v] = top + weight[v]
            best[v] = arg
        if not dist:
            return 0.0, []
        end = max(dist, key=dist.__getitem__)
        path = [end]
        while (prev := best[path[-1]]) is not None:
            path.append(prev)
        path.reverse()
        return dist[end], path


def _times(c: NodeCost, n: int) -> NodeCost:
    return replace(c, seconds=c.seconds * n, flops=c.flops * n, bytes=c.bytes * n, hidden_seconds=c.hidden_seconds * n,
                   compute_s=c.compute_s * n, memory_s=c.memory_s * n, overhead_s=c.overhead_s * n,
                   launches=c.launches * n, comm_s=c.comm_s * n)


def _cost_phase(model: CostModel, pg: _PhaseGraph, batch: int) -> dict[str, NodeCost]:
    nodes = pg.graph._node
    groups = model.layout.phases[pg.phase].attn_dp  # type: ignore[index]
    if groups == 1:
        costs = {v: model.cost(nodes[v], batch) for v in pg.order}
    else:
        costs = {v: model.cost(nodes[v], node_batch(nodes[v], batch, groups)) for v in pg.order}
    for v, r in pg.repeats.items():
        costs[v] = _times(costs[v], r)
    return costs


def _stage_times(pg: _PhaseGraph, path: list[str], costs: dict[str, NodeCost], pp: int) -> list[float]:
    out = [0.0] * pp
    nodes = pg.graph.nodes
    for v in path:
        s = nodes[v].get("stage") or 0
        out[min(s, pp - 1)] += costs[v].seconds
    return out


def _stage_launches(pg: _PhaseGraph, costs: dict[str, NodeCost], pp: int) -> list[float]:
    """Kernels one host process launches per pipeline stage (``_PhaseGraph.launched``)."""
    return [sum(costs[v].launches for v in vs) for vs in pg.launched(pp)]


def _contributors(pg: _PhaseGraph, path: list[str], costs: dict[str, NodeCost], total: float,
                  step_overhead: float, wait: float = 0.0, replicated: bool = False) -> list[Contributor]:
    nodes = pg.graph.nodes
    agg: dict[str, list[Any]] = defaultdict(lambda: [0.0, "", "", 0])
    for v in path:
        c = costs[v]
        if c.seconds <= 0:
            continue
        a = agg[_label(nodes[v], replicated)]
        a[0] += c.seconds
        a[1] = a[1] or v
        a[2] = c.kind if c.kind == "communication" else ("compute" if c.kind == "compute" else "memory")
        a[3] += pg.repeats.get(v, 1)
    if step_overhead > 0:
        agg["engine step overhead"] = [step_overhead, "-", "overhead", 1]
    if wait > 0:
        agg["waiting for eager launches"] = [wait, "-", "overhead", 1]
    items = sorted(agg.items(), key=lambda kv: -kv[1][0])
    out = [Contributor(name=k, node=v[1], kind=v[2], time_ms=v[0] * 1e3, share=v[0] / total if total else 0.0,
                       count=v[3]) for k, v in items[:8]]
    return out


def _path_of(pg: _PhaseGraph, path: list[str], costs: dict[str, NodeCost], pp: int, micro: int, latency: float,
             step_overhead: float, replicated: bool = False) -> PhasePath:
    nodes = pg.graph.nodes
    steps = [PathStep(node=v, name=_label(nodes[v], replicated), kind=costs[v].kind,
                      stage=min(nodes[v].get("stage") or 0, pp - 1), layer=nodes[v].get("layer"),
                      ms=costs[v].seconds * 1e3)
             for v in path if costs[v].seconds > 0]
    return PhasePath(phase=pg.phase, stages=pp, micro_batches=micro, steps=steps, latency_ms=latency * 1e3,
                     step_overhead_ms=step_overhead * 1e3)


def replica_graph(plan: Plan | dict[str, Any]) -> nx.DiGraph:
    """Replica 0's DAG as the estimator prices it (cached per layout; do not modify it)."""
    return _prepared(parse_plan(plan)).graph


def _bottleneck(pg: _PhaseGraph, path: list[str], costs: dict[str, NodeCost], wait: float = 0.0) -> str:
    by_kind: dict[str, float] = defaultdict(float)
    for v in path:
        by_kind[costs[v].kind] += costs[v].seconds
    if wait > 0:
        by_kind["overhead"] += wait
    if not by_kind:
        return "none"
    kind = max(by_kind, key=by_kind.__getitem__)
    total = sum(by_kind.values())
    word = {"compute": "compute-bound", "memory": "memory-bandwidth-bound",
            "communication": "communication-bound", "overhead": "overhead-bound"}[kind]
    return f"{word} ({by_kind[kind] / total:.0%} of the critical path)"


def _phase(model: CostModel, pg: _PhaseGraph, batch: int, pp: int, step_overhead: float,
           trace: dict[str, PhasePath] | None = None) -> PhaseDetail:
    costs = _cost_phase(model, pg, batch)
    weight = {v: c.seconds for v, c in costs.items()}
    cp, path = pg.longest(weight)
    host_us = host_us_per_kernel(model.eff, pg.phase, model.tokens(pg.phase, batch))
    replicated = model.tokens_replicated(pg.phase)  # names an expert-TP combine for what it is priced as
    gpu = _stage_times(pg, path, costs, pp)
    launches = _stage_launches(pg, costs, pp) if host_us else [0.0] * pp
    stages = host_floor(gpu, launches, host_us) if host_us else gpu
    micro, bubble = 1, 0.0
    m = min(batch, pp)
    if pp > 1 and m > 1:
        mcosts = _cost_phase(model, pg, math.ceil(batch / m))
        _, mpath = pg.longest({v: c.seconds for v, c in mcosts.items()})
        mlaunches = _stage_launches(pg, mcosts, pp) if host_us else [0.0] * pp
        latency, gpu_latency, piped = pass_schedule(pg.phase, gpu, launches, m, _stage_times(pg, mpath, mcosts, pp),
                                                    mlaunches, host_us)
        if piped:
            micro = m
            bubble = (pp - 1) / (m + pp - 1) if pg.phase == "prefill" else 1 - m / pp
            if trace is not None:
                trace[pg.phase] = _path_of(pg, mpath, mcosts, pp, m, latency, step_overhead, replicated)
    else:
        latency, gpu_latency, _ = pass_schedule(pg.phase, gpu, launches, 1, None, None, host_us)
        if pp > 1:
            bubble = (pp - 1) / pp  # one sequence occupies one stage at a time
    if trace is not None and pg.phase not in trace:
        trace[pg.phase] = _path_of(pg, path, costs, pp, 1, latency, step_overhead, replicated)
    wait = latency - gpu_latency
    comm = sum(costs[v].seconds if costs[v].kind == "communication" else costs[v].comm_s for v in path)
    hidden = sum(costs[v].hidden_seconds for v in path)
    total = latency + step_overhead
    scale = gpu_latency / cp if cp else 0.0  # micro-batching rescales the whole path
    breakdown = {
        "compute": scale * sum(costs[v].compute_s for v in path) * 1e3,
        "memory": scale * sum(costs[v].memory_s for v in path) * 1e3,
        "communication": scale * comm * 1e3,
        "overhead": (scale * sum(costs[v].overhead_s for v in path) + wait + step_overhead) * 1e3,
    }
    return PhaseDetail(
        latency_ms=total * 1e3, critical_path_ms=cp * 1e3, step_overhead_ms=step_overhead * 1e3,
        tokens=model.tokens(pg.phase, batch), micro_batches=micro, bubble_fraction=bubble,
        stage_ms=[s * 1e3 for s in stages], communication_ms=comm * 1e3, communication_hidden_ms=hidden * 1e3,
        host_launch_ms=sum(launches) * host_us * 1e-3, host_wait_ms=wait * 1e3, breakdown_ms=breakdown,
        critical_path=_contributors(pg, path, costs, cp + wait + step_overhead, step_overhead, wait, replicated),
        bottleneck=_bottleneck(pg, path, costs, wait),
    )


# ---------------------------------------------------------------------------------------------- main
class _Prepared:
    """What does not depend on efficiency factors or overlap: replica 0's DAG and its phase sub-DAGs."""

    def __init__(self, full: Plan, graph: nx.DiGraph | None = None, replica_gpus: int | None = None) -> None:
        self.layout = Layout(full)
        with gc_paused():
            # every node priced by what one of its GPUs runs, whether drawn per shard or over its TP group
            self.graph = per_gpu_form(build_working(full, self.layout).graph if graph is None else graph,
                                      full.spec)
            order = list(nx.topological_sort(self.graph))
            # disaggregated: the KV hand-off is costed between the pools (disagg.py), not inside prefill
            skip = frozenset({NodeType.KV_TRANSFER}) if self.layout.disaggregated else frozenset()
            self.phases = {ph: _PhaseGraph(self.graph, order, ph, skip) for ph in ("prefill", "decode")}
            self.replica_gpus = replica_gpus or len(devices_used(self.graph))


def _submitted(full: Plan, dag: Any) -> _Prepared:
    """The submitted DAG itself, normalized and folded as validate_dag sees it, ready to price; refused when its
    structure breaks a rule (numbers for a broken DAG would be numbers for some other DAG).  Plan-level findings
    (memory, degrees) are left to the estimate's warnings, as for a plan."""
    from tools.rules.causes import group_causes, where
    from tools.rules.validate import check, load_dag

    data = dag.model_dump() if isinstance(dag, BaseModel) else dag
    ctx, _ = load_dag(dict(data))
    found = group_causes(check(ctx), ctx.graph)
    broken = [v for v in found if v.severity == "error" and v.caused_by is None
              and (v.location.nodes or not (v.location.field or "").startswith("plan"))]
    if broken or ctx.graph is None:
        first = broken[0] if broken else None
        what = f"{first.rule_id} at {where(first)}: {first.message[:240]}" if first else "it has no usable graph"
        raise PdagInputError("dag", f"the DAG does not validate ({len(broken)} root error(s); first {what}), so it "
                             "cannot be priced", "a DAG that validate_dag accepts: run autofix_dag on it first, or "
                             "pass the plan to price the DAG pdag builds")
    reps = max(1, len(ctx.of(NodeType.REPLICA)))
    per_replica = None if ctx.layout is None or ctx.layout.disaggregated else max(1, ctx.gpus_used // max(
        1, ctx.replica_count)) if reps > 1 else None
    return _Prepared(full, ctx.graph, per_replica)


_PREPARED: dict[str, _Prepared] = {}
_PREPARED_MAX = 32


def _prepared(full: Plan) -> _Prepared:
    """The DAG and layout depend on the model, hardware, degrees, options and engine (whether it splits the
    vocabulary) only: plans that differ in workload, objective or dtypes share one (the costs, which do depend
    on those, are computed per call)."""
    key = full.model_dump_json(exclude_none=True, exclude={"workload", "objective", "dtype", "kv_dtype"})
    hit = _PREPARED.pop(key, None)
    if hit is None:
        hit = _Prepared(full)
        while len(_PREPARED) >= _PREPARED_MAX:
            _PREPARED.pop(next(iter(_PREPARED)))
    _PREPARED[key] = hit  # most recent last
    return hit


def estimate_performance(
    plan: Plan | dict[str, Any] | None = None,
    dag: Any = None,
    overlap: bool | None = None,
    efficiency: Overlay = None,
    *,
    balanced_experts: bool = False,
    sla: Sla | dict[str, Any] | None = None,
    trace: dict[str, PhasePath] | None = None,
    simulate: bool = True,
) -> Estimate:
    """Estimate latency, throughput, KV cache and memory of a plan, or of a submitted DAG: the DAG's own nodes,
    devices and folds are priced (its embedded plan gives hardware and workload), and a DAG that fails
    validation is refused with the rule it breaks.

    ``overlap`` overrides ``plan.options.overlap_comm``; ``efficiency`` is an overlay (dict or JSON path) of
    efficiency factors, defaulting to the file named by ``$PDAG_EFFICIENCY`` if set.  ``balanced_experts``
    (for what-if analysis) assumes perfectly even expert load instead of the expected maximum.  ``sla``
    (``max_tpot_ms``, ``max_ttft_ms``) checks the serving figures against it and finds the concurrency with the
    most output tokens/s per GPU within it (``best_under_sla``; aggregated plans).
    ``trace``, when given, receives each phase's priced critical path (``PhasePath``, for the pictures).
    """
    full = resolve_plan(plan, dag)
    if overlap is not None and not isinstance(overlap, bool):
        raise PdagInputError("overlap", f"expected true or false, got {overlap!r}", "a boolean")
    use_overlap = full.options.overlap_comm if overlap is None else overlap
    prep = _prepared(full) if plan is not None else _submitted(full, dag)
    layout = prep.layout
    eff = plan_efficiency(full, efficiency)
    calibrated = load_overlay(efficiency) is not None
    model = CostModel(full, layout, eff, use_overlap, balanced_experts)
    wl = full.workload
    pre = _phase(model, prep.phases["prefill"], wl.batch_size, layout.pools["prefill"].pp,
                 eff["step_overhead_ms"] * 1e-3, trace)
    dec = _phase(model, prep.phases["decode"], wl.batch_size, layout.pools["decode"].pp,
                 eff["decode_step_overhead_ms"] * 1e-3, trace)
    mem = memory_report(full, layout, efficiency)
    sla_m = _parse_sla(sla)
    serving = best = None
    dec_pp, dec_over = layout.pools["decode"].pp, eff["decode_step_overhead_ms"] * 1e-3

    def plain_at(b: int) -> float:
        if b == wl.batch_size:
            return dec.latency_ms
        return _phase(model, prep.phases["decode"], b, dec_pp, dec_over).latency_ms

    decode_at = plain_at
    sd, step_at = full.speculative, None
    if sd is not None:
        vmodel = CostModel(full, layout, eff, use_overlap, balanced_experts, decode_queries=sd.num_draft_tokens + 1)
        step_at = speculative_pricer(full, layout.phases["decode"].tp, plain_at, lambda b: _phase(
            vmodel, prep.phases["decode"], b, dec_pp, dec_over).latency_ms)
        decode_at = lambda b: step_at(b).ms_per_token  # noqa: E731
    hit = full.prefix_hit_fraction
    overhead_ms = eff["step_overhead_ms"]
    serving_plain = capacity_plain = capacity = None
    if not layout.disaggregated:
        one = pre if wl.batch_size == 1 else _phase(
            model, prep.phases["prefill"], 1, layout.pools["prefill"].pp, eff["step_overhead_ms"] * 1e-3)
        pre_raw = Prefill(one.latency_ms, one.host_launch_ms, one.host_wait_ms)
        pre1 = replace(pre_raw, ms=cached_prefill_ms(one.latency_ms, overhead_ms, hit))
        capacity, shared = memory_limits(full, eff, mem, layout.pools["prefill"].pp)
        ride = riding_ms(full, layout, eff, mem.weights_bytes, layout.pools["prefill"].pp)
        serving = continuous(full, eff, wl.batch_size, pre1, decode_at, layout.dp, prep.replica_gpus * layout.dp,
                             capacity, shared, sla_m, ride)
        if sd is not None or full.prefix_caching is not None:  # the same load without either feature
            bare = full.model_copy(update={"speculative": None, "prefix_caching": None})
            plain_mem = memory_report(bare, layout, efficiency)
            capacity_plain, shared_plain = memory_limits(bare, eff, plain_mem, layout.pools["prefill"].pp)
            serving_plain = continuous(bare, eff, wl.batch_size, pre_raw, plain_at, layout.dp,
                                       prep.replica_gpus * layout.dp, capacity_plain, shared_plain,
                                       riding=riding_ms(bare, layout, eff, plain_mem.weights_bytes,
                                                        layout.pools["prefill"].pp))
        if sla_m is not None:
            best = best_under_sla(full, sla_m, max(1, capacity), shared, eff, use_overlap, ride)
    static_tpot = step_at(wl.batch_size).ms_per_token if step_at is not None else dec.latency_ms
    figures = headline(full, layout, eff, cached_prefill_ms(pre.latency_ms, overhead_ms, hit), static_tpot,
                       prep.replica_gpus)
    served = pcts = None
    served_plain = served_cold = None
    if simulate:  # the served request at the workload's load (simulate.py), speculation priced per step there
        served = simulate_serving(full, eff=eff, overlap=use_overlap)
        if sd is not None:  # the same load without speculation
            served_plain = simulate_serving(full.model_copy(update={"speculative": None}), eff=eff,
                                            overlap=use_overlap)
        if full.prefix_caching is not None and not layout.disaggregated:  # the same load without cache hits
            served_cold = simulate_serving(full.model_copy(update={"prefix_caching": None}), eff=eff,
                                           overlap=use_overlap)
    spec_fig = _speculative_figures(full, layout, step_at, serving, serving_plain, served, served_plain) \
        if step_at is not None else None
    prefix_fig = _prefix_figures(full, pre.latency_ms if wl.batch_size == 1 else one.latency_ms, overhead_ms,
                                 serving, serving_plain, served, served_cold) if full.prefix_caching is not None and \
        not layout.disaggregated else None
    if served is not None:
        ttft, tpot, load = served.ttft_ms.mean, served.tpot_ms.mean, served.load
        pcts = {"ttft_p50_ms": served.ttft_ms.p50, "ttft_p90_ms": served.ttft_ms.p90,
                "ttft_p99_ms": served.ttft_ms.p99, "tpot_p50_ms": served.tpot_ms.p50,
                "tpot_p90_ms": served.tpot_ms.p90, "tpot_p99_ms": served.tpot_ms.p99}
    elif serving is not None:
        ttft, tpot = serving.ttft_ms, serving.tpot_ms
        load = f"{wl.batch_size} requests in flight per replica (continuous batching, arrivals spread)"
    else:  # disaggregated: one request's prefill, its own KV hand-off and its first decode step
        one = pre if wl.batch_size == 1 else _phase(
            model, prep.phases["prefill"], 1, layout.pools["prefill"].pp, eff["step_overhead_ms"] * 1e-3)
        ttft = one.latency_ms + kv_handoff(full, layout, eff, 1).seconds_per_batch * 1e3 + dec.latency_ms
        tpot = dec.latency_ms
        load = f"{wl.batch_size} requests decoding per decode replica, prompts prefilled one at a time"
    st = figures.throughput
    if served is not None:
        rate = DeploymentThroughput(output_tokens_per_s=served.output_tokens_per_s,
                                    output_tokens_per_s_per_gpu=served.output_tokens_per_s_per_gpu,
                                    output_tokens_per_s_per_user=served.output_tokens_per_s_per_user,
                                    basis=f"served at {served.load}")
    elif serving is not None:  # no simulation: the rates beside ttft_ms and tpot_ms are the same model's
        rate = DeploymentThroughput(output_tokens_per_s=serving.output_tokens_per_s,
                                    output_tokens_per_s_per_gpu=serving.output_tokens_per_s_per_gpu,
                                    output_tokens_per_s_per_user=serving.output_tokens_per_s_per_user,
                                    basis=f"steady-state estimate at {load}")
    else:
        rate = DeploymentThroughput(output_tokens_per_s=st.output_tokens_per_s,
                                    output_tokens_per_s_per_gpu=st.output_tokens_per_s_per_gpu,
                                    output_tokens_per_s_per_user=st.single_request_tokens_per_s, basis="static batch")
    per_gpu_kv = {g.gpu: g.kv_cache_bytes for g in mem.per_gpu}
    kv = KvCache(bytes_per_token=mem.kv_bytes_per_token, bytes_total=mem.kv_cache_bytes_total,
                 bytes_per_gpu_max=max(per_gpu_kv.values(), default=0.0), per_gpu=per_gpu_kv,
                 state_bytes_per_sequence=full.spec.state_bytes_per_sequence())
    warnings = []
    queued = load_queues(full, mem)
    if not mem.fits and not queued:
        warnings.append("plan does not fit in GPU memory; the latency figures assume it did. " + mem.message
                        + "; to fit: " + unfit_hint(full, layout, mem))
    if figures.gpus > full.hardware.num_gpus:
        warnings.append(f"the DAG uses {figures.gpus} GPUs but hardware.num_gpus is {full.hardware.num_gpus}")
    if figures.pool_balance is not None and not 0.5 <= figures.pool_balance <= 2:
        slow = "prefill" if figures.pool_balance < 1 else "decode"
        warnings.append(f"the pools are unbalanced (prefill/decode rate {figures.pool_balance:.2f}): the {slow} pool "
                        f"limits throughput; about {figures.balanced_prefill_per_decode:.2f} prefill replicas per "
                        "decode replica would balance them")
    overloaded = served is not None and _overloaded(wl, served)
    if overloaded:
        warnings.append(f"the arrival rate ({wl.request_rate:g} req/s) is above what this deployment serves (about "
                        f"{served.request_throughput_per_s:.3g} req/s): the queue grows through the run, so ttft_ms, "
                        f"its percentiles and tpot_ms grow with workload.num_requests ({served.requests:,} simulated) "
                        "instead of settling; a lower request_rate, more replicas or a faster layout settle them")
    if served is not None and _kv_saturated(served, capacity):
        fewer = {"closed": "fewer clients", "poisson": "a lower request rate", "burst": "fewer requests at once"}
        warnings.append(f"the KV cache is saturated at this load: at most {served.max_running:,} requests run at "
                        f"once per replica (KV peak {served.kv_peak_fraction:.0%} of {served.kv_cache_tokens:,} "
                        f"tokens), {served.preemptions:,} preemptions, {served.queue_ms.mean:,.0f} ms mean queueing; "
                        f"ttft_ms and tpot_ms include that wait ({fewer[load_mode(wl)]}, fp8 KV or more GPUs give room)"
                        + ("; the cause is the arrival rate above" if overloaded else ""))
    elif queued:  # more clients than the cache holds at full length, the run not held back (shorter drawn lengths)
        warnings.append(f"the KV cache holds {mem.max_batch_size_that_fits} of the {wl.batch_size} sequences per "
                        f"replica the {wl.concurrency} clients keep in flight at full length: the engine queues the "
                        "rest when they grow (memory figures are at the full batch)")
    record = track_record(full.spec.is_moe, served is not None or serving is not None,  # a disaggregated plan's
                          figures.gpus > full.hardware.gpus_per_node, full.engine)  # served figures are served too
    warnings.extend(track_record_warnings(record))
    return Estimate(
        ttft_ms=ttft,
        tpot_ms=tpot,
        load=load,
        **(pcts or {}),
        served=served,
        prefill_latency_ms=figures.ttft_ms,
        decode_latency_ms_per_token=figures.tpot_ms,
        e2e_latency_ms=figures.e2e_ms,
        tpot_with_prefill_ms=figures.tpot_with_prefill_ms,
        throughput=rate,
        static_batch_throughput=st,
        scheduler=_scheduler(full) if served is not None else "",
        kv_cache=kv,
        memory=mem,
        gpus_used=figures.gpus,
        fits=mem.fits,
        prefill=pre,
        decode=dec,
        critical_path={"prefill": pre.critical_path, "decode": dec.critical_path},
        bottleneck={"prefill": pre.bottleneck, "decode": dec.bottleneck},
        assumptions=_assumptions(full, model, use_overlap, layout)
        + (spec_fig.assumptions if spec_fig else []) + (prefix_fig.assumptions if prefix_fig else []),
        provenance=_provenance(full, eff, calibrated),
        warnings=warnings,
        pools=figures.pools,
        kv_transfer=figures.kv_transfer,
        pool_balance=figures.pool_balance,
        balanced_prefill_per_decode=figures.balanced_prefill_per_decode,
        balanced_split=figures.balanced_split,
        steady_state_estimate=serving,
        best_under_sla=best,
        track_record=record,
        speculative=spec_fig,
        prefix_caching=prefix_fig,
    )


# Share of an open-loop arrival rate below which the served request rate counts as overloaded: a run that keeps up
# finishes N requests in N / rate seconds plus its last requests' latency, a few percent short of the rate
OVERLOAD_SHARE = 0.9


def _overloaded(wl: Workload, served: SimResult) -> bool:
    """Open-loop arrivals (no concurrency cap) faster than the deployment serves them: its queue never settles, so
    every latency figure depends on how long the run is."""
    return wl.request_rate is not None and wl.concurrency is None and \
        served.request_throughput_per_s < OVERLOAD_SHARE * wl.request_rate


# Peak share of the KV pages in use from which a served run counts as saturated: page rounding and the last
# request's partial page keep a full cache a little under 100 %, so "full" is read with this margin.
KV_SATURATED_FRACTION = 0.95


def _kv_saturated(served: SimResult, capacity: int | None) -> bool:
    """The served run was held back by KV room: requests were preempted, the pages filled up, or as many requests
    ran as the cache holds (``capacity`` per replica, aggregated plans) while others queued longer than a step."""
    if served.preemptions or served.kv_peak_fraction >= KV_SATURATED_FRACTION:
        return True
    return capacity is not None and served.max_running >= capacity and served.queue_ms.p90 > served.tpot_ms.p50


def _scheduler(plan: Plan) -> str:
    """The scheduler the simulation ran, named with the plan's engine (an engine-neutral profile has none)."""
    policy = POLICY_OF_ENGINE.get(plan.engine, "vllm")
    if plan.engine == policy:
        return policy
    how = f"steps formed as {policy}'s scheduler forms them, priced with the {plan.engine!r} profile"
    if plan.engine == "generic":
        return f"{policy}: the plan names no engine, so {how} (plan.engine vllm, sglang or trtllm chooses)"
    return f"{policy}: {how}"


def _speculative_figures(plan: Plan, layout: Layout, step_at: Any, serving: Serving | None,
                         plain: Serving | None, served: SimResult | None = None,
                         served_plain: SimResult | None = None) -> SpeculativeFigures:
    """The speculative step at the plan's batch, and the served TPOT and throughput with and without it: from the
    two simulations at the workload's load when given, else from the continuous-batching model."""
    sd = plan.speculative
    assert sd is not None
    acc = acceptance(sd)
    st = step_at(plan.workload.batch_size)
    frac = draft_read_fraction(plan, layout.phases["decode"].tp)
    src = acc.source
    notes = [
        f"a step verifies k + 1 = {sd.num_draft_tokens + 1} tokens per sequence in one target pass (GEMMs, experts, "
        "collectives and LM head over k + 1 tokens, KV read once) and runs "
        f"{draft_passes(plan)} draft pass(es), each {frac:.2%} of a plain decode step's weight reads",
        f"tokens per step {acc.tokens_per_step:.2f} = 1 + sum of the reach of each draft position"
        + (f" (first accepted {acc.first:.2f}, later {acc.later:.2f})" if acc.first == acc.first else "")
        + f"; acceptance from {src}",
        "TPOT = step time / tokens per step; the draft's catch-up over accepted tokens and rejected drafts' KV "
        "writes are not priced; acceptance depends on prompts and temperature",
    ]
    if served is not None and served_plain is not None:
        notes.append("served TPOT and throughput with and without speculation: two simulations at the same load, "
                     "each decode step priced as above at its batch and emitting the expected tokens per step "
                     "(whole tokens, the fraction carried per request)")
        return SpeculativeFigures(
            method=sd.method, num_draft_tokens=sd.num_draft_tokens, topk=sd.topk, draft_passes=draft_passes(plan),
            tokens_per_step=acc.tokens_per_step, acceptance_source=src, draft_read_fraction=frac, static=st,
            tpot_without_ms=served_plain.tpot_ms.mean, tpot_with_ms=served.tpot_ms.mean,
            output_tokens_per_s_without=served_plain.output_tokens_per_s,
            output_tokens_per_s_with=served.output_tokens_per_s, assumptions=notes)
    return SpeculativeFigures(
        method=sd.method, num_draft_tokens=sd.num_draft_tokens, topk=sd.topk, draft_passes=draft_passes(plan),
        tokens_per_step=acc.tokens_per_step, acceptance_source=src, draft_read_fraction=frac, static=st,
        tpot_without_ms=plain.tpot_ms if plain else st.plain_step_ms,
        tpot_with_ms=serving.tpot_ms if serving else st.ms_per_token,
        output_tokens_per_s_without=plain.output_tokens_per_s if plain else 0.0,
        output_tokens_per_s_with=serving.output_tokens_per_s if serving else 0.0, assumptions=notes)


def _prefix_figures(plan: Plan, prefill_ms: float, overhead_ms: float, serving: Serving | None,
                    plain: Serving | None, served: SimResult | None = None,
                    served_cold: SimResult | None = None) -> PrefixFigures:
    """One prompt's prefill with and without hits, and TTFT and running requests with and without them: from two
    simulations at the workload's load when given (the cache's pages and evictions simulated), else from the
    continuous-batching model."""
    pc = plan.prefix_caching
    assert pc is not None
    hit = plan.prefix_hit_fraction
    shared = (pc.shared_prefix_len or 0) if pc.enabled else 0
    notes = [f"{hit:.0%} of each prompt's tokens come from the cache and are not recomputed: a prefill pass costs its "
             f"{overhead_ms:g} ms overhead plus {1 - hit:.0%} of the rest (attention over the cached keys is not "
             "priced separately)"]
    if shared:
        notes.append(f"the {shared} shared prefix tokens are held once in the KV cache, not per request")
    if not pc.enabled:
        notes.append("prefix caching disabled: no hits")
    if served is not None and served_cold is not None:
        notes.append("TTFT and running requests with and without hits: two simulations at the same load, the cached "
                     "prefix skipped at admission (whole pages, never the prompt's last token; the suffix's attention "
                     "over the cached keys priced), a shared prefix held once and evicted when unreferenced and pages "
                     "run out")
        return PrefixFigures(
            hit_fraction=hit, shared_prefix_len=shared, prefill_ms_without=prefill_ms,
            prefill_ms_with=cached_prefill_ms(prefill_ms, overhead_ms, hit), ttft_without_ms=served_cold.ttft_ms.mean,
            ttft_with_ms=served.ttft_ms.mean, running_without=served_cold.max_running,
            running_with=served.max_running, assumptions=notes)
    return PrefixFigures(
        hit_fraction=hit, shared_prefix_len=shared, prefill_ms_without=prefill_ms,
        prefill_ms_with=cached_prefill_ms(prefill_ms, overhead_ms, hit),
        ttft_without_ms=plain.ttft_ms if plain else None, ttft_with_ms=serving.ttft_ms if serving else None,
        running_without=plain.running if plain else None, running_with=serving.running if serving else None,
        assumptions=notes)


def _parse_sla(sla: Sla | dict[str, Any] | None) -> Sla | None:
    if sla is None or isinstance(sla, Sla):
        return sla
    if not isinstance(sla, dict):
        raise PdagInputError("sla", f"expected an object, got {type(sla).__name__}", "{max_tpot_ms, max_ttft_ms}")
    try:
        return Sla.model_validate(sla)
    except ValidationError as exc:
        raise validation_error_to_input_error(exc, "sla") from None


def _assumptions(plan: Plan, model: CostModel, overlap: bool, layout: Layout) -> list[str]:
    wl = plan.workload
    e = model.eff
    out = [f"model: {n}" for n in plan.spec.notes] + [
        f"roofline per kernel: time = (t_compute^p + t_memory^p)^(1/p) + launch overhead, p = "
        f"{e['roofline_blend_exponent']:g} (no perfect overlap of loads and math near the ridge point); "
        f"GEMMs run in {model.gemm_dtype}, attention in 16-bit",
        f"engine profile {plan.engine!r} (knowledge/engines/{plan.engine}.json): "
        f"{e['kernel_overhead_us']:g}/{e['decode_kernel_overhead_us']:g} us per kernel in prefill/decode "
        f"(CUDA graphs in decode), all-reduce floor {e['allreduce_min_us']:g} us, all-to-all latency "
        f"{e['alltoall_min_us']:g} us",
        f"decode reads the KV cache of the average context input_len + output_len/2 = {model.decode_context:g} tokens",
        "prefill processes the whole batch in one pass (chunked prefill would not change the FLOPs)",
        "causal attention: each prompt token attends to (L+1)/2 keys on average (flash attention, no L^2 memory)",
        f"engine overhead of {e['step_overhead_ms']:g} ms per prefill pass and {e['decode_step_overhead_ms']:g} ms "
        "per decode step (scheduler, sampling, host)",
        "collectives: alpha-beta with the catalog link (intra-node NVLink/xGMI/PCIe, inter-node network); "
        "all-reduce takes the fastest of ring, one-shot and two-shot (intra-node) or ring and tree (inter-node)",
        "DP replicas are independent: latency is that of replica 0, throughput scales by dp",
    ]
    a, b = model.gemm_half
    if a or b:
        ref = e["gemm_reference_width"]
        out.append(f"dense GEMM speed ~ n/(n+{a:g}) x k/(k+{b:g}) relative to the {ref:g}-square GEMM (narrow TP "
                   "slices run slower per FLOP, wide ones faster; knowledge/hardware/efficiency.json)")
    mesh = plan.accelerator.intra_node.mesh_links
    if mesh:
        out.append(f"intra-node links form a mesh of {mesh} point-to-point links per GPU: a collective over g GPUs "
                   f"of a node moves data on g - 1 of them (TP2 gets 1/{mesh} of the node's bandwidth)")
    if e["prefill_host_us_per_kernel"] > 0:
        out.append(f"eager prefill: a pass (per pipeline stage) takes at least its kernel launches times "
                   f"{e['prefill_host_us_per_kernel'] * e['host_launch_scale']:g} us of host time, so a short prompt "
                   "is host-bound" +
                   (f"; a pass of at most {e['prefill_graph_max_tokens']:g} tokens replays a CUDA graph instead"
                    if e["prefill_graph_max_tokens"] else ""))
    if overlap and not (e["tp_overlap_fraction"] or e["ep_overlap_fraction"]):
        out.append("overlap_comm on, but this engine profile hides none of the TP all-reduce or EP all-to-all time "
                   "behind compute (no micro-batch overlap priced for it): every collective is on the critical path")
    elif overlap:
        out.append(f"overlap_comm on: the engine hides {e['tp_overlap_fraction']:.0%} of TP all-reduce / SP all-gather "
                   f"and {e['ep_overlap_fraction']:.0%} of EP all-to-all time behind compute, never below one token's "
                   "exchange (two micro-batches each pay it; engines do not overlap the TP all-reduce)")
    else:
        out.append("overlap_comm off: every collective is on the critical path")
    if plan.spec.is_moe:
        out.append("MoE: the slowest Expert node carries the expected maximum routed load under uniform random "
                   "top-k routing (mean + sd*sqrt(2 ln ep)); no expert-load balancer or redundant experts")
    if plan.spec.attention == "mla":
        out.append("MLA: prefill expands the latent to per-head K/V; decode uses the absorbed form over the latent")
    if layout.pp > 1:
        out.append("PP: micro-batches of min(batch, pp) are used when that is faster; batch-1 decode gets none")
    note = _weights_note(plan, model.gemm_dtype)
    if note:
        out.append(note)
    if wl.batch_size > 1:
        out.append("static_batch_throughput: all sequences start and finish together, prefill included")
        if not layout.disaggregated:
            ahead = e["scheduler_ahead_steps"]
            out.append("steady_state_estimate (the analytic model search pre-ranks with, not the served figures): its "
                       "ttft_ms has arrivals spread over time (benchmarks whose clients "
                       "vary their lengths measure about this median; the track record says how far MoE prefill "
                       "ran slower), ttft_lockstep_ms has every client's prompt arrive in one burst; fixed-length "
                       "closed-loop clients land between the two or above (docs/accuracy.md); "
                       + (f"the scheduler runs {ahead:g} step ahead of the GPU, so a new request waits that step too "
                          "(plan.engine_options.scheduler_ahead)" if ahead else
                          "the scheduler picks each step after the previous one (plan.engine_options.scheduler_ahead)"))
            out.append(f"serving step budget: {e['prefill_chunk_tokens']:g} tokens per engine step, decodes and "
                       "prompt chunks together (plan.engine_options.max_batched_tokens)")
    dcp = layout.phases["decode"].dcp
    if dcp > 1:
        out.append(f"decode context parallel dcp = {dcp}: each rank of a DCP group keeps 1/{dcp} of the KV that TP "
                   f"replicates (tokens striped over the ranks) and reads that share per step for the group's "
                   f"{dcp}x heads; every decode attention adds an all-gather of the group's queries and a "
                   "reduce-scatter of partial outputs with their fp32 log-sum-exps on the group's link (vLLM's "
                   "ag_rs exchange); prefill is priced as without DCP")
    if any(p.attn_dp > 1 for p in layout.phases.values()):
        a = max(p.attn_dp for p in layout.phases.values())
        out.append(f"attention-DP: each of the {a} groups takes ceil(batch/{a}) = {-(-wl.batch_size // a)} "
                   "sequences (the fullest group sets the pace); attention, KV, dense FFN run per group without "
                   "cross-group traffic; dispatch/combine and experts carry all groups' tokens")
    if layout.disaggregated:
        out.append("disaggregated, static view: prefill_latency_ms = prefill pass + KV hand-off of the batch (after "
                   "the pass, no layer-wise streaming); decode_latency_ms_per_token = decode step with no prefill in "
                   "between; static_batch_throughput = min(prefill pool, decode pool request rate) x output_len; "
                   "batch_size is per replica in both pools")
    return out


def _provenance(plan: Plan, eff: dict[str, float], calibrated: bool) -> list[Provenance]:
    acc, spec = plan.accelerator, plan.spec
    src = acc.sources
    out = [
        Provenance(figure=f"{acc.id} peak {plan.dtype} FLOP/s", kind="catalog",
                   value=str(getattr(acc.dense_tflops, plan.dtype)), source=src.get(f"dense_tflops.{plan.dtype}", "")),
        Provenance(figure=f"{acc.id} HBM bandwidth", kind="catalog", value=f"{acc.memory_bandwidth_bytes_per_s:g}",
                   source=src.get("memory_bandwidth_bytes_per_s", "")),
        Provenance(figure=f"{acc.id} memory (capacity budgeted)", kind="catalog",
                   value=f"{acc.capacity_bytes} ({acc.memory_label()})",
                   source=src.get("driver_memory_bytes" if acc.driver_memory_bytes else "memory_bytes", "")),
        Provenance(figure=f"{acc.id} intra-node link", kind="catalog",
                   value=f"{acc.intra_node.kind} {acc.intra_node.bandwidth_bytes_per_s:g} B/s",
                   source=src.get("intra_node.bandwidth_bytes_per_s", "")),
        Provenance(figure=f"{acc.id} inter-node link", kind="catalog",
                   value=f"{acc.inter_node.kind} {acc.inter_node.bandwidth_bytes_per_s:g} B/s",
                   source=src.get("inter_node.bandwidth_bytes_per_s", "")),
        Provenance(figure=f"model {spec.id} dimensions", kind="catalog", value=spec.name, source=spec.source or ""),
    ]
    for key in ("compute_efficiency_gemm", "compute_efficiency_gemm_fp8", "compute_efficiency_attention",
                "memory_efficiency", "small_gemm_memory_efficiency", "comm_bandwidth_efficiency",
                "roofline_blend_exponent", "kernel_overhead_us", "decode_kernel_overhead_us", "step_overhead_ms",
                "decode_step_overhead_ms", "allreduce_min_us", "alltoall_min_us", "tp_overlap_fraction",
                "ep_overlap_fraction"):
        out.append(Provenance(figure=key, kind="calibrated" if calibrated else "assumption", value=f"{eff[key]:g}",
                              source="efficiency overlay" if calibrated else
                              efficiency_source(key, plan.engine, plan.accelerator.id)))
    out.append(Provenance(figure="latencies, throughput, KV, memory", kind="modelled", value="",
                          source="tools/estimate (critical path over the DAG) and tools/core/memory.py"))
    return out


def node_costs(plan: Plan | dict[str, Any], batch: int | None = None) -> dict[str, NodeCost]:
    """Every node of replica 0 with its cost (for inspection and tests)."""
    p = parse_plan(plan)
    layout = Layout(p)
    graph = build_graph(p, layout, first_replica_only=True)
    model = CostModel(p, layout, plan_efficiency(p), p.options.overlap_comm)
    b = batch or p.workload.batch_size
    groups = {ph: pl.attn_dp for ph, pl in layout.phases.items()}
    return {v: model.cost(a, node_batch(a, b, groups.get(a.get("phase") or "prefill", 1)))  # type: ignore[call-overload]
            for v, a in graph.nodes(data=True)
            if a["type"] not in CONTROL_TYPES and (a.get("replica") or 0) == 0}


def _weights_note(plan: Plan, gemm_dtype: str) -> str | None:
    """How the stored weight format computes: on its own tensor cores, or de-quantised into 16-bit math."""
    fmt = storage(plan)
    if fmt in ("bf16", "fp16") or (fmt == plan.dtype == gemm_dtype and not attention_unquantized(plan)):
        return None

    def how(dt: str) -> str:
        if dt in ("bf16", "fp16"):
            return f"de-quantised in the kernel, math in {dt} (weight-only quantisation)"
        return f"on {fmt} tensor cores" + (f", priced at the {dt} peak" if dt != fmt else "")

    if experts_only(plan):
        return f"{fmt} experts: GEMMs {how(expert_gemm_dtype(plan))}; the other layers in {gemm_dtype}"
    if attention_unquantized(plan):
        kept = "attention, dense FFN and shared experts" if dense_unquantized(plan) else "attention"
        return f"{fmt} weights: GEMMs {how(gemm_dtype)}; the checkpoint keeps {kept} in 16-bit (2 bytes per weight)"
    return f"{fmt} weights: GEMMs {how(gemm_dtype)}"

