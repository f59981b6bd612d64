"""MEM-* and KV-*: every GPU fits (tools.core.memory accounts for it); the KV cache is laid out where attention is.

Also holds the resize search the memory and cluster-size fixers share: the smallest change of (tp, ep, pp)
that fits the model in the cluster, ranked by the plan's objective.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from tools.core.dag import NodeType
from tools.core.engine_profile import ENGINE_IDS, EngineProfile, engine_profile
from tools.core.layout import Layout
from tools.core.memory import (
    MemoryReport,
    engine_window_kv,
    load_queues,
    memory_report,
    one_sequence_tokens,
    unfit_hint,
)
from tools.core.plan import Plan
from tools.rules.registry import Change, Context, Finding, checker, fixer

GB = 1e9


def report_of(ctx: Context) -> MemoryReport:
    cached = ctx.__dict__.get("_memory")
    if cached is None:
        assert ctx.plan is not None
        cached = memory_report(ctx.plan, ctx.layout)
        ctx.__dict__["_memory"] = cached
    return cached


def with_degrees(plan: Plan, **deg: int) -> Plan:
    """The plan with plan-wide degrees replaced (the phase overrides of those degrees dropped)."""
    phases = plan.phases.model_copy(update={
        ph: o.model_copy(update={k: None for k in deg}) for ph in ("prefill", "decode")
        if (o := getattr(plan.phases, ph)) is not None})
    return plan.model_copy(update={"parallel": plan.parallel.model_copy(update=deg), "phases": phases})


def fits_with(plan: Plan, **deg: int) -> bool:
    p = with_degrees(plan, **deg) if deg else plan
    if p.options.layer_split is not None and "pp" in deg:
        p = p.model_copy(update={"options": p.options.model_copy(update={"layer_split": None})})
    return memory_report(p).fits


# ----------------------------------------------------------------------------------------------- resize search
def tp_candidates(plan: Plan) -> list[int]:
    """TP degrees the model's shapes allow: heads, dense / shared FFN width, KV heads (divide or replicate)."""
    spec = plan.spec
    out = []
    for t in range(1, min(spec.num_heads, 64) + 1):
        if any(q % t for q in spec.q_head_counts):
            continue
        if spec.attention != "mla" and any(kv % t and t % kv for kv in spec.kv_head_counts):
            continue
        if spec.dense_layer_indices and spec.intermediate_size and spec.intermediate_size % t:
            continue
        if spec.moe and spec.moe.shared_expert_intermediate_size % t:
            continue
        out.append(t)
    return out


def ep_candidates(plan: Plan) -> list[int]:
    if not plan.spec.is_moe:
        return [1]
    e = plan.spec.moe.num_experts  # type: ignore[union-attr]
    return [x for x in range(1, min(e, 256) + 1) if e % x == 0]


@dataclass
class Candidate:
    tp: int
    ep: int
    pp: int
    dp: int
    report: MemoryReport

    @property
    def width(self) -> int:
        return max(self.tp, self.ep)

    @property
    def gpus(self) -> int:
        return self.dp * self.pp * self.width


def _sp_for(plan: Plan, tp: int) -> int:
    sp = plan.parallel.sp
    while sp > 1 and tp % sp:
        sp //= 2
    return max(1, sp)


def _report(plan: Plan, tp: int, ep: int, pp: int, dp: int) -> MemoryReport:
    p = with_degrees(plan, tp=tp, ep=ep, pp=pp, dp=dp, sp=_sp_for(plan, tp))
    if p.options.layer_split is not None:
        p = p.model_copy(update={"options": p.options.model_copy(update={"layer_split": None})})
    return memory_report(p, Layout(p))


MAX_TRIES = 60  # memory reports per search: the first fits are found early in preference order


