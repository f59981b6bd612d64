"""The house's floors hold: the import contract in pyproject.toml is kept, and no module takes a private name
from another (what two modules share is promoted to a public name, or lives where both can reach it)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tools", "server", "evals", "bench", "knowledge", "prompts")


def _private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``from a.b import _x`` anywhere in the file (function-local imports included), ``__future__`` aside."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            out += [f"{path.relative_to(root)}:{node.lineno} {node.module}.{a.name}"
                    for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_private_name_crosses_a_module() -> None:
    found = [hit for pkg in PACKAGES for f in sorted((ROOT / pkg).rglob("*.py")) for hit in _private_imports(f)]
    assert found == []


def test_the_scanner_sees_a_private_import(tmp_path: Path) -> None:
    f = tmp_path / "probe.py"
    f.write_text("def g():\n    from tools.core.build import _hidden\n", encoding="utf-8")
    assert _private_imports(f, tmp_path) == ["probe.py:2 tools.core.build._hidden"]


def test_import_contract_is_kept_and_catches_an_upward_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract holds today, and a core module importing the estimator breaks it (it is not vacuous)."""
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    assert lint_imports(no_cache=True, no_logo=True) == 0
    probe = ROOT / "tools" / "core" / "_probe_upward.py"
    try:
        probe.write_text("import tools.estimate.core  # noqa: F401\n", encoding="utf-8")
        assert lint_imports(no_cache=True, no_logo=True) == 1
    finally:
        probe.unlink()


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


@pytest.mark.parametrize("module", _modules())
def test_every_module_imports(module: str) -> None:
    """A module nobody's test imports (a benchmark, a script) still loads: a move cannot leave it behind."""
    importlib.import_module(module)
