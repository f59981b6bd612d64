"""`null` read as "absent" for every field that has a default.

Strict function-calling clients (OpenAI strict mode and the frameworks built on it) must send every property of
an object, and send `null` for the ones the model leaves out. Reading that `null` as the field's default makes
such a call mean what the same call without the key means. The one exception: a field whose type takes `null`
and whose default is something else keeps its `null` (there, null says something the default does not).
"""

from __future__ import annotations

import types
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, model_validator


def _takes_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_none(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_takes_none(a) for a in get_args(annotation))
    return False


@cache
def defaulted_fields(model: type[BaseModel]) -> frozenset[str]:
    """Names (and aliases) of ``model``'s fields for which null means the default: those with a default that do not
    take null, and those whose default is null."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        if field.is_required() or (_takes_none(field.annotation) and field.default is not None):
            continue
        names.add(name)
        if field.alias:
            names.add(field.alias)
    return frozenset(names)


def null_is_absent(model: type[BaseModel], data: Any) -> Any:
    """``data`` without the null values that mean a field's default (see the module)."""
    if not isinstance(data, dict):
        return data
    fields = defaulted_fields(model)
    if not any(data.get(name, 0) is None for name in fields):
        return data
    return {k: v for k, v in data.items() if not (v is None and k in fields)}


def _submodel(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    field = model.model_fields.get(key) or next((f for f in model.model_fields.values() if f.alias == key), None)
    if field is None:
        return None
    for ann in (field.annotation, *get_args(field.annotation)):
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
    return None


def without_nulls(model: type[BaseModel], data: Any) -> Any:
    """``data`` read against ``model`` with the nulls of defaulted fields removed at every level of its nested
    models (not inside free-form objects such as an hf_config): for the checks that read a document as given,
    before the model parses it."""
    if not isinstance(data, dict):
        return data
    drop = defaulted_fields(model)
    out: dict[Any, Any] = {}
    for key, value in data.items():
        if value is None and key in drop:
            continue
        sub = _submodel(model, key) if isinstance(value, dict) else None
        out[key] = without_nulls(sub, value) if sub is not None else value
    return out


class NullMeansAbsent(BaseModel):
    """Base of input models: a `null` field with a default is read as absent (see the module)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        return null_is_absent(cls, data)
