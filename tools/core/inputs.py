"""Limits every JSON-like input passes before the core reads it: nesting depth, text, numbers; and the one
reader of JSON text and files (size cap, encoding, special files) the CLI, calibration and prompts share.

Pydantic checks the fields it knows; these limits cover what it cannot: a value nested thousands of levels
deep (recursion errors while serialising), a lone UTF-16 surrogate (valid in Python, unencodable in JSON
answers), a non-finite float or an integer with thousands of digits (Python refuses to print those). Every
refusal is a PdagInputError that names the JSON path of the first offending value.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import stat
import sys
from typing import Any

from tools.core.errors import PdagInputError

MAX_DEPTH = 64  # a plan is ~4 levels deep, a DAG ~5; hf_config values rarely go beyond 6
MAX_INT_DIGITS = 30  # enough for any byte count or FLOP figure; Python's str() refuses above 4,300
_INT_LIMIT = 10**MAX_INT_DIGITS


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _path(field: str, trail: Any) -> str:
    keys = []
    while trail is not None:
        key, trail = trail
        keys.append(key)
    out = field
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else f".{key}"
    return out


def _clean(container: dict[Any, Any] | list[Any], depth: int) -> bool:
    """True when nothing under ``container`` breaks a limit: the quick pass every accepted document takes (no
    paths kept); anything unusual (tuples, subclasses) answers False and leaves the verdict to the full walk."""
    if depth >= MAX_DEPTH:
        return False
    if type(container) is dict:
        for key in container:
            if type(key) is str and not key.isascii() and _has_lone_surrogate(key):
                return False
        values: Any = container.values()
    else:
        values = container
    for item in values:
        kind = type(item)
        if kind is str:
            if not item.isascii() and _has_lone_surrogate(item):
                return False
        elif kind is dict or kind is list:
            if not _clean(item, depth + 1):
                return False
        elif kind is int:
            if not -_INT_LIMIT < item < _INT_LIMIT:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is None or kind is bool:
            continue
        elif isinstance(item, str):  # str enums (node types): their plain value
            text = str.__str__(item)
            if not text.isascii() and _has_lone_surrogate(text):
                return False
        else:
            return False
    return True


def check_json_value(value: Any, field: str) -> None:
    """Raise PdagInputError for the first value under ``field`` that breaks a limit.  A quick recursive pass
    clears ordinary documents; only when it objects does the iterative walk run (paths are linked tuples,
    spelt out only for the error)."""
    if type(value) in (dict, list) and _clean(value, 0):
        return
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        item, depth, trail = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and _has_lone_surrogate(item):
                raise PdagInputError(_path(field, trail), "text holds a lone UTF-16 surrogate (not valid Unicode)",
                                     "valid UTF-8 text")
        elif kind is int:
            if not -_INT_LIMIT < item < _INT_LIMIT:
                raise PdagInputError(_path(field, trail), "integer too large", f"at most {MAX_INT_DIGITS} digits")
        elif kind is float:
            if not math.isfinite(item):
                raise PdagInputError(_path(field, trail), f"{item} is not a finite number", "finite numbers")
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                where = _path(field, trail)
                where = where if len(where) <= 80 else where[:80] + "..."
                raise PdagInputError(where, f"nested more than {MAX_DEPTH} levels deep",
                                     f"at most {MAX_DEPTH} levels of objects and lists")
            if isinstance(item, dict):
                for key, sub in item.items():
                    if isinstance(key, str) and not key.isascii() and _has_lone_surrogate(key):
                        raise PdagInputError(_path(field, trail), "a key holds a lone UTF-16 surrogate (not valid "
                                             "Unicode)", "valid UTF-8 text")
                    stack.append((sub, depth + 1, (key, trail)))
            else:
                stack.extend((sub, depth + 1, (i, trail)) for i, sub in enumerate(item))
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, str):  # subclasses (str enums, IntEnum...): check their plain value
            stack.append((str.__str__(item), depth, trail))
        elif isinstance(item, int):
            stack.append((int(item), depth, trail))
        elif isinstance(item, float):
            stack.append((float(item), depth, trail))


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


MAX_FILE_BYTES = 128_000_000  # the largest DAG pdag builds as node-link JSON fits (see server.http)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode_text(data: bytes, field: str, name: str) -> str:
    """Bytes as text: UTF-8, or UTF-8/16/32 announced by a byte-order mark; anything else is refused."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise PdagInputError(field, f"{name} starts with a {codec} byte-order mark but is not valid "
                                            f"{codec} (byte {exc.start})", "UTF-8 text") from None
    if b"\x00" in data[:4096]:
        raise PdagInputError(field, f"{name} looks binary (NUL bytes) or is UTF-16 without a byte-order mark",
                             "UTF-8 text (UTF-16 needs a BOM)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PdagInputError(field, f"{name} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                             "UTF-8 text; re-save the file as UTF-8") from None


def read_text_file(path: str, field: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A text file ('-': stdin) read under a size cap; special files (FIFOs, devices) are refused without
    opening them, so `/dev/zero` or a FIFO with no writer never blocks or fills memory."""
    if path == "-":
        data = sys.stdin.buffer.read(max_bytes + 1)
        name = "stdin"
    else:
        name = repr(path)
        try:
            info = os.stat(path)
        except OSError as exc:
            raise PdagInputError(field, f"cannot read {name} ({exc.strerror})", "a readable file or -") from None
        if stat.S_ISDIR(info.st_mode):
            raise PdagInputError(field, f"{name} is a directory", "a file")
        if not stat.S_ISREG(info.st_mode):
            raise PdagInputError(field, f"{name} is not a regular file (a FIFO, device or socket)",
                                 "a regular file, or - to read stdin")
        if info.st_size > max_bytes:
            raise PdagInputError(field, f"{name} is {info.st_size:,} bytes", f"at most {max_bytes:,} bytes")
        try:
            with open(path, "rb") as f:
                data = f.read(max_bytes + 1)
        except OSError as exc:
            raise PdagInputError(field, f"cannot read {name} ({exc.strerror})", "a readable file or -") from None
    if len(data) > max_bytes:
        raise PdagInputError(field, f"{name} is over {max_bytes:,} bytes", f"at most {max_bytes:,} bytes")
    return decode_text(data, field, name)
