"""pdag's server as a real subprocess, for the tests that drive it over a transport (stdio, streamable HTTP), and
the rule for client packages that are optional locally but required in CI."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `.ci/run` sets this: there a missing interop client is a failure, not a skip, so a broken install cannot pass
# CI as "skipped".
REQUIRE_INTEROP = os.environ.get("PDAG_REQUIRE_INTEROP") == "1"
SERVER_ARGS = ["-m", "server"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*flags: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, str]:
    """A server on a free loopback port; returns it, its URL and the start-up line it printed."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, *SERVER_ARGS, "--http", "--port", str(port), *flags], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()  # the start-up line comes once the socket listens
    if proc.poll() is not None or "listening" not in line:
        raise RuntimeError(line + proc.stderr.read().decode())
    return proc, f"http://127.0.0.1:{port}/mcp", line


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextmanager
def http_server() -> Iterator[str]:
    """The URL of a streamable-HTTP server that lives as long as the block."""
    proc, url, _ = start()
    try:
        yield url
    finally:
        stop(proc)


def interop_client(module: str) -> ModuleType:
    """``module`` imported; when it is missing, a skip locally and a failure in CI (PDAG_REQUIRE_INTEROP=1)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing(f"{module} is not installed ({e}); pip install -e '.[interop]'")


def missing(reason: str) -> NoReturn:
    """Skip (locally) or fail (in CI) for a client that is not there."""
    if REQUIRE_INTEROP:
        pytest.fail(f"PDAG_REQUIRE_INTEROP=1 but {reason}")
    pytest.skip(reason)
