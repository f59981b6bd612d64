"""`pdag accuracy` answers from its cache only when code, knowledge, points and options are the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.calibration.accuracy import load_measurements
from tools.cli import main
from tools.cli.cache import fingerprint

NOTE = "answer from the cache"


@pytest.fixture
def points_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PDAG_CACHE_DIR", str(tmp_path / "cache"))
    pts = [p for p in load_measurements() if p["gpu"] == "h100-sxm"][:6]
    f = tmp_path / "points.json"
    f.write_text(json.dumps({"points": pts}), encoding="utf-8")
    return f


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    assert main(["accuracy", *argv]) == 0
    cap = capsys.readouterr()
    return cap.out, cap.err


def test_second_run_is_the_cached_first(points_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out1, err1 = _run(capsys, str(points_file), "--no-loo")
    out2, err2 = _run(capsys, str(points_file), "--no-loo")
    assert NOTE not in err1 and NOTE in err2
    assert out1 == out2 and "points" in out1


def test_changed_points_or_options_recompute(points_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run(capsys, str(points_file), "--no-loo")
    doc = json.loads(points_file.read_text(encoding="utf-8"))
    doc["points"][0]["value"] *= 2
    points_file.write_text(json.dumps(doc), encoding="utf-8")
    out, err = _run(capsys, str(points_file), "--no-loo")
    assert NOTE not in err
    _, err = _run(capsys, str(points_file), "--no-loo", "--no-cache")
    assert NOTE not in err


def test_fingerprint_follows_inputs() -> None:
    assert fingerprint("accuracy", {"a": 1}) == fingerprint("accuracy", {"a": 1})
    assert fingerprint("accuracy", {"a": 1}) != fingerprint("accuracy", {"a": 2})
    assert fingerprint("accuracy", {"a": 1}) != fingerprint("other", {"a": 1})


def test_unwritable_cache_is_ignored(points_file: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = points_file.parent / "not-a-dir"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("PDAG_CACHE_DIR", str(blocker))
    out, err = _run(capsys, str(points_file), "--no-loo")
    assert "points" in out and NOTE not in err
