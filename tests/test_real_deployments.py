"""Regressions from issue 10: pdag agrees with the deployments people run, and with itself."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tools.rules.validate import validate_dag

NVFP4_ON_H200 = {"model": "llama-3.1-8b", "hardware": {"gpu": "h200", "num_gpus": 8},
                 "parallel": {"tp": 8}, "weights": "nvfp4"}  # FP4 GEMMs need Blackwell; no engine de-quantizes it


def test_raw_checkers_run_on_the_first_call_of_a_fresh_process() -> None:
    """plan_context ran the raw checkers before the rule modules were imported, so a fresh process said valid."""
    code = ("import json, sys; from tools.rules.validate import validate_dag; "
            "r = validate_dag(json.loads(sys.argv[1])); "
            "print(json.dumps([v.rule_id for v in r.violations if v.severity == 'error']))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(NVFP4_ON_H200)], capture_output=True, text=True,
                         check=True, timeout=120)
    first = json.loads(out.stdout.strip().splitlines()[-1])
    again = [v.rule_id for v in validate_dag(NVFP4_ON_H200).violations if v.severity == "error"]
    assert "HW-ACCELERATOR-SPEC" in first
    assert first == again


def test_gpu_min_one_in_a_fresh_process() -> None:
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 0}}
    code = ("import json, sys; from tools.rules.validate import validate_dag; "
            "r = validate_dag(json.loads(sys.argv[1])); print(json.dumps([v.rule_id for v in r.violations]))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(plan)], capture_output=True, text=True,
                         check=True, timeout=120)
    assert "GPU-MIN-ONE" in json.loads(out.stdout.strip().splitlines()[-1])


def test_kv_replication_is_valid_and_warns_with_the_per_gpu_cost() -> None:
    """Qwen3-235B-A22B has 4 KV heads and its published recipe runs TP 8: engines replicate KV heads silently."""
    r = validate_dag({"model": "qwen3-235b-a22b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
                      "parallel": {"tp": 8, "ep": 8}, "dtype": "fp8"})
    assert r.valid, [v.message for v in r.violations if v.severity == "error"]
    warn = [v for v in r.violations if v.rule_id == "TP-KV-REPLICATED"]
    assert warn and warn[0].severity == "warning"
    assert "replicated 2 times" in warn[0].message and "KiB of KV per token" in warn[0].message


def test_old_plans_with_kv_replication_ok_still_parse_and_validate() -> None:
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 16},
            "options": {"kv_replication_ok": True}}
    r = validate_dag(plan)
    assert not [v for v in r.violations if v.severity == "error"]
    assert "TP-KV-REPLICATED" in {v.rule_id for v in r.violations}


def test_cli_flags_and_a_plan_file_share_one_default_workload(tmp_path, capsys) -> None:
    """CLI flags defaulted to batch 8 while a plan file or an MCP call defaulted to batch 1."""
    from tools.cli import main
    from tools.core.plan import Workload

    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "parallel": {"tp": 1}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    main(["estimate", str(path)])
    from_file = capsys.readouterr().out
    main(["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "1", "--tp", "1"])
    from_flags = capsys.readouterr().out
    assert from_file == from_flags
    assert f"workload: batch {Workload().batch_size} per DP replica" in from_file.splitlines()[0]


@pytest.mark.parametrize("plan", [
    {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"pp": 2, "ep": 2}},
    {"model": "deepseek-v3", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 16},
     "parallel": {"pp": 2, "ep": 8}},
], ids=["mixtral-pp2-ep2", "deepseek-v3-pp2-ep8"])
def test_pp_with_ep_wider_than_tp_builds_a_dag_that_passes_its_own_validation(plan: dict) -> None:
    from tools.core.build import build_dag

    assert not [v.rule_id for v in validate_dag(plan).violations if v.severity == "error"]
    dag = build_dag(plan).model_dump(mode="json")["dag"]
    sends = [n for n in dag["nodes"] if n["type"] == "SendRecvNode"]
    assert sends
    assert not [v.rule_id for v in validate_dag(dag=dag).violations if v.severity == "error"]


TINY_MOE = {"hf_config": {"model_type": "mixtral", "num_hidden_layers": 4, "hidden_size": 256,
                          "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 512,
                          "vocab_size": 1000, "num_local_experts": 8, "num_experts_per_tok": 2,
                          "max_position_embeddings": 131072}}


@settings(max_examples=25, deadline=None)
@given(dp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), tp=st.sampled_from([1, 2, 4]),
       ep=st.sampled_from([1, 2, 4]), sp=st.sampled_from([1, 2, 4]), expert_tp=st.booleans())
def test_a_plan_valid_at_plan_level_builds_a_dag_valid_by_its_own_rules(dp, pp, tp, ep, sp, expert_tp) -> None:
    """All degree combinations of seed 001 section 5 (SP alone included): what passes the plan-level rules must
    not break a DAG rule once built (pdag's builder and its validator agree)."""
    from tools.core.build import build_dag
    from tools.rules.validate import plan_violations

    width = max(tp, ep, sp)
    assume(width % tp == 0 and width % ep == 0 and width % sp == 0)
    plan = {"model": TINY_MOE, "hardware": {"gpu": "h100-sxm", "num_gpus": dp * pp * width, "gpus_per_node": 8},
            "parallel": {"dp": dp, "pp": pp, "tp": tp, "ep": ep, "sp": sp}, "phases": {"decode": {"sp": 1}},
            "workload": {"input_len": 32768, "output_len": 64, "batch_size": 1},
            "options": {"allow_expert_tp": expert_tp}}
    _, plan_level = plan_violations(plan, build=False)
    assume(not [v for v in plan_level if v.severity == "error"])
    dag = build_dag(plan).model_dump(mode="json")["dag"]
    errors = [f"{v.rule_id}: {v.message}" for v in validate_dag(dag=dag).violations if v.severity == "error"]
    assert not errors, errors


def test_sp_without_tp_is_valid_and_estimates() -> None:
    """Seed 001 section 5 lists SP alone among the valid combinations; pdag used to demand sp | tp."""
    from tools.estimate.core import estimate_performance

    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"sp": 2},
            "phases": {"decode": {"sp": 1}}, "workload": {"input_len": 32768, "output_len": 128, "batch_size": 1}}
    r = validate_dag(plan)
    assert r.valid, [v.message for v in r.violations if v.severity == "error"]
    assert estimate_performance(plan=plan).prefill_latency_ms > 0


