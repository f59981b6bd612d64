"""Export to and import from engine launch commands; round trips; refusals with reasons."""

from __future__ import annotations

import json
import shlex

import pytest

from tools import estimate_performance, export_plan, import_command, validate_dag
from tools.core.errors import PdagInputError
from tools.core.plan import parse_plan
from tools.core.quantization import gemm_dtype, storage
from tools.engines.launch import EngineCannotExpress, model_for_repo


def _plan(model: str, gpu: str, parallel: dict, **extra) -> dict:
    width = max(parallel.get("tp", 1) * parallel.get("attn_dp", 1), parallel.get("ep", 1))
    n = parallel.get("dp", 1) * parallel.get("pp", 1) * width
    return {"model": model, "hardware": {"gpu": gpu, "num_gpus": n, "gpus_per_node": 8},
            "parallel": parallel, **extra}


ROUND_TRIP = [
    _plan("llama-3.1-70b", "h100-sxm", {"tp": 8}),
    _plan("llama-3.1-8b", "h100-sxm", {"tp": 2, "dp": 4}),
    _plan("llama-3.1-405b", "h100-sxm", {"tp": 8, "pp": 2}),
    _plan("llama-3.1-405b", "h100-sxm", {"tp": 8}, dtype="fp8"),
    _plan("deepseek-v3", "h200", {"tp": 8, "ep": 8}, dtype="fp8"),
    _plan("deepseek-v3", "h200", {"tp": 8, "ep": 8, "pp": 2}, dtype="fp8"),
    _plan("mixtral-8x7b", "h100-sxm", {"tp": 4, "dp": 2}, options={"allow_expert_tp": True}),
    _plan("qwen3-235b-a22b", "h100-sxm", {"tp": 8, "ep": 8}),
    _plan("qwen2.5-72b", "a100-80gb", {"tp": 4}, workload={"input_len": 4096, "output_len": 256, "batch_size": 32}),
]
ADP = {"allow_attention_dp": True}
ROUND_TRIP += [
    # attention-DP: SGLang --tp 8 --dp 8 --enable-dp-attention --ep 8,
    # vLLM --data-parallel-size 8 --enable-expert-parallel
    _plan("deepseek-v3", "h200", {"tp": 1, "attn_dp": 8, "ep": 8}, dtype="fp8", options=ADP,
          workload={"input_len": 2048, "output_len": 256, "batch_size": 256}),
    _plan("deepseek-v3", "h200", {"tp": 2, "attn_dp": 4, "ep": 8}, dtype="fp8", options=ADP,
          workload={"input_len": 2048, "output_len": 256, "batch_size": 64}),
]
SGLANG_ONLY = [
    _plan("qwen3-235b-a22b", "h100-sxm", {"tp": 8, "ep": 2}, options={"allow_expert_tp": True}),
    # DP attention without --ep: experts tensor-sharded over the whole TP world
    _plan("deepseek-v3", "h200", {"tp": 1, "attn_dp": 8, "ep": 1}, dtype="fp8",
          options={"allow_attention_dp": True, "allow_expert_tp": True}),
]


