"""DCP-*: decode context parallel (vLLM's ``-dcp``), KV striped by token over ranks of the decode TP group.

Not the seeds' SP: it adds no GPUs and splits no step across tokens.  The TP ranks that would each hold a copy of
the same KV (an MLA latent, or a GQA KV head replicated beyond the KV heads) hold one token slice of it each,
and the partial attention outputs are merged every decode step (CONFLICT-DECODE-CONTEXT-PARALLEL says why it
needs no opt-in).  It is written once, as ``parallel.dcp`` (vLLM's one server flag), and applies to decode only.
vLLM bounds the degree by that replication: ``tp % dcp == 0`` and ``dcp <= tp / kv_heads``
(https://docs.vllm.ai/en/latest/serving/context_parallel_deployment.html).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tools.rules.registry import Change, Context, Finding, checker, field_of, fixer


def _kv_copies(ctx: Context) -> int:
    """TP ranks holding the same KV in decode: the head shards for an MLA latent, shards per KV head for GQA."""
    assert ctx.plan is not None and ctx.layout is not None
    spec = ctx.plan.spec
    shards = ctx.layout.phases["decode"].head_shards
    heads = 1 if spec.attention == "mla" else spec.num_kv_heads
    return max(1, shards // heads)


def _largest_divisor(n: int, cap: int) -> int:
    return max(d for d in range(1, max(1, min(n, cap)) + 1) if n % d == 0)


@checker("DCP-DIVIDES-TP", needs="plan")
def check_divides_tp(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    if pl.dcp > 1 and pl.tp % pl.dcp:
        yield Finding(f"decode dcp = {pl.dcp} does not divide decode tp = {pl.tp}; decode context parallel splits "
                      "the TP group into groups of dcp ranks and adds no GPUs",
                      field="plan.parallel.dcp", hint=f"use a dcp that divides {pl.tp}")


@fixer("DCP-DIVIDES-TP")
def fix_divides_tp(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.plan is not None and ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    return _set_dcp(plan, ctx, "DCP-DIVIDES-TP", _largest_divisor(pl.tp, pl.dcp), f"the largest divisor of tp {pl.tp}")


@checker("DCP-WITHIN-KV-REPLICATION", needs="plan")
def check_within_replication(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    if pl.dcp <= 1 or pl.tp % pl.dcp:
        return
    copies = _kv_copies(ctx)
    if pl.dcp > copies:
        spec = ctx.plan.spec
        what = "its MLA latent" if spec.attention == "mla" else f"each of its {spec.num_kv_heads} KV heads"
        yield Finding(f"decode dcp = {pl.dcp} exceeds the {copies} TP rank(s) that hold {what} at tp = {pl.tp}; "
                      "decode context parallel only stripes KV that TP replicates (vLLM bounds dcp by tp / kv heads)",
                      field="plan.parallel.dcp",
                      hint=f"use dcp <= {copies}, or a larger tp first")


@fixer("DCP-WITHIN-KV-REPLICATION")
def fix_within_replication(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.plan is not None and ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    copies = _kv_copies(ctx)
    return _set_dcp(plan, ctx, "DCP-WITHIN-KV-REPLICATION", _largest_divisor(pl.tp, copies),
                    f"the TP ranks sharing one KV copy ({copies})")


@checker("DCP-NO-DECODE-SP", needs="plan")
def check_no_decode_sp(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None and ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    if pl.dcp > 1 and pl.sp > 1:
        yield Finding(f"decode runs sp = {pl.sp} and dcp = {pl.dcp}: both split the decode KV by sequence; decode "
                      "context parallel stripes it inside the TP group, so decode SP has nothing left to split",
                      field=field_of("decode", "sp", ctx.plan), hint="set phases.decode.sp = 1")


@fixer("DCP-NO-DECODE-SP")
def fix_no_decode_sp(plan: dict[str, Any], ctx: Context) -> list[Change]:
    assert ctx.layout is not None
    pl = ctx.layout.phases["decode"]
    plan.setdefault("phases", {}).setdefault("decode", {})["sp"] = 1
    return [Change(rule_id="DCP-NO-DECODE-SP", message=f"set decode sp from {pl.sp} to 1: dcp = {pl.dcp} already "
                   "splits the decode KV by token", field="plan.phases.decode.sp", before=pl.sp, after=1)]


def _set_dcp(plan: dict[str, Any], ctx: Context, rule: str, new: int, why: str) -> list[Change]:
    assert ctx.layout is not None
    before = ctx.layout.phases["decode"].dcp
    plan.setdefault("parallel", {})["dcp"] = new
    return [Change(rule_id=rule, message=f"set decode dcp from {before} to {new}, {why}", field="plan.parallel.dcp",
                   before=before, after=new)]
