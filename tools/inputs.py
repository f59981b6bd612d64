"""Limits every JSON-like input passes before the core reads it: nesting depth, text, numbers.

Pydantic checks the fields it knows; these limits cover what it cannot: a value nested thousands of levels
deep (recursion errors while serialising), a lone UTF-16 surrogate (valid in Python, unencodable in JSON
answers), a non-finite float or an integer with thousands of digits (Python refuses to print those). Every
refusal is a PdagInputError that names the JSON path of the first offending value.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tools.errors import PdagInputError

MAX_DEPTH = 64  # a plan is ~4 levels deep, a DAG ~5; hf_config values rarely go beyond 6
MAX_INT_DIGITS = 30  # enough for any byte count or FLOP figure; Python's str() refuses above 4,300
MAX_ITEMS = 2_000_000  # values walked in one document (a 250k-node DAG has about 2M)


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _join(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def check_json_value(value: Any, field: str) -> None:
    """Raise PdagInputError for the first value under ``field`` that breaks a limit; walks iteratively."""
    stack: list[tuple[Any, str, int]] = [(value, field, 0)]
    seen = 0
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise PdagInputError(field, f"more than {MAX_ITEMS:,} values", f"at most {MAX_ITEMS:,} values")
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise PdagInputError(path, f"{item} is not a finite number", "finite numbers")
            continue
        if isinstance(item, int):
            if abs(item) >= 10**MAX_INT_DIGITS:
                raise PdagInputError(path, "integer too large", f"at most {MAX_INT_DIGITS} digits")
            continue
        if isinstance(item, str):
            if _has_lone_surrogate(item):
                raise PdagInputError(path, "text holds a lone UTF-16 surrogate (not valid Unicode)",
                                     "valid UTF-8 text")
            continue
        if isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                where = path if len(path) <= 80 else path[:80] + "..."
                raise PdagInputError(where, f"nested more than {MAX_DEPTH} levels deep",
                                     f"at most {MAX_DEPTH} levels of objects and lists")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, sub in pairs:
                if isinstance(key, str) and _has_lone_surrogate(key):
                    raise PdagInputError(path, "a key holds a lone UTF-16 surrogate (not valid Unicode)",
                                         "valid UTF-8 text")
                stack.append((sub, _join(path, key), depth + 1))


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer longer than {MAX_INT_DIGITS} digits")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json_text(text: str, field: str) -> Any:
    """Parse JSON text under the limits above; every failure is a PdagInputError naming ``field``."""
    try:
        value = json.loads(text, parse_int=_parse_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise PdagInputError(field, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                             "a JSON document") from None
    except RecursionError:
        raise PdagInputError(field, "JSON nested too deeply", f"at most {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise PdagInputError(field, f"not valid JSON ({exc})", "a JSON document") from None
    check_json_value(value, field)
    return value
