"""Translate plans to and from the launch commands of serving engines (vLLM, SGLang, TensorRT-LLM).

Each engine counts GPUs and places experts its own way; ``knowledge/engines.md`` documents every mapping
with its source.  In short (pdag: a replica uses ``pp * W`` GPUs, ``W = max(tp, sp, ep)``):

* **vLLM** ``vllm serve``: GPUs = ``tp * pp * dp``.  Attention and dense layers use TP; MoE layers are
  tensor-sharded over the TP ranks unless ``--enable-expert-parallel``, which makes the EP size
  ``tp * dp`` (derived, not settable).  A plan with ``ep == tp`` and ``dp == 1`` is TP+EP; an attention-DP
  plan (``attn_dp = a``, ``ep = a * tp``) is vLLM's DP+EP: ``--data-parallel-size a`` engines, each with its
  own attention, scheduler and KV cache, whose MoE layers form one EP group of ``a * tp`` GPUs.
* **SGLang** ``python -m sglang.launch_server``: plain ``--dp`` launches ``dp`` independent replicas of
  ``tp * pp`` GPUs; ``--ep`` splits the experts inside the TP group (MoE-TP = ``tp / ep``).
  ``--enable-dp-attention`` carves ``--dp`` attention groups out of the TP world (GPU count ``tp``, attention
  TP ``tp / dp``): pdag's attention-DP.
* **TensorRT-LLM** ``trtllm-serve``: ``--tp_size --pp_size --ep_size`` with ``tp = moe_tp * moe_ep``; there
  is no plain DP flag, so DP replicas are separate servers (one command each).  ``enable_attention_dp: true``
  in the ``--config`` YAML runs attention data-parallel over the ``tp_size`` ranks (attention TP 1).
* **Disaggregated** plans export as one command per pool (prefill GPUs first), with the engine's role and
  KV-connector flags (vLLM ``--kv-transfer-config``, SGLang ``--disaggregation-mode``, TensorRT-LLM
  ``cache_transceiver_config`` behind ``trtllm-serve disaggregated``).

Plans an engine cannot express raise ``EngineCannotExpress`` (a ``PdagInputError``) naming the reason.
"""

from __future__ import annotations

import json
import re
import shlex
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field

from tools.core.efficiency import plan_efficiency
from tools.core.engine_features import EngineFeatures, engine_features
from tools.core.engine_profile import engine_profile
from tools.core.errors import PdagInputError, closest
from tools.core.formats import checkpoint_format, engine_flag, format_info, format_of_checkpoint, format_of_flag
from tools.core.hardware import accelerator_id
from tools.core.layout import Layout
from tools.core.memory import engine_window_kv, one_sequence_tokens
from tools.core.models import (
    MODELS_DIR,
    base_name,
    from_hf_config,
    hub_repo,
    match_preset,
    preset_ids,
    preset_index,
    why_no_preset,
)
from tools.core.plan import Plan, Workload, parse_plan
from tools.engines import features
from tools.engines.flags import FlagTable, check_argv, flag_table

__all__ = [
    "ENGINES",
    "EngineCannotExpress",
    "ExportResult",
    "PlanRefused",
    "engine_key",
    "export_unchecked",
    "launched_as",
    "ImportResult",
    "export_plan",
    "import_command",
    "import_deployment",
    "import_disaggregated",
    "model_for_repo",
]

Engine = Literal["vllm", "sglang", "trtllm"]
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trtllm")

_DTYPE_FLAG = {"bf16": "bfloat16", "fp16": "float16"}
DTYPE_FROM_FLAG = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16"}


class EngineCannotExpress(PdagInputError):
    """The plan is valid for pdag but the engine has no way to launch it."""


class PlanRefused(PdagInputError):
    """validate_dag refuses the plan: export writes no command for it unless forced."""

    def __init__(self, violations: list[Any]) -> None:
        self.violations = violations
        listed = "; ".join(f"{v.rule_id}: {v.message}" for v in violations)
        super().__init__("plan", f"validate_dag refuses this plan ({len(violations)} error(s): {listed})",
                         "a plan validate_dag accepts (autofix_dag repairs it), or force (--force, force: true) to "
                         "write the command anyway")


class ExportResult(BaseModel):
    engine: str
    command: str = Field(description="the launch command (one line per server when the engine needs several)")
    argv: list[list[str]] = Field(description="each server's command as an argument list")
    gpus: int = Field(description="GPUs the engine will use (its own counting)")
    config: dict[str, Any] | None = Field(
        None, description="TensorRT-LLM: the LLM-API options the command's --config YAML file must hold "
                          "(disaggregated: the prefill pool's)")
    decode_config: dict[str, Any] | None = Field(
        None, description="disaggregated TensorRT-LLM: the decode pool's --config YAML options")
    pool_servers: dict[str, int] | None = Field(
        None, description="disaggregated: the servers of each pool, prefill's first in argv")
    pool_commands: dict[str, int] | None = Field(
        None, description="disaggregated: the argv entries of each pool (a server over n nodes has n)")
    servers: int = Field(1, description="independent servers (each its own endpoint, behind a load balancer); a "
                                        "server spread over nodes has one argv per node")
    engine_version: str | None = Field(None, description="the engine release whose flag table the command follows")
    flag_problems: list[str] = Field(default_factory=list, description="flags or values that release does not accept "
                                     "(empty when the command checks against its flag table)")
    notes: list[str] = Field(default_factory=list)


class ImportResult(BaseModel):
    engine: str
    plan: dict[str, Any] = Field(description="the plan the command describes; validate or estimate it next")
    notes: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------- models
def model_for_repo(repo: str) -> tuple[str, str | None]:
    """The preset id for a Hugging Face repo name, plus a note when matched loosely; unknown names raise."""
    found = match_preset(repo)
    if found is not None:
        return found
    known = why_no_preset(hub_repo(repo), "command.model")
    if known is not None:
        raise known
    if repo.startswith("$"):
        raise PdagInputError("command.model", f"the model is the shell variable {repo!r}, which pdag cannot expand",
                             "the command with its variables expanded (e.g. echo it from the shell that runs it)")
    raise PdagInputError(
        "command.model", f"no preset matches the model {repo!r}",
        "closest presets: " + ", ".join(closest(base_name(repo), preset_ids())) + "; or bring the checkpoint's "
        "config.json: pdag import ... --hf-config FILE, or hf_config over MCP (import_deployment)",
    )


def _model_of(repo: str, hf_config: dict[str, Any] | None) -> tuple[str | dict[str, Any], str | None]:
    """The plan's model: the preset ``repo`` names, or, when the user brings the checkpoint's config.json, that
    config (a model with no preset imports, and the command's repo stays the checkpoint an export serves)."""
    if hf_config is None:
        return model_for_repo(repo)
    if not isinstance(hf_config, dict):
        raise PdagInputError("hf_config", f"expected a JSON object, got {type(hf_config).__name__}",
                             "the checkpoint's config.json as a JSON object")
    config = {"_name_or_path": repo.strip().rstrip("/"), **hf_config}
    from_hf_config(config, field_prefix="hf_config")  # a bad config is named as hf_config.<field>, not model.*
    return {"hf_config": config}, f"model {repo!r} read from the config.json given (hf_config), not from a preset"


def _limit_notes(plan: Plan, max_seqs: int, max_len: int, seqs_flag: str, len_flag: str) -> list[str]:
    """Why the written caps differ from the workload: they are sized to what the memory holds (the command serves
    more than one operating point), which agents took for a disagreement with the estimate."""
    caps, wl, out = plan.engine_options, plan.workload, []
    if caps.max_num_seqs is None and max_seqs > wl.batch_size:
        what = (f"{seqs_flag} {max_seqs}: the sequences the KV cache can run at once (pages taken as they grow, so "
                "more than estimate's max_batch_size_that_fits at full length)")
        if wl.request_rate is not None or plan.batch_from_load:  # served at the load: the engine admits up to the cap
            out.append(f"{what}; the served figures at the workload's load are priced with the engine admitting "
                       "requests up to what its pages hold, as this command lets it")
        else:
            out.append(f"{what}, not the {wl.batch_size} per replica the plan is priced at; "
                       f"engine_options.max_num_seqs = {wl.batch_size} holds the priced TPOT under a larger load")
    need = wl.input_len + wl.output_len
    if caps.max_model_len is None and max_len > need:
        out.append(f"{len_flag} {max_len}: the model's window (or the longest sequence the memory holds); the "
                   f"workload needs {need} tokens (engine_options.max_model_len to write less)")
    return out


def _serving_limits(plan: Plan, engine: str) -> tuple[int, int]:
    """Engine limits from the model and the memory, not from the estimated workload (which is one operating
    point): the longest sequence is the model's context window, cut to what one sequence's KV fits beside the
    weights; the sequence cap is what the serving estimate lets run at once on ``engine``: the batch whose KV fits
    at the workload's context, or more where the engine takes KV pages on demand (``running_capacity``)."""
    from tools.core.efficiency import efficiency_for
    from tools.core.memory import memory_report
    from tools.estimate.serving import POLICY_OF_ENGINE, running_capacity, sequence_cap
    from tools.estimate.simulate import BLOCK_TOKENS

    caps = plan.engine_options
    fits_len = one_sequence_tokens(plan, engine_window_kv(plan, engine)[0])
    fits_len -= fits_len % BLOCK_TOKENS[POLICY_OF_ENGINE.get(engine, "vllm")]  # KV is held in whole pages
    max_len = min(plan.spec.max_position_embeddings, fits_len) if fits_len else plan.spec.max_position_embeddings
    running = running_capacity(plan, efficiency_for(plan.accelerator.id, engine=engine),
                               memory_report(plan).max_batch_size_that_fits)
    # no more than the engine's own default cap, which the serving simulation runs with: a larger one would let
    # the engine admit what was never priced (and capture CUDA graphs for batches no load reaches)
    running = min(running, sequence_cap(plan, POLICY_OF_ENGINE.get(engine, "vllm")))
    return caps.max_num_seqs or max(plan.workload.batch_size, running), caps.max_model_len or max_len


def _window_notes(plan: Plan, engine: str, env: list[str]) -> list[str]:
    """Why an environment assignment precedes the command, or why the context cap is lower than the memory model's
    room: the engine allocates windowed layers' KV unlike pdag prices it."""
    if env:
        return [f"{' '.join(env)}: {_ENGINE_NAMES[engine]} keeps the {plan.spec.local_attention} layers' KV to their "
                f"{plan.spec.sliding_window}-token window, as the plan is priced; without it vLLM turns its hybrid KV "
                "manager off for chunked local attention and allocates full-length KV on every layer"]
    if engine_window_kv(plan, engine)[0]:
        return []
    return [f"{_ENGINE_NAMES[engine]} allocates full-length KV on the {plan.spec.local_attention} layers (pdag prices "
            f"them at their {plan.spec.sliding_window}-token window): the context cap is what one request holds that "
            "way, and the engine holds fewer long requests at once than estimated"]


def _hf_repo(plan: Plan) -> str:
    """The repo the command loads.  A model given as a bare config.json names none (its model_type is no repo), so
    the command waits for plan.checkpoint rather than serving a name that does not exist."""
    repo = plan.served_repo
    if repo:
        return repo
    if not isinstance(plan.model, str) and not plan.model.hf_config.get("_name_or_path"):
        raise PdagInputError("plan.checkpoint", "the model is given as a config.json, which names no checkpoint for "
                             "the engine to load", "plan.checkpoint: the checkpoint's Hugging Face repo id or an "
                             "absolute local path (CLI: --checkpoint)")
    return plan.model_id


# ---------------------------------------------------------------------------------------------- export
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
TRTLLM_CONFIG_FILE = "pdag-trtllm.yml"
# launchers that take no explicit pipeline layer split (vLLM has VLLM_PP_LAYER_PARTITION)
_NO_LAYER_SPLIT = {"sglang": "SGLang's launcher", "trtllm": "trtllm-serve"}


def _common_checks(plan: Plan, key: str) -> None:
    """What no exporter can launch, checked once for all of them (``key``: vllm, sglang, trtllm)."""
    engine = _ENGINE_NAMES[key]
    if not plan.spec.is_moe and max(plan.degrees(ph).ep for ph in ("prefill", "decode")) > 1:
        raise EngineCannotExpress("parallel.ep", "ep > 1 on a dense model", "ep = 1")
    if key in _NO_LAYER_SPLIT and plan.options.layer_split is not None and plan.parallel.pp > 1:
        raise EngineCannotExpress("options.layer_split", f"{_NO_LAYER_SPLIT[key]} takes no explicit layer split",
                                  "the default even split (remove options.layer_split)")
    _dcp_checks(plan, key)
    phases = plan.phases.model_dump(exclude_none=True)
    overrides = {p: {k: v for k, v in d.items() if v is not None} for p, d in phases.items()}
    changed = {
        p: d for p, d in overrides.items()
        if any(getattr(plan.parallel, k) != v for k, v in d.items())
    }
    if any("sp" in d for d in changed.values()) or plan.parallel.sp > 1:
        raise EngineCannotExpress(
            "parallel.sp",
            f"{engine} has no sequence-parallel attention that re-partitions the TP GPUs as pdag's SP does "
            "(vLLM's decode/prefill context parallel and TensorRT-LLM's context parallel shard the KV cache or "
            "add ranks with different semantics)",
            "sp = 1 in every phase",
        )
    if changed:
        raise EngineCannotExpress(
            "phases", f"{engine} serves both phases with one layout; per-phase overrides {changed} cannot be launched",
            "no per-phase overrides, or options.disaggregated (one server per pool)",
        )


