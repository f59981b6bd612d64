"""Writing pdag's track record (``pdag accuracy --write-track-record``): every regime and metric cell scored
from the accuracy rows, stored as data that ``tools.estimate.track_record`` reads back.

One definition (``track_record_report``): every catalog point, each publication held out, and the serving points
priced by the simulator, because its served figures are what ``estimate_performance`` answers as ``ttft_ms``,
``tpot_ms`` and ``throughput`` and so what the record's serving cells vouch for.  The command and the test that
checks the committed file both compute it through that one function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.calibration.accuracy import (
    METRIC_CLASS,
    AccuracyReport,
    Progress,
    Row,
    accuracy_report,
    load_measurements,
    scores,
)
from tools.estimate.track_record import SERVING_METRICS, STATIC_METRICS, regime_key

# The options of the one report the track record is written from (``accuracy_report``'s names).
REPORT_OPTIONS: dict[str, Any] = {"leave_one_out": True, "fit_key": "generation", "serving_model": "simulator"}


def track_record_report(progress: Progress | None = None) -> AccuracyReport:
    """The accuracy report the committed track record is written from (module doc)."""
    return accuracy_report(load_measurements(), progress=progress, **REPORT_OPTIONS)


def metric_class(metric: str) -> str:
    """TTFT / TPOT / e2e latency / throughput of a measurement metric, serving or static alike."""
    return METRIC_CLASS[metric].removeprefix("serving ")


def _cell(rows: list[Row], attr: str) -> dict[str, float]:
    sc = scores(rows, attr)
    if not sc["points"]:
        return {}
    return {"median_bias": round(sc["median_bias"], 4), "p90_error": round(sc["p90_ape"], 4)}


def track_record_table(rows: list[Row]) -> dict[str, Any]:
    """Every (regime, metric) cell, measured or not, and the same per measuring engine where that engine has points,
    from scored accuracy rows (``accuracy_report(...).rows``)."""
    cells: dict[str, dict[str, Any]] = {}
    for moe in (False, True):
        for serving in (False, True):
            for multi in (False, True):
                regime = regime_key(moe, serving, multi)
                for metric in SERVING_METRICS if serving else STATIC_METRICS:
                    mine = [r for r in rows if ("MoE" in r.regimes) == moe and ("multi-node" in r.regimes) == multi
                            and r.metric.startswith("serving_") == serving and metric_class(r.metric) == metric]
                    cells[f"{regime} | {metric}"] = _cell_of(mine)
                    for engine in sorted({r.engine for r in mine}):
                        cells[f"{regime} | {metric} | {engine}"] = _cell_of([r for r in mine if r.engine == engine])
    return {"description": "pdag's catalog estimate against the published measurements in evals/measurements/, "
                           "per regime and metric, and per measuring engine (a third key part): median signed error "
                           "(negative: pdag's figure is below the measurement) and p90 absolute error; held_out_*: "
                           "each publication scored with efficiency scales fitted on the other publications. "
                           "Regenerate with `pdag accuracy --write-track-record knowledge/accuracy/track_record.json`.",
            "points": len(rows), "sources": len({r.source for r in rows}), "cells": cells}


def _cell_of(rows: list[Row]) -> dict[str, Any]:
    cell: dict[str, Any] = {"points": len(rows), "sources": len({r.source for r in rows})}
    cell.update(_cell(rows, "predicted"))
    cell.update({f"held_out_{k}": v for k, v in _cell(rows, "loso").items()})
    return cell


def write_track_record(rows: list[Row], path: str | Path) -> None:
    Path(path).write_text(json.dumps(track_record_table(rows), indent=1, sort_keys=True) + "\n", encoding="utf-8")


