"""Speculative decoding and prefix caching in the engines' own words, both ways.

vLLM: ``--speculative-config '{"method": ..., "num_speculative_tokens": k, "model": ...}'`` and
``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` (https://docs.vllm.ai/en/latest/features/
speculative_decoding/).  SGLang: ``--speculative-algorithm NEXTN|EAGLE|EAGLE3|STANDALONE|NGRAM``,
``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens`` (the tokens verified
per step, k + 1 for a chain) and ``--speculative-draft-model-path``; the radix cache is on unless
``--disable-radix-cache`` (https://docs.sglang.ai/advanced_features/speculative_decoding.html).  TensorRT-LLM: the
LLM-API YAML's ``speculative_config`` (``decoding_type`` MTP with ``num_nextn_predict_layers``, Eagle, DraftTarget,
NGram with ``max_draft_len``) and ``kv_cache_config.enable_block_reuse``
(https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html)."""

from __future__ import annotations

import json
import re
from typing import Any

from tools.core.engine_profile import engine_profile
from tools.core.errors import PdagInputError
from tools.core.plan import REPO_PATTERN, Plan

__all__ = ["SGLANG_BOOL", "SGLANG_FLAGS", "VLLM_BOOL", "VLLM_FLAGS", "export_flags", "import_features",
           "trtllm_config", "trtllm_values"]

VLLM_FLAGS = {"--speculative-config": "spec_json"}
VLLM_BOOL = {"--enable-prefix-caching": "prefix_on", "--no-enable-prefix-caching": "prefix_off"}
SGLANG_FLAGS = {"--speculative-algorithm": "spec_algo", "--speculative-algo": "spec_algo",
                "--speculative-num-steps": "spec_steps", "--speculative-eagle-topk": "spec_topk",
                "--speculative-num-draft-tokens": "spec_verify", "--speculative-draft-model-path": "spec_path",
                "--speculative-draft": "spec_path"}
SGLANG_BOOL = {"--disable-radix-cache": "prefix_off"}

_VLLM_METHOD = {"mtp": "deepseek_mtp", "eagle": "eagle", "eagle3": "eagle3", "draft_model": "draft_model",
                "ngram": "ngram"}
_SGLANG_ALGO = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE", "ngram": "NGRAM"}
_TRT_TYPE = {"mtp": "MTP", "eagle": "Eagle", "eagle3": "Eagle3", "draft_model": "DraftTarget", "ngram": "NGram"}
_NGRAM_LOOKUP_MAX = 4  # vLLM needs a lookup window for n-gram drafting; its docs' example uses 4


def _method_of(name: str, engine: str, field: str) -> str:
    n = name.strip().lower()
    if n.endswith("mtp") or n in ("nextn", "mtp"):
        return "mtp"
    found = {"eagle": "eagle", "eagle3": "eagle3", "draft_model": "draft_model", "standalone": "draft_model",
             "drafttarget": "draft_model", "draft_target": "draft_model", "ngram": "ngram", "n-gram": "ngram"}.get(n)
    if found is None:
        raise PdagInputError(field, f"{engine} speculative method {name!r} has no plan field",
                             "mtp (deepseek_mtp, NEXTN, MTP), eagle, eagle3, draft model, ngram")
    return found


