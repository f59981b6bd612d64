"""``search_strategies``: enumerate the plans that are valid by construction, estimate them, rank them.

Space.  Degrees are powers of two (plus the cluster size and the node size) and form, per replica, a stage
group of ``W = max(tp, ep)`` GPUs and ``pp`` stages.  An alternative is dropped, and counted under the rule
id of the catalog that forbids it, when (checked in this order):

``EP-MOE-ONLY`` ep > 1 on a dense model; ``GPU-EXCEEDS-CLUSTER`` pp*W > num_gpus; ``PP-DEGREE-LE-LAYERS``;
``TP-WITHIN-NODE`` the stage group does not fit in one node; ``TP-HEADS-DIVISIBLE``;
``TP-KV-HEADS-DIVISIBLE`` (replication, tp a multiple of the KV heads, is allowed and stated);
``EP-EXPERT-NODES-EQ-GPUS`` ep > experts; ``EP-EVEN-EXPERTS`` experts not divisible by ep;
``EP-SPANS-STAGE-GROUP`` ep < W without expert TP; ``EP-NO-EXPERT-TP`` ep < W when expert TP is not allowed;
``SP-LONG-CONTEXT-ONLY`` prefill SP with input_len < 8192; ``SP-DECODE-INEFFECTIVE`` SP in decode;
``MEM-FITS`` the most loaded GPU does not fit (``tools.memory.memory_report``).
Dominated alternatives are not estimated either: ``PP-MEMORY-DRIVEN`` (latency: a larger pp than the
smallest that fits), ``DP-NOT-FOR-LATENCY`` (latency: more replicas than a throughput SLO needs),
``GPU-IDLE`` (throughput: fewer replicas than fit in the cluster).

Estimates.  DP replicas are independent copies, so a replica is estimated once (dp = 1) and the deployment's
throughput is the replica's times dp.  For the throughput objective the batch per replica is searched over
powers of two up to the largest that fits in memory (unless the workload fixes it): throughput grows and
TPOT worsens with the batch, so the best batch under an SLO is found by bisection on the exponent.

Ranking (deterministic).  latency: meets the SLOs, then the latency metric (e2e by default), TPOT, TTFT,
fewer GPUs, higher throughput.  throughput: meets the SLOs, then output tokens/s, tokens/s per GPU, e2e
latency, fewer GPUs.  Remaining ties: smaller pp, then smaller tp, ep, sp, dp, batch, no expert TP first.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.errors import PdagInputError
from tools.layout import Layout
from tools.memory import memory_report
from tools.plan import Hardware, Plan, Workload, parse_plan, validation_error_to_input_error

__all__ = ["PlanSummary", "SearchResult", "Slo", "search_strategies"]

SP_MIN_INPUT = 8192  # SP-LONG-CONTEXT-ONLY threshold of the catalog
TIE_BREAK = {
    "latency": "meets SLOs, {metric} latency, TPOT, TTFT, fewer GPUs, higher throughput, "
               "smaller pp, tp, ep, sp, dp, batch, no expert TP",
    "throughput": "meets SLOs, output tokens/s, tokens/s per GPU, e2e latency, fewer GPUs, "
                  "smaller pp, tp, ep, sp, dp, batch, no expert TP",
}


class Slo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_ttft_ms: float | None = Field(None, gt=0, description="time to first token of the batch")
    max_tpot_ms: float | None = Field(None, gt=0, description="time per output token")
    min_throughput_tokens_per_s: float | None = Field(None, gt=0, description="output tokens/s of the deployment")


class PlanSummary(BaseModel):
    rank: int = Field(0, description="1 = best for the objective; 0 = not ranked (Pareto only)")
    label: str = Field(description="compact degrees, e.g. 'TP8' or 'DP2 x PP2 x TP4 EP4'")
    plan: dict[str, Any] = Field(description="the complete plan; pass it to validate_dag / estimate_performance")
    gpus_used: int
    batch_size: int = Field(description="sequences per DP replica")
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    throughput_tokens_per_s: float = Field(description="output tokens/s of the deployment (all replicas)")
    throughput_per_gpu: float
    user_tokens_per_s: float = Field(description="per-user decode speed, 1000 / TPOT")
    memory_max_gpu_bytes: float
    memory_capacity_bytes: float
    meets_slo: bool
    slo_misses: list[str] = Field(default_factory=list)
    reason: str = ""


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
    elapsed_ms: float
    notes: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------- helpers
@dataclass(frozen=True, order=True)
class _Shape:
    """One replica's layout (everything but dp and batch)."""

    pp: int
    tp: int
    ep: int
    sp: int  # prefill SP (decode always 1)
    expert_tp: bool


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
    parts = [f"{name}{v}" for name, v in (("DP", dp), ("PP", s.pp), ("TP", s.tp)) if v > 1]
    core = " x ".join(parts) if parts else ("TP1" if s.ep > 1 else "1 GPU")
    if s.ep > 1:
        core += f" EP{s.ep}"
    if s.expert_tp and width // s.ep > 1:
        core += f" (expert TP{width // s.ep})"
    if s.sp > 1:
        core += f" + prefill SP{s.sp}"
    return core


