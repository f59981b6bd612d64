"""The conformance corpus (issue 10): every published deployment imports, validates without error (each warning
explained in the entry), estimates, and exports to its own engine with the published layout, weights and
checkpoint.  Entries that wait for a pdag capability (``needs``) are strict expected failures, so they flip
to passing (and must then lose their mark) when the capability lands."""

from __future__ import annotations

import json

import pytest

from tools.engines.conformance import CORPUS_PATH, Corpus, layout_flags, load_corpus, run_entry

ENTRIES = load_corpus().entries


class WaitsForCapability(Exception):
    """The entry fails exactly where the capability it is marked with is missing (and nowhere else)."""


def _param(entry):
    marks = [pytest.mark.xfail(strict=True, raises=WaitsForCapability,
                               reason=f"needs {entry.needs}: {entry.needs_why}")] if entry.needs else []
    return pytest.param(entry, id=entry.id, marks=marks)


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
def test_published_deployment_round_trips(entry) -> None:
    verdict = run_entry(entry)
    if verdict.waiting:
        raise WaitsForCapability(verdict.detail)
    assert verdict.ok, f"{verdict.stage}: {verdict.detail}"


def test_the_corpus_is_wide_enough() -> None:
    """At least 40 deployments across dense and MoE models, the GPU generations and the three engines."""
    assert len(ENTRIES) >= 40
    assert len({e.id for e in ENTRIES}) == len(ENTRIES)
    assert {e.setting.gpu for e in ENTRIES} >= {"a100-80gb", "h100-sxm", "h200", "b200", "mi300x"}
    assert {e.engine for e in ENTRIES} == {"vllm", "sglang", "trtllm"}
    layouts = {k for e in ENTRIES for k, n in e.expected.parallel.items() if n > 1}
    assert layouts >= {"tp", "ep", "attn_dp"}
    assert any(e.expected.weights != "bf16" for e in ENTRIES)
    assert any(e.decode_command for e in ENTRIES)  # disaggregated prefill/decode pools
    assert any(e.expected.parallel.get("pp", 1) > 1 or e.setting.num_gpus > e.setting.gpus_per_node for e in ENTRIES)


def test_every_entry_is_cited_and_says_why_it_waits() -> None:
    for e in ENTRIES:
        assert e.source.startswith("https://") and e.where
        assert (e.needs is None) == (e.needs_why is None), e.id
        assert all(len(why) > 20 for why in e.warnings.values()), e.id


def test_the_committed_schema_is_generated_from_the_model() -> None:
    from tools.schemas import SCHEMA_DIR, render

    assert (SCHEMA_DIR / "conformance.schema.json").read_text(encoding="utf-8") == render("conformance")
    Corpus.model_validate(json.loads(CORPUS_PATH.read_text(encoding="utf-8")))


def test_a_wrong_expectation_is_caught() -> None:
    """The check can fail: the same command with another expected degree is refused at import."""
    entry = next(e for e in ENTRIES if e.id == "vllm-qwen3-coder-480b-8xh200-tp8-ep")
    wrong = entry.model_copy(update={"expected": entry.expected.model_copy(update={"parallel": {"tp": 8}})})
    verdict = run_entry(wrong)
    assert not verdict.ok and verdict.stage == "import" and '"parallel"' in verdict.detail


def test_waiting_covers_only_the_missing_capability() -> None:
    """An entry marked as needing quantization waits only while the weight format is all that differs."""
    entry = next(e for e in ENTRIES if e.id == "vllm-deepseek-r1-8xh200-tp8-ep")
    assert run_entry(entry).ok and not entry.needs  # passes since pdag reads checkpoint formats
    # a format pdag would not read yet: the weights are all that differs, so the entry waits
    marked = entry.model_copy(update={"needs": "quantization",
                                      "expected": entry.expected.model_copy(update={"weights": "nvfp4"})})
    assert run_entry(marked).waiting
    wrong = marked.model_copy(update={"expected": marked.expected.model_copy(update={"parallel": {"tp": 4}})})
    verdict = run_entry(wrong)
    assert not verdict.ok and not verdict.waiting