def _canonical(plan: dict) -> dict:
    """What a launch command carries: serving caps are not the workload, so the workload does not round-trip."""
    p = parse_plan(plan)
    return {
        "model": p.model_id, "hardware": p.hardware.model_dump(), "parallel": p.parallel.model_dump(),
        # weights as stored and the dtype the GEMMs run in (dtype fp8 and weights fp8 on a GPU with fp8 tensor
        # cores say the same), not the spelling
        "weights": storage(p), "gemm": gemm_dtype(p), "kv_dtype": p.effective_kv_dtype,
        "allow_expert_tp": p.options.allow_expert_tp if p.spec.is_moe else False,
        "allow_attention_dp": p.options.allow_attention_dp,
    }


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("plan", ROUND_TRIP + SGLANG_ONLY, ids=lambda p: f"{p['model']}-{p['parallel']}")
def test_export_then_import_gives_the_same_plan(engine: str, plan: dict) -> None:
    if engine == "vllm" and plan in SGLANG_ONLY:
        with pytest.raises(EngineCannotExpress):
            export_plan(plan, engine)
        return
    exported = export_plan(plan, engine)
    want = plan
    if exported.servers > 1:  # one server per replica: each is the plan with dp = 1 on its share of the GPUs
        dp = plan["parallel"]["dp"]
        assert exported.servers == dp
        want = {**plan, "parallel": {**plan["parallel"], "dp": 1},
                "hardware": {**plan["hardware"], "num_gpus": plan["hardware"]["num_gpus"] // dp}}
    per_server = len(exported.argv) // exported.servers  # a server over several nodes: one argv per node
    for argv in exported.argv[::per_server]:
        back = import_command(shlex.join(argv), gpu=plan["hardware"]["gpu"], gpus_per_node=8)
        assert _canonical(back.plan) == _canonical(want)
        assert exported.gpus == back.plan["hardware"]["num_gpus"] * exported.servers


def test_vllm_command_shape() -> None:
    cmd = export_plan(_plan("deepseek-v3", "h200", {"tp": 8, "ep": 8}), "vllm").command
    assert cmd.startswith("vllm serve deepseek-ai/DeepSeek-V3 ")
    assert "--tensor-parallel-size 8" in cmd and "--enable-expert-parallel" in cmd
    assert "--data-parallel-size 1" in cmd and "--pipeline-parallel-size 1" in cmd


def test_vllm_moe_replicas_are_separate_servers() -> None:
    """vLLM's data-parallel ranks of a MoE model share one expert group (its DP+EP form), so pdag's independent
    replicas of a TP8+EP plan are two deployments, each pinned to its GPUs (it used to refuse: ep != tp*dp)."""
    plan = _plan("deepseek-v3", "h200", {"tp": 8, "ep": 8, "dp": 2}, dtype="fp8")
    out = export_plan(plan, "vllm")
    assert len(out.argv) == 2 and out.gpus == 16
    assert out.argv[1][0] == "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"  # the ids node 1 sees, not pdag's 8-15
    assert "# replica 1 on node 1\n" in out.command
    assert "--data-parallel-size" in out.argv[0] and out.argv[0][out.argv[0].index("--data-parallel-size") + 1] == "1"
    assert "independent replicas" in out.notes[0]
    assert "--ep-size 8" in export_plan(plan, "sglang").command  # SGLang: EP inside each replica


def test_pinned_devices_are_node_local() -> None:
    """A server is pinned with the device ids its node sees: a replica that spans nodes unevenly lists each
    node's ids, and a single-node deployment carries no node comments."""
    r = export_plan(_plan("llama-3.1-70b", "h100-sxm", {"tp": 4, "pp": 3, "dp": 3}), "trtllm")
    assert [a[:5] for a in r.argv][1] == ["mpirun", "-H", "NODE1_IP:4,NODE2_IP:8", "-n", "12"]
    assert any("node 1: 4,5,6,7; node 2: 0,1,2,3,4,5,6,7" in n for n in r.notes)  # replica 1 starts mid node 1
    single = export_plan(_plan("llama-3.1-8b", "h100-sxm", {"tp": 2, "dp": 2}), "trtllm")
    assert "#" not in single.command and single.argv[1][0] == "CUDA_VISIBLE_DEVICES=2,3"


def test_refuses_sp_and_phase_overrides() -> None:
    plan = _plan("llama-3.1-8b", "h100-sxm", {"tp": 4}, phases={"prefill": {"sp": 2}})
    for engine in ("vllm", "sglang", "trtllm"):
        with pytest.raises(EngineCannotExpress) as exc:
            export_plan(plan, engine)
        assert exc.value.field == "parallel.sp"


def test_refuses_whole_experts_under_tp() -> None:
    plan = _plan("mixtral-8x7b", "h100-sxm", {"tp": 4})  # experts not TP-sharded, ep=1 < tp
    with pytest.raises(EngineCannotExpress) as exc:
        export_plan(plan, "vllm", force=True)  # forced past MEM-FITS to reach the engine's own refusal
    assert exc.value.field == "options.allow_expert_tp"


def test_trtllm_moe_tp_times_ep_and_dp_servers() -> None:
    r = export_plan(_plan("qwen3-235b-a22b", "h100-sxm", {"tp": 8, "ep": 4}, options={"allow_expert_tp": True}),
                    "trtllm")
    assert "--tp_size 8" in r.command and "--ep_size 4" in r.command
    assert any("moe_tp_size=2" in n for n in r.notes)
    r = export_plan(_plan("llama-3.1-8b", "h100-sxm", {"tp": 2, "dp": 2}), "trtllm")
    assert len(r.argv) == 2 and "CUDA_VISIBLE_DEVICES=2,3" in r.command and r.gpus == 4


def test_import_variants() -> None:
    r = import_command("CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 4 "
                       "--gpu-memory-utilization 0.9", gpu="h200")
    assert r.plan["parallel"]["tp"] == 4 and r.plan["hardware"] == {"gpu": "h200", "num_gpus": 4, "gpus_per_node": 8}
    assert any("gpu-memory-utilization" in n for n in r.notes)
    r = import_command("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp-size=8 --ep-size 8")
    assert r.plan["model"] == "deepseek-r1" and r.plan["parallel"]["ep"] == 8
    r = import_command("vllm serve mistralai/Mixtral-8x7B-Instruct-v0.1 --tensor-parallel-size 2")
    assert r.plan["options"] == {"allow_expert_tp": True}


@pytest.mark.parametrize("command,field", [
    ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp 8 --dp 8 --enable-dp-attention",
     "command.--enable-dp-attention"),
    ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --disaggregation-mode prefill",
     "command.--disaggregation-mode"),
    ("vllm serve some-org/unknown-model -tp 2", "command.model"),
    ("docker run image", "command"),
    ("vllm serve meta-llama/Llama-3.1-8B -tp two", "command.tp"),
])
def test_import_refusals(command: str, field: str) -> None:

    with pytest.raises(PdagInputError) as exc:
        import_command(command)
    assert exc.value.field == field


def test_model_for_repo() -> None:
    assert model_for_repo("meta-llama/Meta-Llama-3.1-405B-Instruct-FP8")[0] == "llama-3.1-405b"
    assert model_for_repo("Qwen/Qwen3-235B-A22B-Instruct-2507")[0] == "qwen3-235b-a22b"
    assert model_for_repo("openai/gpt-oss-120b") == ("gpt-oss-120b", None)
    # AMD's Quark checkpoints (InferenceMAX's MI300X/MI325X runs) and Red Hat's compressed-tensors ones
    assert model_for_repo("amd/Llama-3.3-70B-Instruct-FP8-KV")[0] == "llama-3.1-70b"
    assert model_for_repo("amd/DeepSeek-R1-MXFP4-Preview")[0] == "deepseek-r1"
    assert model_for_repo("RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w8a8")[0] == "llama-3.1-70b"


def test_attention_dp_import_counts_gpus_inside_the_tp_world() -> None:
    r = import_command("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 "
                       "--enable-dp-attention --ep 8", gpu="h200")
    assert r.plan["parallel"] == {"dp": 1, "pp": 1, "tp": 1, "ep": 8, "sp": 1, "attn_dp": 8}
    assert r.plan["hardware"]["num_gpus"] == 8 and r.plan["options"]["allow_attention_dp"] is True
    r = import_command("vllm serve deepseek-ai/DeepSeek-R1 --data-parallel-size 8 --enable-expert-parallel "
                       "--max-num-seqs 32", gpu="h200")
    assert r.plan["parallel"]["attn_dp"] == 8 and r.plan["parallel"]["ep"] == 8
    assert "workload" not in r.plan  # --max-num-seqs is an engine cap, not the workload
    assert any("sequence cap 32" in n for n in r.notes)


def test_attention_dp_export_flags() -> None:
    plan = _plan("deepseek-v3", "h200", {"tp": 1, "attn_dp": 8, "ep": 8}, dtype="fp8", kv_dtype="fp8", options=ADP)
    sg = export_plan(plan, "sglang")
    assert "--tp-size 8 --dp-size 8 --enable-dp-attention --ep-size 8" in sg.command and sg.gpus == 8
    vl = export_plan(plan, "vllm").command
    assert "--enable-expert-parallel" in vl and vl.endswith("--data-parallel-size 8")
    trt = export_plan(plan, "trtllm")
    assert "--tp_size 8" in trt.command and "--ep_size 8" in trt.command
    assert {k: v for k, v in trt.config.items() if k != "cuda_graph_config"} == {
        "enable_attention_dp": True, "kv_cache_config": {"dtype": "fp8"}}
    assert "--config pdag-trtllm.yml" in trt.command
    with pytest.raises(EngineCannotExpress):
        export_plan(_plan("deepseek-v3", "h200", {"tp": 2, "attn_dp": 4, "ep": 8}, dtype="fp8", options=ADP),
                    "trtllm")


