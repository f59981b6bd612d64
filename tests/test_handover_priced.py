"""What pdag hands over matches what it priced (issues 39/40/43): the exported command runs the engine features the
estimate assumed, the short GPU names resolve, saturated KV caches are said, online fp8 quantization's load peak is
priced."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tools import estimate_performance, export_plan, import_command, validate_dag
from tools.core.errors import PdagInputError
from tools.core.hardware import accelerator_id, accelerator_ids
from tools.core.plan import parse_plan

KIMI_ADP = {"model": "kimi-k2", "hardware": {"gpu": "h200", "num_gpus": 16}, "engine": "sglang", "dtype": "fp8",
            "weights": "fp8",
            "parallel": {"tp": 1, "attn_dp": 16, "ep": 16}, "options": {"allow_attention_dp": True},
            "workload": {"input_len": 2000, "output_len": 1000, "batch_size": 256}}
DSV3_ADP = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "dtype": "fp8", "weights": "fp8",
            "parallel": {"tp": 1, "attn_dp": 8, "ep": 8}, "options": {"allow_attention_dp": True},
            "workload": {"input_len": 2000, "output_len": 500, "batch_size": 512}}


def _static(plan: dict) -> tuple[float, float]:
    est = estimate_performance(plan=plan, simulate=False)
    return est.prefill_latency_ms, est.decode_latency_ms_per_token


@pytest.mark.parametrize("plan, engine", [(KIMI_ADP, "sglang"), ({**DSV3_ADP, "engine": "sglang"}, "sglang"),
                                          ({**DSV3_ADP, "engine": "vllm"}, "vllm")])
def test_the_exported_command_prices_as_the_plan(plan: dict, engine: str) -> None:
    """Export, import the command back and price it: the figures are the plan's.  Before, SGLang's export left out
    --enable-two-batch-overlap that the estimate priced, and Kimi-K2's command imported (and ran) slower."""
    out = export_plan(plan, engine)
    back = import_command(shlex.join(out.argv[0]), gpu=plan["hardware"]["gpu"]).plan
    back = {**back, "workload": plan["workload"], "dtype": plan["dtype"], "engine": plan["engine"]}
    want, got = _static(plan), _static(back)
    assert got == pytest.approx(want, rel=1e-6)


def test_sglang_two_batch_overlap_follows_the_priced_overlap() -> None:
    """The flag is written exactly when the estimate hides part of the all-to-all, with the DeepEP backend SGLang
    requires for it; without the overlap the command says nothing of it and the estimate is slower."""
    on = export_plan(KIMI_ADP, "sglang").command
    assert "--moe-a2a-backend deepep" in on and "--enable-two-batch-overlap" in on
    plain = {**KIMI_ADP, "options": {**KIMI_ADP["options"], "overlap_comm": False}}
    off = export_plan(plain, "sglang").command
    assert "--moe-a2a-backend deepep" in off and "--enable-two-batch-overlap" not in off
    assert _static(plain)[1] > _static(KIMI_ADP)[1]


def test_vllm_selects_the_deepep_kernels_it_is_priced_with() -> None:
    """vLLM's default all-to-all is allgather_reducescatter; the profile prices DeepEP, low-latency kernels on an
    aggregated server or decode pool, high-throughput (node-deduplicating) ones on a prefill pool."""
    agg = export_plan({**DSV3_ADP, "engine": "vllm"}, "vllm").command
    assert "--all2all-backend deepep_low_latency" in agg
    assert not any("slower than estimated" in n for n in import_command(agg, gpu="h200").notes)
    bare = import_command("vllm serve deepseek-ai/DeepSeek-V3 -tp 1 -dp 8 --enable-expert-parallel", gpu="h200")
    assert any("allgather_reducescatter" in n and "slower than estimated" in n for n in bare.notes)
    by_env = import_command("VLLM_ALL2ALL_BACKEND=deepep_low_latency vllm serve deepseek-ai/DeepSeek-V3 -tp 1 -dp 8 "
                            "--enable-expert-parallel", gpu="h200")
    assert not any("slower than estimated" in n for n in by_env.notes)
    disagg = {"model": "deepseek-v3", "engine": "vllm", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 32},
              "parallel": {"tp": 1, "attn_dp": 16, "ep": 16}, "phases": {"prefill": {"attn_dp": 16, "ep": 16}},
              "options": {"allow_attention_dp": True, "disaggregated": True}}
    out = export_plan(disagg, "vllm")
    first = out.pool_commands["prefill"]
    prefill, decode = (" ".join(a) for a in (out.argv[0], out.argv[first]))
    assert "--all2all-backend deepep_high_throughput" in prefill
    assert "--all2all-backend deepep_low_latency" in decode


