"""``search_strategies``: enumerate the plans that are valid by construction, estimate them, rank them.

Space.  Degrees are powers of two (plus the cluster size and the node size) and form, per replica, a stage
group of ``W = max(tp, ep)`` GPUs and ``pp`` stages.  An alternative is dropped, and counted under the rule
id of the catalog that forbids it, when (checked in this order):

``EP-MOE-ONLY`` ep > 1 on a dense model; ``GPU-EXCEEDS-CLUSTER`` pp*W > num_gpus; ``PP-DEGREE-LE-LAYERS``;
``TP-WITHIN-NODE`` the stage group does not fit in one NVLink domain (a node, or an NVL72 rack: the validator's
``Cluster.nvlink_domain``); ``TP-HEADS-DIVISIBLE``;
``TP-KV-HEADS-DIVISIBLE`` (replication, tp a multiple of the KV heads, is allowed and warned as TP-KV-REPLICATED);
``EP-EXPERT-NODES-EQ-GPUS`` ep > experts; ``EP-EVEN-EXPERTS`` experts not divisible by ep;
``EP-SPANS-STAGE-GROUP`` ep < W without expert TP; ``EP-NO-EXPERT-TP`` ep < W when expert TP is not allowed;
``SP-LONG-CONTEXT-ONLY`` prefill SP below the catalog's long-context threshold; ``SP-DECODE-INEFFECTIVE`` SP in decode;
``MEM-FITS`` the most loaded GPU does not fit (``tools.core.memory.memory_report``).
Dominated alternatives are not estimated either: ``PP-MEMORY-DRIVEN`` (latency: a larger pp than the
smallest that fits), ``DP-NOT-FOR-LATENCY`` (latency: more replicas than a throughput SLO needs),
``GPU-IDLE`` (throughput: fewer replicas than fit in the cluster).

Attention-DP (MoE models only; the plan states the opt-in ``options.allow_attention_dp``): ``attn_dp = a``
groups of ``tp`` GPUs each, experts spread over all of them (``ep = a * tp``, the stage group).  The stage
group may span domains, or fill part of one, when ``tp = 1`` (expert parallelism over the network, as large EP
deployments do); with ``tp > 1`` it stays in one.  Dropped alternatives: ``ADP-MOE-ONLY`` (dense model),
``ADP-EP-SPANS-GROUPS`` (any other ep), plus the structural rules above.

Disaggregated serving (``num_gpus >= 2``, unless turned off): the GPUs are split into a prefill pool and a
decode pool, each with a layout from the same enumeration; the best few prefill layouts (TTFT for latency,
prefill rate per GPU for throughput) are paired with the best few decode layouts (TPOT / decode rate per GPU),
and the replica counts of each pair are chosen to balance the pools' request rates (throughput: the largest
balanced rate that fits the cluster; latency: one replica of each, since more never shorten a request).
The result names the best aggregated and the best disaggregated plan and says which wins and why.

Load.  ``workload.concurrency`` (closed-loop clients, no ``request_rate``) is the deployment's total in flight:
every plan is compared at that same total, split over its DP replicas (over the decode pool's replicas when
disaggregated), each replica running at most what its memory holds (the rest queue, as an engine queues them).
Without it the batch is per replica, as ``workload.batch_size`` states.

Estimates.  DP replicas are independent copies, so a replica is estimated once (dp = 1) and the deployment's
throughput is the replica's times dp.  For the throughput objective the batch per replica is searched over
powers of two up to the largest that fits in memory (unless the workload fixes it): throughput grows and
TPOT worsens with the batch, so the best batch under an SLO is found by bisection on the exponent; for the
six best layouts it is then refined between that power of two and the next (or the most that fits) to
within 1/32 of the batch.  Each
layout is priced by ``tools.estimate.fast`` (one sub-DAG per distinct layer, the same node costs as
``estimate_performance``, so the figures are equal), built once per layout and reused for every batch.

Speculative decoding (``speculative``: the method the plans may use, e.g. the checkpoint's MTP layers): each layout
of the ranking's head is served by the simulator without speculation and with 1 to ``num_draft_tokens`` draft
tokens of that method (only that length when the setting fixes ``mean_accepted_tokens``); the layout keeps whichever
ranks first for the objective, and its summary gives the figures of the plan without it beside.  A setting the
model or engine cannot run is refused with the rule's words (SPEC-MTP-LAYERS, SPEC-ENGINE-SUPPORT).

Ranking (deterministic).  latency: meets the SLOs, then the latency metric (e2e by default), TPOT, TTFT,
fewer GPUs, higher throughput.  throughput: meets the SLOs, then output tokens/s, tokens/s per GPU, e2e
latency, fewer GPUs.  Remaining ties: smaller pp, then smaller tp, ep, sp, dp, batch, no expert TP first, no
attention-DP first, aggregated before disaggregated.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.core.errors import PdagInputError
from tools.core.handoff import kv_handoff
from tools.core.layout import Layout
from tools.core.memory import memory_report
from tools.core.plan import Hardware, Plan, Workload, parse_plan, screen_plan, validation_error_to_input_error
from tools.estimate.disagg import balanced_split
from tools.estimate.fast import FastEstimator, PriceBook
from tools.estimate.headline import Headline, headline
from tools.estimate.serving import Arrivals, Prefill, continuous, memory_limits, riding_ms
from tools.estimate.simulate import simulate
from tools.rules.registry import catalog, param

__all__ = ["PlanSummary", "SearchResult", "Slo", "search_strategies"]

TIE_BREAK = {
    "latency": "meets SLOs, {metric} latency, TPOT, TTFT, fewer GPUs, higher throughput, "
               "smaller pp, tp, ep, sp, dp, batch, no expert TP, no attention-DP, aggregated first",
    "throughput": "meets SLOs, output tokens/s, tokens/s per GPU, e2e latency, fewer GPUs, "
                  "smaller pp, tp, ep, sp, dp, batch, no expert TP, no attention-DP, aggregated first",
}
REFINED_LAYOUTS = 6  # layouts whose batch is refined between powers of two (throughput objective)
SERVED_LAYOUTS = 8  # with serving: layouts re-priced by the serving simulator (at least top_k)
DISAGG_PREFILL_CANDIDATES = 3
DISAGG_DECODE_CANDIDATES = 3


class Slo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_ttft_ms: float | None = Field(None, gt=0, description="time to first token of a served request")
    max_tpot_ms: float | None = Field(None, gt=0, description="time per output token")
    min_throughput_tokens_per_s: float | None = Field(None, gt=0, description="output tokens/s of the deployment")
    arrivals: Arrivals = Field(
        "spread", description="serving mode: which TTFT max_ttft_ms is checked against, 'spread' (independent "
                              "users) or 'lockstep' (fixed-length closed-loop benchmark clients, prompts in one burst)")


class PlanSummary(BaseModel):
    rank: int | None = Field(None, description="1 = best for the objective; none on a Pareto entry (the front is "
                                               "not ranked) or a best-of-kind plan outside top")
    label: str = Field(description="compact degrees, e.g. 'TP8' or 'DP2 x PP2 x TP4 EP4'")
    plan: dict[str, Any] = Field(description="the complete plan; pass it to validate_dag / estimate_performance")
    gpus_used: int
    batch_size: int = Field(description="sequences per DP replica")
    in_flight: int = Field(0, description="requests in the whole deployment: batch_size x the replicas that hold "
                                          "them; at a request_rate, the simulated mean (rate x mean E2E)")
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    throughput_tokens_per_s: float = Field(description="output tokens/s of the deployment (all replicas)")
    throughput_per_gpu: float
    user_tokens_per_s: float = Field(description="per-user decode speed, 1000 / TPOT")
    basis: str = Field("", description="what ttft_ms, tpot_ms and the rates are: 'served at <load>' (the simulation "
                                       "estimate_performance answers with), 'steady-state estimate' or 'static batch'")
    memory_max_gpu_bytes: float
    memory_capacity_bytes: float
    meets_slo: bool
    slo_misses: list[str] = Field(default_factory=list)
    reason: str = ""
    kind: Literal["aggregated", "disaggregated"] = "aggregated"
    pools: dict[str, Any] | None = Field(
        None, description="disaggregated: each pool's label, replicas, GPUs and request rate")
    pool_balance: float | None = Field(None, description="disaggregated: prefill pool rate / decode pool rate")
    kv_transfer_ms: float | None = Field(None, description="disaggregated: KV hand-off of one prefill batch")
    engines: list[str] = Field(default_factory=list, description="engines whose launch command export_plan writes")
    engine_gaps: dict[str, str] = Field(
        default_factory=dict, description="engine -> the feature it lacks to launch this plan (export refuses it)")
    launchable: bool = Field(True, description="an engine the search was asked for launches it (only plans no "
                                               "such engine launches, listed on request, are false)")


class SearchResult(BaseModel):
    model: str
    hardware: dict[str, Any]
    workload: dict[str, Any]
    objective: str
    slo: dict[str, Any] | None
    top: list[PlanSummary] = Field(description="best plans for the objective, best first")
    pareto: list[PlanSummary] = Field(description="frontier of per-user speed (1/TPOT) vs throughput per GPU")
    rejected: dict[str, int] = Field(description="alternatives dropped before estimation, by catalog rule id")
    rejected_examples: dict[str, str] = Field(description="one dropped alternative per rule id")
    slo_rejected: dict[str, int] = Field(default_factory=dict, description="estimated plans missing an SLO")
    considered: int = Field(description="alternatives enumerated (rejected + estimated)")
    estimated: int = Field(description="estimate_performance calls made")
    tie_break: str
    notes: list[str] = Field(default_factory=list)
    best_aggregated: PlanSummary | None = Field(None, description="best plan with both phases on the same GPUs")
    best_disaggregated: PlanSummary | None = Field(
        None, description="best plan with separate prefill and decode pools (None: not searched or none fits)")
    comparison: str | None = Field(None, description="which kind wins for this workload, and why")


# ---------------------------------------------------------------------------------------------- helpers
@dataclass(frozen=True, order=True)
class _Shape:
    """One replica's layout (everything but dp and batch)."""

    pp: int
    tp: int
    ep: int
    sp: int  # prefill SP (decode always 1)
    expert_tp: bool
    attn_dp: int = 1  # attention-DP groups of tp GPUs each (ep = attn_dp * tp)

    @property
    def width(self) -> int:
        return max(self.attn_dp * self.tp, self.ep)

    @property
    def gpus(self) -> int:
        return self.pp * self.width

    def degrees(self, dp: int) -> dict[str, int]:
        d = {"dp": dp, "pp": self.pp, "tp": self.tp, "ep": self.ep, "sp": 1}
        if self.attn_dp > 1:
            d["attn_dp"] = self.attn_dp
        return d

    def what(self) -> str:
        adp = f" attn_dp={self.attn_dp}" if self.attn_dp > 1 else ""
        return f"pp={self.pp} tp={self.tp} ep={self.ep}{adp}" + (f" sp={self.sp}" if self.sp > 1 else "")