@pytest.mark.parametrize("engine,flag", [("vllm", "--kv-transfer-config"), ("sglang", "--disaggregation-mode"),
                                         ("trtllm", "--tp_size")])
def test_disaggregated_exports_one_command_per_pool(engine: str, flag: str) -> None:
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
            "parallel": {"tp": 8}, "phases": {"decode": {"dp": 2, "tp": 4}}, "options": {"disaggregated": True}}
    r = export_plan(plan, engine)
    assert r.gpus == 16 and len(r.argv) >= 2 and flag in r.command
    assert r.argv[0][0] == "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"
    assert r.argv[-1][0].startswith("CUDA_VISIBLE_DEVICES=") and "decode pool on node 1" in r.command
    assert any("KV" in n for n in r.notes)


@pytest.mark.parametrize("engine, flags", [
    ("vllm", "--tensor-parallel-size 8 --pipeline-parallel-size 1 --enable-expert-parallel"),
    ("sglang", "--tp-size 16 --dp-size 2 --enable-dp-attention --ep-size 16"),
])
def test_ep_wider_than_tp_exports_as_the_engines_attention_dp_form(engine: str, flags: str) -> None:
    """Issue 10: deepseek-v3 fp8 tp 8 ep 16 on 16 H200 validated but export refused it ('pdag does not model
    attention-DP yet').  Engines spread experts beyond TP only with attention-DP groups: that is the export."""
    plan = {"model": "deepseek-v3", "dtype": "fp8", "kv_dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 16},
            "parallel": {"tp": 8, "ep": 16}}
    out = export_plan(plan, engine)
    assert flags in out.command and out.gpus == 16
    assert "attention-DP form" in out.notes[0] and "attn_dp=2" in out.notes[0]
    assert "--data-parallel-size 2" in out.command if engine == "vllm" else True
    back = import_command(shlex.join(out.argv[0]), gpu="h200")
    assert back.plan["parallel"]["attn_dp"] == 2 and back.plan["parallel"]["tp"] == 8
    assert back.plan["parallel"]["ep"] == 16


def test_ep_wider_than_tp_names_what_tensorrt_llm_lacks() -> None:
    plan = {"model": "deepseek-v3", "dtype": "fp8", "kv_dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 16},
            "parallel": {"tp": 8, "ep": 16}}
    with pytest.raises(EngineCannotExpress) as exc:
        export_plan(plan, "trtllm")
    assert "attention DP runs attention with TP 1" in exc.value.problem
    one = export_plan({**plan, "parallel": {"tp": 1, "ep": 8}, "hardware": {"gpu": "h200", "num_gpus": 8}}, "trtllm")
    assert {k: v for k, v in one.config.items() if k != "cuda_graph_config"} == {
        "enable_attention_dp": True, "kv_cache_config": {"dtype": "fp8"}}


def test_trtllm_serve_imports_with_its_config_yaml() -> None:
    """TensorRT-LLM's DeepSeek-R1 serve example: --tp_size 8 --ep_size 8 with enable_attention_dp in config.yml."""
    cmd = ("trtllm-serve deepseek-ai/DeepSeek-R1 --max_batch_size 1024 --tp_size 8 --ep_size 8 --pp_size 1 "
           "--config ./config.yml")
    plain = import_command(cmd, gpu="b200").plan
    assert plain["parallel"]["tp"] == 8 and plain["parallel"]["ep"] == 8 and "attn_dp" not in plain["parallel"]
    adp = import_command(cmd, gpu="b200", engine_config={"enable_attention_dp": True,
                                                         "kv_cache_config": {"dtype": "fp8"}}).plan
    assert adp["parallel"] == {"dp": 1, "pp": 1, "tp": 1, "ep": 8, "sp": 1, "attn_dp": 8}
    assert adp["kv_dtype"] == "fp8" and adp["engine"] == "trtllm"
    yaml_only = import_command("trtllm-serve deepseek-ai/DeepSeek-R1-0528 --config x.yaml", gpu="b200",
                               engine_config={"tensor_parallel_size": 8, "moe_expert_parallel_size": 4}).plan
    assert yaml_only["parallel"]["tp"] == 8 and yaml_only["parallel"]["ep"] == 4
    assert yaml_only["options"] == {"allow_expert_tp": True}


@pytest.mark.parametrize("flag", ["-dcp 4", "--decode-context-parallel-size 4", "--decode-context-parallel-size=4",
                                  "--decode_context_parallel_size 4"])
def test_vllm_decode_context_parallel_round_trips(flag: str) -> None:
    """-dcp N is the plan's decode degree dcp (no extra GPUs) and export writes it back."""
    imp = import_command(f"vllm serve deepseek-ai/DeepSeek-V3 -tp 8 --enable-expert-parallel {flag}", gpu="h200")
    assert imp.plan["parallel"]["dcp"] == 4 and imp.plan["hardware"]["num_gpus"] == 8
    assert any("decode context parallel 4" in n for n in imp.notes)
    assert validate_dag(plan=imp.plan).valid
    out = export_plan(imp.plan, "vllm")
    argv = out.argv[0]
    assert argv[argv.index("--decode-context-parallel-size") + 1] == "4" and out.gpus == 8
    again = import_command(out.command, gpu="h200").plan
    assert again["parallel"] == imp.plan["parallel"]
    assert "dcp" not in import_command("vllm serve deepseek-ai/DeepSeek-V3 -tp 8 -dcp 1", gpu="h200").plan["parallel"]


