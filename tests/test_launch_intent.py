"""What export writes must start on the engine and run the plan as priced (reports of an outside agent tester):
context caps within the KV the engine allocates, the switches a checkpoint or a layout needs, refusals where the
engine cannot load what the plan prices, and imports that read the engine's defaults."""

from __future__ import annotations

import json
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import estimate_performance, validate_dag
from tools.core.memory import engine_window_kv, one_sequence_tokens
from tools.core.models import MODELS_DIR, load_preset, preset_index
from tools.core.plan import parse_plan
from tools.engines.launch import (
    ENGINES,
    EngineCannotExpress,
    export_plan,
    import_command,
    import_deployment,
    split_command,
)

HYBRID_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1"
MAVERICK = {"model": "meta-llama/llama-4-maverick-17b-128e-instruct", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "checkpoint": "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "workload": {"concurrency": 32},
            "parallel": {"tp": 8, "ep": 8}, "objective": "throughput"}
SCOUT = {"model": "llama-4-scout", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "weights": "fp8",
         "parallel": {"tp": 2, "ep": 2}, "workload": {"concurrency": 32}, "objective": "throughput"}
SCOUT_BF16 = {**SCOUT, "weights": None, "hardware": {"gpu": "h100-sxm", "num_gpus": 4}, "parallel": {"tp": 4, "ep": 4}}
CAP_FLAG = {"vllm": "--max-model-len", "sglang": "--context-length", "trtllm": "--max_seq_len"}


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _cap(plan: dict, engine: str) -> int:
    return int(_value(export_plan(plan, engine).argv[0], CAP_FLAG[engine]))


@pytest.mark.parametrize("plan", [MAVERICK, SCOUT_BF16], ids=["maverick-fp8-tp8", "scout-tp4"])
@pytest.mark.parametrize("engine", ENGINES)
def test_context_cap_fits_one_request_as_the_engine_allocates_kv(plan: dict, engine: str) -> None:
    """Before: vLLM's --max-model-len assumed chunked layers keep only their chunk while the command left vLLM's
    hybrid KV manager off (full-length KV on every layer): Scout TP2 788,316 against about 200,000 tokens of room,
    so vLLM would refuse to start; SGLang and trtllm-serve got the same cap."""
    parsed = parse_plan(plan)
    keeps, env = engine_window_kv(parsed, engine)
    cap = _cap(plan, engine)
    assert cap <= one_sequence_tokens(parsed, keeps)
    argv = export_plan(plan, engine).argv[0]
    assert (HYBRID_ENV in argv) == (engine == "vllm")  # vLLM allocates as priced only with its switch
    if engine != "vllm":  # full-length KV on every layer: the cap is what one request holds that way
        assert not keeps and cap <= one_sequence_tokens(parsed, False)
    assert cap >= plan["workload"].get("input_len", 2048) + plan["workload"].get("output_len", 128)


GEMMA_L4 = {"model": "google/gemma-3-27b-it", "hardware": {"gpu": "l4", "num_gpus": 2}, "parallel": {"tp": 2},
            "weights": "fp8"}
# SGLang loads a 16-bit checkpoint whole before quantizing it to fp8, which these GPUs do not hold (MEM-FITS at
# load): its cases serve published checkpoints that store fp8.
STORED_FP8 = {"llama-4-scout": "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",
              "google/gemma-3-27b-it": "RedHatAI/gemma-3-27b-it-FP8-dynamic"}


def _on(plan: dict, engine: str) -> dict:
    """The plan on ``engine``, serving a stored fp8 checkpoint where the engine would quantize a 16-bit one whole."""
    stored = {"checkpoint": STORED_FP8[plan["model"]]} if engine == "sglang" else {}
    return {**plan, "engine": engine, **stored}


@pytest.mark.parametrize("plan", [GEMMA_L4, SCOUT], ids=["gemma-3-l4-tp2", "scout-fp8-tp2"])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_one_request_as_long_as_the_cap_is_served(plan: dict, engine: str) -> None:
    """An outside tester's report: the cap (78,547 for Gemma-3 on 2 L4) was not a whole number of KV pages, so the
    serving simulation of one request that long refused it (78,544 tokens once the weights are held)."""
    cap = _cap(_on(plan, engine), engine)
    one = {**_on(plan, engine), "workload": {"input_len": cap - 1, "output_len": 1, "concurrency": 1,
                                             "num_requests": 1}}
    assert estimate_performance(one).served.requests == 1


