"""Weight storage formats as the engines see them (``plan.weights``; data in knowledge/hardware/quantization.json).

A plan's ``dtype`` is the compute and activation dtype; ``weights`` says how the checkpoint stores its linear
weights (attention, dense FFN, experts): bf16, fp8 (block scales), int8, AWQ/GPTQ int4, MXFP4, NVFP4. Memory and
the bytes a GEMM reads follow the storage; the math runs in the format's own dtype where the accelerator has
tensor cores for it and in 16 bits otherwise (weight-only kernels de-quantize on the fly). Embedding, LM head,
norms and router stay 16-bit. Without ``weights``, a 16-bit dtype is the compute dtype and the served checkpoint
says how it is stored (its name, else the preset config's quantization_config: gpt-oss is MXFP4, DeepSeek-V3
fp8), as engines read it; an 8- or 4-bit dtype is also the storage (plans written before).
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from knowledge import ROOT as KNOWLEDGE_ROOT
from tools.hardware import DTYPE_BYTES

if TYPE_CHECKING:
    from tools.hardware import Accelerator
    from tools.plan import Plan

WeightFormat = Literal["bf16", "fp16", "fp8", "int8", "int4", "awq-int4", "gptq-int4", "mxfp4", "nvfp4"]
QUANT_FILE = KNOWLEDGE_ROOT / "hardware" / "quantization.json"


@cache
def _data() -> dict[str, Any]:
    with open(QUANT_FILE, encoding="utf-8") as f:
        return json.load(f)


FORMATS: tuple[str, ...] = WeightFormat.__args__  # type: ignore[attr-defined]


def fp4_native() -> tuple[str, ...]:
    """Accelerators with FP4 tensor cores."""
    return tuple(_data()["fp4_native"])


def format_info(fmt: str) -> dict[str, Any]:
    return _data()["formats"][fmt]


def weights_of(plan: Plan) -> str | None:
    """The storage format the plan states or its checkpoint implies; None: the dtype is the storage."""
    if plan.weights is not None:
        return plan.weights
    if plan.dtype not in ("bf16", "fp16"):
        return None
    fmt = checkpoint_format(plan.checkpoint or plan.spec.hf_repo, plan.spec)
    return fmt if fmt not in (None, "bf16", "fp16") else None


def storage(plan: Plan) -> str:
    """The weight storage format: ``plan.weights``, else the checkpoint's, else the dtype."""
    return weights_of(plan) or plan.dtype


def weight_block(plan: Plan) -> int:
    """The block size of the plan's block-scaled weights (0: per-tensor or per-channel scales): a preset whose
    config states weight_block_size, or a checkpoint of a family published that way (``block_scaled`` in
    quantization.json).  Engines load such weights only in whole blocks per GPU."""
    fmt = weights_of(plan)
    info = (_data().get("block_scaled") or {}).get(fmt or "")
    if not info:
        return 0
    spec = plan.spec
    repo = (plan.checkpoint or spec.hf_repo or "").lower()
    stored = spec.checkpoint_format == fmt and spec.fp8_block_scaled
    family = any(repo.startswith(p) for p in info["repo_prefixes"]) and format_of_checkpoint(repo) == fmt
    return int(info["block_size"]) if stored or family else 0


def experts_only(plan: Plan) -> bool:
    """The checkpoint quantizes the experts only (gpt-oss: attention, router, embedding and head stay bf16), as
    its config's quantization_config says through modules_to_not_convert."""
    spec = plan.spec
    fmt = weights_of(plan)
    if fmt is None or not spec.is_moe or spec.checkpoint_format != fmt:
        return False
    return any("attn" in m for m in spec.unquantized_modules)