def search(plan: Plan, gpu_limit: int | None, dp: int | None = None, want: int = 4,
           by_size: bool = False) -> list[Candidate]:
    """Fitting (tp, ep, pp) layouts within ``gpu_limit`` GPUs (None: unbounded), best first.

    Candidates are tried in preference order and the search stops after ``want`` fits.  A repair keeps the plan's
    intent, so the order is: no stage group wider than an NVLink domain unless the plan already has one, no deeper
    pipeline while a wider group fits (MEM-FITS's hint), then the fewest degrees changed, then the smallest change
    (log2 steps from the plan's degrees), and only then the objective (latency: the fewest stages, then the smallest
    group; throughput: the smallest replica).
    ``by_size``: smallest GPU count first (to say how many GPUs are needed)."""
    spec, gpn = plan.spec, plan.hardware.gpus_per_node
    dp = dp or max(plan.degrees("prefill").dp, plan.degrees("decode").dp)
    cur = plan.parallel
    max_pp = min(spec.num_layers, 128)
    combos: list[tuple[int, int, int]] = []
    for tp in tp_candidates(plan):
        for ep in ep_candidates(plan):
            w = max(tp, ep)
            if w % tp or w % ep:
                continue
            if spec.is_moe and ep < w and not plan.options.allow_expert_tp and ep != cur.ep:
                continue  # idle GPUs in the MoE block; keep only the plan's own choice of that
            top = max_pp if gpu_limit is None else min(max_pp, gpu_limit // (dp * w))
            combos.extend((tp, ep, pp) for pp in range(1, top + 1))

    def dist(c: tuple[int, int, int]) -> float:
        return sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(c, (cur.tp, max(1, cur.ep), cur.pp), strict=False))

    wide = max(gpn, cur.tp * cur.attn_dp, cur.ep, cur.sp)  # a group this wide was the plan's own choice

    def key(c: tuple[int, int, int]) -> tuple[Any, ...]:
        tp, ep, pp = c
        w = max(tp, ep)
        if by_size:
            return (pp * w, w > gpn, pp, dist(c))
        changed = sum(a != b for a, b in zip(c, (cur.tp, max(1, cur.ep), cur.pp), strict=True))
        deeper = pp > cur.pp  # MEM-FITS's hint: spread experts or widen TP in the domain first, then pp
        if plan.objective == "latency":
            return (w > wide, deeper, changed, dist(c), pp, w)
        return (w > wide, deeper, changed, dist(c), pp * w, pp)

    combos.sort(key=key)
    out: list[Candidate] = []
    failed: set[tuple[int, int]] = set()  # (tp, ep) that failed at some pp: smaller pp will fail too
    tries = 0
    for tp, ep, pp in combos:
        if tries >= MAX_TRIES or len(out) >= want:
            break
        if any(f == (tp, ep) and fp >= pp for f, fp in ((k[:2], k[2]) for k in failed)):
            continue
        tries += 1
        r = _report(plan, tp, ep, pp, dp)
        if r.fits:
            out.append(Candidate(tp, ep, pp, dp, r))
        else:
            failed.add((tp, ep, pp))
    return out


def min_gpus_needed(plan: Plan) -> int | None:
    found = search(plan, None, dp=1, want=1, by_size=True)
    return found[0].gpus if found else None


def apply_candidate(plan: dict[str, Any], c: Candidate, rule_id: str, why: str) -> list[Change]:
    par = plan.setdefault("parallel", {})
    changes = []
    for k, v in (("tp", c.tp), ("ep", c.ep), ("pp", c.pp), ("dp", c.dp)):
        before = par.get(k, 1)
        if before != v:
            par[k] = v
            changes.append(Change(rule_id=rule_id, message=f"set {k} from {before} to {v}: {why}",
                                  field=f"plan.parallel.{k}", before=before, after=v))
    for ph, o in list((plan.get("phases") or {}).items()):
        if isinstance(o, dict):
            for k in ("tp", "ep", "pp", "dp"):
                if k in o:
                    changes.append(Change(rule_id=rule_id, message=f"removed phases.{ph}.{k} (now plan-wide)",
                                          field=f"plan.phases.{ph}.{k}", before=o.pop(k), after=None))
    for where, held in [("parallel", par)] + [(f"phases.{ph}", o) for ph, o in sorted(
            (plan.get("phases") or {}).items()) if isinstance(o, dict)]:
        sp = held.get("sp", 1)
        if isinstance(sp, int) and sp > 1 and c.tp % sp:  # a phase's sp too: it splits the same new TP group
            new = max(s for s in range(1, sp + 1) if c.tp % s == 0)
            held["sp"] = new
            changes.append(Change(rule_id=rule_id, message=f"set {where}.sp from {sp} to {new} so that it divides "
                                  f"tp {c.tp}", field=f"plan.{where}.sp", before=sp, after=new))
    opts = plan.get("options") or {}
    if opts.get("layer_split") is not None and c.pp != len(opts["layer_split"]):
        changes.append(Change(rule_id=rule_id, message="removed options.layer_split (the stage count changed)",
                              field="plan.options.layer_split", before=opts.pop("layer_split"), after=None))
    return changes