def test_decode_context_parallel_in_sglang_and_trtllm() -> None:
    """SGLang's --dcp-size (MLA caches only, its DCP docs) is imported; export refuses while the SGLang release
    pdag writes for has no such flag, and TensorRT-LLM has no such option pdag knows."""
    imp = import_command("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dcp-size 4",
                         gpu="h200")
    assert imp.plan["parallel"]["dcp"] == 4
    mla = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8, "dcp": 8}}
    for engine in ("sglang", "trtllm"):
        with pytest.raises(EngineCannotExpress) as exc:
            export_plan(mla, engine)
        assert exc.value.field == "parallel.dcp"
    gqa = {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "num_gpus": 8},
           "parallel": {"tp": 8, "ep": 8, "dcp": 2}}
    out = export_plan(gqa, "vllm")
    assert "--decode-context-parallel-size" in out.argv[0] and out.flag_problems == []


def test_sglang_release_with_dcp_size_exports_mla_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a SGLang flag table that has --dcp-size, an MLA plan exports with it and a GQA plan is refused."""
    import tools.engines.launch as launch
    from tools.engines.flags import flag_table
    real = flag_table("sglang")
    newer = real.model_copy(update={"flags": {**real.flags, "--dcp-size": {}}})
    monkeypatch.setattr(launch, "flag_table", lambda key, version=None: newer if key == "sglang" else
                        flag_table(key, version))
    mla = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8, "dcp": 8}}
    argv = launch.export_unchecked(mla, "sglang").argv[0]
    assert argv[argv.index("--dcp-size") + 1] == "8"
    gqa = {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "num_gpus": 8},
           "parallel": {"tp": 8, "ep": 8, "dcp": 2}}
    with pytest.raises(EngineCannotExpress) as exc:
        launch.export_unchecked(gqa, "sglang")
    assert "MLA" in exc.value.problem


def test_vllm_dotted_json_flags_read_as_their_json_form() -> None:
    """vLLM's parser folds --flag.key value (and --flag.key=value, -O.key, key+ lists) into the flag's JSON object
    (vllm/utils/argparse_utils.py FlexibleArgumentParser); import reads both forms the same."""
    base = "vllm serve deepseek-ai/DeepSeek-V3 -tp 8"
    as_json = import_command(base + """ --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'"""
                             """ --compilation-config '{"max_cudagraph_capture_size": 96}'""", gpu="h200").plan
    dotted = import_command(base + " --speculative-config.method mtp --speculative_config.num_speculative_tokens=2"
                            " --compilation-config.max_cudagraph_capture_size 96", gpu="h200").plan
    assert dotted == as_json
    assert dotted["speculative"] == {"method": "mtp", "num_draft_tokens": 2}
    assert dotted["engine_options"]["graph_max_tokens"] == 96
    # a JSON flag pdag does not read stays the command's own, in its JSON form
    kept = import_command(base + " --kv-transfer-config.kv_connector NixlConnector"
                          " --kv-transfer-config.kv_role kv_both", gpu="h200").plan
    assert kept["engine_options"]["extra_args"] == ["--kv-transfer-config",
                                                    '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}']
    # the dotted form comes after the JSON form and replaces it, as argparse keeps the last value
    later = import_command(base + """ --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'"""
                           " --speculative-config.method ngram", gpu="h200").plan
    assert later["speculative"]["method"] == "ngram"


def test_vllm_dotted_lists_and_nesting() -> None:
    from tools.engines.launch import vllm_dotted
    args = ["-tp", "8", "--x.a.b", "1", "--x.a.c=true", "--x.l+", "p,q", "--x.l+=r", "--temperature", "-0.5"]
    assert vllm_dotted(args) == ["-tp", "8", "--temperature", "-0.5", "--x",
                                 json.dumps({"a": {"b": 1, "c": True}, "l": ["p", "q", "r"]})]
    with pytest.raises(PdagInputError):
        vllm_dotted(["--x.a"])


def test_trtllm_import_refuses_what_it_cannot_read() -> None:
    with pytest.raises(EngineCannotExpress):
        import_command("trtllm-serve disaggregated -c disagg.yaml")
    with pytest.raises(EngineCannotExpress):
        import_command("trtllm-serve deepseek-ai/DeepSeek-R1 --tp_size 8 --ep_size 3")

    with pytest.raises(PdagInputError) as exc:
        import_command("trtllm-serve deepseek-ai/DeepSeek-R1", engine_config=["not", "a", "mapping"])  # type: ignore[arg-type]
    assert exc.value.field == "engine_config"