def test_search_serves_int4_weight_only_where_the_gpu_has_no_int4_math() -> None:
    """Engines run int4 weights on Hopper through de-quantizing kernels: search ranks such plans, and they
    validate (issue 10: it used to stop on HW-ACCELERATOR-SPEC)."""
    from tools.search.strategies import search_strategies

    result = search_strategies("llama-3.1-8b", {"gpu": "h200", "num_gpus": 8}, dtype="int4", disaggregated=False)
    assert result.top
    best = result.top[0].plan
    assert validate_dag(best).valid and best.get("dtype") == "int4"


@settings(max_examples=6, deadline=None)
@given(case=st.sampled_from([("llama-3.1-8b", "h100-sxm", 8, "bf16"), ("llama-3.1-70b", "h100-sxm", 16, "bf16"),
                             ("mixtral-8x7b", "h100-sxm", 8, "bf16"), ("qwen3-235b-a22b", "h200", 8, "fp8"),
                             ("deepseek-v3", "h200", 16, "fp8")]),
       objective=st.sampled_from(["latency", "throughput"]))
def test_every_plan_search_returns_validates_and_estimates(case, objective) -> None:
    """search_strategies must not rank a plan its own validator rejects."""
    from tools.estimate.core import estimate_performance
    from tools.search.strategies import search_strategies

    model, gpu, gpus, dtype = case
    res = search_strategies(model, {"gpu": gpu, "num_gpus": gpus}, objective=objective, dtype=dtype, top_k=3)
    assert res.top
    for entry in res.top:
        plan = entry.plan if isinstance(entry.plan, dict) else entry.plan.model_dump(mode="json", exclude_none=True)
        errors = [v.rule_id for v in validate_dag(plan).violations if v.severity == "error"]
        assert not errors, (entry.label, errors)
        assert estimate_performance(plan=plan).e2e_latency_ms > 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_import_then_export_serves_the_imported_checkpoint(engine: str) -> None:
    """An Instruct checkpoint used to come back as the preset's base repo."""
    from tools.engines.launch import export_plan, import_command

    repo = "meta-llama/Llama-3.1-70B-Instruct"
    imported = import_command(f"vllm serve {repo} --tensor-parallel-size 8")
    assert imported.plan["checkpoint"] == repo
    command = export_plan(imported.plan, engine).command
    assert repo in command.split()