# ----------------------------------------------------------------------------------------------- MEM
@checker("MEM-FITS", needs="plan")
def check_fits(ctx: Context) -> Iterator[Finding]:
    r = report_of(ctx)
    assert ctx.plan is not None
    if not r.fits and r.max_gpu_bytes <= r.capacity_bytes and r.load_peak_bytes is not None:
        yield Finding(f"GPU {r.worst_gpu} serves in {r.max_gpu_bytes / GB:.1f} GB, but {ctx.plan.engine} loads the "
                      f"16-bit checkpoint whole before quantizing it to fp8: {r.load_peak_bytes / GB:.1f} GB at load, "
                      f"more than the {r.capacity_bytes / GB:.1f} GB a {ctx.plan.accelerator.name} holds",
                      field="plan.checkpoint", hint="serve a checkpoint that stores fp8 weights (plan.checkpoint), an "
                      "engine that quantizes layer by layer (vllm), or more GPUs per replica")
        return
    if not r.fits and not load_queues(ctx.plan, r):  # a load's queue is MEM-LOAD-QUEUES, a warning
        plan = ctx.plan
        hint = unfit_hint(plan, ctx.layout, r)
        parts = (f"weights {r.weights_bytes / GB:.1f} GB + KV cache {r.kv_cache_bytes / GB:.1f} GB + activations "
                 f"{r.activation_bytes / GB:.1f} GB + communication buffers {r.comm_buffer_bytes / GB:.2f} GB + "
                 "reserve "
                 f"{r.reserved_bytes / GB:.1f} GB")
        share = _stated_share(plan.engine_options.extra_args or [])
        alone = (f"; the command's --gpu-memory-utilization {share:g} gives vLLM {share * r.capacity_bytes / GB:.1f} "
                 "GB of each GPU, less than the weights alone" if share and r.weights_bytes > share * r.capacity_bytes
                 else "")
        yield Finding(f"GPU {r.worst_gpu} needs {r.max_gpu_bytes / GB:.1f} GB ({parts}) but a "
                      f"{ctx.plan.accelerator.name} holds {r.capacity_bytes / GB:.1f} GB "  # type: ignore[union-attr]
                      f"({r.capacity_bytes / 2**30:.1f} GiB as the driver counts it){alone}; every GPU must fit",
                      field="plan.parallel", hint=hint)


