"""Score a file of published launch recipes as a new user would run them: import -> validate -> estimate -> export.

    python scripts/score_recipes.py evals/recipes_heldout/recipes_2026_11.json [--json]

Each entry (the conformance corpus's shape, with what the source states under ``published`` instead of pdag's
``expected`` plan) gets the stage it reached and why it stopped; the summary counts them by stage and family.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from tools.core.errors import PdagInputError
from tools.engines.launch import export_plan, import_command
from tools.estimate.core import estimate_performance
from tools.rules.validate import validate_dag


def score(entry: dict[str, Any]) -> dict[str, Any]:
    s = entry["setting"]
    out: dict[str, Any] = {"id": entry["id"], "engine": entry["engine"], "gpus": f"{s['num_gpus']}x {s['gpu']}",
                           "stage": "import", "detail": ""}
    try:
        plan = import_command(entry["command"], gpu=s["gpu"], gpus_per_node=s.get("gpus_per_node", 8),
                              engine_config=entry.get("engine_config")).plan
        out["model"] = plan["model"]
        if plan["hardware"]["num_gpus"] != s["num_gpus"]:
            out["detail"] = f"counts {plan['hardware']['num_gpus']} GPUs, the recipe uses {s['num_gpus']}"
            return out
        out["stage"] = "validate"
        errors = [f"{v.rule_id}: {v.message}" for v in validate_dag(plan).violations if v.severity == "error"]
        if errors:
            out["detail"] = "; ".join(errors)[:300]
            return out
        out["stage"] = "estimate"
        estimate_performance(plan=plan)
        out["stage"] = "export"
        export_plan(plan, entry["engine"] if entry["engine"] != "trtllm" else "trtllm")
        out["stage"] = "done"
    except PdagInputError as exc:
        out["detail"] = f"{exc.field}: {exc.problem}"[:300]
    except Exception as exc:  # a crash is a finding too: name it
        out["detail"] = f"CRASH {type(exc).__name__}: {exc}"[:300]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with open(args.path, encoding="utf-8") as f:
        entries = json.load(f)["entries"]
    rows = [score(e) for e in entries]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['stage']:<9} {r['id']:<60} {r['detail'][:150]}")
    stages = Counter(r["stage"] for r in rows)
    print(f"\n{len(rows)} recipes: " + ", ".join(f"{k} {v}" for k, v in stages.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