def test_vllm_prefill_deduplicates_nodes_only_on_a_prefill_pool() -> None:
    """Low-latency kernels send one copy per expert: a two-node aggregated vLLM prefill pays that; the same layout as
    a disaggregated prefill pool runs the high-throughput kernels, one copy per remote node.  Before, both were
    priced deduplicated while the aggregated server ran vLLM's default all-to-all."""
    agg = {"model": "deepseek-v3", "engine": "vllm", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 16},
           "parallel": {"tp": 1, "attn_dp": 16, "ep": 16}, "options": {"allow_attention_dp": True},
           "workload": {"input_len": 4000, "output_len": 100, "batch_size": 64}}
    pools = {**agg, "hardware": {"gpu": "h200", "num_gpus": 32}, "phases": {"prefill": {"attn_dp": 16, "ep": 16}},
             "options": {"allow_attention_dp": True, "disaggregated": True}}
    assert _static(agg)[0] > 1.05 * _static(pools)[0]


@pytest.mark.parametrize("batch, written", [(64, False), (4096, True)])
def test_graph_capture_covers_the_decode_batches_priced(batch: int, written: bool) -> None:
    """Decode is priced as a CUDA graph at every batch: trtllm-serve captures up to 128 unless told more, SGLang's
    cap depends on the GPU, so both commands carry the batch cap they are given."""
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
            "engine_options": {"max_num_seqs": batch}}
    trt = export_plan(plan, "trtllm")
    graphs = (trt.config or {}).get("cuda_graph_config")
    assert (graphs == {"enable_padding": True, "max_batch_size": batch}) if written else graphs is None
    sg = export_plan(plan, "sglang").argv[0]
    assert sg[sg.index("--cuda-graph-max-bs") + 1] == str(batch)
    said = [n for n in export_plan(plan, "vllm").notes if "without a CUDA graph" in n]  # one capture size for both
    assert bool(said) == written and (not said or f"graph_max_tokens = {batch}" in said[0])


