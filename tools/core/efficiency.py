"""Efficiency factors of the performance and memory models (``knowledge/hardware/efficiency.json``).

Resolution order for one accelerator: the file's ``defaults``, then the engine profile's keys
(``engine_profile.py``, ``generic`` unless the plan names an engine), then ``accelerators.<id>`` of the file, then
the engine profile's own ``accelerators.<id>`` (that engine's kernels timed on that accelerator), then an
*overlay* (the JSON ``pdag calibrate`` writes) given as an argument or through the ``PDAG_EFFICIENCY``
environment variable.  An overlay has the same shape as the file (``defaults`` and/or ``accelerators``);
a flat ``{key: value}`` object is also accepted and applies to every accelerator.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from tools.core.engine_profile import ENGINE_KEYS, engine_profile
from tools.core.errors import PdagInputError
from tools.core.inputs import load_json_text, read_text_file

EFFICIENCY_FILE = Path(__file__).resolve().parent.parent.parent / "knowledge" / "hardware" / "efficiency.json"
ENV_VAR = "PDAG_EFFICIENCY"

Overlay = dict[str, Any] | str | Path | None


@lru_cache(maxsize=1)
def efficiency_catalog() -> dict[str, Any]:
    with open(EFFICIENCY_FILE, encoding="utf-8") as f:
        return json.load(f)


@lru_cache(maxsize=1)
def _attention_curves() -> tuple[tuple[float, ...], dict[int, tuple[float, ...]]]:
    """Lengths, and each head dim's TFLOPs at them over head dim 128's at the longest length."""
    table = efficiency_catalog()["attention_prefill_by_length"]
    ref = float(table["tflops"]["128"][-1])
    curves = {int(d): tuple(float(f) / ref for f in fs) for d, fs in table["tflops"].items()}
    return tuple(float(t) for t in table["tokens"]), curves


def _log_between(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    return y0 + (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0)) * (y1 - y0)


def _along_length(xs: tuple[float, ...], ys: tuple[float, ...], tokens: float) -> float:
    if tokens >= xs[-1]:
        return ys[-1]
    if tokens <= xs[0]:
        return ys[0] * max(tokens, 1.0) / xs[0]
    i = next(j for j in range(1, len(xs)) if tokens <= xs[j])
    return _log_between(tokens, xs[i - 1], xs[i], ys[i - 1], ys[i])


def attention_tiling() -> tuple[float, int]:
    """The query tiles of the benchmark behind the speed-by-length curves (the occupancy they were measured at)
    and the queries one tile holds."""
    table = efficiency_catalog()["attention_prefill_by_length"]
    return float(table["benchmark_query_tiles"]), int(table["query_tile_rows"])


@lru_cache(maxsize=256)
def attention_length_scale(tokens: float, head_dim: int = 128) -> float:
    """How fast causal prefill attention runs when each query attends over ``tokens`` keys with heads of
    ``head_dim``, relative to long prompts at head dim 128 (the catalog's ``attention_prefill_by_length``): short
    prompts and narrow heads keep the tensor cores less busy per byte moved."""
    xs, curves = _attention_curves()
    dims = sorted(curves)
    d = min(max(float(head_dim), dims[0]), dims[-1])
    hi = next(k for k in dims if k >= d)
    if hi == d:
        return _along_length(xs, curves[hi], tokens)
    lo = max(k for k in dims if k < d)
    return _log_between(d, lo, hi, _along_length(xs, curves[lo], tokens), _along_length(xs, curves[hi], tokens))


@lru_cache(maxsize=32)
def _read_overlay(path: str) -> dict[str, Any]:
    data = load_json_text(read_text_file(path, "efficiency"), "efficiency")  # size, encoding, no special files
    if not isinstance(data, dict):
        raise PdagInputError("efficiency", "overlay must be a JSON object", "{defaults: {...}, accelerators: {...}}")
    return data


def load_overlay(overlay: Overlay) -> dict[str, Any] | None:
    """The overlay given, else the file named by ``PDAG_EFFICIENCY``, else None."""
    if overlay is None:
        env = os.environ.get(ENV_VAR)
        return _read_overlay(env) if env else None
    if isinstance(overlay, str | Path):
        return _read_overlay(str(overlay))
    if isinstance(overlay, dict):
        return overlay
    raise PdagInputError("efficiency", f"cannot use {type(overlay).__name__} as an overlay", "a dict or a path")


def known_keys() -> set[str]:
    return set(efficiency_catalog()["defaults"]) | ENGINE_KEYS


def _apply(out: dict[str, float], layer: dict[str, Any], accel_id: str) -> None:
    known = known_keys()
    flat = {k: v for k, v in layer.items() if k in known}
    nested = dict(layer.get("defaults") or {})
    nested.update((layer.get("accelerators") or {}).get(accel_id) or {})
    for key, value in {**flat, **nested}.items():
        if key not in known:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise PdagInputError(f"efficiency.{key}", f"expected a non-negative number, got {value!r}", "a number")
        out[key] = float(value)


def efficiency_for(accel_id: str, overlay: Overlay = None, engine: str = "generic") -> dict[str, float]:
    """Every efficiency key resolved for ``accel_id`` on ``engine`` (unknown accelerators get the defaults)."""
    cat = efficiency_catalog()
    out = {k: float(v) for k, v in cat["defaults"].items()}
    out.update(engine_profile(engine).efficiency_keys())
    out.update({k: float(v) for k, v in (cat["accelerators"].get(accel_id) or {}).items()})
    out.update(engine_profile(engine).accelerator_keys(accel_id))
    extra = load_overlay(overlay)
    if extra:
        _apply(out, extra, accel_id)
    return out


# plan.engine_options fields and the efficiency keys they set
ENGINE_OPTION_KEYS = {"max_batched_tokens": "prefill_chunk_tokens", "graph_max_tokens": "prefill_graph_max_tokens",
                      "scheduler_ahead": "scheduler_ahead_steps"}


def plan_efficiency(plan: Any, overlay: Overlay = None) -> dict[str, float]:
    """Every efficiency key for ``plan``: its accelerator, its engine's profile, the overlay, and last its engine
    options, which say how this server was launched and so win over the profile and a calibration overlay."""
    eff = efficiency_for(plan.accelerator.id, overlay, plan.engine)
    opts = plan.engine_options
    eff.update((key, float(getattr(opts, field))) for field, key in ENGINE_OPTION_KEYS.items()
               if getattr(opts, field) is not None)
    return eff


def efficiency_source(key: str, engine: str = "generic", accel_id: str | None = None) -> str:
    """Where the value of ``key`` for ``accel_id`` on ``engine`` comes from: the engine's own kernel timings on that
    accelerator where the profile has them, else the catalog's source for the key."""
    prof = engine_profile(engine)
    if accel_id and key in (prof.accelerators.get(accel_id) or {}):
        return f"engine profile knowledge/engines/{engine}.json, accelerators.{accel_id}: " + \
            prof.sources.get(f"accelerators.{accel_id}", "")
    src = efficiency_catalog()["sources"].get(key)
    if src is None and key in ENGINE_KEYS:
        return f"engine profile knowledge/engines/{engine}.json"
    return str(src or "assumption")
