"""The recorded LLM-agent sessions (evals/sessions) re-scored on today's code, as `python -m evals.run --agent
sessions` scores them: every recorded call runs again, and the pass rate may not fall below the one committed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# 32 of 42 on 2026-11-28 (agent-a 14, agent-b 16, agent-c 12): the failures are the agents' own choices (expert TP
# kept for a MoE the task wants on EP, a 128k prompt written as 128,000, a plan edited after its last validation)
PASSED_AT_LEAST = 32


@pytest.mark.slow
def test_recorded_sessions_replay_and_keep_their_pass_rate(tmp_path: Path) -> None:
    sessions = sorted((ROOT / "evals" / "sessions").glob("*/*.jsonl"))
    run = subprocess.run([sys.executable, "-m", "evals.run", "--agent", "sessions", "--sessions",
                          str(ROOT / "evals" / "sessions"), "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode in (0, 1), run.stderr[-2000:]  # 1: below the suite's threshold, still scored
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["cases"]) == len(sessions) >= 42
    assert all(c["tool_calls"] >= 1 for c in report["cases"])
    passed = sum(c["passed"] for c in report["cases"])
    assert passed >= PASSED_AT_LEAST, [(c["id"], c["reasons"]) for c in report["cases"] if not c["passed"]]
