"""PP-*: pipeline stages form one linear chain of contiguous layer blocks inside each replica and phase."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import networkx as nx

from tools.core.dag import CONTROL_TYPES, NodeType
from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer, scope, set_degree


def _crossings(ctx: Context) -> dict[tuple[Any, Any], dict[tuple[int, int], list[str]]]:
    """(replica, phase) -> {(stage_u, stage_v): example nodes} over edges joining two stages (sync edges skipped)."""
    inh = ctx.inherited
    out: dict[tuple[Any, Any], dict[tuple[int, int], list[str]]] = defaultdict(lambda: defaultdict(list))
    for u, v, t in ctx.data_edges():
        if t == "sync":
            continue
        a, b = inh[u], inh[v]
        su, sv = a["stage"], b["stage"]
        if su is None or sv is None or su == sv or a["phase"] != b["phase"] or a["replica"] != b["replica"]:
            continue
        lst = out[(a["replica"], a["phase"])][(su, sv)]
        if len(lst) < 4:
            lst.extend((u, v))
    return out


def _stage_nodes(ctx: Context) -> dict[tuple[Any, Any], dict[int, list[str]]]:
    out: dict[tuple[Any, Any], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for n in ctx.of(NodeType.STAGE):
        r, ph, s = ctx.rps[n]
        out[(r, ph)][s if s is not None else -1].append(n)
    return out


@checker("PP-LINEAR-CHAIN")
def check_linear_chain(ctx: Context) -> Iterator[Finding]:
    if not ctx.acyclic:
        return
    cross = _crossings(ctx)
    for grp, stages in sorted(_stage_nodes(ctx).items(), key=str):
        idx = sorted(s for s in stages if s >= 0)
        if idx != list(range(len(idx))):
            yield Finding(f"{scope(grp[0], grp[1])}: stage indices {idx} are not 0..{len(idx) - 1}",
                          [n for ns in stages.values() for n in ns])
        pairs = cross.get(grp, {})
        for a, b in zip(idx, idx[1:], strict=False):
            if (a, b) not in pairs:
                yield Finding(f"{scope(grp[0], grp[1])}: nothing flows from stage {a} to stage {b}; stages must be "
                              "chained 0 -> 1 -> ... -> pp-1", stages[a] + stages[b],
                              hint="connect the last operator of each stage to the next stage (SendRecvNode)")
        for (a, b), ex in sorted(pairs.items()):
            if b < a:
                yield Finding(f"{scope(grp[0], grp[1])}: an edge runs backwards from stage {a} to stage {b}; the "
                              "stage chain only goes forward", ex)


@checker("PP-NO-PARALLEL-BRANCHES")
def check_no_parallel_branches(ctx: Context) -> Iterator[Finding]:
    for grp, stages in sorted(_stage_nodes(ctx).items(), key=str):
        for s, ns in stages.items():
            if len(ns) > 1:
                yield Finding(f"{scope(grp[0], grp[1])} has {len(ns)} PipelineStageNodes for stage {s}; stages form "
                              "one chain, never parallel branches", ns)
        all_stage = {n for ns in stages.values() for n in ns}
        feeders: dict[str, list[str]] = defaultdict(list)
        for n in all_stage:
            for p in ctx.pred[n]:
                if ctx.succ[p][n].get("type") != "sync":
                    feeders[p].append(n)
        for p, kids in sorted(feeders.items()):
            # a container edge to a stage that a sibling already leads to (phase -> stage 1 besides the chain
            # through stage 0) implies no parallel branch: only mutually unreachable stages are siblings
            kids = [k for k in kids if not any(o != k and nx.has_path(ctx.graph, o, k) for o in kids)]
            if len(kids) > 1:
                yield Finding(f"{p} feeds {len(kids)} pipeline stages at once ({', '.join(sorted(kids)[:3])}); stages "
                              "must not be siblings: stage k+1 follows stage k", [p, *kids],
                              hint="feed only stage 0 from the phase; chain the others")
    # joins: one operator fed from two different earlier stages
    inh = ctx.inherited
    for v in ctx.real_nodes:
        sv = inh[v]["stage"]
        froms = {inh[p]["stage"] for p in ctx.pred[v] if ctx.succ[p][v].get("type") != "sync"
                 and inh[p]["stage"] is not None and inh[p]["stage"] != sv and inh[p]["phase"] == inh[v]["phase"]}
        if len(froms) > 1:
            yield Finding(f"{v} merges the outputs of stages {sorted(froms)}; pipeline stages do not join", [v])


@checker("PP-CONTIGUOUS-LAYERS", needs="any")
def check_contiguous(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        split = ctx.plan.options.layer_split
        n_layers, pp = ctx.plan.spec.num_layers, ctx.layout.pp
        if split is not None:
            if len(split) != pp:
                yield Finding(f"options.layer_split has {len(split)} entries for pp = {pp} stages; it needs one per "
                              "stage", field="plan.options.layer_split", hint="give one layer count per stage")
            elif sum(split) != n_layers:
                yield Finding(f"options.layer_split sums to {sum(split)} but the model has {n_layers} layers; stages "
                              "must cover every layer exactly once", field="plan.options.layer_split")
            elif any(x <= 0 for x in split):
                yield Finding(f"options.layer_split {split} gives a stage no layers; each stage holds a non-empty "
                              "block", field="plan.options.layer_split")
        if ctx.from_plan:
            return
    if ctx.graph is None:
        return
    per_stage: dict[tuple[Any, Any], dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for n in ctx.real_nodes:
        r, ph, s, lyr = ctx.key(n, "replica", "phase", "stage", "layer")
        if s is not None and lyr is not None and ctx.types[n] == NodeType.ATTENTION:
            per_stage[(r, ph)][s].update(ctx.layer_span(n))
    total = ctx.spec.num_layers if ctx.spec is not None else None
    for grp, stages in sorted(per_stage.items(), key=str):
        expect = 0
        for s in sorted(stages):
            got = stages[s]
            lo, hi = min(got), max(got)
            if hi - lo + 1 != len(got) or lo != expect:
                yield Finding(f"{scope(grp[0], grp[1])}: stage {s} holds layers {sorted(got)[:6]}...; in chain order "
                              f"the stages must hold contiguous blocks starting at layer {expect} (no gap, overlap or "
                              "reordering)", _attn_nodes(ctx, grp, s))
                break
            expect = hi + 1
        else:
            if total is not None and expect != total:
                yield Finding(f"{scope(grp[0], grp[1])}: the stages cover layers 0-{expect - 1} of {total}; every "
                              "layer must be in exactly one stage", [])


    yield from _stage_ranges(ctx, per_stage)


def _stage_ranges(ctx: Context, per_stage: dict[tuple[Any, Any], dict[int, set[int]]]) -> Iterator[Finding]:
    """A stage node's ``layers`` range says which layers it holds: it must match the attention layers under it."""
    for n in ctx.of(NodeType.STAGE):
        rng = ctx.attr(n, "layers")
        r, ph, s = ctx.rps[n]
        got = per_stage.get((r, ph), {}).get(s)
        if not rng or len(rng) != 2 or not got:
            continue
        if set(range(rng[0], rng[1])) != got:
            yield Finding(f"stage {n} says it holds layers {rng[0]}-{rng[1] - 1} but its attention runs layers "
                          f"{min(got)}-{max(got)}" + (f" ({len(got)} layers)" if len(got) != max(got) - min(got) + 1
                                                       else ""), [n],
                          hint=f"set {n}.layers to [{min(got)}, {max(got) + 1}] or move the layers into the stage "
                               "that holds them")
            return


