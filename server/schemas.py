"""Compact JSON Schemas for tools/list: the tool list is sent to the model on every turn.

The complete plan and DAG schemas are published once, as resources (pdag://schema/plan, pdag://schema/dag);
a tool's inline schema keeps the field names and types a model needs to write a call and drops what the
server checks anyway (bounds, nested descriptions, additionalProperties, titles). Strictness does not change:
arguments are still validated against the full pydantic models, and an error names the field and the bound.
"""

from __future__ import annotations

from typing import Any

JSON_TOKENS_PER_CHAR = 0.25  # the token estimate used for budgets: about 4 characters of JSON per token

_DROPPED = {"title", "default", "additionalProperties", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "examples"}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return {**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _without_null(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in options if o.get("type") != "null"]


def compact(schema: dict[str, Any], depth: int, defs: dict[str, Any] | None = None,
            keep_descriptions: int = 1, _level: int = 0) -> dict[str, Any]:
    """``schema`` with $refs inlined to ``depth`` object levels (deeper objects become {"type": "object"}),
    descriptions kept on the first ``keep_descriptions`` levels, optional-null branches and bounds dropped."""
    defs = defs if defs is not None else schema.get("$defs", {})
    node = _resolve(schema, defs)
    if "anyOf" in node:
        options = [compact(o, depth, defs, keep_descriptions, _level) for o in _without_null(node["anyOf"])]
        unique: list[dict[str, Any]] = []
        for o in options:
            if o not in unique:
                unique.append(o)
        out: dict[str, Any] = unique[0] if len(unique) == 1 else {"anyOf": unique}
        if "description" in node and _level < keep_descriptions:
            out = {**out, "description": node["description"]}
        return out
    out = {}
    for key, value in node.items():
        if key == "additionalProperties" and _level == 0 and value is False:
            out[key] = value  # unknown top-level arguments are refused: say so where it is cheap
            continue
        if key in _DROPPED or key == "$defs" or (key == "description" and _level >= keep_descriptions):
            continue
        if key == "properties":
            if _level >= depth:
                continue
            out[key] = {name: compact(sub, depth, defs, keep_descriptions, _level + 1) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = compact(value, depth, defs, keep_descriptions, _level + 1)
        elif key == "required" and _level >= depth:
            continue
        else:
            out[key] = value
    if "properties" in node and _level >= depth:
        out["type"] = "object"
    return out


def tokens(text: str) -> int:
    """The budget's token estimate of a JSON text."""
    return round(len(text) * JSON_TOKENS_PER_CHAR)
