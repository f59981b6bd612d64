"""Weight storage formats as data (knowledge/hardware/quantization.json): what each format costs per parameter,
where it runs natively, and how configs, checkpoint names and engine flags name it. Plan-free, so the model reader
and the plan itself can use it; ``tools.core.quantization`` applies it to a plan."""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Literal

from knowledge import ROOT as KNOWLEDGE_ROOT
from tools.core.hardware import Accelerator

WeightFormat = Literal["bf16", "fp16", "fp8", "int8", "int4", "awq-int4", "gptq-int4", "mxfp4", "nvfp4", "experts-int8"]
QUANT_FILE = KNOWLEDGE_ROOT / "hardware" / "quantization.json"


@cache
def quant_data() -> dict[str, Any]:
    with open(QUANT_FILE, encoding="utf-8") as f:
        return json.load(f)


FORMATS: tuple[str, ...] = WeightFormat.__args__  # type: ignore[attr-defined]


def fp4_native() -> tuple[str, ...]:
    """Accelerators with FP4 tensor cores."""
    return tuple(quant_data()["fp4_native"])


def format_info(fmt: str) -> dict[str, Any]:
    return quant_data()["formats"][fmt]


def native(fmt: str, acc: Accelerator) -> bool:
    """The accelerator has tensor cores for the format's compute dtype."""
    compute = format_info(fmt)["compute"]
    if compute == "fp4":
        return acc.id in fp4_native()
    return compute is not None and acc.supports(compute)


def runs_on(fmt: str, acc: Accelerator) -> bool:
    """Engines can serve the format on the accelerator: natively, or de-quantizing in weight-only kernels."""
    return native(fmt, acc) or bool(format_info(fmt)["dequantizes"])


def peak_dtype(fmt: str) -> str:
    """The dtype whose peak prices the format's native GEMMs (FP4 at the catalog's stand-in, see the data)."""
    compute = format_info(fmt)["compute"]
    return quant_data()["fp4_priced_as"] if compute == "fp4" else compute


def format_of_config(cfg: dict[str, Any]) -> str | None:
    """The storage format a Hugging Face quantization_config names (quant_method), or None."""
    method = str(cfg.get("quant_method") or "").lower()
    if not method:
        return None
    for fid, info in quant_data()["formats"].items():
        if method in info["hf_methods"]:
            if fid == "fp8" and cfg.get("bits") == 4:
                return None
            if fid in ("awq-int4", "gptq-int4") and cfg.get("bits", cfg.get("w_bit", 4)) != 4:
                return None  # 8-bit AWQ/GPTQ (W8A16) has no format here
            return fid
    if method == "compressed-tensors" and isinstance(cfg.get("config_groups"), dict):
        return _compressed_tensors_format(cfg["config_groups"])
    if method in ("compressed-tensors", "modelopt"):
        algo = json.dumps(cfg).lower()
        return "nvfp4" if "fp4" in algo else "fp8" if "fp8" in algo else None
    return None


def _compressed_tensors_format(groups: dict[str, Any]) -> str | None:
    """llm-compressor's config_groups: the weights' bits and type, and whether activations are quantized too
    (W8A8 runs int8/fp8 GEMMs; W4A16 is weight-only int4)."""
    group = next(iter(groups.values()), None)
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        return None
    w = group["weights"]
    bits, kind, acts = w.get("num_bits"), str(w.get("type", "int")).lower(), group.get("input_activations")
    if kind == "float":
        return {8: "fp8", 4: "nvfp4"}.get(bits)  # type: ignore[arg-type]
    if bits == 4:
        return "int4"
    return "int8" if bits == 8 and acts else None


def format_of_checkpoint(repo: str) -> str | None:
    """The format a checkpoint's name states (…-FP8, …-AWQ, …-FP4, …-BF16; in a local path, any directory's
    name: /models/DeepSeek-R1-FP4/sharded), or None."""
    name = repo.lower().rstrip("/")
    found: list[tuple[int, str]] = []  # (where the marker starts, format): the first one named is the weights'
    for fid, info in quant_data()["formats"].items():
        for m in info["markers"]:
            at = [i for i in (name.find(f"{m}-"), name.find(f"{m}_"), name.find(f"{m}/")) if i >= 0]
            if name.endswith(m):
                at.append(len(name) - len(m))
            if at:
                found.append((min(at), fid))
    # AMD Quark names state weights then activations (gpt-oss-120b-w-mxfp4-a-fp8: MXFP4 weights)
    return min(found)[1] if found else None


def format_of_flag(engine: str, value: str) -> str | None:
    """The format an engine's --quantization value selects (e.g. awq_marlin, moe_wna16, modelopt_fp4)."""
    v = value.lower()
    if not v:
        return None
    for fid, info in quant_data()["formats"].items():
        if v in {x for x in (info.get("flags") or {}).values() if x} or v in info.get("flag_aliases", ()):
            return fid
    return None


def checkpoint_format(repo: str | None, spec: Any) -> str | None:
    """The storage format of the checkpoint a plan serves: what its name states, else (a repo of the preset's
    family) the preset config's quantization_config."""
    named = format_of_checkpoint(repo) if repo else None
    return named or spec.checkpoint_format


def engine_flag(fmt: str, engine: str) -> str | None:
    """The --quantization value an engine takes for the format (None: it has none)."""
    return (format_info(fmt).get("flags") or {}).get(engine) or None
