"""Conversions of an MCP tool's input schema into the forms LLM providers take, and the checks of each form.

Written from each provider's documented rules (sources in tests/test_server_providers.py), not from a client
library, so the tests need no network and no optional package. Everything here is pure JSON-Schema
manipulation over plain dicts.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

# ------------------------------------------------------------------------------------------ OpenAI strict mode

# Keywords OpenAI's strict mode accepts (Structured Outputs, "Supported schemas"); everything else is refused.
OPENAI_KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf",
                   "description", "$defs", "$ref", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                   "exclusiveMaximum", "multipleOf", "minItems", "maxItems"}
OPENAI_MAX_DEPTH = 5  # the limits first documented (now 10 levels and 5,000 properties): the stricter ones
OPENAI_MAX_PROPERTIES = 100
NULL = {"type": "null"}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("type") == "null" or NULL in node.get("anyOf", []):
        return node
    description = {"description": node["description"]} if "description" in node else {}
    if "anyOf" in node:
        return {**node, "anyOf": [*node["anyOf"], NULL]}
    return {"anyOf": [{k: v for k, v in node.items() if k != "description"}, NULL], **description}


def to_openai_strict(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's strict form of ``schema``: every object closed (``additionalProperties: false``) with all its
    properties required, the optional ones made nullable (a strict client sends null for them)."""

    def walk(node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        if "anyOf" in node:
            node["anyOf"] = [walk(b) for b in node["anyOf"]]
        if node.get("type") == "object":
            props = node.get("properties", {})
            required = set(node.get("required", []))
            node["properties"] = {k: walk(v) if k in required else _nullable(walk(v)) for k, v in props.items()}
            node["required"] = list(props)
            node["additionalProperties"] = False
        if isinstance(node.get("items"), dict):
            node["items"] = walk(node["items"])
        return node

    return walk(copy.deepcopy(schema))


def _nodes(node: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, dict[str, Any], int]]:
    """Every schema node with its path and its object nesting depth."""
    if not isinstance(node, dict):
        return
    yield path, node, depth
    inner = depth + (node.get("type") == "object")
    for key, sub in (node.get("properties") or {}).items():
        yield from _nodes(sub, f"{path}.{key}", inner)
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]", inner)
    for i, sub in enumerate(node.get("anyOf") or []):
        yield from _nodes(sub, f"{path}|{i}", depth)
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}", inner)


def openai_strict_problems(schema: dict[str, Any]) -> list[str]:
    """What OpenAI's strict mode would refuse in ``schema`` (an empty list: accepted)."""
    problems = []
    if schema.get("type") != "object" or "anyOf" in schema:
        problems.append("the root must be an object, not a union")
    properties = 0
    for path, node, depth in _nodes(schema):
        if extra := set(node) - OPENAI_KEYWORDS:
            problems.append(f"{path or 'root'}: unsupported keywords {sorted(extra)}")
        if node.get("type") == "object":
            properties += len(node.get("properties", {}))
            if node.get("additionalProperties") is not False:
                problems.append(f"{path or 'root'}: additionalProperties must be false")
            if sorted(node.get("required", [])) != sorted(node.get("properties", {})):
                problems.append(f"{path or 'root'}: every property must be required")
        if depth > OPENAI_MAX_DEPTH:
            problems.append(f"{path}: nested deeper than {OPENAI_MAX_DEPTH} objects")
    if properties > OPENAI_MAX_PROPERTIES:
        problems.append(f"{properties} properties, more than {OPENAI_MAX_PROPERTIES}")
    return problems


def strict_call(schema: dict[str, Any], value: Any) -> Any:
    """``value`` as a strict client sends it for the strict ``schema``: every property present, null where the
    model left an optional one out."""
    if value is None:
        return None
    for branch in schema.get("anyOf", []):
        if _fits(branch, value):
            return strict_call(branch, value)
    if schema.get("type") == "object" and isinstance(value, dict):
        return {k: strict_call(sub, value.get(k)) for k, sub in schema.get("properties", {}).items()}
    if schema.get("type") == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [strict_call(schema["items"], v) for v in value]
    return value


