"""Regressions from issue 10: pdag agrees with the deployments people run, and with itself."""

from __future__ import annotations

import json
import subprocess
import sys

from tools.validate import validate_dag

INT4_ON_H200 = {"model": "llama-3.1-8b", "hardware": {"gpu": "h200", "num_gpus": 8},
                "parallel": {"tp": 8}, "dtype": "int4"}


def test_raw_checkers_run_on_the_first_call_of_a_fresh_process() -> None:
    """plan_context ran the raw checkers before the rule modules were imported, so a fresh process said valid."""
    code = ("import json, sys; from tools.validate import validate_dag; "
            "r = validate_dag(json.loads(sys.argv[1])); "
            "print(json.dumps([v.rule_id for v in r.violations if v.severity == 'error']))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(INT4_ON_H200)], capture_output=True, text=True,
                         check=True, timeout=120)
    first = json.loads(out.stdout.strip().splitlines()[-1])
    again = [v.rule_id for v in validate_dag(INT4_ON_H200).violations if v.severity == "error"]
    assert "HW-ACCELERATOR-SPEC" in first
    assert first == again


def test_gpu_min_one_in_a_fresh_process() -> None:
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 0}}
    code = ("import json, sys; from tools.validate import validate_dag; "
            "r = validate_dag(json.loads(sys.argv[1])); print(json.dumps([v.rule_id for v in r.violations]))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(plan)], capture_output=True, text=True,
                         check=True, timeout=120)
    assert "GPU-MIN-ONE" in json.loads(out.stdout.strip().splitlines()[-1])
