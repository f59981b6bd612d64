"""Accuracy of the estimator against published measurements, and calibration of efficiency factors.

Measurements (``evals/measurements/*.json``; ``load_measurements()`` reads every JSON file there, ``published.json``
first): ``{"defaults": {...}, "points": [...]}``.  Each point has ``model``, ``gpu``, ``parallel`` (degrees),
``dtype``, optional ``kv_dtype``, ``gpus_per_node``, ``overlap_comm`` and ``options``, ``input_len``, ``output_len``,
``batch_size``, ``metric``, ``value`` and ``source``, and optionally ``efficiency``: efficiency keys that state facts
about the measuring engine (``_point_overlay``), never fitted values, and optionally ``condition``: a measured
condition the plan cannot express (e.g. ``simulated perfect EPLB``), which keeps the point out of the rank
correlation and the held-out group of the runs it does not compare with, and optionally ``publication``: the
publication several sources belong to (pages of one site written with one harness), held out together.  A file's
``defaults`` fill keys a point leaves out.  Metrics:

* ``ttft_ms``: the prefill of a static batch of ``batch_size`` prompts processed together (the estimate's
  ``prefill_latency_ms``; the name is the measurement files', kept for compatibility);
* ``tpot_ms``: time per output token of one sequence while ``batch_size`` sequences decode together;
* ``e2e_ms``: prefill plus all decode steps of one static batch;
* ``output_tokens_per_s`` / ``output_tokens_per_s_per_gpu``: ``batch_size * output_len / e2e`` of a static batch,
  whole deployment or per GPU;
* ``serving_ttft_ms``, ``serving_tpot_ms``, ``serving_output_tokens_per_s(_per_gpu)``: a benchmark's clients at a
  fixed concurrency of ``batch_size`` per DP replica, priced by the serving simulator (``tools/estimate/simulate.py``)
  at the point's load (``point_load``) and compared with the statistic the point reports (``statistic``: mean,
  p50, p90 or p99; default mean, or p50 where its note says median); ``serving_model="analytic"`` scores the older
  steady-state formula (the estimate's ``steady_state_estimate`` block) instead.  A point with ``request_rate`` was
  measured under Poisson arrivals at that rate, at most ``batch_size`` per replica in flight (no cap when it gives
  no batch_size);
* ``serving_e2e_ms`` (a request's time from sending to its last token) and ``serving_request_throughput``
  (completed requests per second of the run, the benchmark's "Request throughput"), from the same simulation.

A serving point may state its load as the benchmark client does: ``concurrency`` (clients in flight over the whole
deployment, ``--max-concurrency``; instead of ``batch_size`` per replica), ``request_rate`` (with ``concurrency``: a
rate capped at that many in flight) and ``num_requests`` (``--num-prompts``: a finite run, which a queue under
overload grows with); a null field is one the source does not state.  ``dtype: null`` is the engine's default, the
checkpoint's 16-bit type, which pdag prices as its default bf16.

Speculative decoding and prefix caching: a point may carry ``speculative`` (``method``, ``num_draft_tokens``, and the
run's own ``acceptance_length`` when published) and ``prefix_caching`` (``enabled``, ``hit_rate`` or
``shared_prefix_len``); they become the plan's fields (a serving point's published acceptance length is the plan's
``mean_accepted_tokens``, as a user who measured it would state it; ``num_speculative_tokens``, vLLM's name, is read
as ``num_draft_tokens``; a point giving both a measured ``hit_rate`` and the workload's ``shared_prefix_len`` is
priced at the shared prefix where the two agree (``HIT_AGREES``), else at the hit rate, what the cache did).  The
``acceptance_length`` metric scores the acceptance pdag assumes when a plan states none (the method's published
default) against the published one.  A point whose source leaves a figure its pricing needs unstated (``null``:
lengths, concurrency, GPU, layout, draft tokens, the ``hit_rate`` of a ``prefix_caching.reuse`` other than a shared
prefix, e.g. multi-turn history), or names a model or GPU with no preset, is not scored; the report lists it with
what is missing (``point_gap``) instead of guessing the figure.

A user's own measurements can also be a CSV file (``pdag calibrate my.csv --gpu h100-sxm``) with a header row and the
columns ``model, gpu, metric, value, input_len, output_len, batch_size`` (required) and ``tp, pp, dp, ep, dtype,
kv_dtype, gpus_per_node, overlap_comm, id, source`` (optional; degrees default to 1, ``dtype`` to bf16,
``overlap_comm`` to the plan default).  See ``CSV_COLUMNS``.

Each point runs on an engine profile (``knowledge/engines``): ``engine_profile`` if given, else inferred from the
``engine`` text (TensorRT-LLM 0.x and NIM -> trtllm-cpp, later TensorRT-LLM -> trtllm, vLLM -> vllm, SGLang -> sglang,
gpt-fast -> gpt-fast, otherwise generic).

Scores: absolute percentage error per point (median and p90) and signed bias (median of (predicted - measured) /
measured), overall, per metric (TTFT, TPOT, e2e, throughput) and per regime (batch 1, large batch >= 32, MoE,
MoE on 16+ GPUs, multi-node); inside every group of points with the same model, GPU and metric (3 points or more),
the Spearman rank correlation of prediction and measurement.  Two held-out scores: leave-one-group-out (model@GPU) and
leave-one-source-out (each publication held out in turn, factors fitted on the other publications only).

Fitting (``calibrate`` and the leave-one-group-out score): four scale factors, one each for the compute-bound,
memory-bound, communication and overhead parts of the critical path (``PhaseDetail.breakdown_ms``).  A
prediction is approximately linear in them, ``t ~ s_c*C + s_m*M + s_x*X + s_o*O``; we minimise the absolute log
error of that linear form (robust: a few points whose engine did something the plan cannot express do not drag the
factors of every other point on that GPU) by coordinate search on a log grid, apply the factors to the efficiency keys
(``compute_efficiency_* / s_c``, ``*memory_efficiency / s_m``, ``comm_bandwidth_efficiency / s_x`` and
``comm_latency_scale * s_x``, overheads ``* s_o``), re-run the exact estimator, and repeat (3 rounds).  The
held-out scores fit only the compute and memory scales (``HARDWARE_PARTS``), and fit them per GPU *and engine*
profile (``gpu_and_engine``): fixed overheads and collective floors belong to the engine that measured a point, and
so does the fraction of peak its kernels reach on a GPU (the profiles carry per-GPU attention and expert
efficiencies), so a scale fitted on one engine's points would carry its quirks to another's: the 2023-2024
TensorRT-LLM C++ runs on H200 are 10-20 % slower than the catalog, the 2025 vLLM/SGLang/TensorRT-LLM runs are not
(``--fit-key gpu`` reproduces the per-GPU fit over all engines).  Points that state an ``engine_generation``
(vLLM's V0 engine, before 0.8) are fitted apart from the current generation's (``gpu_engine_generation``, the
default key; ``--fit-key engine`` pools them).  ``calibrate`` (one user's own measurements,
one engine) fits all four where its points measure them (below).

Two guards keep a fit from resting on one publication: every publication weighs the same in the loss (each of its
points ``1 / n`` of its rows), so a long table does not outvote two short ones that agree; and a part is fitted
only where at least ``min_sources`` publications have a point whose bottleneck it is (the largest part of its
predicted time): decode-bound points say nothing about compute speed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, get_args

from tools.calibration.choices import Choice, choices, summary, summary_line
from tools.core.efficiency import efficiency_for, known_keys, load_overlay
from tools.core.errors import PdagInputError
from tools.core.inputs import load_json_text, read_text_file
from tools.core.plan import Dtype

DEFAULT_FILE = Path(__file__).resolve().parent.parent.parent / "evals" / "measurements" / "published.json"
METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
           "serving_ttft_ms", "serving_tpot_ms", "serving_output_tokens_per_s", "serving_output_tokens_per_s_per_gpu",
           "serving_e2e_ms", "serving_request_throughput", "acceptance_length")
# How a serving benchmark's clients draw their lengths: "fixed" clients finish together and send their next prompts
# together (bursts), "jittered" ones (e.g. --random-range-ratio 0.8) drift apart into the spread-arrival state.
# "sharegpt": lengths drawn from a dataset: ShareGPT's histogram (the workload's length_dataset) scaled to the
# stated means when the row replays ShareGPT itself, else (SGLang's random dataset) uniform from 1 to twice the mean.
CLIENT_LENGTHS = ("fixed", "jittered", "sharegpt")
PARTS = ("compute", "memory", "communication", "overhead")
HARDWARE_PARTS = ("compute", "memory")
SCALED_KEYS = {
    "compute": (("compute_efficiency_gemm", -1), ("compute_efficiency_gemm_fp8", -1),
                ("compute_efficiency_attention", -1), ("compute_efficiency_attention_flashmla", -1),
                ("compute_efficiency_experts", -1), ("fp4_upcast_expert_compute_efficiency", -1),
                ("compute_efficiency_experts_block_fp8", -1), ("compute_efficiency_experts_mxfp4", -1)),
    "memory": (("memory_efficiency", -1), ("small_gemm_memory_efficiency", -1)),
    "communication": (("comm_bandwidth_efficiency", -1), ("comm_latency_scale", 1), ("allreduce_min_us", 1),
                      ("alltoall_min_us", 1)),
    "overhead": (("kernel_overhead_us", 1), ("decode_kernel_overhead_us", 1), ("layer_overhead_us", 1),
                 ("decode_layer_overhead_us", 1), ("step_overhead_ms", 1), ("decode_step_overhead_ms", 1),
                 ("moe_dispatch_overhead_us", 1)),
}
EFF_CAP = 0.98  # an efficiency never exceeds this


MEASUREMENTS_DIR = DEFAULT_FILE.parent
CSV_REQUIRED = ("model", "gpu", "metric", "value", "input_len", "output_len", "batch_size")
CSV_OPTIONAL = ("tp", "pp", "dp", "ep", "dtype", "kv_dtype", "gpus_per_node", "overlap_comm", "id", "source")
CSV_COLUMNS = CSV_REQUIRED + CSV_OPTIONAL
_INT_KEYS = ("input_len", "output_len", "batch_size", "gpus_per_node")
WEIGHT_ONLY_FORMATS = ("nvfp4", "mxfp4")  # storage formats a point may give as its dtype


def _read_json_points(p: Path) -> list[Any]:
    data = load_json_text(read_text_file(str(p), "measurements"), "measurements")
    points = data.get("points") if isinstance(data, dict) else data
    if not isinstance(points, list):
        raise PdagInputError("measurements.points", f"{p.name}: expected a list of points", "see published.json")
    defaults = data.get("defaults") if isinstance(data, dict) else None
    if isinstance(defaults, dict):
        points = [{**defaults, **pt} if isinstance(pt, dict) else pt for pt in points]
    return points


def _csv_bool(text: str, where: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise PdagInputError(where, f"expected true or false, got {text!r}", "true/false, yes/no or 1/0")


def _csv_number(text: str, where: str, integer: bool) -> Any:
    """A finite number from a CSV cell (an integer column takes whole numbers only), else a field error."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or (integer and value != int(value)):
        kind = "a whole number" if integer else "a finite number"
        raise PdagInputError(where, f"expected {kind}, got {text!r}", kind)
    return int(value) if integer else value


