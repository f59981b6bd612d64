"""The launch flags each engine release accepts, read from the tables ``scripts/extract_flags.py`` wrote from the
release's source (``knowledge/engines/flags/``), and a checker for exported commands.

Export spells its flags as the table of the chosen release does and checks every command it writes against it,
so a flag an engine renamed or dropped is caught in pdag's tests rather than at launch.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from knowledge import ROOT as KNOWLEDGE_ROOT
from tools.core.errors import PdagInputError

__all__ = ["FlagTable", "check_argv", "default_version", "flag_table", "versions"]

FLAGS_DIR = KNOWLEDGE_ROOT / "engines" / "flags"


class FlagTable(BaseModel):
    engine: str
    version: str
    source: str
    flags: dict[str, dict[str, Any]]

    def canonical(self, flag: str) -> str | None:
        """The table's name for ``flag`` (itself, or the flag it is a declared alias of; vLLM's ``--no-X`` form of
        a negatable switch maps to ``--X``)."""
        if flag in self.flags:
            return flag
        return _aliases(self.engine, self.version).get(flag)

    def has(self, flag: str) -> bool:
        return self.canonical(flag) is not None


@lru_cache(maxsize=1)
def _index() -> dict[str, Any]:
    with open(FLAGS_DIR / "index.json", encoding="utf-8") as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def versions(engine: str) -> list[str]:
    """The releases of ``engine`` with a flag table."""
    return sorted(_index().get(engine, {}).get("versions", {}))


def default_version(engine: str) -> str:
    return str(_index()[engine]["default"])


@lru_cache(maxsize=16)
def flag_table(engine: str, version: str | None = None) -> FlagTable:
    """The flag table of ``engine`` at ``version`` (default: the current release in the index)."""
    entry = _index().get(engine)
    if entry is None:
        raise PdagInputError("engine", f"no flag table for engine {engine!r}", ", ".join(sorted(_index())))
    version = version or entry["default"]
    if version not in entry["versions"]:
        raise PdagInputError("engine_version", f"no flag table for {engine} {version!r}",
                             ", ".join(sorted(entry["versions"])))
    with open(FLAGS_DIR / entry["versions"][version], encoding="utf-8") as f:
        data = json.load(f)
    return FlagTable(engine=engine, version=version, source=data["source"], flags=data["flags"])


@lru_cache(maxsize=16)
def _aliases(engine: str, version: str) -> dict[str, str]:
    table = flag_table(engine, version)
    out: dict[str, str] = {}
    for name, entry in table.flags.items():
        for alias in entry.get("aliases", []):
            out[alias] = name
        if entry.get("negatable") and name.startswith("--"):
            out["--no-" + name[2:]] = name
    return out


# entry points whose arguments are not the engine's flags (launchers and the engine's own command words)
_ENTRY = {"vllm": ("serve",), "sglang": ("sglang.launch_server",), "trtllm": ("trtllm-serve",)}


def _server_args(engine: str, argv: list[str]) -> list[str]:
    """The server's own arguments in ``argv``: after the entry point (and the positional model where the engine
    takes one), skipping environment assignments and launchers (mpirun, trtllm-llmapi-launch)."""
    for i, tok in enumerate(argv):
        if tok in _ENTRY[engine] or tok.split("/")[-1] in _ENTRY[engine]:
            rest = argv[i + 1:]
            if engine in ("vllm", "trtllm") and rest and not rest[0].startswith("-"):
                rest = rest[1:]
            return rest
    raise PdagInputError("argv", f"no {engine} entry point in {argv[:4]}", " ".join(_ENTRY[engine]))


def _value_problem(flag: str, entry: dict[str, Any], value: str) -> str | None:
    kind = entry.get("kind")
    if kind == "int":
        try:
            int(value)
        except ValueError:
            return f"{flag} takes an integer, got {value!r}"
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            return f"{flag} takes a number, got {value!r}"
    elif kind == "choice" and value not in entry.get("choices", []):
        return f"{flag} {value!r} is not one of {entry.get('choices')}"
    elif kind == "json":
        try:
            json.loads(value)
        except json.JSONDecodeError:
            return f"{flag} takes JSON, got {value!r}"
    return None


def check_argv(engine: str, argv: list[str], version: str | None = None) -> list[str]:
    """Problems of one server's argument list against the release's flag table (empty: every flag is declared
    under its full name, switches take no value and every value parses as the flag's kind)."""
    table = flag_table(engine, version)
    args = _server_args(engine, argv)
    problems: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if not tok.startswith("-"):
            problems.append(f"stray argument {tok!r}")
            i += 1
            continue
        flag, eq, inline = tok.partition("=")
        name = table.canonical(flag)
        if name is None:
            problems.append(f"{flag} is not a flag of {engine} {table.version}")
            i += 1
            continue
        entry = table.flags[name]
        if entry.get("kind") == "deprecated":
            problems.append(f"{flag} is deprecated in {engine} {table.version}")
        if entry.get("kind") in ("bool", "deprecated"):
            if eq:
                problems.append(f"{flag} is a switch and takes no value")
            i += 1
            continue
        if entry.get("kind") == "list":
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                i += 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 2
        else:
            problems.append(f"{flag} has no value")
            break
        problem = _value_problem(flag, entry, value)
        if problem:
            problems.append(problem)
    return problems