def attention_unquantized(plan: Plan) -> bool:
    """The served checkpoint keeps its attention projections in 16 bits although its other linear weights are
    quantized: experts-only checkpoints (gpt-oss), a config whose modules_to_not_convert names the attention, or a
    checkpoint family published that way (``attention_unquantized`` in quantization.json: Meta's FP8 Llama 3.1
    405B quantizes its feed-forward layers only)."""
    fmt = storage(plan)
    if fmt in ("bf16", "fp16"):
        return False
    if experts_only(plan):
        return True
    spec = plan.spec
    repo = (plan.checkpoint or spec.hf_repo or "").lower()
    family = (_data().get("attention_unquantized") or {}).get("repo_prefixes") or ()
    if any(repo.startswith(p) for p in family):
        return True
    return spec.checkpoint_format == fmt and any("attn" in m for m in spec.unquantized_modules)


def _sixteen(plan: Plan) -> float:
    return DTYPE_BYTES[plan.dtype] if plan.dtype in ("bf16", "fp16") else DTYPE_BYTES["bf16"]


def weight_bytes(plan: Plan, component: Literal["attention", "dense", "expert"]) -> float:
    """Bytes per parameter of the linear weights of ``component`` (attention projections; dense and shared FFN;
    routed experts)."""
    if component == "attention" and attention_unquantized(plan):
        return _sixteen(plan)
    fmt = storage(plan)
    if weights_of(plan) is None:
        return DTYPE_BYTES[fmt]
    if component == "dense" and experts_only(plan):
        return _sixteen(plan)
    return float(format_info(fmt)["bytes_per_param"])


def native(fmt: str, acc: Accelerator) -> bool:
    """The accelerator has tensor cores for the format's compute dtype."""
    compute = format_info(fmt)["compute"]
    if compute == "fp4":
        return acc.id in fp4_native()
    return compute is not None and acc.supports(compute)


def runs_on(fmt: str, acc: Accelerator) -> bool:
    """Engines can serve the format on the accelerator: natively, or de-quantizing in weight-only kernels."""
    return native(fmt, acc) or bool(format_info(fmt)["dequantizes"])


def gemm_dtype(plan: Plan) -> str:
    """The dtype the GEMMs run in: the storage format's when the GPU has tensor cores for it (FP4 is priced at
    the fp8 peak, the narrowest the catalog lists), else 16-bit (weight-only de-quantization)."""
    acc = plan.accelerator
    sixteen = "bf16" if acc.supports("bf16") else "fp16"
    fmt = storage(plan)
    if weights_of(plan) is None:
        return fmt if fmt in ("fp8", "int8", "bf16", "fp16") and acc.supports(fmt) else sixteen
    if experts_only(plan) or not native(fmt, acc):
        return plan.dtype if plan.dtype in ("bf16", "fp16") and acc.supports(plan.dtype) else sixteen
    return _peak_dtype(fmt)


def _peak_dtype(fmt: str) -> str:
    """The dtype whose peak prices the format's native GEMMs (FP4 at the catalog's stand-in, see the data)."""
    compute = format_info(fmt)["compute"]
    return _data()["fp4_priced_as"] if compute == "fp4" else compute


def expert_gemm_dtype(plan: Plan) -> str:
    """The dtype the routed experts' GEMMs run in: a checkpoint that quantizes only its experts (gpt-oss MXFP4)
    runs them on the format's tensor cores where the GPU has them (Blackwell FP4, priced at fp8) while attention
    stays 16-bit; every other plan runs experts like its other GEMMs."""
    fmt = weights_of(plan)
    if fmt is None or not experts_only(plan) or not native(fmt, plan.accelerator):
        return gemm_dtype(plan)
    return _peak_dtype(fmt)


def format_of_config(cfg: dict[str, Any]) -> str | None:
    """The storage format a Hugging Face quantization_config names (quant_method), or None."""
    method = str(cfg.get("quant_method") or "").lower()
    if not method:
        return None
    for fid, info in _data()["formats"].items():
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
    for fid, info in _data()["formats"].items():
        if any(name.endswith(m) or f"{m}-" in name or f"{m}_" in name or f"{m}/" in name for m in info["markers"]):
            return fid
    return None


def format_of_flag(engine: str, value: str) -> str | None:
    """The format an engine's --quantization value selects (e.g. awq_marlin, moe_wna16, modelopt_fp4)."""
    v = value.lower()
    if not v:
        return None
    for fid, info in _data()["formats"].items():
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
