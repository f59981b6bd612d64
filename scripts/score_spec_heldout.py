"""First score of the held-out speculative-decoding points (evals/measurements_heldout/spec_prefix_2026_11.json).

`pdag accuracy` does not read speculative or prefix-caching points yet.  This scores the points whose source states
enough to price them without interpretation: each published acceptance length (tokens per step) against the
acceptance pdag assumes for that method and draft length when a plan states none.

    python scripts/score_spec_heldout.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from tools.core.plan import Speculative
from tools.core.speculative import acceptance

FILE = Path(__file__).resolve().parents[1] / "evals" / "measurements_heldout" / "spec_prefix_2026_11.json"
METHOD = {"eagle3": "eagle"}  # pdag's EAGLE method covers EAGLE-3 heads


def main() -> None:
    with open(FILE, encoding="utf-8") as f:
        points = json.load(f)["points"]
    errors: dict[str, list[float]] = {}
    for p in points:
        sp = p.get("speculative")
        if p["metric"] != "acceptance_length" or not sp:
            continue
        method = METHOD.get(sp["method"], sp["method"])
        pred = acceptance(Speculative(method=method, num_draft_tokens=sp.get("num_draft_tokens") or 1)).tokens_per_step
        err = (pred - p["value"]) / p["value"]
        errors.setdefault(method, []).append(abs(err))
        print(f"{p['id'][:62]:<62} {p['value']:>6.2f} {pred:>6.2f} {100 * err:+6.1f}%")
    every = [e for v in errors.values() for e in v]
    for method, v in sorted(errors.items()):
        print(f"{method}: {len(v)} points, median APE {100 * statistics.median(v):.1f}%")
    print(f"all: {len(every)} of {len(points)} points, median APE {100 * statistics.median(every):.1f}%")


if __name__ == "__main__":
    main()