def test_a_malformed_checkpoint_is_a_clear_input_error() -> None:
    from tools.core.errors import PdagInputError
    from tools.core.plan import parse_plan

    with pytest.raises(PdagInputError) as exc:
        parse_plan({"model": "llama-3.1-8b", "checkpoint": "not a repo; rm -rf /",
                    "hardware": {"gpu": "h100-sxm", "num_gpus": 1}})
    assert "checkpoint" in exc.value.field


def test_export_serving_limits_come_from_model_and_memory_not_the_workload() -> None:
    from tools.core.memory import memory_report
    from tools.core.plan import parse_plan
    from tools.engines.launch import export_plan

    base = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8}}
    one = export_plan({**base, "workload": {"batch_size": 1, "input_len": 128, "output_len": 16}}, "vllm").argv[0]
    other = export_plan({**base, "workload": {"batch_size": 4, "input_len": 128, "output_len": 16}}, "vllm").argv[0]
    limit = lambda argv, flag: int(argv[argv.index(flag) + 1])  # noqa: E731
    assert limit(one, "--max-model-len") == parse_plan(base).spec.max_position_embeddings == 131072
    assert limit(one, "--max-num-seqs") == limit(other, "--max-num-seqs")
    # vLLM takes KV pages on demand, so the cap is what the serving estimate lets run at once: more than the batch
    # that fits at the full context (about prompt + half the output per request), up to vLLM's own default cap
    # (1,024 on a GPU of 70 GiB or more), which the simulation runs with
    seqs = limit(one, "--max-num-seqs")
    fit = memory_report(parse_plan(
        {**base, "workload": {"batch_size": 1, "input_len": 128, "output_len": 16}})).max_batch_size_that_fits
    assert seqs == min(1024, int(fit * (128 + 16) / (128 + 8)))
    from tools import estimate_performance
    crowd = {**base, "engine": "vllm", "workload": {"batch_size": 2 * seqs, "input_len": 128, "output_len": 16}}
    assert estimate_performance(plan=crowd).steady_state_estimate.running == seqs  # type: ignore[union-attr]


@settings(max_examples=5, deadline=None)
@given(case=st.sampled_from([("deepseek-v3", "h200", 16, "fp8"), ("mixtral-8x7b", "h100-sxm", 8, "bf16"),
                             ("qwen3-235b-a22b", "h200", 8, "fp8"), ("llama-3.1-70b", "h100-sxm", 16, "bf16")]),
       objective=st.sampled_from(["latency", "throughput"]))
def test_every_search_plan_says_which_engines_launch_it(case, objective) -> None:
    """One truth across the tools: a plan search returns exports to the engines it lists, and for every other
    engine the result names the feature the exporter says is missing."""
    from tools.engines.launch import ENGINES, EngineCannotExpress, export_plan
    from tools.search.strategies import search_strategies

    model, gpu, gpus, dtype = case
    res = search_strategies(model, {"gpu": gpu, "num_gpus": gpus}, objective=objective, dtype=dtype, top_k=3)
    for entry in res.top + res.pareto:
        assert sorted(entry.engines + list(entry.engine_gaps)) == sorted(ENGINES), entry.label
        for engine in entry.engines:
            assert export_plan(entry.plan, engine).gpus == entry.gpus_used
        for engine, gap in entry.engine_gaps.items():
            with pytest.raises(EngineCannotExpress) as exc:
                export_plan(entry.plan, engine)
            assert gap == f"{exc.value.field}: {exc.value.problem}"


@settings(max_examples=30, deadline=None)
@given(dp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), tp=st.sampled_from([1, 2, 4]),
       ep=st.sampled_from([1, 2, 4, 8]), attn_dp=st.sampled_from([1, 2]), expert_tp=st.booleans(),
       engine=st.sampled_from(["vllm", "sglang", "trtllm"]))