def test_vllm_scout_cap_leaves_the_hybrid_managers_step_room_and_eagle_falls_back_to_full_length() -> None:
    """The hybrid manager keeps a step's tokens beside each chunk, and an EAGLE drafter turns it off."""
    parsed = parse_plan(SCOUT)
    windowed, full = one_sequence_tokens(parsed, True), one_sequence_tokens(parsed, False)
    assert full < windowed
    assert windowed - 16 < _cap(SCOUT, "vllm") <= windowed  # whole pages of 16 tokens
    eagle = {**SCOUT, "speculative": {"method": "eagle", "num_draft_tokens": 3,
                                      "draft_checkpoint": "some-org/eagle-head"}}
    out = export_plan(eagle, "vllm", force=True)
    assert HYBRID_ENV not in out.argv[0] and int(_value(out.argv[0], "--max-model-len")) <= one_sequence_tokens(
        parse_plan(eagle), False)
    assert any("full-length KV" in n for n in out.notes)


def test_the_switch_round_trips_through_import() -> None:
    """An exported Llama-4 command imports to the same plan, which exports the same command again."""
    first = export_plan(SCOUT, "vllm")
    back = import_command(first.command, gpu="h100-sxm").plan
    again = export_plan({**back, "workload": SCOUT["workload"], "objective": "throughput"}, "vllm")
    assert again.argv[0][0] == HYBRID_ENV and split_command(first.command) == split_command(again.command)


def test_validate_flags_a_request_longer_than_the_engine_holds() -> None:
    long = {**SCOUT, "workload": {"input_len": 400_000, "output_len": 256}}
    room = one_sequence_tokens(parse_plan(long), False)
    assert room < 400_256 < one_sequence_tokens(parse_plan(long), True)
    for engine, flagged in (("sglang", True), ("trtllm", True), ("vllm", False), ("generic", False)):
        rules = {v.rule_id for v in validate_dag(plan=_on(long, engine)).violations}
        assert ("MEM-ENGINE-CONTEXT" in rules) == flagged, engine
    short = {**_on(SCOUT, "sglang"), "workload": {"input_len": room - 1000, "output_len": 256}}
    assert "MEM-ENGINE-CONTEXT" not in {v.rule_id for v in validate_dag(plan=short).violations}


KIMI = {"model": "moonshotai/kimi-k2-instruct", "hardware": {"gpu": "h200", "num_gpus": 16},
        "workload": {"concurrency": 256}, "objective": "throughput",
        "parallel": {"tp": 1, "ep": 16, "attn_dp": 16}, "options": {"allow_attention_dp": True}}
TRUST = {"vllm": "--trust-remote-code", "sglang": "--trust-remote-code", "trtllm": "--trust_remote_code"}


@pytest.mark.parametrize("engine", ENGINES)
def test_checkpoints_read_through_their_own_code_get_the_trust_flag(engine: str) -> None:
    """Before: Kimi-K2 (model_type kimi_k2, which transformers does not register; its repo maps the config to its
    own code) exported without --trust-remote-code, so every engine stopped loading the config."""
    out = export_plan(KIMI, engine)
    assert all(a.count(TRUST[engine]) == 1 for a in out.argv) and not out.flag_problems
    assert TRUST[engine] not in export_plan(SCOUT_BF16, engine).argv[0]
    back = import_command(shlex.join(out.argv[0]), gpu="h200").plan
    assert export_plan({**back, "options": KIMI["options"]}, engine).argv[0].count(TRUST[engine]) == 1


def _config(preset: str) -> dict:
    return json.loads((MODELS_DIR / preset_index()[preset]["file"]).read_text())


def test_the_trust_flag_follows_the_config_not_the_name() -> None:
    remote = [p for p in preset_index() if load_preset(p).remote_code]
    assert "kimi-k2" in remote and "deepseek-v3" not in remote and "llama-3.1-8b" not in remote  # V3: registered


@settings(max_examples=25, deadline=None)
@given(model_type=st.sampled_from(["kimi_k2", "deepseek_v3"]), auto_map=st.booleans())
def test_remote_code_is_the_conjunction_of_auto_map_and_an_unregistered_type(model_type: str, auto_map: bool) -> None:
    raw = {k: v for k, v in _config("kimi-k2").items() if k != "auto_map"} | {"model_type": model_type}
    if auto_map:
        raw["auto_map"] = {"AutoConfig": "configuration_deepseek.DeepseekV3Config"}
    spec = parse_plan({"model": {"hf_config": raw}, "hardware": {"gpu": "h200", "num_gpus": 8}}).spec
    assert spec.remote_code == (auto_map and model_type == "kimi_k2")


