"""search_strategies: space, pruning by rule id, ranking, determinism, SLOs, results that validate."""

from __future__ import annotations

import pytest

from tools import estimate_performance, search_strategies
from tools.core.errors import PdagInputError

H100_8 = {"gpu": "h100-sxm", "num_gpus": 8}


@pytest.fixture(scope="module")
def llama_latency():
    return search_strategies("llama-3.1-70b", H100_8)


def test_llama_70b_latency_prefers_tp8(llama_latency) -> None:
    best = llama_latency.top[0]
    assert best.plan["parallel"] == {"dp": 1, "pp": 1, "tp": 8, "ep": 1, "sp": 1}
    assert best.rank == 1 and best.reason
    e2e = [p.e2e_ms for p in llama_latency.top]
    assert e2e == sorted(e2e)


def test_rejections_use_catalog_ids(llama_latency) -> None:
    import json
    from pathlib import Path

    catalog = json.loads((Path(__file__).resolve().parent.parent / "knowledge/rules/catalog.json").read_text())
    ids = {r["id"] for r in (catalog["rules"] if isinstance(catalog, dict) else catalog)}
    assert set(llama_latency.rejected) <= ids
    assert llama_latency.rejected["EP-MOE-ONLY"] > 0  # dense model: every ep > 1 alternative
    assert llama_latency.rejected["GPU-EXCEEDS-CLUSTER"] > 0
    assert set(llama_latency.rejected_examples) == set(llama_latency.rejected)
    assert llama_latency.considered >= sum(llama_latency.rejected.values()) + len(llama_latency.top)


def test_deterministic() -> None:
    a = search_strategies("mixtral-8x7b", {"gpu": "h100-sxm", "num_gpus": 4}, objective="throughput")
    b = search_strategies("mixtral-8x7b", {"gpu": "h100-sxm", "num_gpus": 4}, objective="throughput")
    assert a.model_dump_json() == b.model_dump_json()  # no timings in the body: byte-identical


def test_results_validate_and_fit(llama_latency) -> None:
    from tools.core.memory import memory_report
    from tools.core.plan import parse_plan

    for p in llama_latency.top + llama_latency.pareto:
        assert memory_report(parse_plan(p.plan)).fits
    try:
        from tools.rules.validate import validate_dag

        validate_dag(plan=llama_latency.top[0].plan)
    except ImportError:
        pytest.skip("validate_dag not available yet")
    r = search_strategies("mixtral-8x7b", {"gpu": "h100-sxm", "num_gpus": 8}, top_k=10)
    for p in llama_latency.top + llama_latency.pareto + r.top:
        result = validate_dag(plan=p.plan)
        errors = [v for v in result.violations if v.severity == "error"]
        assert result.valid, (p.label, errors)


def test_moe_plans_keep_ep_in_group_and_state_expert_tp() -> None:
    r = search_strategies("deepseek-v3", {"gpu": "h200", "num_gpus": 16}, dtype="fp8", top_k=10)
    assert r.top
    for p in r.top:
        pools = [p.plan["parallel"]]
        if p.kind == "disaggregated":
            pools.append(p.plan["phases"]["decode"])
        gpus = 0
        for par in pools:
            width = max(par.get("attn_dp", 1) * par["tp"], par["ep"])
            assert width <= 8 and 256 % par["ep"] == 0
            gpus += par["dp"] * par["pp"] * width
            if par["ep"] < width:
                assert p.plan["options"]["allow_expert_tp"] is True
            if par.get("attn_dp", 1) > 1:
                assert p.plan["options"]["allow_attention_dp"] is True and par["ep"] == width
        assert p.gpus_used == gpus <= 16
    assert "TP-WITHIN-NODE" in r.rejected