def _attn_nodes(ctx: Context, grp: tuple[Any, Any], s: int) -> list[str]:
    return [n for n in ctx.of(NodeType.STAGE) if ctx.rps[n] == (*grp, s)]


@fixer("PP-CONTIGUOUS-LAYERS")
def fix_contiguous(plan: dict[str, Any], ctx: Context) -> list[Change]:
    opts = plan.get("options") or {}
    if opts.get("layer_split") is None:
        return []
    before = opts.pop("layer_split")
    return [Change(rule_id="PP-CONTIGUOUS-LAYERS", message=f"removed options.layer_split {before}: it did not split "
                   "the model's layers into one non-empty block per stage; pdag now splits them evenly",
                   field="plan.options.layer_split", before=before, after=None)]


@checker("PP-NO-CROSS-STAGE-SHORTCUT")
def check_no_shortcut(ctx: Context) -> Iterator[Finding]:
    for grp, pairs in sorted(_crossings(ctx).items(), key=str):
        for (a, b), ex in sorted(pairs.items()):
            if b > a + 1:
                yield Finding(f"{scope(grp[0], grp[1])}: an edge jumps from stage {a} to stage {b}; data only moves "
                              "to the next stage through the stage boundary", ex,
                              hint="route the data through every stage in between")


@checker("PP-DEGREE-LE-LAYERS", needs="any")
def check_degree_le_layers(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        n = ctx.plan.spec.num_layers
        for ph, pl in ctx.layout.phases.items():
            if pl.pp > n:
                yield Finding(f"{ph}: pp = {pl.pp} exceeds the model's {n} layers; each stage needs at least one layer",
                              field=field_of(ph, "pp", ctx.plan), hint=f"use pp <= {n}")
                return
        return
    if ctx.graph is None or ctx.spec is None:
        return
    for grp, stages in sorted(_stage_nodes(ctx).items(), key=str):
        if len(stages) > ctx.spec.num_layers:
            yield Finding(f"{scope(grp[0], grp[1])} has {len(stages)} stages for {ctx.spec.num_layers} layers",
                          [n for ns in stages.values() for n in ns])


@fixer("PP-DEGREE-LE-LAYERS")
def fix_degree_le_layers(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.plan is not None
    n = ctx.plan.spec.num_layers
    changes = []
    par = plan.setdefault("parallel", {})
    if par.get("pp", 1) > n:
        changes.append(Change(rule_id="PP-DEGREE-LE-LAYERS", message=f"lowered pp from {par['pp']} to {n}, the "
                              "number of layers", field="plan.parallel.pp", before=par["pp"], after=n))
        par["pp"] = n
    for ph, o in (plan.get("phases") or {}).items():
        if isinstance(o, dict) and (o.get("pp") or 0) > n:
            changes.append(Change(rule_id="PP-DEGREE-LE-LAYERS", message=f"lowered phases.{ph}.pp to {n}",
                                  field=f"plan.phases.{ph}.pp", before=o["pp"], after=n))
            o["pp"] = n
    return changes


@checker("PP-NOT-REPLICATION")
def check_not_replication(ctx: Context) -> Iterator[Finding]:
    where: dict[tuple[Any, Any, int], set[int]] = defaultdict(set)
    ex: dict[tuple[Any, Any, int], list[str]] = defaultdict(list)
    inh = ctx.inherited
    for n in ctx.real_nodes:
        if ctx.types[n] not in (NodeType.ATTENTION, NodeType.FFN, NodeType.EXPERT):
            continue
        v = inh[n]
        r, ph, s, lyr = v["replica"], v["phase"], v["stage"], v["layer"]
        if s is None or lyr is None:
            continue
        k = (r, ph, lyr)
        if s not in where[k]:
            where[k].add(s)
            ex[k].append(n)
    reps = [k for k, stages in sorted(where.items(), key=str) if len(stages) > 1]
    if reps:
        k = reps[0]
        involved = {(r, ph, s) for (r, ph, _lyr) in reps for s in where[(r, ph, _lyr)]}
        stage_nodes = [n for n in ctx.of(NodeType.STAGE) if ctx.rps[n] in involved]
        copied = sorted({lyr for (r, ph, lyr) in reps if (r, ph) == k[:2]})
        yield Finding(f"{scope(k[0], k[1])}: layer {k[2]} has weights in stages {sorted(where[k])}; each stage "
                      "holds only its own layers, stages are not copies of one another",
                      stage_nodes or ex[k],
                      hint=f"give the later stage(s) the next layers instead of layers {copied[0]}-{copied[-1]} again "
                           f"(the {len(copied)} layer(s) drawn twice)")


@checker("PP-OUTER-STRUCTURE")
def check_outer_structure(ctx: Context) -> Iterator[Finding]:
    """Stage nodes never sit under an operator; operators stay on the GPUs of their own stage."""
    for n in ctx.of(NodeType.STAGE):
        bad = [p for p in ctx.pred[n] if ctx.types[p] not in CONTROL_TYPES and ctx.types[p] != NodeType.SEND_RECV
               and ctx.succ[p][n].get("type") != "sync" and ctx.attr(p, "layer") is not None
               and ctx.types[p] not in (NodeType.ALL_REDUCE, NodeType.ALL_TO_ALL, NodeType.ALL_GATHER)]
        if bad:
            yield Finding(f"PipelineStageNode {n} sits under the operator {bad[0]}; PP is the outer structure and "
                          "operators live inside stages", [n, *bad])
    stage_devs: dict[tuple[Any, Any, Any], frozenset[int]] = {}
    for n in ctx.of(NodeType.STAGE):
        stage_devs[ctx.rps[n]] = ctx.devices[n]
    if ctx.from_plan or not stage_devs:
        return
    skip = {NodeType.SEND_RECV, NodeType.KV_TRANSFER, NodeType.EXPERT}
    bad_nodes = []
    for n in ctx.real_nodes:
        if ctx.types[n] in skip:
            continue
        sd = stage_devs.get(ctx.rps[n])
        if sd and not ctx.devices[n] <= sd:
            bad_nodes.append(n)
    if bad_nodes:
        n = bad_nodes[0]
        yield Finding(f"{len(bad_nodes)} operator node(s) run outside the GPUs of their pipeline stage (e.g. {n} on "
                      f"{sorted(ctx.devices[n])[:8]}); an operator's shards sit inside exactly one stage", bad_nodes)


@checker("PP-MEMORY-DRIVEN", needs="plan")
def check_memory_driven(ctx: Context) -> Iterator[Finding]:
    from tools.rules.memory import fits_with

    assert ctx.plan is not None and ctx.layout is not None
    if ctx.plan.objective != "latency" or ctx.layout.pp <= 1:
        return
    if fits_with(ctx.plan, pp=1):
        yield Finding(f"objective is latency and pp = {ctx.layout.pp}, but the model fits with pp = 1 on the same "
                      f"{ctx.layout.group_width}-GPU stage group; PP adds stage hops and does not shorten a request",
                      field="plan.parallel.pp", hint="set pp to 1")


@fixer("PP-MEMORY-DRIVEN")
def fix_memory_driven(plan: dict[str, Any], ctx: Context) -> list[Change]:
    changes = set_degree(plan, "pp", 1, "PP-MEMORY-DRIVEN",
                         "the model fits without pipelining and objective latency gains nothing from it",
                         severity="warning")
    opts = plan.get("options") or {}
    if opts.get("layer_split") is not None:
        changes.append(Change(rule_id="PP-MEMORY-DRIVEN", severity="warning", message="removed options.layer_split "
                              "(one stage now)", field="plan.options.layer_split", before=opts.pop("layer_split")))
    return changes


@checker("PP-DECODE-BUBBLES", needs="plan")
def check_decode_bubbles(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    pp = ctx.layout.phases["decode"].pp
    batch = ctx.plan.workload.batch_size
    if pp > 1 and batch < pp:
        yield Finding(f"decode runs pp = {pp} stages with batch_size = {batch} sequence(s) in flight: at most "
                      f"{batch} of "
                      f"{pp} stages work at any moment", field="plan.workload.batch_size",
                      hint=f"batch at least {pp} sequences per replica, or use fewer stages")


@checker("PP-LAYER-ORDER")
def check_layer_order(ctx: Context) -> Iterator[Finding]:
    """Inside one stage, data flows from layer l to layer l or a later one: never back to an earlier layer."""
    bad = []
    for u, v, t in ctx.data_edges():
        if t != "data" or ctx.types[v] == NodeType.KV_CACHE:  # one stage's KV node serves all its layers
            continue
        a, b = ctx.inherited[u], ctx.inherited[v]
        if a["layer"] is None or b["layer"] is None or (a["replica"], a["phase"], a["stage"]) != \
                (b["replica"], b["phase"], b["stage"]):
            continue
        if b["layer"] < a["layer"]:
            bad.append((u, v, a["layer"], b["layer"]))
    if bad:
        u, v, lu, lv = bad[0]
        yield Finding(f"{len(bad)} edge(s) run back to an earlier layer (e.g. {u} of layer {lu} feeds {v} of layer "
                      f"{lv}); inside a stage layers run in increasing order", [u, v],
                      hint=f"draw layer {lv} before layer {lu}: reconnect its entry after layer {lv - 1} "
                           f"and its exit to layer {lv + 1}, or fix the layer labels")


@checker("PP-SENDRECV-CONSECUTIVE")
def check_sendrecv(ctx: Context) -> Iterator[Finding]:
    """A stage hand-off (SendRecvNode) goes from stage s to stage s+1 of the same branch and runs on the GPUs of
    both: the sender's last operator and the receiving stage."""
    for n in ctx.of(NodeType.SEND_RECV):
        ins = [p for p, a in ctx.pred[n].items() if a.get("type") != "sync" and ctx.types[p] not in CONTROL_TYPES]
        outs = [v for v, a in ctx.succ[n].items() if a.get("type") != "sync"]
        src = {ctx.inherited[p]["stage"] for p in ins} - {None}
        dst = {ctx.inherited[v]["stage"] for v in outs} - {None}
        if len(src) == 1 and dst:
            s = next(iter(src))
            if dst != {s + 1}:
                yield Finding(f"SendRecv {n} hands stage {s} to stage(s) {sorted(dst)}; a stage hands off to the next "
                              f"one ({s + 1}) only", [n, *outs[:2]], hint=f"connect {n} to stage {s + 1}")
                return
        recv = frozenset().union(*(ctx.devices[v] for v in first_real(ctx, outs)))
        missing = recv - ctx.devices[n]
        if missing:
            yield Finding(f"SendRecv {n} runs on GPUs {sorted(ctx.devices[n])[:8]} but the stage it feeds starts on "
                          f"{sorted(recv)[:8]}; a stage transfer lists the sending and the receiving GPUs", [n],
                          hint=f"set {n}.devices to {sorted(ctx.devices[n] | recv)[:16]}")
            return


def first_real(ctx: Context, nodes: list[str]) -> list[str]:
    """The first operators reached from ``nodes`` through containers (a stage node stands for what it opens
    with): the GPUs a transfer delivers to."""
    out: list[str] = []
    seen: set[str] = set()
    todo = list(nodes)
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if ctx.types[v] in CONTROL_TYPES:
            todo.extend(w for w, a in ctx.succ[v].items() if a.get("type") != "sync")
        else:
            out.append(v)
    return out


_WEIGHTED = (NodeType.EMBEDDING, NodeType.NORM, NodeType.ATTENTION, NodeType.FFN, NodeType.ROUTER, NodeType.EXPERT,
             NodeType.LINEAR, NodeType.LM_HEAD)


@checker("PP-STAGES-OWN-GPUS", needs="graph")
def check_stages_own_gpus(ctx: Context) -> Iterator[Finding]:
    """A stage is the set of GPUs that holds its layers: two stages of one replica and phase computing on the
    same GPU are one stage drawn twice (a SendRecv listing other GPUs does not move the work there)."""
    where: dict[tuple[Any, Any], dict[Any, set[int]]] = defaultdict(lambda: defaultdict(set))
    for n in ctx.real_nodes:
        v = ctx.inherited[n]
        if ctx.types[n] in _WEIGHTED and v["stage"] is not None:
            where[(v["replica"], v["phase"])][v["stage"]] |= set(ctx.devices[n])
    for (r, ph), stages in sorted(where.items(), key=str):
        items = sorted(stages.items(), key=str)
        for i, (s, ds) in enumerate(items):
            for s2, ds2 in items[i + 1:]:
                if ds & ds2:
                    nodes = [n for n in ctx.of(NodeType.STAGE) if ctx.rps[n][:2] == (r, ph)]
                    yield Finding(f"{scope(r, ph)}: stages {s} and {s2} both compute on GPUs {sorted(ds & ds2)[:8]}; "
                                  "each pipeline stage runs its layers on its own GPUs", nodes,
                                  hint="give each stage its own GPUs (stage s of a replica on replica*pp*W + s*W + "
                                       "local), or drop PP")
                    return