def test_vllm_skips_the_vision_tower_the_memory_leaves_out() -> None:
    """Before: Gemma-3 on two L4s exported without a text-only switch, so vLLM loaded and profiled the vision
    encoder the plan's memory does not count (0.84 GB of headroom)."""
    gemma = {"model": "google/gemma-3-27b-it", "hardware": {"gpu": "l4", "num_gpus": 2}, "weights": "fp8",
             "workload": {"concurrency": 16}, "parallel": {"tp": 2}, "objective": "throughput"}
    out = export_plan(gemma, "vllm")
    assert out.argv[0].count("--language-model-only") == 1 and not out.flag_problems
    assert "--language-model-only" not in export_plan(SCOUT_BF16, "vllm").argv[0]
    again = export_plan({**import_command(out.command, gpu="l4").plan, "workload": gemma["workload"]}, "vllm")
    assert again.argv[0].count("--language-model-only") == 1
    assert any("vision encoder" in n for n in export_plan(gemma, "sglang").notes)


@pytest.mark.parametrize("engine", ENGINES)
def test_awq_on_a_16_bit_checkpoint_is_refused_naming_one_that_stores_it(engine: str) -> None:
    plan = {"model": "qwen3-32b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "weights": "awq-int4"}
    with pytest.raises(EngineCannotExpress) as exc:
        export_plan(plan, engine)
    assert "Qwen/Qwen3-32B-AWQ" in str(exc.value)
    if engine != "trtllm":  # trtllm-serve reads AWQ from a checkpoint's ModelOpt config only
        out = export_plan({**plan, "checkpoint": "Qwen/Qwen3-32B-AWQ"}, engine)
        assert "awq" in _value(out.argv[0], "--quantization")


@pytest.mark.parametrize(("command", "want"), [
    ("vllm serve Qwen/Qwen3-32B -tp 2", True),
    ("vllm serve Qwen/Qwen3-32B -tp 2 --enable-prefix-caching", True),
    ("vllm serve Qwen/Qwen3-32B -tp 2 --no-enable-prefix-caching", False),
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 2", True),
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-32B --tp 2 --disable-radix-cache", False),
])
def test_import_reads_the_engines_prefix_caching_default(command: str, want: bool) -> None:
    """Before: a vLLM V1 command without the flag imported with prefix_caching unset, though V1 caches prefixes
    by default; a round trip keeps the setting."""
    imported = import_command(command)
    assert imported.plan["prefix_caching"] == {"enabled": want}
    engine = imported.engine
    back = import_command(export_plan(imported.plan, engine).command).plan
    assert back["prefix_caching"] == {"enabled": want}


def test_import_deployment_asks_only_for_what_was_not_given() -> None:
    notes = import_deployment("vllm serve Qwen/Qwen3-32B -tp 2", workload={"concurrency": 64}).notes
    said = [n for n in notes if n.startswith("checked at")]
    assert said and "pass objective" in said[0] and "workload" not in said[0]
    notes = import_deployment("vllm serve Qwen/Qwen3-32B -tp 2", objective="throughput").notes
    assert any("pass workload to" in n for n in notes)
    both = import_deployment("vllm serve Qwen/Qwen3-32B -tp 2", workload={"concurrency": 64}, objective="latency")
    assert not any(n.startswith("checked at") for n in both.notes)


def test_sglang_overlap_flag_follows_what_the_estimate_priced() -> None:
    """Before: a note said 50% of the EP all-to-all was hidden while the estimate (generic profile) hid none.  With
    EP inside the TP group no all-to-all is priced, so no overlap flag is written, and a plan priced on another
    profile says so."""
    r1 = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
          "workload": {"concurrency": 16}}
    generic = export_plan(r1, "sglang")
    own = export_plan({**r1, "engine": "sglang"}, "sglang")
    assert "--enable-two-batch-overlap" not in generic.command + own.command
    assert any("priced on engine profile generic" in n for n in generic.notes)
    assert not any("priced on engine profile" in n for n in own.notes)
