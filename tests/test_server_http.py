"""Streamable HTTP on loopback in a subprocess: the client works, forged Host/Origin are refused."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_server():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--http", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    assert proc.stdout.read() == b""  # nothing but the protocol, and HTTP has none on stdout: logs go to stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_client(http_server, mode):
    async with Client(http_server, mode=mode) as c:
        assert "build_dag" in [t.name for t in (await c.list_tools()).tools]
        r = await c.call_tool("lookup_rule", {"rule_id": "pp-linear-chain"})
        assert not r.is_error and r.structured_content["rules"][0]["id"] == "PP-LINEAR-CHAIN"


async def test_dns_rebinding_is_refused(http_server):
    async with httpx2.AsyncClient(timeout=10) as h:
        ok = await h.post(http_server, json=INIT, headers=HEADERS)
        assert ok.status_code == 200
        host = await h.post(http_server, json=INIT, headers={**HEADERS, "Host": "evil.example"})
        assert host.status_code == 421
        origin = await h.post(http_server, json=INIT, headers={**HEADERS, "Origin": "http://evil.example"})
        assert origin.status_code == 403


def test_non_loopback_bind_is_refused():
    out = subprocess.run([sys.executable, "-m", "server", "--http", "--host", "0.0.0.0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--allow-remote" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "server", "--http", "--host", "0.0.0.0", "--allow-remote"],
                         cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--allowed-host" in out.stderr
