"""Shared pieces of the `pdag` command line: the plan flags and the subcommand registry."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tools.core.errors import PdagInputError
from tools.core.hardware import accelerator_id
from tools.core.inputs import load_json_text, read_text_file
from tools.core.plan import Plan

# The workload is left to the plan model's defaults, so flags, plan files and MCP calls estimate the same thing.
DEFAULT_PLAN: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8},
    "parallel": {"tp": 8},
    "objective": "latency",
}


# The plan's command-line flags: each names the Plan field it sets and takes its type, choices and help from that
# field, so the help text and the published schema cannot drift apart. Every scalar field of parallel, workload and
# engine_options (and of speculative, prefix_caching) gets a flag of its own name; the others are listed here.
_HEAD: tuple[tuple[str, ...], ...] = (("model",), ("hardware", "gpu"), ("hardware", "num_gpus"),
                                      ("hardware", "gpus_per_node"))
_TAIL: tuple[tuple[str, ...], ...] = (("phases", "prefill", "sp"), ("dtype",), ("kv_dtype",), ("weights",),
                                      ("checkpoint",), ("objective",), ("engine",))
_EVERY_FIELD_OF = ("parallel", "workload", "engine_options", "speculative", "prefix_caching")
_RENAMED: dict[tuple[str, ...], str] = {("hardware", "num_gpus"): "gpus", ("workload", "batch_size"): "batch",
                                        ("phases", "prefill", "sp"): "prefill-sp",
                                        ("speculative", "method"): "speculative", ("speculative", "topk"): "spec-topk",
                                        ("speculative", "num_steps"): "spec-steps",
                                        ("prefix_caching", "enabled"): "prefix-caching",
                                        ("prefix_caching", "hit_rate"): "prefix-hit-rate"}
_CLI_NOTES = {("model",): "; on the command line also its Hugging Face id or the path of a config.json"}
_SCALARS: dict[Any, Callable[[str], Any]] = {int: int, float: float, str: str}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    for a in (annotation, *get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def plan_field(path: tuple[str, ...]) -> FieldInfo:
    model: type[BaseModel] | None = Plan
    info = None
    for name in path:
        assert model is not None, path
        info = model.model_fields[name]
        model = _model_of(info.annotation)
    assert info is not None
    return info


def _kinds(info: FieldInfo) -> list[Any]:
    """The field's types with None dropped (a Literal is one kind, not its values)."""
    union = get_origin(info.annotation) in (Union, UnionType)
    return [a for a in (get_args(info.annotation) if union else (info.annotation,)) if a is not type(None)]


def is_flag_field(info: FieldInfo) -> bool:
    """A field one command-line value can set: a number, text, a switch or one of a Literal's values."""
    kinds = _kinds(info)
    return len(kinds) == 1 and (kinds[0] in (*_SCALARS, bool) or get_origin(kinds[0]) is Literal)


def plan_flag_paths() -> dict[str, tuple[str, ...]]:
    """Flag name (without its dashes) -> the Plan field it sets."""
    every = [(sec, name) for sec in _EVERY_FIELD_OF
             for name, info in _model_of(Plan.model_fields[sec].annotation).model_fields.items()
             if is_flag_field(info)]
    return {_RENAMED.get(path, path[-1]).replace("_", "-"): path for path in (*_HEAD, *every, *_TAIL)}


def _add_flag(p: argparse.ArgumentParser, flag: str, path: tuple[str, ...]) -> None:
    info = plan_field(path)
    kinds = _kinds(info)
    help_text = (info.description or "") + _CLI_NOTES.get(path, "")
    if path[0] == "phases":
        help_text = f"{path[1]} only: {help_text}"
    dest = flag.replace("-", "_")
    if kinds == [bool]:
        p.add_argument(f"--{flag}", dest=dest, action=argparse.BooleanOptionalAction, default=None, help=help_text)
    elif len(kinds) == 1 and get_origin(kinds[0]) is Literal:
        p.add_argument(f"--{flag}", dest=dest, choices=list(get_args(kinds[0])), help=help_text)
    else:
        p.add_argument(f"--{flag}", dest=dest, type=_SCALARS.get(kinds[0], str), help=help_text)


def add_plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan_file", nargs="?", help="a plan JSON file ('-' for stdin); flags below override it")
    for flag, path in plan_flag_paths().items():
        _add_flag(p, flag, path)
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
    given = {path: getattr(args, flag.replace("-", "_"), None) for flag, path in plan_flag_paths().items()}
    given = {path: v for path, v in given.items() if v is not None}
    if not args.plan_file and any(path[0] == "parallel" or path in (("model",), ("hardware", "num_gpus"))
                                  for path in given):
        plan["parallel"] = {}  # flags describe a new deployment: do not inherit the default's TP 8
    for keys in (("hardware",), ("parallel",), ("workload",)):
        plan.setdefault(keys[0], {})
    for path, value in given.items():
        at = plan
        for key in path[:-1]:
            at = at.setdefault(key, {})
        at[path[-1]] = resolve_model_flag(value) if path == ("model",) else value
    if isinstance(plan["hardware"].get("gpu"), str):  # the page and --json echo the preset id a short name means
        plan["hardware"]["gpu"] = accelerator_id(plan["hardware"]["gpu"], field="hardware.gpu")
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
