"""Mistakes of input, not of strategy: every plan tool classifies them the same way, as one PdagInputError that
names each field, says what it means when a name is misspelled, and lists every unknown name of the call."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import autofix_dag, build_dag, estimate_performance, search_strategies, validate_dag
from tools.core.errors import PdagInputError

BASE: dict[str, Any] = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
                        "parallel": {"tp": 8}}
TOOLS = (validate_dag, build_dag, estimate_performance, autofix_dag)


def _with(path: tuple[str, ...], value: Any, drop: str | None = None) -> dict[str, Any]:
    plan = copy.deepcopy(BASE)
    node = plan
    for k in path[:-1]:
        node = node.setdefault(k, {})
    if drop:
        node.pop(drop, None)
    node[path[-1]] = value
    return plan


def _errors(plan: dict[str, Any]) -> list[PdagInputError]:
    out = []
    for tool in TOOLS:
        with pytest.raises(PdagInputError) as caught:
            tool(plan=plan)
        out.append(caught.value)
    return out


@pytest.mark.parametrize(("path", "drop", "meant"), [
    (("parallel", "tensor_parallel"), "tp", "tp"),  # was COMBO-CLOSED-SET in validate, hint "drop them"
    (("parallel", "tensor_parallel_size"), "tp", "tp"),
    (("parallel", "pipline"), None, "pp"),
    (("paralel",), "parallel", "parallel"),
    (("hardware", "gpus_per_nod"), None, "gpus_per_node"),
    (("phases", "prefill", "tpp"), None, "tp"),
    (("workload", "batchsize"), None, "batch_size"),
])
def test_a_misspelled_field_gets_did_you_mean_in_every_tool(path, drop, meant) -> None:
    value = {"tp": 8} if path == ("paralel",) else 8
    for err in _errors(_with(path, value, drop)):
        assert err.field == "plan." + ".".join(path)
        assert f"did you mean '{meant}'" in err.problem


def test_an_unknown_strategy_is_still_the_closed_set_rule() -> None:
    """'cp' spells no field: it is a dimension outside the seeds' closed set, a rule, not a spelling."""
    r = validate_dag(plan=_with(("parallel", "cp"), 2))
    assert "COMBO-CLOSED-SET" in {v.rule_id for v in r.violations}


INT_FIELDS = [("parallel", "tp"), ("parallel", "dp"), ("hardware", "num_gpus"), ("hardware", "gpus_per_node"),
              ("workload", "batch_size"), ("phases", "decode", "tp")]


@settings(max_examples=40, deadline=None)
@given(path=st.sampled_from(INT_FIELDS),
       value=st.sampled_from(["2", "8", 2.0, 8.0, True, [8], {"n": 8}]) | st.text(max_size=3)
       | st.floats(allow_nan=False, allow_infinity=False))
def test_a_wrong_type_is_an_input_error_naming_the_field_in_every_tool(path, value) -> None:
    """'tp': '2' was GPU-MIN-ONE in validate and autofix (which set it to 1) and TP 2 in build and estimate."""
    errors = _errors(_with(path, value))
    assert {e.field for e in errors} == {"plan." + ".".join(path)}
    assert all("expected an integer" in e.problem for e in errors)


def test_a_value_out_of_range_stays_the_rule() -> None:
    r = validate_dag(plan=_with(("parallel", "tp"), 0))
    assert "GPU-MIN-ONE" in {v.rule_id for v in r.violations}


def test_every_unknown_name_is_reported_at_once() -> None:
    """An unknown GPU used to hide an unknown model (validate stopped on the GPU, build on the model)."""
    plan = {"model": "llama-9", "hardware": {"gpu": "h100-sxn", "num_gpus": 8}}
    for err in _errors(plan):
        assert err.field == "plan.model"
        assert "llama-9" in err.problem and "plan.hardware.gpu" in err.problem and "h100-sxn" in err.problem
        assert "h100-sxm" in err.problem  # the GPU's closest preset is offered too
    with pytest.raises(PdagInputError) as caught:
        search_strategies("llama-9", {"gpu": "h100-sxn", "num_gpus": 8})
    assert "llama-9" in str(caught.value) and "h100-sxn" in str(caught.value)


@pytest.mark.parametrize("gpu", [{"id": "x", "memory_bytes": -5}, {"name": "h1000", "memory_gb": 80}])
def test_an_unusable_inline_accelerator_is_an_input_error_in_every_tool(gpu: dict[str, Any]) -> None:
    """validate_dag used to report it as HW-ACCELERATOR-SPEC while the other tools refused it as input."""
    plan = _with(("hardware", "gpu"), gpu)
    for tool in TOOLS:
        with pytest.raises(PdagInputError) as exc:
            tool(plan=copy.deepcopy(plan))
        assert exc.value.field == "plan.hardware.gpu.memory_bytes", (tool.__name__, exc.value.field)
        assert "inline accelerator" in exc.value.problem


def test_a_load_spelt_as_users_names_the_concurrency_field():
    """An outside agent wrote workload.concurrent_users and was told only 'the documented fields'."""
    from tools.estimate.core import estimate_performance

    with pytest.raises(PdagInputError) as exc:
        estimate_performance({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
                              "workload": {"concurrent_users": 64}})
    assert exc.value.field == "plan.workload.concurrent_users" and "concurrency" in str(exc.value)


@pytest.mark.parametrize(("field", "value", "spelt"), [("dtype", "bfloat16", "bf16"), ("dtype", "float16", "fp16"),
                                                       ("kv_dtype", "float8_e4m3fn", "fp8"), ("dtype", "half", "fp16")])
def test_a_dtype_in_torch_spelling_names_the_plans_spelling(field: str, value: str, spelt: str) -> None:
    """An outside agent wrote dtype 'bfloat16' (pdag's own exports write --dtype bfloat16) and was told only
    pydantic's list, twice."""
    from tools.estimate.core import estimate_performance

    with pytest.raises(PdagInputError) as exc:
        estimate_performance({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, field: value})
    assert exc.value.field == f"plan.{field}"
    assert f"is written '{spelt}'" in exc.value.problem and "Input should be" not in str(exc.value)


def test_total_gpus_means_num_gpus() -> None:
    from tools.estimate.core import estimate_performance

    with pytest.raises(PdagInputError) as exc:
        estimate_performance({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "total_gpus": 1}})
    assert "did you mean 'num_gpus'" in exc.value.problem
