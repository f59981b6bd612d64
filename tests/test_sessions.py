"""Recorded agent sessions: `python -m evals.record` keeps what an agent did through MCP, and
`python -m evals.run --agent sessions` re-runs its calls on today's code and scores the answer like any case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import record
from evals import run as evals_run

TASK = "llama70b-h100x8-latency-dp"
GOOD = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
        "workload": {"input_len": 2048, "output_len": 256, "batch_size": 1}}
DP_FOR_LATENCY = {**GOOD, "parallel": {"dp": 4, "tp": 2}}


def _session(path: Path, plan: dict, capsys: pytest.CaptureFixture[str]) -> str:
    record.main(["start", str(path), "--task", TASK, "--agent", "test"])
    shown = capsys.readouterr().out
    record.main(["call", str(path), "validate_dag", json.dumps({"plan": plan})])
    capsys.readouterr()
    record.main(["final", str(path), f"My plan. <plan>{json.dumps(plan)}</plan>"])
    capsys.readouterr()
    return shown


def test_a_session_shows_the_interface_and_is_scored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown = _session(tmp_path / "s" / "good.jsonl", GOOD, capsys)
    assert "REQUEST" in shown and "## validate_dag" in shown and "pdag://" in shown
    _session(tmp_path / "s" / "dp.jsonl", DP_FOR_LATENCY, capsys)
    code = evals_run.main(["--agent", "sessions", "--sessions", str(tmp_path / "s"), "--out", str(tmp_path / "out"),
                           "--transport", "inprocess", "--threshold", "0"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    passed = {c["id"]: c["passed"] for c in report["cases"]}
    assert passed == {f"{TASK}@good": True, f"{TASK}@dp": False}
    assert f"{TASK}" in out and "1/2" in out


def test_a_session_must_start_first(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="start"):
        record.main(["call", str(tmp_path / "none.jsonl"), "lookup_rule", "{}"])
