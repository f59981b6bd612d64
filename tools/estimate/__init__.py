"""Performance estimation: ``estimate_performance`` (critical-path roofline model over the DAG),
accuracy scoring against published measurements and calibration of efficiency factors."""

from __future__ import annotations

from typing import Any

__all__ = ["estimate_performance"]


def __getattr__(name: str) -> Any:
    # Lazy: tools.memory imports tools.estimate.efficiency, and the estimator imports tools.memory.
    if name == "estimate_performance":
        from tools.estimate.core import estimate_performance

        return estimate_performance
    raise AttributeError(name)