def test_throughput_searches_batch_and_fills_cluster() -> None:
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8}, objective="throughput")
    best = r.top[0]
    assert best.gpus_used == 8
    # without a latency SLO the batch is the largest that fits, not only the largest power of two below it
    mem = estimate_performance(plan=best.plan).memory
    assert mem.fits and best.batch_size == mem.max_batch_size_that_fits > 128
    tputs = [p.throughput_tokens_per_s for p in r.top]
    assert tputs == sorted(tputs, reverse=True)
    # Pareto: per-user speed falls while throughput per GPU rises.
    speeds = [p.user_tokens_per_s for p in r.pareto]
    per_gpu = [p.throughput_per_gpu for p in r.pareto]
    assert speeds == sorted(speeds, reverse=True) and per_gpu == sorted(per_gpu)


def test_batch_under_an_slo_is_refined_between_powers_of_two() -> None:
    """Under a TPOT target the best batch is the largest that meets it (to within 1/32), not the power of two
    below it: one more thirty-second of the batch misses the target, and the throughput beats the power of two."""
    slo = {"max_tpot_ms": 30}
    r = search_strategies("llama-3.1-70b", {"gpu": "h100-sxm", "num_gpus": 8}, objective="throughput", slo=slo,
                          dtype="fp8", disaggregated=False)
    best = r.top[0]
    assert best.tpot_ms <= 30 and best.batch_size & (best.batch_size - 1) != 0
    over = {**best.plan, "workload": {**best.plan["workload"],
                                      "batch_size": best.batch_size + max(1, best.batch_size // 32)}}
    assert estimate_performance(plan=over).decode_latency_ms_per_token > 30
    low = 1 << (best.batch_size.bit_length() - 1)
    floor = {**best.plan, "workload": {**best.plan["workload"], "batch_size": low}}
    assert estimate_performance(plan=floor).static_batch_throughput.output_tokens_per_s < best.throughput_tokens_per_s


def test_fixed_batch_is_respected() -> None:
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 2}, objective="throughput",
                          workload={"batch_size": 16})
    assert {p.batch_size for p in r.top} == {16}


def test_tpot_slo_limits_batch() -> None:
    free = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 1}, objective="throughput")
    limit = free.top[0].tpot_ms / 2
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 1}, objective="throughput",
                          slo={"max_tpot_ms": limit})
    assert r.top[0].meets_slo and r.top[0].tpot_ms <= limit
    assert r.top[0].batch_size < free.top[0].batch_size


def test_min_throughput_slo_adds_replicas_for_latency() -> None:
    one = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8})
    need = one.top[0].throughput_tokens_per_s * 3
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8},
                          slo={"min_throughput_tokens_per_s": need})
    assert r.top[0].meets_slo and r.top[0].plan["parallel"]["dp"] >= 3


def test_nothing_fits_reports_memory() -> None:
    r = search_strategies("llama-3.1-405b", {"gpu": "h100-sxm", "num_gpus": 2})
    assert not r.top and r.rejected.get("MEM-FITS", 0) > 0 and r.notes


def test_long_prompt_considers_prefill_sp() -> None:
    """Prefill SP is searched, but no engine launches it: listed only on request, labelled (issue 41)."""
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8},
                          workload={"input_len": 32768, "output_len": 64}, top_k=20, unlaunchable=True)
    sp = [p for p in r.top if (p.plan.get("phases") or {}).get("prefill", {}).get("sp", 1) > 1]
    assert sp and all(not p.launchable and p.label.endswith("(no engine launches it)") for p in sp)
    assert "SP-LONG-CONTEXT-ONLY" not in r.rejected


@pytest.mark.parametrize("kwargs,field", [
    ({"objective": "cheapest"}, "objective"),
    ({"hardware": {"gpu": "h100-sxm", "num_gpus": 0}}, "hardware.num_gpus"),
    ({"slo": {"max_tpot_ms": -1}}, "slo.max_tpot_ms"),
    ({"top_k": 0}, "top_k"),
])
def test_bad_input(kwargs, field) -> None:
    args = {"model": "llama-3.1-8b", "hardware": H100_8, **kwargs}
    with pytest.raises(PdagInputError) as exc:
        search_strategies(**args)
    assert exc.value.field == field


@pytest.fixture(scope="module")
def dsv3_throughput():
    return search_strategies("deepseek-v3", {"gpu": "h200", "num_gpus": 16}, dtype="fp8", objective="throughput",
                             top_k=10)