def _read_csv_points(p: Path) -> list[dict[str, Any]]:
    text = read_text_file(str(p), "measurements")
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise PdagInputError("measurements", f"{p.name} is not readable CSV ({exc})", "a CSV file") from None
    if not rows:
        raise PdagInputError("measurements", f"{p.name} has no data rows", "a header row and one row per point")
    header = {k.strip() for k in rows[0] if k}
    missing = [c for c in CSV_REQUIRED if c not in header]
    if missing:
        raise PdagInputError("measurements", f"{p.name} lacks the column(s) {', '.join(missing)}",
                             "columns " + ", ".join(CSV_COLUMNS))
    out = []
    for n, row in enumerate(rows, start=2):
        cells = {k.strip(): (v or "").strip() for k, v in row.items() if k}
        where = f"{p.name} line {n}"
        pt: dict[str, Any] = {"id": cells.get("id") or f"{p.stem}:{n}", "source": cells.get("source") or str(p)}
        for key in ("model", "gpu", "metric"):
            pt[key] = cells[key]
        pt["value"] = _csv_number(cells["value"], f"measurements ({where}).value", integer=False)
        for key in _INT_KEYS:
            if cells.get(key):
                pt[key] = _csv_number(cells[key], f"measurements ({where}).{key}", integer=True)
        par = {k: _csv_number(cells[k], f"measurements ({where}).{k}", integer=True)
               for k in ("tp", "pp", "dp", "ep") if cells.get(k)}
        pt["parallel"] = par or {"tp": 1}
        for key in ("dtype", "kv_dtype"):
            if cells.get(key):
                pt[key] = cells[key]
        if cells.get("overlap_comm"):
            pt["overlap_comm"] = _csv_bool(cells["overlap_comm"], f"measurements ({where}).overlap_comm")
        out.append(pt)
    return out


