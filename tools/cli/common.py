"""Shared pieces of the `pdag` command line: the plan flags and the subcommand registry."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.core.engine_profile import ENGINE_IDS
from tools.core.errors import PdagInputError
from tools.core.formats import FORMATS
from tools.core.inputs import load_json_text, read_text_file

# The workload is left to the plan model's defaults, so flags, plan files and MCP calls estimate the same thing.
DEFAULT_PLAN: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
    "parallel": {"tp": 8},
    "objective": "latency",
}


def add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan_file", nargs="?", help="a plan JSON file ('-' for stdin); flags below override it")
    p.add_argument("--model", help="model preset id (llama-3.1-70b), its Hugging Face id, or a config.json path")
    p.add_argument("--gpu", help="accelerator preset id, e.g. h100-sxm")
    p.add_argument("--gpus", type=int, help="GPUs the plan may use (hardware.num_gpus)")
    p.add_argument("--gpus-per-node", type=int)
    for d in ("dp", "pp", "tp", "ep", "sp"):
        p.add_argument(f"--{d}", type=int, help=f"{d.upper()} degree")
    p.add_argument("--prefill-sp", type=int, help="SP degree in prefill only")
    p.add_argument("--input-len", type=int)
    p.add_argument("--output-len", type=int)
    p.add_argument("--batch", type=int, help="sequences per DP replica")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"])
    p.add_argument("--kv-dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"])
    p.add_argument("--weights", choices=list(FORMATS),
                   help="checkpoint weight storage, e.g. mxfp4, awq-int4, nvfp4 (default: the dtype)")
    p.add_argument("--checkpoint", help="the Hugging Face repo served, e.g. meta-llama/Llama-3.1-405B-Instruct-FP8 "
                                        "(its stored format sets the weights' memory)")
    p.add_argument("--objective", choices=["latency", "throughput"])
    p.add_argument("--engine", choices=list(ENGINE_IDS),
                   help="serving engine the estimate assumes (knowledge/engines/); export's target engine")
    p.add_argument("--max-batched-tokens", type=int,
                   help="engine's token budget per step (plan.engine_options; vLLM --max-num-batched-tokens)")
    p.add_argument("--graph-max-tokens", type=int,
                   help="largest pass the engine replays as a CUDA graph (plan.engine_options; 0: none)")
    p.add_argument("--scheduler-ahead", action=argparse.BooleanOptionalAction, default=None,
                   help="the engine schedules a step ahead of the GPU (plan.engine_options; default: the engine "
                        "profile's, on for vllm, sglang and trtllm)")
    p.add_argument("--json", action="store_true", help="print the complete result as JSON")


def read_json(path: str, field: str = "plan_file") -> Any:
    """A JSON document from a file ('-': stdin) under the input limits of tools.core.inputs (size, encoding, depth,
    number length, no special files); every failure is a PdagInputError naming ``field``."""
    return load_json_text(read_text_file(path, field), field)


def resolve_model_flag(value: str) -> str | dict[str, Any]:
    """``--model``: a preset id, the Hugging Face id of a preset (meta-llama/Llama-3.1-70B-Instruct ->
    llama-3.1-70b; -Instruct/-Chat/-Base suffixes ignored), or the path of a config.json."""
    if value.endswith(".json") or Path(value).is_file():
        cfg = read_json(value, "--model")
        if not isinstance(cfg, dict):
            raise PdagInputError("--model", f"{value!r} does not hold a JSON object", "a Hugging Face config.json")
        return {"hf_config": cfg}
    if "/" not in value:
        return value
    from tools.core.models import preset_index

    def norm(repo: str) -> str:
        name = repo.lower().rstrip("/")
        for suffix in ("-instruct", "-chat", "-base", "-hf"):
            name = name.removesuffix(suffix)
        return name

    wanted = norm(value)
    for pid, meta in preset_index().items():
        repo = meta.get("hf_repo")
        if isinstance(repo, str) and norm(repo) == wanted:
            return pid
    raise PdagInputError("--model", f"{value!r} is neither a preset's Hugging Face id nor a config.json file",
                         "a preset id or its HF id (pdag models), or the path of a config.json")


def plan_document(data: Any, field: str = "plan_file") -> dict[str, Any]:
    """The plan inside a file: a plan object, or the output of `pdag plan --json` / `pdag fix --json`
    (an object whose "plan" holds it)."""
    if isinstance(data, dict) and "model" not in data and isinstance(data.get("plan"), dict):
        data = data["plan"]
    if not isinstance(data, dict):
        raise PdagInputError(field, f"expected a JSON object, got {type(data).__name__}", "a plan object")
    return data


def plan_from_args(args: argparse.Namespace, document: Any = None) -> dict[str, Any]:
    """A plan dict from a file (or ``document``, already read from it) and/or flags, the flags overriding the
    file; with neither, the embedded default deployment."""
    if args.plan_file:
        plan = plan_document(read_json(args.plan_file) if document is None else document)
    else:
        plan = json.loads(json.dumps(DEFAULT_PLAN))
    if args.model:
        plan["model"] = resolve_model_flag(args.model)
    hw = plan.setdefault("hardware", {})
    for flag, key in (("gpu", "gpu"), ("gpus", "num_gpus"), ("gpus_per_node", "gpus_per_node")):
        if getattr(args, flag) is not None:
            hw[key] = getattr(args, flag)
    degree_flags = any(getattr(args, d) is not None for d in ("dp", "pp", "tp", "ep", "sp"))
    if not args.plan_file and (degree_flags or args.gpus is not None or args.model):
        plan["parallel"] = {}  # flags describe a new deployment: do not inherit the default's TP 8
    par = plan.setdefault("parallel", {})
    for d in ("dp", "pp", "tp", "ep", "sp"):
        if getattr(args, d) is not None:
            par[d] = getattr(args, d)
    if args.prefill_sp is not None:
        plan.setdefault("phases", {}).setdefault("prefill", {})["sp"] = args.prefill_sp
    wl = plan.setdefault("workload", {})
    for flag, key in (("input_len", "input_len"), ("output_len", "output_len"), ("batch", "batch_size")):
        if getattr(args, flag) is not None:
            wl[key] = getattr(args, flag)
    for key in ("dtype", "kv_dtype", "weights", "checkpoint", "objective", "engine"):
        if getattr(args, key, None) is not None:
            plan[key] = getattr(args, key)
    for key in ("max_batched_tokens", "graph_max_tokens", "scheduler_ahead"):
        if getattr(args, key, None) is not None:
            plan.setdefault("engine_options", {})[key] = getattr(args, key)
    return plan


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None]]] = {}


def command(
    name: str, help_text: str, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register a subcommand; modules of the core add theirs here."""

    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help_text, fn, extra or add_plan_args)
        return fn

    return deco
