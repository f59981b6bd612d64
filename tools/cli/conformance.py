"""`pdag conformance`: the table of published deployments and pdag's verdict on each."""

from __future__ import annotations

import argparse

from tools.cli.common import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON object per entry")
    p.add_argument("--failing", action="store_true", help="only the entries that do not pass")


def cmd_conformance(args: argparse.Namespace) -> int:
    """Exit 1 when an entry fails for any reason other than the capability it is marked as waiting for."""
    from tools.engines.conformance import run_corpus

    verdicts = run_corpus()
    shown = [v for v in verdicts if not (args.failing and v.ok)]
    if args.json:
        for v in shown:
            print(v.model_dump_json())
    else:
        rows = [("model", "hardware", "engine", "layout", "verdict")]
        for v in shown:
            if v.ok:
                verdict = "pass" + (f" (warns {', '.join(v.warnings)})" if v.warnings else "")
            elif v.waiting:
                verdict = f"needs {v.needs}"
            else:
                verdict = f"FAIL at {v.stage}: {v.detail}"
            rows.append((v.model, v.hardware, v.engine, v.layout, verdict))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
        passed = sum(v.ok for v in verdicts)
        waiting = sum(1 for v in verdicts if v.waiting)
        print(f"\n{passed} of {len(verdicts)} pass; {waiting} wait for a pdag capability (knowledge/conformance/"
              "corpus.json says which and why)")
    return 1 if any(not v.ok and not v.waiting for v in verdicts) else 0


command("conformance", "check pdag against published deployments (import, validate, estimate, export)",
        _args)(cmd_conformance)
