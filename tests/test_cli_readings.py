"""The text pages of `pdag validate` and `pdag fix` show how a hand draft was read, not only `--json`; and an unknown
node type gets suggestions only when something is spelled near it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.cli import main
from tools.drafts.vocabulary import closest_types
from tools.repair.autofix import autofix_dag
from tools.rules.validate import validate_dag

DRAFT = Path(__file__).parent / "data" / "blind_dags5" / "dag_04.json"


REFUSED = Path(__file__).parent / "fixtures" / "rules" / "STRUCT-ONE-READING.json"  # carries its plan: fix rebuilds


@pytest.mark.parametrize("command", ["validate", "fix"])
@pytest.mark.parametrize("draft", ["blind", "rebuilt"])
def test_text_page_shows_every_reading(command: str, draft: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(DRAFT.read_text(encoding="utf-8")) if draft == "blind" else \
        json.loads(REFUSED.read_text(encoding="utf-8"))["reject"]["dag"]
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    notes = (validate_dag if command == "validate" else autofix_dag)(dag=doc).notes
    assert any("read the draft's own vocabulary" in n for n in notes)
    main([command, str(path)])
    out = capsys.readouterr().out
    for note in notes:
        assert f"reading: {note}" in out


def test_a_built_plan_reads_without_notes(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate"])
    assert "reading:" not in capsys.readouterr().out


@pytest.mark.parametrize("spelling, expected", [("AtentionNode", "AttentionNode"), ("Routr", "RouterNode"),
                                                ("allreduce_x", "AllReduceNode"), ("ExpertsNode", "ExpertNode")])
def test_near_misspellings_are_suggested(spelling: str, expected: str) -> None:
    assert closest_types(spelling)[0] == expected


@pytest.mark.parametrize("spelling", ["Banana", "MLP", "Sampler", "xyz"])
def test_nothing_is_suggested_for_a_word_near_no_type(spelling: str) -> None:
    assert closest_types(spelling) == []
