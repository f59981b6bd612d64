"""Streamable HTTP on loopback in a subprocess: the client works, forged Host/Origin are refused."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import httpx2
import pytest
from mcp import Client

from server.http import MAX_BODY_BYTES
from tests.servers import ROOT, start, stop
from tools.core.build import build_full_dag
from tools.core.dag import MAX_NODES

pytestmark = pytest.mark.anyio

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}}
BIG = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 64},
       "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def http_server():
    proc, url, line = start()
    assert url in line
    yield url
    stop(proc)
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


async def test_body_limit_is_a_json_rpc_error_and_fits_the_largest_dag():
    proc, url, _ = start("--max-body-bytes", "4096")
    try:
        async with httpx2.AsyncClient(timeout=30) as h:
            r = await h.post(url, content=json.dumps({**INIT, "pad": "x" * 5000}), headers=HEADERS)
        assert r.status_code == 413
        body = r.json()
        assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600 and "4,096" in body["error"]["message"]
    finally:
        stop(proc)
    assert MAX_BODY_BYTES >= MAX_NODES * 400  # room for the node-link JSON of the largest DAG pdag builds


async def test_full_dag_of_a_64_gpu_deepseek_plan_goes_back_to_validate_over_http(http_server):
    dag = build_full_dag(BIG)  # every replica and layer drawn, as a client that expanded it would send it
    assert len(json.dumps(dag)) > 4 * 1024 * 1024  # over the SDK's default body limit
    async with Client(http_server) as c:
        r = await c.call_tool("validate_dag", {"dag": dag})
    assert not r.is_error, r.content[0].text
    assert r.structured_content["error_count"] == 0


async def test_bearer_token_and_idle_sessions_expire():
    token = "t" * 24
    proc, url, line = start("--session-idle-timeout", "1", env={"PDAG_AUTH_TOKEN": token})
    try:
        assert "bearer token" in line and "1 s idle" in line
        async with httpx2.AsyncClient(timeout=30) as h:
            r = await h.post(url, json=INIT, headers=HEADERS)
            assert r.status_code == 401 and r.json()["error"]["code"] == -32001
            assert r.headers["www-authenticate"] == "Bearer"
            wrong = await h.post(url, json=INIT, headers={**HEADERS, "Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            auth = {**HEADERS, "Authorization": f"Bearer {token}"}
            ok = await h.post(url, json=INIT, headers=auth)
            assert ok.status_code == 200
            session = {**auth, "mcp-session-id": ok.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            assert (await h.post(url, json=listing, headers=session)).status_code == 200
            await anyio.sleep(2.5)
            expired = await h.post(url, json=listing, headers=session)
            assert expired.status_code == 404
    finally:
        stop(proc)


def test_non_loopback_without_auth_warns_loudly():
    # 192.0.2.1 (TEST-NET-1) is on no interface here: the warning comes first, then a one-line bind error.
    out = subprocess.run([sys.executable, "-m", "server", "--http", "--host", "192.0.2.1", "--allow-remote",
                          "--allowed-host", "pdag.example:8000"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert "WARNING" in out.stderr and "WITHOUT authentication" in out.stderr and "Traceback" not in out.stderr
    assert out.returncode == 1 and "cannot listen on 192.0.2.1" in out.stderr
    short = subprocess.run([sys.executable, "-m", "server", "--http", "--auth-token", "short"], cwd=ROOT,
                           capture_output=True, text=True, timeout=30)
    assert short.returncode == 2 and "--auth-token" in short.stderr
