"""The conformance corpus: published deployments (engine command lines, each with its source) that pdag must
import, validate without error, estimate, and export back to the same engine with the same parallel layout,
weights and checkpoint.  The data is ``knowledge/conformance/corpus.json``; its JSON Schema is generated from
``Corpus`` (``knowledge/schemas/conformance.schema.json``).  ``pdag conformance`` prints the verdicts."""

from __future__ import annotations

import json
import shlex
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from knowledge import ROOT
from tools.core.errors import PdagInputError
from tools.core.formats import checkpoint_format, format_of_flag

CORPUS_PATH = ROOT / "conformance" / "corpus.json"

Weights = Literal["bf16", "fp16", "fp8", "int8", "awq-int4", "mxfp4", "nvfp4"]
Need = Literal["quantization"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Setting(_Strict):
    gpu: str = Field(description="accelerator preset id of knowledge/hardware/accelerators.json")
    num_gpus: int = Field(ge=1, description="GPUs of the deployment as published (all nodes)")
    gpus_per_node: int = Field(8, ge=1)
    gpu_stated: bool = Field(True, description="false: the source names no GPU model; 'where' says what is assumed")


class Expected(_Strict):
    """The plan the command describes, in pdag's terms (knowledge/engines.md gives each engine's mapping)."""

    model: str = Field(description="model preset id")
    checkpoint: str = Field(description="the repo (or path) the command serves")
    parallel: dict[str, int] = Field(description="pdag degrees: dp, pp, tp, ep, attn_dp (unlisted: 1); "
                                     "disaggregated: the prefill pool's")
    decode_parallel: dict[str, int] | None = Field(None, description="disaggregated: the decode pool's degrees")
    weights: Weights = Field(description="how the checkpoint stores its weights (bf16 unless quantised)")
    kv_dtype: Literal["fp8"] | None = None
    speculative: dict[str, Any] | None = Field(None, description="the plan's speculative block, when the command "
                                               "speculates (its draft path as a plan may hold it)")
    prefix_caching: dict[str, Any] | None = Field(None, description="the plan's prefix_caching block, when the "
                                                  "command sets it")


class Entry(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    engine: Literal["vllm", "sglang", "trtllm"]
    setting: Setting
    command: str = Field(description="the launch command as published (for a multi-node launch: node 0's)")
    engine_config: dict[str, Any] | None = Field(
        None, description="TensorRT-LLM or vLLM: the published --config YAML the command reads (as an object)")
    replicas: int = Field(1, ge=1, description="servers running the command (e.g. a Kubernetes Deployment's "
                                               "replicas): pdag's plain DP")
    decode_replicas: int = Field(1, ge=1, description="disaggregated: servers running the decode command")
    decode_engine_config: dict[str, Any] | None = Field(
        None, description="disaggregated: the --config YAML the decode command reads, when the pools' differ")
    decode_command: str | None = Field(
        None, description="disaggregated serving: the decode pool's command as published ('command' is the "
                          "prefill pool's)")
    source: str = Field(pattern=r"^https://", description="where the command is published")
    where: str = Field(description="section of the source the command is taken from, and what it states")
    expected: Expected
    warnings: dict[str, str] = Field(
        default_factory=dict, description="warning rule id -> why the warning is right for this deployment")
    needs: Need | None = Field(
        None, description="a pdag capability this entry waits for; its test is an expected failure until then")
    needs_why: str | None = None


class Corpus(_Strict):
    version: Literal[1] = 1
    description: str
    entries: list[Entry] = Field(min_length=1)


class Verdict(BaseModel):
    id: str
    model: str
    hardware: str
    engine: str
    layout: str
    ok: bool
    stage: str = Field(description="import, validate, estimate, export or compare: where it stopped ('done')")
    detail: str = ""
    needs: str | None = None
    waiting: bool = Field(False, description="it fails only where the capability it needs is missing")
    warnings: list[str] = Field(default_factory=list)


@lru_cache(maxsize=1)
def load_corpus() -> Corpus:
    with open(CORPUS_PATH, encoding="utf-8") as f:
        return Corpus.model_validate(json.load(f))


def corpus_json_schema() -> dict[str, Any]:
    schema = Corpus.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://pdag.dev/schema/conformance-v1.json"
    return schema


# ------------------------------------------------------------------------------------------- comparing
def _weights_of(plan: dict[str, Any]) -> str:
    """The weight storage the plan states: ``weights`` (tools/core/quantization.py), else its dtype."""
    return str(plan.get("weights") or plan.get("dtype", "bf16"))


def layout_flags(engine: str, command: str, config: dict[str, Any] | None = None,
                 torch_dtype: str = "bf16", stored: str = "none") -> dict[str, str]:
    """What a launch command (and its --config options) says about the parallel layout, the weights and the
    checkpoint, with engine defaults filled in, so that a published command and pdag's export compare key by key.
    ``stored``: the format the checkpoint stores, which the engine serves when no --quantization is given."""
    from tools.engines import launch as e

    tokens = e.split_command(command)
    found, args, positional = e.detect_engine(tokens)
    if found != engine:
        raise PdagInputError("command", f"a {found} command where {engine} was expected", engine)
    if engine == "trtllm":
        values, _ = e.trtllm_values(args, config, dynamo=any(t in e.DYNAMO for t in tokens))
        return {"checkpoint": (positional or values.get("model", "")).rstrip("/"),
                "tp_size": values.get("tp", "1"), "pp_size": values.get("pp", "1"), "ep_size": values.get("ep", "1"),
                # attention DP over a world of one GPU is the plain single-GPU layout
                "enable_attention_dp": "on" if values.get("adp_on") and values.get("tp", "1") != "1" else "off",
                "kv_cache_dtype": "fp8" if values.get("kv", "auto").lower().startswith("fp8") else "auto"}
    if engine == "vllm":
        values, unread = e.parse_flags(e.vllm_dotted(e.vllm_dashes(e.vllm_config_args(config) + args)), e.VLLM_FLAGS,
                                        e.VLLM_BOOL, {}, "vLLM", abbrev=True)
        positional = positional or values.get("model") or e.bare_model(unread)
    else:
        values, _ = e.parse_flags(args, e.SGLANG_FLAGS, e.SGLANG_BOOL, {}, "SGLang", abbrev=True)
    dtype = e.DTYPE_FROM_FLAG.get(values.get("dtype", "auto").lower(), torch_dtype)
    kv = values.get("kv", "auto").lower()
    out = {
        "checkpoint": (positional or values.get("model", "")).rstrip("/"),
        "tp": values.get("tp", "1"), "pp": values.get("pp", "1"), "dp": values.get("dp", "1"),
        # the format a --quantization value selects (awq_marlin and moe_wna16 both serve AWQ weights)
        "quantization": format_of_flag(engine, values.get("quant", "")) or values.get("quant", stored).lower(),
        "dtype": dtype,
        "kv_cache_dtype": "fp8" if kv.startswith("fp8") else "auto",
    }
    if engine == "vllm":
        out["expert_parallel"] = "on" if values.get("ep_on") else "off"
    else:
        a2a = values.get("a2a", "none").lower() in e._SGLANG_EP_A2A
        out["ep"] = out["tp"] if values.get("ep_is_tp") else values.get("ep", out["tp"] if a2a else "1")
        # --enable-dp-attention with --dp 1 is plain TP (attn_tp_size = tp_size // dp_size)
        out["dp_attention"] = "on" if values.get("adp_on") and out["dp"] != "1" else "off"
        roles = [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--disaggregation-mode"]
        out["disaggregation_mode"] = roles[0] if roles else "none"
    return out


def _layout(parallel: dict[str, int], decode: dict[str, int] | None = None) -> str:
    one = " ".join(f"{k}{v}" for k, v in parallel.items() if v != 1) or "1 GPU"
    if decode is None:
        return one
    return f"P: {one} | D: {_layout(decode)}"


def _degrees(parallel: dict[str, int] | None) -> dict[str, int] | None:
    return None if parallel is None else {k: n for k, n in parallel.items() if n != 1}


def run_entry(entry: Entry) -> Verdict:
    """Import, validate, estimate, export and compare one entry; the verdict says where it stopped and why."""
    from tools.core.plan import parse_plan
    from tools.engines.launch import export_plan, import_command, import_disaggregated
    from tools.estimate.core import estimate_performance
    from tools.rules.validate import validate_dag

    s = entry.setting
    x = entry.expected
    v = Verdict(id=entry.id, model=x.model, hardware=f"{s.num_gpus}x {s.gpu}" + ("" if s.gpu_stated else "?"),
                engine=entry.engine, layout=_layout(x.parallel, x.decode_parallel), ok=False, stage="import",
                needs=entry.needs)
    try:
        if entry.decode_command is None:
            plan = import_command(entry.command, gpu=s.gpu, gpus_per_node=s.gpus_per_node,
                                  engine_config=entry.engine_config, replicas=entry.replicas).plan
        else:
            plan = import_disaggregated(entry.command, entry.decode_command, gpu=s.gpu,
                                        gpus_per_node=s.gpus_per_node, engine_config=entry.engine_config,
                                        decode_engine_config=entry.decode_engine_config or entry.engine_config,
                                        replicas=entry.replicas, decode_replicas=entry.decode_replicas).plan
        got = {"model": plan["model"], "checkpoint": plan.get("checkpoint"), "parallel": _degrees(plan["parallel"]),
               "decode_parallel": _degrees((plan.get("phases") or {}).get("decode")),
               "weights": _weights_of(plan), "kv_dtype": "fp8" if plan.get("kv_dtype") == "fp8" else None,
               "gpus": plan["hardware"]["num_gpus"], "speculative": plan.get("speculative"),
               "prefix_caching": plan.get("prefix_caching")}
        want = {"model": x.model, "checkpoint": x.checkpoint, "parallel": _degrees(x.parallel),
                "decode_parallel": _degrees(x.decode_parallel), "weights": x.weights, "kv_dtype": x.kv_dtype,
                "gpus": s.num_gpus, "speculative": x.speculative, "prefix_caching": x.prefix_caching}
        if got != want:
            diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
            v.detail = "imported plan differs (got, published): " + json.dumps(diff)
            v.waiting = entry.needs == "quantization" and set(diff) == {"weights"}
            return v
        v.stage = "validate"
        result = validate_dag(plan)
        errors = [f"{x.rule_id}: {x.message}" for x in result.violations if x.severity == "error"]
        v.warnings = sorted({x.rule_id for x in result.violations if x.severity != "error"})
        if errors:
            v.detail = "; ".join(errors)[:400]
            return v
        unexplained = sorted(set(v.warnings) - set(entry.warnings))
        if unexplained or set(entry.warnings) - set(v.warnings):
            v.detail = f"warnings {v.warnings} differ from the ones the entry explains {sorted(entry.warnings)}"
            return v
        v.stage = "estimate"
        estimate_performance(plan=plan)
        v.stage = "export"
        exported = export_plan(plan, entry.engine)
        v.stage = "compare"
        servers = exported.pool_servers or {"prefill": exported.servers}
        pairs = [(entry.command, entry.engine_config, entry.replicas, exported.argv[0], exported.config,
                  servers["prefill"])]
        if entry.decode_command is not None:
            pairs.append((entry.decode_command, entry.decode_engine_config or entry.engine_config,
                          entry.decode_replicas, exported.argv[-1], exported.decode_config, servers["decode"]))
        stored = checkpoint_format(plan.get("checkpoint"), parse_plan(plan).spec) or "none"
        for published_command, published_config, replicas, argv, config, ours_servers in pairs:
            published = layout_flags(entry.engine, published_command, published_config, stored=stored)
            ours = layout_flags(entry.engine, shlex.join(argv), config, stored=stored)
            if "dp" in published:
                # replicas count alike whether they are separate servers or one server's own DP flag
                published["dp"] = str(int(published["dp"]) * replicas)
                ours["dp"] = str(int(ours["dp"]) * ours_servers)
            if published != ours:
                diff = {k: (ours.get(k), published.get(k)) for k in published if published.get(k) != ours.get(k)}
                v.detail = "export differs (pdag, published): " + json.dumps(diff)
                return v
    except PdagInputError as exc:
        v.detail = str(exc)[:400]
        return v
    v.ok, v.stage = True, "done"
    return v


def run_corpus() -> list[Verdict]:
    return [run_entry(e) for e in load_corpus().entries]
