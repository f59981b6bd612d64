"""Speculative decoding and prefix caching: plan fields, validation, memory, pricing, engine import/export."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.core.errors import PdagInputError
from tools.core.plan import parse_plan

R1 = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
      "dtype": "fp8", "engine": "vllm"}


def test_old_plans_parse_without_the_new_fields():
    p = parse_plan(R1)
    assert p.speculative is None and p.prefix_caching is None and p.prefix_hit_fraction == 0.0


def test_fields_parse_and_state_their_hit_fraction():
    p = parse_plan({**R1, "speculative": {"method": "mtp", "num_draft_tokens": 3},
                    "prefix_caching": {"shared_prefix_len": 512}, "workload": {"input_len": 1024}})
    assert p.speculative.num_draft_tokens == 3 and p.prefix_hit_fraction == 0.5
    assert parse_plan({**R1, "prefix_caching": {"enabled": False, "hit_rate": 0.9}}).prefix_hit_fraction == 0.0


@pytest.mark.parametrize("bad", [
    {"speculative": {"method": "medusa"}},
    {"speculative": {"method": "mtp", "acceptance_rate": 0.8, "mean_accepted_tokens": 1.8}},
    {"speculative": {"method": "mtp", "num_draft_tokens": 1, "mean_accepted_tokens": 2.5}},
    # a tree of 15 nodes 3 deep accepts one path: at most 3 drafts and the bonus token
    {"speculative": {"method": "eagle", "num_draft_tokens": 15, "num_steps": 3, "topk": 4,
                     "mean_accepted_tokens": 5}},
    {"speculative": {"method": "eagle", "draft_tp": 1}},
    {"prefix_caching": {"shared_prefix_len": 4096}, "workload": {"input_len": 1024}},
    {"prefix_caching": {"shared_prefix_len": 10, "hit_rate": 0.5}},
])
def test_inconsistent_fields_are_input_errors(bad):
    with pytest.raises(PdagInputError):
        parse_plan({**R1, **bad})


def _rules(plan: dict) -> set[str]:
    from tools.rules.validate import validate_dag

    return {v.rule_id for v in validate_dag(plan=plan).violations if v.severity == "error"}


def test_engine_errors_name_the_engine():
    from tools.rules.validate import validate_dag

    found = validate_dag(plan={**R1, "engine": "trtllm", "speculative": {"method": "eagle"}}).violations
    msg = next(v.message for v in found if v.rule_id == "SPEC-ENGINE-SUPPORT")
    assert "TensorRT-LLM" in msg and "eagle" in msg


def test_vllm_allows_a_draft_on_one_gpu_sglang_does_not():
    llama = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
             "speculative": {"method": "draft_model", "draft_model": "llama-3.1-8b", "draft_tp": 1}}
    assert "SPEC-ENGINE-SUPPORT" not in _rules({**llama, "engine": "vllm"})
    assert "SPEC-ENGINE-SUPPORT" in _rules({**llama, "engine": "sglang"})


def test_draft_memory_is_counted_per_gpu():
    from tools.core.memory import memory_report

    plain = memory_report(parse_plan(R1))
    mtp = memory_report(parse_plan({**R1, "speculative": {"method": "mtp"}}))
    ngram = memory_report(parse_plan({**R1, "speculative": {"method": "ngram"}}))
    # one MTP block on 8 GPUs: its 1/8 share of ~11.5 B parameters (fp8 experts), about 1-2 GB per GPU
    assert 1e9 < mtp.weights_bytes - plain.weights_bytes < 2.5e9
    assert mtp.kv_cache_bytes > plain.kv_cache_bytes and mtp.max_batch_size_that_fits < plain.max_batch_size_that_fits
    assert ngram.weights_bytes == plain.weights_bytes


def test_speculative_step_arithmetic():
    from tools.core.speculative import tokens_per_step
    from tools.estimate.speculative import speculative_step

    assert tokens_per_step(0.8, 0.8, 2) == pytest.approx(1 + 0.8 + 0.64)
    st = speculative_step(10.0, 12.0, 0.05, 2, 2.0)
    assert st.step_ms == pytest.approx(13.0) and st.ms_per_token == pytest.approx(6.5)
    assert st.cost_multiplier == pytest.approx(1.3)


def test_published_defaults_reproduce_their_measurements():
    from tools.core.speculative import spec_data, tokens_per_step

    m = spec_data()["methods"]

    def length(method: str, k: int) -> float:
        return tokens_per_step(m[method]["first_acceptance"], m[method]["later_acceptance"], k)

    assert length("mtp", 7) == pytest.approx(3.20, abs=.03)
    assert length("eagle", 2) == pytest.approx(1.89, abs=.02) and length("eagle", 4) == pytest.approx(2.08, abs=.02)
    assert length("eagle3", 7) == pytest.approx(3.53, abs=.05)
    assert length("ngram", 10) == pytest.approx(1.73, abs=.02)  # Spec-Bench's PLD proposes up to 10 tokens


TREE_BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "engine": "sglang",
             "workload": {"input_len": 512, "output_len": 128, "batch_size": 8}}


def test_a_draft_tree_accepts_one_path_and_drafts_topk_tokens_per_pass():
    """SGLang's EAGLE tree (--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16)
    verifies 16 tokens per sequence, drafts 4 per sequence in each of 3 passes, and accepts at most 3 drafts."""
    from tools import estimate_performance
    from tools.core.plan import Speculative
    from tools.core.speculative import acceptance, draft_depth, spec_data, tokens_per_step

    chain = {"method": "eagle", "num_draft_tokens": 3, "draft_checkpoint": "org/head"}
    tree = {**chain, "num_draft_tokens": 15, "num_steps": 3, "topk": 4}
    d = spec_data()["methods"]["eagle"]
    assert draft_depth(Speculative(**tree)) == 3
    assert acceptance(Speculative(**tree)).tokens_per_step == pytest.approx(
        tokens_per_step(d["first_acceptance"], d["later_acceptance"], 3))  # was a chain of 15 positions
    a = estimate_performance(plan={**TREE_BASE, "speculative": chain}).speculative.static
    b = estimate_performance(plan={**TREE_BASE, "speculative": tree}).speculative.static
    assert b.verify_ms > a.verify_ms  # 16 tokens per sequence verified against 4
    assert b.draft_ms > a.draft_ms  # the same 3 passes, each over 4 branches per sequence
    assert b.plain_step_ms == a.plain_step_ms


def test_an_sla_search_prices_the_speculative_step():
    """best_under_sla read a field the speculative step does not have (tpot_ms): every speculative plan with an
    SLA raised AttributeError."""
    from tools import estimate_performance

    plan = {**TREE_BASE, "speculative": {"method": "eagle", "num_draft_tokens": 3, "draft_checkpoint": "org/head"}}
    est = estimate_performance(plan=plan, sla={"max_tpot_ms": 50})
    assert est.best_under_sla is not None and est.best_under_sla.tpot_ms <= 50


def test_mtp_lowers_tpot_and_reports_both():
    from tools import estimate_performance

    plan = {**R1, "workload": {"input_len": 1024, "output_len": 1024, "batch_size": 4}}
    plain = estimate_performance(plan=plan)
    mtp = estimate_performance(plan={**plan, "speculative": {"method": "mtp", "num_draft_tokens": 1}})
    sp = mtp.speculative
    assert sp is not None and plain.speculative is None
    # both served figures come from simulations at the same load (was: the continuous-batching model's)
    assert sp.tpot_without_ms == pytest.approx(plain.tpot_ms) and sp.tpot_with_ms == pytest.approx(mtp.tpot_ms)
    assert sp.tpot_with_ms < 0.8 * sp.tpot_without_ms
    assert 1.0 < sp.static.cost_multiplier < sp.tokens_per_step  # more work per step, fewer steps per token
    assert mtp.decode_latency_ms_per_token < plain.decode_latency_ms_per_token
    assert any("k + 1 = 2" in a for a in mtp.assumptions)


def test_perfect_acceptance_bounds_the_speedup():
    from tools import estimate_performance

    plan = {**R1, "speculative": {"method": "ngram", "num_draft_tokens": 3, "mean_accepted_tokens": 4}}
    sp = estimate_performance(plan=plan).speculative
    assert sp.tpot_with_ms == pytest.approx(sp.static.verify_ms / 4, rel=0.3)
    assert sp.tpot_with_ms > sp.tpot_without_ms / 4  # verifying four tokens costs more than decoding one


def test_prefix_hits_cut_ttft_and_a_shared_prefix_raises_capacity():
    from tools import estimate_performance

    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
            "workload": {"input_len": 8192, "output_len": 256, "batch_size": 256}}
    plain = estimate_performance(plan=plan)
    cached = estimate_performance(plan={**plan, "prefix_caching": {"shared_prefix_len": 6144}})
    pf = cached.prefix_caching
    assert pf.ttft_with_ms < pf.ttft_without_ms == pytest.approx(plain.ttft_ms)  # the served plain plan, simulated
    assert pf.running_with > pf.running_without
    assert cached.prefill_latency_ms < plain.prefill_latency_ms


# Published launch commands (each with where it was published); each must import, validate, estimate and export
# back with the feature intact.
PUBLISHED = [
    # vLLM speculators tutorial, https://docs.vllm.ai/projects/speculators/en/stable/user_guide/tutorials/serve_vllm/
    ("vllm serve Qwen/Qwen3-8B -tp 1 --speculative-config '{\"model\": \"RedHatAI/Qwen3-8B-speculator.eagle3\", "
     "\"num_speculative_tokens\": 3, \"method\": \"eagle3\"}'", None, "h100-sxm",
     {"method": "eagle3", "num_draft_tokens": 3, "draft_checkpoint": "RedHatAI/Qwen3-8B-speculator.eagle3"},
     {"enabled": True}),  # vLLM V1 caches prefixes unless told not to
    # issue 43 (vLLM's MTP form, https://docs.vllm.ai/en/latest/features/speculative_decoding/mtp/)
    ("vllm serve deepseek-ai/DeepSeek-R1 -tp 8 --speculative-config '{\"method\": \"deepseek_mtp\", "
     "\"num_speculative_tokens\": 1}'", None, "h200", {"method": "mtp", "num_draft_tokens": 1}, {"enabled": True}),
    # SGLang EAGLE-2 form of https://docs.sglang.ai/advanced_features/speculative_decoding.html (values of issue 43)
    ("python3 -m sglang.launch_server --model meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE "
     "--speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-Instruct-8B --speculative-num-steps 3 "
     "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4", None, "h100-sxm",
     {"method": "eagle", "num_draft_tokens": 3, "topk": 1, "num_steps": 3,
      "draft_checkpoint": "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B"}, {"enabled": True}),  # the radix cache: on
    # TensorRT-LLM DeepSeek-R1 MTP, https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html
    ("trtllm-serve deepseek-ai/DeepSeek-R1 --tp_size 8 --ep_size 8 --config extra.yml",
     {"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3},
      "kv_cache_config": {"enable_block_reuse": False}}, "h200",
     {"method": "mtp", "num_draft_tokens": 3}, {"enabled": False}),
    # vLLM automatic prefix caching, https://docs.vllm.ai/en/latest/features/automatic_prefix_caching/
    ("vllm serve meta-llama/Llama-3.1-8B-Instruct --enable-prefix-caching", None, "h100-sxm", None, {"enabled": True}),
    # SGLang server arguments, https://docs.sglang.ai/advanced_features/server_arguments.html
    ("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disable-radix-cache", None,
     "h100-sxm", None, {"enabled": False}),
]


@pytest.mark.parametrize("command,config,gpu,spec,cache", PUBLISHED, ids=lambda x: str(x)[:40])
def test_published_commands_round_trip(command, config, gpu, spec, cache):
    from tools import estimate_performance
    from tools.engines.launch import export_plan, import_command
    from tools.rules.validate import validate_dag

    imported = import_command(command, gpu=gpu, engine_config=config)
    plan = imported.plan
    assert plan.get("speculative") == spec and plan.get("prefix_caching") == cache
    assert not [n for n in imported.notes if "ignored" in n and "spec" in n]
    assert validate_dag(plan=plan).valid
    est = estimate_performance(plan=plan)
    assert (est.speculative is not None) == (spec is not None)
    out = export_plan(plan, force=True)  # the round trip of the flags, even where validation names the engine
    again = import_command(out.command, gpu=gpu, engine_config=out.config).plan
    assert again.get("speculative") == spec and again.get("prefix_caching") == cache


@given(method=st.sampled_from(["mtp", "eagle", "eagle3", "ngram"]), k=st.integers(1, 8),
       engine=st.sampled_from(["vllm", "sglang", "trtllm"]), cache=st.sampled_from([None, True, False]))
@settings(max_examples=25, deadline=None)
def test_any_speculative_setting_exports_and_imports_back(method, k, engine, cache):
    from tools.engines.launch import export_plan, import_command

    spec = {"method": method, "num_draft_tokens": k}
    if method.startswith("eagle"):
        spec["draft_checkpoint"] = "org/head"
    plan = {**R1, "engine": engine, "checkpoint": "deepseek-ai/DeepSeek-V3", "speculative": spec}
    if cache is not None:
        plan["prefix_caching"] = {"enabled": cache}
    out = export_plan(plan, force=True)  # the flags round-trip even where validation names the engine
    again = import_command(out.command, gpu="h200", engine_config=out.config).plan
    got = {key: v for key, v in again["speculative"].items() if key not in ("topk", "num_steps")}
    assert got == spec
    if cache is not None and not (engine == "sglang" and cache):  # SGLang's radix cache is on unless disabled
        assert again["prefix_caching"] == {"enabled": cache}


def test_a_mangled_speculative_config_is_a_note_not_a_failure():
    from tools.engines.launch import import_command

    r = import_command("vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config {method:eagle3}")
    assert "speculative" not in r.plan and any("not a JSON object" in n for n in r.notes)


SGLANG_EAGLE = ("python3 -m sglang.launch_server --model-path {model} --tp 8 --speculative-algorithm EAGLE "
                "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4{draft}")


@pytest.mark.parametrize(("model", "draft", "method"), [
    ("deepseek-ai/DeepSeek-V3", "", "mtp"),  # SGLang's DeepSeek MTP recipe: EAGLE over the checkpoint's NextN layers
    ("deepseek-ai/DeepSeek-R1", " --speculative-draft-model-path lmsys/DeepSeek-R1-NextN", "mtp"),
    ("meta-llama/Llama-3.1-8B-Instruct", " --speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-Instruct-8B",
     "eagle"),
])
def test_sglang_eagle_on_a_checkpoint_with_mtp_layers_is_its_mtp(model: str, draft: str, method: str) -> None:
    """An outside agent imported SGLang's DeepSeek MTP command and got a generic EAGLE head priced with a Llama
    head's acceptance (2.02 tokens per step against MTP's 2.72)."""
    from tools import import_command

    out = import_command(SGLANG_EAGLE.format(model=model, draft=draft), gpu="h200")
    assert out.plan["speculative"]["method"] == method
    assert ("draft_checkpoint" in out.plan["speculative"]) == (method == "eagle")