def test_moe_search_enumerates_attention_dp_with_opt_in(dsv3_throughput) -> None:
    adp = [p for p in dsv3_throughput.top if p.plan["parallel"].get("attn_dp", 1) > 1]
    assert adp, [p.label for p in dsv3_throughput.top]
    for p in adp:
        par = p.plan["parallel"]
        assert p.plan["options"]["allow_attention_dp"] is True
        assert par["ep"] == par["attn_dp"] * par["tp"] or p.plan["options"].get("allow_expert_tp")
        assert "attention-DP" in p.reason
    assert dsv3_throughput.rejected.get("ADP-EP-SPANS-GROUPS", 0) > 0
    dense = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8})
    assert dense.rejected.get("ADP-MOE-ONLY", 0) > 0
    assert not any(p.plan["parallel"].get("attn_dp", 1) > 1 for p in dense.top)


def test_attention_dp_groups_may_fill_part_of_an_nvl72_rack() -> None:
    """On 48 GPUs of a GB200 NVL72 (one 72-GPU NVLink domain) an attention-DP group of 16 TP1 ranks needs no
    node of its own: only its TP group (one GPU) must sit in a node, as the validator says.  The search keeps such
    layouts (it rejected every width that does not divide 72) and prices one above the ADP8 EP8 it was left with."""
    from tools import validate_dag

    r = search_strategies("deepseek-v3", {"gpu": "gb200", "num_gpus": 48, "gpus_per_node": 72},
                          {"input_len": 2000, "output_len": 1000}, objective="throughput", dtype="fp8", top_k=3)
    best = r.top[0]
    assert best.plan["parallel"].get("attn_dp", 1) >= 16, [p.label for p in r.top]
    assert not [v for v in validate_dag(best.plan).violations if v.severity == "error"]
    assert any(p.plan["parallel"].get("attn_dp") == 8 for p in r.top[1:])


def test_search_compares_aggregated_and_disaggregated(dsv3_throughput) -> None:
    r = dsv3_throughput
    agg, dis = r.best_aggregated, r.best_disaggregated
    assert agg is not None and dis is not None and r.comparison
    assert agg.kind == "aggregated" and dis.kind == "disaggregated"
    assert r.comparison.split()[0] in ("aggregated", "disaggregated")
    assert dis.plan["options"]["disaggregated"] is True and dis.pools and dis.pool_balance
    assert dis.gpus_used == sum(v["gpus"] for v in dis.pools.values()) <= 16
    best = r.top[0]
    assert best.kind == r.comparison.split()[0]
    # the disaggregated figures are estimate_performance's
    from tools import estimate_performance

    e = estimate_performance(dis.plan)
    assert e.static_batch_throughput.output_tokens_per_s == pytest.approx(dis.throughput_tokens_per_s, rel=1e-6)
    assert e.prefill_latency_ms == pytest.approx(dis.ttft_ms, rel=1e-6)


def test_new_kinds_validate(dsv3_throughput) -> None:
    from tools.rules.validate import validate_dag

    picks = [p for p in dsv3_throughput.top if p.kind == "disaggregated" or p.plan["parallel"].get("attn_dp", 1) > 1]
    if dsv3_throughput.best_disaggregated is not None:
        picks.append(dsv3_throughput.best_disaggregated)
    assert picks
    for p in picks[:4]:
        result = validate_dag(plan=p.plan)
        assert result.valid, (p.label, [v for v in result.violations if v.severity == "error"])


def test_single_gpu_has_no_disaggregated_plan() -> None:
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 1})
    assert r.best_disaggregated is None and r.comparison is None
    off = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8}, disaggregated=False)
    assert off.best_disaggregated is None and all(p.kind == "aggregated" for p in off.top)


def test_bad_model_or_gpu_names_the_search_argument():
    with pytest.raises(PdagInputError) as info:
        search_strategies(model="llama-70b", hardware={"gpu": "h100-sxm", "num_gpus": 8})
    assert info.value.field == "model" and "llama-3.1-70b" in str(info.value)
    with pytest.raises(PdagInputError) as info:
        search_strategies(model="llama-3.1-70b", hardware={"gpu": "h100", "num_gpus": 8})
    assert info.value.field == "hardware.gpu"