def test_cli_import_reads_a_trtllm_config(tmp_path, capsys) -> None:
    from tools.cli import main

    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"enable_attention_dp": True}))
    assert main(["import", "trtllm-serve deepseek-ai/DeepSeek-R1 --tp_size 8 --ep_size 8", "--gpu", "b200",
                 "--engine-config", str(cfg)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["parallel"]["attn_dp"] == 8


def test_disaggregated_pools_import_as_one_plan() -> None:
    from tools.engines.launch import import_disaggregated

    pre = "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode prefill"
    dec = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode decode "
           "--tp 2 --base-gpu-id 1")
    plan = import_disaggregated(pre, dec).plan
    assert plan["options"]["disaggregated"] and plan["hardware"]["num_gpus"] == 3
    assert plan["parallel"]["tp"] == 1 and plan["phases"]["decode"]["tp"] == 2
    out = export_plan(plan, "sglang")
    assert [a[a.index("--disaggregation-mode") + 1] for a in out.argv] == ["prefill", "decode"]
    with pytest.raises(PdagInputError) as exc:
        import_disaggregated(dec, pre)
    assert "disaggregation-mode" in exc.value.field
    with pytest.raises(PdagInputError):
        import_disaggregated(pre, dec.replace("Llama-3.1-8B-Instruct", "Llama-3.1-70B-Instruct"))


def test_dynamo_workers_import_like_the_engines_they_run() -> None:
    """NVIDIA Dynamo's workers: dynamo.vllm and dynamo.sglang take their engine's flags, dynamo.trtllm its own
    spelling of trtllm-serve's; a worker of one pool is imported with the other pool's."""
    from tools.engines.launch import import_disaggregated

    vllm = import_command("python3 -m dynamo.vllm --model meta-llama/Llama-3.3-70B-Instruct "
                          "--tensor-parallel-size 4", gpu="h100-sxm")
    assert vllm.engine == "vllm" and vllm.plan["parallel"]["tp"] == 4
    sgl = import_command("python3 -m dynamo.sglang --model-path deepseek-ai/DeepSeek-R1 --tp 8 --dp 8 "
                         "--enable-dp-attention --ep-size 8", gpu="h200").plan
    assert sgl["engine"] == "sglang" and sgl["parallel"]["attn_dp"] == 8 and sgl["parallel"]["ep"] == 8
    trt = "python3 -m dynamo.trtllm --model-path openai/gpt-oss-120b --tensor-parallel-size 4 --expert-parallel-size 4"
    plan = import_command(trt, gpu="b200").plan
    assert plan["engine"] == "trtllm" and (plan["parallel"]["tp"], plan["parallel"]["ep"]) == (4, 4)
    adp = import_command(trt + " --enable-attention-dp", gpu="b200").plan
    assert adp["parallel"]["attn_dp"] == 4 and adp["parallel"]["tp"] == 1
    yaml = import_command("python3 -m dynamo.trtllm --model-path openai/gpt-oss-120b --extra-engine-args p.yaml",
                          gpu="b200", engine_config={"tensor_parallel_size": 2}).plan
    assert yaml["parallel"]["tp"] == 2
    for role in ("--disaggregation-mode prefill", "--is-prefill-worker"):
        with pytest.raises(EngineCannotExpress):
            import_command(f"python3 -m dynamo.vllm --model openai/gpt-oss-120b {role}")
    pre = "python3 -m dynamo.vllm --model openai/gpt-oss-120b --is-prefill-worker"
    dec = "python3 -m dynamo.vllm --model openai/gpt-oss-120b -tp 4"
    both = import_disaggregated(pre, dec, gpu="h200", replicas=4).plan
    assert both["parallel"]["dp"] == 4 and both["phases"]["decode"]["tp"] == 4 and both["hardware"]["num_gpus"] == 8
    with pytest.raises(PdagInputError):
        import_disaggregated(dec, pre, gpu="h200")


def test_a_hugging_face_cache_path_names_its_model() -> None:
    """Manifests serve from the hub cache (models--{org}--{name}/snapshots/{revision}); the path is kept."""
    path = "/opt/models/hub/models--RedHatAI--Llama-3.3-70B-Instruct-FP8-dynamic/snapshots/ddb41b0e0e7a"
    assert model_for_repo(path)[0] == "llama-3.1-70b"
    plan = import_command(f"vllm serve {path} -tp 4", gpu="h100-sxm").plan
    assert plan["checkpoint"] == path and plan["weights"] == "fp8"


def test_vllm_reads_its_model_wherever_the_positional_stands() -> None:
    """vllm serve's model is an argparse positional: after options, and as a local path whose directories name
    the repo and its format (Modal's DeepSeek-R1 FP4 example)."""
    cmd = ("vllm serve --uvicorn-log-level=info /hf_cache/models/nvidia/DeepSeek-R1-0528-FP4/sharded "
           "--served-model-name nvidia/DeepSeek-R1-0528-FP4 llm --tensor-parallel-size 8")
    r = import_command(cmd, gpu="b200")
    assert r.plan["model"] == "deepseek-r1" and r.plan["weights"] == "nvfp4" and r.plan["parallel"]["tp"] == 8
    assert r.plan["checkpoint"] == "/hf_cache/models/nvidia/DeepSeek-R1-0528-FP4/sharded"
    assert "/hf_cache" not in " ".join(n for n in r.notes if "ignored" in n)
    with pytest.raises(PdagInputError) as exc:  # SGLang has no positional model: a stray token is not one
        import_command("python -m sglang.launch_server meta-llama/Llama-3.1-8B-Instruct --tp 2")
    assert exc.value.field == "command.model"


def test_argparse_abbreviations_are_read_as_the_engines_read_them() -> None:
    """vLLM's and SGLang's parsers accept a unique prefix of a long option; an ambiguous one is not read."""
    assert import_command("vllm serve openai/gpt-oss-120b --tensor-parallel 8", gpu="mi300x").plan["parallel"][
        "tp"] == 8
    assert import_command("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tensor-para 2",
                          gpu="h100-sxm").plan["parallel"]["tp"] == 2
    ambiguous = import_command("vllm serve openai/gpt-oss-120b -tp 2 --max-num 64", gpu="h200")
    assert ambiguous.plan["parallel"]["tp"] == 2 and "--max-num 64" in " ".join(ambiguous.notes)
    # trtllm-serve's click parser takes no abbreviations: the prefix stays an unread flag
    click = import_command("trtllm-serve openai/gpt-oss-120b --tp_siz 4", gpu="h200")
    assert click.plan["parallel"]["tp"] == 1 and "--tp_siz 4" in " ".join(click.notes)
    with pytest.raises(PdagInputError) as exc:
        import_command("vllm serve openai/gpt-oss-120b", gpu="h200", replicas=0)
    assert exc.value.field == "replicas"


def test_a_disaggregated_tensorrt_llm_export_keeps_each_pools_yaml() -> None:
    from tools.engines.launch import import_disaggregated

    pre = "python3 -m dynamo.trtllm --model-path openai/gpt-oss-120b --disaggregation-mode prefill"
    dec = "python3 -m dynamo.trtllm --model-path openai/gpt-oss-120b --disaggregation-mode decode"
    plan = import_disaggregated(pre, dec, gpu="b200", decode_engine_config={"tensor_parallel_size": 4},
                                replicas=2).plan
    out = export_plan(plan, "trtllm")
    assert out.pool_servers == {"prefill": 2, "decode": 1} and len(out.argv) == 3
    assert "--tp_size" in out.argv[-1] and out.argv[-1][out.argv[-1].index("--tp_size") + 1] == "4"


def test_sglang_deepep_all_to_all_means_ep_equals_tp() -> None:
    """SGLang sets ep_size = tp_size for the DeepEP / Mooncake all-to-all when --ep is not given."""
    cmd = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3-0324 --tp-size 16 --dp-size 8 "
           "--enable-dp-attention --moe-a2a-backend deepep")
    assert import_command(cmd, gpu="h200").plan["parallel"] == {"dp": 1, "pp": 1, "tp": 2, "ep": 16, "sp": 1,
                                                                "attn_dp": 8}
    plain = import_command(cmd.replace(" --moe-a2a-backend deepep", ""), gpu="h200").plan
    assert plain["parallel"]["ep"] == 1 and plain["options"]["allow_expert_tp"]


