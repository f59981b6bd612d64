"""Write the registered checker and fixer of every rule into knowledge/rules/catalog.json.

Run ``python -m tools.rules.sync_catalog`` after adding or renaming a checker/fixer; a test keeps the catalog
and the registry equal.  Rules pdag checks that the catalog lacks are added from ``EXTRA_RULE_ENTRIES``.
"""

from __future__ import annotations

import json
from typing import Any

import tools.rules.run  # noqa: F401  (every rule registered)
from tools.rules.registry import CATALOG_FILE, CHECKERS, FIXERS, catalog, dotted

EXTRA_RULE_ENTRIES: list[dict[str, Any]] = [
    {
        "id": "STRUCT-SCHEMA",
        "title": "A DAG conforms to the published JSON Schema",
        "statement": "A DAG document matches the published DAG JSON Schema (tools.core.dag.dag_json_schema(), Draft "
                     "2020-12): required fields present, values of the declared types, no unknown fields; each "
                     "departure is reported with its JSON path.",
        "rationale": "Hand-drafted DAGs go wrong in every way; checking the document against the schema first gives "
                     "the exact place of each mistake before the structural rules interpret the graph.",
        "scope": {"level": "graph", "phase": "both"},
        "strategies": [],
        "node_types": [],
        "severity": "error",
        "kind": "hard_rule",
        "source": [{"seed": "pdag", "section": "published DAG JSON Schema (tools.core.dag.dag_json_schema)"}],
        "checker": None,
        "fixer": None,
        "examples": {
            "violating": "{\"id\": \"n1\", \"type\": \"NormNode\", \"devices\": [0], \"colour\": \"red\"} (unknown "
                         "field)",
            "satisfying": "the DAG returned by build_dag, unchanged",
        },
        "related": ["STRUCT-KNOWN-TYPES", "STRUCT-DEVICES-ASSIGNED", "STRUCT-NO-DANGLING-EDGES"],
    },
]


def sync() -> int:
    """Update the catalog file in place; returns the number of rules whose fields changed."""
    with open(CATALOG_FILE, encoding="utf-8") as f:
        doc = json.load(f)
    ids = {r["id"] for r in doc["rules"]}
    for extra in EXTRA_RULE_ENTRIES:
        if extra["id"] not in ids:
            doc["rules"].append(json.loads(json.dumps(extra)))
    changed = 0
    for rule in doc["rules"]:
        entry = CHECKERS.get(rule["id"])
        checker = dotted(entry.fn) if entry else None
        fixer = dotted(FIXERS[rule["id"]]) if rule["id"] in FIXERS else None
        if (rule.get("checker"), rule.get("fixer")) != (checker, fixer):
            rule["checker"], rule["fixer"] = checker, fixer
            changed += 1
    with open(CATALOG_FILE, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    catalog.cache_clear()
    return changed


if __name__ == "__main__":
    print(f"catalog synced: {sync()} rule(s) updated")
