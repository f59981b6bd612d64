"""The official TypeScript MCP SDK (@modelcontextprotocol/sdk, pinned in tests/interop/ts/package-lock.json)
against the real server over stdio and streamable HTTP: tests/interop/ts/client.mjs lists the tools and calls
three, and prints what it got as JSON. The SDK checks each structuredContent against the tool's outputSchema, so a
call that comes back also passed its check.

`npm ci` in tests/interop/ts is an install step (.ci/run does it), not this test's: without node or the installed
SDK the test skips, except in CI (PDAG_REQUIRE_INTEROP=1).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.servers import ROOT, http_server, missing

TS = ROOT / "tests" / "interop" / "ts"
TOOLS = {"build_dag", "validate_dag", "autofix_dag", "estimate_performance", "lookup_rule", "search_strategies",
         "import_deployment", "export_plan"}


def run_client(*args: str) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        missing("node is not on PATH")
    if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        missing(f"the TypeScript SDK is not installed: run `npm ci` in {TS.relative_to(ROOT)}")
    out = subprocess.run([node, "client.mjs", *args], cwd=TS, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_typescript_sdk(transport):
    if transport == "stdio":
        got = run_client("stdio", sys.executable, str(ROOT))
    else:
        with http_server() as url:
            got = run_client("http", url)
    assert got["server"]["name"] == "pdag"
    assert got["protocolVersion"] == "2025-11-25"  # the SDK's handshake era; pdag serves it beside 2026-07-28
    assert {t["name"] for t in got["tools"]} == TOOLS
    assert all(t["inputType"] == "object" and t["hasOutputSchema"] for t in got["tools"])

    rule, built, report, refused = got["calls"]
    assert not rule["isError"] and [r["id"] for r in rule["structuredContent"]["rules"]] == ["TP-HEADS-DIVISIBLE"]
    assert not built["isError"] and built["structuredContent"]["gpus_used"] == 2
    assert json.loads(built["text"]) == built["structuredContent"]  # the text block is the same answer
    assert not report["isError"] and report["structuredContent"]["valid"] is False
    assert "TP-HEADS-DIVISIBLE" in {v["rule_id"] for v in report["structuredContent"]["violations"]}
    assert refused["isError"] and refused["structuredContent"] is None and "plan.parallel.tp" in refused["text"]
