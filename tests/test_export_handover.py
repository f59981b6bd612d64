"""Issue 41, export: refusal of invalid plans, multi-node forms as the engines document them, caps and unmodelled
flags carried through, per-pool options, weight-only formats on TensorRT-LLM, flags checked against each
release's table."""

from __future__ import annotations

import shlex

import pytest

from tools import export_plan, import_command
from tools.core.errors import PdagInputError
from tools.engines.flags import check_argv, flag_table, versions
from tools.engines.launch import EngineCannotExpress, PlanRefused, import_disaggregated

QWEN_FP8_TP8 = {"model": "qwen3-235b-a22b", "checkpoint": "Qwen/Qwen3-235B-A22B-FP8",
                "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
                "options": {"allow_expert_tp": True}}
QWEN_GB200_TP1 = {"model": "qwen3-235b-a22b", "hardware": {"gpu": "gb200", "num_gpus": 1}, "parallel": {"tp": 1}}


@pytest.mark.parametrize("plan, rule", [(QWEN_FP8_TP8, "TP-QUANT-BLOCK-SHARD"), (QWEN_GB200_TP1, "MEM-FITS")])
def test_export_refuses_what_validate_refuses_unless_forced(plan: dict, rule: str) -> None:
    """Issue 41 reproducers: both exported with no warning before."""
    for engine in ("vllm", "sglang", "trtllm"):
        with pytest.raises(PlanRefused) as exc:
            export_plan(plan, engine)
        assert rule in str(exc.value) and {v.rule_id for v in exc.value.violations} >= {rule}
    forced = export_plan(plan, "vllm", force=True)
    assert forced.notes[0].startswith("forced:") and rule in forced.notes[0]


def test_cli_export_exits_non_zero_on_a_refused_plan(tmp_path, capsys) -> None:
    import json

    from tools.cli import main

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**QWEN_GB200_TP1, "engine": "vllm"}))
    assert main(["export", str(path)]) == 2
    assert "MEM-FITS" in capsys.readouterr().err
    assert main(["export", str(path), "--force"]) == 0
    assert "forced:" in capsys.readouterr().out


def test_vllm_two_node_dp_follows_the_data_parallel_deployment_docs() -> None:
    """vLLM docs/serving/data_parallel_deployment.md (Internal Load Balancing), DP=4 over two nodes:
    node 0 `--data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-address A --data-parallel-rpc-port P`,
    node 1 `--headless --data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-start-rank 2 ...`.
    Before: one identical `--data-parallel-size 4` command for every node."""
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "parallel": {"tp": 4, "dp": 4},
            "objective": "throughput"}
    out = export_plan(plan, "vllm")
    assert len(out.argv) == 2 and out.servers == 1
    head, worker = (" ".join(a) for a in out.argv)
    assert ("--data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-address HEAD_NODE_IP "
            "--data-parallel-rpc-port 13345") in head and "--headless" not in head and "start-rank" not in head
    assert ("--headless --data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-start-rank 2 "
            "--data-parallel-address HEAD_NODE_IP --data-parallel-rpc-port 13345") in worker
    assert not check_argv("vllm", out.argv[0]) and not check_argv("vllm", out.argv[1])
    back = import_command(shlex.join(out.argv[0]), gpu="h100-sxm").plan
    assert back["parallel"]["dp"] == 4 and back["hardware"]["num_gpus"] == 16


def test_multi_node_servers_in_each_engines_form() -> None:
    plan = {"model": "llama-3.1-405b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16}, "dtype": "fp8",
            "checkpoint": "nvidia/Llama-3.1-405B-Instruct-FP8", "parallel": {"tp": 8, "pp": 2}}
    vl = export_plan(plan, "vllm").argv
    assert [a[a.index("--node-rank") + 1] for a in vl] == ["0", "1"] and "--headless" in vl[1]
    assert all("--nnodes" in a and "--master-addr" in a for a in vl)
    sg = export_plan(plan, "sglang").argv
    assert len(sg) == 2 and all("--dist-init-addr" in a and "--nnodes" in a for a in sg)
    assert sg[1][sg[1].index("--node-rank") + 1] == "1"
    trt = export_plan(plan, "trtllm").argv
    assert len(trt) == 1 and trt[0][:6] == ["mpirun", "-H", "NODE0_IP:8,NODE1_IP:8", "-n", "16",
                                              "trtllm-llmapi-launch"]