@pytest.mark.parametrize("flag", ["--enable-ep-moe", "--enable-deepep-moe"])
def test_sglang_deprecated_ep_switches_mean_ep_equals_tp(flag: str) -> None:
    """SGLang's deprecated switches (still in InferenceMAX's launches) set ep_size = tp_size, overriding --ep."""
    cmd = f"python3 -m sglang.launch_server --model-path nvidia/DeepSeek-R1-0528-FP4 --tensor-parallel-size=4 {flag}"
    assert import_command(cmd, gpu="b200").plan["parallel"] == {"dp": 1, "pp": 1, "tp": 4, "ep": 4, "sp": 1}
    over = import_command(cmd + " --ep-size 2", gpu="b200").plan
    assert over["parallel"]["ep"] == 4 and "allow_expert_tp" not in over.get("options", {})
    assert import_command(cmd.replace(flag, ""), gpu="b200").plan["parallel"]["ep"] == 1


def test_vllm_import_reads_its_config_yaml_under_the_command_line() -> None:
    """vllm serve --config: the YAML's keys are the long flag names and the command line wins over them."""
    cmd = "vllm serve nvidia/Llama-3.3-70B-Instruct-FP8 --config config.yaml --tensor-parallel-size 4"
    config = {"kv-cache-dtype": "fp8", "async-scheduling": True, "no-enable-prefix-caching": True,
              "max-num-batched-tokens": 8192, "cuda-graph-sizes": [1024, 2048], "tensor-parallel-size": 2}
    plan = import_command(cmd, gpu="h200", engine_config=config).plan
    assert plan["parallel"]["tp"] == 4 and plan["kv_dtype"] == "fp8"
    assert plan["engine_options"] == {"scheduler_ahead": True, "max_batched_tokens": 8192, "graph_max_tokens": 2048}
    assert plan["prefix_caching"] == {"enabled": False}  # a plan field now, not an unmodelled flag
    assert "kv_dtype" not in import_command(cmd, gpu="h200").plan
    off = import_command(cmd, gpu="h200", engine_config={"async-scheduling": False}).plan
    assert off["engine_options"]["scheduler_ahead"] is False
    graphs = import_command(cmd, gpu="h200", engine_config={
        "compilation-config": '{"cudagraph_mode": "FULL_DECODE_ONLY"}'}).plan
    assert graphs["engine_options"]["graph_max_tokens"] == 0
    with pytest.raises(PdagInputError) as exc:
        import_command(cmd, engine_config=["kv-cache-dtype", "fp8"])  # type: ignore[arg-type]
    assert exc.value.field == "engine_config"
    with pytest.raises(PdagInputError) as exc:
        import_command("python -m sglang.launch_server --model-path Qwen/Qwen3-8B", engine_config={"tp": 2})
    assert exc.value.field == "engine_config"


def test_fp8_weights_keep_the_engines_16_bit_cache_unless_told() -> None:
    """fp8 weights alone leave vLLM's and SGLang's cache at 'auto' (16-bit), in the estimate and the export alike;
    an fp8 kv_dtype is priced at one byte per element and exported as the engine's flag."""
    plan = _plan("llama-3.1-70b", "h100-sxm", {"tp": 4}, dtype="fp8")
    for engine in ("vllm", "sglang"):
        assert "--kv-cache-dtype" not in export_plan(plan, engine).command
        assert "--kv-cache-dtype fp8" in export_plan({**plan, "kv_dtype": "fp8"}, engine).command
    sixteen = estimate_performance(plan).kv_cache.bytes_per_token
    eight = estimate_performance({**plan, "kv_dtype": "fp8"}).kv_cache.bytes_per_token
    assert sixteen == 80 * 2 * 8 * 128 * 2 and eight == sixteen / 2


def test_import_of_a_modelopt_checkpoint_says_its_kv_cache_is_not_known() -> None:
    """'auto' follows a ModelOpt checkpoint's own KV quantization, which pdag cannot read offline: the import keeps
    the 16-bit default and says so; an explicit fp8 flag, or a non-NVIDIA repo, needs no such note."""
    res = import_command("trtllm-serve nvidia/DeepSeek-R1-FP4 --tp_size 8 --ep_size 8", gpu="b200")
    assert "kv_dtype" not in res.plan and any("kv_cache_quant_algo" in n for n in res.notes)
    fp8 = import_command("vllm serve nvidia/Llama-3.1-70B-Instruct-FP8 -tp 8 --kv-cache-dtype fp8")
    assert fp8.plan["kv_dtype"] == "fp8" and not any("kv_cache_quant_algo" in n for n in fp8.notes)
    plain = import_command("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 8")
    assert not any("kv_cache_quant_algo" in n for n in plain.notes)


def test_a_cpp_runtime_plan_exports_to_trtllm_serve_and_says_which_backend_it_starts() -> None:
    """TensorRT-LLM's C++ runtime (profile trtllm-cpp) and its PyTorch backend (trtllm) both launch through
    trtllm-serve; the export says the command starts the PyTorch backend."""
    p = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "parallel": {"tp": 1},
         "workload": {"input_len": 128, "output_len": 128, "batch_size": 1}}
    cpp = export_plan({**p, "engine": "trtllm-cpp"})
    assert cpp.engine == "trtllm" and cpp.command.startswith("trtllm-serve")
    assert any("PyTorch backend" in n for n in cpp.notes)
    assert not any("PyTorch backend" in n for n in export_plan({**p, "engine": "trtllm"}).notes)


LLAMA70 = "meta-llama/Llama-3.1-70B-Instruct"


