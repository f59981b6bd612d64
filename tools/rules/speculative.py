"""SPEC-*: a speculative-decoding setting the model or the plan's engine cannot run (data and engine documentation
in knowledge/serving/speculative.json)."""

from __future__ import annotations

from collections.abc import Iterator

from tools.core.speculative import engine_support
from tools.rules.registry import Context, Finding, checker

_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "trtllm-cpp": "TensorRT-LLM"}


@checker("SPEC-MTP-LAYERS", needs="plan")
def check_mtp_layers(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    sd, spec = ctx.plan.speculative, ctx.plan.spec
    if sd is not None and sd.method == "mtp" and spec.mtp_layers < 1:
        yield Finding(f"speculative.method mtp drafts with the checkpoint's own multi-token-prediction layers, but "
                      f"{spec.id}'s config declares none (num_nextn_predict_layers = 0)",
                      field="plan.speculative.method",
                      hint="use a checkpoint with MTP layers (DeepSeek-V3/R1), or an eagle3 head or a draft model")


@checker("SPEC-ENGINE-SUPPORT", needs="plan")
def check_engine_support(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    plan = ctx.plan
    sd = plan.speculative
    engine = "trtllm" if plan.engine == "trtllm-cpp" else plan.engine
    table = engine_support(engine)
    if sd is None or table is None:
        return
    name = _NAMES.get(plan.engine, plan.engine)
    if sd.method not in table["methods"]:
        yield Finding(f"{name} does not run speculative method {sd.method} (it runs {', '.join(table['methods'])}; "
                      f"{table['source']})", field="plan.speculative.method",
                      hint=f"choose one of {', '.join(table['methods'])}, or another engine")
    if sd.topk > table["max_topk"]:
        yield Finding(f"{name} drafts a chain, not a tree: speculative.topk {sd.topk} > {table['max_topk']} "
                      f"({table['source']})", field="plan.speculative.topk",
                      hint="topk 1, or SGLang (--speculative-eagle-topk)")
    tp = max(plan.degrees(ph).tp for ph in ("prefill", "decode"))
    dtp = sd.draft_tp
    if dtp is not None and dtp != tp and (engine != "vllm" or dtp != 1):
        yield Finding(f"{name} runs the draft model with tp {table['draft_tp']}, not draft_tp {dtp} (target tp "
                      f"{tp}; {table['source']})", field="plan.speculative.draft_tp",
                      hint=f"draft_tp {tp}" + (" or 1" if engine == "vllm" else ""))


@checker("SPEC-DRAFT-CHECKPOINT", needs="plan")
def check_draft_checkpoint(ctx: Context) -> Iterator[Finding]:
    assert ctx.plan is not None
    sd = ctx.plan.speculative
    if sd is not None and sd.method in ("eagle", "eagle3", "draft_model") and not sd.draft_checkpoint:
        own = " (this checkpoint ships MTP layers: method mtp needs no drafter)" if ctx.plan.spec.mtp_layers else ""
        yield Finding(f"speculative.method {sd.method} drafts with a separate checkpoint, and the plan names none: "
                      f"the estimate uses the method's generic acceptance and the engine has no drafter to load{own}",
                      field="plan.speculative.draft_checkpoint",
                      hint="speculative.draft_checkpoint: the drafter's Hugging Face repo or absolute path"
                      + ("; or speculative.method mtp" if own else ""))
