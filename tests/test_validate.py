"""validate_dag over the labelled corpus, bad input, ordering and the shape of violations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import autofix_dag, build_dag, validate_dag
from tools.core.dag import MAX_NODES
from tools.core.errors import PdagInputError

CORPUS = sorted((Path(__file__).resolve().parent / "fixtures" / "corpus").glob("*.json"))
TINY = {"hf_config": {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                      "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000}}
GOOD = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8}}


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 60


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_item_produces_its_labelled_rules(path: Path):
    item = json.loads(path.read_text())
    kind, value = next(iter(item["input"].items()))
    result = validate_dag(**{kind: value})
    got = {v.rule_id for v in result.violations}
    assert set(item["expect"]) <= got, f"expected {item['expect']}, got {sorted(got)}"
    assert not [n for n in result.notes if " failed: " in n]
    for v in result.violations:
        assert v.message and v.severity in ("error", "warning")
        assert len(v.location.nodes) <= 5
        assert v.source, v.rule_id
    if any(v.severity == "error" for v in result.violations):
        assert not result.valid


def test_valid_plan_and_its_dag_are_valid():
    r = validate_dag(plan=GOOD)
    assert r.valid and r.gpus_used == 8 and r.errors == 0
    r2 = validate_dag(dag=build_dag(GOOD).dag)
    assert r2.valid, [v.message for v in r2.violations if v.severity == "error"]


def test_violation_carries_field_message_source_and_hint():
    r = validate_dag(plan={**GOOD, "parallel": {"tp": 3}, "hardware": {"gpu": "h100-sxm", "num_gpus": 3}})
    v = next(v for v in r.violations if v.rule_id == "TP-HEADS-DIVISIBLE")
    assert v.location.field == "plan.parallel.tp"
    assert "64" in v.message and "3" in v.message
    assert v.source[0].seed.endswith(".txt") and v.hint


def test_memory_violation_states_the_numbers():
    r = validate_dag(plan={"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}})
    v = next(v for v in r.violations if v.rule_id == "MEM-FITS")
    assert "GB" in v.message and "85.5" in v.message  # the H100's 81559 MiB as nvidia-smi reports it


def test_order_is_deterministic_errors_first():
    plan = {**GOOD, "parallel": {"tp": 3, "dp": 2}, "hardware": {"gpu": "h100-sxm", "num_gpus": 64}}
    a, b = validate_dag(plan=plan), validate_dag(plan=plan)
    assert [v.model_dump() for v in a.violations] == [v.model_dump() for v in b.violations]
    sev = [v.severity for v in a.violations]
    assert sev == sorted(sev, key=lambda s: s != "error")


def test_plan_model_instance_is_accepted():
    from tools.core.plan import parse_plan

    assert validate_dag(plan=parse_plan(GOOD)).valid


@pytest.mark.parametrize("kwargs,field", [
    ({"plan": 42}, "plan"),
    ({"plan": {"model": "no-such-model", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}}, "plan.model"),
    ({"plan": {"model": "llama-3.1-8b"}}, "plan.hardware"),
    ({"dag": "nodes"}, "dag"),
    ({"dag": {"edges": []}}, "dag.nodes"),
    ({"dag": {"nodes": {}}}, "dag.nodes"),
    ({}, "plan"),
])
def test_not_a_plan_or_dag_raises_input_error_naming_the_field(kwargs, field):
    with pytest.raises(PdagInputError) as exc:
        validate_dag(**kwargs)
    assert exc.value.field.startswith(field)


def test_schema_errors_carry_the_json_path():
    dag = build_dag({"model": TINY, "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}).dag
    dag["nodes"][3]["devices"] = "zero"
    dag["nodes"][4]["type"] = "ContextParallelNode"
    r = validate_dag(dag=dag)
    fields = {v.location.field for v in r.violations}
    assert "dag.nodes[3].devices" in fields and "dag.nodes[4].type" in fields


def test_node_limit_refused_at_once():
    dag = {"nodes": [{"id": f"n{i}", "type": "LinearNode", "devices": [0]} for i in range(MAX_NODES + 1)], "edges": []}
    r = validate_dag(dag=dag)
    assert [v.rule_id for v in r.violations] == ["STRUCT-NODE-LIMIT"]


@pytest.mark.parametrize("wrap", [
    lambda nodes: {"nodes": nodes, "edges": []},
    lambda nodes: {"graph": {"vertices": nodes, "links": []}},  # a draft's spelling, inside a wrapper
    lambda nodes: {"dag": {"nodes": nodes}},  # a build_dag answer pasted whole
])
def test_an_oversized_document_is_refused_before_any_node_is_read(wrap, monkeypatch):
    """Reading a 100,000-node draft took seconds only to refuse it; the size is now read off the lists' lengths."""
    import tools.rules.validate as v

    def unread(*_a, **_k):
        raise AssertionError("the draft reader ran on an oversized document")

    monkeypatch.setattr(v, "translate", unread)
    monkeypatch.setattr(v, "check_json_value", unread)
    doc = wrap([{"id": f"n{i}", "type": "LinearNode", "devices": [0]} for i in range(MAX_NODES + 1)])
    r = validate_dag(dag=doc)
    assert [x.rule_id for x in r.violations] == ["STRUCT-NODE-LIMIT"]
    assert f"{MAX_NODES + 1:,} nodes" in r.violations[0].message
    fixed = autofix_dag(dag=doc)
    assert not fixed.valid and [x.rule_id for x in fixed.violations] == ["STRUCT-NODE-LIMIT"]


def test_garbage_dag_never_crashes():
    dag = {"model": 7, "plan": "x", "nodes": [1, None, {"id": 3}, {"id": "a", "type": 5, "devices": [True, -1, "x"],
                                                                 "layer": "one", "meta": []}, {"id": "a"}],
           "edges": [None, {"source": "a"}, {"source": "a", "target": "a", "type": 9}]}
    r = validate_dag(dag=dag)
    assert not r.valid
    assert not [n for n in r.notes if " failed: " in n]
