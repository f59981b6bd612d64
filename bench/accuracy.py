"""`python -m bench accuracy`: how long `pdag accuracy` takes when nothing it reads has changed (target 20 s), and
how long the run that fills its cache took, when this run had to fill it."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

COMMAND = [sys.executable, "-c", "import sys; from tools.cli import main; sys.exit(main(['accuracy']))"]
TARGET_S = 20.0


def _run() -> tuple[float, bool]:
    began = time.perf_counter()
    done = subprocess.run(COMMAND, capture_output=True, text=True, check=True)
    return time.perf_counter() - began, "answer from the cache" in done.stderr


def main(repeats: int = 5) -> None:
    first, cached = _run()
    if not cached:
        print(f"pdag accuracy, cold (filled the cache): {first:.1f} s")
    warm = [_run()[0] for _ in range(repeats)]
    med = statistics.median(warm)
    print(f"pdag accuracy, unchanged inputs: {med:.2f} s median of {repeats} (min {min(warm):.2f}, "
          f"max {max(warm):.2f}), target {TARGET_S:.0f} s: {'ok' if med <= TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
