"""A result cache for the minutes-long commands (``pdag accuracy``): an answer is reused only when everything it
was computed from is byte-identical: pdag's own code and knowledge, the measurement points and the options.

It lives in the front, not the core: the core stays a pure function, and the cache only saves the wait of
computing that function again on the same input."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from knowledge import ROOT as KNOWLEDGE_ROOT

T = TypeVar("T")
_SOURCES = (Path(__file__).resolve().parents[1], Path(KNOWLEDGE_ROOT))  # tools/ and knowledge/
_SUFFIXES = {".py", ".json", ".md", ".csv", ".toml", ".txt"}


def cache_dir() -> Path:
    """``$PDAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/pdag``, else ``~/.cache/pdag``."""
    if os.environ.get("PDAG_CACHE_DIR"):
        return Path(os.environ["PDAG_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pdag"


def fingerprint(kind: str, inputs: Any) -> str:
    """A digest of the code and knowledge pdag runs with and of ``inputs`` (any JSON value)."""
    h = hashlib.sha256(kind.encode())
    for root in _SOURCES:
        for f in sorted(p for p in root.rglob("*") if p.suffix in _SUFFIXES and "__pycache__" not in p.parts):
            h.update(str(f.relative_to(root.parent)).encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    h.update(json.dumps(inputs, sort_keys=True, default=str).encode())
    return h.hexdigest()


def cached(kind: str, inputs: Any, compute: Callable[[], T], use: bool = True) -> tuple[T, bool]:
    """``compute()``'s value, from the cache when the same code, knowledge and inputs made it before; the flag
    says whether it came from the cache. A cache that cannot be read or written is ignored, never an error."""
    if not use:
        return compute(), False
    path = cache_dir() / kind / f"{fingerprint(kind, inputs)}.pickle"
    try:
        with path.open("rb") as f:
            return pickle.load(f), True
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass
    value = compute()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            pickle.dump(value, f)
        tmp.replace(path)
    except OSError:
        pass
    return value, False