def _int(value: Any, field: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PdagInputError(field, f"expected an integer, got {value!r}", "an integer") from None


def import_features(values: dict[str, str], engine: str, notes: list[str], mtp_layers: int = 0) -> dict[str, Any]:
    """The plan's ``speculative`` and ``prefix_caching`` from an engine's parsed values (``mtp_layers``: the
    multi-token-prediction layers the served checkpoint ships)."""
    out: dict[str, Any] = {}
    spec: dict[str, Any] | None = None
    cfg: Any = None
    if engine == "vllm" and values.get("spec_json"):
        try:
            cfg = json.loads(values["spec_json"])
        except json.JSONDecodeError:
            cfg = None
        if not isinstance(cfg, dict):  # e.g. quotes lost when a YAML recipe was pasted: say so, keep the rest
            notes.append(f"--speculative-config {values['spec_json']!r} is not a JSON object: speculation ignored")
    if isinstance(cfg, dict):
        method = _method_of(str(cfg.get("method") or ("draft_model" if cfg.get("model") else "")),
                            "vLLM", "command.--speculative-config.method")
        spec = {"method": method, "num_draft_tokens": _int(cfg.get("num_speculative_tokens", 1),
                                                            "command.--speculative-config.num_speculative_tokens")}
        if cfg.get("model"):
            spec["draft_checkpoint"] = str(cfg["model"])
        if cfg.get("draft_tensor_parallel_size") is not None and method == "draft_model":
            spec["draft_tp"] = _int(cfg["draft_tensor_parallel_size"], "command.--speculative-config")
    elif engine == "sglang" and values.get("spec_algo"):
        method = _method_of(values["spec_algo"], "SGLang", "command.--speculative-algorithm")
        steps = _int(values.get("spec_steps", "1"), "command.--speculative-num-steps")
        topk = _int(values.get("spec_topk", "1"), "command.--speculative-eagle-topk")
        verify = _int(values.get("spec_verify", str(steps + 1)), "command.--speculative-num-draft-tokens")
        spec = {"method": method, "num_draft_tokens": max(1, verify - 1), "topk": topk, "num_steps": steps}
        path = values.get("spec_path")
        if method == "eagle" and mtp_layers and (not path or "nextn" in path.lower()):
            # SGLang runs a checkpoint's own MTP (NextN) layers through its EAGLE worker: its DeepSeek guide enables
            # MTP with --speculative-algorithm EAGLE, the draft being the model's NextN layers
            # (docs/basic_usage/deepseek_v3.md, 'Multi-token Prediction', https://github.com/sgl-project/sglang)
            spec["method"], path = "mtp", None
            notes.append(f"--speculative-algorithm {values['spec_algo']} with no separate EAGLE head on a checkpoint "
                         f"that ships {mtp_layers} MTP layer(s): SGLang drafts with those layers, read as "
                         "speculative.method mtp (priced with MTP's acceptance)")
        if path:
            spec["draft_checkpoint"] = path
    elif engine == "trtllm" and values.get("spec_trt"):
        cfg = json.loads(values["spec_trt"])
        method = _method_of(str(cfg.get("decoding_type", "")), "TensorRT-LLM",
                            "engine_config.speculative_config.decoding_type")
        k = cfg.get("num_nextn_predict_layers") if method == "mtp" else cfg.get("max_draft_len")
        spec = {"method": method, "num_draft_tokens": _int(k or 1, "engine_config.speculative_config")}
        path = cfg.get("speculative_model_dir") or cfg.get("speculative_model")
        if path:
            spec["draft_checkpoint"] = str(path)
    if spec is not None:
        path = spec.get("draft_checkpoint")
        if path is not None and not re.match(REPO_PATTERN, path):
            notes.append(f"draft checkpoint {path!r} is not a Hugging Face repo or absolute path (a shell variable?): "
                         "left out; set speculative.draft_checkpoint before exporting")
            del spec["draft_checkpoint"]
        if spec["method"] == "draft_model":
            notes.append("draft model: state speculative.draft_model (its preset or config) to price its weights "
                         "and passes; without it only the verification is priced")
        out["speculative"] = spec
    if values.get("prefix_off"):
        out["prefix_caching"] = {"enabled": False}
    elif values.get("prefix_on"):
        out["prefix_caching"] = {"enabled": True}
    elif engine_profile(engine).prefix_caching_default:
        out["prefix_caching"] = {"enabled": True}
        notes.append(f"prefix caching: on, the {engine_profile(engine).name} default when no flag turns it off (no "
                     "reuse priced until prefix_caching states a shared_prefix_len or hit_rate)")
    return out


def export_flags(plan: Plan, engine: str, notes: list[str]) -> list[str]:
    """vLLM's or SGLang's flags for the plan's speculative decoding and prefix caching (a prefix-caching flag only
    where the plan departs from the engine's default, so an imported command exports as it was written)."""
    sd, pc = plan.speculative, plan.prefix_caching
    flags: list[str] = []
    if sd is not None and engine == "vllm":
        cfg: dict[str, Any] = {"method": _VLLM_METHOD[sd.method], "num_speculative_tokens": sd.num_draft_tokens}
        if sd.draft_checkpoint:
            cfg["model"] = sd.draft_checkpoint
        if sd.draft_tp is not None:
            cfg["draft_tensor_parallel_size"] = sd.draft_tp
        if sd.method == "ngram":
            cfg["prompt_lookup_max"] = _NGRAM_LOOKUP_MAX
        flags += ["--speculative-config", json.dumps(cfg)]
    elif sd is not None and engine == "sglang":
        flags += ["--speculative-algorithm", _SGLANG_ALGO[sd.method],
                  "--speculative-num-steps", str(sd.num_steps or sd.num_draft_tokens),
                  "--speculative-eagle-topk", str(sd.topk),
                  "--speculative-num-draft-tokens", str(sd.num_draft_tokens + 1)]
        if sd.draft_checkpoint:
            flags += ["--speculative-draft-model-path", sd.draft_checkpoint]
    if sd is not None and sd.method in ("eagle", "eagle3", "draft_model") and not sd.draft_checkpoint:
        notes.append(f"speculative {sd.method}: add the draft's checkpoint (speculative.draft_checkpoint)")
    if pc is not None and engine == "vllm" and pc.enabled != engine_profile("vllm").prefix_caching_default:
        flags.append("--enable-prefix-caching" if pc.enabled else "--no-enable-prefix-caching")
    elif pc is not None and engine == "sglang" and not pc.enabled:
        flags.append("--disable-radix-cache")
    elif pc is not None and pc.enabled and engine in ("vllm", "sglang"):
        notes.append(f"prefix caching: on by {engine_profile(engine).name}'s default, so no flag is written")
    return flags


def trtllm_config(plan: Plan, config: dict[str, Any]) -> None:
    """TensorRT-LLM's LLM-API options for the features, written into ``config``."""
    sd, pc = plan.speculative, plan.prefix_caching
    if sd is not None:
        spec: dict[str, Any] = {"decoding_type": _TRT_TYPE[sd.method]}
        if sd.method == "mtp":
            spec["num_nextn_predict_layers"] = sd.num_draft_tokens
        else:
            spec["max_draft_len"] = sd.num_draft_tokens
        if sd.draft_checkpoint:
            spec["speculative_model_dir"] = sd.draft_checkpoint
        config["speculative_config"] = spec
    if pc is not None:
        config.setdefault("kv_cache_config", {})["enable_block_reuse"] = pc.enabled


def trtllm_values(config: dict[str, Any]) -> dict[str, str]:
    """The features' values from a TensorRT-LLM ``--config`` mapping (for ``import_features``)."""
    out: dict[str, str] = {}
    sc = config.get("speculative_config")
    if isinstance(sc, dict):
        out["spec_trt"] = json.dumps(sc)
    kv = config.get("kv_cache_config")
    if isinstance(kv, dict) and isinstance(kv.get("enable_block_reuse"), bool):
        out["prefix_on" if kv["enable_block_reuse"] else "prefix_off"] = "1"
    return out
