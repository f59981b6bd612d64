"""DISAGG-*: opt-in disaggregated serving: prefill and decode on disjoint GPU pools joined by KV transfers.

Beyond the seeds.  With ``options.disaggregated`` each phase has its own degrees and pool (prefill GPUs first);
prefill replicas ``p<i>`` hold only a prefill branch, decode replicas ``d<j>`` only a decode branch, and every
decode KV shard gets its cache through a ``KVTransferNode`` fed by the prefill KV shards of the same layer.
Without the opt-in, both phases share one replica and one weight layout (PHASE-SHARED-WEIGHT-LAYOUT).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from tools.core.dag import NodeType
from tools.core.efficiency import plan_efficiency
from tools.core.handoff import kv_handoff
from tools.core.hardware import DTYPE_BYTES
from tools.core.layout import Layout
from tools.rules.registry import Change, Context, Finding, checker, fixer

PER_PHASE = ("tp", "pp", "ep", "attn_dp", "dp")
GB = 1e9


def phase_differences(ctx: Context) -> list[str]:
    """Degrees (weight layout and dp) that differ between the phases of the plan."""
    if ctx.layout is None:
        return []
    pre, dec = ctx.layout.phases["prefill"], ctx.layout.phases["decode"]
    return [k for k in PER_PHASE if getattr(pre, k) != getattr(dec, k)]


def single_phase_replicas(ctx: Context) -> dict[str, list[str]]:
    """ReplicaNodes that hold exactly one phase branch, by that phase (the pools of a disaggregated DAG)."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in ctx.of(NodeType.REPLICA):
        phases = {ctx.inherited[k]["phase"] for k in ctx.succ[r] if ctx.types[k] == NodeType.PHASE}
        if len(phases) == 1:
            ph = next(iter(phases))
            if ph in ("prefill", "decode"):
                out[ph].append(r)
    return out


def dag_is_disaggregated(ctx: Context) -> bool:
    """The DAG is drawn with separate pools: a prefill-only and a decode-only replica, or a KV transfer."""
    if ctx.graph is None:
        return False
    pools = single_phase_replicas(ctx)
    transfers = [n for n in ctx.of(NodeType.KV_TRANSFER) if ctx.attr(n, "role") != "kv_reshard"]
    return bool(pools.get("prefill") and pools.get("decode")) or bool(transfers)


def disaggregated(ctx: Context) -> bool:
    """Checkers treat the input as disaggregated when the plan opts in (the DAG is then checked as such)."""
    return bool(ctx.options.disaggregated)


# ----------------------------------------------------------------------------------------------- DISAGG-OPT-IN
@checker("DISAGG-OPT-IN", needs="any")
def check_opt_in(ctx: Context) -> Iterator[Finding]:
    if disaggregated(ctx):
        return
    if ctx.plan is not None:
        diff = phase_differences(ctx)
        if diff:
            pre, dec = ctx.layout.phases["prefill"], ctx.layout.phases["decode"]  # type: ignore[union-attr]
            shown = ", ".join(f"{k} {getattr(pre, k)} vs {getattr(dec, k)}" for k in diff)
            yield Finding(f"prefill and decode use different degrees ({shown}); separate layouts per phase need "
                          "separate GPU pools, which is opt-in (options.disaggregated) - in aggregated serving "
                          "both phases run on the same resident weights", field=f"plan.phases.decode.{diff[0]}",
                          hint="use one layout for both phases, or set options.disaggregated for prefill and "
                               "decode pools of their own")
            return
        if ctx.from_plan:
            return
    if dag_is_disaggregated(ctx):
        pools = single_phase_replicas(ctx)
        nodes = pools.get("prefill", [])[:2] + pools.get("decode", [])[:2] + ctx.of(NodeType.KV_TRANSFER)[:1]
        yield Finding("the DAG gives prefill and decode separate replicas (GPU pools) linked by KV transfers, but "
                      "disaggregated serving is opt-in (options.disaggregated in the DAG's plan)", nodes,
                      hint="set options.disaggregated in the plan, or draw both phases inside each replica")


