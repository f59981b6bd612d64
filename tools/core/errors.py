"""The one error type pdag raises for bad input, plus a helper for "did you mean" hints."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["PdagInputError", "closest", "shown"]

MAX_SHOWN = 80  # characters of a bad value echoed back in an error
MAX_MATCHED = 100  # characters of a name compared when looking for close candidates (difflib is quadratic)


class PdagInputError(ValueError):
    """Bad user input.

    ``field`` is a dotted / JSON path to the offending value (``plan.model``, ``parallel.tp``,
    ``hf_config.num_attention_heads``), ``problem`` says what is wrong with it, and ``allowed``
    (optional) says what would be accepted.
    """

    def __init__(self, field: str, problem: str, allowed: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.field}: {self.problem}"
        if self.allowed:
            text += f". Allowed: {self.allowed}"
        return text


def shown(value: object) -> str:
    """A bad value as an error message quotes it: its repr, cut to MAX_SHOWN characters with its length said."""
    text = str(value)
    if len(text) <= MAX_SHOWN:
        return repr(text)
    return f"{text[:MAX_SHOWN]!r}... ({len(text):,} characters)"


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` candidates closest to ``name`` (difflib, on its first MAX_MATCHED characters); the first ``n``
    sorted if none is close."""
    pool = sorted(set(candidates))
    matches = difflib.get_close_matches(str(name)[:MAX_MATCHED].lower(), pool, n=n, cutoff=0.4)
    return matches if matches else pool[:n]
