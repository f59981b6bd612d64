"""Arbitrary input never crashes a tool: it gets a result or a PdagInputError that names a field."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import (
    autofix_dag,
    build_dag,
    estimate_performance,
    export_plan,
    import_command,
    lookup_rule,
    search_strategies,
    validate_dag,
)
from tools.core.errors import PdagInputError

BASE = {
    "model": "mixtral-8x7b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
    "parallel": {"tp": 4, "ep": 4},
    "workload": {"input_len": 512, "output_len": 32, "batch_size": 2},
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
paths = st.sampled_from([
    ("model",), ("hardware",), ("hardware", "gpu"), ("hardware", "num_gpus"), ("hardware", "gpus_per_node"),
    ("parallel",), ("parallel", "tp"), ("parallel", "ep"), ("parallel", "pp"), ("parallel", "dp"),
    ("parallel", "sp"), ("parallel", "attn_dp"), ("phases",), ("phases", "prefill"), ("phases", "decode"),
    ("workload",), ("workload", "input_len"), ("workload", "batch_size"), ("dtype",), ("kv_dtype",),
    ("objective",), ("options",), ("options", "layer_split"), ("options", "disaggregated"), ("extra",),
])
small_ints = st.integers(0, 70)


def mutate(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    plan = copy.deepcopy(BASE)
    node = plan
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return plan


def survives(fn: Any, **kwargs: Any) -> None:
    try:
        fn(**kwargs)
    except PdagInputError as exc:
        assert exc.field and exc.problem


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(path=paths, value=json_values | small_ints)
def test_plan_tools_survive_any_field_value(path, value):
    plan = mutate(path, value)
    for fn in (build_dag, validate_dag, estimate_performance):
        survives(fn, plan=plan)


@FUZZ
@given(path=paths, value=small_ints | st.booleans())
def test_autofix_survives_and_its_output_validates_or_explains(path, value):
    plan = mutate(path, value)
    try:
        result = autofix_dag(plan=plan)
    except PdagInputError as exc:
        assert exc.field
        return
    if result.valid:
        assert validate_dag(plan=result.plan).valid
    else:
        assert result.violations and all(v.rule_id for v in result.violations)


@FUZZ
@given(doc=json_values)
def test_dag_tools_survive_any_document(doc):
    for fn in (validate_dag, autofix_dag):
        survives(fn, dag=doc)
    survives(validate_dag, plan=doc)


@FUZZ
@given(rule_id=st.none() | st.text(max_size=30), query=st.none() | st.text(max_size=60),
       strategy=st.none() | st.text(max_size=4), limit=st.integers(-5, 100))
def test_lookup_rule_survives_any_arguments(rule_id, query, strategy, limit):
    survives(lookup_rule, rule_id=rule_id, query=query, strategy=strategy, limit=limit)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "nope", ""]) | json_values,
       num_gpus=st.integers(-2, 20), objective=st.sampled_from(["latency", "throughput", "speed"]))
def test_search_survives_any_arguments(model, num_gpus, objective):
    survives(search_strategies, model=model, hardware={"gpu": "h100-sxm", "num_gpus": num_gpus},
             workload={"input_len": 256, "output_len": 16}, objective=objective)


@FUZZ
@given(command=st.text(max_size=80) | st.sampled_from([
    "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 3",
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention",
    "vllm serve unknown/model --pipeline-parallel-size x",
    "trtllm-serve x --tp_size 8",
]), engine=st.sampled_from(["vllm", "sglang", "trtllm", "tgi"]))
def test_engine_translation_survives_any_input(command, engine):
    survives(import_command, command=command)
    survives(export_plan, plan=mutate(("parallel", "sp"), 2), engine=engine)


SMALL_DAG = build_dag(plan={"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                            "parallel": {"tp": 2}}).dag
DAG_FIELDS = st.sampled_from([("edges", "type"), ("edges", "source"), ("edges", "target"), ("nodes", "type"),
                              ("nodes", "devices"), ("nodes", "id"), ("nodes", "heads"), ("nodes", "phase"),
                              ("nodes", "layer"), ("nodes", "role")])


@FUZZ
@given(field=DAG_FIELDS, index=st.integers(0, 40), value=json_values)
def test_dag_tools_survive_any_value_in_any_node_or_edge_field(field, index, value):
    """An edge typed as an object or a list once raised TypeError (unhashable) in the draft reader."""
    doc = copy.deepcopy(SMALL_DAG)
    items = doc[field[0]]
    items[index % len(items)][field[1]] = value
    for fn in (validate_dag, autofix_dag):
        survives(fn, dag=doc)


@given(value=st.sampled_from([{"a": 1}, ["data"], [], {}]), where=st.sampled_from(["edges", "nodes"]))
@settings(max_examples=8, deadline=None)
def test_a_type_that_is_an_object_or_a_list_is_a_violation_not_a_crash(value, where):
    doc = copy.deepcopy(SMALL_DAG)
    doc[where][0]["type"] = value
    result = validate_dag(dag=doc)
    assert not result.valid and "STRUCT-KNOWN-TYPES" in {v.rule_id for v in result.violations}


def test_autofix_of_a_dag_without_edges_answers() -> None:
    """It raised KeyError('edges') when an in-place repair tried to add its first edge."""
    doc = {k: v for k, v in copy.deepcopy(SMALL_DAG).items() if k != "edges"}
    result = autofix_dag(dag=doc)
    assert result.changes or result.violations
