"""SP-*: sequence parallelism splits tokens inside attention only, with TP, joined by an explicit gather."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tools.core.dag import CONTROL_TYPES, NodeType
from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer, param

SP_OK_TYPES = {NodeType.ATTENTION, NodeType.KV_CACHE}
SP_SYNC = {NodeType.ALL_GATHER, NodeType.REDUCE_SCATTER}


def _sp_nodes(ctx: Context) -> list[str]:
    return [n for n, a in ctx.nattr.items()
            if a.get("sp_rank") is not None or "seq_shard" in (a.get("meta") or {})]


@checker("SP-ATTENTION-ONLY")
def check_attention_only(ctx: Context) -> Iterator[Finding]:
    bad = [n for n in _sp_nodes(ctx) if ctx.types[n] not in SP_OK_TYPES | CONTROL_TYPES]
    if bad:
        yield Finding(f"{len(bad)} {ctx.types[bad[0]]}(s) are sequence-sharded (e.g. {bad[0]}); SP splits tokens "
                      "inside attention only (norms, FFN, MoE and embeddings run unsplit)", bad)


@checker("SP-NOT-STANDALONE")
def check_not_standalone(ctx: Context) -> Iterator[Finding]:
    nodes = _sp_nodes(ctx)
    ctrl = [n for n in nodes if ctx.types[n] in CONTROL_TYPES]
    if ctrl:
        yield Finding(f"{ctx.types[ctrl[0]]} {ctrl[0]} is a sequence shard; SP is never its own level of the DAG (not "
                      "at the root, not a stage split)", ctrl)
    loose = [n for n in nodes if n not in ctrl and any(ctx.types[p] in CONTROL_TYPES - {NodeType.MOE}
                                                       for p in ctx.pred[n])]
    if loose:
        yield Finding(f"sequence shard {loose[0]} hangs directly under a container node; SP shards live inside an "
                      "attention operator (after its norm)", loose)


@checker("SP-EXPLICIT-SYNC")
def check_explicit_sync(ctx: Context) -> Iterator[Finding]:
    for _key, shards in sorted(ctx.ops.items(), key=lambda kv: str(kv[0])):
        if ctx.sp_width(shards) <= 1:
            continue
        members = set(shards)
        for s in shards:
            for v in ctx.succ[s]:
                if v in members or ctx.types[v] == NodeType.KV_CACHE or ctx.succ[s][v].get("type") == "sync":
                    continue
                if ctx.types[v] not in SP_SYNC:
                    yield Finding(f"sequence shard {s} feeds the {ctx.types[v]} {v} directly; SP shards are joined by "
                                  "an explicit AllGatherNode (or ReduceScatterNode) before any other consumer",
                                  [s, v], hint="insert an AllGatherNode over the sequence shards")
                    return


@checker("SP-DECODE-INEFFECTIVE", needs="any")
def check_decode(ctx: Context) -> Iterator[Finding]:
    if ctx.plan is not None and ctx.layout is not None:
        sp = ctx.layout.phases["decode"].sp
        if sp > 1:
            yield Finding(f"decode runs sp = {sp}: a single-token step has no sequence to split (only the KV read), so "
                          "SP costs communication for nothing", field=field_of("decode", "sp", ctx.plan),
                          hint="set phases.decode.sp = 1 (keep SP for prefill)")
            return
    if ctx.graph is None:
        return
    # the drawing is judged too: a DAG may shard decode by sequence whatever its embedded plan says
    bad = [n for n in ctx.of(NodeType.ATTENTION) if ctx.attr(n, "sp_rank") is not None
           and ctx.inherited[n]["phase"] == "decode"]
    if bad:
        yield Finding("decode attention is sequence-sharded; SP is largely ineffective for a single-token step"
                      + (" (the embedded plan says decode sp = 1, the drawing does not)" if ctx.plan is not None
                         else ""), bad)


@fixer("SP-DECODE-INEFFECTIVE")
def fix_decode(plan: dict[str, Any], ctx: Context) -> list[Change]:
    phases = plan.setdefault("phases", {})
    dec = phases.get("decode") or {}
    wide = (plan.get("parallel") or {}).get("sp", 1)
    before = dec.get("sp", wide)
    dec["sp"] = 1
    if wide == 1:  # the plan-wide value already: no override left behind
        del dec["sp"]
    phases["decode"] = dec
    if not dec:
        del phases["decode"]
    if not phases:
        del plan["phases"]
    return [Change(rule_id="SP-DECODE-INEFFECTIVE", severity="warning", message=f"set decode sp from {before} to 1: "
                   "a single-token decode step has no sequence to split", field="plan.phases.decode.sp",
                   before=before, after=1)]


@checker("SP-LONG-CONTEXT-ONLY", needs="plan")
def check_long_context(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    sp = ctx.layout.phases["prefill"].sp
    n = ctx.plan.workload.input_len
    long_context = int(param("SP-LONG-CONTEXT-ONLY", "min_input_len"))
    if sp > 1 and n < long_context:
        yield Finding(f"prefill sp = {sp} with input_len = {n} < {long_context}: for short prompts the sequence "
                      "communication outweighs the attention compute it saves",
                      field=field_of("prefill", "sp", ctx.plan),
                      hint="use SP for long contexts only; TP shards short prompts better")


@checker("SP-WITH-TP", needs="plan")
def check_with_tp(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    for ph, pl in ctx.layout.phases.items():
        if pl.sp > 1 and pl.tp % pl.sp and pl.sp % pl.tp:
            yield Finding(f"{ph}: sp = {pl.sp} and tp = {pl.tp} do not divide one another; attention runs on "
                          "max(tp, sp) GPUs as max(tp, sp)/sp head shards x sp sequence shards",
                          field=field_of(ph, "sp", ctx.plan),
                          hint=f"use an sp that divides {pl.tp} or a multiple of it")
            return


@fixer("SP-WITH-TP")
def fix_with_tp(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.layout is not None
    changes = []
    for ph, pl in ctx.layout.phases.items():
        if pl.sp > 1 and pl.tp % pl.sp and pl.sp % pl.tp:
            new = max(s for s in range(1, pl.sp + 1) if pl.tp % s == 0)
            path = field_of(ph, "sp", ctx.plan)
            tgt = plan.setdefault("phases", {}).setdefault(ph, {}) if "phases" in path else plan["parallel"]
            tgt["sp"] = new
            changes.append(Change(rule_id="SP-WITH-TP", message=f"set {ph} sp from {pl.sp} to {new}, the largest "
                                  f"divisor of tp {pl.tp} below it", field=path, before=pl.sp, after=new))
            if "phases" not in path:
                break
    return changes
