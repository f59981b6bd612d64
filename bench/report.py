"""Report timing: `python -m bench.report [OUT_DIR]` prints how long `pdag report` takes to make its page
(target <= 1 s for DeepSeek-V3 on 64 GPUs) and, where /usr/bin/chromium exists, screenshots each page headless
for a look."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.estimate import CASES
from tools.pictures.report import plan_pictures, report_html

CHROMIUM = "/usr/bin/chromium"
TARGET_MS = 1000.0  # issue 15: DeepSeek-V3 on 64 GPUs
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def screenshot(html: Path, png: Path, width: int = 1320, height: int = 4200) -> bool:
    """Headless Chromium screenshot of a local page (no network: the page has no external resource)."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={png}", html.resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    return done.returncode == 0 and png.exists()


def main(out_dir: str | None = None, repeats: int = 3) -> None:
    out = Path(out_dir or tempfile.mkdtemp(prefix="pdag-report-"))
    out.mkdir(parents=True, exist_ok=True)
    for i, (name, plan) in enumerate(CASES.items()):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            html = report_html(plan_pictures(plan))
            times.append(time.perf_counter() - t0)
        page = out / f"report-{i}.html"
        page.write_text(html, encoding="utf-8")
        target = f" (target <= {TARGET_MS:.0f} ms: {'met' if times[0] * 1e3 <= TARGET_MS else 'MISSED'})" \
            if "64x" in name else ""
        print(f"{name}: report {times[0] * 1e3:.0f} ms first, {statistics.median(times) * 1e3:.0f} ms median"
              f"{target}, {len(html) / 1e3:.0f} kB -> {page}")
        if Path(CHROMIUM).exists() and shutil.which(CHROMIUM):
            shot = page.with_suffix(".png")
            print(f"  screenshot: {shot}" if screenshot(page, shot) else "  screenshot failed")
    if not Path(CHROMIUM).exists():
        print("(no /usr/bin/chromium: screenshots skipped)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
