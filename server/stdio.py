"""stdio transport that answers every malformed message with the JSON-RPC error the spec names.

The SDK's stdio reader drops a line it cannot validate (a wrong `jsonrpc`, an id of the wrong type, params
given as a list, nesting past ~200 levels, a lone surrogate), so a client that sent an id waits forever.
This transport screens each line first: a well-formed message goes on to the SDK untouched; anything else
gets -32700 (parse error), -32600 (invalid request) or -32602 (invalid params) on stdout, and the server
reads the next line. JSON-RPC 2.0: when the id cannot be read from a bad request, the answer's id is null.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR

from tools.core.errors import PdagInputError
from tools.core.inputs import MAX_INT_DIGITS, check_json_value

MAX_LINE_BYTES = 256 * 1024 * 1024  # above the largest DAG the server builds (see server.http.MAX_BODY_BYTES)


class _HugeInt(str):
    """An integer literal too long to convert: kept as text so the message's id can still be answered."""


def _parse_int(text: str) -> int | _HugeInt:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else _HugeInt(text)


class _ConstantError(ValueError):
    """NaN or Infinity: Python's own JSON writer emits them, JSON does not allow them."""


def _no_constant(name: str) -> Any:
    raise _ConstantError(f"{name} is not valid JSON")


def _error(msg_id: Any, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
    return (json.dumps(body, separators=(",", ":")) + "\n").encode("utf-8")


def _find_huge(value: Any, path: str) -> str | None:
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, _HugeInt):
            return where
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_ID_SCAN_CHARS = 1 << 20


def _top_level_id(text: str) -> str | int | None:
    """The id of a message that cannot be parsed whole (too deep, or NaN/Infinity inside), read from its
    top-level object (within the first MiB), so the client waiting on it gets its answer; None when it cannot be
    read."""
    depth = 0
    decoder = json.JSONDecoder()
    for token in _TOKENS.finditer(text, 0, min(len(text), _ID_SCAN_CHARS)):
        t = token.group()
        if t in "{[":
            depth += 1
        elif t in "}]":
            depth -= 1
        elif depth == 1 and t == '"id"':
            rest = text[token.end():token.end() + 200].lstrip()
            if rest.startswith(":"):
                try:
                    value, _ = decoder.raw_decode(rest[1:].lstrip())
                except ValueError:
                    return None
                ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
                return value if ok else None
    return None


def screen(line: bytes) -> bytes | None:
    """None when ``line`` may go to the SDK; otherwise the JSON-RPC error line to answer (or b"" for a bad
    notification, which gets no answer)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(None, PARSE_ERROR, f"Parse error: not UTF-8 (byte {exc.start})")
    try:
        msg = json.loads(text, parse_int=_parse_int, parse_constant=_no_constant)
    except RecursionError:
        return _error(_top_level_id(text), PARSE_ERROR, "Parse error: nested too deeply")
    except _ConstantError as exc:  # the rest of the line is JSON, so its id can still be answered
        return _error(_top_level_id(text), PARSE_ERROR, f"Parse error: {exc}")
    except ValueError as exc:
        return _error(None, PARSE_ERROR, f"Parse error: {exc}")
    if not isinstance(msg, dict):
        kind = "a batch (array)" if isinstance(msg, list) else type(msg).__name__
        return _error(None, INVALID_REQUEST, f"Invalid request: expected one JSON-RPC object, got {kind}")
    has_id = "id" in msg
    msg_id = msg.get("id")
    id_ok = isinstance(msg_id, str | int) and not isinstance(msg_id, bool | _HugeInt)
    if has_id and not id_ok:
        return _error(None, INVALID_REQUEST, "Invalid request: id must be a string or an integer")
    answer_id = msg_id if has_id else None
    try:  # a lone surrogate in the envelope (id, method) makes the SDK drop the line unanswered
        check_json_value({k: v for k, v in msg.items() if k != "params"}, "message")
    except PdagInputError as exc:
        return b"" if not has_id else _error(answer_id, INVALID_REQUEST, f"Invalid request: {exc}")
    if msg.get("jsonrpc") != "2.0":
        return _error(answer_id, INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"')
    if "method" not in msg and ("result" in msg or "error" in msg) and has_id:
        return None  # a response to a request of ours
    method = msg.get("method")
    if not isinstance(method, str) or not method:
        return _error(answer_id, INVALID_REQUEST, 'Invalid request: "method" must be a non-empty string')
    if "params" in msg and not isinstance(msg["params"], dict):
        if not has_id:
            return b""
        return _error(answer_id, INVALID_PARAMS, 'Invalid params: "params" must be an object')
    huge = _find_huge(msg.get("params"), "params")
    if huge is not None:
        return b"" if not has_id else _error(answer_id, INVALID_PARAMS,
                                            f"Invalid params: {huge}: integer longer than {MAX_INT_DIGITS} digits")
    try:
        check_json_value(msg.get("params"), "params")
    except PdagInputError as exc:
        return b"" if not has_id else _error(answer_id, INVALID_PARAMS, f"Invalid params: {exc}")
    return None


class _LineWriter:
    """The one writer of the wire: whole lines under a lock, so SDK answers and ours never interleave."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._lock = anyio.Lock()

    def _put(self, data: bytes) -> None:
        self._out.write(data)  # a buffered writer writes all of it, however large, then flushes
        self._out.flush()

    async def write(self, text: str) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._put, text.encode("utf-8"))

    async def write_bytes(self, data: bytes) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self._put, data)

    async def flush(self) -> None:
        """Each write already flushed its whole line."""


class _ScreenedLines:
    """Async iterator over stdin lines that only yields well-formed messages; answers the others."""

    def __init__(self, source: BinaryIO, writer: _LineWriter) -> None:
        self._source = source
        self._writer = writer

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self._source.readline, MAX_LINE_BYTES + 1, abandon_on_cancel=True)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                await self._drain_long_line()
                await self._answer(_error(None, PARSE_ERROR, f"Parse error: message over {MAX_LINE_BYTES:,} bytes"))
                continue
            if not line.strip():
                continue
            verdict = screen(line)
            if verdict is None:
                yield line.decode("utf-8")
            elif verdict:
                await self._answer(verdict)

    async def _drain_long_line(self) -> None:
        while True:
            rest = await anyio.to_thread.run_sync(self._source.readline, 1 << 20, abandon_on_cancel=True)
            if not rest or rest.endswith(b"\n"):
                return

    async def _answer(self, data: bytes) -> None:
        await self._writer.write_bytes(data)


async def serve_stdio(server: MCPServer) -> None:
    """Run ``server`` over this process's stdin/stdout with screened input.

    fd 1 is pointed at stderr while serving (the wire keeps a private duplicate), so a stray print in a
    handler cannot corrupt the protocol stream."""
    wire = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    writer = _LineWriter(wire)
    reader = _ScreenedLines(sys.stdin.buffer, writer)
    lowlevel = server._lowlevel_server  # noqa: SLF001 - the SDK exposes no public way to run on given streams
    async with stdio_server(stdin=reader, stdout=writer) as (read_stream, write_stream):  # type: ignore[arg-type]
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
