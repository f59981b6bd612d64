"""Compact JSON Schemas for tools/list: the tool list is sent to the model on every turn.

The complete plan and DAG schemas are published once, as resources (pdag://schema/plan, pdag://schema/dag);
a tool's inline schema keeps the field names and types a model needs to write a call and drops what the
server checks anyway (bounds, nested descriptions, titles; inside the plan, which five tools repeat, also the
allowed values of its string fields: an error names them). Every object of an input schema declares its
properties or says it is open (``additionalProperties: true``: an hf_config, a drafted DAG), so clients that
convert schemas to a provider's strict form need not guess. Arguments are still validated against the full
pydantic models, and an error names the field and the bound.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

JSON_TOKENS_PER_CHAR = 0.25  # the token estimate used for budgets: about 4 characters of JSON per token

_DROPPED = {"title", "default", "additionalProperties", "minimum", "maximum", "exclusiveMinimum",
            "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "examples"}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        return {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}, name
    return node, None


def _without_null(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in options if o.get("type") != "null"]


OPEN_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}


def compact(schema: dict[str, Any], depth: int | None = None, defs: dict[str, Any] | None = None,
            keep_descriptions: int = 1, keep_enums: bool = True, _level: int = 0,
            _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``schema`` with $refs inlined, descriptions kept on the first ``keep_descriptions`` levels, optional-null
    branches and bounds dropped (and enums unless ``keep_enums``).

    ``depth=None`` (input schemas): every object keeps its properties, and an object that takes any keys says so
    (``additionalProperties: true``); nested closed objects do not repeat ``additionalProperties: false`` (the
    server refuses unknown fields, naming them). A model that contains itself is cut to an open
    object. ``depth=n`` (output schemas): objects below ``n`` levels become ``{"type": "object"}``."""
    defs = defs if defs is not None else schema.get("$defs", {})
    node, name = _resolve(schema, defs)
    if name is not None and name in _seen:
        return dict(OPEN_OBJECT)
    seen = (*_seen, name) if name is not None else _seen
    sub = {"depth": depth, "defs": defs, "keep_descriptions": keep_descriptions, "keep_enums": keep_enums,
           "_seen": seen}
    truncated = depth is not None and _level >= depth
    if "anyOf" in node:
        options = [compact(o, _level=_level, **sub) for o in _without_null(node["anyOf"])]
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
        if key == "additionalProperties":
            if _level == 0 and value is False:
                out[key] = value  # unknown top-level arguments are refused: say so where it is cheap
            elif depth is None and value is not False:  # an open object says so; a closed one lists its fields
                out[key] = compact(value, _level=_level + 1, **sub) if isinstance(value, dict) else value
            continue
        if key in _DROPPED or key == "$defs" or (key == "description" and _level >= keep_descriptions) or \
                (key in ("enum", "const") and not keep_enums):
            continue
        if key == "const":  # a one-value Literal: an enum of one (strict providers' subsets have no const)
            out["enum"] = [value]
            continue
        if key == "properties":
            if truncated:
                continue
            out[key] = {k: compact(v, _level=_level + 1, **sub) for k, v in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = compact(value, _level=_level + 1, **sub)
        elif key == "required" and truncated:
            continue
        else:
            out[key] = value
    if "properties" in node and truncated:
        out["type"] = "object"
    return out


def inline_schema(model: type[BaseModel], keep_enums: bool = True) -> dict[str, Any]:
    """``model``'s JSON Schema with every $ref inlined and no descriptions: a value for ``WithJsonSchema`` that
    advertises a model's fields on an argument the core checks itself (errors then name the field path and,
    for a value outside an enum, the allowed values)."""
    return without_resource_only(compact(model.model_json_schema(by_alias=True), keep_descriptions=0,
                                         keep_enums=keep_enums))


# Fields a tool's inline schema leaves to the published schemas (pdag://schema/plan): with workload.length_dataset
# estimate_performance's arguments would pass OpenAI strict mode's 100 properties, and tools/list its budget. The
# tools still take them (the full models validate every argument).
RESOURCE_ONLY = frozenset({"length_dataset"})


def without_resource_only(schema: Any) -> Any:
    """``schema`` with the ``RESOURCE_ONLY`` properties dropped wherever they are declared."""
    if isinstance(schema, list):
        return [without_resource_only(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: without_resource_only(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: v for k, v in out["properties"].items() if k not in RESOURCE_ONLY}
    return out


def tokens(text: str) -> int:
    """The budget's token estimate of a JSON text."""
    return round(len(text) * JSON_TOKENS_PER_CHAR)