@pytest.mark.parametrize("flags, options", [
    ("--max-num-batched-tokens 2048", {"max_batched_tokens": 2048}),
    ("--max-num-seqs 4", {"graph_max_tokens": 8}),  # vLLM: min(2 x max_num_seqs, 512)
    ("--max-num-seqs 1024", {"graph_max_tokens": 512}),
    ("--cuda-graph-sizes 2048", {"graph_max_tokens": 2048}),
    ("--cudagraph-capture-sizes 1 2 4 64", {"graph_max_tokens": 64}),
    ("--max-cudagraph-capture-size 256 --max-num-seqs 4", {"graph_max_tokens": 256}),
    ("--enforce-eager", {"graph_max_tokens": 0}),
    ("-O.cudagraph_mode=NONE", {"graph_max_tokens": 0}),
    ("--compilation-config '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'", {"graph_max_tokens": 0}),
    ("--compilation-config.max_cudagraph_capture_size 96", {"graph_max_tokens": 96}),
    ("-O 3", None),
])
def test_vllm_import_reads_the_step_budget_and_graph_capture_size(flags: str, options: dict | None) -> None:
    """The vLLM flags that decide how many tokens a step carries and which passes replay a CUDA graph land in
    plan.engine_options, so the estimate prices the server the command starts."""
    plan = import_command(f"vllm serve {LLAMA70} -tp 8 {flags}", gpu="h200").plan
    caps = {"max_num_seqs": int(flags.split("--max-num-seqs ")[1])} if "--max-num-seqs" in flags else {}
    assert plan.get("engine_options") == ({**options, **caps} if options else options)


def test_sglang_and_trtllm_import_their_step_budgets() -> None:
    sg = import_command(f"python -m sglang.launch_server --model-path {LLAMA70} --tp 8 --chunked-prefill-size 4096")
    assert sg.plan["engine_options"] == {"max_batched_tokens": 4096}
    off = import_command(f"python -m sglang.launch_server --model-path {LLAMA70} --tp 8 --chunked-prefill-size -1")
    assert "engine_options" not in off.plan and any("chunked prefill disabled" in n for n in off.notes)
    trt = import_command(f"trtllm-serve {LLAMA70} --tp_size 8 --max_num_tokens 16384")
    assert trt.plan["engine_options"] == {"max_batched_tokens": 16384}
    yaml = import_command(f"trtllm-serve {LLAMA70} --tp_size 8", engine_config={"max_num_tokens": 4096})
    assert yaml.plan["engine_options"] == {"max_batched_tokens": 4096}


@pytest.mark.parametrize("options", [{"max_batched_tokens": 2048, "graph_max_tokens": 1024}, {"graph_max_tokens": 0},
                                     {"max_batched_tokens": 16384}])
def test_engine_options_survive_export_and_reimport(options: dict) -> None:
    """An exported vLLM command starts the server the estimate priced: its budget and capture size come back
    unchanged on import (the capture size is written whenever vLLM's default from --max-num-seqs would differ)."""
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8},
            "engine": "vllm", "engine_options": options}
    back = import_command(export_plan(plan).command, gpu="h200").plan
    caps = {k: back["engine_options"].pop(k) for k in ("max_num_seqs", "max_model_len")}  # the export's own caps
    assert back["engine_options"] == {"graph_max_tokens": 512, **options} and min(caps.values()) > 0


def test_estimate_prices_the_engine_options() -> None:
    """A smaller step budget cuts a long prompt into more chunks (TTFT up, TPOT unchanged); a 500-token prompt
    replays a CUDA graph under vLLM's default capture size and runs eagerly (host-bound) when graphs are off."""
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8},
            "engine": "vllm", "dtype": "fp8", "workload": {"input_len": 8000, "output_len": 1000, "batch_size": 32}}
    wide = estimate_performance(plan=plan).steady_state_estimate
    narrow = estimate_performance(plan={**plan, "engine_options": {"max_batched_tokens": 2048}}).steady_state_estimate
    assert narrow.chunk_tokens == 2048 - 32 and wide.chunk_tokens == 8192 - 32
    assert narrow.ttft_ms > wide.ttft_ms and narrow.tpot_ms == pytest.approx(wide.tpot_ms)
    short = {**plan, "workload": {"input_len": 500, "output_len": 1000, "batch_size": 4}}
    graphed = estimate_performance(plan=short).steady_state_estimate
    eager = estimate_performance(plan={**short, "engine_options": {"graph_max_tokens": 0}}).steady_state_estimate
    assert eager.ttft_ms > 1.5 * graphed.ttft_ms


def test_sglang_import_prices_two_batch_overlap_only_when_the_command_enables_it() -> None:
    """SGLang's two-batch overlap is opt-in: an EP command without --enable-two-batch-overlap keeps the all-to-all
    on the critical path, one with it hides half (the sglang profile); dense and EP-less commands are untouched."""
    base = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dp 16 "
            "--enable-dp-attention --moe-a2a-backend deepep --nnodes 2")
    off = import_command(base, gpu="h200")
    on = import_command(base + " --enable-two-batch-overlap", gpu="h200")
    assert off.plan["options"]["overlap_comm"] is False and on.plan["options"]["overlap_comm"] is True
    assert any("two-batch-overlap" in n for n in off.notes)
    work = {"input_len": 2000, "output_len": 100, "batch_size": 16 * 256}
    tpot = {k: estimate_performance(plan={**r.plan, "workload": work}).decode_latency_ms_per_token
            for k, r in (("off", off), ("on", on))}
    assert tpot["on"] < tpot["off"]
    plain = import_command("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8", gpu="h200")
    assert "overlap_comm" not in plain.plan.get("options", {})



def test_sglang_attention_dp_runs_the_priced_alltoall() -> None:
    """The sglang profile prices EP as DeepEP all-to-all: an attention-DP export selects it (SGLang's default EP
    path reduces over the TP group), and importing that command gives back the plan's EP width.  EP within the TP
    group is priced as that default (tokens replicated, an all-reduce combine), so no backend is written."""
    plan = _plan("deepseek-v3", "h200", {"attn_dp": 16, "ep": 16}, dtype="fp8", options=ADP)
    r = export_plan(plan, "sglang")
    assert "--moe-a2a-backend deepep" in r.command
    assert import_command(r.command, gpu="h200").plan["parallel"]["ep"] == 16
    tp_only = export_plan(_plan("deepseek-v3", "h200", {"tp": 8, "ep": 8}, dtype="fp8"), "sglang")
    assert "--moe-a2a-backend" not in tp_only.command and "--enable-two-batch-overlap" not in tp_only.command


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_look_ahead_scheduler_switch_round_trips(engine: str) -> None:
    """A plan priced without the look-ahead scheduler exports the engine's switch (vLLM --no-async-scheduling,
    SGLang --disable-overlap-schedule, TensorRT-LLM disable_overlap_scheduler in its YAML), which imports back."""
    plan = _plan("llama-3.1-8b", "h100-sxm", {"tp": 1}, engine_options={"scheduler_ahead": False})
    out = export_plan(plan, engine)
    back = import_command(out.command, gpu="h100-sxm", engine_config=out.config)
    assert back.plan["engine_options"]["scheduler_ahead"] is False
    default = export_plan(_plan("llama-3.1-8b", "h100-sxm", {"tp": 1}), engine)
    assert "scheduler_ahead" not in (import_command(default.command, gpu="h100-sxm",
                                                    engine_config=default.config).plan.get("engine_options") or {})