@checker("MEM-LOAD-QUEUES", needs="plan")
def check_load_queues(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    r = report_of(ctx)
    if load_queues(ctx.plan, r):
        wl = ctx.plan.workload
        yield Finding(f"at {wl.input_len + wl.output_len} tokens a sequence, the KV cache holds "
                      f"{r.max_batch_size_that_fits} of the {wl.batch_size} sequences per replica that "
                      f"{wl.concurrency} clients keep in flight: the engine queues the rest, and the served figures "
                      "include that queue", field="plan.workload.concurrency",
                      hint="to run them all at once: more replicas (GPUs), fp8 KV (kv_dtype) or a shorter context; "
                           "workload.batch_size states the sequences to hold instead")


def _stated_share(args: list[str]) -> float | None:
    """vLLM's --gpu-memory-utilization as an imported command kept it (engine_options.extra_args). The reserve prices
    vLLM's default share; a command that gives the engine less than its weights names that here."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag == "--gpu-memory-utilization":
            try:
                share = float(value if eq else args[i + 1] if i + 1 < len(args) else "")
            except ValueError:
                return None
            return share if 0 < share <= 1 else None
    return None


def _resize(plan: dict[str, Any], ctx: Context, rule_id: str, why: str) -> list[Change]:
    assert ctx.plan is not None
    found = search(ctx.plan, ctx.plan.hardware.num_gpus)
    if not found:
        found = search(ctx.plan, ctx.plan.hardware.num_gpus, dp=1)
    if not found:
        return []
    ctx.__dict__["_alternatives"] = found[1:4]
    return apply_candidate(plan, found[0], rule_id, why)


@fixer("MEM-FITS")
def fix_fits(plan: dict[str, Any], ctx: Context) -> list[Change]:
    return _resize(plan, ctx, "MEM-FITS", "the model did not fit in GPU memory (the fitting layout that changes the "
                   "fewest degrees the least)")


def unfit_reason(plan: Plan) -> str:
    need = min_gpus_needed(plan)
    name = plan.accelerator.name
    if need is None:
        return (f"the model does not fit on this cluster with any strategy, nor on the first {MAX_TRIES} layouts of "
                f"{name} GPUs pdag tried by size; use a larger GPU, a smaller dtype or a shorter context")
    return (f"the model does not fit on this cluster with any strategy: it needs at least {need} {name} GPUs "
            f"(the plan may use {plan.hardware.num_gpus})")


# ----------------------------------------------------------------------------------------------- MEM-KV / KV-*
def _attention_kv(ctx: Context) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """attention node -> KV nodes next to it, and KV node -> attention nodes next to it (either direction)."""
    a2k: dict[str, list[str]] = defaultdict(list)
    k2a: dict[str, list[str]] = defaultdict(list)
    for k in ctx.of(NodeType.KV_CACHE):
        for a in list(ctx.pred[k]) + list(ctx.succ[k]):
            if ctx.types[a] == NodeType.ATTENTION:
                a2k[a].append(k)
                k2a[k].append(a)
    return a2k, k2a


@cache
def _long_context_guards() -> tuple[EngineProfile, ...]:
    """Engines that refuse a context cap past the model's window without an override (their profiles say which)."""
    return tuple(p for p in (engine_profile(e) for e in ENGINE_IDS) if p.long_context_env)


@checker("KV-CONTEXT-WITHIN-MODEL", needs="plan")
def check_context_within_model(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    spec, wl = ctx.plan.spec, ctx.plan.workload
    tokens = wl.input_len + wl.output_len
    if tokens > spec.max_position_embeddings:
        yield Finding(f"input_len + output_len = {tokens} tokens but {spec.id} is configured for "
                      f"{spec.max_position_embeddings} positions (max_position_embeddings); beyond that the context "
                      "must be extended (e.g. RoPE scaling) for these requests to be served",
                      field="plan.workload.input_len",
                      hint=f"keep input_len + output_len <= {spec.max_position_embeddings}, or serve a checkpoint "
                           "configured for the longer context")
    for where, opts in (("engine_options", ctx.plan.engine_options), ("decode_engine_options",
                                                                         ctx.plan.decode_engine_options)):
        cap = opts.max_model_len if opts is not None else None
        if cap is not None and cap > spec.max_position_embeddings:
            refuse = ", ".join(f"{p.name} refuses it unless {p.long_context_env}" for p in _long_context_guards())
            yield Finding(f"{where}.max_model_len = {cap} but {spec.id} is configured for "
                          f"{spec.max_position_embeddings} positions: {refuse}, and past the trained positions the "
                          "output is unreliable", field=f"plan.{where}.max_model_len",
                          hint=f"at most {spec.max_position_embeddings}, or a checkpoint (or rope scaling) configured "
                               "for the longer context")


@checker("MEM-ENGINE-CONTEXT", needs="plan")
def check_engine_context(ctx: Context) -> Iterator[Finding]:
    """A request must fit the KV cache as the plan's engine lays it out: an engine that keeps full-length KV on
    windowed layers (SGLang, TensorRT-LLM; vLLM with an EAGLE drafter on chunked attention) holds fewer tokens of
    one sequence than the memory model, which caps those layers at their window."""
    plan = ctx.plan
    assert plan is not None
    spec, wl = plan.spec, plan.workload
    if not (spec.sliding_window and spec.sliding_window_layers) or not report_of(ctx).fits:
        return
    keeps = engine_window_kv(plan)[0]
    tokens = wl.input_len + wl.output_len
    room = one_sequence_tokens(plan, keeps)
    if tokens > room:
        how = (f"keeps the {spec.local_attention} layers to their {spec.sliding_window}-token window plus one step"
               if keeps else f"allocates full-length KV on the {spec.local_attention} layers")
        yield Finding(f"one request of input_len + output_len = {tokens} tokens needs more KV than engine "
                      f"{plan.engine} can hold: it {how}, which leaves room for {room} tokens of one sequence beside "
                      "the weights (the engine refuses to start with such a context cap, or rejects the request)",
                      field="plan.workload.input_len",
                      hint=f"keep input_len + output_len <= {room}, spread the model over more GPUs, fp8 KV "
                           "(kv_dtype), or an engine that keeps windowed layers to their window (vLLM)")


@checker("MEM-KV-ESTIMATED")
def check_kv_estimated(ctx: Context) -> Iterator[Finding]:
    """The KV cache must be in the DAG to be estimated: a KVCacheUpdateNode beside every prefill attention shard
    (the prompt's K/V) and, in decode, one of the decode step's own beside every decode attention shard (the
    token's K/V appended; the prefill's cache alone is read, not grown)."""
    a2k, _ = _attention_kv(ctx)
    phase = {n: ctx.inherited[n]["phase"] for n in ctx.of(NodeType.ATTENTION, NodeType.KV_CACHE)}
    missing = [a for a in ctx.of(NodeType.ATTENTION) if phase[a] == "prefill" and a not in a2k]
    if missing:
        yield Finding(f"{len(missing)} prefill attention node(s) write no KVCacheUpdateNode (e.g. {missing[0]}); "
                      "the KV cache must be explicit so its bytes (total and per GPU) can be estimated", missing,
                      hint="add a KVCacheUpdateNode after each prefill attention shard, on the same GPU")
    stale = [a for a in ctx.of(NodeType.ATTENTION)
             if phase[a] == "decode" and not any(phase[k] == "decode" for k in a2k.get(a, []))]
    if stale:
        yield Finding(f"{len(stale)} decode attention node(s) append to no KVCacheUpdateNode of the decode step "
                      f"(e.g. {stale[0]}); each generated token's K/V grows the cache, which must be explicit", stale,
                      hint="add a decode KVCacheUpdateNode beside each decode attention shard (the prefill's cache "
                           "feeds it through a kv edge)")


@checker("KV-FORMULA-GQA")
def check_kv_gqa(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    if spec is None or spec.attention == "mla":
        return
    most = max(spec.kv_head_counts)
    bad = [n for n in ctx.of(NodeType.ATTENTION, NodeType.KV_CACHE) if (ctx.attr(n, "kv_heads") or 0) > most]
    if bad:
        n = bad[0]
        yield Finding(f"{n} holds kv_heads = {ctx.attr(n, 'kv_heads')} but {spec.id} has {most} KV heads; "
                      "KV bytes count num_key_value_heads (not the query heads)", bad,
                      hint=f"use at most {most} KV heads per shard")


@checker("KV-FORMULA-MLA")
def check_kv_mla(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    if spec is None or spec.attention != "mla":
        return
    bad = [n for n in ctx.of(NodeType.ATTENTION, NodeType.KV_CACHE) if ctx.attr(n, "kv_heads")]
    if bad:
        yield Finding(f"{len(bad)} node(s) of the MLA model {spec.id} carry per-head KV (kv_heads = "
                      f"{ctx.attr(bad[0], 'kv_heads')}); MLA caches one latent (kv_lora_rank + rope dims) per token "
                      "and "
                      "layer, not K and V per head", bad, hint="drop kv_heads on MLA attention/KV nodes")


@checker("KV-TP-SHARDING")
def check_kv_tp(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    if spec is None or spec.attention == "mla":
        return
    for key, shards in ctx.ops.items():
        if ctx.types[shards[0]] != NodeType.ATTENTION:
            continue
        hs = ctx.tp_width(shards)
        if hs <= 1:
            continue
        layer = ctx.attr(shards[0], "layer")
        kv = spec.kv_shape(layer if isinstance(layer, int) and 0 <= layer < spec.num_layers else None)[0]
        expect = max(1, kv // hs)
        bad = [s for s in shards if ctx.attr(s, "kv_heads") not in (None, expect)]
        if bad:
            yield Finding(f"attention {key[0]} has {hs} head shards each stating kv_heads = "
                          f"{ctx.attr(bad[0], 'kv_heads')};"
                          f" under TP each rank holds {kv}/{hs} -> {expect} KV head(s) (sharded while "
                          "tp "
                          "<= kv heads, replicated beyond)", bad)
            return


@checker("KV-PP-BY-LAYER")
def check_kv_pp(ctx: Context) -> Iterator[Finding]:
    """A KV node lives in the stage that holds its layer (on that stage's GPUs)."""
    ranges: dict[tuple[Any, Any], list[tuple[int, int, int, frozenset[int]]]] = defaultdict(list)
    for n in ctx.of(NodeType.STAGE):
        lay = ctx.attr(n, "layers")
        r, ph, s = ctx.rps[n]
        if isinstance(lay, list) and len(lay) == 2 and s is not None:
            ranges[(r, ph)].append((lay[0], lay[1], s, ctx.devices[n]))
    if not ranges:
        return
    bad = []
    for k in ctx.of(NodeType.KV_CACHE):
        r, ph, lyr = ctx.key(k, "replica", "phase", "layer")
        if lyr is None:
            continue
        for lo, hi, _s, devs in ranges.get((r, ph), ()):
            if lo <= lyr < hi and devs and not ctx.devices[k] <= devs:
                bad.append(k)
    if bad:
        yield Finding(f"{len(bad)} KV cache node(s) sit outside the GPUs of the stage that owns their layer (e.g. "
                      f"{bad[0]}); under PP each stage holds the KV of its own layers only", bad)


@checker("KV-SP-BY-SEQUENCE")
def check_kv_sp(ctx: Context) -> Iterator[Finding]:
    _, k2a = _attention_kv(ctx)
    for k, attns in k2a.items():
        ranks = {ctx.attr(a, "sp_rank") for a in attns}
        if ranks == {None}:
            continue
        if len(attns) > 1 or ctx.attr(k, "sp_rank") != ctx.attr(attns[0], "sp_rank"):
            yield Finding(f"KV node {k} is tied to sequence shards {sorted(ranks, key=str)} of attention (its own "
                          "sp_rank "
                          f"{ctx.attr(k, 'sp_rank')}); under SP each sequence shard keeps the KV of its own tokens",
                          [k, *attns])
            return


@checker("KV-DP-PER-REPLICA")
def check_kv_dp(ctx: Context) -> Iterator[Finding]:
    count: dict[Any, int] = defaultdict(int)
    if ctx.options.disaggregated:  # prefill and decode pools differ in layout: compare replicas of one pool
        for k in ctx.of(NodeType.KV_CACHE):
            count[(ctx.inherited[k]["phase"], ctx.inherited[k]["replica"])] += 1
        for ph in ("prefill", "decode"):
            sizes = {c for (p, _), c in count.items() if p == ph}
            if len(sizes) > 1:
                yield Finding(f"{ph} replicas hold different numbers of KV cache nodes ({sorted(sizes)}); every "
                              "replica of a pool keeps a full KV cache for its own sequences", [])
        return
    for r in ctx.replicas:
        count[r] = 0
    for k in ctx.of(NodeType.KV_CACHE):
        count[ctx.inherited[k]["replica"]] += 1
    if len(count) > 1 and len(set(count.values())) > 1:
        yield Finding(f"KV cache nodes per replica differ ({dict(sorted(count.items(), key=str))}); every DP replica "
                      "keeps a full KV cache for its own sequences - DP does not divide a sequence's cache", [])


@checker("KV-BELONGS-TO-ATTENTION")
def check_kv_attention(ctx: Context) -> Iterator[Finding]:
    _, k2a = _attention_kv(ctx)
    orphans = [k for k in ctx.of(NodeType.KV_CACHE) if k not in k2a]
    if orphans:
        yield Finding(f"{len(orphans)} KVCacheUpdateNode(s) are not attached to any attention node (e.g. "
                      f"{orphans[0]}); "
                      "the KV of a layer is written and read by that layer's attention", orphans)
    off = [k for k, attns in k2a.items() if not ctx.devices[k] <= frozenset().union(*(ctx.devices[a] for a in attns))]
    if off:
        yield Finding(f"{len(off)} KV node(s) run on GPUs their attention does not use (e.g. {off[0]} on "
                      f"{sorted(ctx.devices[off[0]])[:8]}); the KV cache lives on the attention GPUs", off)


@fixer("GPU-EXCEEDS-CLUSTER")
def fix_exceeds(plan: dict[str, Any], ctx: Context) -> list[Change]:
    """Fewer DP replicas first (they only add throughput); then the smallest fitting layout of one replica."""
    assert ctx.plan is not None and ctx.layout is not None
    have, per = ctx.plan.hardware.num_gpus, ctx.layout.replica_gpus
    if ctx.layout.dp > 1 and per <= have:
        dp = have // per
        par = plan.setdefault("parallel", {})
        changes = [Change(rule_id="GPU-EXCEEDS-CLUSTER", message=f"lowered dp from {ctx.layout.dp} to {dp}: "
                          f"{have} GPUs hold {dp} replica(s) of {per} GPUs", field="plan.parallel.dp",
                          before=par.get("dp", 1), after=dp)]
        par["dp"] = dp
        for o in (plan.get("phases") or {}).values():
            if isinstance(o, dict):
                o.pop("dp", None)
        return changes
    return _resize(plan, ctx, "GPU-EXCEEDS-CLUSTER", f"the plan needed more than the {have} GPUs of the cluster")
