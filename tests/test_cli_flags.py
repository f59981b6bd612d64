"""The plan's command-line flags come from the Plan model: help text, types and choices cannot drift from the
published schema, and a new field of parallel, workload or engine_options gets its flag without a code change."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from tools.cli.common import add_plan_args, is_flag_field, plan_field, plan_flag_paths, plan_from_args
from tools.core.plan import Degrees, EngineOptions, Plan, Workload, parse_plan


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_plan_args(p)
    return p


def test_every_flag_reads_its_fields_description() -> None:
    actions = {a.dest: a for a in _parser()._actions}
    for flag, path in plan_flag_paths().items():
        desc = plan_field(path).description
        assert desc, f"{'.'.join(path)} has no description for --{flag}"
        assert desc in actions[flag.replace("-", "_")].help


def test_every_scalar_field_of_the_open_sections_has_a_flag() -> None:
    paths = set(plan_flag_paths().values())
    for sec, model in (("parallel", Degrees), ("workload", Workload), ("engine_options", EngineOptions)):
        for name, info in model.model_fields.items():
            assert (sec, name) in paths or not is_flag_field(info), f"{sec}.{name} has no flag"


def test_literal_fields_offer_their_values_as_choices() -> None:
    actions = {a.dest: a for a in _parser()._actions}
    assert actions["objective"].choices == ["latency", "throughput"]
    assert "vllm" in actions["engine"].choices and "bf16" in actions["dtype"].choices


@pytest.mark.parametrize("argv, path, value", [
    (["--gpus", "16", "--tp", "8", "--pp", "2"], ("hardware", "num_gpus"), 16),
    (["--batch", "4"], ("workload", "batch_size"), 4),
    (["--prefill-sp", "2", "--tp", "2"], ("phases", "prefill", "sp"), 2),
    (["--no-scheduler-ahead"], ("engine_options", "scheduler_ahead"), False),
    (["--engine", "sglang"], ("engine",), "sglang"),
    (["--kv-dtype", "fp8"], ("kv_dtype",), "fp8"),
])
def test_a_flag_lands_on_its_field_and_the_plan_parses(argv: list[str], path: tuple[str, ...], value: Any) -> None:
    plan = plan_from_args(_parser().parse_args(argv))
    at: Any = plan
    for key in path:
        at = at[key]
    assert at == value
    assert isinstance(parse_plan(plan), Plan)


def test_degree_flags_start_a_new_deployment_but_workload_flags_keep_the_default() -> None:
    assert plan_from_args(_parser().parse_args(["--tp", "4"]))["parallel"] == {"tp": 4}
    assert plan_from_args(_parser().parse_args(["--batch", "2"]))["parallel"] == {"tp": 8}
