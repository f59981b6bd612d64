"""Suite figures, the terminal table, and the JSON / Markdown reports."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean
from typing import Any

from evals.scoring import CaseScore

__all__ = ["summarize", "table", "write_reports"]

COLUMNS = ("case", "pass", "answer", "valid", "expect", "caught", "turns", "tools", "errs", "tokens", "sec", "regret")


def summarize(scores: list[CaseScore], *, agent: str, model: str, threshold: float, seconds: float) -> dict[str, Any]:
    """The suite's headline figures."""
    n = len(scores)
    injected = sum(len(s.mistakes) for s in scores)
    regrets = [s.regret for s in scores if s.regret is not None]
    passed = sum(s.passed for s in scores)
    return {
        "agent": agent,
        "model": model,
        "cases": n,
        "passed": passed,
        "pass_rate": round(passed / n, 4) if n else 0.0,
        "threshold": threshold,
        "ok": n > 0 and passed / n >= threshold,
        "valid_plans": sum(1 for s in scores if s.checks.get("valid")),
        "mistakes_injected": injected,
        "mistakes_caught": sum(s.mistakes_caught for s in scores),
        "mean_turns": round(mean(s.turns for s in scores), 2) if n else 0.0,
        "mean_tool_calls": round(mean(s.tool_calls for s in scores), 2) if n else 0.0,
        "tool_errors": sum(s.tool_errors for s in scores),
        "retries": sum(s.retries for s in scores),
        "input_tokens": sum(s.input_tokens for s in scores),
        "output_tokens": sum(s.output_tokens for s in scores),
        "mean_regret": round(mean(regrets), 4) if regrets else None,
        "regret_cases": len(regrets),
        "seconds": round(seconds, 2),
    }


def _row(s: CaseScore) -> list[str]:
    expect = [k for k in ("setting_kept", "strategies", "fits", "slo", "declined", "explained") if k in s.checks]
    return [
        s.id,
        "PASS" if s.passed else "FAIL",
        s.answer,
        {True: "yes", False: "no"}.get(s.checks.get("valid"), "-"),  # type: ignore[arg-type]
        f"{sum(s.checks[k] for k in expect)}/{len(expect)}",
        f"{s.mistakes_caught}/{len(s.mistakes)}" if s.mistakes else "-",
        str(s.turns),
        str(s.tool_calls),
        str(s.tool_errors),
        str(s.input_tokens + s.output_tokens),
        f"{s.seconds:.1f}",
        "-" if s.regret is None else f"{s.regret:.1%}",
    ]


def table(scores: list[CaseScore], summary: dict[str, Any]) -> str:
    """A fixed-width table of the cases, failure reasons, and the suite's figures."""
    rows = [list(COLUMNS)] + [_row(s) for s in scores]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for s in scores:
        if not s.passed:
            lines.append(f"  {s.id}: " + "; ".join(s.reasons))
    lines.append("")
    lines += _headline(summary)
    return "\n".join(lines)


def _headline(x: dict[str, Any]) -> list[str]:
    regret = "n/a" if x["mean_regret"] is None else f"{x['mean_regret']:.1%} over {x['regret_cases']} cases"
    return [
        f"agent {x['agent']} ({x['model']}): {x['cases']} cases, {x['passed']} passed, pass rate {x['pass_rate']:.1%}"
        f" (threshold {x['threshold']:.0%}: {'OK' if x['ok'] else 'BELOW'})",
        f"valid final plans {x['valid_plans']}; mistakes caught {x['mistakes_caught']}/{x['mistakes_injected']}",
        f"mean turns {x['mean_turns']}, mean tool calls {x['mean_tool_calls']}, tool errors {x['tool_errors']},"
        f" API retries {x['retries']}, tokens {x['input_tokens']} in / {x['output_tokens']} out",
        f"mean regret vs search {regret}; run time {x['seconds']:.1f} s",
    ]


def _markdown(scores: list[CaseScore], summary: dict[str, Any]) -> str:
    out = ["# pdag evaluation report", ""]
    out += [f"- {line}" for line in _headline(summary)]
    out += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_row(s)) + " |" for s in scores]
    failed = [s for s in scores if not s.passed]
    if failed:
        out += ["", "## Failures", ""]
        out += [f"- **{s.id}**: " + "; ".join(s.reasons) for s in failed]
    out += ["", "## Mistakes and the rules that caught them", ""]
    for s in scores:
        for m in s.mistakes:
            got = ", ".join(m["caught_by"]) or "**not caught**"
            out.append(f"- {s.id} / {m['id']}: expected {', '.join(m['rules'])}; reported {got}")
    return "\n".join(out) + "\n"


def write_reports(out_dir: Path, scores: list[CaseScore], summary: dict[str, Any]) -> tuple[Path, Path]:
    """``report.json`` (summary + every case) and ``report.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "report.json", out_dir / "report.md"
    js.write_text(json.dumps({"summary": summary, "cases": [s.to_dict() for s in scores]}, indent=1, default=str))
    md.write_text(_markdown(scores, summary))
    return js, md