def test_imported_caps_and_unmodelled_flags_come_back_unchanged() -> None:
    """Before: --max-model-len 4096 came back as 163840 and --trust-remote-code was dropped."""
    cmd = ("vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --max-model-len 4096 --max-num-seqs 64 "
           "--trust-remote-code --gpu-memory-utilization 0.92")
    plan = import_command(cmd, gpu="h200").plan
    out = export_plan(plan).argv[0]
    assert out[out.index("--max-model-len") + 1] == "4096" and out[out.index("--max-num-seqs") + 1] == "64"
    assert "--trust-remote-code" in out and out[out.index("--gpu-memory-utilization") + 1] == "0.92"
    sg = import_command("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --tp 8 "
                        "--context-length 32768 --trust-remote-code --mem-fraction-static 0.85", gpu="h100-sxm").plan
    back = export_plan(sg).argv[0]
    assert back[back.index("--context-length") + 1] == "32768" and "--trust-remote-code" in back
    assert back[back.index("--mem-fraction-static") + 1] == "0.85"
    assert "--trust-remote-code" not in export_plan(sg, "vllm").argv[0]  # SGLang's flags stay with SGLang


def test_disaggregated_pools_keep_their_own_engine_options() -> None:
    """Before: one engine_options block for both pools."""
    pre = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --tp 8 "
           "--disaggregation-mode prefill --chunked-prefill-size 16384")
    dec = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --tp 8 "
           "--disaggregation-mode decode --max-running-requests 256")
    plan = import_disaggregated(pre, dec, gpu="h100-sxm").plan
    assert plan["engine_options"]["max_batched_tokens"] == 16384
    assert plan["decode_engine_options"]["max_num_seqs"] == 256
    out = export_plan(plan, "sglang").argv
    assert out[0][out[0].index("--chunked-prefill-size") + 1] == "16384"
    assert out[-1][out[-1].index("--max-running-requests") + 1] == "256"
    assert "--chunked-prefill-size" not in out[-1]


def test_trtllm_never_serves_weight_only_plans_as_bf16() -> None:
    """Before: an AWQ plan exported to trtllm-serve as plain bf16 with no note."""
    awq = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"tp": 4},
           "weights": "awq-int4"}
    with pytest.raises(EngineCannotExpress) as exc:
        export_plan(awq, "trtllm")
    assert exc.value.field == "weights" and "no quantization flag" in exc.value.problem
    with pytest.raises(EngineCannotExpress):  # nor does vLLM serve the 16-bit repo as AWQ: its flag is a kernel's
        export_plan(awq, "vllm")
    stored = {**awq, "checkpoint": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4"}
    assert "--quantization" in export_plan(stored, "vllm").command  # the others take a kernel flag
    fp8 = {**awq, "weights": None, "dtype": "fp8"}  # nor a 16-bit checkpoint as fp8: no online quantization
    with pytest.raises(EngineCannotExpress):
        export_plan(fp8, "trtllm")


def test_sglang_writes_declared_flag_names_not_prefixes() -> None:
    plan = {"model": "deepseek-v3", "dtype": "fp8", "kv_dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 8},
            "parallel": {"tp": 1, "attn_dp": 8, "ep": 8}, "options": {"allow_attention_dp": True}}
    argv = export_plan(plan, "sglang").argv[0]
    table = flag_table("sglang")
    assert all(table.has(a) for a in argv if a.startswith("--"))
    assert "--tp" not in argv and "--dp" not in argv and "--tp-size" in argv and "--enable-dp-attention" in argv


def test_flag_tables_catch_wrong_flags_and_values() -> None:
    assert versions("vllm") and versions("sglang") and versions("trtllm")
    assert check_argv("vllm", ["vllm", "serve", "m", "--tensor-parallel-size", "x"]) == [
        "--tensor-parallel-size takes an integer, got 'x'"]
    assert check_argv("sglang", ["python", "-m", "sglang.launch_server", "--tp", "8"])[0].startswith("--tp is not")
    assert "not one of" in check_argv("vllm", ["vllm", "serve", "m", "--kv-cache-dtype", "fp7"])[0]
    assert check_argv("trtllm", ["trtllm-serve", "m", "--tp_size", "8", "--trust_remote_code"]) == []
    with pytest.raises(PdagInputError):
        export_plan({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}, "vllm",
                    engine_version="0.0.1")