def _dcp_checks(plan: Plan, key: str) -> None:
    """Decode context parallel: vLLM's -dcp; SGLang's --dcp-size stripes MLA caches only
    (https://docs.sglang.io/docs/advanced_features/dcp.md), in releases newer than the one whose flag table pdag
    writes for; TensorRT-LLM has no flag pdag knows for it."""
    dcp = plan.degrees("decode").dcp
    if dcp <= 1:
        return
    if key == "trtllm":
        raise EngineCannotExpress("parallel.dcp", "TensorRT-LLM has no decode context parallel option that pdag "
                                  "knows of (KV striped by token inside the TP group)", "dcp = 1, or vLLM")
    table = flag_table(key)
    if key == "sglang" and not table.has("--dcp-size"):
        raise EngineCannotExpress("parallel.dcp", f"SGLang {table.version} (the release pdag writes for) has no "
                                  "--dcp-size; later SGLang releases stripe MLA caches with it "
                                  "(https://docs.sglang.io/docs/advanced_features/dcp.md)", "dcp = 1, or vLLM")
    if key == "sglang" and plan.spec.attention != "mla":
        raise EngineCannotExpress("parallel.dcp", "SGLang's decode context parallel (--dcp-size) stripes MLA KV "
                                  "caches only; this model's attention is " + plan.spec.attention,
                                  "dcp = 1, or vLLM (-dcp also serves GQA models)")


def _dcp_flags(plan: Plan, key: str) -> list[str]:
    dcp = plan.degrees("decode").dcp
    if dcp <= 1:
        return []
    return ["--decode-context-parallel-size" if key == "vllm" else "--dcp-size", str(dcp)]


def _moe_layout(plan: Plan, engine: str) -> tuple[int, int]:
    """(ep, moe_tp) of a MoE plan, checked against what engines can do inside one TP group (with attention-DP
    the group is the engine's TP world, ``attn_dp * tp`` GPUs)."""
    tp, ep = plan.parallel.tp * plan.parallel.attn_dp, plan.parallel.ep
    if ep > tp:
        raise EngineCannotExpress(
            "parallel.ep",
            f"ep={ep} is wider than the {tp} GPUs of the engine's TP world and not a multiple of the attention TP: "
            f"{engine} spreads experts beyond its TP world only through attention-DP groups of equal TP",
            "ep a multiple of tp (exported as attention-DP with attn_dp = ep / tp), or ep <= tp",
        )
    if tp % ep:
        raise EngineCannotExpress("parallel.ep", f"ep={ep} does not divide tp={tp}", "ep dividing tp")
    moe_tp = tp // ep
    if moe_tp > 1 and not plan.options.allow_expert_tp:
        raise EngineCannotExpress(
            "options.allow_expert_tp",
            f"with tp={tp} and ep={ep}, {engine} splits every expert over {moe_tp} TP ranks (expert TP), "
            "but the plan keeps experts whole on the first ep GPUs",
            "options.allow_expert_tp = true, or ep = tp",
        )
    return ep, moe_tp


def _export_aggregated(plan: Plan, key: str, pool: str | None = None) -> ExportResult:
    """One aggregated plan (or pool) in the engine's own form: EP wider than TP as attention-DP, and replicas as
    separate servers where the engine's data-parallel flag means something else (SGLang with DP attention; vLLM
    on a MoE model, whose data-parallel ranks share one expert group)."""
    engine_form, form_note = _attention_dp_form(plan, key)
    p = engine_form.parallel
    spread = p.dp * p.tp * p.attn_dp * p.pp > engine_form.hardware.gpus_per_node
    wide = p.tp * p.pp > engine_form.hardware.gpus_per_node
    if p.dp > 1 and (key == "sglang" and (p.attn_dp > 1 or spread)
                     or key == "vllm" and (engine_form.spec.is_moe or wide)):
        result = _export_replicas(engine_form, key, pool)
    else:
        result = _EXPORTERS[key](engine_form, Layout(engine_form), pool)
    if form_note:
        result.notes.insert(0, form_note)
    return result