def test_vllm_async_scheduling_flag_is_read() -> None:
    r = import_command("vllm serve openai/gpt-oss-120b --async-scheduling -tp 2", gpu="h100-sxm")
    assert r.plan["engine_options"]["scheduler_ahead"] is True
    assert "--async-scheduling" not in " ".join(n for n in r.notes if "ignored" in n)


def test_import_says_when_one_request_of_the_context_cap_does_not_fit() -> None:
    """vLLM reserves KV for one max_model_len request at start-up and refuses to start without room for it."""
    cmd = "vllm serve meta-llama/Llama-3.1-70B-Instruct -tp 2 --max-model-len {}"
    tight = import_command(cmd.format(131072), gpu="h100-sxm").notes
    assert any("--max-model-len 131072" in n and "refuses to start" in n for n in tight)
    assert not any("refuses to start" in n for n in import_command(cmd.format(8192), gpu="h100-sxm").notes)
    trt = import_command("trtllm-serve meta-llama/Llama-3.1-70B-Instruct --tp_size 2 --max_seq_len 131072",
                         gpu="h100-sxm").notes
    assert any(n.startswith("--max_seq_len 131072") for n in trt)


def test_cli_imports_a_disaggregated_deployment_from_both_pools_commands(tmp_path, capsys) -> None:
    """Dynamo's Qwen3-235B recipe: six 2-GPU prefill workers and one 4-GPU decode worker, each pool with its YAML."""
    from tools.cli import main

    pre, dec = tmp_path / "prefill.json", tmp_path / "decode.json"
    pre.write_text(json.dumps({"tensor_parallel_size": 2, "moe_expert_parallel_size": 1}))
    dec.write_text(json.dumps({"tensor_parallel_size": 4, "moe_expert_parallel_size": 4}))
    worker = "python3 -m dynamo.trtllm --model-path Qwen/Qwen3-235B-A22B-FP8 --disaggregation-mode {}"
    assert main(["import", worker.format("prefill"), "--gpu", "h200", "--engine-config", str(pre), "--replicas", "6",
                 "--decode-command", worker.format("decode"), "--decode-engine-config", str(dec)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["options"]["disaggregated"] and plan["hardware"]["num_gpus"] == 16
    assert (plan["parallel"]["dp"], plan["parallel"]["tp"]) == (6, 2)
    assert (plan["phases"]["decode"]["tp"], plan["phases"]["decode"]["ep"]) == (4, 4)


def test_export_says_why_its_caps_exceed_the_workload() -> None:
    """Caps sized to memory read as a contradiction of the estimate unless the answer says what they are."""
    from tools.engines.launch import export_plan

    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
            "workload": {"input_len": 3000, "output_len": 500, "batch_size": 4}}
    for engine, seqs, length in (("vllm", "--max-num-seqs", "--max-model-len"),
                                 ("sglang", "--max-running-requests", "--context-length"),
                                 ("trtllm", "--max_batch_size", "--max_seq_len")):
        notes = " ".join(export_plan(plan, engine).notes)
        assert f"{seqs} " in notes and "not the 4 per replica" in notes, engine
        assert f"{length} " in notes and "needs 3500 tokens" in notes, engine
    capped = {**plan, "engine_options": {"max_num_seqs": 4, "max_model_len": 3500}}
    assert "not the 4 per replica" not in " ".join(export_plan(capped, "vllm").notes)
    assert "--max-num-seqs 4 " in export_plan(capped, "vllm").command + " "


def test_a_version_that_is_the_models_own_number_is_not_stripped() -> None:
    """'DeepSeek-V3.2' was read as DeepSeek-V3 (its '-v3.2' stripped as a release suffix), pricing a sparse-attention
    model as dense MLA with no note; a blind recipe found it. Release suffixes of a named model still are."""
    from tools.core.errors import PdagInputError
    from tools.engines.launch import model_for_repo

    assert model_for_repo("deepseek-ai/DeepSeek-V3.2")[0] == "deepseek-v3.2"  # its own preset now, not V3's
    assert model_for_repo("deepseek-ai/DeepSeek-V3.2-Exp")[0] == "deepseek-v3.2"
    with pytest.raises(PdagInputError):
        model_for_repo("deepseek-ai/DeepSeek-V3.5")
    assert model_for_repo("deepseek-ai/DeepSeek-V3.1-Terminus")[0] == "deepseek-v3.1"
    assert model_for_repo("mistralai/Mistral-7B-Instruct-v0.3")[0] == "mistral-7b"
    assert model_for_repo("deepseek-ai/DeepSeek-V3-0324")[0] == "deepseek-v3"


QWEN3_MOE_CONFIG = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
                    "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 64,
                    "num_experts_per_tok": 8, "vocab_size": 151936, "max_position_embeddings": 32768}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_model_given_as_a_config_exports_only_with_its_checkpoint(engine: str) -> None:
    """An outside agent exported a config.json model and got `vllm serve qwen3_moe`: the model_type is no repo."""
    plan = {"model": {"hf_config": QWEN3_MOE_CONFIG}, "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
            "parallel": {"tp": 2, "ep": 2}}
    with pytest.raises(PdagInputError) as exc:
        export_plan(plan, engine=engine)
    assert exc.value.field == "plan.checkpoint"
    out = export_plan({**plan, "checkpoint": "/models/my-moe"}, engine=engine)
    assert "/models/my-moe" in out.argv[0] and "qwen3_moe" not in out.command
