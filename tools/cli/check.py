"""`pdag validate` and `pdag fix`: a plan (flags or JSON file) or a DAG JSON file."""

from __future__ import annotations

from typing import Any

from tools.cli.common import command, plan_from_args, read_json
from tools.repair.autofix import autofix_dag
from tools.rules.validate import validate_dag


def cli_input(args: Any) -> dict[str, Any]:
    """``plan=`` or ``dag=`` from the CLI: a JSON file holding a DAG (it has 'nodes') goes in as a DAG; a plan
    file (or `pdag plan --json` output) gets the flags applied on top."""
    if args.plan_file:
        data = read_json(args.plan_file)
        if isinstance(data, dict) and ("nodes" in data or isinstance(data.get("dag"), dict)):
            return {"dag": data}
        return {"plan": plan_from_args(args, data)}
    return {"plan": plan_from_args(args)}


def _print_readings(notes: list[str]) -> None:
    """How pdag read the document: what it took each spelling to mean and what it inferred. Shown always, so a
    verdict on a hand draft is never one whose reading the user cannot see."""
    for note in notes:
        print(f"  reading: {note}")


def cmd_validate(args: Any) -> int:
    result = validate_dag(**cli_input(args))
    if args.json:
        print(result.model_dump_json())
        return 0 if result.valid else 1
    print(result.summary + (f" - {result.gpus_used} GPUs" if result.gpus_used else ""))
    _print_readings(result.notes)
    for v in result.violations:
        where = v.location.field or ", ".join(v.location.nodes)
        print(f"  {v.severity.upper():7} {v.rule_id}: {v.message}" + (f" [{where}]" if where else ""))
        if v.hint:
            print(f"          fix: {v.hint}")
    return 0 if result.valid else 1


def cmd_fix(args: Any) -> int:
    import json

    result = autofix_dag(**cli_input(args))
    if args.json:
        print(result.model_dump_json())
        return 0 if result.valid else 1
    print(result.summary)
    _print_readings(result.notes)
    for c in result.changes:
        print(f"  CHANGED {c.rule_id}: {c.message}")
    for v in result.violations:
        print(f"  {v.severity.upper():7} {v.rule_id}: {v.message}\n          left because: {v.reason}")
    for a in result.alternatives:
        print(f"  ALTERNATIVE {a.parallel}: {a.note}")
    if result.plan is not None:
        print("fixed plan: " + json.dumps(result.plan))
    return 0 if result.valid else 1


command("validate", "plan or DAG (JSON file) -> the rules it breaks, where and why")(cmd_validate)
command("fix", "plan or DAG (JSON file) -> repaired plan, with the changes and what is left")(cmd_fix)