@dataclass
class _Point:
    shape: _Shape
    batch: int
    dp: int
    gpus: int
    ttft: float
    tpot: float
    e2e: float
    tput: float  # deployment
    mem_max: float
    mem_cap: float
    misses: list[str] = field(default_factory=list)
    dshape: _Shape | None = None  # disaggregated: the decode pool's layout (shape is the prefill pool's)
    dp_d: int = 0
    head: Headline | None = None
    served: str = ""  # the simulated load when the figures are the serving simulator's (search_strategies serving)
    spec: dict[str, Any] | None = None  # the speculative decoding chosen for it (search_strategies speculative)
    plain: _Point | None = None  # with spec: the same point served without speculation
    prefill_ms: float = 0.0  # one replica's prefill pass over its batch (static), for the work share of prefill
    step_ms: float = 0.0  # one replica's decode step at its batch
    queued: bool = False  # served: its requests wait longer in the queue than in service (the load is past it)
    in_system: float = 0.0  # served: mean requests in the system (Little's law: request rate x mean E2E)

    @property
    def disaggregated(self) -> bool:
        return self.dshape is not None

    @property
    def per_gpu(self) -> float:
        return self.tput / self.gpus

    @property
    def user_speed(self) -> float:
        return 1000.0 / self.tpot if self.tpot > 0 else float("inf")


def _candidates(n: int, extra: tuple[int, ...] = ()) -> list[int]:
    vals = {1 << k for k in range(n.bit_length()) if (1 << k) <= n}
    vals.update(v for v in (n, *extra) if 1 <= v <= n)
    return sorted(vals)


def _label(s: _Shape, dp: int, width: int) -> str:
    parts = [f"{name}{v}" for name, v in (("DP", dp), ("PP", s.pp), ("ADP", s.attn_dp), ("TP", s.tp)) if v > 1]
    core = " x ".join(parts) if parts else ("TP1" if s.ep > 1 else "1 GPU")
    if s.ep > 1:
        core += f" EP{s.ep}"
    if s.expert_tp and width // s.ep > 1:
        core += f" (expert TP{width // s.ep})"
    if s.sp > 1:
        core += f" + prefill SP{s.sp}"
    return core


def _point_label(p: _Point) -> str:
    if p.dshape is None:
        return _label(p.shape, p.dp, p.shape.width)
    return (f"disaggregated: prefill {_label(p.shape, p.dp, p.shape.width)} | "
            f"decode {_label(p.dshape, p.dp_d, p.dshape.width)}")


