"""`python -m bench`: every benchmark, one after the other, printing the figures the issues ask for."""

from __future__ import annotations

import importlib
import sys

BENCHES = ("build", "validate", "estimate", "simulate", "search", "report", "server", "scale", "oversized",
           "accuracy")


def main(names: list[str]) -> None:
    for name in names or BENCHES:
        print(f"== bench.{name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        if name == "server":
            module.main([])  # it has flags of its own; run it with its defaults
        else:
            module.main()


if __name__ == "__main__":
    main(sys.argv[1:])