def test_search_prices_the_engine_options_it_is_given() -> None:
    """A small step budget cuts an 8k prompt into many chunks: under a TTFT target the serving search then holds
    fewer requests in flight, and every plan it returns carries the budget."""
    args = dict(model="llama-3.1-70b", hardware={"gpu": "h200", "num_gpus": 8}, objective="throughput",
                workload={"input_len": 8000, "output_len": 1000}, slo={"max_tpot_ms": 40, "max_ttft_ms": 1500},
                top_k=5, engine="vllm", serving=True, disaggregated=False)
    wide = next(p for p in search_strategies(**args).top if p.label == "TP8")
    narrow = next(p for p in search_strategies(**args, engine_options={"max_batched_tokens": 1024}).top
                  if p.label == "TP8")
    assert narrow.plan["engine_options"] == {"max_batched_tokens": 1024} and "engine_options" not in wide.plan
    assert narrow.batch_size < wide.batch_size and narrow.ttft_ms <= 1500 and wide.ttft_ms <= 1500


# ------------------------------------------------------------------ a total in flight (workload.concurrency)
A100_8 = {"gpu": "a100-80gb", "num_gpus": 8}


@pytest.fixture(scope="module")
def mixtral_at_128():
    wl = {"input_len": 1024, "output_len": 256, "concurrency": 128}
    return search_strategies("mixtral-8x7b", A100_8, wl, "throughput", top_k=20)


