"""How every DAG document under tests/ (and the eval cases' drafts) is read and judged, written as one JSON so a
change to the draft reader can be compared before and after: ``{document: [valid, error rule ids, notes]}``.

    python -m scripts.reading_baseline write before.json      # on the old reader
    python -m scripts.reading_baseline compare before.json    # on the new one: every document that differs

With ``--fix`` each entry also holds autofix_dag's verdict and notes (slower: autofix rebuilds many drafts).

Documents: both sides of each rule fixture (tests/fixtures/rules), the same rewritten in drafted spellings as
tests/test_dialect.py rewrites them (seeded by rule and side), every blind draft (tests/data/blind_dags*) and every
eval case's scripted draft (evals/cases).  A document refused as input is recorded with its error's field.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.test_dialect import to_dialect
from tools import autofix_dag, validate_dag
from tools.core.errors import PdagInputError

ROOT = Path(__file__).resolve().parent.parent


def documents() -> Iterator[tuple[str, Any]]:
    """(name, document) for every DAG document the comparison covers, in a fixed order."""
    for f in sorted((ROOT / "tests/fixtures/rules").glob("*.json")):
        fixture = json.loads(f.read_text(encoding="utf-8"))
        for side in ("reject", "accept"):
            dag = fixture.get(side, {}).get("dag")
            if isinstance(dag, dict):
                name = f"{f.relative_to(ROOT)}#{side}"
                yield name, dag
                yield name + "#dialect", to_dialect(copy.deepcopy(dag), random.Random(f.stem + side))
    for f in sorted(ROOT.glob("tests/data/blind_dags*/*.json")):
        if f.name != "index.json":
            yield str(f.relative_to(ROOT)), json.loads(f.read_text(encoding="utf-8"))
    for f in sorted((ROOT / "evals/cases").glob("*.json")):
        draft = json.loads(f.read_text(encoding="utf-8")).get("draft")
        if isinstance(draft, dict):
            yield f"{f.relative_to(ROOT)}#draft", draft


def reading(doc: Any, fix: bool) -> list[Any]:
    """[valid, sorted error rule ids, notes] of validate_dag (with ``fix``, then autofix_dag's valid and notes),
    or ["input error", field, message] for a refused document."""
    try:
        r = validate_dag(dag=copy.deepcopy(doc))
        fixed = autofix_dag(dag=copy.deepcopy(doc)) if fix else None
    except PdagInputError as e:
        return ["input error", e.field, str(e)]
    out = [r.valid, sorted({v.rule_id for v in r.violations if v.severity == "error"}), list(r.notes)]
    return out + ([fixed.valid, list(fixed.notes)] if fixed is not None else [])


def main(argv: list[str]) -> int:
    fix = "--fix" in argv
    argv = [a for a in argv if a != "--fix"]
    if len(argv) != 2 or argv[0] not in ("write", "compare"):
        print(__doc__)
        return 2
    now = {name: reading(doc, fix) for name, doc in documents()}
    if argv[0] == "write":
        Path(argv[1]).write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        valid = sum(1 for r in now.values() if r[0] is True)
        refused = sum(1 for r in now.values() if r[0] == "input error")
        noted = sum(1 for r in now.values() if r[0] != "input error" and r[2])
        print(f"{len(now)} documents: {valid} valid, {len(now) - valid - refused} invalid, {refused} refused as "
              f"input; {noted} read with notes")
        return 0
    before = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    changed = sorted(n for n in before.keys() | now.keys() if before.get(n) != now.get(n))
    for n in changed:
        print(f"{n}\n  before: {json.dumps(before.get(n))[:600]}\n  after:  {json.dumps(now.get(n))[:600]}")
    print(f"{len(now)} documents, {len(changed)} changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
