"""Embedding and LM head split by vocabulary over the TP ranks, as vLLM, SGLang and TensorRT-LLM do: in the DAG
(an all-reduce after the lookup, an all-gather of the logits), in memory per GPU and in the estimate. gpt-fast
keeps both whole on every rank (its tp.py shards only the blocks)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import build_dag, estimate_performance, validate_dag
from tools.core.efficiency import efficiency_for
from tools.core.layout import Layout
from tools.core.memory import memory_report
from tools.core.plan import parse_plan
from tools.estimate.costs import CostModel

L405 = {"model": "llama-3.1-405b", "dtype": "fp8", "hardware": {"gpu": "h200", "num_gpus": 8},
        "parallel": {"tp": 8}}


def _nodes(plan: dict) -> dict[str, dict]:
    full = build_dag(plan).dag
    return {n["id"]: n for n in full["nodes"]}


def test_the_dag_splits_the_vocabulary_and_states_its_collectives():
    nodes = _nodes(L405)
    assert nodes["r0.prefill.embed"]["meta"]["vocab_shards"] == 8
    assert nodes["r0.decode.lm_head"]["meta"]["vocab_shards"] == 8
    assert nodes["r0.prefill.embed.allreduce"]["type"] == "AllReduceNode"
    assert nodes["r0.decode.logits.allgather"]["type"] == "AllGatherNode"
    assert validate_dag(plan=L405).valid
    whole = _nodes(L405 | {"engine": "gpt-fast"})
    assert "meta" not in whole["r0.decode.lm_head"] and "r0.decode.logits.allgather" not in whole


def test_405b_embedding_and_head_cost_an_eighth_per_gpu():
    spec = parse_plan(L405).spec
    vocab_bytes = (spec.embedding_params() + spec.lm_head_params()) * 2  # kept at 16 bits in an fp8 checkpoint
    assert vocab_bytes == pytest.approx(8.4e9, rel=0.01)  # 128,256 x 16,384 twice (embedding and head)
    split = memory_report(parse_plan(L405))
    whole = memory_report(parse_plan(L405 | {"engine": "gpt-fast"}))
    # the first GPU holds the embedding and (one stage) the head: 8.4 GB whole, 1.05 GB split
    assert whole.per_gpu[0].weights_bytes - split.per_gpu[0].weights_bytes == pytest.approx(vocab_bytes * 7 / 8)


def test_the_phantom_lm_head_time_goes_away():
    p = parse_plan(L405)
    m = CostModel(p, Layout(p), efficiency_for(p.accelerator.id), False)
    attrs = {"type": "LMHeadNode", "phase": "decode", "devices": list(range(8))}
    whole = m.cost(attrs, 1).seconds
    split = m.cost(attrs | {"meta": {"vocab_shards": 8}}, 1).seconds
    gather = m.cost({"type": "AllGatherNode", "phase": "decode", "devices": list(range(8)), "role": "logits"}, 1)
    assert whole > 0.5e-3  # reading 4.2 GB of head weights at ~4.8 TB/s
    assert split + gather.seconds < whole / 4


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), batch=st.integers(1, 64))
def test_split_only_under_tp_and_never_larger_than_whole(tp, batch):
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": tp}, "parallel": {"tp": tp},
            "workload": {"input_len": 512, "output_len": 64, "batch_size": batch}}
    split = memory_report(parse_plan(plan)).per_gpu[0].weights_bytes
    whole = memory_report(parse_plan(plan | {"engine": "gpt-fast"})).per_gpu[0].weights_bytes
    assert split <= whole and (split == whole) == (tp == 1)
    assert ("r0.decode.logits.allgather" in _nodes(plan)) == (tp > 1)
    assert estimate_performance(plan=plan).gpus_used == tp


def test_a_dropped_vocab_collective_is_caught_and_repaired():
    from tools import autofix_dag

    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}
    dag = build_dag(plan).dag
    gone = "r0.prefill.embed.allreduce"
    after = [e["target"] for e in dag["edges"] if e["source"] == gone]
    dag["nodes"] = [n for n in dag["nodes"] if n["id"] != gone]
    dag["edges"] = [e for e in dag["edges"] if gone not in (e["source"], e["target"])] + [
        {"source": "r0.prefill.embed", "target": t, "type": "data"} for t in after]
    r = validate_dag(dag=dag)
    assert not r.valid and any(v.rule_id == "TP-REJOIN-BEFORE-NEXT-LAYER" and "vocab" in v.message
                               for v in r.violations)
    assert autofix_dag(dag=dag).valid
