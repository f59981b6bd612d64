"""Performance estimation: ``estimate_performance`` (critical-path roofline model over the DAG), the serving
model and the search's fast path. It reads the committed track record as data and never imports calibration."""

from tools.estimate.core import estimate_performance

__all__ = ["estimate_performance"]
