"""Every rule module registered, and the one loop that runs their checkers.

The rule modules register their checkers and fixers by decorator when imported; importing them here, in one
fixed order, means whoever runs the checkers sees the whole catalog, whatever else the process imported first."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tools.rules import (  # noqa: F401  (imported for their registrations)
    attention_dp,
    comm,
    dcp,
    disagg,
    dp,
    ep,
    gpus,
    hardware,
    memory,
    order,
    perf,
    phases,
    pp,
    sp,
    speculative,
    structure,
    tp,
)
from tools.rules.registry import CHECKERS, Context, Location, Needs, Source, Violation, rule_meta, sorted_ids


def run_checkers(ctx: Context, stages: Iterable[Needs]) -> list[Violation]:
    """Findings of every checker of these stages (all of them are registered once this module is imported)."""
    out: list[Violation] = []
    wanted = set(stages)
    for entry in CHECKERS.values():
        if not wanted.intersection(entry.needs):
            continue
        meta = rule_meta(entry.rule_id)
        try:
            findings = list(entry.fn(ctx))
        except Exception as exc:  # a checker bug must not take the tool down: report it instead
            ctx.notes.append(f"checker {entry.rule_id} failed: {type(exc).__name__}: {exc}")
            continue
        for f in findings:
            nodes = sorted_ids(f.nodes)
            fld = f.field if (f.field or nodes) else ("dag" if ctx.graph is not None and not ctx.from_plan else "plan")
            out.append(
                Violation(
                    rule_id=entry.rule_id,
                    severity=meta["severity"],
                    message=f.message,
                    location=Location(nodes=nodes, field=fld),
                    source=[Source(seed=s["seed"], section=s["section"]) for s in meta.get("source", ())],
                    hint=f.hint or meta.get("hint") or _default_hint(meta, nodes, fld),
                )
            )
    return out


def _default_hint(meta: dict[str, Any], nodes: list[str], fld: str | None) -> str | None:
    """Without a hint computed by the checker: what to change (this violation's location) and what must hold
    there (the rule's statement), never the catalog's example, which is about some other model."""
    statement = meta.get("statement")
    if not statement:
        return None
    at = ", ".join(nodes[:3]) if nodes else fld
    return f"change {at} so that: {statement}"
