"""pdag's evaluation suite: an Anthropic tool-use agent plans through the pdag MCP server and is scored.

``python -m evals.run`` runs every case in ``evals/cases`` with the offline scripted agent (no key, no network);
``--agent anthropic --model ...`` runs a live model and ``--agent replay`` re-scores recorded transcripts.
"""

from pathlib import Path

EVALS_DIR = Path(__file__).resolve().parent
REPO_ROOT = EVALS_DIR.parent
CASES_DIR = EVALS_DIR / "cases"
TASKS_DIR = EVALS_DIR / "tasks"  # requests written for recorded agent sessions (no scripted draft)
SUITE_CONFIG = EVALS_DIR / "suite.json"

__all__ = ["CASES_DIR", "TASKS_DIR", "EVALS_DIR", "REPO_ROOT", "SUITE_CONFIG"]
