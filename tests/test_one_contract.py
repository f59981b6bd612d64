"""Issue 40 item 2, one contract: a default estimate answer carries one served set of TTFT, TPOT and throughput
(the outside agent read 988 ms beside serving.ttft_ms 108 ms, and three throughputs, in one answer); one name ->
plan resolution prices a quantized checkpoint's repo id the same way in every tool; an export of a plan that names
no engine says so."""

from __future__ import annotations

import math
from typing import Any

import pytest

from server.responses import shape_estimate, shape_search
from tools import estimate_performance, import_deployment, search_strategies, validate_dag
from tools.core.errors import PdagInputError
from tools.core.formats import format_of_checkpoint
from tools.core.memory import memory_report
from tools.core.models import preset_index
from tools.core.plan import parse_plan
from tools.core.quantization import storage
from tools.engines.launch import export_plan

H100 = {"gpu": "h100-sxm", "num_gpus": 8}
PLANS = {
    "dense at 64 clients": {"model": "qwen3-32b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                            "parallel": {"tp": 2}, "workload": {"concurrency": 64, "input_len": 2048,
                                                                "output_len": 256}},
    "prefix caching": {"model": "qwen3-32b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2},
                       "workload": {"concurrency": 32, "input_len": 2048, "output_len": 128},
                       "prefix_caching": {"shared_prefix_len": 1434}, "engine": "vllm"},
    "moe, dp": {"model": "mixtral-8x7b", "hardware": H100, "parallel": {"dp": 2, "tp": 4, "ep": 4},
                "workload": {"concurrency": 48, "input_len": 1024, "output_len": 128}, "engine": "sglang"},
    "speculative": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
                    "workload": {"concurrency": 8, "input_len": 1024, "output_len": 128},
                    "speculative": {"method": "eagle3", "num_draft_tokens": 3}},
    "disaggregated": {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 16},
                      "parallel": {"tp": 8}, "options": {"disaggregated": True},
                      "workload": {"concurrency": 16, "input_len": 4096, "output_len": 128}},
}


def _named(data: Any, word: str, where: str = "") -> list[tuple[str, float]]:
    """Every number in the answer under a key that names ``word`` (at any depth), with its path; a feature's
    counterfactual (``..._without_ms``, ``..._without``) states its own condition and is left out."""
    out: list[tuple[str, float]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            path = f"{where}.{k}" if where else k
            if "without" in k:
                continue
            if word in k and isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append((path, float(v)))
            elif word in k and isinstance(v, dict):  # a statistic block: ttft_ms {mean, p50, p90, p99}
                out += [(f"{path}.{s}", float(x)) for s, x in v.items() if isinstance(x, (int, float))]
            else:
                out += _named(v, word, path)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _named(v, word, f"{where}[{i}]")
    return out


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_default_answer_has_one_ttft_tpot_and_throughput(name: str) -> None:
    est = estimate_performance(plan=PLANS[name])
    answer = shape_estimate(est, "summary").model_dump(exclude_none=True)
    served = est.served
    assert served is not None
    for word, stats in (("ttft", served.ttft_ms), ("tpot", served.tpot_ms)):
        allowed = {round(x, 6) for x in (stats.mean, stats.p50, stats.p90, stats.p99)}
        found = _named(answer, word)
        assert found, word
        other = [(p, v) for p, v in found if not any(math.isclose(v, a, rel_tol=1e-3) for a in allowed)]
        assert not other, f"{word} figures that are not the served run's: {other}"
    rates = _named(answer, "output_tokens_per_s")
    thr = answer["throughput"]["output_tokens_per_s"]
    off = [(p, v) for p, v in rates if "per_gpu" not in p and "per_user" not in p
           and not math.isclose(v, thr, rel_tol=1e-3)]
    assert not off, f"throughputs other than the served {thr}: {off}"
    assert answer["throughput"]["basis"] == f"served at {served.load}"
    # the static and analytic figures are still there on request, under names that say what they are
    full = shape_estimate(est, "full").model_dump(exclude_none=True)
    assert "static_batch_throughput" in full and "static_batch_throughput" not in answer
    assert ("steady_state_estimate" in full) == (not est.pools)
    assert "steady_state_estimate" not in answer


def test_the_answer_names_the_scheduler_it_simulated() -> None:
    bare = estimate_performance(plan=PLANS["dense at 64 clients"])
    assert bare.scheduler.startswith(f"{bare.served.engine}: the plan names no engine")  # type: ignore[union-attr]
    named = estimate_performance(plan=PLANS["moe, dp"])
    assert named.scheduler == "sglang"


QUANTIZED = sorted((pid, alias) for pid, entry in preset_index().items() for alias in entry.get("aliases", ())
                   if format_of_checkpoint(alias))


@pytest.mark.parametrize(("preset", "repo"), QUANTIZED)
def test_a_quantized_repo_id_is_priced_as_its_checkpoint_everywhere(preset: str, repo: str) -> None:
    """The repo id as plan.model, the preset with that checkpoint, and the command import reads: one storage
    format and one weight footprint (Llama-4-Maverick-...-FP8 was bf16 in validate and search, fp8 in import)."""
    read = import_deployment(f"vllm serve {repo} --tensor-parallel-size 8", gpu="b200").plan
    imported = parse_plan(read)
    layout = {k: v for k, v in read.items() if k not in ("model", "checkpoint", "weights")}  # same degrees, options
    by_name = parse_plan({**layout, "model": repo})
    by_checkpoint = parse_plan({**layout, "model": preset, "checkpoint": repo})
    formats = {storage(p) for p in (by_name, by_checkpoint, imported)}
    assert formats == {storage(by_checkpoint)} and storage(by_name) != "bf16"
    weights = {memory_report(p).weights_bytes for p in (by_name, by_checkpoint, imported)}
    assert len(weights) == 1


def test_maverick_fp8_by_repo_id_fits_where_bf16_does_not() -> None:
    plan = {"model": "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8", "hardware": H100,
            "parallel": {"tp": 8, "ep": 8}, "workload": {"input_len": 1024, "output_len": 256, "concurrency": 32}}
    assert validate_dag(plan=plan).valid
    assert not validate_dag(plan={**plan, "model": "llama-4-maverick"}).valid  # the bf16 base repo needs 800 GB
    assert "Instruct-FP8" in export_plan(plan, "vllm").command  # the repo the plan names is the one served


def test_export_of_a_plan_that_names_no_engine_says_so() -> None:
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}
    with pytest.raises(PdagInputError) as err:
        export_plan(plan)
    assert err.value.field == "engine" and "names no engine" in err.value.problem
    assert all(e in err.value.allowed for e in ("vllm", "sglang", "trtllm"))
    assert export_plan({**plan, "engine": "sglang"}).engine == "sglang"  # a named engine is the default