def _get(obj: Any, path: str) -> float:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return float(obj)


class _Search:
    def __init__(self, base: dict[str, Any], spec_plan: Plan, objective: str, slo: Slo, batch_fixed: bool,
                 allow_expert_tp: bool, latency_metric: str) -> None:
        self.base = base
        self.spec = spec_plan.spec
        self.hw = spec_plan.hardware
        self.wl = spec_plan.workload
        self.objective = objective
        self.slo = slo
        self.batch_fixed = batch_fixed
        self.allow_expert_tp = allow_expert_tp
        self.metric = latency_metric
        self.rejected: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.slo_rejected: Counter[str] = Counter()
        self.estimates = 0
        self.considered = 0
        self._est_cache: dict[tuple[_Shape, int], tuple[float, float, float, float]] = {}
        self._mem_cache: dict[tuple[_Shape, int], Any] = {}

    # -------------------------------------------------------------- bookkeeping
    def reject(self, rule: str, what: str, n: int = 1) -> None:
        if n <= 0:
            return
        self.rejected[rule] += n
        self.considered += n
        self.examples.setdefault(rule, what)

    def plan_dict(self, s: _Shape, dp: int, batch: int) -> dict[str, Any]:
        d = dict(self.base)
        d["parallel"] = {"dp": dp, "pp": s.pp, "tp": s.tp, "ep": s.ep, "sp": 1}
        if s.sp > 1:
            d["phases"] = {"prefill": {"sp": s.sp}}
        d["workload"] = {**self.base["workload"], "batch_size": batch}
        options = dict(self.base.get("options") or {})
        if s.expert_tp:
            options["allow_expert_tp"] = True
        if self.spec.attention != "mla" and s.tp > self.spec.num_kv_heads:
            options["kv_replication_ok"] = True
        if options:
            d["options"] = options
        return d

    def plan(self, s: _Shape, dp: int, batch: int) -> Plan:
        return Plan.model_validate(self.plan_dict(s, dp, batch))

    def memory(self, s: _Shape, batch: int) -> Any:
        key = (s, batch)
        if key not in self._mem_cache:
            plan = self.plan(s, 1, batch)
            self._mem_cache[key] = memory_report(plan, Layout(plan))
        return self._mem_cache[key]

    def estimate(self, s: _Shape, batch: int) -> tuple[float, float, float, float]:
        """(ttft, tpot, e2e, throughput) of one replica."""
        key = (s, batch)
        if key not in self._est_cache:
            from tools.estimate import estimate_performance

            est = estimate_performance(plan=self.plan(s, 1, batch))
            self.estimates += 1
            self._est_cache[key] = (
                _get(est, "prefill_latency_ms"), _get(est, "decode_latency_ms_per_token"),
                _get(est, "e2e_latency_ms"), _get(est, "throughput.output_tokens_per_s"),
            )
        return self._est_cache[key]

    def point(self, s: _Shape, batch: int, dp: int) -> _Point:
        ttft, tpot, e2e, tput = self.estimate(s, batch)
        mem = self.memory(s, batch)
        width = max(s.tp, s.ep)
        p = _Point(s, batch, dp, dp * s.pp * width, ttft, tpot, e2e, tput * dp,
                   float(mem.max_gpu_bytes), float(mem.capacity_bytes))
        slo = self.slo
        if slo.max_ttft_ms is not None and ttft > slo.max_ttft_ms:
            p.misses.append(f"TTFT {ttft:.1f} ms > {slo.max_ttft_ms:g}")
        if slo.max_tpot_ms is not None and tpot > slo.max_tpot_ms:
            p.misses.append(f"TPOT {tpot:.2f} ms > {slo.max_tpot_ms:g}")
        if slo.min_throughput_tokens_per_s is not None and p.tput < slo.min_throughput_tokens_per_s:
            p.misses.append(f"throughput {p.tput:.0f} tok/s < {slo.min_throughput_tokens_per_s:g}")
        return p

    # -------------------------------------------------------------- enumeration
    def shapes(self) -> list[_Shape]:
        """Every replica layout that passes the structural rules (memory not checked yet)."""
        spec, n, node = self.spec, self.hw.num_gpus, self.hw.gpus_per_node
        moe = spec.moe if spec.is_moe else None
        cands = _candidates(n, (node,))
        out: list[_Shape] = []
        for tp in cands:
            for ep in cands:
                for pp in cands:
                    what = f"tp={tp} ep={ep} pp={pp}"
                    if ep > 1 and moe is None:
                        self.reject("EP-MOE-ONLY", f"{what}: {spec.id} has no MoE layers")
                        continue
                    width = max(tp, ep)
                    if pp * width > n:
                        self.reject("GPU-EXCEEDS-CLUSTER", f"{what}: a replica needs {pp * width} > {n} GPUs")
                        continue
                    if pp > spec.num_layers:
                        self.reject("PP-DEGREE-LE-LAYERS", f"{what}: {spec.num_layers} layers")
                        continue
                    if width > node or node % width:
                        self.reject("TP-WITHIN-NODE", f"{what}: stage group of {width} GPUs leaves the "
                                                      f"{node}-GPU node")
                        continue
                    if spec.num_heads % tp:
                        self.reject("TP-HEADS-DIVISIBLE", f"{what}: {spec.num_heads} heads")
                        continue
                    kv = spec.num_kv_heads
                    if spec.attention != "mla" and kv % tp and tp % kv:
                        self.reject("TP-KV-HEADS-DIVISIBLE", f"{what}: {kv} KV heads")
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
                        if self.wl.input_len < SP_MIN_INPUT:
                            self.reject("SP-LONG-CONTEXT-ONLY", f"{what} sp={sp}: input_len {self.wl.input_len}")
                        else:
                            out.append(_Shape(pp, tp, ep, sp, expert_tp))
                        self.reject("SP-DECODE-INEFFECTIVE", f"{what} sp={sp} in decode")
                    out.append(_Shape(pp, tp, ep, 1, expert_tp))
        return sorted(out)

    def fitting(self, shapes: list[_Shape], batch: int) -> list[tuple[_Shape, Any]]:
        """Shapes whose memory fits at ``batch``.  Latency keeps only the smallest fitting pp of each group
        (PP-MEMORY-DRIVEN); throughput keeps the smallest and the next one, whose extra memory can hold a
        larger batch, and drops deeper pipelines whose decode bubbles only grow (PP-DECODE-BUBBLES)."""
        keep: list[tuple[_Shape, Any]] = []
        first: dict[tuple[int, int, int, bool], int] = {}
        for s in sorted(shapes, key=lambda x: (x.tp, x.ep, x.sp, x.expert_tp, x.pp)):
            group = (s.tp, s.ep, s.sp, s.expert_tp)
            what = f"pp={s.pp} tp={s.tp} ep={s.ep} sp={s.sp}"
            if group in first:
                if self.objective == "latency":
                    self.reject("PP-MEMORY-DRIVEN", f"{what}: pp={first[group]} already fits")
                    continue
                if s.pp > 2 * first[group]:
                    self.reject("PP-DECODE-BUBBLES", f"{what}: pp={first[group]} already fits")
                    continue
            mem = self.memory(s, batch)
            if not mem.fits:
                self.reject("MEM-FITS", f"{what}: {mem.message}")
                continue
            first.setdefault(group, s.pp)
            keep.append((s, mem))
        return keep

    # -------------------------------------------------------------- objectives
    def run_latency(self, shapes: list[_Shape]) -> list[_Point]:
        batch = self.wl.batch_size
        points: list[_Point] = []
        for s, _mem in self.fitting(shapes, batch):
            width = max(s.tp, s.ep)
            max_dp = self.hw.num_gpus // (s.pp * width)
            dp = 1
            p = self.point(s, batch, 1)
            need = self.slo.min_throughput_tokens_per_s
            if need is not None and p.tput < need:
                per_replica = p.tput
                dp = min(max_dp, max(1, -(-int(need) // max(1, int(per_replica)))))
                while dp < max_dp and per_replica * dp < need:
                    dp += 1
                p = self.point(s, batch, dp)
            self.reject("DP-NOT-FOR-LATENCY", f"pp={s.pp} tp={s.tp} ep={s.ep}: dp>{dp} adds no latency benefit",
                        max(0, len(_candidates(max_dp)) - 1 - (dp > 1)))
            self.considered += 1
            points.append(p)
        return points

    def run_throughput(self, shapes: list[_Shape]) -> list[_Point]:
        points: list[_Point] = []
        bmax_of: dict[_Shape, list[int]] = {}
        for s, mem in self.fitting(shapes, 1 if not self.batch_fixed else self.wl.batch_size):
            width = max(s.tp, s.ep)
            dp = self.hw.num_gpus // (s.pp * width)
            self.reject("GPU-IDLE", f"pp={s.pp} tp={s.tp} ep={s.ep}: fewer than {dp} replicas leave GPUs idle",
                        len([d for d in _candidates(dp) if d < dp]))
            if self.batch_fixed:
                self.considered += 1
                points.append(self.point(s, self.wl.batch_size, dp))
                continue
            bmax = int(mem.max_batch_size_that_fits)
            exps = [k for k in range(bmax.bit_length()) if (1 << k) <= bmax]
            self.considered += len(exps)
            if exps:
                bmax_of[s] = exps
                points.append(self._best_batch(s, dp, exps))
        # Frontier samples (smaller batches) only for the best few layouts.
        if bmax_of:
            best = sorted(points, key=lambda p: _sort_key(p, "throughput", self.metric))[:3]
            for i, p in enumerate(best):
                exps = [k for k in bmax_of[p.shape] if (1 << k) < p.batch]
                picks = exps[::-3][:2] + ([0] if i == 0 and exps and exps[0] == 0 else [])
                points.extend(self.point(p.shape, 1 << k, p.dp) for k in dict.fromkeys(picks))
        return points

    def _best_batch(self, s: _Shape, dp: int, exps: list[int]) -> _Point:
        """The largest power-of-two batch meeting the latency SLOs (bisection on the exponent: TTFT and TPOT
        grow with the batch, throughput too), or the smallest batch when none does."""
        seen: dict[int, _Point] = {}

        def at(i: int) -> _Point:
            if i not in seen:
                seen[i] = self.point(s, 1 << exps[i], dp)
            return seen[i]

        def latency_ok(p: _Point) -> bool:
            return not any(m.startswith(("TTFT", "TPOT")) for m in p.misses)

        lo, hi = 0, len(exps) - 1
        if latency_ok(at(hi)):
            return at(hi)
        if not latency_ok(at(lo)):
            return at(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if latency_ok(at(mid)):
                lo = mid
            else:
                hi = mid
        return at(lo)


def _sort_key(p: _Point, objective: str, metric: str) -> tuple:
    s = p.shape
    tail = (s.pp, s.tp, s.ep, s.sp, p.dp, p.batch, s.expert_tp)
    if objective == "latency":
        lat = {"e2e": p.e2e, "tpot": p.tpot, "ttft": p.ttft}[metric]
        return (bool(p.misses), round(lat, 6), round(p.tpot, 6), round(p.ttft, 6), p.gpus, -round(p.tput, 6), *tail)
    return (bool(p.misses), -round(p.tput, 6), -round(p.per_gpu, 6), round(p.e2e, 6), p.gpus, *tail)


def _pareto(points: list[_Point]) -> list[_Point]:
    """Non-dominated points on (per-user speed, throughput per GPU), fastest per user first."""
    best: list[_Point] = []
    for p in sorted(points, key=lambda q: (-q.user_speed, -q.per_gpu, q.gpus, q.shape, q.batch)):
        if not best or p.per_gpu > best[-1].per_gpu * (1 + 1e-9):
            best.append(p)
    return best


def _reason(p: _Point, rank: int, best: _Point, objective: str, metric: str, n: int) -> str:
    head = f"{p.mem_max / 1e9:.0f}/{p.mem_cap / 1e9:.0f} GB on the fullest GPU"
    if p.misses:
        return f"misses the SLO ({'; '.join(p.misses)}); best effort; {head}"
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
        if p.dp > 1:
            extra += f"; DP{p.dp} to reach the throughput SLO"
        return f"{why}; TTFT {p.ttft:.1f} ms, TPOT {p.tpot:.2f} ms{extra}; {head}"
    if rank == 1:
        why = f"highest throughput ({p.tput:.0f} tok/s, {p.per_gpu:.0f}/GPU) of {n} feasible points"
    else:
        why = f"{p.tput:.0f} tok/s ({100 * (p.tput / best.tput - 1):.0f}% vs best), {p.per_gpu:.0f}/GPU"
    return f"{why} at batch {p.batch} x DP{p.dp}; TPOT {p.tpot:.2f} ms; {head}"


def _summary(search: _Search, p: _Point, rank: int, reason: str) -> PlanSummary:
    plan = search.plan_dict(p.shape, p.dp, p.batch) | {"objective": search.objective}
    # The returned plan claims the GPUs it uses (the cluster is in SearchResult.hardware): no idle GPUs to flag.
    plan["hardware"] = {**plan["hardware"], "num_gpus": p.gpus}
    return PlanSummary(
        rank=rank, label=_label(p.shape, p.dp, max(p.shape.tp, p.shape.ep)),
        plan=plan,
        gpus_used=p.gpus, batch_size=p.batch, ttft_ms=p.ttft, tpot_ms=p.tpot, e2e_ms=p.e2e,
        throughput_tokens_per_s=p.tput, throughput_per_gpu=p.per_gpu, user_tokens_per_s=p.user_speed,
        memory_max_gpu_bytes=p.mem_max, memory_capacity_bytes=p.mem_cap, meets_slo=not p.misses,
        slo_misses=list(p.misses), reason=reason,
    )


def search_strategies(
    model: str | dict[str, Any],
    hardware: dict[str, Any],
    workload: dict[str, Any] | None = None,
    objective: Literal["latency", "throughput"] = "latency",
    slo: dict[str, Any] | None = None,
    top_k: int = 5,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    allow_expert_tp: bool = True,
    latency_metric: Literal["e2e", "tpot", "ttft"] = "e2e",
) -> SearchResult:
    """Search the parallel plans of ``model`` on ``hardware`` for ``objective`` (see the module doc for the
    space, the pruning rules and the tie-break order).  ``workload``: input_len, output_len and optionally
    batch_size (per replica; searched for the throughput objective when absent).  ``slo``: max_ttft_ms,
    max_tpot_ms, min_throughput_tokens_per_s.  ``allow_expert_tp`` lets MoE plans shard experts over the
    TP ranks (what vLLM and SGLang do without EP), stated in each plan's options."""
    t0 = time.perf_counter()
    if objective not in ("latency", "throughput"):
        raise PdagInputError("objective", f"unknown objective {objective!r}", "latency, throughput")
    if latency_metric not in ("e2e", "tpot", "ttft"):
        raise PdagInputError("latency_metric", f"unknown metric {latency_metric!r}", "e2e, tpot, ttft")
    if not isinstance(top_k, int) or not 1 <= top_k <= 100:
        raise PdagInputError("top_k", f"expected an integer in 1..100, got {top_k!r}", "1..100")
    try:
        hw = Hardware.model_validate(hardware)
        wl = Workload.model_validate(workload or {})
        slo_m = Slo.model_validate(slo or {})
    except ValidationError as exc:
        title = exc.title.lower()
        root = "slo" if "slo" in title else "workload" if "workload" in title else "hardware"
        raise validation_error_to_input_error(exc, root) from None
    batch_fixed = objective == "latency" or bool(workload and "batch_size" in workload)
    base: dict[str, Any] = {
        "model": model, "hardware": hw.model_dump(), "workload": wl.model_dump(),
        "dtype": dtype, "objective": objective,
    }
    if kv_dtype is not None:
        base["kv_dtype"] = kv_dtype
    probe = parse_plan({**base, "parallel": {}})
    if isinstance(model, str):
        base["model"] = probe.model_id
    search = _Search(base, probe, objective, slo_m, batch_fixed, allow_expert_tp, latency_metric)
    shapes = search.shapes()
    points = search.run_latency(shapes) if objective == "latency" else search.run_throughput(shapes)
    for p in points:
        for m in p.misses:
            search.slo_rejected["SLO-" + m.split()[0].upper()] += 1
    ranked = sorted(points, key=lambda p: _sort_key(p, objective, latency_metric))
    # One entry per layout in the top list (the best batch of each), so top_k shows distinct strategies.
    top_points: list[_Point] = []
    seen_shapes: set[_Shape] = set()
    for p in ranked:
        if p.shape not in seen_shapes:
            seen_shapes.add(p.shape)
            top_points.append(p)
        if len(top_points) == top_k:
            break
    notes: list[str] = []
    if not points:
        notes.append("no plan fits: see 'rejected' (MEM-FITS usually means more GPUs, fp8 weights or a shorter "
                     "context are needed)")
    elif top_points[0].misses:
        notes.append("no plan meets every SLO; the list shows the closest ones")
    n_ok = len({p.shape for p in points})
    top = [
        _summary(search, p, i + 1, _reason(p, i + 1, top_points[0], objective, latency_metric, n_ok))
        for i, p in enumerate(top_points)
    ]
    feasible = [p for p in points if not p.misses] or points
    pareto = [
        _summary(search, p, 0, f"Pareto: {p.user_speed:.1f} tok/s per user, {p.per_gpu:.0f} tok/s per GPU "
                               f"(batch {p.batch}, {p.gpus} GPUs)")
        for p in _pareto(feasible)
    ]
    return SearchResult(
        model=probe.model_id, hardware=hw.model_dump(), workload=wl.model_dump(), objective=objective,
        slo=slo_m.model_dump(exclude_none=True) or None, top=top, pareto=pareto,
        rejected=dict(sorted(search.rejected.items())), rejected_examples=dict(sorted(search.examples.items())),
        slo_rejected=dict(sorted(search.slo_rejected.items())), considered=search.considered,
        estimated=search.estimates,
        tie_break=TIE_BREAK[objective].format(metric=latency_metric),
        elapsed_ms=(time.perf_counter() - t0) * 1000, notes=notes,
    )
