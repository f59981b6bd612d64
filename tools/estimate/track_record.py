"""pdag's track record: how far its estimates have landed from published measurements, per regime.

A planner's figure is only as useful as its error bar.  ``pdag accuracy --write-track-record`` scores every
catalog point and stores, per model family (dense / MoE), mode (static batch / serving), scale (one node /
multi-node) and metric, and again per measuring engine, the median signed error and the p90 absolute error of the
catalog estimate, and the median error with each publication held out of the fitted scales (leave-one-source-out).
``estimate_performance`` attaches the cells of its own plan (its engine's where that engine has enough points),
so an agent reading "TTFT 39 ms" also reads "published runs of this kind came out at about 2x", and is told
plainly when no published measurement covers the regime at all.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from knowledge import ROOT, load_json

TRACK_RECORD = "accuracy/track_record.json"  # under knowledge/
TRACK_RECORD_FILE = ROOT / TRACK_RECORD
STATIC_METRICS = ("TTFT", "TPOT", "e2e latency", "throughput")
SERVING_METRICS = ("TTFT", "TPOT", "throughput")
WARN_BIAS = 0.20  # a regime whose median error is at least this large gets a warning in the estimate
WARN_MIN_POINTS = 20  # ... when enough points back it


def regime_key(moe: bool, serving: bool, multi_node: bool) -> str:
    return ", ".join(("MoE" if moe else "dense", "serving" if serving else "static batch",
                      "multi-node" if multi_node else "one node"))


class TrackRecord(BaseModel):
    """One metric of the estimate against what published measurements of the same regime showed."""

    metric: str = Field(description="TTFT, TPOT, e2e latency or throughput")
    regime: str = Field(description="model family, mode and scale the figure falls in")
    engine: str = Field("all", description="the engine whose measurements these are: the plan's own when it has "
                                           f"at least {WARN_MIN_POINTS} points in the regime, else all engines")
    points: int = Field(description="published measurements in this regime (0: none; the figure is unchecked)")
    median_bias: float | None = Field(None, description="median of (pdag - measured) / measured; -0.5 means the "
                                                        "measurements came out at 2x pdag's figure")
    p90_error: float | None = Field(None, description="90th percentile of |pdag - measured| / measured")
    held_out_median_bias: float | None = Field(None, description="median_bias with each publication held out of "
                                                                 "the fitted efficiency scales")


def track_record(moe: bool, serving: bool, multi_node: bool, engine: str = "generic") -> list[TrackRecord]:
    """The committed track record of the plan's regime: every static-batch metric the estimate reports, then
    (``serving``: the estimate also prices continuous batching) every serving metric; from the measurements of the
    plan's engine where there are enough of them (engines differ most where pdag is least right)."""
    cells = load_json(TRACK_RECORD)["cells"]
    out = []
    for mode in (False, True) if serving else (False,):
        regime = regime_key(moe, mode, multi_node)
        for metric in SERVING_METRICS if mode else STATIC_METRICS:
            own = cells.get(f"{regime} | {metric} | {engine}", {})
            c, who = (own, engine) if own.get("points", 0) >= WARN_MIN_POINTS else \
                (cells.get(f"{regime} | {metric}", {}), "all")
            out.append(TrackRecord(metric=metric, regime=regime, engine=who, points=c.get("points", 0),
                                   median_bias=c.get("median_bias"), p90_error=c.get("p90_error"),
                                   held_out_median_bias=c.get("held_out_median_bias")))
    return out


def track_record_warnings(records: list[TrackRecord]) -> list[str]:
    """Plain words for the regimes where published measurements disagree with pdag or do not exist."""
    out = []
    for regime in dict.fromkeys(r.regime for r in records):
        missing = [r.metric for r in records if r.regime == regime and not r.points]
        if missing:
            out.append(f"no published measurement of {', '.join(missing)} in this regime ({regime}): "
                       "those figures are unchecked")
    for r in records:
        if r.points >= WARN_MIN_POINTS and r.median_bias is not None and abs(r.median_bias) >= WARN_BIAS:
            ratio = 1 / (1 + r.median_bias)
            who = "" if r.engine == "all" else f" on {r.engine}"
            out.append(f"published {r.metric} measurements in this regime ({r.regime}{who}) came out at {ratio:.1f}x "
                       f"pdag's figure (median of {r.points} points; p90 error {r.p90_error:.0%}): leave margin")
    return out