def _fits(schema: dict[str, Any], value: Any) -> bool:
    kind = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    want = schema.get("type")
    got = kind.get(type(value), "null")
    return want == got or (want == "number" and got == "integer") or ("anyOf" in schema and value is not None)


# ------------------------------------------------------------------------------------------ Gemini

# The Schema object of Gemini function declarations: a select subset of OpenAPI 3.0 (no $ref, no $defs, no
# additionalProperties, one type per schema, null as `nullable`).
GEMINI_KEYWORDS = {"type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
                   "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
                   "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum"}
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object"}
GEMINI_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # parameter names; function names may add . and -


def to_gemini(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` in Gemini's function-declaration subset: $refs must already be inlined (a $ref is an error,
    not silently dropped), additionalProperties removed, null branches turned into ``nullable``. Any other
    keyword outside the subset is an error, so nothing is lost without a test noticing."""
    node = dict(schema)
    if "$ref" in node or "$defs" in node:
        raise ValueError("Gemini takes no $ref/$defs: inline them first")
    node.pop("additionalProperties", None)
    if "anyOf" in node:
        branches = [b for b in node.pop("anyOf") if b.get("type") != "null"]
        nullable = len(branches) < len(schema["anyOf"])
        node = {**to_gemini(branches[0]), **node} if len(branches) == 1 else \
            {**node, "anyOf": [to_gemini(b) for b in branches]}
        if nullable:
            node["nullable"] = True
    if isinstance(node.get("type"), list):
        types = [t for t in node["type"] if t != "null"]
        if len(types) != 1:
            raise ValueError(f"Gemini takes one type per schema, not {node['type']}")
        node["nullable"] = node.get("nullable", False) or len(types) < len(node["type"])
        node["type"] = types[0]
    if "properties" in node:
        node["properties"] = {k: to_gemini(v) for k, v in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = to_gemini(node["items"])
    if unknown := set(node) - GEMINI_KEYWORDS:
        raise ValueError(f"keywords outside Gemini's subset: {sorted(unknown)}")
    return node


def gemini_problems(parameters: dict[str, Any]) -> list[str]:
    """What a Gemini function declaration would refuse in ``parameters`` (an empty list: accepted)."""
    problems = []
    if parameters.get("type") != "object" or not parameters.get("properties"):
        problems.append("parameters must be an object with at least one property")
    for path, node, _ in _nodes(parameters):
        where = path or "root"
        if extra := set(node) - GEMINI_KEYWORDS:
            problems.append(f"{where}: keywords outside the subset {sorted(extra)}")
        if "anyOf" not in node and not (isinstance(node.get("type"), str) and node["type"] in GEMINI_TYPES):
            problems.append(f"{where}: type must be one of {sorted(GEMINI_TYPES)}, not {node.get('type')!r}")
        if node.get("type") != "object" and ("properties" in node or "required" in node):
            problems.append(f"{where}: properties/required only on objects")
        if missing := set(node.get("required", [])) - set(node.get("properties", {})):
            problems.append(f"{where}: required names without a property: {sorted(missing)}")
        if "enum" in node and node.get("type") != "string":
            problems.append(f"{where}: enum only on strings")
        for name in node.get("properties", {}):
            if not GEMINI_NAME.fullmatch(name):
                problems.append(f"{where}: property name {name!r} not allowed")
    return problems


def property_paths(schema: dict[str, Any]) -> set[str]:
    """The dotted paths of every property in ``schema`` (to check a conversion loses none)."""
    return {re.sub(r"\|\d+", "", path) for path, _, _ in _nodes(schema)} - {""}


def open_objects(schema: dict[str, Any]) -> set[str]:
    """Paths of the objects that take any keys (``additionalProperties: true``): strict mode has no form for them
    (a strict converter closes them to ``{}``, openai-agents keeps the tool non-strict instead)."""
    return {re.sub(r"\|\d+", "", path) or "root" for path, node, _ in _nodes(schema)
            if node.get("additionalProperties") is True}