class _Search:
    def __init__(self, base: dict[str, Any], spec_plan: Plan, objective: str, slo: Slo, batch_fixed: bool,
                 allow_expert_tp: bool, latency_metric: str, attention_dp: bool = True) -> None:
        self.base = base
        self.spec = spec_plan.spec
        self.hw = spec_plan.hardware
        self.nvlink_domain = spec_plan.cluster.nvlink_domain  # what TP-WITHIN-NODE keeps a TP group inside
        self.wl = spec_plan.workload
        self.objective = objective
        self.slo = slo
        self.batch_fixed = batch_fixed
        # the deployment's total in flight, when the workload states one (closed loop): every plan at that load
        self.total = self.wl.concurrency if self.wl.request_rate is None else None
        self.allow_expert_tp = allow_expert_tp
        self.attention_dp = attention_dp
        self.metric = latency_metric
        self.rejected: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.slo_rejected: Counter[str] = Counter()
        self.estimates = 0
        self.considered = 0
        self.queued_off = 0  # served front: plans left off it because the load queues them (served_front)
        self._fast: dict[Any, FastEstimator] = {}
        self._mem_cache: dict[Any, Any] = {}
        self.serving = False  # price aggregated plans under continuous batching (search_strategies(serving=True))
        self.launch_engines: list[str] = []  # engines one of which must launch a ranked plan
        # per layout: the plan of one replica and each engine's verdict on it (None: it launches it)
        self._engines: dict[tuple[_Shape, _Shape | None, str], tuple[dict[str, Any], dict[str, str | None]]] = {}
        self.spec_settings: list[dict[str, Any]] = []  # speculative settings a layout may take besides none
        self.prices = PriceBook()  # the simulations' phase prices, shared: their pools repeat across plans

    # -------------------------------------------------------------- bookkeeping
    def reject(self, rule: str, what: str, n: int = 1) -> None:
        if n <= 0:
            return
        self.rejected[rule] += n
        self.considered += n
        self.examples.setdefault(rule, what)

    def _options(self, shapes: list[_Shape]) -> dict[str, Any]:
        options = dict(self.base.get("options") or {})
        if any(s.expert_tp for s in shapes):
            options["allow_expert_tp"] = True
        if any(s.attn_dp > 1 for s in shapes):
            options["allow_attention_dp"] = True
        return options

    def _gap(self, p: _Point, engine: str) -> str | None:
        """Why ``engine`` cannot launch ``p``'s layout (None: it can), asked once per layout and engine (replicas and
        batch change nothing there)."""
        key = (p.shape, p.dshape, json.dumps(p.spec, sort_keys=True))
        if key not in self._engines:
            plan = self.point_dict(p)
            plan["hardware"] = {**plan["hardware"], "num_gpus": p.gpus}
            self._engines[key] = (_one_replica(plan), {})
        one, gaps = self._engines[key]
        if engine not in gaps:
            gaps[engine] = _engine_gap(one, engine)
        return gaps[engine]

    def exportability(self, p: _Point) -> tuple[list[str], dict[str, str]]:
        """The engines that launch ``p``'s layout, and for the others the reason their exporter gives."""
        from tools.engines.launch import ENGINES

        gaps = {engine: self._gap(p, engine) for engine in ENGINES}
        return [e for e, gap in gaps.items() if gap is None], {e: gap for e, gap in gaps.items() if gap is not None}

    def launched(self, p: _Point) -> bool:
        """An engine the search was asked for launches ``p`` (asking them in turn until one does: every layout is
        judged, and only the plans shown need every engine's verdict)."""
        return any(self._gap(p, engine) is None for engine in self.launch_engines)

    def plan_dict(self, s: _Shape, dp: int, batch: int) -> dict[str, Any]:
        d = dict(self.base)
        d["parallel"] = s.degrees(dp)
        if s.sp > 1:
            d["phases"] = {"prefill": {"sp": s.sp}}
        d["workload"] = {**self.base["workload"], "batch_size": batch}
        options = self._options([s])
        if options:
            d["options"] = options
        return d

    def disagg_dict(self, sp_: _Shape, n_p: int, sd: _Shape, n_d: int, batch: int) -> dict[str, Any]:
        """Prefill pool = ``parallel`` (and prefill SP), decode pool = ``phases.decode`` (every degree stated)."""
        d = dict(self.base)
        d["parallel"] = sp_.degrees(n_p)
        dec = sd.degrees(n_d)
        dec.setdefault("attn_dp", 1)
        d["phases"] = {"decode": dec} | ({"prefill": {"sp": sp_.sp}} if sp_.sp > 1 else {})
        d["workload"] = {**self.base["workload"], "batch_size": batch}
        d["options"] = self._options([sp_, sd]) | {"disaggregated": True}
        return d

    def point_dict(self, p: _Point) -> dict[str, Any]:
        """The plan of a point, aggregated or disaggregated."""
        d = self.plan_dict(p.shape, p.dp, p.batch) if p.dshape is None else self.disagg_dict(
            p.shape, p.dp, p.dshape, p.dp_d, p.batch)
        return d | {"speculative": p.spec} if p.spec else d

    def plan(self, s: _Shape, dp: int, batch: int) -> Plan:
        return Plan.model_validate(self.plan_dict(s, dp, batch))

    def memory(self, s: _Shape, batch: int) -> Any:
        key = (s, batch)
        if key not in self._mem_cache:
            plan = self.plan(s, 1, batch)
            self._mem_cache[key] = memory_report(plan, Layout(plan))
        return self._mem_cache[key]

    def fast(self, s: _Shape, sd: _Shape | None = None) -> FastEstimator:
        """The layout's fast estimator (batch 1, one replica per pool; the batch is priced later)."""
        key = (s, sd)
        hit = self._fast.get(key)
        if hit is None:
            d = self.plan_dict(s, 1, 1) if sd is None else self.disagg_dict(s, 1, sd, 1, 1)
            hit = self._fast[key] = FastEstimator(Plan.model_validate(d))
        return hit

    def estimate(self, s: _Shape, batch: int) -> Headline:
        """One replica's figures at ``batch``."""
        self.estimates += 1
        return self.fast(s).headline(batch)

    def _misses(self, p: _Point) -> None:
        slo = self.slo
        if slo.max_ttft_ms is not None and p.ttft > slo.max_ttft_ms:
            p.misses.append(f"TTFT {p.ttft:.1f} ms > {slo.max_ttft_ms:g}")
        if slo.max_tpot_ms is not None and p.tpot > slo.max_tpot_ms:
            p.misses.append(f"TPOT {p.tpot:.2f} ms > {slo.max_tpot_ms:g}")
        if slo.min_throughput_tokens_per_s is not None and p.tput < slo.min_throughput_tokens_per_s:
            p.misses.append(f"throughput {p.tput:.0f} tok/s < {slo.min_throughput_tokens_per_s:g}")

    def point(self, s: _Shape, batch: int, dp: int) -> _Point:
        h = self.estimate(s, batch)
        mem = self.memory(s, batch)
        ttft, tpot, e2e, tput = h.ttft_ms, h.tpot_ms, h.e2e_ms, h.throughput.output_tokens_per_s * dp
        if self.serving:  # continuous batching at `batch` requests in flight per replica (tools/estimate/serving.py)
            f = self.fast(s)
            capacity, shared = memory_limits(f.plan, f.eff, mem, f.layout.pools["prefill"].pp)
            pre1 = Prefill(*f.phase_parts("prefill", 1))
            sv = continuous(f.plan, f.eff, batch, pre1, lambda b: f.phase_ms("decode", b), dp, dp * s.gpus, capacity,
                            shared, riding=riding_ms(f.plan, f.layout, f.eff, mem.weights_bytes,
                                                     f.layout.pools["prefill"].pp))
            ttft, tpot, tput = sv.ttft_for(self.slo.arrivals), sv.tpot_ms, sv.output_tokens_per_s
            e2e = ttft + self.wl.output_len * tpot
        p = _Point(s, batch, dp, dp * s.gpus, ttft, tpot, e2e, tput, float(mem.max_gpu_bytes),
                   float(mem.capacity_bytes), prefill_ms=h.ttft_ms, step_ms=h.tpot_ms)
        self._misses(p)
        return p

    # -------------------------------------------------------------- enumeration
    def _structural(self, what: str, tp: int, ep: int, pp: int, width: int, domain: int, n: int,
                    in_domain: int | None = None) -> bool:
        """The checks shared by plain and attention-DP layouts; False (and counted) when one fails.  ``in_domain``:
        the GPUs that must share an NVLink domain (TP-WITHIN-NODE): the stage group by default; 1 for attention-DP
        groups of TP1, whose expert group may span domains or fill part of an NVL72 rack."""
        spec = self.spec
        if pp * width > n:
            self.reject("GPU-EXCEEDS-CLUSTER", f"{what}: a replica needs {pp * width} > {n} GPUs")
            return False
        if pp > spec.num_layers:
            self.reject("PP-DEGREE-LE-LAYERS", f"{what}: {spec.num_layers} layers")
            return False
        group = width if in_domain is None else in_domain
        if group > domain or domain % group:
            self.reject("TP-WITHIN-NODE", f"{what}: a group of {group} GPUs leaves the {domain}-GPU NVLink domain")
            return False
        heads = next((q for q in spec.q_head_counts if q % tp), None)
        if heads is not None:
            self.reject("TP-HEADS-DIVISIBLE", f"{what}: {heads} heads")
            return False
        kv = next((k for k in spec.kv_head_counts if k % tp and tp % k), None)
        if spec.attention != "mla" and kv is not None:
            self.reject("TP-KV-HEADS-DIVISIBLE", f"{what}: {kv} KV heads")
            return False
        return True

    def shapes(self) -> list[_Shape]:
        """Every replica layout that passes the structural rules (memory not checked yet)."""
        spec, n, domain = self.spec, self.hw.num_gpus, self.nvlink_domain
        moe = spec.moe if spec.is_moe else None
        cands = _candidates(n, (domain,))
        out: list[_Shape] = []
        for tp in cands:
            for ep in cands:
                for pp in cands:
                    what = f"tp={tp} ep={ep} pp={pp}"
                    if ep > 1 and moe is None:
                        self.reject("EP-MOE-ONLY", f"{what}: {spec.id} has no MoE layers")
                        continue
                    width = max(tp, ep)
                    if not self._structural(what, tp, ep, pp, width, domain, n):
                        continue
                    if width % tp or width % ep:
                        self.reject("GPU-DEGREES-DIVIDE-GROUP", f"{what}: degrees must divide W={width}")
                        continue
                    expert_tp = False
                    if moe is not None:
                        if ep > moe.num_experts:
                            self.reject("EP-EXPERT-NODES-EQ-GPUS", f"{what}: {moe.num_experts} experts")
                            continue
                        if moe.num_experts % ep:
                            self.reject("EP-EVEN-EXPERTS", f"{what}: {moe.num_experts} experts")
                            continue
                        if ep < width:
                            self.reject("EP-SPANS-STAGE-GROUP", f"{what}: experts on {ep} of {width} GPUs")
                            if not self.allow_expert_tp:
                                self.reject("EP-NO-EXPERT-TP", f"{what}: expert TP not allowed")
                                continue
                            expert_tp = True
                    for sp in _candidates(tp)[1:]:
                        if tp % sp:
                            continue
                        if self.wl.input_len < param("SP-LONG-CONTEXT-ONLY", "min_input_len"):
                            self.reject("SP-LONG-CONTEXT-ONLY", f"{what} sp={sp}: input_len {self.wl.input_len}")
                        else:
                            out.append(_Shape(pp, tp, ep, sp, expert_tp))
                        self.reject("SP-DECODE-INEFFECTIVE", f"{what} sp={sp} in decode")
                    out.append(_Shape(pp, tp, ep, 1, expert_tp))
        if self.attention_dp:
            out += self.attention_dp_shapes(cands, domain, n)
        return sorted(out)

    def attention_dp_shapes(self, cands: list[int], domain: int, n: int) -> list[_Shape]:
        """Attention-DP layouts: attn_dp >= 2 groups of tp GPUs, experts over all of them (ep = attn_dp * tp)."""
        spec = self.spec
        moe = spec.moe if spec.is_moe else None
        out: list[_Shape] = []
        for a in cands[1:]:
            for tp in cands:
                for pp in cands:
                    what = f"attn_dp={a} tp={tp} pp={pp}"
                    if moe is None:
                        self.reject("ADP-MOE-ONLY", f"{what}: {spec.id} has no MoE layers to share")
                        continue
                    width = a * tp
                    # TP1 groups have no TP to keep in a domain; wider attention groups keep their whole stage
                    # group in one (a search-time bound: the validator only asks it of the TP group)
                    if not self._structural(what, tp, width, pp, width, domain, n, in_domain=1 if tp == 1 else None):
                        continue
                    if width > moe.num_experts:
                        self.reject("EP-EXPERT-NODES-EQ-GPUS", f"{what}: ep={width} > {moe.num_experts} experts")
                        continue
                    if moe.num_experts % width:
                        self.reject("EP-EVEN-EXPERTS", f"{what}: {moe.num_experts} experts over ep={width}")
                        continue
                    self.reject("ADP-EP-SPANS-GROUPS", f"{what}: ep other than attn_dp x tp = {width}",
                                len([e for e in cands if e != width]))
                    out.append(_Shape(pp, tp, width, 1, False, a))
        return out

    def fitting(self, shapes: list[_Shape], batch: int) -> list[tuple[_Shape, Any]]:
        """Shapes whose memory fits at ``batch``.  Latency keeps only the smallest fitting pp of each group
        (PP-MEMORY-DRIVEN); throughput keeps the smallest and the next one, whose extra memory can hold a
        larger batch, and drops deeper pipelines whose decode bubbles only grow (PP-DECODE-BUBBLES)."""
        keep: list[tuple[_Shape, Any]] = []
        first: dict[tuple[int, int, int, bool, int], int] = {}
        for s in sorted(shapes, key=lambda x: (x.tp, x.ep, x.sp, x.expert_tp, x.attn_dp, x.pp)):
            group = (s.tp, s.ep, s.sp, s.expert_tp, s.attn_dp)
            if group in first:
                if self.objective == "latency":
                    self.reject("PP-MEMORY-DRIVEN", f"{s.what()}: pp={first[group]} already fits")
                    continue
                if s.pp > 2 * first[group]:
                    self.reject("PP-DECODE-BUBBLES", f"{s.what()}: pp={first[group]} already fits")
                    continue
            mem = self.memory(s, batch)
            if not mem.fits:
                self.reject("MEM-FITS", f"{s.what()}: {mem.message}")
                continue
            first.setdefault(group, s.pp)
            keep.append((s, mem))
        return keep

    # -------------------------------------------------------------- objectives
    def share(self, replicas: int, mem: Any) -> int:
        """Sequences one of ``replicas`` runs when the workload states the deployment's total in flight: its share,
        at most what its memory holds (an engine queues the rest); else the workload's per-replica batch."""
        if self.total is None:
            return self.wl.batch_size
        return max(1, min(-(-self.total // replicas), int(mem.max_batch_size_that_fits)))

    def run_latency(self, fitting: list[tuple[_Shape, Any]]) -> list[_Point]:
        points: list[_Point] = []
        for s, mem in fitting:
            max_dp = self.hw.num_gpus // s.gpus
            dp = 1
            p = self.point(s, self.share(1, mem), 1)
            need = self.slo.min_throughput_tokens_per_s
            if need is not None and p.tput < need:
                per_replica = p.tput
                dp = min(max_dp, max(1, -(-int(need) // max(1, int(per_replica)))))
                while dp < max_dp and per_replica * dp < need:
                    dp += 1
                p = self.point(s, self.share(dp, mem), dp)
            self.reject("DP-NOT-FOR-LATENCY", f"{s.what()}: dp>{dp} adds no latency benefit",
                        max(0, len(_candidates(max_dp)) - 1 - (dp > 1)))
            self.considered += 1
            points.append(p)
        return points

    def run_throughput(self, fitting: list[tuple[_Shape, Any]]) -> list[_Point]:
        points: list[_Point] = []
        fits: dict[_Shape, int] = {}  # the largest batch that fits, per layout searched over batch sizes
        for s, mem in fitting:
            dp = self.hw.num_gpus // s.gpus
            self.reject("GPU-IDLE", f"{s.what()}: fewer than {dp} replicas leave GPUs idle",
                        len([d for d in _candidates(dp) if d < dp]))
            if self.batch_fixed:
                self.considered += 1
                points.append(self.point(s, self.share(dp, mem), dp))
                continue
            exps = _exponents(int(mem.max_batch_size_that_fits))
            self.considered += len(exps)
            if exps:
                fits[s] = int(mem.max_batch_size_that_fits)
                points.append(self._best_batch(lambda b, s=s, dp=dp: self.point(s, b, dp), exps))
        # The best few layouts: their batch refined between powers of two, then frontier samples (smaller batches).
        if fits:
            ranked = sorted(points, key=lambda p: _sort_key(p, "throughput", self.metric))
            for p in ranked[:REFINED_LAYOUTS]:
                better = self._refine_batch(p, fits[p.shape])
                if better is not p:
                    points[points.index(p)] = better
            best = sorted(points, key=lambda p: _sort_key(p, "throughput", self.metric))[:3]
            for i, p in enumerate(best):
                exps = [k for k in _exponents(fits[p.shape]) if (1 << k) < p.batch]
                picks = exps[::-3][:2] + ([0] if i == 0 and exps and exps[0] == 0 else [])
                points.extend(self.point(p.shape, 1 << k, p.dp) for k in dict.fromkeys(picks))
        return points

    def _best_batch(self, at_batch: Any, exps: list[int]) -> _Point:
        """The largest power-of-two batch meeting the latency SLOs (bisection on the exponent: TTFT and TPOT
        grow with the batch, throughput too), or the smallest batch when none does."""
        seen: dict[int, _Point] = {}

        def at(i: int) -> _Point:
            if i not in seen:
                seen[i] = at_batch(1 << exps[i])
            return seen[i]

        lo, hi = 0, len(exps) - 1
        if _latency_ok(at(hi)):
            return at(hi)
        if not _latency_ok(at(lo)):
            return at(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _latency_ok(at(mid)):
                lo = mid
            else:
                hi = mid
        return at(lo)

    def _refine_batch(self, p: _Point, bmax: int) -> _Point:
        """The largest batch between ``p``'s power of two and the next one (or the most that fits) that still meets
        the latency SLOs, by bisection to within 1/32 of the batch: tokens/s grow with the batch, so powers of two
        alone can leave up to half of it unused.  ``p`` itself when it misses an SLO or nothing larger fits."""
        if not _latency_ok(p) or p.batch >= bmax:
            return p
        top = self.point(p.shape, min(2 * p.batch - 1, bmax), p.dp)
        self.considered += 1
        if _latency_ok(top):
            return max(p, top, key=lambda q: q.tput)
        lo, hi, best = p.batch, top.batch, p
        while hi - lo > max(1, lo // 32):
            mid = (lo + hi) // 2
            q = self.point(p.shape, mid, p.dp)
            self.considered += 1
            if _latency_ok(q):
                lo, best = mid, max(best, q, key=lambda x: x.tput)
            else:
                hi = mid
        return best

    def serve_head(self, ranked: list[_Point], n: int) -> list[_Point]:
        """The best point of each of the first ``n`` layouts re-priced by the serving simulator at the workload's
        load (the figures estimate_performance returns for the same plan) and re-ranked among themselves; the
        steady-state formula only chose which layouts to simulate.  Where the searched batch misses a TTFT or TPOT
        target once simulated, the largest batch that meets it is found again on simulated figures.  The best
        aggregated and the best disaggregated layout are always among them, so the comparison of the two kinds
        never sets a served figure against a steady-state one."""
        head: list[_Point] = []
        seen: set[tuple[_Shape, _Shape | None]] = set()
        kinds = {p.disaggregated for p in ranked}
        for p in ranked:
            if (p.shape, p.dshape) in seen:
                continue
            first_of_kind = p.disaggregated in kinds
            if len(head) < n or first_of_kind:
                seen.add((p.shape, p.dshape))
                head.append(p)
                kinds.discard(p.disaggregated)
        served = []
        for p in head:
            q = self._served(p)
            if not _latency_ok(q) and not self.batch_fixed and q.dshape is None and q.batch > 1:
                q = self._served_batch(q)
            served.append(self.speculative_choice(q) if self.spec_settings else q)
        return sorted(served, key=lambda q: _sort_key(q, self.objective, self.metric)) + [
            p for p in ranked if (p.shape, p.dshape) not in seen]

    def served_front(self, front: list[_Point], served: list[_Point]) -> list[_Point]:
        """The Pareto front on served figures: the steady-state front's plans (``front``) re-priced by the serving
        simulator at their load, with the plans the head already served, and the front drawn again over them.
        Why: with ``serving`` the top list is served figures; a front of steady-state figures beside it would set
        the two kinds against each other (a plan's served TPOT and throughput differ from the formula's)."""
        have = {(p.shape, p.dshape, p.batch): p for p in served}
        pts = list(served)
        for p in front:
            key = (p.shape, p.dshape, p.batch)
            if key not in have:
                have[key] = self._served(p)
                pts.append(have[key])
        ok = [p for p in pts if not p.misses] or pts
        held = [p for p in ok if not p.queued]
        self.queued_off = len(ok) - len(held) if held else 0
        return _pareto(held or ok)

    def _served(self, p: _Point) -> _Point:
        sim = simulate(Plan.model_validate(self.point_dict(p)), prices=self.prices)
        self.estimates += 1
        q = replace(p, ttft=sim.ttft_ms.mean, tpot=sim.tpot_ms.mean, e2e=sim.e2e_ms.mean,
                    tput=sim.output_tokens_per_s, served=sim.load, misses=[],
                    queued=sim.queue_ms.mean > sim.e2e_ms.mean - sim.queue_ms.mean,
                    in_system=sim.request_throughput_per_s * sim.e2e_ms.mean / 1e3)
        self._misses(q)
        return q

    def speculative_choice(self, q: _Point) -> _Point:
        """``q`` (served without speculation) or, if it ranks first, ``q`` with one of the allowed speculative
        settings, each served by the simulator at the same load with the drafter's memory counted."""
        best = q
        for setting in self.spec_settings:
            plan = Plan.model_validate(self.point_dict(q) | {"speculative": setting})
            mem = memory_report(plan, Layout(plan))
            if not mem.fits:
                continue
            sim = simulate(plan, prices=self.prices)
            self.estimates += 1
            v = replace(q, ttft=sim.ttft_ms.mean, tpot=sim.tpot_ms.mean, e2e=sim.e2e_ms.mean,
                        tput=sim.output_tokens_per_s, served=sim.load, misses=[], spec=setting, plain=q,
                        mem_max=float(mem.max_gpu_bytes), mem_cap=float(mem.capacity_bytes))
            self._misses(v)
            if _sort_key(v, self.objective, self.metric) < _sort_key(best, self.objective, self.metric):
                best = v
        return best

    def _served_batch(self, p: _Point) -> _Point:
        """The largest batch below ``p``'s that meets the latency SLOs on simulated figures (bisection to within
        1/8 of the batch; TTFT and TPOT grow with the batch), else batch 1's point."""
        lo, hi, best = 1, p.batch, None
        while hi - lo > max(1, lo // 8):
            mid = (lo + hi) // 2
            q = self._served(self.point(p.shape, mid, p.dp))
            self.considered += 1
            if _latency_ok(q):
                lo, best = mid, q
            else:
                hi = mid
        return best or self._served(self.point(p.shape, 1, p.dp))

    # -------------------------------------------------------------- disaggregated serving
    def run_disaggregated(self, points: list[_Point]) -> list[_Point]:
        """Pair the best prefill layouts with the best decode layouts, each pair with balanced replica counts."""
        n = self.hw.num_gpus
        agg = [p for p in points if not p.disaggregated]
        if n < 2 or not agg:
            return []
        best_of: dict[_Shape, _Point] = {}
        for p in sorted(agg, key=lambda q: _sort_key(q, self.objective, self.metric)):
            best_of.setdefault(p.shape, p)
        if self.objective == "latency":
            pre_key = lambda p: (p.ttft, p.shape)  # noqa: E731
            dec_key = lambda p: (p.tpot, p.shape)  # noqa: E731
        else:
            pre_key = lambda p: (-p.batch / p.ttft / p.shape.gpus, p.shape)  # noqa: E731
            dec_key = lambda p: (-p.batch / p.tpot / p.shape.gpus, p.shape)  # noqa: E731
        smallest = min(s.gpus for s in best_of)
        pre = [p.shape for p in sorted(best_of.values(), key=pre_key) if p.shape.gpus + smallest <= n]
        dec = [p.shape for p in sorted(best_of.values(), key=dec_key)
               if p.shape.sp == 1 and p.shape.gpus + smallest <= n]
        # pairs in order of their combined rank, the first few that fit the cluster together
        ranked = sorted((i + j, i, j) for i in range(len(pre)) for j in range(len(dec)))
        pairs: list[tuple[_Shape, _Shape]] = []
        for _, i, j in ranked:
            if len(pairs) == DISAGG_PREFILL_CANDIDATES * DISAGG_DECODE_CANDIDATES:
                break
            if pre[i].gpus + dec[j].gpus > n:
                self.reject("GPU-EXCEEDS-CLUSTER", f"prefill {pre[i].what()} + decode {dec[j].what()}: "
                                                   f"{pre[i].gpus} + {dec[j].gpus} > {n} GPUs")
                continue
            pairs.append((pre[i], dec[j]))
        out: list[_Point] = []
        for sp_, sd in pairs:
            what = f"prefill {sp_.what()} + decode {sd.what()}"
            fixed = self.batch_fixed and self.total is None
            mem = self.disagg_memory(sp_, sd, self.wl.batch_size if fixed else 1)
            if not mem.fits:
                self.reject("MEM-FITS", f"{what}: {mem.message}")
                continue
            if self.total is not None:  # the total in flight held by the decode pool's replicas
                self.considered += 1
                first = self.dpoint(sp_, sd, self.share(1, mem))
                out.append(first if first.dp_d == 1 else self.dpoint(
                    sp_, sd, self.share(first.dp_d, mem), (first.dp, first.dp_d)))
                continue
            if self.batch_fixed:
                self.considered += 1
                out.append(self.dpoint(sp_, sd, self.wl.batch_size))
                continue
            exps = _exponents(int(mem.max_batch_size_that_fits))
            self.considered += len(exps)
            if exps:
                out.append(self._best_batch(lambda b, sp_=sp_, sd=sd: self.dpoint(sp_, sd, b), exps))
        return out

    def disagg_memory(self, sp_: _Shape, sd: _Shape, batch: int) -> Any:
        key = (sp_, sd, batch)
        if key not in self._mem_cache:
            plan = Plan.model_validate(self.disagg_dict(sp_, 1, sd, 1, batch))
            self._mem_cache[key] = memory_report(plan, Layout(plan))
        return self._mem_cache[key]

    def dpoint(self, sp_: _Shape, sd: _Shape, batch: int, counts: tuple[int, int] | None = None) -> _Point:
        """A disaggregated plan at ``batch``, with the replica counts that balance the pools' rates (or
        ``counts``, prefill and decode replicas, when a total in flight has already been split over them)."""
        fe = self.fast(sp_, sd)
        self.estimates += 1
        pre_ms, dec_ms = fe.phase_ms("prefill", batch), fe.phase_ms("decode", batch)
        one = fe.headline(batch)
        assert one.pools is not None
        r_p = one.pools["prefill"].requests_per_s_per_replica
        r_d = one.pools["decode"].requests_per_s_per_replica
        if counts is not None:
            n_p, n_d = counts
        elif self.objective == "latency":
            n_p = n_d = 1  # more replicas serve more requests, never one request faster (DP-NOT-FOR-LATENCY)
        else:
            n_p, n_d = balanced_split(r_p, sp_.gpus, r_d, sd.gpus, self.hw.num_gpus)
        plan = Plan.model_validate(self.disagg_dict(sp_, n_p, sd, n_d, batch))
        layout = Layout(plan)
        h = headline(plan, layout, fe.eff, pre_ms, dec_ms, sp_.gpus, num_gpus=self.hw.num_gpus)
        mem = self.disagg_memory(sp_, sd, batch)
        ttft, e2e = h.ttft_ms, h.e2e_ms
        if self.serving:  # per request, on the terms of the aggregated plans' serving TTFT: its own prefill, its
            # own KV hand-off and its first decode step (not the whole batch's lockstep prefill)
            ttft = fe.phase_ms("prefill", 1) + kv_handoff(plan, layout, fe.eff, 1).seconds_per_batch * 1e3 + dec_ms
            e2e = ttft + (self.wl.output_len - 1) * dec_ms
        p = _Point(sp_, batch, n_p, layout.gpus_needed, ttft, h.tpot_ms, e2e,
                   h.throughput.output_tokens_per_s, float(mem.max_gpu_bytes), float(mem.capacity_bytes),
                   dshape=sd, dp_d=n_d, head=h)
        self._misses(p)
        return p


def _latency_ok(p: _Point) -> bool:
    """Meets the TTFT and TPOT SLOs (a throughput SLO does not bound the batch from above)."""
    return not any(m.startswith(("TTFT", "TPOT")) for m in p.misses)


def _exponents(bmax: int) -> list[int]:
    return [k for k in range(bmax.bit_length()) if (1 << k) <= bmax]


def _sort_key(p: _Point, objective: str, metric: str) -> tuple:
    s = p.shape
    d = p.dshape
    tail = (s.pp, s.tp, s.ep, s.sp, p.dp, p.batch, s.expert_tp, s.attn_dp, d is not None,
            (d.pp, d.tp, d.ep, d.expert_tp, d.attn_dp, p.dp_d) if d else ())
    if objective == "latency":
        lat = {"e2e": p.e2e, "tpot": p.tpot, "ttft": p.ttft}[metric]
        return (bool(p.misses), round(lat, 6), round(p.tpot, 6), round(p.ttft, 6), p.gpus, -round(p.tput, 6), *tail)
    return (bool(p.misses), -round(p.tput, 6), -round(p.per_gpu, 6), round(p.e2e, 6), p.gpus, *tail)


def _pareto(points: list[_Point]) -> list[_Point]:
    """Non-dominated points on (per-user speed, throughput per GPU), fastest per user first."""
    best: list[_Point] = []
    for p in sorted(points, key=lambda q: (-q.user_speed, -q.per_gpu, q.gpus, _sort_key(q, "throughput", "e2e"))):
        if not best or p.per_gpu > best[-1].per_gpu * (1 + 1e-9):
            best.append(p)
    return best


def _layout_note(p: _Point) -> str:
    notes = []
    for role, s in (("", p.shape), ("decode ", p.dshape)):
        if s is not None and s.attn_dp > 1:
            notes.append(f"{role}attention-DP {s.attn_dp} groups x TP{s.tp} (opt-in allow_attention_dp set): KV per "
                         "group, experts over all GPUs")
    if p.disaggregated and p.head is not None and p.head.kv_transfer is not None:
        notes.append(f"{p.dp} prefill : {p.dp_d} decode replicas (prefill/decode rate {p.head.pool_balance:.2f}); "
                     f"KV hand-off {p.head.kv_transfer.ms:.1f} ms per batch over {p.head.kv_transfer.link}")
    return "; ".join(notes)


def _reason(p: _Point, rank: int, best: _Point, objective: str, metric: str, n: int,
            total: int | None = None) -> str:
    head = f"{p.mem_max / 1e9:.0f}/{p.mem_cap / 1e9:.0f} GB on the fullest GPU"
    layout = _layout_note(p)
    layout = f"; {layout}" if layout else ""
    if p.served:
        head += f"; served figures: simulated engine at {p.served}"
    if p.spec and p.plain:
        k = p.spec["num_draft_tokens"]
        head += (f"; speculative {p.spec['method']} with {k} draft token{'s' if k > 1 else ''} (without it: TTFT "
                 f"{p.plain.ttft:.1f} ms, TPOT {p.plain.tpot:.2f} ms, {p.plain.tput:.0f} tok/s, "
                 f"{p.plain.mem_max / 1e9:.0f} GB)")
    if p.misses:
        return f"misses the SLO ({'; '.join(p.misses)}); best effort{layout}; {head}"
    if objective == "latency":
        lat = {"e2e": p.e2e, "tpot": p.tpot, "ttft": p.ttft}
        name = {"e2e": "e2e latency", "tpot": "TPOT", "ttft": "TTFT"}[metric]
        if rank == 1:
            why = f"lowest {name} ({lat[metric]:.1f} ms) of {n} feasible plans"
        else:
            ref = {"e2e": best.e2e, "tpot": best.tpot, "ttft": best.ttft}[metric]
            why = f"{name} {lat[metric]:.1f} ms (+{100 * (lat[metric] / ref - 1):.0f}% vs best)"
        extra = ""
        if p.shape.pp > 1:
            extra = f"; PP{p.shape.pp} needed for memory"
        if p.dp > 1 and not p.disaggregated:
            extra += f"; DP{p.dp} to reach the throughput SLO"
        return f"{why}; TTFT {p.ttft:.1f} ms, TPOT {p.tpot:.2f} ms{extra}{layout}; {head}"
    if rank == 1:
        why = f"highest throughput ({p.tput:.0f} tok/s, {p.per_gpu:.0f}/GPU) of {n} feasible points"
    else:
        why = f"{p.tput:.0f} tok/s ({100 * (p.tput / best.tput - 1):.0f}% vs best), {p.per_gpu:.0f}/GPU"
    reps = f"DP{p.dp}" if not p.disaggregated else f"{p.dp}+{p.dp_d} replicas"
    load = f"batch {p.batch} x {reps}"
    if total is not None:
        held = p.batch * (p.dp_d if p.disaggregated else p.dp)
        load = f"{total} in flight ({p.batch} per replica x {reps}" + (
            f"; memory holds {held}, the rest queue)" if held < total else ")")
    return f"{why} at {load}; TPOT {p.tpot:.2f} ms{layout}; {head}"


def _one_replica(plan: dict[str, Any]) -> dict[str, Any]:
    """Replicas never change what an engine can launch (each is its own server where the engine's DP flag means
    something else): the plan of one replica, which the engines are asked about, so that a plan of thousands of
    replicas costs what one does."""
    one = json.loads(json.dumps(plan))
    one["parallel"] = {**one.get("parallel", {}), "dp": 1}
    for phase in (one.get("phases") or {}).values():
        if phase and "dp" in phase:
            phase["dp"] = 1
    one["hardware"] = {**one["hardware"], "num_gpus": Layout(parse_plan(one)).gpus_needed}
    return one


def _engine_gap(one: dict[str, Any], engine: str) -> str | None:
    """The reason ``engine``'s exporter gives for not launching ``one`` as drawn (None: it launches it).  A layout
    the engine runs only in another form (EP wider than TP becomes attention-DP) is not launched as drawn: that
    form is a layout of its own, priced as such, so the list never shows one deployment twice."""
    from tools.engines.launch import EngineCannotExpress, export_unchecked, launched_as

    if isinstance(one.get("model"), dict) and not one.get("checkpoint"):
        # a config.json names no repo: the command needs plan.checkpoint, which no engine's ability depends on
        one = {**one, "checkpoint": "/path/to/checkpoint"}
    try:
        export_unchecked(one, engine)  # search judges the rules itself; this asks only the engine
    except EngineCannotExpress as exc:
        return f"{exc.field}: {exc.problem}"
    other = launched_as(one, engine)
    return None if other is None else f"parallel.ep: {other}"


def _summary(search: _Search, p: _Point, rank: int | None, reason: str) -> PlanSummary:
    plan = search.point_dict(p) | {"objective": search.objective}
    # The returned plan claims the GPUs it uses (the cluster is in SearchResult.hardware, and a note says so): a
    # cluster larger than the plan reads as idle GPUs, or as tp x ep counted twice when the sizes happen to match.
    plan["hardware"] = {**plan["hardware"], "num_gpus": p.gpus}
    extra: dict[str, Any] = {}
    if p.head is not None and p.head.pools is not None:
        extra = {
            "kind": "disaggregated",
            "pools": {k: v.model_dump() for k, v in p.head.pools.items()},
            "pool_balance": p.head.pool_balance,
            "kv_transfer_ms": p.head.kv_transfer.ms if p.head.kv_transfer else None,
        }
    engines, gaps = search.exportability(p)
    launchable = bool(set(engines) & set(search.launch_engines))
    return PlanSummary(
        rank=rank, label=_point_label(p) + ("" if launchable else " (no engine launches it)"),
        plan=plan, engines=engines, engine_gaps=gaps, launchable=launchable,
        gpus_used=p.gpus, batch_size=p.batch,
        in_flight=round(p.in_system) if p.served and search.total is None  # an open loop's: what the rate holds
        else p.batch * (p.dp_d if p.disaggregated else p.dp),
        ttft_ms=p.ttft, tpot_ms=p.tpot, e2e_ms=p.e2e,
        throughput_tokens_per_s=p.tput, throughput_per_gpu=p.per_gpu, user_tokens_per_s=p.user_speed,
        memory_max_gpu_bytes=p.mem_max, memory_capacity_bytes=p.mem_cap, meets_slo=not p.misses,
        slo_misses=list(p.misses), reason=reason, basis=_basis(search, p), **extra,
    )


def _basis(search: _Search, p: _Point) -> str:
    """Which figures a plan's summary carries, so that a search answer never passes one set off as another: the
    ranked head is served by the simulator; the rest was priced by the steady-state formula (serving) or as the
    static batch (estimate_performance's prefill_latency_ms, decode_latency_ms_per_token)."""
    if p.served:
        return f"served at {p.served}"
    return "steady-state estimate" if search.serving else "static batch"


def prefill_work_share(prefill_ms: float, step_ms: float, output_len: int) -> float:
    """The share of a replica's GPU time that goes to prefill: each batch of requests costs one prefill pass
    over its prompts and ``output_len`` decode steps, whatever the requests' latencies are."""
    work = prefill_ms + output_len * step_ms
    return prefill_ms / work if work > 0 else 0.0


def _percent(x: float) -> str:
    return f"{100 * x:.1f} %" if x < 0.1 else f"{100 * x:.0f} %"


def _comparison(agg: _Point | None, dis: _Point | None, objective: str, metric: str,
                output_len: int) -> str | None:
    """Which kind wins for the workload, and why (one or two sentences)."""
    if dis is None or agg is None:
        return None
    a_key, d_key = _sort_key(agg, objective, metric), _sort_key(dis, objective, metric)
    winner, loser = ("aggregated", "disaggregated") if a_key <= d_key else ("disaggregated", "aggregated")
    assert dis.head is not None and dis.head.kv_transfer is not None
    hand = dis.head.kv_transfer.ms
    if objective == "latency":
        name = {"e2e": "e2e", "tpot": "TPOT", "ttft": "TTFT"}[metric]
        va = {"e2e": agg.e2e, "tpot": agg.tpot, "ttft": agg.ttft}[metric]
        vd = {"e2e": dis.e2e, "tpot": dis.tpot, "ttft": dis.ttft}[metric]
        why = (f"{name} {va:.1f} ms aggregated ({_point_label(agg)}) vs {vd:.1f} ms {_point_label(dis)}: TTFT "
               f"{agg.ttft:.1f} vs {dis.ttft:.1f} ms (the latter with a {hand:.1f} ms KV hand-off), TPOT "
               f"{agg.tpot:.2f} vs {dis.tpot:.2f} ms. Disaggregation lets each phase run its own layout, but each "
               "phase gets only its own pool's GPUs")
        return f"{winner} wins for latency: {why}."
    pre_share = prefill_work_share(agg.prefill_ms, agg.step_ms, output_len)
    why = (f"{agg.tput:.0f} tok/s aggregated ({_point_label(agg)}, {agg.per_gpu:.0f}/GPU) vs {dis.tput:.0f} tok/s "
           f"disaggregated ({dis.per_gpu:.0f}/GPU). In the aggregated plan prefill is {_percent(pre_share)} of a "
           f"replica's GPU time (one prefill pass of {agg.prefill_ms:.1f} ms per {output_len} decode steps of "
           f"{agg.step_ms:.2f} ms); the disaggregated decode pool never pauses for prefill but the {dis.gpus}-GPU "
           f"split into pools balances them only to {dis.head.pool_balance:.2f} (prefill/decode rate) and each "
           f"batch's KV moves in {hand:.1f} ms")
    return f"{winner} wins for throughput (the {loser} plan is the best of its kind): {why}."


def _refuse_what_validation_refuses(base: dict[str, Any]) -> None:
    """The plan-wide raw rules (e.g. HW-ACCELERATOR-SPEC: a dtype the accelerator does not run) reject every
    layout alike; refuse the search with the rule's words instead of ranking plans validate_dag rejects."""
    from tools.rules.registry import Context
    from tools.rules.run import run_checkers

    for v in run_checkers(Context(raw_plan={**base, "parallel": {}}), ["raw"]):
        if v.severity == "error":
            field = (v.location.field or "plan").removeprefix("plan.")
            raise PdagInputError(field, f"{v.rule_id}: {v.message}", v.hint or "a value the rule allows")


def _spec_settings(probe: Plan, speculative: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The speculative settings a layout may take besides none: 1 to ``num_draft_tokens`` draft tokens of the
    method (that length alone when ``mean_accepted_tokens`` fixes the acceptance of one length); refused as
    validate_dag refuses them when the model or the engine cannot run the method."""
    if speculative is None:
        return []
    from tools.core.plan import Speculative
    from tools.rules.registry import Context
    from tools.rules.speculative import check_engine_support, check_mtp_layers

    try:
        top = Speculative.model_validate(speculative)
    except ValidationError as exc:
        raise validation_error_to_input_error(exc, "speculative") from None
    plan = probe.model_copy(update={"speculative": top})
    for rule, check in (("SPEC-MTP-LAYERS", check_mtp_layers), ("SPEC-ENGINE-SUPPORT", check_engine_support)):
        for f in check(Context(plan=plan, spec=plan.spec)):
            raise PdagInputError((f.field or "plan.speculative").removeprefix("plan."), f"{rule}: {f.message}",
                                 f.hint or "a setting the model and engine run")
    given = top.model_dump(exclude_none=True, exclude_defaults=True) | {"method": top.method}
    lengths = [top.num_draft_tokens] if top.mean_accepted_tokens is not None else range(1, top.num_draft_tokens + 1)
    return [given | {"num_draft_tokens": k} for k in lengths]


def search_strategies(
    model: str | dict[str, Any],
    hardware: dict[str, Any],
    workload: dict[str, Any] | None = None,
    objective: Literal["latency", "throughput"] = "latency",
    slo: dict[str, Any] | None = None,
    top_k: int = 5,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    weights: str | None = None,
    allow_expert_tp: bool = False,
    latency_metric: Literal["e2e", "tpot", "ttft"] = "e2e",
    attention_dp: bool = True,
    disaggregated: bool | None = None,
    engine: str = "generic",
    serving: bool | None = None,
    engine_options: dict[str, Any] | None = None,
    checkpoint: str | None = None,
    unlaunchable: bool = False,
    speculative: dict[str, Any] | None = None,
) -> SearchResult:
    """Search the parallel plans of ``model`` on ``hardware`` for ``objective`` (see the module doc for the
    space, the pruning rules and the tie-break order).  ``workload``: input_len, output_len and optionally
    batch_size (per replica; searched for the throughput objective when absent).  ``slo``: max_ttft_ms,
    max_tpot_ms, min_throughput_tokens_per_s.  ``allow_expert_tp`` lets MoE plans shard experts over the
    TP ranks (what vLLM and SGLang do without EP), stated in each plan's options; off by default, as the seeds
    disallow TP inside experts unless a plan opts in.  ``attention_dp`` adds the
    attention-DP layouts of MoE models; ``disaggregated`` (default: when the cluster has >= 2 GPUs) also
    searches separate prefill/decode pools.  ``top`` and ``pareto`` rank both kinds together;
    ``best_aggregated``, ``best_disaggregated`` and ``comparison`` set them side by side.  ``engine`` selects
    the engine profile the plans are priced with (``engine_options``: its step budget and graph capture size,
    as in a plan); ``serving`` (default: when ``workload`` states ``concurrency`` or ``request_rate``) prices
    aggregated plans under continuous batching
    (batch = requests in flight per replica, TTFT/TPOT under mixed prefill/decode steps), so that the
    throughput objective with ``slo`` answers "most tokens/s under these TPOT/TTFT targets".  ``weights``: the
    checkpoint's storage format (e.g. ``awq-int4``, ``mxfp4``); default: the model config's
    quantization_config, else ``dtype``.  ``checkpoint``: the repo the engine serves (its stored format and
    unquantized modules set the weights' memory, as in estimate).  Only plans an engine launches are ranked:
    ``engine`` vllm, sglang or trtllm names the one that must, any other profile accepts any of the three;
    ``unlaunchable`` also lists plans no engine launches, labelled so.  ``speculative``: the speculative decoding
    the plans may use (its method; up to ``num_draft_tokens`` draft tokens); each of the best layouts is served with
    and without it and keeps what ranks first (module doc)."""
    if objective not in ("latency", "throughput"):
        raise PdagInputError("objective", f"unknown objective {objective!r}", "latency, throughput")
    if latency_metric not in ("e2e", "tpot", "ttft"):
        raise PdagInputError("latency_metric", f"unknown metric {latency_metric!r}", "e2e, tpot, ttft")
    if not isinstance(top_k, int) or not 1 <= top_k <= 100:
        raise PdagInputError("top_k", f"expected an integer in 1..100, got {top_k!r}", "1..100")
    if isinstance(hardware, dict) and isinstance(workload or {}, dict):  # the plan tools' screen: one verdict
        screen_plan({"model": model, "hardware": hardware, "workload": workload or {}}, root="")
    try:
        hw = Hardware.model_validate(hardware)
        wl = Workload.model_validate(workload or {})
        slo_m = Slo.model_validate(slo or {})
    except ValidationError as exc:
        title = exc.title.lower()
        root = "slo" if "slo" in title else "workload" if "workload" in title else "hardware"
        raise validation_error_to_input_error(exc, root) from None
    batch_fixed = objective == "latency" or bool(workload and ("batch_size" in workload or (
        workload.get("concurrency") is not None and workload.get("request_rate") is None)))
    base: dict[str, Any] = {
        "model": model, "hardware": hw.model_dump(), "workload": wl.model_dump(),
        "dtype": dtype, "objective": objective,
    }
    if kv_dtype is not None:
        base["kv_dtype"] = kv_dtype
    if weights is not None:
        base["weights"] = weights
    if checkpoint is not None:
        base["checkpoint"] = checkpoint
    if engine != "generic":
        base["engine"] = engine
    if engine_options:
        base["engine_options"] = engine_options
    try:
        probe = parse_plan({**base, "parallel": {}})
    except PdagInputError as exc:  # name the search's own argument, not a field of the probe plan
        raise PdagInputError(exc.field.removeprefix("plan."), exc.problem, exc.allowed) from None
    _refuse_what_validation_refuses(base)
    if isinstance(model, str):  # as spelled: a repo id is the checkpoint an export serves (Plan.served_repo)
        base["model"] = model.strip()
    search = _Search(base, probe, objective, slo_m, batch_fixed, allow_expert_tp, latency_metric, attention_dp)
    # a stated load (clients or a rate) is answered with figures at that load, as estimate answers it
    search.serving = bool(serving) if serving is not None else wl.concurrency is not None or wl.request_rate is not None
    search.spec_settings = _spec_settings(probe, speculative)
    from tools.engines.launch import ENGINES, engine_key

    search.launch_engines = [engine_key(engine)] if engine in ("vllm", "sglang", "trtllm", "trtllm-cpp") else list(
        ENGINES)
    shapes = search.shapes()
    fitting = search.fitting(shapes, 1 if not batch_fixed or search.total is not None else wl.batch_size)
    points = search.run_latency(fitting) if objective == "latency" else search.run_throughput(fitting)
    if disaggregated is None:
        disaggregated = hw.num_gpus >= 2
    dis_points = search.run_disaggregated(points) if disaggregated else []
    points += dis_points
    for p in points:
        for m in p.misses:
            search.slo_rejected["SLO-" + m.split()[0].upper()] += 1
    ranked = sorted(points, key=lambda p: _sort_key(p, objective, latency_metric))
    gap = ""  # why the best layout left out cannot be launched (the same reason for all when it is the checkpoint)
    if not unlaunchable:  # what no engine launches is not a recommendation
        kept = [p for p in ranked if search.launched(p)]
        dropped = len({(p.shape, p.dshape) for p in ranked}) - len({(p.shape, p.dshape) for p in kept})
        gone = next((p for p in ranked if not search.launched(p)), None)
        if gone is not None:
            gaps = search.exportability(gone)[1]
            gap = next((f" (the best: {e}: {why})" for e, why in gaps.items() if e in search.launch_engines), "")
        ranked, points = kept, [p for p in points if search.launched(p)]
    else:
        dropped = 0
    if search.serving or search.spec_settings:  # the head priced as estimate_performance prices a served request
        ranked = search.serve_head(ranked, max(top_k, SERVED_LAYOUTS))
    # One entry per layout in the top list (the best batch of each), so top_k shows distinct strategies.
    top_points: list[_Point] = []
    seen_shapes: set[tuple[_Shape, _Shape | None]] = set()
    for p in ranked:
        if (p.shape, p.dshape) not in seen_shapes:
            seen_shapes.add((p.shape, p.dshape))
            top_points.append(p)
        if len(top_points) == top_k:
            break
    notes: list[str] = []
    if any(p.gpus < hw.num_gpus for p in top_points):
        notes.append(f"each plan's hardware.num_gpus is the GPUs it uses (gpus_used); the cluster's "
                     f"{hw.num_gpus} are in 'hardware'")
    if search.total is not None:
        notes.append(f"every plan is priced at the workload's {search.total} in flight in all, split over its "
                     "replicas (batch_size per replica, in_flight in all)")
    unstated = [f for f in ("input_len", "output_len") if f not in wl.model_fields_set]
    if unstated and wl.length_dataset is None and not (wl.input_len_range or wl.output_len_range):
        notes.append(f"workload.{' and '.join(unstated)} not stated: priced at the defaults, {wl.input_len} in / "
                     f"{wl.output_len} out tokens")
    # pruned on a rule validate_dag only warns about: say so, since validate accepts what search left out
    soft = sorted(r for r in search.rejected if r in catalog() and catalog()[r].get("severity") != "error")
    if soft:
        notes.append("left out on rules validate_dag only warns about (it accepts such plans): " + ", ".join(soft))
    if dropped:
        who = " or ".join(search.launch_engines)
        notes.append(f"{dropped} layout(s) that {who} cannot launch were left out{gap} (unlaunchable=true lists "
                     "them, labelled)")
    if not points and not dropped:
        notes.append("no plan fits: see 'rejected' (MEM-FITS usually means more GPUs, fp8 weights or a shorter "
                     "context are needed)")
    elif top_points and top_points[0].misses:
        notes.append("no plan meets every SLO; the list shows the closest ones")
    n_ok = len({(p.shape, p.dshape) for p in points})
    top = [
        _summary(search, p, i + 1, _reason(p, i + 1, top_points[0], objective, latency_metric, n_ok,
                                            search.total))
        for i, p in enumerate(top_points)
    ]
    feasible = [p for p in points if not p.misses] or points
    front = _pareto(feasible)
    if search.serving or search.spec_settings:
        front = search.served_front(front, [p for p in ranked if p.served])
        notes.append("the Pareto front is drawn on served figures (the serving simulator at each plan's load), as "
                     "the top list is" + (f"; {search.queued_off} plan(s) whose requests wait longer in the queue "
                                          "than in service at this load are left off it" if search.queued_off else ""))
    pareto = [
        _summary(search, p, None, f"Pareto: {p.user_speed:.1f} tok/s per user, {p.per_gpu:.0f} tok/s per GPU "
                               f"(batch {p.batch}, {p.gpus} GPUs; "
                               + (f"served figures: simulated engine at {p.served})" if p.served else
                                  "steady-state figures)"))
        for p in front
    ]
    best_agg = next((p for p in ranked if not p.disaggregated), None)
    best_dis = next((p for p in ranked if p.disaggregated), None)

    def side(p: _Point | None) -> PlanSummary | None:
        if p is None:
            return None
        rank = next((i + 1 for i, q in enumerate(top_points) if q is p), None)
        return _summary(search, p, rank, _reason(p, rank or 2, ranked[0], objective, latency_metric, n_ok,
                                                          search.total))

    comparison = _comparison(best_agg, best_dis, objective, latency_metric, wl.output_len)
    if disaggregated and best_dis is None and points:
        comparison = "no disaggregated split fits: a prefill pool and a decode pool need more GPUs or memory"
    return SearchResult(
        model=probe.model_id, hardware=hw.model_dump(), workload=wl.model_dump(), objective=objective,
        slo=slo_m.model_dump(exclude_none=True) or None, top=top, pareto=pareto,
        rejected=dict(sorted(search.rejected.items())), rejected_examples=dict(sorted(search.examples.items())),
        slo_rejected=dict(sorted(search.slo_rejected.items())), considered=search.considered,
        estimated=search.estimates,
        tie_break=TIE_BREAK[objective].format(metric=latency_metric),
        notes=notes,
        best_aggregated=side(best_agg), best_disaggregated=side(best_dis), comparison=comparison,
    )
