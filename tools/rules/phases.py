"""PHASE-* and DECODE-*: separate prefill and decode branches; decode is one token step fed by the KV cache."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import networkx as nx

from tools.core.dag import NodeType
from tools.rules.registry import Change, Context, Finding, checker, fixer, scope

SHARED = ("tp", "pp", "ep")
TRAINING_WORDS = ("backward", "grad", "optimizer", "loss", "training")
TRAINING = re.compile(r"backward|gradient|grad_|optimizer|loss|training", re.IGNORECASE)


def _phase(ctx: Context, n: str) -> Any:
    return ctx.inherited[n]["phase"]


@checker("PHASE-PREFILL-DECODE-SPLIT")
def check_split(ctx: Context) -> Iterator[Finding]:
    parents = ctx.of(NodeType.REPLICA) or ctx.of(NodeType.REQUEST)
    disagg = ctx.options.disaggregated  # opted in: p<i> hold only prefill, d<j> only decode
    pools: set[str] = set()
    for r in parents:
        kids = [k for k in ctx.succ[r] if ctx.types[k] == NodeType.PHASE]
        got = sorted(str(_phase(ctx, k)) for k in kids)
        if disagg and got in (["prefill"], ["decode"]) and ctx.types[r] == NodeType.REPLICA:
            pools.add(got[0])
            continue
        if got != ["decode", "prefill"]:
            yield Finding(f"{ctx.types[r]} {r} has phase branches {got or 'none'}; every replica has exactly one "
                          "Prefill "
                          "and one Decode PhaseNode, each with its own sub-DAG", [r, *kids],
                          hint="split the replica into a prefill branch and a decode branch")
    if disagg and pools and pools != {"prefill", "decode"}:
        yield Finding(f"the disaggregated DAG has only {sorted(pools)[0]} replicas; it needs a prefill pool and a "
                      "decode pool", [r for r in parents if ctx.types[r] == NodeType.REPLICA][:5])
    ph = ctx.phase
    bad = [(u, v) for u, v, t in ctx.edge_list if t in ("data", "pipeline") and ph[u] != ph[v]
           and {ph[u], ph[v]} == {"prefill", "decode"}]
    if bad:
        u, v = bad[0]
        yield Finding(f"{len(bad)} data/pipeline edge(s) cross from one phase to the other (e.g. {u} -> {v}); the only "
                      "links between prefill and decode are the KV cache (kv edges) and the start signal (sync)",
                      [u, v])


def _differs(ctx: Context) -> list[str]:
    assert ctx.layout is not None
    pre, dec = ctx.layout.phases["prefill"], ctx.layout.phases["decode"]
    return [k for k in SHARED if getattr(pre, k) != getattr(dec, k)]


@checker("PHASE-SHARED-WEIGHT-LAYOUT", needs="any")
def check_shared_layout(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        if ctx.plan.options.disaggregated:  # each pool holds its own weights (DISAGG-OPT-IN)
            return
        for k in _differs(ctx):
            pre, dec = getattr(ctx.layout.phases["prefill"], k), getattr(ctx.layout.phases["decode"], k)
            yield Finding(f"{k} is {pre} in prefill but {dec} in decode; the weights are resident once, so tp, pp and "
                          "ep are equal in both phases (only sp may differ)", field=f"plan.phases.decode.{k}",
                          hint=f"use one {k} for both phases")
        return
    if ctx.graph is None:
        return
    widths: dict[str, dict[str, int]] = defaultdict(dict)
    for _key, shards in ctx.ops.items():
        t = ctx.types[shards[0]]
        ph = _phase(ctx, shards[0])
        if t == NodeType.FFN and ph:
            widths[ph]["tp"] = max(widths[ph].get("tp", 1), ctx.tp_width(shards))
    stages: dict[str, set[Any]] = defaultdict(set)
    for n in ctx.of(NodeType.STAGE):
        stages[str(_phase(ctx, n))].add(ctx.inherited[n]["stage"])
    for ph in ("prefill", "decode"):
        widths[ph]["pp"] = len(stages.get(ph, ())) or 1
    if widths.get("prefill") and widths.get("decode"):
        for k in ("tp", "pp"):
            a, b = widths["prefill"].get(k, 1), widths["decode"].get(k, 1)
            if a != b:
                yield Finding(f"the DAG uses {k} {a} in prefill but {b} in decode; the weight layout is shared", [])


@fixer("PHASE-SHARED-WEIGHT-LAYOUT")
def fix_shared_layout(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.layout is not None
    changes = []
    par = plan.setdefault("parallel", {})
    for k in _differs(ctx):
        val = max(getattr(ctx.layout.phases[p], k) for p in ("prefill", "decode"))
        changes.append(Change(rule_id="PHASE-SHARED-WEIGHT-LAYOUT", message=f"set {k} = {val} for both phases (the "
                              "larger of the two, so the weights still fit): they share one weight layout",
                              field=f"plan.parallel.{k}", before=par.get(k, 1), after=val))
        par[k] = val
        for o in (plan.get("phases") or {}).values():
            if isinstance(o, dict):
                o.pop(k, None)
    return changes


@checker("PHASE-INFERENCE-ONLY")
def check_inference_only(ctx: Context) -> Iterator[Finding]:
    texts = {n: " ".join((n, a.get("op") or "", a.get("role") or "", *map(str, (a.get("meta") or {}).keys())))
             for n, a in ctx.nattr.items()}
    blob = "\n".join(texts.values()).lower()
    if any(w in blob for w in TRAINING_WORDS) and TRAINING.search(blob):  # one scan; culprits only on a match
        bad = [n for n, t in texts.items() if TRAINING.search(t)]
        yield Finding(f"{len(bad)} node(s) describe training (e.g. {bad[0]}: backward pass, gradients, optimizer); "
                      "pdag "
                      "plans inference only (prefill + decode)", bad, hint="remove the training constructs")
        return
    if len(ctx.of(NodeType.REPLICA)) < 2:
        return
    rep = ctx.inherited
    for n in ctx.real_nodes:
        if not ctx.is_comm(n):
            continue
        rs = {rep[p]["replica"] for p in ctx.pred[n]} - {None}
        if len(rs) > 1:
            yield Finding(f"collective {n} joins DP replicas {sorted(rs, key=str)}: a gradient-style all-reduce across "
                          "replicas belongs to training; inference replicas never communicate", [n])
            return


def _decode_steps(ctx: Context) -> dict[Any, list[str]]:
    out: dict[Any, list[str]] = defaultdict(list)
    for n in ctx.of(NodeType.DECODE_STEP):
        out[ctx.inherited[n]["replica"]].append(n)
    return out


@checker("DECODE-SINGLE-TOKEN")
def check_single_token(ctx: Context) -> Iterator[Finding]:
    steps = _decode_steps(ctx)
    for ph in ctx.of(NodeType.PHASE):
        if _phase(ctx, ph) == "decode" and not steps.get(ctx.inherited[ph]["replica"]):
            yield Finding(f"the decode branch {ph} has no DecodeStepNode; decode is drawn as one token step "
                          "(repeated output_len times as a count)", [ph], hint="add a DecodeStepNode under the phase")
    ops: dict[Any, set[Any]] = defaultdict(set)
    nodes: dict[Any, list[str]] = defaultdict(list)
    for a in ctx.of(NodeType.ATTENTION):
        r, ph, lyr = ctx.rpl[a]
        if ph == "decode" and lyr is not None:
            # one logical operator per layer (per attention-DP group, which the ADP rules judge): shards share
            # `op`, or else differ by their (tp, sp) rank
            k = (r, lyr, ctx.attr(a, "attn_group"))
            ops[k].add(ctx.attr(a, "op") or ("rank", ctx.attr(a, "tp_rank"), ctx.attr(a, "sp_rank")))
            nodes[k].append(a)
    for (r, lyr, g), v in sorted(ops.items(), key=str):
        named = {x for x in v if isinstance(x, str)}
        unnamed = [a for a in nodes[(r, lyr, g)] if ctx.attr(a, "op") is None]
        if len(named) > 1 or len(unnamed) > len(v - named):
            yield Finding(f"{scope(r, 'decode')} runs layer {lyr} more than once; the decode branch is the execution "
                          "of a single token (repeated steps are a count, not more branches)", nodes[(r, lyr, g)])
            return


def _ordered(ctx: Context, steps: list[str]) -> list[str]:
    def tok(n: str) -> Any:
        t = (ctx.attr(n, "meta") or {}).get("token")
        return t if isinstance(t, int) else None

    if all(tok(s) is not None for s in steps):
        return sorted(steps, key=tok)  # type: ignore[arg-type,return-value]
    pos = {n: i for i, n in enumerate(ctx.topo)}
    return sorted(steps, key=pos.__getitem__)


@checker("DECODE-NO-CROSS-TOKEN-PARALLELISM")
def check_no_cross_token(ctx: Context) -> Iterator[Finding]:
    if not ctx.acyclic:
        return
    for r, steps in sorted(_decode_steps(ctx).items(), key=str):
        if len(steps) < 2:
            continue
        steps = _ordered(ctx, steps)[:64]
        for a, b in zip(steps, steps[1:], strict=False):
            if not nx.has_path(ctx.g, a, b):
                yield Finding(f"{scope(r)}: decode steps {a} and {b} do not depend on each other, so two tokens of "
                              "one "
                              "sequence would be computed in parallel; token t+1 needs token t", [a, b],
                              hint="chain the steps (or keep one step and count it)")
                return


@checker("DECODE-TEMPORAL-ORDER")
def check_temporal(ctx: Context) -> Iterator[Finding]:
    for _r, steps in sorted(_decode_steps(ctx).items(), key=str):
        toks = {s: (ctx.attr(s, "meta") or {}).get("token") for s in steps}
        for s in steps:
            for v in ctx.succ[s]:
                if v in toks and isinstance(toks[s], int) and isinstance(toks[v], int) and toks[v] <= toks[s]:
                    yield Finding(f"decode step {s} (token {toks[s]}) feeds step {v} (token {toks[v]}); steps run in "
                                  "token order t -> t+1", [s, v])
                    return
    decode_nodes = [n for n in ctx.g if _phase(ctx, n) == "decode"]
    if not decode_nodes or not any(_phase(ctx, n) == "prefill" for n in ctx.g):
        return
    fed = any(_phase(ctx, u) == "prefill" and _phase(ctx, v) == "decode" for u, v, t in ctx.data_edges()
              if t in ("kv", "sync"))
    if not fed:
        yield Finding("nothing links prefill to decode: decode would start before the prefill's KV cache exists; "
                      "decode depends on prefill through kv (and sync) edges", ctx.of(NodeType.DECODE_STEP),
                      hint="add kv edges from the prefill KVCacheUpdateNodes to the decode ones")


@checker("DECODE-KV-DEPENDENCY")
def check_kv_dependency(ctx: Context) -> Iterator[Finding]:
    def has_kv_in(n: str) -> bool:
        return any(a.get("type") == "kv" for a in ctx.pred[n].values())

    attn = [a for a in ctx.of(NodeType.ATTENTION) if _phase(ctx, a) == "decode" and not has_kv_in(a)]
    if attn:
        yield Finding(f"{len(attn)} decode attention node(s) have no incoming kv edge (e.g. {attn[0]}); each decode "
                      "attention reads the KV cache through an explicit kv edge", attn,
                      hint="add KVCacheUpdateNode -> AttentionNode kv edges")
    kv = [k for k in ctx.of(NodeType.KV_CACHE) if _phase(ctx, k) == "decode" and not has_kv_in(k)]
    if kv:
        yield Finding(f"{len(kv)} decode KV cache node(s) receive no kv edge from the prefill cache (e.g. {kv[0]}); "
                      "the "
                      "decode cache continues the one prefill built", kv)
    pools = ctx.options.disaggregated or any(ctx.attr(t, "role") != "kv_reshard" for t in ctx.of(NodeType.KV_TRANSFER))
    if not pools and any(_phase(ctx, k) == "decode" for k in ctx.of(NodeType.KV_CACHE)):
        # aggregated: every replica's decode continues its own prefill cache (a prefill pool may hold
        # replicas no decode replica reads from)
        lost = [k for k in ctx.of(NodeType.KV_CACHE) if _phase(ctx, k) == "prefill"
                and not any(a.get("type") == "kv" for a in ctx.succ[k].values())]
        if lost:
            yield Finding(f"{len(lost)} prefill KV cache shard(s) are never handed to decode (e.g. {lost[0]}); the "
                          "decode cache is built from every prefill shard of its layer", lost,
                          hint=f"add a kv edge from {lost[0]} to the decode KV cache (or the KV re-shard / "
                               "transfer node) of its layer")


@checker("DECODE-FIRST-TOKEN-FROM-PREFILL")
def check_first_token(ctx: Context) -> Iterator[Finding]:
    """Seed 001 section 6.1 at the prefill -> decode hand-off: the prefill's LM head produces the first token,
    so the first decode step depends on it (a sync or data edge), not only on the KV cache (see the catalog's
    CONFLICT-PREFILL-DECODE-HANDOFF)."""
    steps = [s for s in ctx.of(NodeType.DECODE_STEP) if _phase(ctx, s) != "prefill"]
    if not steps or not any(_phase(ctx, n) == "prefill" for n in ctx.of(NodeType.LM_HEAD)):
        return
    def token_out(p: str) -> bool:
        """The prefill's LM head, the gather of its vocabulary slices (vocab-parallel LM head), or a step after it
        that ends the prefill (a drafted sampler): what the prefill's first token comes out of."""
        if _phase(ctx, p) != "prefill":
            return False
        if ctx.types[p] == NodeType.LM_HEAD or (
                ctx.types[p] == NodeType.ALL_GATHER and any(ctx.types[q] == NodeType.LM_HEAD for q in ctx.pred[p])):
            return True
        ends_prefill = not any(_phase(ctx, q) == "prefill" and ctx.types[q] != NodeType.KV_TRANSFER
                               for q in ctx.succ[p])  # a transfer carries the cache out; it is no prefill step
        return ends_prefill and any(ctx.types[a] == NodeType.LM_HEAD and _phase(ctx, a) == "prefill"
                                    for a in nx.ancestors(ctx.g, p))

    first = [s for s in steps if not any(ctx.types[p] == NodeType.DECODE_STEP for p in ctx.pred[s])]
    bad = [s for s in first if not any(token_out(p) for p in ctx.pred[s])]
    if bad:
        heads = [n for n in ctx.of(NodeType.LM_HEAD) if _phase(ctx, n) == "prefill"]
        yield Finding(f"{len(bad)} first decode step(s) do not wait for the prefill's first token (e.g. {bad[0]}); "
                      "token t+1 depends on token t, and prefill's LM head produces the first one", bad,
                      hint=f"add a sync edge {heads[0]} -> {bad[0]}")