@fixer("DISAGG-OPT-IN")
def fix_opt_in(plan: dict[str, Any], ctx: Context) -> list[Change]:
    """Aggregate again with the GPU count kept: each degree takes the larger phase's value, dp fills the GPUs."""
    if ctx.plan is None or ctx.layout is None:
        return []
    diff = phase_differences(ctx)
    if not diff:
        return []
    total = _disaggregated_gpus(ctx)
    par = plan.setdefault("parallel", {})
    phases = plan.get("phases") or {}
    changes: list[Change] = []
    pre, dec = ctx.layout.phases["prefill"], ctx.layout.phases["decode"]
    for k in diff:
        if k == "dp":
            continue
        val = max(getattr(pre, k), getattr(dec, k))
        changes.append(Change(rule_id="DISAGG-OPT-IN", message=f"set {k} = {val} for both phases (the larger of "
                              f"prefill {getattr(pre, k)} and decode {getattr(dec, k)}): aggregated serving shares "
                              "one weight layout", field=f"plan.parallel.{k}",
                              before=f"{getattr(pre, k)}/{getattr(dec, k)}", after=val))
        par[k] = val
    for ph in list(phases):
        o = phases[ph]
        if isinstance(o, dict):
            for k in diff:
                o.pop(k, None)
            if not o:
                del phases[ph]
    if "phases" in plan and not plan["phases"]:
        del plan["phases"]
    par.pop("dp", None)
    try:
        from tools.core.plan import parse_plan

        per = Layout(parse_plan(plan)).replica_gpus
    except Exception:  # the trial plan may not parse; the loop judges it anyway
        per = max(1, total)
    dp = max(1, total // per)
    before = pre.dp if "dp" not in diff else f"{pre.dp}/{dec.dp}"
    par["dp"] = dp
    changes.append(Change(rule_id="DISAGG-OPT-IN", message=f"set dp = {dp} for the whole replica, so the "
                          f"{total} GPUs of the two pools serve {dp} aggregated replica(s) of {per} GPUs; "
                          "alternative: keep the per-phase layouts and set options.disaggregated = true",
                          field="plan.parallel.dp", before=before, after=dp))
    return changes


def _disaggregated_gpus(ctx: Context) -> int:
    """GPUs the plan's per-phase degrees would use as two pools."""
    assert ctx.plan is not None
    from tools.core.plan import parse_plan

    raw = ctx.plan.model_dump(mode="json", exclude_none=True)
    raw.setdefault("options", {})["disaggregated"] = True
    try:
        return Layout(parse_plan(raw)).gpus_needed
    except Exception:  # noqa: BLE001 - fall back to the aggregated count
        return ctx.layout.gpus_needed if ctx.layout is not None else 1


# ----------------------------------------------------------------------------------------------- graph rules
def _phase_devices(ctx: Context) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for n in ctx.real_nodes:
        if ctx.types[n] == NodeType.KV_TRANSFER:
            continue
        ph = ctx.phase[n]
        if ph in ("prefill", "decode"):
            out[ph].update(ctx.devices[n])
    return out


@checker("DISAGG-POOLS-DISJOINT")
def check_pools_disjoint(ctx: Context) -> Iterator[Finding]:
    if not disaggregated(ctx):
        return
    devs = _phase_devices(ctx)
    common = devs.get("prefill", set()) & devs.get("decode", set())
    if common:
        shared = sorted(common)
        nodes = [n for n in ctx.real_nodes if ctx.types[n] != NodeType.KV_TRANSFER and ctx.devices[n] & common]
        yield Finding(f"prefill and decode operators both run on GPU(s) {shared[:8]}; in disaggregated serving "
                      "the two pools share no GPU (each pool holds its own copy of the weights)", nodes,
                      hint="rebuild the DAG from the plan: prefill GPUs come first, then the decode pool")


@checker("DISAGG-KV-TRANSFER")
def check_kv_transfer(ctx: Context) -> Iterator[Finding]:
    if not disaggregated(ctx):
        return
    ph = ctx.phase
    direct = [(u, v) for u, v, t in ctx.data_edges() if t == "kv" and ph[u] == "prefill" and ph[v] == "decode"
              and ctx.types[u] != NodeType.KV_TRANSFER and ctx.types[v] != NodeType.KV_TRANSFER]
    if direct:
        u, v = direct[0]
        yield Finding(f"{len(direct)} kv edge(s) go straight from the prefill pool to the decode pool (e.g. {u} -> "
                      f"{v}); the cache crosses pools only through a KVTransferNode", [u, v],
                      hint="route prefill KV -> KVTransferNode -> decode KV")
        return
    missing, unfed = [], []
    for k in ctx.of(NodeType.KV_CACHE):
        if ph[k] != "decode":
            continue
        srcs = [p for p, a in ctx.pred[k].items() if a.get("type") == "kv" and ctx.types[p] == NodeType.KV_TRANSFER]
        if not srcs:
            missing.append(k)
            continue
        lyr = ctx.inherited[k]["layer"]
        for t in srcs:
            feeds = [p for p, a in ctx.pred[t].items() if a.get("type") == "kv" and ctx.types[p] == NodeType.KV_CACHE
                     and ph[p] == "prefill" and (lyr is None or ctx.inherited[p]["layer"] in (None, lyr))]
            if not feeds:
                unfed.append(t)
    if missing:
        layers = sorted({ctx.inherited[k]["layer"] for k in missing}, key=str)
        yield Finding(f"{len(missing)} decode KV node(s) (layers {layers[:6]}) receive no KVTransferNode; in "
                      "disaggregated serving every decode KV shard of every layer gets its cache from the prefill pool "
                      "through a transfer", missing, hint="add a KVTransferNode per layer, fed by the prefill KV nodes")
    if unfed:
        yield Finding(f"{len(set(unfed))} KVTransferNode(s) have no prefill KV node of their layer feeding them (e.g. "
                      f"{unfed[0]}); a transfer moves the cache the prefill pool wrote", sorted(set(unfed)))


@checker("DISAGG-TRANSFER-LINK", needs="plan")
def check_transfer_link(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    if not disaggregated(ctx):
        return
    pre, dec = ctx.layout.pools["prefill"], ctx.layout.pools["decode"]
    gpn = ctx.nvlink_domain  # inside an NVL72 rack the cache moves over NVLink, as the estimator prices it
    crossing = 0
    for j in range(dec.dp):
        a = {d // gpn for d in pre.replica_devices(j % pre.dp)}
        b = {d // gpn for d in dec.replica_devices(j)}
        if len(a | b) > 1:
            crossing += 1
    if not crossing:
        return
    hand = kv_handoff(ctx.plan, ctx.layout, plan_efficiency(ctx.plan), 1)
    ms = hand.seconds_per_batch * 1e3  # one request's, as the serving simulation charges it
    per_token = ctx.plan.spec.kv_bytes_per_token(DTYPE_BYTES[ctx.plan.effective_kv_dtype])
    yield Finding(f"{crossing} of {dec.dp} decode replica(s) receive their KV cache from a prefill replica outside "
                  f"their NVLink domain: {per_token / 1e3:.1f} kB per token x input_len {ctx.plan.workload.input_len}"
                  f" = {hand.bytes_per_request / GB:.3f} GB per request ({ctx.plan.effective_kv_dtype} KV; "
                  f"{hand.wire_bytes_per_request / GB:.3f} GB on the wire with the decode GPUs' copies), about "
                  f"{ms:.2f} ms per request over {hand.link} before decode can start (estimate_performance's "
                  "kv_transfer)",
                  field="plan.options.disaggregated",
                  hint="count the transfer in TTFT (estimate_performance does), use an fp8 KV cache to halve it, or "
                       "keep paired prefill and decode replicas inside one NVLink domain")
