"""The pdag knowledge base: documents, rule catalog, model and hardware presets, all as data files."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent


@cache
def load_json(relative: str) -> Any:
    """Parse a JSON file under knowledge/ once per process; callers must not mutate the result."""
    return json.loads((ROOT / relative).read_text(encoding="utf-8"))