def test_search_entries_say_which_figures_they_carry() -> None:
    """A served search's head carries estimate_performance's served figures and says so; without serving the
    figures are the static batch's, named so (search's ttft_ms was the whole batch's prefill, unlabelled)."""
    wl = {"input_len": 1024, "output_len": 128, "concurrency": 16}
    hw = {"gpu": "h100-sxm", "num_gpus": 2}
    served = search_strategies("llama-3.1-8b", hw, wl, "throughput", serving=True, top_k=2, disaggregated=False)
    best = served.top[0]
    est = estimate_performance(plan=best.plan)
    assert best.basis == f"served at {est.load}"
    assert best.ttft_ms == pytest.approx(est.ttft_ms, rel=1e-6)
    assert best.throughput_tokens_per_s == pytest.approx(est.throughput.output_tokens_per_s, rel=1e-6)
    assert all(e.rank is None for e in served.pareto)  # the front is not ranked (it said rank 0)
    note = shape_search(served, "summary").note or ""
    assert note and all(s[:1].isupper() for s in note.split(". ") if s), note  # sentences, not one run-on line
    stated = search_strategies("llama-3.1-8b", hw, wl, "throughput", top_k=2, disaggregated=False).top[0]
    assert stated.basis == best.basis  # a stated load is answered at that load unless serving=False
    static = search_strategies("llama-3.1-8b", hw, wl, "throughput", serving=False, top_k=2,
                               disaggregated=False).top[0]
    assert static.basis == "static batch"
    assert static.ttft_ms == pytest.approx(estimate_performance(plan=static.plan).prefill_latency_ms, rel=1e-6)


def test_without_a_simulation_the_rates_are_the_same_models_as_the_latencies() -> None:
    est = estimate_performance(plan=PLANS["dense at 64 clients"], simulate=False)
    sv = est.steady_state_estimate
    assert sv is not None and est.served is None
    assert (est.ttft_ms, est.tpot_ms) == (sv.ttft_ms, sv.tpot_ms)
    assert est.throughput.output_tokens_per_s == sv.output_tokens_per_s
    assert est.throughput.basis.startswith("steady-state estimate")
