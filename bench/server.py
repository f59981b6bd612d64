"""Benchmark: each MCP tool over a real stdio connection, then a loopback HTTP load test.

Prints the median round-trip time (client call to parsed result, warm server) and the size of the default
(detail="summary") answer in tokens, counted as characters / 4 of the text the model reads (server.schemas),
the sizes of tools/list and resources/list, and a bounded load test over streamable HTTP on 127.0.0.1
(20 clients x 50 calls): throughput, p50/p99 latency, errors, and the server's RSS before and after.
Targets: every default answer <= 4,000 tokens; tools/list <= 6,000 tokens; small-plan round trips < 50 ms;
no errors under load.
Run: .venv/bin/python -m bench.server [--repeats N] [--clients 20 --calls 50]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from server.schemas import tokens as token_count

ROOT = Path(__file__).resolve().parent.parent
TOKEN_TARGET = 4000
TOOLS_LIST_TARGET = 6000
SMALL_MS_TARGET = 50.0
LOAD_CALLS = [("lookup_rule", {"rule_id": "TP-HEADS-DIVISIBLE"}),
              ("validate_dag", {"plan": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}}),
              ("estimate_performance", {"plan": {"model": "llama-3.1-8b",
                                                 "hardware": {"gpu": "h100-sxm", "num_gpus": 1}}}),
              ("lookup_rule", {"query": "expert parallel all-to-all", "limit": 3})]

PLANS = {
    "llama-3.1-8b / 1x h100-sxm": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}},
    "deepseek-v3 / 64x h200 (dp4 pp2 tp8 ep8)": {
        "model": "deepseek-v3",
        "hardware": {"gpu": "h200", "num_gpus": 64},
        "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8},
    },
}
IMPORTS = {"llama-3.1-8b": "vllm serve meta-llama/Llama-3.1-8B-Instruct",
           "deepseek-v3": "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dp 16 "
                          "--enable-dp-attention --ep 16 --nnodes 2"}
LOOKUPS = {"by id": {"rule_id": "TP-HEADS-DIVISIBLE"}, "by query, limit 10": {"query": "expert parallel all-to-all"}}


def calls(plan: dict[str, Any], names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    out = [(n, {"plan": plan}) for n in ("build_dag", "validate_dag", "autofix_dag", "estimate_performance")
           if n in names]
    if "search_strategies" in names:
        out.append(("search_strategies", {"model": plan["model"], "hardware": plan["hardware"]}))
    if "export_plan" in names:
        out.append(("export_plan", {"plan": plan, "engine": "vllm"}))
    if "import_deployment" in names:
        out.append(("import_deployment", {"command": IMPORTS[plan["model"]], "gpu": plan["hardware"]["gpu"]}))
    return out


def text_of(result: Any) -> str:
    return "".join(getattr(b, "text", "") for b in result.content)


async def timed(c: Client, name: str, args: dict[str, Any], repeats: int) -> tuple[float, int, bool]:
    r = await c.call_tool(name, args)  # warm-up (imports, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = await c.call_tool(name, args)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), token_count(text_of(r)), bool(r.is_error)


async def run(repeats: int) -> int:
    params = StdioServerParameters(command=sys.executable, args=["-m", "server"], cwd=str(ROOT),
                                   env={"PYTHONPATH": str(ROOT)})
    failures = 0
    async with Client(params, read_timeout_seconds=120) as c:
        names = [t.name for t in (await c.list_tools()).tools]
        missing = [n for n in ("build_dag", "validate_dag", "autofix_dag", "estimate_performance", "lookup_rule",
                               "search_strategies") if n not in names]
        print(f"pdag MCP server over stdio; median of {repeats} warm calls; tokens = chars/4 of the default answer")
        print(f"{'deployment':<42} {'tool':<22} {'round trip':>11} {'tokens':>7}  status")
        for label, plan in PLANS.items():
            small = plan["hardware"]["num_gpus"] == 1
            for name, args in calls(plan, names):
                ms, tokens, err = await timed(c, name, args, repeats)
                ok = tokens <= TOKEN_TARGET and (not small or ms < SMALL_MS_TARGET) and not err
                failures += not ok
                status = "ok" if ok else ("tool error" if err else "OVER TARGET")
                print(f"{label:<42} {name:<22} {ms:>8.1f} ms {tokens:>7}  {status}")
        for label, args in LOOKUPS.items():
            ms, tokens, err = await timed(c, "lookup_rule", args, repeats)
            ok = tokens <= TOKEN_TARGET and ms < SMALL_MS_TARGET and not err
            failures += not ok
            print(f"{'lookup_rule ' + label:<42} {'lookup_rule':<22} {ms:>8.1f} ms {tokens:>7}  "
                  f"{'ok' if ok else 'OVER TARGET'}")
        listing = (await c.list_tools()).model_dump_json(by_alias=True, exclude_none=True)
        resources = (await c.list_resources()).model_dump_json(by_alias=True, exclude_none=True)
        list_tokens = token_count(listing)
        failures += list_tokens > TOOLS_LIST_TARGET
        verdict = "ok" if list_tokens <= TOOLS_LIST_TARGET else "OVER TARGET"
        print(f"tools/list: {len(names)} tools, {list_tokens} tokens (target <= {TOOLS_LIST_TARGET}: {verdict}); "
              f"resources/list {token_count(resources)} tokens")
    if missing:
        print("not registered yet (core function missing): " + ", ".join(missing))
    print(f"targets: <= {TOKEN_TARGET} tokens per default answer; small-plan round trips < {SMALL_MS_TARGET:g} ms")
    return 1 if failures else 0


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc), 0 where unavailable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_client(url: str, calls: int, offset: int, latencies: list[float], errors: list[str]) -> None:
    async with Client(url) as c:
        for i in range(calls):
            name, args = LOAD_CALLS[(offset + i) % len(LOAD_CALLS)]
            t0 = time.perf_counter()
            try:
                r = await c.call_tool(name, args)
                if r.is_error:
                    errors.append(f"{name}: {text_of(r)[:120]}")
            except Exception as exc:  # noqa: BLE001 - a load test counts every failure, whatever its kind
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
            latencies.append((time.perf_counter() - t0) * 1000)


async def load(clients: int, calls: int) -> int:
    """`clients` concurrent sessions over streamable HTTP on loopback, `calls` tool calls each."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--http", "--port", str(port)], cwd=str(ROOT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ,
                                                                                    "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stderr is not None
        started = proc.stderr.readline().decode()
        if "listening" not in started:
            print(f"HTTP server did not start: {started}{proc.stderr.read().decode()[-500:]}")
            return 1
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(url) as warm:  # imports and caches, so "before" is a warm, idle server
            for name, args in LOAD_CALLS:
                await warm.call_tool(name, args)
        before = rss_bytes(proc.pid)
        latencies: list[float] = []
        errors: list[str] = []
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for k in range(clients):
                tg.start_soon(one_client, url, calls, k, latencies, errors)
        wall = time.perf_counter() - t0
        after = rss_bytes(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    print(f"load over HTTP loopback: {clients} clients x {calls} calls = {len(lat)} calls in {wall:.1f} s: "
          f"{len(lat) / wall:.0f} calls/s, p50 {statistics.median(lat):.0f} ms, p99 {p99:.0f} ms, "
          f"errors {len(errors)}; server RSS {before / 1e6:.0f} MB before, {after / 1e6:.0f} MB after")
    for e in errors[:5]:
        print(f"  error: {e}")
    return 1 if errors else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--calls", type=int, default=50, help="tool calls per client in the load test")
    args = p.parse_args(argv)
    code = anyio.run(run, args.repeats)
    return code | anyio.run(load, args.clients, args.calls)


if __name__ == "__main__":
    raise SystemExit(main())
