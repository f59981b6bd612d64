"""Benchmark: each MCP tool over a real stdio connection, for a small and a large deployment.

Prints the median round-trip time (client call to parsed result, warm server) and the size of the default
(detail="summary") answer in tokens, counted as characters / 4 of the text the model reads.
Targets: every default answer <= 4,000 tokens; small-plan round trips < 50 ms.
Run: .venv/bin/python -m bench.server [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
TOKEN_TARGET = 4000
SMALL_MS_TARGET = 50.0

PLANS = {
    "llama-3.1-8b / 1x h100-sxm": {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}},
    "deepseek-v3 / 64x h200 (dp4 pp2 tp8 ep8)": {
        "model": "deepseek-v3",
        "hardware": {"gpu": "h200", "num_gpus": 64},
        "parallel": {"dp": 4, "pp": 2, "tp": 8, "ep": 8},
    },
}
LOOKUPS = {"by id": {"rule_id": "TP-HEADS-DIVISIBLE"}, "by query, limit 10": {"query": "expert parallel all-to-all"}}


def calls(plan: dict[str, Any], names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    out = [(n, {"plan": plan}) for n in ("build_dag", "validate_dag", "autofix_dag", "estimate_performance")
           if n in names]
    if "search_strategies" in names:
        out.append(("search_strategies", {"model": plan["model"], "hardware": plan["hardware"]}))
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
    return statistics.median(times), len(text_of(r)) // 4, bool(r.is_error)


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
        print(f"tools/list: {len(names)} tools, {len(listing) // 4} tokens")
    if missing:
        print("not registered yet (core function missing): " + ", ".join(missing))
    print(f"targets: <= {TOKEN_TARGET} tokens per default answer; small-plan round trips < {SMALL_MS_TARGET:g} ms")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args(argv)
    return anyio.run(run, args.repeats)


if __name__ == "__main__":
    raise SystemExit(main())