def _export_replicas(plan: Plan, key: str, pool: str | None) -> ExportResult:
    """dp independent replicas of an attention-DP plan: vLLM's --data-parallel-size and SGLang's --dp already
    name the attention groups, so each replica is its own server, pinned to its GPUs, on its own port."""
    data = plan.model_dump(mode="json", exclude_none=True)
    data["parallel"] = {**data["parallel"], "dp": 1}
    data["hardware"] = {**data["hardware"], "num_gpus": Layout(plan).gpus_needed // plan.parallel.dp}
    one_plan = parse_plan(data)
    one = _EXPORTERS[key](one_plan, Layout(one_plan), pool)
    layout = Layout(plan)
    argvs: list[list[str]] = []
    lines: list[str] = []
    for r in range(plan.parallel.dp):
        if len(one.argv) > 1:  # a replica over several nodes: its per-node commands, with its own head node
            for k, node_argv in enumerate(one.argv):
                argv = [a.replace(HEAD, f"REPLICA{r}_{HEAD}") for a in node_argv] + ["--port", str(8000 + r)]
                argvs.append(argv)
                lines.append(f"# replica {r}, node {k}\n{shlex.join(argv)}")
            continue
        env, where = _pinned(layout.replica_devices(r), plan.hardware.gpus_per_node, layout.gpus_needed)
        argv = [env, *one.argv[0], "--port", str(8000 + r)]
        argvs.append(argv)
        lines.append(_pinned_line(env, where, argv[1:], f"replica {r}"))
    if plan.parallel.attn_dp > 1:
        why = f"the engine's data-parallel flag holds the {plan.parallel.attn_dp} attention-DP groups of one replica"
    elif plan.spec.is_moe and key == "vllm":
        why = "vLLM's data-parallel ranks of a MoE model share one expert group"
    else:
        why = "the replicas span more than one node"
    notes = [f"{plan.parallel.dp} independent replicas, one server each ({why}); put a load balancer in front",
             *one.notes]
    return ExportResult(engine=key, command="\n".join(lines), argv=argvs, gpus=one.gpus * plan.parallel.dp,
                        config=one.config, servers=plan.parallel.dp, notes=notes)


def _pinned(devices: list[int] | range, gpus_per_node: int, total_gpus: int) -> tuple[str, str | None]:
    """The ``CUDA_VISIBLE_DEVICES=`` prefix of a server pinned to ``devices`` (pdag's global GPU ids), in the ids
    a node sees (0 .. gpus_per_node - 1), and where to run it when the deployment's ``total_gpus`` take more
    than one node (None on a single node).  A server spread over nodes sees the same local ids on each, unless
    its GPUs are not aligned to the nodes; then each node's ids are listed."""
    by_node: dict[int, list[int]] = {}
    for g in devices:
        by_node.setdefault(g // gpus_per_node, []).append(g % gpus_per_node)
    nodes = sorted(by_node)
    env = "CUDA_VISIBLE_DEVICES=" + ",".join(map(str, by_node[nodes[0]]))
    if total_gpus <= gpus_per_node:
        return env, None
    if len(nodes) == 1:
        return env, f"node {nodes[0]}"
    if len({tuple(v) for v in by_node.values()}) == 1:
        return env, f"nodes {nodes[0]}-{nodes[-1]}, the same devices on each, one process per node"
    per_node = "; ".join(f"node {n}: CUDA_VISIBLE_DEVICES={','.join(map(str, by_node[n]))}" for n in nodes)
    return env, f"nodes {nodes[0]}-{nodes[-1]}, one process per node, with {per_node}"


def _pinned_line(env: str, where: str | None, argv: list[str], label: str, heading: bool = False) -> str:
    """One shell line of a pinned server, after a comment naming its node(s) when there are several (and naming
    ``label`` anyway with ``heading``)."""
    line = f"{env} {shlex.join(argv)}"
    if not (where or heading):
        return line
    return f"# {label}" + (f" on {where}" if where else "") + f"\n{line}"


def _attention_dp_form(plan: Plan, key: str) -> tuple[Plan, str | None]:
    """EP wider than TP, in the one form engines launch it: attention data parallelism.  pdag's plan with
    ``ep > tp`` (no attention-DP) runs attention on ``tp`` of the ``ep`` GPUs of a stage group; no engine leaves
    GPUs out of attention, they spread the experts beyond the TP group only with attention-DP groups (vLLM
    ``--data-parallel-size`` + ``--enable-expert-parallel``, SGLang ``--enable-dp-attention --dp``, TensorRT-LLM
    ``enable_attention_dp``).  The export is that plan, ``attn_dp = ep / tp`` on the same GPUs, with a note."""
    p = plan.parallel
    if not plan.spec.is_moe or p.attn_dp > 1 or p.ep <= p.tp or p.ep % p.tp:
        return plan, None
    groups = p.ep // p.tp
    data = plan.model_dump(mode="json", exclude_none=True)
    data["parallel"] = {**data["parallel"], "attn_dp": groups}
    data["options"] = {**data.get("options", {}), "allow_attention_dp": True}
    form = parse_plan(data)
    note = (f"ep={p.ep} is wider than tp={p.tp}: {_ENGINE_NAMES[key]} spreads experts beyond the TP group only with "
            f"attention data parallelism, so this is the attention-DP form of the plan ({groups} attention groups of "
            f"TP {p.tp}, experts over all {p.ep} GPUs; parallel.attn_dp={groups} with options.allow_attention_dp). "
            f"pdag's plan left {p.ep - p.tp} of the {p.ep} GPUs out of attention; estimate the exported form to see "
            "its own figures")
    return form, note


def launched_as(plan: Plan | dict[str, Any], engine: str) -> str | None:
    """Why ``engine`` launches ``plan`` only in another layout than the one drawn (the attention-DP form of EP wider
    than TP, in any pool), or None when it launches it as drawn.  Search asks this so that a layout and the form
    the engine turns it into are never ranked as two deployments."""
    parsed = parse_plan(plan)
    key = engine_key(engine)
    subs = [parsed] if not parsed.options.disaggregated else [
        _pool_plan(parsed, ph, pool.gpus) for ph, pool in sorted(Layout(parsed).pools.items())]
    for sub in subs:
        note = _attention_dp_form(sub, key)[1]
        if note is not None:
            return note
    return None


def _layer_split_note(plan: Plan, layout: Layout) -> str | None:
    if plan.options.layer_split is None or layout.pp == 1:
        return None
    return ",".join(str(n) for n in layout.layer_split)


def _export_vllm(plan: Plan, layout: Layout, pool: str | None) -> ExportResult:
    p = plan.parallel
    notes: list[str] = []
    if p.attn_dp > 1:
        return _export_vllm_attention_dp(plan, pool)
    argv = ["vllm", "serve", _hf_repo(plan), "--tensor-parallel-size", str(p.tp),
            "--pipeline-parallel-size", str(p.pp), *_dcp_flags(plan, "vllm")]
    if plan.spec.is_moe:
        ep, moe_tp = _moe_layout(plan, "vLLM")
        if ep > 1:
            derived = p.tp * p.dp
            if ep != derived:
                raise EngineCannotExpress(
                    "parallel.ep",
                    f"vLLM derives the EP size as tp*dp = {derived}; this plan has ep={ep}. With dp > 1 vLLM's EP "
                    "group spans the DP replicas (attention-DP), which pdag does not model yet",
                    f"ep = tp*dp (here dp = 1 and ep = tp = {p.tp})",
                )
            argv.append("--enable-expert-parallel")
        elif moe_tp > 1:
            notes.append(f"experts are tensor-sharded over the {moe_tp} TP ranks (vLLM's default without EP)")
    max_seqs, max_len = _serving_limits(plan, "vllm")
    argv += ["--max-num-seqs", str(max_seqs), "--max-model-len", str(max_len)]
    notes += _limit_notes(plan, max_seqs, max_len, "--max-num-seqs", "--max-model-len")
    argv += _dtype_flags(plan, notes, "vllm")
    argv += _remote_code_flags(plan, "vllm") + _text_only_flags(plan, "vllm", notes)
    argv += _vllm_engine_flags(plan, max_seqs, notes)
    argv += features.export_flags(plan, "vllm", notes)
    env = engine_window_kv(plan, "vllm")[1]
    notes += _window_notes(plan, "vllm", env)
    split = _layer_split_note(plan, layout)
    if split:
        env = [*env, f"VLLM_PP_LAYER_PARTITION={split}"]
    gpus = p.tp * p.pp * p.dp
    argvs = _vllm_dp_nodes(argv, p.dp, p.tp * p.pp, plan.hardware.gpus_per_node, notes)
    argvs = [env + a for a in argvs]
    return ExportResult(engine="vllm", command=_lines(argvs, "node"), argv=argvs, gpus=gpus, notes=notes)


HEAD = "HEAD_NODE_IP"  # the address of the first node, to be filled in by whoever launches the commands
_VLLM_DP_RPC_PORT = "13345"  # the port vLLM's data-parallel deployment docs use in their example


def _lines(argvs: list[list[str]], label: str) -> str:
    """Shell lines of the commands, each after a comment naming its node when there are several."""
    if len(argvs) == 1:
        return shlex.join(argvs[0])
    return "\n".join(f"# {label} {i}\n{shlex.join(a)}" for i, a in enumerate(argvs))


def _vllm_dp_nodes(argv: list[str], dp: int, rank_gpus: int, gpus_per_node: int, notes: list[str]) -> list[list[str]]:
    """vLLM data parallelism as its data-parallel deployment docs write it (docs/serving/data_parallel_deployment.md,
    "Internal Load Balancing"): within a node one command with ``--data-parallel-size``; across nodes one command
    per node with the global size, the node's ``--data-parallel-size-local`` ranks and, on every node but the
    first, ``--headless`` and the node's ``--data-parallel-start-rank``, all pointing at the first node's
    ``--data-parallel-address`` and ``--data-parallel-rpc-port``.  A DP rank wider than a node is a multi-node
    replica (``_vllm_replica_nodes``)."""
    if rank_gpus > gpus_per_node:
        if dp > 1:
            raise EngineCannotExpress(
                "parallel", f"each of the {dp} vLLM data-parallel ranks needs {rank_gpus} GPUs, more than a node "
                f"of {gpus_per_node}; pdag writes multi-node data parallelism only for ranks within a node",
                "tp * pp within a node, or dp = 1")
        return _vllm_replica_nodes(argv, rank_gpus, gpus_per_node, notes)
    if dp * rank_gpus <= gpus_per_node:
        return [argv + ["--data-parallel-size", str(dp)]]
    local = gpus_per_node // rank_gpus
    nodes = -(-dp // local)
    out = []
    for k in range(nodes):
        here = min(local, dp - k * local)
        cmd = argv + (["--headless"] if k else []) + ["--data-parallel-size", str(dp),
                                                       "--data-parallel-size-local", str(here)]
        if k:
            cmd += ["--data-parallel-start-rank", str(k * local)]
        out.append(cmd + ["--data-parallel-address", HEAD, "--data-parallel-rpc-port", _VLLM_DP_RPC_PORT])
    notes.append(f"{dp} data-parallel ranks over {nodes} nodes, {local} per node: run line k on node k (node 0 serves "
                 f"the API; the others run --headless); {HEAD} is node 0's address (vLLM data-parallel deployment "
                 "docs, internal load balancing)")
    return out


def _vllm_replica_nodes(argv: list[str], gpus: int, gpus_per_node: int, notes: list[str]) -> list[list[str]]:
    """One vLLM server wider than a node, on the multiprocessing backend: the same command on each node with
    ``--nnodes``, its ``--node-rank`` and the first node's ``--master-addr``; every node but the first runs
    ``--headless`` (vLLM ParallelConfig nnodes / node_rank / master_addr, used when the executor is mp)."""
    nodes = -(-gpus // gpus_per_node)
    notes.append(f"one server over {nodes} nodes: run line k on node k; {HEAD} is node 0's address")
    return [argv + ["--distributed-executor-backend", "mp", "--nnodes", str(nodes), "--node-rank", str(k),
                    "--master-addr", HEAD] + (["--headless"] if k else []) for k in range(nodes)]


def _sglang_nodes(argv: list[str], gpus: int, gpus_per_node: int, notes: list[str]) -> list[list[str]]:
    """One SGLang server wider than a node: the same command on each node with ``--nnodes``, the node's
    ``--node-rank`` and the first node's ``--dist-init-addr`` (SGLang server_args: --dist-init-addr, --nnodes,
    --node-rank)."""
    if gpus <= gpus_per_node:
        return [argv]
    nodes = -(-gpus // gpus_per_node)
    notes.append(f"one server over {nodes} nodes: run line k on node k; {HEAD} is node 0's address")
    return [argv + ["--dist-init-addr", f"{HEAD}:5000", "--nnodes", str(nodes), "--node-rank", str(k)]
            for k in range(nodes)]


def _trtllm_nodes(argv: list[str], devices: list[int] | range, gpus_per_node: int,
                  notes: list[str]) -> list[str]:
    """trtllm-serve wider than a node runs under MPI: one ``mpirun`` starting one rank per GPU over the nodes, each
    through ``trtllm-llmapi-launch`` (TensorRT-LLM's multi-node serve examples: the MPI process count equals the
    model's world size).  ``devices`` are the server's GPUs in pdag's global ids."""
    if len(devices) <= gpus_per_node:
        return argv
    by_node: dict[int, list[int]] = {}
    for g in devices:
        by_node.setdefault(g // gpus_per_node, []).append(g % gpus_per_node)
    hosts = ",".join(f"NODE{n}_IP:{len(ids)}" for n, ids in sorted(by_node.items()))
    note = (f"one server over {len(by_node)} nodes under MPI: mpirun starts {len(devices)} ranks (NODE<k>_IP: the "
            "addresses of the nodes); srun with trtllm-llmapi-launch works the same way on Slurm")
    if len({tuple(ids) for ids in by_node.values()}) > 1:
        note += "; set CUDA_VISIBLE_DEVICES on each node to " + "; ".join(
            f"node {n}: {','.join(map(str, ids))}" for n, ids in sorted(by_node.items()))
    if note not in notes:
        notes.append(note)
    return ["mpirun", "-H", hosts, "-n", str(len(devices)), "trtllm-llmapi-launch", *argv]


def _vllm_engine_flags(plan: Plan, max_seqs: int, notes: list[str]) -> list[str]:
    """The step budget and graph capture size the estimate priced, where vLLM would otherwise pick others (its
    capture size follows --max-num-seqs: the profile's ``default_graph_max_tokens``)."""
    opts = plan.engine_options
    flags = ["--max-num-batched-tokens", str(opts.max_batched_tokens)] if opts.max_batched_tokens else []
    flags += _scheduler_export(plan, "vllm", notes)
    profile = engine_profile("vllm")
    priced = profile.prefill_graph_max_tokens if opts.graph_max_tokens is None else opts.graph_max_tokens
    if priced != profile.default_graph_max_tokens(max_seqs):
        if priced == 0:
            flags += ["--compilation-config", json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"})]
        else:
            flags += ["--max-cudagraph-capture-size", str(priced)]
            notes.append(f"vLLM before 0.11.1 spells --max-cudagraph-capture-size {priced} as --cuda-graph-sizes "
                         f"{priced}")
    if max_seqs > max(priced, profile.default_graph_max_tokens(max_seqs)):
        notes.append(f"decode batches above {priced} run without a CUDA graph in vLLM, which the estimate prices "
                     f"graphed: engine_options.graph_max_tokens = {max_seqs} captures them (and prices prefill passes "
                     "up to that size graphed), or engine_options.max_num_seqs caps the batch")
    return flags


def _scheduler_export(plan: Plan, key: str, notes: list[str]) -> list[str]:
    """The flag that runs the look-ahead scheduler the way the plan priced it, where that is not the engine's
    default (``engine_options.scheduler_ahead``)."""
    want = plan.engine_options.scheduler_ahead
    sch = engine_profile(key).scheduler
    if want is None or want == bool(sch.ahead_steps):
        return []
    flag = sch.on_flag if want else sch.off_flag
    if not flag:
        notes.append(f"engine_options.scheduler_ahead {str(want).lower()}: {_ENGINE_NAMES[key]} has no launch flag "
                     "for it; the estimate assumed it")
        return []
    return [flag]


def _other_engine_flags(plan: Plan, engine: str, chunk_flag: str, notes: list[str]) -> list[str]:
    """SGLang's and TensorRT-LLM's step budget; their prefill passes run eagerly unless a piecewise graph is
    configured, which the export does not write."""
    opts = plan.engine_options
    if opts.graph_max_tokens:
        notes.append(f"engine_options.graph_max_tokens {opts.graph_max_tokens}: {engine} runs prefill eagerly by "
                     "default; configure its piecewise CUDA graph for prefill to match the estimate")
    return [chunk_flag, str(opts.max_batched_tokens)] if opts.max_batched_tokens else []


def _export_vllm_attention_dp(plan: Plan, pool: str | None) -> ExportResult:
    """Attention-DP as vLLM's DP+EP: ``attn_dp`` data-parallel engines whose MoE layers share one EP group."""
    p = plan.parallel
    if p.dp > 1:
        raise EngineCannotExpress(
            "parallel.dp", f"vLLM's --data-parallel-size already holds the {p.attn_dp} attention-DP groups; "
            f"dp={p.dp} independent replicas on top need {p.dp} separate vLLM deployments",
            "dp = 1 (or export one replica and launch it dp times)")
    if p.ep != p.attn_dp * p.tp:
        raise EngineCannotExpress(
            "parallel.ep", f"vLLM derives EP as tp*dp = {p.attn_dp * p.tp}; this plan has ep={p.ep}",
            f"ep = attn_dp * tp = {p.attn_dp * p.tp}")
    notes = [f"vLLM DP+EP: {p.attn_dp} data-parallel engines (attention TP {p.tp} each, own scheduler and KV "
             f"cache) whose MoE layers form one EP group of {p.ep} GPUs; idle ranks run dummy steps to keep "
             "the MoE collectives in step (vLLM data-parallel deployment docs)"]
    max_seqs, max_len = _serving_limits(plan, "vllm")
    per_engine = plan.engine_options.max_num_seqs or -(-max_seqs // p.attn_dp)
    argv = ["vllm", "serve", _hf_repo(plan), "--tensor-parallel-size", str(p.tp),
            "--pipeline-parallel-size", str(p.pp), *_dcp_flags(plan, "vllm"), "--enable-expert-parallel",
            *_features(plan, "vllm", pool).launch_flags(), "--max-num-seqs", str(per_engine), "--max-model-len",
            str(max_len)]
    if plan.engine_options.max_num_seqs is None:
        notes.append(f"--max-num-seqs is per DP engine: the {max_seqs} sequences that fit / {p.attn_dp} groups, "
                     "rounded up")
    notes += _limit_notes(plan, max_seqs, max_len, "the sequence cap", "--max-model-len")
    argv += _dtype_flags(plan, notes, "vllm")
    argv += _remote_code_flags(plan, "vllm") + _text_only_flags(plan, "vllm", notes)
    argv += _vllm_engine_flags(plan, per_engine, notes)
    env = engine_window_kv(plan, "vllm")[1]
    notes += _window_notes(plan, "vllm", env)
    argvs = [env + a for a in _vllm_dp_nodes(argv, p.attn_dp, p.tp * p.pp, plan.hardware.gpus_per_node, notes)]
    return ExportResult(engine="vllm", command=_lines(argvs, "node"), argv=argvs, gpus=p.tp * p.pp * p.attn_dp,
                        notes=notes)


def _dtype_flags(plan: Plan, notes: list[str], engine: str) -> list[str]:
    """Weight and KV dtype flags, spelled alike by vLLM and SGLang except for the fp8 KV dtype."""
    kv_fp8 = {"vllm": "fp8", "sglang": "fp8_e4m3"}[engine]
    out: list[str] = []
    if plan.weights is not None and plan.dtype in _DTYPE_FLAG:
        out += ["--dtype", _DTYPE_FLAG[plan.dtype]]
        out += _weights_flags(plan, notes, engine)
    elif plan.dtype in _DTYPE_FLAG:
        out += ["--dtype", _DTYPE_FLAG[plan.dtype]]
    elif plan.dtype == "fp8":
        if checkpoint_format(_hf_repo(plan), plan.spec) != "fp8":
            out += ["--quantization", "fp8"]  # online fp8 quantization of a 16-bit checkpoint
    else:
        notes.append(f"{plan.dtype} weights need a quantised checkpoint (AWQ/GPTQ); serve that repo instead")
    if plan.effective_kv_dtype == "fp8":
        out += ["--kv-cache-dtype", kv_fp8]
    return out


_REMOTE_CODE_FLAG = {"vllm": "--trust-remote-code", "sglang": "--trust-remote-code", "trtllm": "--trust_remote_code"}


def _text_only_flags(plan: Plan, engine: str, notes: list[str]) -> list[str]:
    """Keep the engine from loading the vision tower pdag leaves out of memory (``ModelSpec.vision_encoder``):
    vLLM's --language-model-only sets every modality's limit to 0, so the encoder is neither built nor profiled
    (vllm/config/multimodal.py).  SGLang turns multimodal off by default only for Gemma-3 and Llama-4
    (ModelConfig's mm_disabled_models) and trtllm-serve has no such switch: say so for them."""
    if not plan.spec.vision_encoder:
        return []
    if engine == "vllm" and flag_table("vllm").has("--language-model-only"):
        notes.append("--language-model-only: vLLM skips the vision encoder, which the plan's memory leaves out "
                     "(text prompts only; drop the flag to serve images, with less KV room than estimated)")
        return ["--language-model-only"]
    notes.append(f"{_ENGINE_NAMES[engine]} may load the checkpoint's vision encoder, which the plan's memory leaves "
                 "out: expect less KV room than estimated (SGLang leaves it off by default only for Gemma-3 and "
                 "Llama-4)")
    return []


def _remote_code_flags(plan: Plan, engine: str) -> list[str]:
    """The engine's trust-remote-code switch for a checkpoint transformers reads only through the repo's own code
    (``ModelSpec.remote_code``: an auto_map and a model_type transformers does not register, e.g. Kimi-K2's
    kimi_k2); without it vLLM, SGLang and trtllm-serve stop while loading the config."""
    return [_REMOTE_CODE_FLAG[engine]] if plan.spec.remote_code else []


def _weights_flags(plan: Plan, notes: list[str], engine: str) -> list[str]:
    """--quantization for the plan's weights: none when the served checkpoint already stores them (engines read
    its quantization_config), except for AWQ/GPTQ, where the flag picks the kernel; the engine's own method when
    it quantizes a 16-bit checkpoint online."""
    fmt = plan.weights
    assert fmt is not None
    if fmt in ("bf16", "fp16"):
        return []
    flag = engine_flag(fmt, engine)
    info = format_info(fmt)
    stored = checkpoint_format(_hf_repo(plan), plan.spec) == fmt
    if stored and (flag is None or not info["kernel_flag"]):
        return []
    if not stored and (flag is None or not info["online"]):  # engines quantize at load time only some formats (fp8)
        known = _checkpoints_storing(plan, fmt)
        has = checkpoint_format(_hf_repo(plan), plan.spec) or "16-bit"
        raise EngineCannotExpress(
            "checkpoint", f"{fmt} weights: {_hf_repo(plan)} stores {has} weights and {_ENGINE_NAMES[engine]} does not "
            f"quantize a checkpoint to {fmt} while loading it"
            + (f" (--quantization {flag} selects the kernel for a checkpoint that stores them)" if flag else "")
            + ": the command would not start", f"plan.checkpoint naming a checkpoint of this model that stores {fmt} "
            "weights" + (f" ({', '.join(known)})" if known else "") + ", or weights the engine quantizes while "
            "loading (fp8)")
    return ["--quantization", flag] if flag else []


def _checkpoints_storing(plan: Plan, fmt: str) -> list[str]:
    """The repos index.json lists for the plan's preset (its own and its variants) whose names say they store
    ``fmt`` weights."""
    entry = preset_index().get(plan.spec.id)
    if not entry:
        return []
    repos = [entry.get("hf_repo"), *entry.get("aliases", ())]
    return [r for r in repos if r and format_of_checkpoint(r) == fmt]


def _export_sglang(plan: Plan, layout: Layout, pool: str | None) -> ExportResult:
    p = plan.parallel
    notes: list[str] = []
    adp = p.attn_dp > 1
    world = p.tp * p.attn_dp
    argv = ["python", "-m", "sglang.launch_server", "--model-path", _hf_repo(plan), "--tp-size", str(world),
            *_dcp_flags(plan, "sglang")]
    if p.pp > 1:
        argv += ["--pp-size", str(p.pp)]
    if adp:
        if p.dp > 1:
            raise EngineCannotExpress(
                "parallel.dp", f"with --enable-dp-attention SGLang's --dp-size is the {p.attn_dp} attention groups; "
                f"dp={p.dp} independent replicas on top need separate servers", "dp = 1")
        argv += ["--dp-size", str(p.attn_dp), "--enable-dp-attention"]
        notes.append(f"DP attention: {p.attn_dp} groups carved out of the TP world of {world} GPUs (attention TP "
                     f"{p.tp} each); --max-running-requests is the whole server's")
    elif p.dp > 1:
        argv += ["--dp-size", str(p.dp)]
        notes.append(f"plain --dp-size launches {p.dp} independent replicas (no --enable-dp-attention), "
                     f"{p.tp * p.pp} GPUs each")
    if plan.spec.is_moe:
        ep, moe_tp = _moe_layout(plan, "SGLang")
        if ep > 1:
            argv += ["--ep-size", str(ep)]
        argv += _features(plan, "sglang", pool).launch_flags()
        if moe_tp > 1:
            notes.append(f"experts are tensor-sharded over {moe_tp} ranks (SGLang MoE-TP = tp / ep)")
    max_seqs, max_len = _serving_limits(plan, "sglang")
    # decode is priced graphed at every batch the load reaches; SGLang's default graph cap depends on GPU memory
    # and TP, so a cap per attention group is written: the group's share of the running cap, no larger than the
    # profile's graph_max_batch_default or the load's own batch (graphs up to a cache-sized cap of thousands cost
    # start-up time and memory for batches never run)
    group = -(-max_seqs // p.attn_dp)
    graph_bs = group if plan.engine_options.max_num_seqs else \
        min(group, max(engine_profile("sglang").graph_max_batch_default or group,
                       -(-plan.workload.batch_size // p.attn_dp)))
    argv += ["--max-running-requests", str(max_seqs), "--context-length", str(max_len),
             "--cuda-graph-max-bs", str(graph_bs)]
    if graph_bs < group:
        notes.append(f"--cuda-graph-max-bs {graph_bs}: decode batches above it per attention group run without "
                     "a CUDA graph (pdag prices them graphed); the load's batch is within it")
    notes += _limit_notes(plan, max_seqs, max_len, "--max-running-requests", "--context-length")
    notes += _window_notes(plan, "sglang", [])
    argv += _dtype_flags(plan, notes, "sglang")
    argv += _remote_code_flags(plan, "sglang") + _text_only_flags(plan, "sglang", notes)
    argv += _other_engine_flags(plan, "SGLang", "--chunked-prefill-size", notes)
    argv += _scheduler_export(plan, "sglang", notes)
    argv += features.export_flags(plan, "sglang", notes)
    replica = world * p.pp
    argvs = _sglang_nodes(argv, replica * (1 if adp else p.dp), plan.hardware.gpus_per_node, notes)
    return ExportResult(engine="sglang", command=_lines(argvs, "node"), argv=argvs, gpus=replica * p.dp, notes=notes)


def _features(plan: Plan, key: str, pool: str | None) -> EngineFeatures:
    """The engine features (all-to-all backend, micro-batch overlap) the estimate prices for ``plan`` on engine
    ``key``: the plan's own profile when it names that engine, else ``key``'s (``export_unchecked`` then notes
    that the figures were priced on another profile)."""
    priced = plan if _priced_on(plan, key) else plan.model_copy(update={"engine": key})
    return engine_features(priced, plan_efficiency(priced), plan.options.overlap_comm, pool=pool)


def _priced_on(plan: Plan, key: str) -> bool:
    return plan.engine in ("trtllm", "trtllm-cpp") if key == "trtllm" else plan.engine == key


def _export_trtllm(plan: Plan, layout: Layout, pool: str | None) -> ExportResult:
    p = plan.parallel
    notes: list[str] = []
    world = p.tp * p.attn_dp
    if p.attn_dp > 1 and p.tp > 1:
        raise EngineCannotExpress(
            "parallel.tp", f"TensorRT-LLM's attention DP runs attention with TP 1 on each of the tp_size ranks; "
            f"this plan has {p.attn_dp} groups of attention TP {p.tp}", "tp = 1 with attn_dp = ep")
    _trtllm_weights(plan, notes)
    base = ["trtllm-serve", _hf_repo(plan), "--tp_size", str(world), "--pp_size", str(p.pp)]
    config: dict[str, Any] = {}
    if p.attn_dp > 1:
        config["enable_attention_dp"] = True
        notes.append(f"attention DP: enable_attention_dp in the --config YAML runs attention on each of the {world} "
                     "ranks with TP 1 (LLM API option; see TensorRT-LLM's DeepSeek-R1 serve example)")
    if plan.spec.is_moe:
        ep, moe_tp = _moe_layout(plan, "TensorRT-LLM")
        base += ["--ep_size", str(ep)]
        notes.append(f"MoE: moe_ep_size={ep}, moe_tp_size={moe_tp} (TensorRT-LLM requires tp = moe_tp * moe_ep)")
    max_seqs, max_len = _serving_limits(plan, "trtllm")
    base += ["--max_batch_size", str(max_seqs), "--max_seq_len", str(max_len)]
    notes += _limit_notes(plan, max_seqs, max_len, "--max_batch_size", "--max_seq_len")
    notes += _window_notes(plan, "trtllm", [])
    base += _remote_code_flags(plan, "trtllm") + _text_only_flags(plan, "trtllm", notes)
    base += _other_engine_flags(plan, "TensorRT-LLM", "--max_num_tokens", notes)
    if plan.effective_kv_dtype == "fp8":
        config["kv_cache_config"] = {"dtype": "fp8"}
    per_rank = -(-max_seqs // p.attn_dp)  # attention DP: each rank decodes its own share
    if per_rank > _TRTLLM_GRAPH_MAX_BATCH:
        config["cuda_graph_config"] = {"enable_padding": True, "max_batch_size": per_rank}
    off_key = engine_profile("trtllm").scheduler.off_config_key
    if plan.engine_options.scheduler_ahead is not None and off_key:
        config[off_key] = not plan.engine_options.scheduler_ahead
    features.trtllm_config(plan, config)
    if config:
        base += ["--config", TRTLLM_CONFIG_FILE]
        notes.append(f"write {TRTLLM_CONFIG_FILE} with these LLM-API options (JSON is valid YAML): "
                     + json.dumps(config, sort_keys=True))
    replica = world * p.pp
    gpn = plan.hardware.gpus_per_node
    argvs: list[list[str]] = []
    if p.dp == 1:
        argvs.append(_trtllm_nodes(base, range(replica), gpn, notes))
        command = shlex.join(argvs[0])
    else:
        notes.append(f"trtllm-serve has no plain data-parallel flag (its attention DP is a different strategy): "
                     f"{p.dp} independent servers, one per replica, behind a load balancer")
        lines = []
        for r in range(p.dp):
            cmd = _trtllm_nodes([*base, "--port", str(8000 + r)], layout.replica_devices(r), gpn, notes)
            if replica > gpn:
                argvs.append(cmd)
                lines.append(f"# replica {r}\n{shlex.join(cmd)}")
                continue
            env, where = _pinned(layout.replica_devices(r), gpn, layout.gpus_needed)
            argv = [env, *cmd]
            argvs.append(argv)
            lines.append(_pinned_line(env, where, argv[1:], f"replica {r}"))
        command = "\n".join(lines)
    return ExportResult(engine="trtllm", command=command, argv=argvs, gpus=replica * p.dp, config=config or None,
                        servers=p.dp, notes=notes)


def _trtllm_weights(plan: Plan, notes: list[str]) -> None:
    """trtllm-serve has no quantization flag and does not quantize a 16-bit checkpoint at load time: it runs what
    the checkpoint's quantization config declares.  A plan priced on quantized weights (fp8, AWQ, GPTQ, int4, ...)
    therefore exports only when the served checkpoint stores them; otherwise the server would run 16-bit weights
    the plan did not price, so the export is refused with the reason."""
    fmt = plan.weights or (None if plan.dtype in _DTYPE_FLAG else plan.dtype)
    if fmt is None or fmt in _DTYPE_FLAG:
        return
    stored = checkpoint_format(_hf_repo(plan), plan.spec)
    if stored != fmt:
        raise EngineCannotExpress(
            "weights", f"{fmt} weights: trtllm-serve takes no quantization flag and loads the quantization its "
            f"checkpoint declares; {_hf_repo(plan)} does not store {fmt} weights, so the server would run "
            f"{stored or 'bf16'} weights the plan did not price",
            "plan.checkpoint naming a checkpoint that stores these weights ("
            + (", ".join(_checkpoints_storing(plan, fmt)) or "e.g. an nvidia/*-FP8 ModelOpt export") + "), or another "
            "engine")
    notes.append(f"{fmt} weights: trtllm-serve reads the quantization from {_hf_repo(plan)}'s config (no flag)")


# The largest decode batch trtllm-serve captures in a CUDA graph unless cuda_graph_config says otherwise
# (tensorrt_llm/llmapi/llm_args.py, TorchLlmArgs.validate_cuda_graph_config: config.max_batch_size or 128); the
# estimate prices every decode step graphed, so a larger batch cap is written into the config.
_TRTLLM_GRAPH_MAX_BATCH = 128


_EXPORTERS = {"vllm": _export_vllm, "sglang": _export_sglang, "trtllm": _export_trtllm}


ENGINE_OF_PROFILE = ("vllm", "sglang", "trtllm", "trtllm-cpp")  # plan.engine values that name a launchable engine


def engine_key(engine: str) -> str:
    """vllm, sglang or trtllm for an engine name as users spell it (TensorRT-LLM, trt, trtllm-cpp)."""
    raw = str(engine).strip().lower().replace("-", "").replace("_", "")
    key = {"tensorrtllm": "trtllm", "trt": "trtllm", "trtllmcpp": "trtllm"}.get(raw, raw)
    if key not in ENGINES:
        raise PdagInputError("engine", f"unknown engine {engine!r}", ", ".join(ENGINES))
    return key


def export_plan(plan: Plan | dict[str, Any], engine: str | None = None, *, force: bool = False,
                engine_version: str | None = None) -> ExportResult:
    """The launch command of ``engine`` (vllm, sglang, trtllm; default: the plan's own ``engine``) for ``plan``,
    spelt for the release ``engine_version`` (default: the current one with a flag table).  A plan validate_dag
    refuses raises PlanRefused (with its violations) unless ``force``; a plan the engine cannot launch raises
    EngineCannotExpress (with the reason)."""
    parsed = parse_plan(plan)
    refused = _errors(parsed)
    if refused and not force:
        raise PlanRefused(refused)
    result = export_unchecked(parsed, engine, engine_version)
    if refused:
        result.notes.insert(0, "forced: validate_dag refuses this plan (" + "; ".join(
            f"{v.rule_id}: {v.message}" for v in refused) + "); the engine may refuse it or run it other than "
            "pdag prices it")
    return result


def export_unchecked(plan: Plan | dict[str, Any], engine: str | None = None,
                     engine_version: str | None = None) -> ExportResult:
    """export_plan without validate_dag: for callers that judged the rules already (search asks only whether an
    engine launches a layout it found valid)."""
    parsed = parse_plan(plan)
    if engine is None:
        engine = parsed.engine
        if engine not in ENGINE_OF_PROFILE:  # e.g. 'generic': a plan from search states no engine
            raise PdagInputError("engine", f"the plan names no engine to launch (plan.engine is {engine!r}, a "
                                 "pricing profile with no launch command of its own), so there is no default",
                                 "engine: " + ", ".join(ENGINES) + ", or plan.engine set to one of them")
    key = engine_key(engine)
    table = flag_table(key, engine_version)
    _still_served(parsed, key, table.version)
    result = _export(parsed, key)
    own = _priced_on(parsed, key)
    for argv in result.argv:
        _passthrough(parsed, key, argv, own, table, result.notes)
    if own and parsed.engine_options.extra_args:
        result.command = _rejoin(result)
    elif parsed.engine_options.extra_args:
        result.notes.append(f"engine_options.extra_args are {parsed.engine}'s flags: not carried to {key}")
    if not own:
        result.notes.append(f"figures were priced on engine profile {parsed.engine}: estimate with engine {key} to "
                            "price this command")
    result.engine_version = table.version
    result.flag_problems = sorted({p for argv in result.argv for p in check_argv(key, argv, table.version)})
    if result.flag_problems:
        result.notes.append(f"{key} {table.version} does not accept: " + "; ".join(result.flag_problems))
    if str(engine).strip().lower().replace("_", "-") == "trtllm-cpp":
        result.notes.append("the plan's engine profile is TensorRT-LLM's C++ runtime (built TensorRT engines); this "
                            "command starts trtllm-serve, whose default is the PyTorch backend (profile trtllm)")
    return result


@lru_cache(maxsize=1)
def _removed_models() -> dict[str, list[dict[str, Any]]]:
    with open(MODELS_DIR / "removed_from_engines.json", encoding="utf-8") as f:
        return {k: v for k, v in json.load(f).items() if k != "description"}


def _release(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def _still_served(plan: Plan, key: str, version: str) -> None:
    """Refuse a command for a release that no longer serves the model's architecture (vLLM dropped MiniMax-Text-01
    and M1 after v0.23.0): it could not start."""
    release = _release(version)
    for entry in _removed_models().get(key, []):
        last = _release(entry["last_release"])
        if plan.spec.model_type in entry["model_types"] and release and last and release > last:
            raise EngineCannotExpress(
                "engine", f"{entry['fact']} ({entry['source']}); pdag writes {_ENGINE_NAMES[key]} {version} commands",
                f"a {_ENGINE_NAMES[key]} release up to {entry['last_release']} (pdag has no flag table for one, so it "
                "writes no command for it), or another engine that serves the model")


def _errors(plan: Plan) -> list[Any]:
    from tools.rules.validate import validate_dag

    return [v for v in validate_dag(plan=plan).violations if v.severity == "error"]


def _export(parsed: Plan, key: str) -> ExportResult:
    layout = Layout(parsed)
    if parsed.options.disaggregated:
        return _export_disaggregated(parsed, layout, key)
    _common_checks(parsed, key)
    result = _export_aggregated(parsed, key)
    if layout.gpus_needed != result.gpus:
        result.notes.append(f"pdag counts {layout.gpus_needed} GPUs for this plan, {key} uses {result.gpus}")
    return result


def _groups(args: list[str]) -> list[list[str]]:
    """Arguments grouped as flag plus its values."""
    out: list[list[str]] = []
    for a in args:
        if a.startswith("-") or not out:
            out.append([a])
        else:
            out[-1].append(a)
    return out


def _passthrough(plan: Plan, key: str, argv: list[str], own: bool, table: FlagTable, notes: list[str]) -> None:
    """Append the imported command's flags pdag does not model (engine_options.extra_args) to ``argv``, for an
    export to the engine they came from; a flag pdag writes itself wins, with a note."""
    extra = plan.engine_options.extra_args
    if not (own and extra):
        return
    written = {table.canonical(a.partition("=")[0]) or a.partition("=")[0] for a in argv if a.startswith("-")}
    tail: list[str] = []
    for group in _groups(extra):
        flag = group[0].partition("=")[0]
        if (table.canonical(flag) or flag) in written:
            if any(argv[i:i + len(group)] == group for i in range(len(argv))):
                continue
            note = f"{flag} from the imported command replaced by pdag's own value"
            if note not in notes:
                notes.append(note)
            continue
        tail += group
    argv[len(argv):] = tail


def _rejoin(result: ExportResult) -> str:
    """The command text after flags were appended to the argument lists: each line rebuilt from its argv."""
    lines = result.command.split("\n")
    out: list[str] = []
    i = 0
    for line in lines:
        if line.startswith("# "):
            out.append(line)
        else:
            out.append(shlex.join(result.argv[i]))
            i += 1
    return "\n".join(out)


def _pool_plan(plan: Plan, phase: str, gpus: int) -> Plan:
    """The aggregated plan one pool of a disaggregated plan would be on its own."""
    data = plan.model_dump(mode="json", exclude_none=True)
    data["parallel"] = plan.degrees(phase).model_dump()  # type: ignore[arg-type]
    if phase == "prefill":
        data["parallel"]["dcp"] = 1  # decode context parallel is the decode pool's
    data["phases"] = {}
    data["options"] = {**data.get("options", {}), "disaggregated": False}
    if phase == "decode" and plan.decode_engine_options is not None:
        data["engine_options"] = plan.decode_engine_options.model_dump(exclude_none=True)
    data.pop("decode_engine_options", None)
    data["hardware"] = {**data["hardware"], "num_gpus": gpus}
    return parse_plan(data)


_ROLE_FLAGS: dict[str, dict[str, list[str]]] = {
    "vllm": {"prefill": ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'],
             "decode": ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']},
    "sglang": {"prefill": ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl"],
               "decode": ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"]},
    "trtllm": {"prefill": [], "decode": []},
}
_CONNECTOR_NOTE = {
    "vllm": "KV hand-off through vLLM's KV connector (--kv-transfer-config, NixlConnector here; LMCache and "
            "Mooncake connectors also exist); a proxy/router (e.g. NVIDIA Dynamo or llm-d) sends each request to a "
            "prefill instance, then to a decode instance",
    "sglang": "KV hand-off by SGLang's PD disaggregation (--disaggregation-mode, transfer backend mooncake or "
              "nixl); front both pools with python -m sglang_router.launch_router --pd-disaggregation "
              "--prefill <url> --decode <url>",
    "trtllm": "KV hand-off: TensorRT-LLM serves disaggregated pools with 'trtllm-serve disaggregated -c <config>' "
              "listing the context (prefill) and generation (decode) servers; each server's YAML needs "
              "cache_transceiver_config (backend UCX or NIXL)",
}


def _export_disaggregated(plan: Plan, layout: Layout, key: str) -> ExportResult:
    """One server command per pool, pinned to its GPUs, with the engine's role / KV-connector flags."""
    argvs: list[list[str]] = []
    lines: list[str] = []
    notes: list[str] = [_CONNECTOR_NOTE[key]]
    configs: dict[str, dict[str, Any] | None] = {}
    servers: dict[str, int] = {}
    commands: dict[str, int] = {}
    gpus = 0
    port = 8000
    for phase in ("prefill", "decode"):
        pool = layout.pools[phase]  # type: ignore[index]
        sub = _pool_plan(plan, phase, pool.gpus)
        _common_checks(sub, key)
        one = _export_aggregated(sub, key, phase)
        configs[phase] = one.config
        servers[phase] = one.servers
        commands[phase] = len(one.argv)
        gpus += one.gpus
        notes += [f"{phase}: {n}" for n in one.notes]
        per_server = len(one.argv) // one.servers
        for i, argv in enumerate(one.argv):
            argv = [a for a in argv if not a.startswith("CUDA_VISIBLE_DEVICES=")]
            if "--port" in argv:  # replicas numbered their ports from 8000; number them across both pools
                at = argv.index("--port")
                argv = argv[:at] + argv[at + 2:]
            full = [*argv, *_ROLE_FLAGS[key][phase], "--port", str(port + i // per_server)]
            if per_server > 1:  # a server over several nodes: each node sees all of its GPUs
                argvs.append(full)
                lines.append(f"# {phase} pool, node {i % per_server}\n{shlex.join(full)}")
                continue
            env, where = _pinned(pool.replica_devices(i) if one.servers > 1
                                 else range(pool.offset, pool.offset + pool.gpus), plan.hardware.gpus_per_node,
                                 layout.gpus_needed)
            argvs.append([env, *full])
            lines.append(_pinned_line(env, where, full, f"{phase} pool", heading=True))
        port += one.servers
    return ExportResult(engine=key, command="\n".join(lines), argv=argvs, gpus=gpus, notes=notes,
                        config=configs["prefill"], decode_config=configs["decode"], pool_servers=servers,
                        pool_commands=commands, servers=sum(servers.values()))


# ---------------------------------------------------------------------------------------------- import
VLLM_FLAGS = {
    "--tensor-parallel-size": "tp", "-tp": "tp",
    "--pipeline-parallel-size": "pp", "-pp": "pp",
    "--data-parallel-size": "dp", "-dp": "dp",
    "--max-num-seqs": "batch", "--max-model-len": "context",
    "--dtype": "dtype", "--quantization": "quant", "-q": "quant", "--kv-cache-dtype": "kv",
    "--model": "model", "--max-num-batched-tokens": "chunk", "--max-cudagraph-capture-size": "graph_max",
    "--compilation-config": "compile", "-O": "compile",
    "--decode-context-parallel-size": "dcp", "-dcp": "dcp",
}
VLLM_BOOL = {"--enable-expert-parallel": "ep_on", "-ep": "ep_on", "--enforce-eager": "eager"}
# flags taking a list of capture sizes (the older one deprecated by vLLM PR #26016)
_VLLM_GRAPH_LISTS = ("--cuda-graph-sizes", "--cudagraph-capture-sizes")
_VLLM_REFUSE = {
    "--prefill-context-parallel-size": "prefill context parallel adds ranks; pdag's SP re-partitions TP GPUs",
    "--data-parallel-size-local": None,
}
SGLANG_FLAGS = {
    "--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp",
    "--dp": "dp", "--dp-size": "dp", "--data-parallel-size": "dp",
    "--ep": "ep", "--ep-size": "ep", "--expert-parallel-size": "ep",
    "--pp": "pp", "--pp-size": "pp", "--pipeline-parallel-size": "pp",
    "--max-running-requests": "batch", "--context-length": "context",
    "--dtype": "dtype", "--quantization": "quant", "--kv-cache-dtype": "kv",
    "--model-path": "model", "--model": "model", "--moe-a2a-backend": "a2a", "--chunked-prefill-size": "chunk",
    "--dcp-size": "dcp", "--decode-context-parallel-size": "dcp",
}
# SGLang sets ep_size = tp_size when the MoE all-to-all runs on one of these backends and no --ep is given
# (python/sglang/srt/server_args.py)
_SGLANG_EP_A2A = ("deepep", "mooncake", "flashinfer")
# --enable-ep-moe and --enable-deepep-moe, deprecated since SGLang v0.4.9 but still in published launches, set
# ep_size = tp_size (the second also selects the DeepEP all-to-all), overriding --ep
SGLANG_BOOL = {"--enable-dp-attention": "adp_on", "--enable-ep-moe": "ep_is_tp", "--enable-deepep-moe": "ep_is_tp"}
_TRTLLM_FLAGS = {
    "--tp_size": "tp", "--pp_size": "pp", "--ep_size": "ep", "--moe_expert_parallel_size": "ep",
    "--max_batch_size": "batch", "--max_seq_len": "context", "--model": "model", "--max_num_tokens": "chunk",
}
# LLM-API options of the --config / --extra_llm_api_options YAML that say something about the plan
_TRTLLM_CONFIG_KEYS = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp", "moe_expert_parallel_size": "ep",
                       "max_num_tokens": "chunk"}
# the same sizes under trtllm-serve's flag names, as some of NVIDIA's example YAMLs of 2025 spell them
# (examples/configs/gpt-oss-120b-throughput.yaml: tp_size / ep_size; later files use the LLM-API names)
_TRTLLM_CONFIG_ALIASES = {"tp_size": "tensor_parallel_size", "pp_size": "pipeline_parallel_size",
                          "ep_size": "moe_expert_parallel_size"}
_SGLANG_REFUSE = {
    "--disaggregation-mode": "one --disaggregation-mode command describes one pool of a disaggregated deployment; "
                             "import the pool without the flag, then combine prefill and decode pools in one plan "
                             "with options.disaggregated and phases.decode",
}


def vllm_config_args(config: dict[str, Any] | None) -> list[str]:
    """vLLM's ``--config`` YAML (keys: the long flag names) as arguments to put before the command's own, which
    win as in vLLM: ``true`` is the bare switch, ``false`` its ``--no-`` form, a list one flag with its values."""
    if config is None:
        return []
    if not isinstance(config, dict):
        raise PdagInputError("engine_config", f"expected a mapping, got {type(config).__name__}",
                             "the --config YAML of vllm serve as an object (keys: flag names without '--')")
    out: list[str] = []
    for key, value in config.items():
        flag = "--" + str(key).lstrip("-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + flag[2:])
        elif isinstance(value, list):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def split_command(command: str) -> list[str]:
    try:
        tokens = shlex.split(command.replace("\\\n", " "), comments=True)  # export's "# replica on node" lines
    except ValueError as exc:
        raise PdagInputError("command", f"cannot parse the command line ({exc})", "a shell command") from None
    # Leading environment assignments (CUDA_VISIBLE_DEVICES=0,1 ...) and launchers are skipped.
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
        tokens.pop(0)
    return tokens


_VLLM_IMAGES = {"vllm/vllm-openai", "vllm/vllm-openai-rocm", "rocm/vllm"}
# NVIDIA Dynamo's workers (python -m dynamo.vllm / dynamo.sglang / dynamo.trtllm): the first two take their engine's
# own server flags, dynamo.trtllm its own spelling of trtllm-serve's (components/src/dynamo/trtllm/backend_args.py)
DYNAMO = {"dynamo.vllm": "vllm", "dynamo.sglang": "sglang", "dynamo.trtllm": "trtllm"}
_DYNAMO_TRTLLM_FLAGS = {
    "--model": "model", "--model-path": "model", "--tensor-parallel-size": "tp", "--pipeline-parallel-size": "pp",
    "--expert-parallel-size": "ep", "--max-batch-size": "batch", "--max-seq-len": "context",
    "--max-num-tokens": "chunk",
}
_DYNAMO_TRTLLM_BOOL = {"--enable-attention-dp": "adp_on"}


def detect_engine(tokens: list[str]) -> tuple[str, list[str], str | None]:
    """(engine, the arguments after the entry point, positional model if any)."""
    for i, tok in enumerate(tokens):
        name = tok.split("/")[-1]
        if name == "vllm" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            rest = tokens[i + 2:]
            if rest and not rest[0].startswith("-"):
                return "vllm", rest[1:], rest[0]
            return "vllm", rest, None
        if tok in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
            return "vllm", tokens[i + 1:], None
        if tok.split(":")[0] in _VLLM_IMAGES and i > 0:
            # docker run ... vllm/vllm-openai[:tag] <server flags>: the image's entry point is the API server
            return "vllm", tokens[i + 1:], None
        if name == "trtllm-serve":
            rest = tokens[i + 1:]
            if rest[:1] == ["disaggregated"]:
                raise EngineCannotExpress(
                    "command", "'trtllm-serve disaggregated -c <config>' names its context and generation servers in "
                    "the config file; import each server's own trtllm-serve command and combine the pools in one "
                    "plan (options.disaggregated, phases.decode)", "one trtllm-serve command")
            rest = rest[1:] if rest[:1] == ["serve"] else rest
            if rest and not rest[0].startswith("-"):
                return "trtllm", rest[1:], rest[0]
            return "trtllm", rest, None
        if tok in DYNAMO:
            return DYNAMO[tok], tokens[i + 1:], None
        if tok in ("sglang.launch_server",) or (name == "sglang" and tokens[i + 1:i + 2] == ["serve"]):
            skip = 1 if tok == "sglang.launch_server" else 2
            return "sglang", tokens[i + skip:], None
    raise PdagInputError("command", "not a vLLM, SGLang or TensorRT-LLM launch command",
                         "'vllm serve <model> ...', 'python -m sglang.launch_server --model-path <model> ...' or "
                         "'trtllm-serve <model> ...'")


def bare_model(unread: list[str]) -> str | None:
    """vllm serve's model is an argparse positional, so it may follow options (``vllm serve --uvicorn-log-level=info
    /models/x``): the first bare token the flag parser left over."""
    return next((t for t in unread if not t.startswith("-")), None)


def vllm_dashes(args: list[str]) -> list[str]:
    """vLLM's argument parser reads ``--tensor_parallel_size`` as ``--tensor-parallel-size``; so does import.  Only
    the flag's name up to its first dot changes: the keys after it are a JSON object's (``--speculative-config.
    num_speculative_tokens``)."""
    out = []
    for a in args:
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            flag, dot, keys = name.partition(".")
            a = flag.replace("_", "-") + dot + keys + eq + value
        out.append(a)
    return out


def _int(flag: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        shell = value.startswith("$")  # $TP_SIZE, $((A * B)): left to the shell that runs the command
        raise PdagInputError(f"command.{flag}", f"expected an integer, got {value!r}"
                             + (", a shell variable or expression pdag cannot expand" if shell else ""),
                             "the command with its variables expanded" if shell else "an integer >= 1") from None
    if n < 1:
        raise PdagInputError(f"command.{flag}", f"value {n} must be >= 1", "an integer >= 1")
    return n


def _unabbreviated(flag: str, known: list[str]) -> str:
    """The flag an abbreviation stands for: vLLM's and SGLang's argparse parsers keep argparse's default
    allow_abbrev, so a unique prefix of a long option is that option (``--tensor-parallel 8`` is
    ``--tensor-parallel-size 8``).  Only prefixes of at least six characters that fit one known flag are read."""
    if not flag.startswith("--") or len(flag) < 6 or flag in known:
        return flag
    hits = [k for k in known if k.startswith(flag)]
    return hits[0] if len(hits) == 1 else flag


def parse_flags(args: list[str], table: dict[str, str], bools: dict[str, str], refuse: dict[str, str | None],
                 engine: str, abbrev: bool = False) -> tuple[dict[str, str], list[str]]:
    values: dict[str, str] = {}
    ignored: list[str] = []
    known = [*table, *bools, *refuse] if abbrev else []
    i = 0
    while i < len(args):
        tok = args[i]
        flag, eq, inline = tok.partition("=")
        flag = _unabbreviated(flag, known) if abbrev else flag
        if flag in refuse:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "")
            reason = refuse[flag]
            if reason and value not in ("1", "null", "None", "false", "False"):
                raise EngineCannotExpress(f"command.{flag}", f"{engine}: {reason}", "a plan without it")
            i += 1 if (eq or not value) else 2
            continue
        if flag in bools:
            values[bools[flag]] = "1"
            i += 1
            continue
        if flag in table:
            if eq:
                values[table[flag]] = inline
                i += 1
            else:
                if i + 1 >= len(args):
                    raise PdagInputError(f"command.{flag}", "missing value", "a value after the flag")
                values[table[flag]] = args[i + 1]
                i += 2
            continue
        if tok.startswith("-"):
            has_value = not eq and i + 1 < len(args) and not args[i + 1].startswith("-")
            ignored.append(tok if not has_value else f"{tok} {args[i + 1]}")
            i += 2 if has_value else 1
            continue
        ignored.append(tok)
        i += 1
    return values, ignored


def trtllm_config_values(config: dict[str, Any] | None) -> dict[str, str]:
    """The plan-relevant options of a TensorRT-LLM ``--config`` YAML (given as a parsed mapping)."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise PdagInputError("engine_config", f"expected a mapping, got {type(config).__name__}",
                             "the --config YAML of trtllm-serve as an object")
    config = {**{_TRTLLM_CONFIG_ALIASES.get(k, k): v for k, v in config.items() if k in _TRTLLM_CONFIG_ALIASES},
              **{k: v for k, v in config.items() if k not in _TRTLLM_CONFIG_ALIASES}}
    out = {key: str(config[name]) for name, key in _TRTLLM_CONFIG_KEYS.items() if name in config}
    if config.get("enable_attention_dp") is True:
        out["adp_on"] = "1"
    off_key = engine_profile("trtllm").scheduler.off_config_key
    if off_key and isinstance(config.get(off_key), bool):
        out["ahead_off" if config[off_key] else "ahead_on"] = "1"
    kv = config.get("kv_cache_config")
    if isinstance(kv, dict) and isinstance(kv.get("dtype"), str):
        out["kv"] = kv["dtype"]
    out.update(features.trtllm_values(config))
    return out


def _kv_auto_note(repo: str) -> list[str]:
    """The engines' default KV dtype 'auto' follows a ModelOpt checkpoint's own KV quantization, which pdag cannot
    read offline (knowledge/engines.md, 'KV cache dtype'): say so for NVIDIA's quantized repos."""
    name = repo.strip().rstrip("/")
    if not name.lower().startswith("nvidia/") or format_of_checkpoint(name) is None:
        return []
    return [f"KV cache 'auto': {name} is a ModelOpt checkpoint, whose hf_quant_config.json may set "
            "kv_cache_quant_algo FP8, which the engine then follows; pdag assumes a 16-bit cache: set "
            "kv_dtype 'fp8' if the checkpoint asks for one"]


def _graph_lists(args: list[str]) -> tuple[list[str], list[int] | None]:
    """``args`` without vLLM's capture-size list flags, and the sizes they give (None: no such flag)."""
    rest: list[str] = []
    sizes: list[int] | None = None
    i = 0
    while i < len(args):
        flag, eq, inline = args[i].partition("=")
        if flag not in _VLLM_GRAPH_LISTS:
            rest.append(args[i])
            i += 1
            continue
        items = inline.replace(",", " ").split() if eq else []
        i += 1
        while not eq and i < len(args) and not args[i].startswith("-"):
            items += args[i].replace(",", " ").split()
            i += 1
        sizes = (sizes or []) + [_int(flag, v.strip("[]")) for v in items if v.strip("[]")]
    return rest, sizes


def vllm_dotted(args: list[str]) -> list[str]:
    """vLLM's dotted keys of a JSON argument (``--speculative-config.method mtp``, ``--compilation-config.x=1``,
    ``-O.cudagraph_mode NONE``, ``--x.list+ a,b``) gathered into one JSON object per argument and appended after the
    other arguments, as vLLM's FlexibleArgumentParser does (vllm/utils/argparse_utils.py): each value is read as
    JSON, else kept as text; a later JSON form of the same argument is replaced by it, as argparse keeps the last."""
    rest: list[str] = []
    merged: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        head, dot, path = name.partition(".")
        if not (args[i].startswith("-") and dot and path and head.lstrip("-")[:1].isalpha()):  # not -0.5
            rest.append(args[i])
            i += 1
            continue
        if not eq and i + 1 >= len(args):
            raise PdagInputError(f"command.{name}", "missing value", "a value after the dotted flag")
        text = inline if eq else args[i + 1]
        i += 1 if eq else 2
        keys = path.split(".")
        value: Any
        if keys[-1].endswith("+"):
            keys[-1] = keys[-1][:-1]
            value = text.split(",")
        else:
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = text
        if not all(keys):
            raise PdagInputError(f"command.{name}", "empty key in a dotted flag", "--flag.key value")
        node = merged.setdefault("--compilation-config" if head == "-O" else head, {})
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        last = keys[-1]
        if isinstance(value, list) and isinstance(node.get(last), list):
            node[last] = node[last] + value
        else:
            node[last] = value
    for head, obj in merged.items():
        rest += [head, json.dumps(obj)]
    return rest


def _vllm_graph_max(values: dict[str, str], sizes: list[int] | None, notes: list[str]) -> int | None:
    """The largest pass vLLM replays as a CUDA graph under these flags (None: the profile's default)."""
    if values.get("eager"):
        notes.append("--enforce-eager: no CUDA graphs; prefill is priced eager, decode still under graphs (pdag "
                     "has no eager decode)")
        return 0
    compile_cfg: dict[str, Any] = {}
    if "compile" in values:
        try:
            loaded = json.loads(values["compile"])
        except json.JSONDecodeError:
            loaded = None
        if isinstance(loaded, dict):
            compile_cfg = loaded
        elif values["compile"].strip().isdigit():
            compile_cfg = {}  # -O <level>: an optimisation level, not a capture setting
        else:
            notes.append("--compilation-config is not a JSON object: ignored")
    mode = str(compile_cfg.get("cudagraph_mode", "")).upper()
    if mode in ("NONE", "FULL_DECODE_ONLY"):
        return 0
    listed = compile_cfg.get("cudagraph_capture_sizes")
    if isinstance(listed, list) and listed and all(type(v) is int and v >= 0 for v in listed):
        sizes = (sizes or []) + listed
    for key in ("max_cudagraph_capture_size", "max_capture_size"):
        if type(compile_cfg.get(key)) is int and compile_cfg[key] >= 0:
            return int(compile_cfg[key])
    if "graph_max" in values:
        return _int("--max-cudagraph-capture-size", values["graph_max"])
    if sizes:
        return max(sizes)
    if "batch" in values:
        return engine_profile("vllm").default_graph_max_tokens(_int("--max-num-seqs", values["batch"]))
    return None


def _context_cap_note(plan: dict[str, Any], values: dict[str, str], flag: str) -> list[str]:
    """The engine reserves KV for one request of its context cap at start-up (vLLM refuses to start when its
    cache cannot hold max_model_len tokens): say so when the plan's memory holds fewer."""
    try:
        cap = int(values["context"])
        one = parse_plan({**plan, "workload": {"input_len": 1, "output_len": 1, "batch_size": 1}})
        room = one_sequence_tokens(one, engine_window_kv(one)[0])
    except (KeyError, ValueError, PdagInputError):
        return []
    if room and cap > room:
        return [f"{flag} {cap}: the KV cache holds about {room} tokens per replica at this layout, fewer than one "
                "request of the cap (vLLM refuses to start; other engines cannot serve such a request): lower the "
                "cap or spread the model over more GPUs"]
    return []


def _scheduler_flags(engine: str) -> dict[str, str]:
    """The launch flags that switch the engine's look-ahead scheduler on or off (profile ``scheduler``)."""
    sch = engine_profile(engine).scheduler
    return {flag: key for flag, key in ((sch.on_flag, "ahead_on"), (sch.off_flag, "ahead_off")) if flag}


def _engine_options(values: dict[str, str], engine: str, graph_max: int | None,
                    notes: list[str]) -> dict[str, Any]:
    """plan.engine_options from the flags: the step's token budget, the largest graphed pass and whether the
    scheduler runs a step ahead (set only when a flag says so)."""
    out: dict[str, Any] = {}
    if "ahead_off" in values or "ahead_on" in values:
        out["scheduler_ahead"] = "ahead_off" not in values
    if "chunk" in values:
        try:
            chunk = int(values["chunk"])
        except ValueError:
            raise PdagInputError("command.chunk", f"expected an integer token budget, got {values['chunk']!r}",
                                 "an integer >= 1") from None
        if chunk >= 1:
            out["max_batched_tokens"] = chunk
        else:
            notes.append(f"{engine}: chunked prefill disabled ({chunk}); the profile's step budget is kept")
    if graph_max is not None:
        out["graph_max_tokens"] = graph_max
    return out


def import_command(command: str, gpu: str = "h100-sxm", gpus_per_node: int = 8,
                   engine_config: dict[str, Any] | None = None, replicas: int = 1,
                   hf_config: dict[str, Any] | None = None) -> ImportResult:
    """A plan from a pasted launch command (``_import_one``), run as ``replicas`` identical servers: a
    Kubernetes Deployment's replica count, or the same command started on several machines behind a router,
    which is pdag's plain DP (each replica the command's GPUs)."""
    gpu = accelerator_id(gpu) if isinstance(gpu, str) else gpu
    if type(replicas) is not int or replicas < 1:
        raise PdagInputError("replicas", f"expected an integer >= 1, got {replicas!r}",
                             "the number of servers running this command (1 unless a router spreads requests)")
    result = _import_one(command, gpu, gpus_per_node, engine_config, hf_config)
    plan, notes = json.loads(json.dumps(result.plan)), list(result.notes)
    if replicas > 1:
        plan["parallel"]["dp"] *= replicas
        plan["hardware"]["num_gpus"] *= replicas
        notes.append(f"{replicas} replicas of this server: dp {plan['parallel']['dp']}, "
                     f"{plan['hardware']['num_gpus']} GPUs")
    _replicas_serve_throughput(plan, notes)
    parse_plan(plan)
    return ImportResult(engine=result.engine, plan=plan, notes=notes)


def _replicas_serve_throughput(plan: dict[str, Any], notes: list[str]) -> None:
    """A deployment of several replicas exists to serve many users at once: an imported plan with DP states the
    throughput objective (a command says none; pdag's default, latency, would flag the replicas it describes)."""
    dps = [plan["parallel"].get("dp", 1), (plan.get("phases") or {}).get("decode", {}).get("dp", 1)]
    if max(dps) > 1 and plan.get("objective") != "throughput":
        plan["objective"] = "throughput"
        notes.append(f"dp {max(dps)}: replicas serve concurrent users, so the plan's objective is throughput "
                     "(set objective 'latency' to judge one request's latency)")


_VLLM_A2A_ENV = "VLLM_ALL2ALL_BACKEND"  # the backend's environment spelling before vLLM 0.11's flag
_VLLM_A2A_DEFAULT = "allgather_reducescatter"  # vLLM docs, serving/expert_parallel_deployment.md: the default backend


def _vllm_backend_note(ignored: list[str], command: str) -> list[str]:
    """What a vLLM DP+EP command's all-to-all is against the DeepEP one the vllm profile prices."""
    priced = engine_profile("vllm").alltoall
    flag = priced.launch_flags[0]
    set_by_env = re.search(rf"(?:^|\s){_VLLM_A2A_ENV}=(\S+)", command)
    env = set_by_env.group(1) if set_by_env else _VLLM_A2A_DEFAULT
    given = next((re.split(r"[= ]", t, maxsplit=1)[-1] for t in ignored if re.split(r"[= ]", t)[0] == flag),
                 env)  # parse_flags keeps an unmodelled flag with its value: "--flag value"
    if given in (priced.launch_flags[1:] + priced.prefill_pool_launch_flags[1:]):
        return []
    return [f"{flag} {given}: pdag prices the MoE exchange as {priced.implementation} "
            f"({shlex.join(priced.launch_flags)}), which this command does not run: expect it slower than estimated"]


def _import_one(command: str, gpu: str, gpus_per_node: int, engine_config: dict[str, Any] | None,
                hf_config: dict[str, Any] | None = None) -> ImportResult:
    """A plan from a pasted vLLM, SGLang or TensorRT-LLM launch command.  The model comes from the Hugging Face
    repo (matched to a preset through ``knowledge/models/index.json``), the degrees from the flags; the GPU type
    and node size come from the arguments and the GPU count is the engine's own count.  ``engine_config`` is
    the ``--config`` YAML the command reads (parsed): TensorRT-LLM's LLM-API options, which override the command's
    flags as in trtllm-serve, or vLLM's flag values, which the command's own flags override as in vllm serve."""
    if not isinstance(command, str) or not command.strip():
        raise PdagInputError("command", "empty command", "a vLLM, SGLang or TensorRT-LLM launch command")
    tokens = split_command(command)
    engine, args, positional = detect_engine(tokens)
    dynamo = next((t for t in tokens if t in DYNAMO), None)
    if dynamo and engine != "sglang":  # SGLang's own --disaggregation-mode is refused by its table
        _refuse_pool_role(args, dynamo)
    if engine == "trtllm":
        return _import_trtllm(args, positional, gpu, gpus_per_node, engine_config, dynamo=bool(dynamo),
                              hf_config=hf_config)
    sizes: list[int] | None = None
    switch = engine_profile(engine).overlap.launch_flag
    switches = {switch: "overlap_on"} if switch else {}
    switches.update(_scheduler_flags(engine))
    if engine == "vllm":
        args, sizes = _graph_lists(vllm_dotted(vllm_dashes(vllm_config_args(engine_config) + args)))
        values, ignored = parse_flags(args, {**VLLM_FLAGS, **features.VLLM_FLAGS},
                                       {**VLLM_BOOL, **features.VLLM_BOOL, **switches}, _VLLM_REFUSE, "vLLM",
                                       abbrev=True)
    else:
        if engine_config is not None:
            raise PdagInputError("engine_config", "SGLang commands take no config file here",
                                 "the flags on the command line (engine_config is for trtllm-serve and vllm serve)")
        values, ignored = parse_flags(args, {**SGLANG_FLAGS, **features.SGLANG_FLAGS},
                                       {**SGLANG_BOOL, **features.SGLANG_BOOL, **switches}, _SGLANG_REFUSE,
                                       "SGLang", abbrev=True)
    repo = positional or values.get("model") or (bare_model(ignored) if engine == "vllm" else None)
    if not repo:
        raise PdagInputError("command.model", "no model given", "the HF repo after 'vllm serve' or --model-path")
    ignored = [t for t in ignored if t != repo]
    model, note = _model_of(repo, hf_config)
    notes = [note] if note else []
    tp = _int("tp", values.get("tp", "1"))
    pp = _int("pp", values.get("pp", "1"))
    dp = _int("dp", values.get("dp", "1"))
    plan: dict[str, Any] = {"model": model, "checkpoint": repo.strip().rstrip("/")}
    spec = parse_plan({"model": model, "hardware": {"gpu": gpu, "num_gpus": 1}}).spec
    options: dict[str, Any] = {}
    attn_dp = 1
    ep_default = str(tp) if values.get("a2a", "none").lower() in _SGLANG_EP_A2A else "1"
    if values.get("ep_is_tp"):
        values["ep"] = str(tp)
    if engine == "vllm":
        ep = 1
        if values.get("ep_on"):
            if not spec.is_moe:
                notes.append("--enable-expert-parallel ignored: the model has no MoE layers")
            elif dp > 1:
                # vLLM DP+EP: dp engines with their own attention and KV, one EP group of tp*dp GPUs
                attn_dp, ep, dp = dp, tp * dp, 1
                options["allow_attention_dp"] = True
                notes.append(f"vLLM DP+EP read as attention-DP: {attn_dp} groups of attention TP {tp}, experts "
                             f"over all {ep} GPUs; --max-num-seqs is per DP engine")
            else:
                ep = tp
        if spec.is_moe and ep < tp:
            options["allow_expert_tp"] = True
        if attn_dp > 1:
            notes += _vllm_backend_note(ignored, command)
    elif values.get("adp_on") and dp > 1:
        if not spec.is_moe:
            raise EngineCannotExpress("command.--enable-dp-attention", "DP attention on a model without MoE layers "
                                      "(pdag's attention-DP shares experts between the groups)", "a MoE model")
        if tp % dp:
            raise EngineCannotExpress("command.--dp", f"--dp {dp} must divide --tp {tp} with DP attention",
                                      "dp dividing tp")
        ep = _int("ep", values.get("ep", ep_default))
        if ep > tp or tp % ep:
            raise EngineCannotExpress("command.--ep", f"SGLang needs ep to divide tp (ep={ep}, tp={tp})",
                                      "ep dividing tp")
        attn_dp, tp, dp = dp, tp // dp, 1
        options["allow_attention_dp"] = True
        if ep < tp * attn_dp:
            options["allow_expert_tp"] = True
        notes.append(f"--enable-dp-attention: {attn_dp} attention groups of TP {tp} inside the TP world of "
                     f"{tp * attn_dp} GPUs (GPU count = --tp)")
    else:
        if values.get("adp_on"):
            notes.append("--enable-dp-attention with --dp 1 is plain TP")
        ep = _int("ep", values.get("ep", ep_default))
        if ep > 1 and not spec.is_moe:
            notes.append("--ep ignored: the model has no MoE layers")
            ep = 1
        if spec.is_moe:
            if ep > tp or tp % ep:
                raise EngineCannotExpress("command.--ep", f"SGLang needs ep to divide tp (ep={ep}, tp={tp})",
                                          "ep dividing tp")
            if ep < tp:
                options["allow_expert_tp"] = True
    if switch and ep > 1:  # the profile's EP overlap is opt-in: the command says whether it is on
        options["overlap_comm"] = bool(values.get("overlap_on"))
        if not values.get("overlap_on"):
            notes.append(f"no {switch}: the EP all-to-all stays on the critical path (options.overlap_comm false)")
    parallel = {"dp": dp, "pp": pp, "tp": tp, "ep": ep, "sp": 1}
    if attn_dp > 1:
        parallel["attn_dp"] = attn_dp
    dcp = _int("dcp", values.get("dcp", "1"))
    if dcp > 1:
        parallel["dcp"] = dcp
        notes.append(f"decode context parallel {dcp}: each request's KV striped by token over {dcp} ranks of the TP "
                     "group (no extra GPUs), its partial attention outputs merged every decode step")
    plan["hardware"] = {"gpu": gpu, "num_gpus": dp * pp * tp * attn_dp, "gpus_per_node": gpus_per_node}
    plan["parallel"] = parallel
    limits = [f"{flag} {values[key]}" for key, flag in (("batch", "sequence cap"), ("context", "context cap"))
              if key in values]
    if limits:
        notes.append("serving limits (" + ", ".join(limits) + ") are engine caps, not the workload: the plan keeps "
                     "the default workload (set the real batch and lengths before estimating) and the caps in "
                     "engine_options, which export writes back")
    dtype = values.get("dtype", "auto").lower()
    quant = values.get("quant", "").lower()
    if dtype in DTYPE_FROM_FLAG:
        plan["dtype"] = DTYPE_FROM_FLAG[dtype]
    weights = format_of_flag(engine, quant) if quant else None
    if quant and weights is None:
        notes.append(f"quantisation {quant!r} not mapped; weights read from the checkpoint")
    weights = weights or checkpoint_format(repo, spec)
    if weights and weights != plan.get("dtype", "bf16"):
        plan["weights"] = weights
    kv = values.get("kv", "auto").lower()
    if kv.startswith("fp8"):
        plan["kv_dtype"] = "fp8"
    elif kv == "auto":
        notes.extend(_kv_auto_note(repo))
    if options:
        plan["options"] = options
    engine_options = _engine_options(values, engine, _vllm_graph_max(values, sizes, notes) if engine == "vllm"
                                     else None, notes)
    engine_options.update(_caps_and_extra(values, ignored, engine, notes))
    if engine_options:
        plan["engine_options"] = engine_options
    plan.update(features.import_features(values, engine, notes, spec.mtp_layers))
    if engine == "sglang" and any(t.split("=")[0] == "--disable-cuda-graph" for t in ignored):
        notes.append("--disable-cuda-graph: decode runs without CUDA graphs, which pdag does not price (its decode "
                     "is graphed): the estimate is optimistic for small batches")
    plan["engine"] = engine  # the estimate then uses this engine's profile (knowledge/engines/)
    parse_plan(plan)  # fail here, with field paths, if the result is malformed
    notes.extend(_context_cap_note(plan, values, "--max-model-len" if engine == "vllm" else "--context-length"))
    return ImportResult(engine=engine, plan=plan, notes=notes)


# Flags that say where a server runs (its node, address, port), not what it runs: export writes them per node or
# replica, import reads past them instead of carrying them as the command's own flags.
_PLACEMENT = {
    "vllm": {"--config", "--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
             "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp", "--headless", "--nnodes", "-n",
             "--node-rank", "-r", "--master-addr", "--master-port", "--distributed-executor-backend", "--port",
             "--host"},
    "sglang": {"--nnodes", "--node-rank", "--dist-init-addr", "--nccl-init-addr", "--port", "--host"},
    "trtllm": {"--port", "--host", "--config", "--extra_llm_api_options"},
}


def _caps_and_extra(values: dict[str, str], ignored: list[str], engine: str, notes: list[str]) -> dict[str, Any]:
    """engine_options a command states beyond the layout: its context and sequence caps as given, and the flags
    pdag does not model (kept to be written back unchanged), less the placement flags."""
    key = {"TensorRT-LLM": "trtllm"}.get(engine, engine)
    out: dict[str, Any] = {}
    for name, field, flag in (("context", "max_model_len", "context cap"), ("batch", "max_num_seqs", "sequence cap")):
        if name in values:
            try:
                out[field] = int(values[name])
            except ValueError:
                notes.append(f"{flag} {values[name]!r} is not an integer: not kept")
    extra: list[str] = []
    for item in ignored:
        flag, _, value = item.partition(" ")
        if not flag.startswith("-") or flag.partition("=")[0] in _PLACEMENT[key]:
            continue
        extra += [flag, value] if value else [flag]
    if extra:
        out["extra_args"] = extra
        notes.append("flags without a plan field, kept as they are in engine_options.extra_args (written back by an "
                     "export to the same engine): " + " ".join(extra))
    return out


def _refuse_pool_role(args: list[str], worker: str) -> None:
    """A Dynamo worker started as one pool of a disaggregated deployment (``--disaggregation-mode prefill|decode``,
    or dynamo.vllm's ``--is-prefill-worker``) is imported with its other pool, not alone."""
    for i, tok in enumerate(args):
        flag, eq, inline = tok.partition("=")
        role = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
        if flag == "--is-prefill-worker" or (flag == "--disaggregation-mode" and role in ("prefill", "decode")):
            raise EngineCannotExpress(
                f"command.{flag}", f"{worker}: this worker is one pool of a disaggregated deployment; import it "
                "with the other pool's command (import_disaggregated, or the corpus's decode_command)",
                "an aggregated worker, or both pools' commands")


def trtllm_values(args: list[str], config: dict[str, Any] | None, dynamo: bool = False) -> tuple[dict[str, str],
                                                                                              list[str]]:
    """The plan-relevant flags of a trtllm-serve command (or of a Dynamo ``dynamo.trtllm`` worker, which spells
    them ``--tensor-parallel-size``, ``--expert-parallel-size``, ``--enable-attention-dp`` and reads its YAML
    from ``--extra-engine-args``), with the YAML's options over them as in trtllm-serve."""
    if dynamo:
        values, ignored = parse_flags(args, _DYNAMO_TRTLLM_FLAGS, _DYNAMO_TRTLLM_BOOL, {}, "Dynamo TensorRT-LLM")
    else:
        values, ignored = parse_flags(args, _TRTLLM_FLAGS, {}, {}, "TensorRT-LLM")
    values.update(trtllm_config_values(config))
    return values, ignored


def _import_trtllm(args: list[str], positional: str | None, gpu: str, gpus_per_node: int,
                   engine_config: dict[str, Any] | None, dynamo: bool = False,
                   hf_config: dict[str, Any] | None = None) -> ImportResult:
    """trtllm-serve: ``--tp_size T --pp_size P --ep_size E`` (TensorRT-LLM requires ``T = moe_tp * moe_ep``;
    without ``--ep_size`` its mapping keeps EP 1 and shards experts by TP), and from the ``--config`` YAML
    ``enable_attention_dp`` (attention on each of the T ranks with TP 1: pdag's ``attn_dp = T, tp = 1``)."""
    values, ignored = trtllm_values(args, engine_config, dynamo)
    repo = positional or values.get("model")
    if not repo:
        raise PdagInputError("command.model", "no model given", "the HF repo after 'trtllm-serve'")
    model, note = _model_of(repo, hf_config)
    notes = [note] if note else []
    world, pp, ep = (_int(k, values.get(k, "1")) for k in ("tp", "pp", "ep"))
    spec = parse_plan({"model": model, "hardware": {"gpu": gpu, "num_gpus": 1}}).spec
    if ep > 1 and not spec.is_moe:
        notes.append("--ep_size ignored: the model has no MoE layers")
        ep = 1
    if ep > world or world % ep:
        raise EngineCannotExpress("command.--ep_size", f"TensorRT-LLM needs tp_size = moe_tp * moe_ep (ep={ep}, "
                                  f"tp={world})", "ep_size dividing tp_size")
    options: dict[str, Any] = {}
    parallel: dict[str, int] = {"dp": 1, "pp": pp, "tp": world, "ep": ep, "sp": 1}
    if values.get("adp_on") and world > 1:
        if not spec.is_moe:
            raise EngineCannotExpress("engine_config.enable_attention_dp", "attention DP on a model without MoE "
                                      "layers (pdag's attention-DP shares experts between the groups)", "a MoE model")
        parallel.update(tp=1, attn_dp=world)
        options["allow_attention_dp"] = True
        notes.append(f"enable_attention_dp: {world} attention groups of TP 1, experts over ep_size={ep} GPUs")
    if spec.is_moe and ep < world:
        options["allow_expert_tp"] = True
    plan: dict[str, Any] = {"model": model, "checkpoint": repo.strip().rstrip("/"),
                            "hardware": {"gpu": gpu, "num_gpus": world * pp, "gpus_per_node": gpus_per_node},
                            "parallel": parallel}
    if values.get("kv", "").lower().startswith("fp8"):
        plan["kv_dtype"] = "fp8"
    elif values.get("kv", "auto").lower() == "auto":
        notes.extend(_kv_auto_note(repo))
    weights = checkpoint_format(repo, spec)
    if weights and weights != "bf16":
        plan["weights"] = weights
    if options:
        plan["options"] = options
    engine_options = _engine_options(values, "TensorRT-LLM", None, notes)
    engine_options.update(_caps_and_extra(values, ignored, "trtllm", notes))
    if engine_options:
        plan["engine_options"] = engine_options
    limits = [f"{flag} {values[key]}" for key, flag in (("batch", "--max_batch_size"), ("context", "--max_seq_len"))
              if key in values]
    if limits:
        notes.append("serving limits (" + ", ".join(limits) + ") are engine caps, not the workload: kept in "
                     "engine_options for the export")
    plan.update(features.import_features(values, "trtllm", notes))
    plan["engine"] = "trtllm"
    parse_plan(plan)
    notes.extend(_context_cap_note(plan, values, "--max_seq_len"))
    return ImportResult(engine="trtllm", plan=plan, notes=notes)




def _without_role(command: str, engine_role: str) -> str:
    """The command of one pool with its role flag removed (after checking the role is the one expected)."""
    tokens = split_command(command)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        flag, eq, inline = tokens[i].partition("=")
        if flag == "--disaggregation-mode":
            role = inline if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if role != engine_role:
                raise PdagInputError("command.--disaggregation-mode", f"the {engine_role} pool's command says "
                                     f"{role!r}", f"--disaggregation-mode {engine_role}")
            i += 1 if eq else 2
            continue
        if flag == "--is-prefill-worker":  # dynamo.vllm's older prefill marker
            if engine_role != "prefill":
                raise PdagInputError("command.--is-prefill-worker", f"the {engine_role} pool's command marks a "
                                     "prefill worker", "the prefill pool's command")
            i += 1
            continue
        out.append(tokens[i])
        i += 1
    return shlex.join(out)


def import_disaggregated(prefill_command: str, decode_command: str, gpu: str = "h100-sxm", gpus_per_node: int = 8,
                         engine_config: dict[str, Any] | None = None,
                         decode_engine_config: dict[str, Any] | None = None, replicas: int = 1,
                         decode_replicas: int = 1, hf_config: dict[str, Any] | None = None) -> ImportResult:
    """A disaggregated plan from the launch commands of its two pools (SGLang ``--disaggregation-mode prefill``
    and ``decode``; vLLM servers with a ``--kv-transfer-config``), each run by ``replicas`` / ``decode_replicas``
    servers: ``parallel`` is the prefill pool's layout, ``phases.decode`` the decode pool's, and the GPUs are
    both pools' (prefill first)."""
    pre = import_command(_without_role(prefill_command, "prefill"), gpu, gpus_per_node, engine_config, replicas,
                         hf_config)
    dec = import_command(_without_role(decode_command, "decode"), gpu, gpus_per_node, decode_engine_config,
                         decode_replicas, hf_config)
    if pre.engine != dec.engine:
        raise PdagInputError("decode_command", f"a {dec.engine} decode pool behind a {pre.engine} prefill pool",
                             "both pools on the same engine")
    for key in ("model", "checkpoint"):
        if pre.plan.get(key) != dec.plan.get(key):
            raise PdagInputError(f"decode_command.{key}", f"the pools serve {pre.plan.get(key)!r} and "
                                 f"{dec.plan.get(key)!r}", "the same checkpoint in both pools")
    plan = dict(pre.plan)
    # every decode degree stated: one left out would inherit the prefill pool's (attention-DP groups above all)
    plan["phases"] = {"decode": {"attn_dp": 1, **dec.plan["parallel"]}}
    if dec.plan.get("engine_options", {}) != pre.plan.get("engine_options", {}):
        plan["decode_engine_options"] = dec.plan.get("engine_options", {})
    if dec.plan.get("objective") == "throughput":
        plan["objective"] = "throughput"
    options = {**pre.plan.get("options", {}), **{k: v for k, v in dec.plan.get("options", {}).items() if v}}
    plan["options"] = {**options, "disaggregated": True}
    plan["hardware"] = {**pre.plan["hardware"],
                        "num_gpus": pre.plan["hardware"]["num_gpus"] + dec.plan["hardware"]["num_gpus"]}
    if dec.plan.get("kv_dtype") != pre.plan.get("kv_dtype"):
        raise PdagInputError("decode_command.kv_cache_dtype", "the pools store the KV cache in different dtypes",
                             "one KV dtype (the KV hand-off copies it as is)")
    parse_plan(plan)
    notes = [f"prefill pool: {n}" for n in pre.notes] + [f"decode pool: {n}" for n in dec.notes]
    return ImportResult(engine=pre.engine, plan=plan, notes=notes)


def import_deployment(command: str, gpu: str = "h100-sxm", gpus_per_node: int = 8,
                      engine_config: dict[str, Any] | None = None, replicas: int = 1,
                      decode_command: str | None = None, decode_engine_config: dict[str, Any] | None = None,
                      decode_replicas: int = 1, workload: dict[str, Any] | None = None,
                      objective: str | None = None, hf_config: dict[str, Any] | None = None) -> ImportResult:
    """Every front's import: one server's ``command`` (``import_command``), or with ``decode_command`` a
    disaggregated deployment (``import_disaggregated``), whose decode pool reads the prefill pool's engine config
    unless it has its own (one YAML file shared by both pools is the common recipe).  A command states no load and
    no goal: ``workload`` and ``objective`` are the user's, written into the plan so that its checks (and every later
    call) judge the deployment at them; without them the note says which defaults the checks assumed.  ``hf_config``
    is the checkpoint's config.json, for a model with no preset (both pools serve it)."""
    if decode_command is None:
        out = import_command(command, gpu=gpu, gpus_per_node=gpus_per_node, engine_config=engine_config,
                             replicas=replicas, hf_config=hf_config)
    else:
        decode = engine_config if decode_engine_config is None else decode_engine_config
        out = import_disaggregated(command, decode_command, gpu=gpu, gpus_per_node=gpus_per_node,
                                   engine_config=engine_config, decode_engine_config=decode, replicas=replicas,
                                   decode_replicas=decode_replicas, hf_config=hf_config)
    if objective is not None:
        if objective not in ("latency", "throughput"):
            raise PdagInputError("objective", f"unknown objective {objective!r}", "latency, throughput")
        out.plan["objective"] = objective
    if workload:
        out.plan["workload"] = {**(out.plan.get("workload") or {}), **workload}
        out.notes = [n.replace("the plan keeps the default workload (set the real batch and lengths before "
                               "estimating)", "the plan takes the workload given") for n in out.notes]
    if not workload or objective is None:
        wl = Workload.model_validate(out.plan.get("workload") or {})
        missing = ([] if workload else ["workload"]) + ([] if objective is not None else ["objective"])
        out.notes.append("checked at " + " and ".join(
            ([] if workload else [f"the default workload ({wl.batch_size} x {wl.input_len} in / {wl.output_len} "
                                  "out per replica)"])
            + ([] if objective is not None else [f"objective {out.plan.get('objective', 'latency')}"]))
            + f": pass {' and '.join(missing)} to judge the deployment at the user's "
            + " and ".join({"workload": "load", "objective": "goal"}[m] for m in missing))
    return out
