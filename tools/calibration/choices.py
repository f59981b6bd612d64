"""Does the estimate pick the deployment a user would have picked?  Scored on published serving sweeps.

A sweep measures several configurations (parallel layout and concurrency) of one model on one GPU type, engine,
weight format and workload.  For a TPOT target, the best measured configuration is the one with the most output
tokens/s per GPU among those whose measured TPOT meets the target; pdag's pick is the one with the most predicted
tokens/s per GPU among those whose predicted TPOT meets it.  The pick then either meets the target in the
measurement (scored by the share of the best throughput it reaches) or misses it, or pdag finds none that meets
it although one does.  This is the question `search_strategies` answers with an SLO, asked of configurations
that were actually measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

TPOT_TARGETS_MS = (10.0, 15.0, 20.0, 30.0, 50.0)
NEAR_BEST = 0.9  # a pick within this share of the best measured throughput counts as a good choice
_COLUMNS = {"serving_tpot_ms": "tpot", "serving_output_tokens_per_s_per_gpu": "rate",
            "serving_output_tokens_per_s": "rate"}


@dataclass(frozen=True)
class Choice:
    sweep: str
    target_ms: float
    outcome: str  # "meets", "misses" or "none"
    share_of_best: float  # measured throughput of pdag's pick over the best measured (0 when none)
    moe: bool


def _sweep_key(pt: dict[str, Any]) -> str:
    weights = pt.get("weights") or pt.get("dtype", "bf16")
    return (f"{pt['model']}@{pt['gpu']} {pt.get('engine_profile') or pt.get('engine', '')} {weights} "
            f"{pt['input_len']}/{pt['output_len']} ({pt.get('source', '')})")


def _config_key(pt: dict[str, Any]) -> str:
    par = pt.get("parallel") or {}
    return f"{sorted(par.items())} c{pt['batch_size']}"


def choices(points: list[dict[str, Any]], predicted: list[float], gpus: list[int], moe: list[bool],
            targets: tuple[float, ...] = TPOT_TARGETS_MS) -> list[Choice]:
    """One ``Choice`` per sweep and TPOT target that some measured configuration meets.  ``predicted``, ``gpus``
    and ``moe`` run parallel to ``points`` (the accuracy rows' predictions, each point's GPU count and model kind)."""
    table: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    kinds: dict[str, bool] = {}
    for pt, pred, n, is_moe in zip(points, predicted, gpus, moe, strict=True):
        metric = pt["metric"]
        if metric not in _COLUMNS:
            continue
        name = _COLUMNS[metric]
        sweep = _sweep_key(pt)
        kinds[sweep] = is_moe
        scale = 1.0 / max(1, n) if metric == "serving_output_tokens_per_s" else 1.0  # the deployment's, per GPU
        table.setdefault(sweep, {}).setdefault(_config_key(pt), {})[name] = (pt["value"] * scale, pred * scale)
    out = []
    for sweep, configs in sorted(table.items()):
        full = {k: v for k, v in configs.items() if len(v) == 2}
        if len(full) < 2:
            continue
        for target in targets:
            measured_ok = [k for k, v in full.items() if v["tpot"][0] <= target]
            if not measured_ok:
                continue
            best = max(full[k]["rate"][0] for k in measured_ok)
            predicted_ok = [k for k, v in full.items() if v["tpot"][1] <= target]
            if not predicted_ok:
                out.append(Choice(sweep, target, "none", 0.0, kinds[sweep]))
                continue
            pick = max(predicted_ok, key=lambda k: (full[k]["rate"][1], k))
            outcome = "meets" if full[pick]["tpot"][0] <= target else "misses"
            out.append(Choice(sweep, target, outcome, full[pick]["rate"][0] / best, kinds[sweep]))
    return out


def summary(cs: list[Choice]) -> dict[str, float]:
    met = [c for c in cs if c.outcome == "meets"]
    return {"cases": len(cs), "meets": len(met), "near_best": sum(c.share_of_best >= NEAR_BEST for c in met),
            "misses": sum(c.outcome == "misses" for c in cs), "none": sum(c.outcome == "none" for c in cs),
            "median_share_of_best": median(c.share_of_best for c in met) if met else float("nan")}


def summary_line(label: str, cs: list[Choice]) -> str:
    s = summary(cs)
    if not s["cases"]:
        return f"{label}: no published sweep"
    return (f"{label}: {s['cases']} cases; pdag's pick meets the target in {s['meets']} ({s['near_best']} within "
            f"{1 - NEAR_BEST:.0%} of the best measured throughput, median {s['median_share_of_best']:.0%} of it), "
            f"misses it in {s['misses']}, finds none in {s['none']}")
