"""`pdag report`: the plan's pictures in one self-contained HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path

from tools.cli.common import add_plan_args, command, plan_from_args
from tools.core.errors import PdagInputError


def write_page(path: str, html: str) -> None:
    try:
        Path(path).write_text(html, encoding="utf-8")
    except OSError as exc:
        raise PdagInputError("output", f"cannot write {path!r} ({exc.strerror})", "a writable file path") from None


def report_args(p: argparse.ArgumentParser) -> None:
    add_plan_args(p)
    p.add_argument("-o", "--output", default="report.html", help="where to write the HTML page (default report.html)")


def cmd_report(args: argparse.Namespace) -> int:
    from tools.pictures.report import plan_pictures, report_html

    pics = plan_pictures(plan_from_args(args))
    write_page(args.output, report_html(pics))
    print(pics.summary())
    print(f"wrote {args.output}")
    return 0


command("report", "plan -> HTML report: folded DAG, timelines, memory per GPU, validation", report_args)(cmd_report)