def test_concurrency_is_the_deployments_total(mixtral_at_128) -> None:
    """Every plan is priced at the same 128 in flight, split over the replicas that hold them."""
    plans = mixtral_at_128.top + [p for p in (mixtral_at_128.best_disaggregated,) if p]
    assert any(p.plan["parallel"]["dp"] > 1 for p in plans if p.kind == "aggregated")
    for p in plans:
        replicas = p.plan["phases"]["decode"]["dp"] if p.kind == "disaggregated" else p.plan["parallel"]["dp"]
        assert p.batch_size == -(-128 // replicas), p.label
        assert p.in_flight == p.batch_size * replicas >= 128
        assert p.plan["workload"]["concurrency"] == 128 and p.plan["workload"]["batch_size"] == p.batch_size
        assert "128 in flight" in p.reason
    assert any("128 in flight in all" in n for n in mixtral_at_128.notes)


def test_a_total_changes_the_ranking_a_per_replica_batch_gave() -> None:
    """At 128 per replica, DP4 x TP2 serves 512 and wins on tokens/s; at 128 in all, one TP8 replica beats two
    TP4 replicas at 64 each (the comparison a user with 128 clients is asking for)."""
    per_replica = search_strategies("mixtral-8x7b", A100_8, {"input_len": 1024, "output_len": 256, "batch_size": 128},
                                    "throughput", top_k=20, disaggregated=False, allow_expert_tp=True)
    total = search_strategies("mixtral-8x7b", A100_8, {"input_len": 1024, "output_len": 256, "concurrency": 128},
                              "throughput", top_k=20, disaggregated=False, allow_expert_tp=True, serving=False)

    def rank(result, label):
        return next(p.rank for p in result.top if p.label == label)

    assert per_replica.top[0].plan["parallel"]["dp"] > 1
    assert rank(per_replica, "DP2 x TP4 (expert TP4)") < rank(per_replica, "TP8 (expert TP8)")
    assert rank(total, "TP8 (expert TP8)") < rank(total, "DP2 x TP4 (expert TP4)")
    dp2 = next(p for p in total.top if p.label == "DP2 x TP4 (expert TP4)")
    alone = estimate_performance(dp2.plan, simulate=False)
    assert alone.static_batch_throughput.output_tokens_per_s == pytest.approx(dp2.throughput_tokens_per_s, rel=0.01)


def test_a_total_beyond_memory_queues() -> None:
    r = search_strategies("llama-3.1-70b", {"gpu": "h100-sxm", "num_gpus": 4},
                          {"input_len": 8192, "output_len": 1024, "concurrency": 100_000}, "throughput",
                          disaggregated=False)
    best = r.top[0]
    assert best.in_flight < 100_000
    assert "the rest queue" in best.reason


def test_search_says_which_rejections_validate_only_warns_about() -> None:
    """TP 16 across two nodes was 'valid' in validate_dag and 'rejected' in search, with nothing saying why."""
    r = search_strategies("llama-3.1-405b", {"gpu": "h100-sxm", "num_gpus": 16})
    assert r.rejected.get("TP-WITHIN-NODE")
    note = next(n for n in r.notes if n.startswith("left out on rules validate_dag only warns about"))
    assert "TP-WITHIN-NODE" in note and "GPU-EXCEEDS-CLUSTER" not in note


def test_serving_search_ranks_by_the_figures_estimate_returns() -> None:
    """With serving on, the ranked plans carry the served TTFT/TPOT/throughput estimate_performance gives the
    same plan (agents saw two different TTFTs for one plan, one from each tool)."""
    r = search_strategies("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 2},
                          {"input_len": 1024, "output_len": 128, "concurrency": 16}, "throughput", serving=True,
                          top_k=3)
    assert all("served figures: simulated engine" in p.reason for p in r.top)
    speeds = [p.throughput_tokens_per_s for p in r.top if not p.slo_misses]
    assert speeds == sorted(speeds, reverse=True)
    for p in r.top[:2]:
        e = estimate_performance(p.plan)
        assert e.ttft_ms == pytest.approx(p.ttft_ms, rel=1e-9) and e.tpot_ms == pytest.approx(p.tpot_ms, rel=1e-9)
        assert e.served is not None
        assert e.served.output_tokens_per_s == pytest.approx(p.throughput_tokens_per_s, rel=1e-9)


def test_serving_search_compares_the_two_kinds_on_served_figures() -> None:
    """The best aggregated and disaggregated plans are both served before they are compared: on DeepSeek-V3 at
    1,024 clients the aggregated layout ranked past the simulated head, so the comparison set its steady-state
    21,411 tok/s against a served 20,981 and called aggregated the winner while the top plan was disaggregated."""
    r = search_strategies("deepseek-v3", {"gpu": "h200", "num_gpus": 64},
                          {"input_len": 2048, "output_len": 1024, "concurrency": 1024}, "throughput", dtype="fp8",
                          serving=True)
    assert all("served figures: simulated engine" in p.reason for p in r.top)
    best = r.top[0]
    assert r.comparison.startswith(f"{best.kind} wins"), (best.kind, r.comparison[:80])
    assert f"{best.throughput_tokens_per_s:.0f} tok/s {best.kind}" in r.comparison


def test_the_served_search_draws_its_pareto_front_on_served_figures() -> None:
    """With ``serving`` every Pareto entry is the simulator's figure for its own plan (what estimate_performance
    serves), the front is non-dominated on those figures, and the reason says which figures; without it the
    entries say they are steady-state figures."""
    from tools.core.plan import Plan
    from tools.estimate.simulate import simulate

    args = dict(model="llama-3.1-8b", hardware={"gpu": "h100-sxm", "num_gpus": 4}, objective="throughput",
                workload={"input_len": 1024, "output_len": 128}, top_k=3, engine="vllm")
    served = search_strategies(**args, serving=True)
    assert served.pareto and all("served figures" in p.reason for p in served.pareto)
    for p in served.pareto:
        sim = simulate(Plan.model_validate(p.plan))
        assert p.tpot_ms == pytest.approx(sim.tpot_ms.mean, rel=1e-3)
        assert p.throughput_tokens_per_s == pytest.approx(sim.output_tokens_per_s, rel=1e-3)
    speeds = [p.user_tokens_per_s for p in served.pareto]
    per_gpu = [p.throughput_per_gpu for p in served.pareto]
    assert speeds == sorted(speeds, reverse=True) and per_gpu == sorted(per_gpu)
    assert any("served figures" in n for n in served.notes)
    plain = search_strategies(**args)
    assert plain.pareto and all("steady-state figures" in p.reason for p in plain.pareto)