def load_measurements(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Measurement points from a JSON file, a CSV file or a directory of JSON files (default: every JSON file in
    ``evals/measurements/``, ``published.json`` first).  Every point is checked for what ``predict`` needs."""
    p = Path(path) if path else MEASUREMENTS_DIR
    files = sorted(p.glob("*.json"), key=lambda f: (f.name != DEFAULT_FILE.name, f.name)) if p.is_dir() else [p]
    points: list[Any] = []
    for f in files:
        points += _read_csv_points(f) if f.suffix.lower() == ".csv" else _read_json_points(f)
    if not points:
        raise PdagInputError("measurements.points", "expected a non-empty list of points", "see published.json")
    for i, pt in enumerate(points):
        if not isinstance(pt, dict):
            raise PdagInputError(f"measurements.points[{i}]", "expected an object", "a measurement point")
        gap = point_gap(pt)
        if gap:  # reported as unscored, with the reason
            points[i] = {**pt, "unscorable": gap}
            continue
        if pt["metric"] == "acceptance_length":  # the method and the draft length are all it needs
            continue
        pt = points[i] = _stated_load(pt, i)
        rate = pt.get("request_rate")
        if rate is not None:
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
                raise PdagInputError(f"measurements.points[{i}].request_rate",
                                     f"expected a positive number, got {rate!r}", "requests per second > 0")
            if pt.get("batch_size") is None:  # an open loop with no cap on requests in flight
                pt = points[i] = {**pt, "batch_size": 1, "uncapped": True}
        for key in ("model", "gpu", "metric", "value", "input_len", "output_len", "batch_size"):
            if key not in pt:
                raise PdagInputError(f"measurements.points[{i}].{key}", "missing", "see published.json")
        if pt["metric"] not in METRICS:
            raise PdagInputError(f"measurements.points[{i}].metric", f"unknown metric {pt['metric']!r}",
                                 ", ".join(METRICS))
        for key in ("input_len", "output_len", "batch_size"):
            if isinstance(pt[key], bool) or not isinstance(pt[key], int) or pt[key] < 1:
                raise PdagInputError(f"measurements.points[{i}].{key}", f"expected an integer >= 1, got {pt[key]!r}",
                                     "a whole number >= 1")
        par = pt.get("parallel") or {}
        bad = [k for k, v in par.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1] \
            if isinstance(par, dict) else ["parallel"]
        if bad:
            raise PdagInputError(f"measurements.points[{i}].parallel" + (f".{bad[0]}" if bad[0] != "parallel" else ""),
                                 "expected integer degrees >= 1", 'e.g. {"tp": 8}')
        if pt.get("client_lengths", "fixed") not in CLIENT_LENGTHS:
            raise PdagInputError(f"measurements.points[{i}].client_lengths",
                                 f"unknown value {pt['client_lengths']!r}", " or ".join(CLIENT_LENGTHS))
        if isinstance(pt["value"], bool) or not isinstance(pt["value"], int | float) \
                or not math.isfinite(pt["value"]) or pt["value"] <= 0:
            raise PdagInputError(f"measurements.points[{i}].value", f"expected a positive number, got {pt['value']!r}",
                                 "a measured value > 0")
    return points


def _stated_load(pt: dict[str, Any], i: int) -> dict[str, Any]:
    """A point's load fields checked, and ``concurrency`` (clients over the whole deployment) turned into the
    ``batch_size`` per replica the static figures price; null optional fields dropped (the defaults apply)."""
    out = {k: v for k, v in pt.items() if not (v is None and k in ("dtype", "concurrency", "num_requests",
                                                                    "speculative", "prefix_caching"))}
    for key in ("concurrency", "num_requests"):
        v = out.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise PdagInputError(f"measurements.points[{i}].{key}", f"expected an integer >= 1, got {v!r}",
                                 "a whole number >= 1")
    if out.get("concurrency") is not None and out.get("batch_size") is None:
        dp = max(1, int((out.get("parallel") or {}).get("dp", 1)))
        out["batch_size"] = -(-out["concurrency"] // dp)
    if out.get("client_lengths") == "sharegpt" and (out.get("input_len") is None or out.get("output_len") is None):
        out["input_len"], out["output_len"] = replayed_means(out)
    return out


def replayed_means(pt: dict[str, Any]) -> tuple[int, int]:
    """The mean lengths a ShareGPT replay sent: its log's token totals over its prompts where the row quotes them
    (``log totals: input X, generated Y tokens`` or ``total_input_tokens=X, total_output_tokens=Y``, and
    ``--num-prompts N``), else the dataset's published means (``knowledge/serving/length_datasets.json``).
    Why: a harness log prints totals, not per-request lengths, and the tokenizer moves them by a third."""
    from tools.core.plan import LENGTH_DATASETS

    text = " ".join(str(pt.get(k) or "") for k in ("table", "note"))
    tot = re.search(r"log totals: input ([\d,]+), generated ([\d,]+) tokens", text) \
        or re.search(r"total_input_tokens=([\d,]+), total_output_tokens=([\d,]+)", text)
    n = re.search(r"(?:--num-prompts[ =]|num_prompts=)(\d+)", text)
    if tot and n:
        count = int(n.group(1))
        return tuple(max(1, round(int(g.replace(",", "")) / count)) for g in tot.groups())  # type: ignore[return-value]
    ds = LENGTH_DATASETS["sharegpt"]
    return ds["mean_input_tokens"], ds["mean_output_tokens"]


def point_gap(pt: dict[str, Any]) -> str | None:
    """What a point's source leaves unstated that its pricing needs (None: it can be scored)."""
    sd = pt.get("speculative")
    if sd is not None and (not isinstance(sd, dict) or not _draft_tokens(sd) or not sd.get("method")):
        return "draft method or draft tokens per step not stated"
    if pt.get("metric") == "acceptance_length":
        return None if sd else "an acceptance length without a speculative method"
    missing = [k for k in ("gpu", "input_len", "output_len", "batch_size") if k in pt and pt[k] is None
               and not (k == "batch_size" and (pt.get("request_rate") or pt.get("concurrency") is not None))
               and not (k != "gpu" and k != "batch_size" and pt.get("client_lengths") == "sharegpt")]
    par = pt.get("parallel")
    if isinstance(par, dict) and any(v is None for v in par.values()):
        missing.append("parallel layout")
    pc = pt.get("prefix_caching")
    if isinstance(pc, dict) and pc.get("enabled", True) and pc.get("reuse") and pc.get("hit_rate") is None:
        missing.append("hit rate of the reuse (" + str(pc["reuse"]) + ")")
    unknown = _unknown_names(pt)
    if missing:
        what = {"batch_size": "concurrency", "input_len": "input length", "output_len": "output length"}
        return (f"{unknown}; " if unknown else "") + ", ".join(what.get(k, k) for k in missing) + " not stated"
    return unknown


def _draft_tokens(sd: dict[str, Any]) -> Any:
    """Draft tokens per step, under pdag's name or vLLM's (``num_speculative_tokens``)."""
    return sd.get("num_draft_tokens") or sd.get("num_speculative_tokens")


def _unknown_names(pt: dict[str, Any]) -> str | None:
    """A model or GPU pdag has no figures for (no preset, no public config): the point cannot be priced."""
    from tools.core.hardware import load_accelerator
    from tools.core.models import resolve_model

    unknown = []
    for key, load in (("model", resolve_model), ("gpu", load_accelerator)):
        if isinstance(pt.get(key), str):
            try:
                load(pt[key])
            except PdagInputError:
                unknown.append(f"{key} {pt[key]!r}")
    text = " and ".join(unknown) + " without a preset (no public config or datasheet figures)" if unknown else None
    dtype = pt.get("dtype")
    known = get_args(Dtype) + WEIGHT_ONLY_FORMATS
    if isinstance(dtype, str) and dtype not in known:  # e.g. "fp4": which 4-bit format (nvfp4 or mxfp4) is unsaid
        text = (f"{text}; " if text else "") + f"dtype {dtype!r} is none of {', '.join(known)}"
    return text


def _point_features(pt: dict[str, Any]) -> dict[str, Any]:
    """The plan fields of a point's speculative decoding and prefix caching (module doc)."""
    out: dict[str, Any] = {}
    sd = pt.get("speculative")
    if sd:
        spec = {"method": sd["method"], "num_draft_tokens": _draft_tokens(sd)}
        if sd.get("acceptance_length") and pt["metric"] != "acceptance_length":
            spec["mean_accepted_tokens"] = sd["acceptance_length"]
        out["speculative"] = spec
    pc = pt.get("prefix_caching")
    if pc:
        out["prefix_caching"] = {k: pc[k] for k in ("enabled", "hit_rate", "shared_prefix_len")
                                 if pc.get(k) is not None}
        both = out["prefix_caching"]
        if "hit_rate" in both and "shared_prefix_len" in both:
            # the shared prefix says more (its KV held once) where the measured hit rate bears it out; else the
            # measured hit rate is what the cache did in that run
            agree = abs(both["shared_prefix_len"] / max(1, pt.get("input_len") or 1) - both["hit_rate"]) <= HIT_AGREES
            both.pop("hit_rate" if agree else "shared_prefix_len")
    return out


HIT_AGREES = 0.02  # a stated hit rate this close to shared_prefix_len / input_len describes the same reuse


def point_plan(pt: dict[str, Any]) -> dict[str, Any]:
    par = dict(pt.get("parallel") or {})
    n = max(1, par.get("dp", 1)) * max(1, par.get("pp", 1)) * max(par.get("tp", 1), par.get("ep", 1),
                                                                   par.get("sp", 1))
    plan: dict[str, Any] = {
        "model": pt["model"],
        "hardware": {"gpu": pt["gpu"], "num_gpus": pt.get("num_gpus", n), "gpus_per_node": pt.get("gpus_per_node", 8)},
        "parallel": par,
        "workload": {"input_len": pt["input_len"], "output_len": pt["output_len"], "batch_size": pt["batch_size"]},
        "dtype": pt.get("dtype", "bf16"),
    }
    for key in ("kv_dtype", "weights", "checkpoint"):
        if pt.get(key):
            plan[key] = pt[key]
    if plan["dtype"] in WEIGHT_ONLY_FORMATS and "weights" not in plan:  # a 4-bit weight format, computed in bf16
        plan["weights"], plan["dtype"] = plan["dtype"], "bf16"
    plan.update(_point_features(pt))
    plan["engine"] = point_engine(pt)
    options = dict(pt.get("options") or {})
    if "overlap_comm" in pt:
        options["overlap_comm"] = bool(pt["overlap_comm"])
    if options:
        plan["options"] = options
    return plan


_ENGINE_WORDS = (("tensorrt-llm 0.", "trtllm-cpp"), ("nim ", "trtllm-cpp"), ("tensorrt-llm", "trtllm"),
                 ("vllm", "vllm"), ("sglang", "sglang"), ("gpt-fast", "gpt-fast"))


def point_engine(pt: dict[str, Any]) -> str:
    """The engine profile of a point: ``engine_profile`` if set, else inferred from the ``engine`` description."""
    if pt.get("engine_profile"):
        return str(pt["engine_profile"])
    text = str(pt.get("engine") or "").lower()
    return next((profile for word, profile in _ENGINE_WORDS if word in text), "generic")


def publication(pt: dict[str, Any]) -> str:
    """The publication a point belongs to, the unit that leave-one-source-out holds out: its ``publication`` when
    several pages share one author and harness (the SGLang cookbook's model pages), else its ``source``."""
    return str(pt.get("publication") or pt.get("source", ""))


def point_gpus(pt: dict[str, Any]) -> int:
    return int(point_plan(pt)["hardware"]["num_gpus"])


def regimes(pt: dict[str, Any], gpus: int | None = None) -> list[str]:
    """The regimes a point belongs to (a point can be in several); ``gpus``: its GPU count, when already known."""
    from tools.core.models import resolve_model

    out = [f for f, key in zip(FEATURES, ("speculative", "prefix_caching"), strict=True)
           if pt.get(key) and (key != "prefix_caching" or pt[key].get("enabled", True))]
    if pt["metric"] == "acceptance_length":
        return out
    gpus = point_gpus(pt) if gpus is None else gpus
    if pt["batch_size"] == 1:
        out.append("batch 1")
    if pt["batch_size"] >= 32:
        out.append("large batch (>= 32)")
    if resolve_model(pt["model"]).is_moe:
        out.append("MoE")
        if gpus >= 16:
            out.append("MoE on 16+ GPUs")
    if gpus > int(pt.get("gpus_per_node", 8)):
        out.append("multi-node")
    if is_serving(pt["metric"]) and pt.get("client_lengths"):
        out.append(_clients(pt["client_lengths"]))
    return out


def _clients(kind: str) -> str:
    """The regime label of serving points whose clients draw their lengths the ``kind`` way (``CLIENT_LENGTHS``)."""
    return f"{kind}-length clients"


REGIMES = ("batch 1", "large batch (>= 32)", "MoE", "MoE on 16+ GPUs", "multi-node")
FEATURES = ("speculative decoding", "prefix caching")  # regimes of points that state either engine feature
METRIC_CLASS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "e2e latency", "output_tokens_per_s": "throughput",
                "output_tokens_per_s_per_gpu": "throughput", "serving_ttft_ms": "serving TTFT",
                "serving_tpot_ms": "serving TPOT", "serving_output_tokens_per_s": "serving throughput",
                "serving_output_tokens_per_s_per_gpu": "serving throughput", "serving_e2e_ms": "serving e2e latency",
                "serving_request_throughput": "serving request throughput", "acceptance_length": "acceptance length"}


