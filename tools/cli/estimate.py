"""`pdag estimate`, `pdag accuracy` and `pdag calibrate` ."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.cli.common import add_plan_args, command, plan_from_args


def estimate_args(p: argparse.ArgumentParser) -> None:
    add_plan_args(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--overlap", dest="overlap", action="store_true", default=None,
                   help="assume TP/EP collectives overlap with compute (default: plan.options.overlap_comm)")
    g.add_argument("--no-overlap", dest="overlap", action="store_false", help="put every collective on the path")
    p.add_argument("--efficiency", help="efficiency overlay JSON (as written by `pdag calibrate`)")
    p.add_argument("--max-tpot-ms", type=float, help="SLA: time per output token under load; with --max-ttft-ms, "
                                                     "reports the concurrency with the best tokens/s per GPU within it")
    p.add_argument("--max-ttft-ms", type=float, help="SLA: time to first token under load")
    p.add_argument("--lockstep", action="store_true",
                   help="check --max-ttft-ms against the TTFT of clients whose prompts arrive in one burst "
                        "(fixed-length closed-loop benchmarks) instead of spread arrivals")


def cmd_estimate(args: argparse.Namespace) -> int:
    from tools.cli.check import cli_input
    from tools.core.plan import parse_plan
    from tools.estimate.core import estimate_performance, resolve_plan
    from tools.pictures.report import text_bars

    sla = {k: v for k, v in (("max_tpot_ms", args.max_tpot_ms), ("max_ttft_ms", args.max_ttft_ms)) if v is not None}
    if sla and args.lockstep:
        sla["arrivals"] = "lockstep"
    given = cli_input(args) if getattr(args, "plan_file", None) else {"plan": plan_from_args(args)}
    paths: dict = {}
    est = estimate_performance(**given, overlap=args.overlap, efficiency=args.efficiency, sla=sla or None,
                               trace=paths)  # a DAG file is priced as drawn (and refused if it does not validate)
    if args.json:
        print(est.model_dump_json(indent=2))
        return 0
    wl = (parse_plan(given["plan"]) if "plan" in given else resolve_plan(None, given["dag"])).workload
    print(f"workload: batch {wl.batch_size} per DP replica, input {wl.input_len} tokens, output {wl.output_len} tokens")
    print(est.summary() + "\n" + text_bars(est, paths))
    return 0


def accuracy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("measurements", nargs="?",
                   help="measurement JSON or CSV file, or a directory of JSON files (default: every JSON file in "
                        "evals/measurements/)")
    p.add_argument("--efficiency", help="efficiency overlay JSON to score instead of the catalog factors")
    p.add_argument("--no-loo", action="store_true", help="skip the leave-one-group-out fitted score (faster)")
    p.add_argument("--fit-key", choices=("generation", "engine", "gpu"), default="generation",
                   help="what the held-out scales are fitted per: GPU, engine and engine generation (default), GPU "
                        "and engine, or GPU over every engine's points")
    p.add_argument("--rows", default="20", type=_rows,
                   help="how many points to list, largest errors first, or 'all' for every point (default 20)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute even when the same code, knowledge and points were scored before")
    p.add_argument("--write-track-record", metavar="PATH",
                   help="also write the per-regime track record that estimates attach (pdag's own is "
                        "knowledge/accuracy/track_record.json: score every catalog file, without --no-loo)")


def _rows(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 or 'all', got {text!r}")
    return n


def _progress(stage: str, done: int, total: int) -> None:
    print(f"\r{stage}: {done}/{total}\033[K", end="", file=sys.stderr, flush=True)


def cmd_accuracy(args: argparse.Namespace) -> int:
    from tools.calibration.accuracy import accuracy_report, load_measurements
    from tools.calibration.track_record import REPORT_OPTIONS, track_record_report
    from tools.cli.cache import cached
    from tools.core.errors import PdagInputError

    if args.write_track_record and (args.measurements or args.efficiency or args.no_loo
                                    or args.fit_key != REPORT_OPTIONS["fit_key"]):
        raise PdagInputError("--write-track-record", "the track record is the catalog's own held-out score; this "
                             "run scores other points or options", "--write-track-record with no measurements "
                             "file, --efficiency, --no-loo or --fit-key")
    points = load_measurements(args.measurements)
    overlay = Path(args.efficiency).read_text(encoding="utf-8") if args.efficiency else None
    show = _progress if sys.stderr.isatty() else None
    report, hit = cached("accuracy", {"points": points, "efficiency": overlay, "loo": not args.no_loo,
                                      "fit_key": args.fit_key},
                         lambda: track_record_report(show) if args.write_track_record else
                         accuracy_report(points, efficiency=args.efficiency, leave_one_out=not args.no_loo,
                                         fit_key=args.fit_key, progress=show),
                         use=not args.no_cache)
    if show:
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    if hit:
        print("(the same code, knowledge and points were scored before: answer from the cache; --no-cache recomputes)",
              file=sys.stderr)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.text(rows=args.rows))
    if args.write_track_record:
        from tools.calibration.track_record import write_track_record

        write_track_record(report.rows, args.write_track_record)
    return 0


def calibrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("measurements",
                   help="your measurements: JSON (shape of evals/measurements/published.json) or CSV with columns "
                        "model,gpu,metric,value,input_len,output_len,batch_size and optional "
                        "tp,pp,dp,ep,dtype,kv_dtype,gpus_per_node,overlap_comm,id,source; "
                        "metric is ttft_ms, tpot_ms, e2e_ms, output_tokens_per_s "
                        "or output_tokens_per_s_per_gpu")
    p.add_argument("--gpu", required=True, help="accelerator id whose efficiency factors to fit")
    p.add_argument("--out", help="where to write the overlay (default: efficiency-<gpu>.json)")
    p.add_argument("--json", action="store_true")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from tools.calibration.accuracy import calibrate, load_measurements

    result = calibrate(load_measurements(args.measurements), gpu=args.gpu, out=args.out)
    print(json.dumps(result, indent=2) if args.json else result["text"])
    return 0


command("estimate", "plan -> latency, throughput, KV cache and memory estimate", estimate_args)(cmd_estimate)
command("accuracy", "score the estimator against published measurements", accuracy_args)(cmd_accuracy)
command("calibrate", "fit an accelerator's efficiency factors to measurements", calibrate_args)(cmd_calibrate)