def test_a_valid_plan_exports_or_names_the_missing_engine_feature(dp, pp, tp, ep, attn_dp, expert_tp,
                                                                 engine) -> None:
    """Every plan that validates either exports (and the command imports back on the same GPUs) or the exporter
    says what the engine lacks; nothing else (no crash, no silent drop)."""
    from tools.engines.launch import EngineCannotExpress, export_plan, import_command

    width = max(attn_dp * tp, ep)
    assume(width % ep == 0 and width % (attn_dp * tp) == 0)
    plan = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "num_gpus": dp * pp * width},
            "parallel": {"dp": dp, "pp": pp, "tp": tp, "ep": ep, "attn_dp": attn_dp},
            "options": {"allow_expert_tp": expert_tp, "allow_attention_dp": attn_dp > 1}}
    assume(not [v for v in validate_dag(plan).violations if v.severity == "error"])
    try:
        out = export_plan(plan, engine)
    except EngineCannotExpress as exc:
        assert exc.field and len(exc.problem) > 20
        return
    assert out.gpus == dp * pp * width
    line = next(ln for ln in out.command.splitlines() if not ln.startswith("#"))
    back = import_command(line, gpu="h100-sxm", engine_config=out.config)
    assert back.plan["hardware"]["num_gpus"] * out.servers == out.gpus  # a server over n nodes has n commands



def test_a_moe_that_does_not_fit_is_told_to_spread_its_experts() -> None:
    """Without EP or expert TP the experts sit whole on every GPU; the hint names the two ways engines share them."""
    plan = {"model": "qwen3-235b-a22b", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 8},
            "parallel": {"tp": 8}}
    mem = [v for v in validate_dag(plan).violations if v.rule_id == "MEM-FITS"]
    assert mem and "ep 8" in (mem[0].hint or "") and "allow_expert_tp" in (mem[0].hint or "")
    assert validate_dag({**plan, "parallel": {"tp": 8, "ep": 8}}).valid
    dense = {"model": "llama-3.1-405b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}
    hint = next(v.hint for v in validate_dag(dense).violations if v.rule_id == "MEM-FITS")
    assert hint and "more GPUs" in hint and "raise tp" not in hint and "expert" not in hint  # 812 GB on 2 GPUs
    spread = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 1}}
    hint = next(v.hint for v in validate_dag(spread).violations if v.rule_id == "MEM-FITS")
    assert hint and "raise tp up to 8" in hint and "more GPUs" not in hint


def test_a_plan_whose_weights_the_cluster_cannot_hold_is_told_so() -> None:
    """The recorded agents met 'raise tp' on one GPU and 'fp8 weights' for a checkpoint already in fp8."""
    one = {"model": "llama-4-scout", "dtype": "fp8", "weights": "fp8", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}
    hint = next(v.hint for v in validate_dag(one).violations if v.rule_id == "MEM-FITS")
    assert "about 2 GPUs" in hint and "4-bit" in hint and "fp8" not in hint and "raise tp" not in hint
    kv = {"model": "llama-3.1-8b", "hardware": {"gpu": "l40s", "num_gpus": 1},
          "workload": {"input_len": 128000, "output_len": 1000, "batch_size": 32}}
    hint = next(v.hint for v in validate_dag(kv).violations if v.rule_id == "MEM-FITS")
    assert "at most 1 sequences" in hint and "kv_dtype" in hint


@pytest.mark.parametrize(("command", "ok"), [
    # vLLM's Qwen3-Coder-480B recipe shows TP 8 failing on the FP8 checkpoint (2560 / 8 = 320); GPUStack adds
    # --enable-expert-parallel to serve Qwen3-235B FP8 on 8 GPUs (1536 / 8 = 192)
    ("vllm serve Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tensor-parallel-size 8", False),
    ("vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 8", False),
    ("vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 8 --enable-expert-parallel", True),
    ("vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 -tp 8", True),  # bf16: no blocks to cut
    ("vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507-FP8 -tp 4", True),  # 384 = 3 x 128
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 2", True),
])
def test_block_scaled_fp8_checkpoints_shard_in_whole_blocks(command: str, ok: bool) -> None:
    from tools import import_command

    plan = import_command(command, gpu="h200").plan
    errors = {v.rule_id for v in validate_dag(plan).violations if v.severity == "error"}
    assert ("TP-QUANT-BLOCK-SHARD" not in errors) is ok and errors <= {"TP-QUANT-BLOCK-SHARD"}


def test_a_context_beyond_the_models_positions_is_an_error() -> None:
    """vLLM refuses such a max-model-len; an agent reading only 'valid' shipped a 66k plan for an 8k model."""
    plan = {"model": "gemma-2-27b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"tp": 4},
            "workload": {"input_len": 65536, "output_len": 1024}}
    result = validate_dag(plan)
    found = [v for v in result.violations if v.rule_id == "KV-CONTEXT-WITHIN-MODEL"]
    assert not result.valid and found and found[0].severity == "error" and "8192" in found[0].message
    assert validate_dag({**plan, "workload": {"input_len": 6144, "output_len": 1024}}).valid
