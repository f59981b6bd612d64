"""The `pdag` command line: the default main job, a subcommand per tool, errors on stderr with exit 2."""

from __future__ import annotations

import json

from tools.cli import main


def test_default_main_job_builds_validates_and_estimates(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "GPUs used: 8 of 8" in out and "validation: valid" in out and "TTFT" in out


def test_build_json_is_the_full_dag(capsys):
    assert main(["build", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--ep", "8",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus_used"] == 8 and doc["dag"]["format"] == "pdag.dag"


def test_validate_reports_rule_ids_and_fails(capsys):
    code = main(["validate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "3"])
    out = capsys.readouterr().out
    assert code == 1 and "TP-HEADS-DIVISIBLE" in out


def test_fix_then_export(tmp_path, capsys):
    assert main(["fix", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "3", "--json"]) == 0
    fixed = json.loads(capsys.readouterr().out)["plan"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(fixed))
    assert main(["export", str(path), "--engine", "vllm"]) == 0
    assert "--tensor-parallel-size" in capsys.readouterr().out


def test_bad_input_goes_to_stderr_with_exit_2(capsys):
    assert main(["build", "--model", "llama-70b", "--gpu", "h100-sxm", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "plan.model" in err and "llama-3.1-70b" in err


def test_rule_lookup(capsys):
    assert main(["rule", "gpu-no-multiplication"]) == 0
    assert "GPU-NO-MULTIPLICATION" in capsys.readouterr().out


def test_unreadable_or_malformed_plan_file_is_a_field_error(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "missing.json")]) == 2
    assert "plan_file: cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["export", str(bad), "--engine", "vllm"]) == 2
    assert "plan_file: not valid JSON" in capsys.readouterr().err


def test_engine_options_from_flags_reach_the_serving_estimate(capsys):
    """--no-scheduler-ahead prices a vLLM server launched with --no-async-scheduling: a new request under load
    waits one step less, the step itself is unchanged."""
    base = ["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--batch", "32",
            "--engine", "vllm", "--json"]
    assert main(base) == 0
    ahead = json.loads(capsys.readouterr().out)["steady_state_estimate"]
    assert main([*base, "--no-scheduler-ahead"]) == 0
    now = json.loads(capsys.readouterr().out)["steady_state_estimate"]
    assert now["tpot_ms"] == ahead["tpot_ms"]
    assert abs(ahead["ttft_ms"] - now["ttft_ms"] - ahead["step_ms"]) < 1e-6 * ahead["ttft_ms"]