def test_layout_flags_fill_engine_defaults() -> None:
    a = layout_flags("vllm", "vllm serve openai/gpt-oss-120b --tensor_parallel_size 8")
    b = layout_flags("vllm", "vllm serve openai/gpt-oss-120b --tensor-parallel-size 8 --pipeline-parallel-size 1 "
                             "--dtype bfloat16")
    assert a == b and a["tp"] == "8" and a["expert_parallel"] == "off"
    s = layout_flags("sglang", "python -m sglang.launch_server --model-path x/y --tp 8 --dp 8 --enable-dp-attention")
    assert s["dp_attention"] == "on" and s["ep"] == "1"


@pytest.mark.slow  # imports, validates and estimates the whole recipe corpus: ~12 s; .ci/run runs it
def test_cli_prints_the_table(capsys) -> None:
    from tools.cli import main

    code = main(["conformance"])
    out = capsys.readouterr().out
    assert code == 0
    assert "qwen3-coder-480b-a35b" in out and "8x h200" in out and "gpt-oss-120b" in out
    assert f"{sum(1 for e in ENTRIES if not e.needs)} of {len(ENTRIES)} pass" in out


def test_the_comparison_fills_engine_defaults() -> None:
    """A flag that restates what the engine does anyway compares equal to its absence, and only then."""
    sgl = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --tp 8"
    assert layout_flags("sglang", sgl + " --enable-dp-attention") == layout_flags("sglang", sgl)  # --dp 1: plain TP
    assert layout_flags("sglang", sgl + " --dp 8 --enable-dp-attention")["dp_attention"] == "on"
    # --quantization naming the format the checkpoint stores is what the engine reads from it anyway
    assert layout_flags("sglang", sgl + " --quantization fp8", stored="fp8") == layout_flags("sglang", sgl,
                                                                                             stored="fp8")
    assert layout_flags("sglang", sgl + " --quantization fp8") != layout_flags("sglang", sgl)
    assert layout_flags("sglang", sgl + " --enable-ep-moe")["ep"] == "8"
    vllm = "vllm serve nvidia/Llama-3.3-70B-Instruct-FP8 --config config.yaml -tp 4"
    assert layout_flags("vllm", vllm, {"kv-cache-dtype": "fp8"})["kv_cache_dtype"] == "fp8"
    assert layout_flags("vllm", vllm + " --kv-cache-dtype auto", {"kv-cache-dtype": "fp8"})["kv_cache_dtype"] == "auto"


def test_a_wrong_kv_cache_expectation_is_caught() -> None:
    """The imported KV cache dtype is compared: an entry whose config YAML sets fp8 fails without it."""
    entry = next(e for e in ENTRIES if e.engine == "vllm" and e.engine_config and e.expected.kv_dtype == "fp8")
    assert run_entry(entry).ok
    verdict = run_entry(entry.model_copy(update={"engine_config": None}))
    assert not verdict.ok and verdict.stage == "import" and '"kv_dtype"' in verdict.detail


def test_replicas_are_compared_as_servers_whatever_form_the_export_takes() -> None:
    """A dense deployment of N single-GPU servers exports as one server with the engine's DP flag, a MoE one as N
    servers: both compare equal to the published replicas, and a wrong replica count does not."""
    dense = next(e for e in ENTRIES
                 if e.replicas > 1 and e.decode_command is None and e.expected.model.startswith("llama"))
    assert run_entry(dense).ok
    wrong = dense.model_copy(update={"replicas": dense.replicas + 1})
    assert not run_entry(wrong).ok
    pools = next(e for e in ENTRIES if e.decode_engine_config is not None)
    assert run_entry(pools).ok
    same = pools.model_copy(update={"decode_engine_config": None})
    verdict = run_entry(same)
    assert not verdict.ok and verdict.stage == "import"
