"""Issue 41, done-when: every plan search returns exports to each engine it names, re-imports to the same plan,
and every exported command checks against that engine's flag table; search ranks only what an engine launches
and prices the checkpoint it is given."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from tools import export_plan, import_deployment, search_strategies, validate_dag
from tools.core.plan import parse_plan
from tools.core.quantization import storage
from tools.engines.flags import check_argv
from tools.search.strategies import prefill_work_share

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 8}, {}),
    ("llama-3.1-70b", {"gpu": "h100-sxm", "num_gpus": 16}, {"objective": "throughput"}),
    ("llama-3.1-405b", {"gpu": "h100-sxm", "num_gpus": 16}, {"dtype": "fp8"}),
    ("mixtral-8x7b", {"gpu": "h100-sxm", "num_gpus": 8}, {"objective": "throughput"}),
    ("qwen3-30b-a3b", {"gpu": "h100-sxm", "num_gpus": 8}, {"engine": "sglang"}),
    ("deepseek-v3", {"gpu": "h200", "num_gpus": 16}, {"dtype": "fp8", "engine": "vllm"}),
    ("qwen3-235b-a22b", {"gpu": "h200", "num_gpus": 32}, {"objective": "throughput"}),
    ("llama-3.1-70b", {"gpu": "a100-80gb", "num_gpus": 64}, {"objective": "throughput", "engine": "trtllm"}),
    ("deepseek-v3", {"gpu": "h200", "num_gpus": 256}, {"dtype": "fp8", "objective": "throughput"}),
    ("llama-3.1-8b", {"gpu": "h100-sxm", "num_gpus": 1024}, {"objective": "throughput"}),
]


def _shape(plan: dict[str, Any]) -> dict[str, Any]:
    """What must survive export and import: the model, the GPUs and, per pool, replicas, stages, the stage group
    width and the experts' spread (an ep > tp plan comes back in its attention-DP form, on the same GPUs), the
    weights as stored and the KV dtype."""
    p = parse_plan(plan)
    pools = {}
    for phase in ("prefill", "decode") if p.options.disaggregated else ("prefill",):
        d = p.degrees(phase)
        pools[phase] = (d.dp, d.pp, max(d.tp * d.attn_dp, d.ep, d.sp), d.ep if p.spec.is_moe else 1)
    return {"model": p.model_id, "gpus": p.hardware.num_gpus, "pools": pools, "weights": storage(p),
            "kv": p.effective_kv_dtype}


def _reimport(out: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """The plan read back from the first command of each pool (a server over several nodes: its first node's),
    run by as many servers as the export wrote."""
    gpu, gpn = plan["hardware"]["gpu"], plan["hardware"].get("gpus_per_node", 8)
    kwargs: dict[str, Any] = {"gpu": gpu, "gpus_per_node": gpn, "engine_config": out.config}
    if out.pool_servers is None:
        return import_deployment(shlex.join(out.argv[0]), replicas=out.servers, **kwargs).plan
    assert out.pool_commands is not None
    decode = out.argv[out.pool_commands["prefill"]]
    return import_deployment(shlex.join(out.argv[0]), replicas=out.pool_servers["prefill"],
                             decode_command=shlex.join(decode), decode_replicas=out.pool_servers["decode"],
                             decode_engine_config=out.decode_config, **kwargs).plan


@pytest.fixture(scope="module")
def searched() -> list[tuple[dict[str, Any], Any]]:
    out = []
    for model, hardware, kw in CASES:
        r = search_strategies(model, hardware, **kw)
        assert r.top, (model, hardware)
        engine = kw.get("engine")
        seen = set()
        for p in [*r.top, *(x for x in (r.best_aggregated, r.best_disaggregated) if x)]:
            key = (p.label, p.batch_size)
            if key in seen:
                continue
            seen.add(key)
            assert p.launchable and p.engines and (engine is None or engine in p.engines), p.label
            out.append((p.plan, p))
    return out


def test_every_searched_plan_exports_to_its_engines_and_comes_back(searched) -> None:
    checked = 0
    for plan, summary in searched:
        assert not [v for v in validate_dag(plan=plan).violations if v.severity == "error"], summary.label
        for engine in summary.engines:
            out = export_plan(plan, engine)
            assert out.flag_problems == [], (summary.label, engine, out.flag_problems)
            for argv in out.argv:
                assert check_argv(engine, argv) == []
                checked += 1
            back = _reimport(out, plan)
            assert _shape(back) == _shape(plan), (summary.label, engine)
    assert checked >= 40


def test_search_ranks_only_plans_an_engine_launches() -> None:
    """Issue 41: 'TP8 (expert TP8) + prefill SP8' (engines: []) was ranked first for a long prompt."""
    kw = {"workload": {"input_len": 32768, "output_len": 64}, "top_k": 10}
    r = search_strategies("qwen3-30b-a3b", {"gpu": "h100-sxm", "num_gpus": 8}, **kw)
    assert all(p.engines and p.launchable for p in r.top + r.pareto)
    assert any("cannot launch were left out" in n for n in r.notes)
    every = search_strategies("qwen3-30b-a3b", {"gpu": "h100-sxm", "num_gpus": 8}, unlaunchable=True, **kw)
    assert any(not p.engines and p.label.endswith("(no engine launches it)") for p in every.top)
    only = search_strategies("qwen3-30b-a3b", {"gpu": "h100-sxm", "num_gpus": 8}, engine="vllm", **kw)
    assert all("vllm" in p.engines for p in only.top)


def test_search_prices_the_checkpoint_it_is_given() -> None:
    """Issue 41: Meta's FP8 405B keeps its attention in bf16; without the checkpoint, search returned plans that
    then failed MEM-FITS once the checkpoint was named."""
    ck = "meta-llama/Llama-3.1-405B-Instruct-FP8"
    r = search_strategies("llama-3.1-405b", {"gpu": "h100-sxm", "num_gpus": 8}, dtype="fp8", objective="throughput",
                          checkpoint=ck)
    assert r.top
    for p in r.top + r.pareto:
        assert p.plan["checkpoint"] == ck
        assert "MEM-FITS" not in {v.rule_id for v in validate_dag(plan=p.plan).violations if v.severity == "error"}


def test_comparison_states_prefill_as_a_share_of_work() -> None:
    """Issue 41: 'prefill takes 0 % of a replica's time' was TTFT / e2e of one request."""
    assert prefill_work_share(100.0, 10.0, 100) == pytest.approx(100 / 1100)
    r = search_strategies("llama-3.1-70b", {"gpu": "h100-sxm", "num_gpus": 16}, objective="throughput", serving=True)
    assert r.comparison and "of a replica's GPU time (one prefill pass of" in r.comparison
    assert " 0 % " not in r.comparison


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_listed_layout_is_the_one_the_engine_launches_and_listed_once(engine: str) -> None:
    """Outside test 4: 'TP4 EP8' (no attention-DP) was listed under vllm beside 'ADP2 x TP4 EP8' with other figures,
    and exported as that same attention-DP command. A plan listed under an engine exports as drawn (no note that the
    engine reshaped it), so no two listed plans share a launch command."""
    r = search_strategies("qwen3-30b-a3b", {"gpu": "h100-sxm", "num_gpus": 8}, engine=engine, top_k=8,
                          workload={"input_len": 1024, "output_len": 256, "concurrency": 16})
    commands = []
    for p in r.top:
        out = export_plan(p.plan, engine)
        assert not [n for n in out.notes if "attention-DP form" in n], p.label
        commands.append(out.command)
    assert len(set(commands)) == len(commands)
    assert any(p.plan["parallel"].get("attn_dp", 1) > 1 for p in r.top)  # the wide-EP form is still offered