@dataclass
class Prediction:
    value: float
    parts: dict[str, float]  # linear decomposition of the metric's time in the four parts
    kind: str  # "time" (value proportional to time) or "rate" (value = numerator / time)
    numerator: float = 0.0
    lockstep: float | None = None  # serving TTFT under load: the other end, prompts arriving in one burst


def _point_overlay(pt: dict[str, Any], overlay: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
    """The overlay with the point's own ``efficiency`` keys on top: facts about the engine that measured it (e.g.
    ``experts_low_precision_math: 0`` for an engine without fp8 MoE kernels), never fitted values."""
    own = pt.get("efficiency")
    if not own:
        return overlay
    base = load_overlay(overlay) or {}
    known = known_keys()
    flat = {k: v for k, v in base.items() if k in known}
    accels = dict(base.get("accelerators") or {})
    accels[pt["gpu"]] = {**(accels.get(pt["gpu"]) or {}), **own}
    return {"defaults": {**flat, **(base.get("defaults") or {})}, "accelerators": accels}


SERVING_MODELS = ("simulator", "analytic")


def predict(pt: dict[str, Any], overlay: dict[str, Any] | str | None = None,
            serving_model: str = "simulator") -> Prediction:
    from tools.estimate.core import estimate_performance

    if pt["metric"] == "acceptance_length":
        from tools.core.plan import Speculative
        from tools.core.speculative import acceptance

        spec = Speculative.model_validate(_point_features(pt)["speculative"])
        return Prediction(acceptance(spec).tokens_per_step, dict.fromkeys(PARTS, 0.0), "count")
    est = estimate_performance(plan=point_plan(pt), efficiency=_point_overlay(pt, overlay), simulate=False)
    pre, dec = est.prefill.breakdown_ms, est.decode.breakdown_ms
    out = pt["output_len"]
    metric = pt["metric"]
    if metric == "ttft_ms":
        return Prediction(est.prefill_latency_ms, dict(pre), "time")
    if metric == "tpot_ms":
        return Prediction(est.decode_latency_ms_per_token, dict(dec), "time")
    if is_serving(metric):
        pred = _serving_prediction(pt, est)
        if serving_model == "simulator":
            return _simulated(pt, _point_overlay(pt, overlay), pred)
        return pred
    e2e = {k: pre[k] + out * dec[k] for k in PARTS}
    if metric == "e2e_ms":
        return Prediction(est.e2e_latency_ms, e2e, "time")
    value = est.static_batch_throughput.output_tokens_per_s
    if metric == "output_tokens_per_s_per_gpu":
        value = est.static_batch_throughput.output_tokens_per_s_per_gpu
    return Prediction(value, e2e, "rate", value * est.e2e_latency_ms)


PRICED = METRICS[:-1]  # the metrics the cost model prices (acceptance_length is a count, no time in it)


def is_serving(metric: str) -> bool:
    """A metric measured under continuous batching at a fixed concurrency (scored on the estimate's serving block)."""
    return metric.startswith("serving_")


def _serving_prediction(pt: dict[str, Any], est: Any) -> Prediction:
    """Continuous batching at ``batch_size`` requests in flight (``serving.py``).  Its parts, which only the fits
    use, take the decode step's composition for a mixed step and the prefill pass's for a prompt's own prefill."""
    sv = est.steady_state_estimate
    if sv is None:
        raise PdagInputError(f"measurements.points[{pt.get('id', '?')}].metric",
                             "serving metrics need an aggregated plan", "a plan without options.disaggregated")
    pre, dec = est.prefill.breakdown_ms, est.decode.breakdown_ms
    dec_ms, pre_ms = est.decode_latency_ms_per_token, est.prefill_latency_ms
    step = {k: dec[k] * sv.step_ms / dec_ms for k in PARTS}
    if pt["metric"] == "serving_tpot_ms":
        return Prediction(sv.tpot_ms, {k: dec[k] * sv.tpot_ms / dec_ms for k in PARTS}, "time")
    if pt["metric"] == "serving_ttft_ms":
        waiting = sv.ttft_ms - sv.prefill_ms  # queue and shared steps, priced like decode steps
        return Prediction(sv.ttft_ms, {k: dec[k] * waiting / dec_ms + pre[k] * sv.prefill_ms / pre_ms for k in PARTS},
                          "time", lockstep=sv.ttft_lockstep_ms if sv.concurrency > 1 else None)
    if pt["metric"] == "serving_e2e_ms":  # its first token, then one TPOT per further token
        more = pt["output_len"] - 1
        waiting = sv.ttft_ms - sv.prefill_ms
        return Prediction(sv.ttft_ms + more * sv.tpot_ms,
                          {k: dec[k] * (waiting + more * sv.tpot_ms) / dec_ms + pre[k] * sv.prefill_ms / pre_ms
                           for k in PARTS}, "time")
    value = sv.output_tokens_per_s_per_gpu if pt["metric"].endswith("_per_gpu") else sv.output_tokens_per_s
    if pt["metric"] == "serving_request_throughput":
        value = sv.output_tokens_per_s / pt["output_len"]
    return Prediction(value, step, "rate", value * sv.step_ms)


_SIM_CACHE: dict[str, Any] = {}


def point_load(pt: dict[str, Any], dp: int) -> dict[str, Any]:
    """The client load a serving point was measured under, as workload fields: a closed loop of its
    ``concurrency``, else ``batch_size`` clients per DP replica; lengths as the point's harness drew them
    (``client_lengths``: fixed; jittered: InferenceX's random range of [0.8 L, L] around the stated mean, or uniform
    from 1 for ShareGPT-like and SGLang-random rows); its ``num_requests``, else ``--num-prompts`` when its table
    states it, else 10 per client."""
    text = " ".join(str(pt.get(k) or "") for k in ("table", "note", "engine")).lower()
    conc = pt.get("concurrency") or pt["batch_size"] * dp
    out: dict[str, Any] = {"concurrency": conc}
    if pt.get("request_rate"):  # Poisson arrivals, capped at batch_size per replica in flight when the run states one
        out = {"request_rate": float(pt["request_rate"])} | ({} if pt.get("uncapped") else {"concurrency": conc})
    m = re.search(r"--num-prompts[ =](\d+)", text)
    if pt.get("num_requests"):
        out["num_requests"] = int(pt["num_requests"])
    elif m:
        out["num_requests"] = max(conc, int(m.group(1)))
    if "--dataset-name sharegpt" in text or pt.get("client_lengths") == "sharegpt" and "random" not in text:
        out["length_dataset"] = "sharegpt"
    elif pt.get("client_lengths") in ("jittered", "sharegpt"):
        def span(mean: int) -> list[int]:
            if pt.get("client_lengths") == "sharegpt" or "sharegpt" in text or "uniformly from 1" in text:
                return [1, max(1, 2 * mean - 1)]
            return [max(1, round(mean * 0.8 / 0.9)), max(1, round(mean / 0.9))]
        out["input_len_range"] = span(pt["input_len"])
        out["output_len_range"] = span(pt["output_len"])
    return out


def point_statistic(pt: dict[str, Any]) -> str:
    """Which statistic a serving point reports: its ``statistic`` (mean, p50, p90, p99), else median where its
    note says so, else mean."""
    if pt.get("statistic"):
        return str(pt["statistic"])
    return "p50" if "median" in str(pt.get("note") or "").lower() else "mean"


def _simulated(pt: dict[str, Any], overlay: Any, analytic: Prediction) -> Prediction:
    """A serving point priced by the simulator (``tools/estimate/simulate.py``) at the point's load; the parts (only
    the fits use them) are the analytic prediction's, scaled to the simulated value."""
    from tools.core.efficiency import plan_efficiency
    from tools.core.layout import Layout
    from tools.core.plan import Workload, parse_plan
    from tools.estimate.simulate import simulate

    plan = parse_plan(point_plan(pt))
    lay = Layout(plan)
    dp = lay.pools["decode"].dp if lay.disaggregated else lay.dp
    wl = Workload.model_validate({**plan.workload.model_dump(), **point_load(pt, dp)})
    plan = plan.model_copy(update={"workload": wl})
    key = plan.model_dump_json() + json.dumps(overlay, sort_keys=True, default=str)
    sim = _SIM_CACHE.get(key)
    if sim is None:
        if len(_SIM_CACHE) > 4096:
            _SIM_CACHE.clear()
        try:
            sim = _SIM_CACHE[key] = simulate(plan, eff=plan_efficiency(plan, overlay))
        except PdagInputError:  # a request longer than the plan's KV cache: the steady-state formula's figure
            return analytic
    stat = point_statistic(pt)
    metric = pt["metric"]
    if metric == "serving_ttft_ms":
        value = getattr(sim.ttft_ms, stat)
    elif metric == "serving_tpot_ms":
        value = getattr(sim.tpot_ms, stat)
    elif metric == "serving_e2e_ms":
        value = getattr(sim.e2e_ms, stat)
    elif metric == "serving_request_throughput":
        value = sim.request_throughput_per_s
    elif metric.endswith("_per_gpu"):
        value = sim.output_tokens_per_s_per_gpu
    else:
        value = sim.output_tokens_per_s
    ratio = value / analytic.value if analytic.value else 1.0
    if analytic.kind == "time":
        return Prediction(value, {k: v * ratio for k, v in analytic.parts.items()}, "time",
                          lockstep=analytic.lockstep)
    return Prediction(value, analytic.parts, "rate", value * sum(analytic.parts.values()))


def _linear(pred: Prediction, s: dict[str, float]) -> float:
    t = sum(pred.parts[k] * s[k] for k in PARTS)
    if pred.kind == "time":
        return t
    return pred.numerator / t if t > 0 else float("inf")


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def _quantile(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    if not ys:
        return float("nan")
    pos = q * (len(ys) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = _ranks(a), _ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else float("nan")


def _group(pt: dict[str, Any]) -> str:
    """model@GPU, plus the point's ``condition`` when it states one the estimate cannot see (e.g. a simulated
    perfect expert balance): such a point is ranked and held out apart from the runs it does not compare with."""
    cond = pt.get("condition")
    return f"{pt['model']}@{pt['gpu']}" + (f" [{cond}]" if cond else "")


# ---------------------------------------------------------------------------------------------- fitting
def _fit_scales(points: list[dict[str, Any]], preds: list[Prediction],
                parts: tuple[str, ...] = PARTS) -> dict[str, float]:
    grid = [2 ** (x / 8) for x in range(-24, 25)]  # 1/8 .. 8 in 2^(1/8) steps
    s = dict.fromkeys(PARTS, 1.0)

    counts: dict[str, int] = {}
    for pt in points:
        counts[publication(pt)] = counts.get(publication(pt), 0) + 1
    weights = [1.0 / counts[publication(pt)] for pt in points]

    def loss(sc: dict[str, float]) -> float:
        return sum(w * abs(math.log(max(_linear(p, sc), 1e-12) / pt["value"]))
                   for p, pt, w in zip(preds, points, weights, strict=True))

    best = loss(s)
    for _ in range(4):
        for k in parts:
            if all(p.parts[k] == 0 for p in preds):
                continue
            for g in grid:
                trial = {**s, k: g}
                v = loss(trial)
                if v < best - 1e-12:
                    best, s = v, trial
    return s


def _apply_scales(eff: dict[str, float], s: dict[str, float]) -> dict[str, float]:
    out = dict(eff)
    for part, keys in SCALED_KEYS.items():
        for key, sign in keys:
            out[key] = eff[key] * (s[part] if sign > 0 else 1 / s[part])
            if sign < 0 and key != "comm_latency_scale":
                out[key] = min(out[key], EFF_CAP)
    return out


def scaled_overlay(pt: dict[str, Any], scales: dict[str, float]) -> dict[str, Any]:
    """The point's own efficiency (its GPU on its engine) with fitted part scales applied."""
    base = efficiency_for(pt["gpu"], None, point_engine(pt))
    return {"accelerators": {pt["gpu"]: _apply_scales(base, scales)}}


def _determined(points: list[dict[str, Any]], preds: list[Prediction], parts: tuple[str, ...],
                min_sources: int) -> tuple[str, ...]:
    """The parts the points can measure: those that are the bottleneck (the largest part of the predicted time) of
    some point in each of ``min_sources`` publications.  A compute scale fitted to decode-bound points, where
    compute is 1 % of the time, is noise that the fit is free to blow up (and then carries to prefill)."""
    srcs: dict[str, set[str]] = {k: set() for k in parts}
    for p, pt in zip(preds, points, strict=True):
        top = max(p.parts, key=p.parts.__getitem__)
        if p.parts[top] > 0 and top in srcs:
            srcs[top].add(publication(pt))
    return tuple(k for k in parts if len(srcs[k]) >= max(1, min_sources))


def gpu_and_engine(pt: dict[str, Any]) -> str:
    """The key a held-out fit pools points under: the fraction of peak a GPU reaches is set by the kernels an engine
    runs on it as much as by the GPU (the engine profiles already carry per-GPU attention and expert efficiencies),
    so a scale fitted on one engine's runs is not carried to another engine's."""
    return f"{pt['gpu']}/{point_engine(pt)}"


def gpu_engine_generation(pt: dict[str, Any]) -> str:
    """``gpu_and_engine``, split once more where a point states its engine's generation (``engine_generation``,
    e.g. ``v0`` for vLLM before its V1 engine became the default in 0.8): an engine rewritten a year later runs
    other kernels and another scheduler on the same GPU, so a scale fitted on one generation's runs is not carried
    to the other's.  The profiles describe the current generation; an older one's points are scored against them
    and fitted among themselves."""
    gen = pt.get("engine_generation")
    return gpu_and_engine(pt) + (f"/{gen}" if gen else "")


def gpu_only(pt: dict[str, Any]) -> str:
    return str(pt["gpu"])


FIT_KEYS: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    "gpu": (gpu_only, "GPU, over every engine's points"),
    "engine": (gpu_and_engine, "GPU and engine"),
    "generation": (gpu_engine_generation, "GPU, engine and engine generation"),
}


def fit_scales(points: list[dict[str, Any]], rounds: int = 3, min_sources: int = 1,
               parts: tuple[str, ...] = PARTS, key: Callable[[dict[str, Any]], str] = gpu_only,
               ) -> dict[str, dict[str, float]]:
    """Part scales (compute, memory, communication, overhead) fitted to ``points``, per accelerator or per ``key``
    (e.g. ``gpu_and_engine``); scales, not absolute factors, so that points measured on different engines keep their
    own engine's figures.  A key whose points come from fewer than ``min_sources`` publications keeps the catalog
    (nothing is fitted to a single source when scoring held-out data)."""
    out: dict[str, dict[str, float]] = {}
    by_gpu: dict[str, list[dict[str, Any]]] = {}
    for pt in points:
        by_gpu.setdefault(key(pt), []).append(pt)
    for gpu, pts in by_gpu.items():
        if len({publication(pt) for pt in pts}) < min_sources:
            continue
        cum = dict.fromkeys(PARTS, 1.0)
        preds = [predict(pt, scaled_overlay(pt, cum)) for pt in pts]
        fitted = _determined(pts, preds, parts, min_sources)
        for r in range(rounds):
            if r:
                preds = [predict(pt, scaled_overlay(pt, cum)) for pt in pts]
            s = _fit_scales(pts, preds, fitted)
            if all(abs(v - 1) < 1e-9 for v in s.values()):
                break
            cum = {k: cum[k] * s[k] for k in PARTS}
        out[gpu] = cum
    return out


def fit_efficiency(points: list[dict[str, Any]], rounds: int = 3) -> dict[str, dict[str, float]]:
    """Per-accelerator efficiency overrides (absolute values, generic engine) fitted to ``points``."""
    return {gpu: _apply_scales(efficiency_for(gpu), sc) for gpu, sc in fit_scales(points, rounds).items()}


def _held_out(points: list[dict[str, Any]], train: list[dict[str, Any]], test: set[int],
              key: Callable[[dict[str, Any]], str] = gpu_engine_generation,
              serving_model: str = "simulator") -> dict[int, float]:
    """Predictions for the points whose index is in ``test``, with scales fitted on ``train``'s static-batch
    points: a serving figure also holds the engine's scheduling and front-end time, which says nothing about the
    GPU's compute or memory speed."""
    train = [pt for pt in train if not is_serving(pt["metric"]) and pt["metric"] in PRICED]
    scales = fit_scales(train, rounds=2, min_sources=2, parts=HARDWARE_PARTS, key=key) if train else {}
    return {i: predict(pt, scaled_overlay(pt, scales[key(pt)]) if key(pt) in scales else None,
                       serving_model).value
            for i, pt in enumerate(points) if i in test}


# ---------------------------------------------------------------------------------------------- report
@dataclass
class Row:
    id: str
    group: str
    metric: str
    measured: float
    predicted: float
    loo: float | None = None
    source: str = ""
    regimes: list[str] = field(default_factory=list)
    loso: float | None = None
    lockstep: float | None = None
    engine: str = "generic"

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


def scores(rows: list[Row], attr: str) -> dict[str, float]:
    vals = [(getattr(r, attr), r.measured) for r in rows if getattr(r, attr) is not None]
    ape = [_ape(p, m) for p, m in vals]
    signed = [(p - m) / m for p, m in vals]
    if not vals:
        return {"points": 0}
    return {"points": len(vals), "median_ape": median(ape), "p90_ape": _quantile(ape, 0.9),
            "median_bias": median(signed)}


def breakdown(rows: list[Row], attr: str = "predicted") -> dict[str, dict[str, float]]:
    """Scores overall, per metric class, per regime and per metric class of the MoE points."""
    out = {"all": scores(rows, attr),
           "mode: static batch": scores([r for r in rows if not is_serving(r.metric)], attr),
           "mode: serving": scores([r for r in rows if is_serving(r.metric)], attr)}
    for cls in dict.fromkeys(METRIC_CLASS.values()):
        out[f"metric: {cls}"] = scores([r for r in rows if METRIC_CLASS[r.metric] == cls], attr)
    for reg in REGIMES:
        out[f"regime: {reg}"] = scores([r for r in rows if reg in r.regimes], attr)
    moe = [r for r in rows if "MoE" in r.regimes]  # MoE per metric: a bias the pooled MoE row averages away
    for cls in dict.fromkeys(METRIC_CLASS.values()):
        out[f"MoE, {cls}"] = scores([r for r in moe if METRIC_CLASS[r.metric] == cls], attr)
    for kind in CLIENT_LENGTHS:
        out[f"serving TTFT, {kind}-length clients"] = scores(_ttft_rows(rows, kind), attr)
    for feat in FEATURES:  # only where such points exist: the catalog has none yet
        mine = [r for r in rows if feat in r.regimes]
        for cls in dict.fromkeys(METRIC_CLASS[r.metric] for r in mine):
            out[f"{feat}, {cls}"] = scores([r for r in mine if METRIC_CLASS[r.metric] == cls], attr)
    one = [_as_tpot(r) for r in rows if "speculative decoding" in r.regimes and "batch 1" in r.regimes
           and r.metric == "serving_output_tokens_per_s"]
    if one:
        out["speculative decoding, TPOT of one client"] = scores(one, attr)
    return out


def _as_tpot(r: Row) -> Row:
    """A lone client's output tokens/s as its time per output token (1000 / it, in ms): the speed a min-latency
    table reports per user is the inverse of its TPOT (the prompt's prefill included, on both sides)."""
    def inv(x: float | None) -> float | None:
        return None if x is None else 1e3 / x

    return Row(r.id, r.group, "serving_tpot_ms", 1e3 / r.measured, 1e3 / r.predicted, inv(r.loo), r.source,
               r.regimes, inv(r.loso), None, r.engine)


def _ttft_rows(rows: list[Row], kind: str) -> list[Row]:
    """The serving-TTFT rows measured by clients that draw their lengths the ``kind`` way (``CLIENT_LENGTHS``)."""
    return [r for r in rows if r.metric == "serving_ttft_ms" and _clients(kind) in r.regimes]


def by_source(rows: list[Row]) -> dict[str, dict[str, float]]:
    """Scores per publication, catalog and held out: a source with many points must not hide behind the total."""
    out = {}
    for src in sorted({r.source for r in rows}):
        mine = [r for r in rows if r.source == src]
        out[src] = {**scores(mine, "predicted"),
                    **{f"loso_{k}": v for k, v in scores(mine, "loso").items() if k != "points"}}
    return out


def over_sources(rows: list[Row], attr: str = "predicted") -> dict[str, dict[str, float]]:
    """Per metric class: the median over publications of each publication's median APE (one harness with most of
    the points sets any pooled figure; this one gives every publication one vote), and how many publications."""
    out: dict[str, dict[str, float]] = {}
    for cls in dict.fromkeys(METRIC_CLASS.values()):
        mine = [r for r in rows if METRIC_CLASS[r.metric] == cls and getattr(r, attr) is not None]
        per = [scores([r for r in mine if r.source == s], attr)["median_ape"] for s in sorted({r.source for r in mine})]
        if per:
            out[cls] = {"sources": len(per), "median_of_source_medians": median(per)}
    return out


def ttft_bracket(rows: list[Row]) -> dict[str, int]:
    """Where measured serving TTFT under load falls against pdag's two ends: arrivals spread over time (the
    scored figure) and every client's prompt in one burst (``ttft_lockstep_ms``)."""
    rs = [r for r in rows if r.lockstep is not None]
    below = sum(r.measured < r.predicted for r in rs)
    above = sum(r.measured > r.lockstep for r in rs)  # type: ignore[operator]
    return {"points": len(rs), "between": len(rs) - below - above, "above": above, "below": below}


@dataclass
class ReusePair:
    """A point with prefix reuse and its speedup over the same run without it, measured and predicted."""

    id: str
    metric: str
    measured: float
    predicted: float


_NOT_THE_RUN = ("id", "value", "note", "table", "prefix_caching")  # what differs between a run and its baseline


def _no_reuse(pc: dict[str, Any]) -> bool:
    """A prefix-caching block under which no prompt token is found in the cache: off, or a hit rate of 0."""
    if not pc.get("enabled", True):
        return True
    hit = pc.get("hit_rate")
    return hit == 0 or (hit is None and not pc.get("shared_prefix_len"))


def reuse_pairs(points: list[dict[str, Any]], rows: list[Row]) -> list[ReusePair]:
    """Points with prefix reuse whose publication measured the same run (every other field equal) without reuse:
    the speedup reuse gave, measured and as pdag prices it."""
    runs: dict[str, list[tuple[dict[str, Any], Row]]] = {}
    for pt, r in zip(points, rows, strict=True):
        if isinstance(pt.get("prefix_caching"), dict):
            key = json.dumps({k: v for k, v in pt.items() if k not in _NOT_THE_RUN}, sort_keys=True, default=str)
            runs.setdefault(key, []).append((pt, r))
    out = []
    for members in runs.values():
        base = [r for pt, r in members if _no_reuse(pt["prefix_caching"])]
        if not base:
            continue
        b_meas, b_pred = median(r.measured for r in base), median(r.predicted for r in base)
        for pt, r in members:
            if _no_reuse(pt["prefix_caching"]):
                continue
            rate = not r.metric.endswith("_ms")
            out.append(ReusePair(r.id, r.metric, r.measured / b_meas if rate else b_meas / r.measured,
                                 r.predicted / b_pred if rate else b_pred / r.predicted))
    return out


@dataclass
class AccuracyReport:
    rows: list[Row]
    spearman: dict[str, float] = field(default_factory=dict)
    loo_note: str = ""
    choices: list[Choice] = field(default_factory=list)
    fit: str = FIT_KEYS["generation"][1]  # what a held-out fit pools points under
    unscored: list[tuple[str, str, str]] = field(default_factory=list)  # (id, metric, what its source leaves out)
    reuse_pairs: list[ReusePair] = field(default_factory=list)

    def stats(self, attr: str = "predicted") -> tuple[float, float]:
        errs = [_ape(getattr(r, attr), r.measured) for r in self.rows if getattr(r, attr) is not None]
        return median(errs) if errs else float("nan"), _quantile(errs, 0.9)

    def as_dict(self) -> dict[str, Any]:
        med, p90 = self.stats()
        out: dict[str, Any] = {
            "points": len(self.rows), "median_ape": med, "p90_ape": p90,
            "spearman_by_group": self.spearman,
            "mean_spearman": _mean([v for v in self.spearman.values() if not math.isnan(v)]),
            "rows": [r.__dict__ for r in self.rows],
        }
        if any(r.loo is not None for r in self.rows):
            lmed, lp90 = self.stats("loo")
            out.update(loo_median_ape=lmed, loo_p90_ape=lp90, loo_note=self.loo_note)
        out["breakdown"] = {"catalog": breakdown(self.rows)}
        out["serving_ttft_bracket"] = {kind: ttft_bracket(_ttft_rows(self.rows, kind)) for kind in CLIENT_LENGTHS}
        if any(r.loso is not None for r in self.rows):
            smed, sp90 = self.stats("loso")
            out.update(loso_median_ape=smed, loso_p90_ape=sp90)
            out["breakdown"]["leave_one_source_out"] = breakdown(self.rows, "loso")
        out["by_source"] = by_source(self.rows)
        out["over_sources"] = over_sources(self.rows)
        if self.unscored:
            out["unscored"] = [{"id": i, "metric": m, "reason": why} for i, m, why in self.unscored]
        if self.reuse_pairs:
            out["prefix_caching_speedups"] = [p.__dict__ for p in self.reuse_pairs]
        out["choices_under_tpot_target"] = {
            "all": summary(self.choices), "dense": summary([c for c in self.choices if not c.moe]),
            "moe": summary([c for c in self.choices if c.moe])}
        return out

    def text(self, rows: int | None = None) -> str:
        """The report as text; ``rows`` caps the listed points to that many of the largest errors (None: every
        point, in file order)."""
        shown = self.rows if rows is None else sorted(self.rows, key=lambda r: -abs(r.error))[:max(0, rows)]
        lines = [] if rows is None else [f"the {len(shown)} largest errors of {len(self.rows)} points "
                                         "(--rows all lists every point):"]
        lines.append(f"{'point':<62} {'metric':<28} {'measured':>10} {'predicted':>10} {'err':>7}"
                     + ("  {:>10} {:>7}".format("LOO-fit", "err") if any(r.loo is not None for r in self.rows) else ""))
        for r in shown:
            line = f"{r.id[:62]:<62} {r.metric:<28} {r.measured:>10.1f} {r.predicted:>10.1f} {r.error:>+7.0%}"
            if r.loo is not None:
                line += f"  {r.loo:>10.1f} {(r.loo - r.measured) / r.measured:>+7.0%}"
            lines.append(line)
        med, p90 = self.stats()
        lines.append(f"\n{len(self.rows)} points. catalog factors: median APE {med:.1%}, p90 APE {p90:.1%}")
        if any(r.loo is not None for r in self.rows):
            lmed, lp90 = self.stats("loo")
            lines.append(f"leave-one-group-out fitted factors: median APE {lmed:.1%}, p90 APE {lp90:.1%} "
                         f"({self.loo_note})")
        if any(r.loso is not None for r in self.rows):
            smed, sp90 = self.stats("loso")
            n_src = len({r.source for r in self.rows})
            lines.append(f"leave-one-source-out fitted factors: median APE {smed:.1%}, p90 APE {sp90:.1%} "
                         f"({n_src} sources; each publication held out, factors fitted per {self.fit} on the others)")
        lines.append("")
        lines.append(f"{'':<34} {'points':>6} {'median APE':>11} {'p90 APE':>8} {'median bias':>12}"
                     + ("   LOSO: median APE   p90 APE  median bias" if any(r.loso is not None for r in self.rows)
                        else ""))
        cat = breakdown(self.rows)
        loso = breakdown(self.rows, "loso") if any(r.loso is not None for r in self.rows) else None
        for key, sc in cat.items():
            if not sc["points"]:
                lines.append(f"{key:<34} {0:>6}   no published measurement")
                continue
            line = (f"{key:<34} {sc['points']:>6} {sc['median_ape']:>11.1%} {sc['p90_ape']:>8.1%} "
                    f"{sc['median_bias']:>+12.1%}")
            if loso and loso[key]["points"]:
                lo = loso[key]
                line += f"   {lo['median_ape']:>16.1%} {lo['p90_ape']:>9.1%} {lo['median_bias']:>+12.1%}"
            lines.append(line)
        lines.append("")
        lines.append(f"{'by source':<58} {'points':>6} {'median APE':>11} {'median bias':>12}"
                     + ("  LOSO: median APE" if loso else ""))
        for src, sc in by_source(self.rows).items():
            line = f"{_short(src):<58} {sc['points']:>6} {sc['median_ape']:>11.1%} {sc['median_bias']:>+12.1%}"
            if "loso_median_ape" in sc:
                line += f"  {sc['loso_median_ape']:>16.1%}"
            lines.append(line)
        lines.append("")
        lines.append(f"{'median over sources (each publication one vote)':<50} {'sources':>7} {'median APE':>11}")
        for cls, sc in over_sources(self.rows).items():
            lines.append(f"{'metric: ' + cls:<50} {sc['sources']:>7} {sc['median_of_source_medians']:>11.1%}")
        for kind in CLIENT_LENGTHS:
            b = ttft_bracket(_ttft_rows(self.rows, kind))
            if b["points"]:
                lines.append(f"serving TTFT under load, {kind}-length clients: {b['between']} of {b['points']} "
                             f"measured values lie between pdag's spread-arrival and lockstep TTFT, "
                             f"{b['above']} above, {b['below']} below")
        if self.choices:
            lines.append("choosing the most tokens/s per GPU under a TPOT target of 10-50 ms among the configurations "
                         "a published sweep measured:")
            lines.append("  " + summary_line("dense models", [c for c in self.choices if not c.moe]))
            lines.append("  " + summary_line("MoE models", [c for c in self.choices if c.moe]))
        if self.reuse_pairs:
            lines.append("prefix caching against the same run without reuse (speedup: time without / with, or rate "
                         "with / without; against the median of the run's baselines):")
            lines.append(f"  {'point':<62} {'metric':<28} {'measured':>8} {'predicted':>9} {'pred/meas':>9}")
            for p in self.reuse_pairs:
                lines.append(f"  {p.id[:62]:<62} {p.metric:<28} {p.measured:>7.2f}x {p.predicted:>8.2f}x "
                             f"{p.predicted / p.measured:>9.2f}")
            ratios = [p.predicted / p.measured for p in self.reuse_pairs]
            lines.append(f"  {len(ratios)} pairs: predicted / measured speedup median {median(ratios):.2f}, "
                         f"from {min(ratios):.2f} to {max(ratios):.2f}")
        if self.unscored:
            lines.append(f"not scored: {len(self.unscored)} points whose source leaves unstated what pricing needs:")
            why: dict[str, list[str]] = {}
            for i, m, reason in self.unscored:
                why.setdefault(f"{m}: {reason}", []).append(i)
            for reason, ids in why.items():
                lines.append(f"  {len(ids):>3} {reason} ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})")
        valid = {k: v for k, v in self.spearman.items() if not math.isnan(v)}
        if valid:
            lines.append("Spearman rank correlation within model+GPU+metric groups of one publication (>= 3 points): "
                         f"mean {_mean(list(valid.values())):.2f}, min {min(valid.values()):.2f} "
                         f"over {len(valid)} groups")
        return "\n".join(lines)


def _short(source: str, width: int = 58) -> str:
    """A source URL cut to fit a column: its host and the end of its path."""
    text = source.split("://", 1)[-1]
    return text if len(text) <= width else text[:24] + "..." + text[-(width - 27):]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


Progress = Callable[[str, int, int], None]  # (stage, done, total): the report takes minutes on the whole corpus


def accuracy_report(points: list[dict[str, Any]], efficiency: str | dict[str, Any] | None = None,
                    leave_one_out: bool = True, fit_key: str = "generation",
                    serving_model: str = "simulator", progress: Progress | None = None) -> AccuracyReport:
    """Scores of the catalog (or ``efficiency``) and, with ``leave_one_out``, held-out scores whose scales are
    fitted per ``fit_key`` (``FIT_KEYS``: per GPU, engine and engine generation by default; ``engine`` and ``gpu``
    are the older, looser fits). ``progress`` hears of each stage's advance; it never changes the result."""
    if fit_key not in FIT_KEYS:
        raise PdagInputError("fit_key", f"unknown fit key {fit_key!r}", ", ".join(FIT_KEYS))
    tell = progress or (lambda stage, done, total: None)
    rows = []
    unscored = [(str(pt.get("id", "?")), str(pt.get("metric")), str(pt["unscorable"])) for pt in points
                if pt.get("unscorable")]
    points = [pt for pt in points if not pt.get("unscorable")]
    gpus = [0 if pt["metric"] == "acceptance_length" else point_gpus(pt) for pt in points]
    for k, (pt, n) in enumerate(zip(points, gpus, strict=True)):
        if k % 250 == 0:
            tell("catalog estimates", k, len(points))
        p = predict(pt, efficiency, serving_model)
        rows.append(Row(pt.get("id", f"{pt['model']}/{pt['gpu']}"), _group(pt), pt["metric"], float(pt["value"]),
                        p.value, source=publication(pt), regimes=regimes(pt, n), lockstep=p.lockstep,
                        engine=point_engine(pt)))
    picked = choices(points, [r.predicted for r in rows], gpus, ["MoE" in r.regimes for r in rows])
    report = AccuracyReport(rows, choices=picked, unscored=unscored, reuse_pairs=reuse_pairs(points, rows))
    buckets: dict[str, list[Row]] = {}
    for r in rows:
        buckets.setdefault(f"{r.group}/{r.metric} [{r.source}]", []).append(r)  # the whole source: short forms collide
    for key, rs in buckets.items():
        if len(rs) >= 3:
            report.spearman[key] = spearman([r.predicted for r in rs], [r.measured for r in rs])
    if leave_one_out:
        key, report.fit = FIT_KEYS[fit_key]
        groups = sorted({_group(pt) for pt in points})
        for k, g in enumerate(groups):
            tell("held out by model@GPU group", k, len(groups))
            test = {i for i, pt in enumerate(points) if _group(pt) == g}
            for i, v in _held_out(points, [pt for i, pt in enumerate(points) if i not in test], test, key,
                                  serving_model).items():
                rows[i].loo = v
        report.loo_note = (f"{len(groups)} model@GPU groups; each held out in turn, efficiency scales fitted per "
                           f"{report.fit} on the remaining groups (a key seen in fewer than two other "
                           "publications keeps catalog factors)")
        sources = sorted({r.source for r in rows})
        for k, src in enumerate(sources):
            tell("held out by publication", k, len(sources))
            test = {i for i, r in enumerate(rows) if r.source == src}
            for i, v in _held_out(points, [pt for i, pt in enumerate(points) if i not in test], test, key,
                                  serving_model).items():
                rows[i].loso = v
    return report


CONFIGS_PER_FACTOR = 2  # distinct configurations per fitted scale factor, to pin it with some margin
GRID_EDGE = 7.99  # a factor moved ~8x (the fit's search range per round) sits at the edge of what it tried


def merge_repeats(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per distinct configuration and metric, valued at the geometric mean of its repeats: the
    estimate of a configuration is computed once, so 20,000 rows of a few hundred configurations fit fast."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for pt in points:
        key = json.dumps({k: v for k, v in pt.items() if k not in ("value", "id", "source")}, sort_keys=True,
                         default=str)
        groups.setdefault(key, []).append(pt)
    out = []
    for pts in groups.values():
        if len(pts) == 1:
            out.append(pts[0])
            continue
        mean_log = sum(math.log(p["value"]) for p in pts) / len(pts)
        out.append({**pts[0], "value": math.exp(mean_log), "id": f"{pts[0].get('id', 'point')} (x{len(pts)})"})
    return out


def calibration_warnings(configs: int, changed: dict[str, tuple[float, float]], factors: int) -> list[str]:
    """What makes a fit untrustworthy: too few distinct configurations for the ``factors`` it fitted, or a factor
    stopped at a bound."""
    out = []
    want = CONFIGS_PER_FACTOR * factors
    if factors and configs < want:
        out.append(f"only {configs} distinct configuration(s) for {factors} fitted factor(s) (want >= {want}): "
                   "the factors are weakly determined; add measurements that vary batch size and sequence lengths")
    for key, (before, after) in changed.items():
        if "efficiency" in key and after >= EFF_CAP - 1e-9:
            out.append(f"{key} stopped at its cap {EFF_CAP}: the data ask for more than the hardware's peak; "
                       "check the measurements' units and GPU")
        elif before > 0 and (after / before >= GRID_EDGE or before / after >= GRID_EDGE):
            out.append(f"{key} moved {after / before:.3g}x, to the edge of the fitted range: the model and the "
                       "data disagree on this part; check the measurements")
    return out


def calibrate(points: list[dict[str, Any]], gpu: str, out: str | None = None) -> dict[str, Any]:
    """Fit ``gpu``'s efficiency factors to the points measured on it; write an overlay JSON and report."""
    mine = [pt for pt in points if str(pt.get("gpu", "")).lower() == gpu.lower()]
    if not mine:
        raise PdagInputError("gpu", f"no measurement point on {gpu!r}",
                             ", ".join(sorted({str(pt.get('gpu')) for pt in points})))
    gpu = mine[0]["gpu"]
    rows = len(mine)
    mine = merge_repeats(mine)
    preds = [predict(pt) for pt in mine]
    before = [_ape(p.value, pt["value"]) for p, pt in zip(preds, mine, strict=True)]
    unmeasured = [k for k in PARTS if k not in _determined(mine, preds, PARTS, 1)]
    fitted = fit_efficiency(mine)
    overlay = {"version": 1, "fitted_from": f"{len(mine)} points", "accelerators": {gpu: fitted[gpu]}}
    after = [_ape(predict(pt, overlay).value, pt["value"]) for pt in mine]
    path = out or f"efficiency-{gpu}.json"
    Path(path).write_text(json.dumps(overlay, indent=2) + "\n", encoding="utf-8")
    base = efficiency_for(gpu)
    changed = {k: (base[k], v) for k, v in fitted[gpu].items() if abs(v - base[k]) > 1e-12}
    text = [f"calibrated {gpu} on {len(mine)} points; overlay written to {path}",
            f"before: median APE {median(before):.1%}, p90 {_quantile(before, 0.9):.1%}",
            f"after:  median APE {median(after):.1%}, p90 {_quantile(after, 0.9):.1%} (in-sample)",
            f"use it: PDAG_EFFICIENCY={path} pdag estimate ...  or  estimate_performance(..., efficiency='{path}')"]
    text += [f"  {k}: {a:g} -> {b:.4g}" for k, (a, b) in changed.items()]
    if unmeasured:
        text.append(f"kept at the catalog's (no point is bound by it, so none measures it): {', '.join(unmeasured)}")
    if rows > len(mine):
        text.insert(1, f"{rows} rows, {len(mine)} distinct configurations (repeats merged: geometric mean)")
    warnings = calibration_warnings(len(mine), changed, len(PARTS) - len(unmeasured))
    text += [f"warning: {w}" for w in warnings]
    return {"gpu": gpu, "points": len(mine), "rows": rows, "warnings": warnings, "overlay_path": path,
            "not_fitted": unmeasured,
            "overlay": overlay,
            "median_ape_before": median(before), "p90_ape_before": _quantile(before, 0.9),
            "median_ape_after": median(after), "p90_ape_after": _quantile(after, 0.9), "text": "\n".join(text)}
