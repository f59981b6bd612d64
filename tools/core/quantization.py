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

from typing import Literal

from tools.core.formats import checkpoint_format, format_info, format_of_checkpoint, native, peak_dtype, quant_data
from tools.core.hardware import DTYPE_BYTES
from tools.core.plan import Plan


def weights_of(plan: Plan) -> str | None:
    """The storage format the plan states or its checkpoint implies; None: the dtype is the storage."""
    if plan.weights is not None:
        return plan.weights
    if plan.dtype not in ("bf16", "fp16"):
        return None
    fmt = checkpoint_format(plan.served_repo, plan.spec)
    return fmt if fmt not in (None, "bf16", "fp16") else None


def storage(plan: Plan) -> str:
    """The weight storage format: ``plan.weights``, else the checkpoint's, else the dtype."""
    return weights_of(plan) or plan.dtype


def weight_block(plan: Plan) -> int:
    """The block size of the plan's block-scaled weights (0: per-tensor or per-channel scales): a preset whose
    config states weight_block_size, or a checkpoint of a family published that way (``block_scaled`` in
    quantization.json).  Engines load such weights only in whole blocks per GPU."""
    fmt = weights_of(plan)
    info = (quant_data().get("block_scaled") or {}).get(fmt or "")
    if not info:
        return 0
    spec = plan.spec
    repo = (plan.served_repo or "").lower()
    stored = spec.checkpoint_format == fmt and spec.fp8_block_scaled
    family = any(repo.startswith(p) for p in info["repo_prefixes"]) and format_of_checkpoint(repo) == fmt
    return int(info["block_size"]) if stored or family else 0


def experts_only(plan: Plan) -> bool:
    """The checkpoint quantizes the experts only (gpt-oss: attention, router, embedding and head stay bf16), as
    its config's quantization_config says through modules_to_not_convert, or the format does by definition
    (``experts_only`` in quantization.json: vLLM's experts_int8)."""
    spec = plan.spec
    fmt = weights_of(plan)
    if fmt is None or not spec.is_moe:
        return False
    if format_info(fmt).get("experts_only"):  # vLLM's experts_int8: routed experts quantized while loading
        return True
    if spec.checkpoint_format != fmt:
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
    if _listed(plan, "attention_unquantized"):
        return True
    return spec.checkpoint_format == fmt and any("attn" in m for m in spec.unquantized_modules)


def dense_unquantized(plan: Plan) -> bool:
    """The served checkpoint keeps its dense FFN and shared experts in 16 bits and quantizes the routed experts
    only: a checkpoint published that way (``dense_unquantized`` in quantization.json, from the ignore lists of
    NVIDIA's NVFP4 releases)."""
    return storage(plan) not in ("bf16", "fp16") and _listed(plan, "dense_unquantized")


def _listed(plan: Plan, table: str) -> bool:
    """The served repo is one quantization.json's ``table`` names (by repo prefix, case-insensitive)."""
    repo = (plan.served_repo or "").lower()
    return any(repo.startswith(p) for p in (quant_data().get(table) or {}).get("repo_prefixes") or ())


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
    if component == "dense" and (experts_only(plan) or dense_unquantized(plan)):
        return _sixteen(plan)
    return float(format_info(fmt)["bytes_per_param"])


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
    return peak_dtype(fmt)


def expert_gemm_dtype(plan: Plan) -> str:
    """The dtype the routed experts' GEMMs run in: a checkpoint that quantizes only its experts (gpt-oss MXFP4)
    runs them on the format's tensor cores where the GPU has them (Blackwell FP4, priced at fp8) while attention
    stays 16-bit; every other plan runs experts like its other GEMMs."""
    fmt = weights_of(plan)
    if fmt is None or not experts_only(plan) or not native(fmt, plan.accelerator):
        return gemm_dtype(plan)
    return peak_dtype(fmt)