def test_trtllm_attention_dp_captures_each_ranks_share() -> None:
    """With attention DP every rank decodes its own requests: the graphs cover the cap over the ranks."""
    out = export_plan(DSV3_ADP, "trtllm")
    cap = int(out.argv[0][out.argv[0].index("--max_batch_size") + 1])
    assert out.config["cuda_graph_config"]["max_batch_size"] == -(-cap // 8) > 128


def test_an_export_to_another_engine_says_its_figures_are_another_profiles() -> None:
    out = export_plan(KIMI_ADP, "vllm")
    assert any("priced on engine profile sglang" in n for n in out.notes)
    assert not any("priced on engine profile" in n for n in export_plan(KIMI_ADP, "sglang").notes)


# ---------------------------------------------------------------------------------------------- GPU names
@pytest.mark.parametrize("name, preset", [("H100 SXM", "h100-sxm"), ("h100_sxm", "h100-sxm"), ("H100SXM", "h100-sxm"),
                                          ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("H100 PCIe", "h100-pcie"),
                                          ("AMD Instinct MI300X", "mi300x"), ("NVIDIA GeForce RTX 4090", "rtx-4090")])
def test_a_name_that_fits_one_preset_resolves_to_it(name: str, preset: str) -> None:
    assert accelerator_id(name) == preset
    assert parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": name, "num_gpus": 1}}).hardware.gpu == preset


@pytest.mark.parametrize("name, named", [("h100", {"h100-sxm", "h100-pcie"}), ("A100", {"a100-40gb", "a100-80gb"})])
def test_a_name_several_presets_fit_is_an_error_naming_them(name: str, named: set[str]) -> None:
    """Before: 'unknown accelerator' with difflib's picks; the SXM and PCIe parts differ in bandwidth and links, so
    pdag does not pick one."""
    with pytest.raises(PdagInputError) as exc:
        parse_plan({"model": "llama-3.1-8b", "hardware": {"gpu": name, "num_gpus": 1}})
    assert exc.value.field == "plan.hardware.gpu"
    assert all(k in exc.value.allowed for k in named)


@pytest.mark.parametrize("name, first", [("h100-nvl", "h100"), ("l40", "l40s"), ("H200 NVL", "h200")])
def test_a_form_with_no_preset_names_the_closest(name: str, first: str) -> None:
    """No silent pick of another form (H100 NVL is not the SXM part; L40 is not L40S)."""
    with pytest.raises(PdagInputError) as exc:
        accelerator_id(name)
    assert exc.value.allowed.removeprefix("closest presets: ").startswith(first)


@given(st.sampled_from(accelerator_ids()), st.sampled_from([str.upper, str.lower, lambda s: s.replace("-", "_"),
                                                            lambda s: s.replace("-", " "), lambda s: f" {s} "]))
def test_every_preset_id_in_any_spelling_resolves_to_itself(preset: str, spell) -> None:
    assert accelerator_id(spell(preset)) == preset


@given(st.text(max_size=40))
def test_any_name_resolves_or_is_an_input_error(name: str) -> None:
    try:
        assert accelerator_id(name) in accelerator_ids()
    except PdagInputError as exc:
        assert exc.field == "gpu" and exc.allowed


def test_short_gpu_names_on_every_front(capsys) -> None:
    """CLI flags and import take the same names as the plan JSON, and answers echo the preset id."""
    from tools.cli import main

    assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "H100 SXM", "--gpus", "1", "--json"]) == 0
    assert '"gpu": "h100-sxm"' in capsys.readouterr().out
    assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1"]) == 2
    assert "h100-pcie" in capsys.readouterr().err
    assert import_command("vllm serve meta-llama/Llama-3.1-8B-Instruct", gpu="h100 pcie").plan["hardware"]["gpu"] == \
        "h100-pcie"


@pytest.mark.anyio
async def test_short_gpu_names_over_mcp() -> None:
    from mcp import Client

    from server import create_server

    async with Client(create_server(), mode="auto", raise_exceptions=True) as c:
        r = await c.call_tool("validate_dag", {"plan": {"model": "llama-3.1-8b",
                                                         "hardware": {"gpu": "h100", "num_gpus": 1}}})
        said = "\n".join(getattr(b, "text", "") for b in r.content)
        assert r.is_error and "h100-sxm" in said and "h100-pcie" in said
        ok = await c.call_tool("validate_dag", {"plan": {"model": "llama-3.1-8b",
                                                          "hardware": {"gpu": "H100 SXM", "num_gpus": 1}}})
        assert not ok.is_error


# ---------------------------------------------------------------------------------------------- saturated KV
SMALL_KV = {"model": "llama-3.1-8b", "hardware": {"gpu": "l40s", "num_gpus": 1}, "engine": "vllm",
            "workload": {"input_len": 4000, "output_len": 300, "num_requests": 64}}


