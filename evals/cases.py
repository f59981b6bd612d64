"""Evaluation cases: a user's request, what a good answer satisfies, and the scripted agent's first draft."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evals import CASES_DIR

# the five degrees, attention-DP (`parallel.attn_dp` > 1) and disaggregated serving (`options.disaggregated`)
Strategy = Literal["dp", "pp", "tp", "ep", "sp", "attn_dp", "disaggregated"]

__all__ = [
    "Case",
    "DagEdit",
    "Expect",
    "Mistake",
    "Setting",
    "Strategy",
    "load_cases",
    "merge_patch",
    "strategies_used",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Setting(_Strict):
    """The facts of the user's request that any answer must keep."""

    model: str
    gpu: str
    num_gpus: int = Field(ge=1)
    gpus_per_node: int = 8
    objective: Literal["latency", "throughput"]
    workload: dict[str, int]
    dtype: str = "bf16"
    dtype_fixed: bool = True  # the user fixed the precision: an answer may not change it


class Expect(_Strict):
    """What a good final answer satisfies (beyond "validates with no error")."""

    feasible: bool = True
    must_use: list[Strategy] = Field(default_factory=list)
    must_not_use: list[Strategy] = Field(default_factory=list)
    ttft_ms: float | None = None  # SLO on prefill_latency_ms
    tpot_ms: float | None = None  # SLO on decode_latency_ms_per_token
    min_output_tokens_per_s: float | None = None
    explain: list[str] = Field(default_factory=list)  # infeasible: words the explanation must contain (any case)


class DagEdit(_Strict):
    """A mistake drawn into the DAG itself: the scripted agent builds the full DAG, edits it, validates the DAG."""

    build: dict[str, Any] = Field(default_factory=dict)  # merge patch on the plan given to build_dag
    node_types: list[str] = Field(default_factory=list)  # nodes to edit...
    set: dict[str, Any] = Field(default_factory=dict)  # ...with these attributes
    plan: dict[str, Any] = Field(default_factory=dict)  # merge patch on the plan embedded in the DAG


class Mistake(_Strict):
    """A realistic mistake in the scripted first draft, the rules that must catch it and the agent's own fix."""

    id: str
    description: str
    rules: list[str] = Field(min_length=1)
    fix: dict[str, Any] | None = None  # JSON merge patch applied to the plan once one of `rules` is reported
    dag_edit: DagEdit | None = None
    error_match: str | None = None  # input the tools reject outright: text their error must contain


class Case(_Strict):
    id: str
    title: str
    tags: list[str] = Field(default_factory=list)
    task: str  # the request, in the words a user would write
    setting: Setting
    expect: Expect = Field(default_factory=Expect)
    draft: dict[str, Any] | None = None  # the scripted agent's first plan, mistakes included (none: a session task)
    mistakes: list[Mistake] = Field(default_factory=list)


def load_cases(directory: Path = CASES_DIR, only: list[str] | None = None) -> list[Case]:
    """All cases of a directory, sorted by file name; ``only`` keeps ids (or id prefixes) listed."""
    cases = [Case.model_validate(json.loads(p.read_text())) for p in sorted(directory.glob("*.json"))]
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate case ids in " + str(directory))
    if only:
        cases = [c for c in cases if any(c.id == o or c.id.startswith(o) for o in only)]
    return cases


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes a key); returns a new object."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategies_used(plan: dict[str, Any]) -> set[str]:
    """Dimensions with a degree above 1 in the plan-wide degrees or in any phase override (``attn_dp`` included),
    plus ``disaggregated`` when the plan gives prefill and decode pools of their own."""
    used = {k for k, v in (plan.get("parallel") or {}).items() if isinstance(v, int) and v > 1}
    for override in (plan.get("phases") or {}).values():
        used |= {k for k, v in (override or {}).items() if isinstance(v, int) and v > 1}
    if (plan.get("options") or {}).get("disaggregated") is True:
        used.add("disaggregated")
    return used
