"""Malformed JSON-RPC over a real stdio pipe: every request gets the error code the spec names, and the
server keeps serving (JSON-RPC 2.0: an id that cannot be read from a bad request is answered as null)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from server.stdio import screen

ROOT = Path(__file__).resolve().parent.parent
INIT = {"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
DEEP = "[" * 300 + "]" * 300
VERY_DEEP = "[" * 5000 + "]" * 5000

# (line, expected id of the answer, expected code); None code = a normal answer
CASES: list[tuple[bytes, object, int | None]] = [
    (b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":["a"]}', 2, -32602),
    (('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"lookup_rule","arguments":{"query":'
      + DEEP + "}}}").encode(), 3, -32602),
    (('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"lookup_rule","arguments":{"query":'
      + VERY_DEEP + "}}}").encode(), 4, -32700),
    (("[" * 5000 + "]" * 5000).encode(), None, -32700),
    (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"lookup_rule","arguments":'
     b'{"query":"\\ud800"}}}', 5, -32602),
    (b'{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}', "\ud800", -32600),  # echoed as sent
    (b'{"jsonrpc":"2.0","id":14,"method":"tools/\\udc00"}', 14, -32600),
    (b'{"jsonrpc":"1.0","id":6,"method":"tools/list"}', 6, -32600),
    (b'{"jsonrpc":"2.0","id":7,"method":7}', 7, -32600),
    (b'{"jsonrpc":"2.0","id":8}', 8, -32600),
    (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', None, -32600),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', None, -32600),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', None, -32600),
    (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', None, -32600),
    (b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"lookup_rule","arguments":{"limit":'
     + b"9" * 5000 + b"}}}", 9, -32602),
    (b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"lookup_rule","arguments":{"limit":NaN}}}',
     10, -32700),
    (b"{not json", None, -32700),
    (b"\xff\xfe\x00garbage", None, -32700),
    (b"[]", None, -32600),
    (b'[{"jsonrpc":"2.0","id":11,"method":"tools/list"}]', None, -32600),
    (b'"just a string"', None, -32600),
    (b'{"jsonrpc":"2.0","id":12,"method":"no/such/method"}', 12, -32601),
    (b'{"jsonrpc":"2.0","id":13,"method":"tools/list"}', 13, None),  # still serving after all of the above
]


def test_screen_passes_well_formed_messages() -> None:
    assert screen(json.dumps(INIT).encode()) is None
    assert screen(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') is None
    assert screen(b'{"jsonrpc":"2.0","id":1,"result":{}}') is None  # a response to the server
    assert screen(b'{"jsonrpc":"2.0","method":"notifications/x","params":[1]}') == b""  # bad notification: no answer


def test_a_lone_surrogate_id_is_answered_with_the_id_as_sent() -> None:
    """The SDK drops such a line, so without the screen the client would wait forever."""
    answer = screen(b'{"jsonrpc":"2.0","id":"a\\ud800","method":"tools/list"}')
    assert answer is not None and b'"id":"a\\ud800"' in answer
    assert json.loads(answer)["error"]["code"] == -32600


def exchange(lines: list[bytes], answers: int) -> tuple[list[dict], bytes]:
    """Write ``lines`` to a fresh server, read ``answers`` lines back (stdin stays open meanwhile, as a client
    keeps it), then close stdin and collect stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "server"], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin and proc.stdout
    proc.stdin.write(b"\n".join(lines) + b"\n")
    proc.stdin.flush()
    watchdog = threading.Timer(120, proc.kill)  # a missing answer fails the test instead of hanging it
    watchdog.start()
    try:
        got = [json.loads(proc.stdout.readline() or b"null") for _ in range(answers)]
        _, err = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
    return got, err


def test_every_malformed_request_is_answered_over_stdio() -> None:
    lines = [json.dumps(INIT).encode(), b'{"jsonrpc":"2.0","method":"notifications/initialized"}']
    lines += [line for line, _, _ in CASES]
    answers, err = exchange(lines, 1 + len(CASES))
    assert answers[0]["id"] == "init" and "result" in answers[0]
    rest = answers[1:]
    assert None not in rest, "the server stopped answering"
    for (line, want_id, want_code), got in zip(CASES, rest, strict=True):
        assert got["jsonrpc"] == "2.0"
        assert got["id"] == want_id, (line[:80], got)
        if want_code is None:
            assert "result" in got and got["result"]["tools"], got
        else:
            assert got["error"]["code"] == want_code, (line[:80], got)
            assert got["error"]["message"]
    assert b"Traceback" not in err


@pytest.mark.parametrize("line", [b"", b"   ", b"\r"])
def test_blank_lines_are_ignored(line: bytes) -> None:
    answers, _ = exchange([line, json.dumps(INIT).encode(), b'{"jsonrpc":"2.0","id":"x","method":"tools/list"}'], 2)
    assert [a["id"] for a in answers] == ["init", "x"]


@pytest.mark.parametrize("constant", ["Infinity", "-Infinity", "NaN"])
def test_nan_or_infinity_is_a_parse_error_that_keeps_the_id(constant: str) -> None:
    """Python's json.dumps writes these for floats; JSON does not allow them. The rest of the line is JSON, so the
    client still gets an answer to its id (found by the stdio fuzz test)."""
    line = f'{{"jsonrpc": "2.0", "id": 10000, "method": "tools/list", "params": {constant}}}'.encode()
    answer = json.loads(screen(line))
    assert answer["id"] == 10000 and answer["error"]["code"] == -32700 and constant in answer["error"]["message"]