@pytest.mark.parametrize("clients, said", [(64, True), (2, False)])
def test_a_saturated_kv_cache_is_said_with_its_figures(clients: int, said: bool) -> None:
    """Before: the served figures came back with no word that requests waited or were preempted for KV room."""
    plan = {**SMALL_KV, "workload": {**SMALL_KV["workload"], "concurrency": clients}}
    est = estimate_performance(plan=plan)
    warned = [w for w in est.warnings if "KV cache is saturated" in w]
    assert bool(warned) == said
    if said:
        s = est.served
        assert s.preemptions or s.kv_peak_fraction >= 0.95 or s.queue_ms.p90 > s.tpot_ms.p50
        assert f"{s.kv_peak_fraction:.0%}" in warned[0] and f"{s.preemptions:,} preemptions" in warned[0]


# ---------------------------------------------------------------------------------------------- online fp8 load
ONLINE_FP8 = {"model": "llama-3.1-70b", "hardware": {"gpu": "h200", "num_gpus": 1}, "dtype": "fp8"}


def test_sglang_online_fp8_must_fit_the_16_bit_load() -> None:
    """SGLang allocates a bf16 checkpoint's linear weights in 16 bits and quantizes them after the last shard: 70B
    on one H200 serves in fp8 but cannot load.  vLLM quantizes layer by layer, and a stored fp8 checkpoint loads
    as it serves.  Before, all three were valid."""
    sg = validate_dag(plan={**ONLINE_FP8, "engine": "sglang"})
    assert not sg.valid and [v.rule_id for v in sg.violations] == ["MEM-FITS"] and "at load" in sg.violations[0].message
    mem = estimate_performance(plan={**ONLINE_FP8, "engine": "sglang"}, simulate=False).memory
    assert mem.max_gpu_bytes <= mem.capacity_bytes < mem.load_peak_bytes and not mem.fits
    assert validate_dag(plan={**ONLINE_FP8, "engine": "vllm"}).valid
    stored = {**ONLINE_FP8, "engine": "sglang", "checkpoint": "nvidia/Llama-3.1-70B-Instruct-FP8"}
    assert validate_dag(plan=stored).valid
    assert estimate_performance(plan=stored, simulate=False).memory.load_peak_bytes is None


def test_the_load_peak_is_the_16_bit_weights() -> None:
    """The peak is the bf16 plan's weights plus the same reserve, on the worst GPU of each layout."""
    for tp in (1, 2, 4):
        plan = {**ONLINE_FP8, "engine": "sglang", "hardware": {"gpu": "h200", "num_gpus": tp}, "parallel": {"tp": tp}}
        fp8 = estimate_performance(plan=plan, simulate=False).memory
        bf16 = estimate_performance(plan={**plan, "dtype": "bf16"}, simulate=False).memory
        assert fp8.load_peak_bytes == pytest.approx(bf16.weights_bytes + bf16.reserved_bytes)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_caps_stay_within_what_the_simulation_runs_with(engine: str) -> None:
    """An outside agent got --max-num-seqs 20074 and --cuda-graph-max-bs 20074 for gpt-oss-120b on 8 B200 at 64
    clients: the sliding-window cache holds that many, but the engines' own caps (vLLM 1,024 per engine,
    TensorRT-LLM 2,048), which the serving simulation runs with, and a graph per batch size up to 20k do not."""
    from tools.estimate.serving import POLICY_OF_ENGINE, sequence_cap

    plan = {"model": "gpt-oss-120b", "hardware": {"gpu": "b200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
            "workload": {"input_len": 1024, "output_len": 1024, "concurrency": 64}, "engine": engine}
    argv = export_plan(plan, engine).argv[0]
    flag = {"vllm": "--max-num-seqs", "sglang": "--cuda-graph-max-bs", "trtllm": "--max_batch_size"}[engine]
    written = int(argv[argv.index(flag) + 1])
    assert 64 <= written <= (512 if engine == "sglang" else sequence_cap(parse_plan(plan), POLICY_OF_ENGINE[engine]))
