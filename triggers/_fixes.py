"""Pydantic's validation errors as problems a model can act on: the field, what is
wrong, and what fits instead ("write an integer from 1 to 20, such as 3"), never a
link to pydantic's documentation or "see the README".

:func:`validation_problems` translates any :class:`pydantic.ValidationError` (a tool's
arguments, an agent's params); :func:`problem_of_error` one error of it, which the spec
parser uses for every error it has no better words for. The allowed range comes from
the field's own constraints (``Field(ge=1, le=20)``) found under ``root``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import annotated_types
import pydantic
from pydantic.fields import FieldInfo

from ._errors import SpecProblem
from ._storable import field_part

__all__ = ["FixableValueError", "field_info", "problem_of_error", "validation_problems"]


class FixableValueError(ValueError):
    """A validator's refusal that knows its fix but not its field (the translator adds
    the field): ``FixableValueError("is not ...", "write ...")``."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def validation_problems(exc: pydantic.ValidationError,
                        root: type[pydantic.BaseModel] | None = None) -> list[SpecProblem]:
    """Every error of ``exc`` as a problem, in pydantic's order; ``root`` is the model
    validated (its fields' constraints name the range that fits)."""
    return [problem_of_error(error, root) for error in exc.errors()]


def where_of(loc: Iterable[int | str]) -> str:
    """The dotted field path of a pydantic location (``"request"`` if empty)."""
    return ".".join(field_part(p) for p in loc) or "request"


def problem_of_error(error: Any, root: type[pydantic.BaseModel] | None = None,
                     where: str | None = None) -> SpecProblem:
    """One pydantic error (an item of ``ValidationError.errors()``) as a problem."""
    where = where_of(error["loc"]) if where is None else where
    kind, value = str(error["type"]), error.get("input")
    context = error.get("ctx") or {}
    original = context.get("error")
    if isinstance(original, FixableValueError):
        return SpecProblem(where, f"{_shown(value)} {original.problem}", original.fix)
    info = field_info(root, tuple(error["loc"])) if root is not None else None
    low, high = _bounds(info)
    shape = _shape(kind, info)
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        low = context.get("ge", low) if kind == "greater_than_equal" else low
        high = context.get("le", context.get("lt", high)) if kind.startswith("less") else high
        return SpecProblem(where, f"{_shown(value)} is {_relation(kind, context)}.",
                           _write(shape, low, high, info))
    if shape is not None:
        return SpecProblem(where, f"{_shown(value)} is not {_article(shape)}.",
                           _write(shape, low, high, info))
    return SpecProblem(where, *_other(kind, value, context, where))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_SHAPES = {"int": "integer", "float": "number", "decimal": "decimal",
           "bool": "boolean", "string": "string", "datetime": "datetime",
           "list": "list", "tuple": "list", "dict": "object", "model": "object",
           "timezone": "datetime"}


def _shape(kind: str, info: FieldInfo | None) -> str | None:
    """What the field holds, from the error's type (``int_parsing``: integer) or, for a
    range error, from the field's annotation."""
    if kind in ("string_too_long", "string_too_short", "string_pattern_mismatch"):
        return None
    head = kind.split("_")[0]
    if head in _SHAPES and kind not in ("model_attributes_type",):
        return _SHAPES[head]
    if kind.startswith(("greater", "less")):
        base = _base_type(info.annotation) if info is not None else None
        return {int: "integer", float: "number", Decimal: "decimal"}.get(base, "number")  # type: ignore[arg-type]
    return None


def _article(shape: str) -> str:
    return {"integer": "an integer", "number": "a number", "decimal": "a decimal number",
            "boolean": "true or false", "string": "text", "datetime": "a date and time",
            "list": "a list", "object": "an object"}[shape]


def _relation(kind: str, context: dict[str, Any]) -> str:
    bound = context.get("ge", context.get("gt", context.get("le", context.get("lt"))))
    return {"greater_than_equal": "less than the minimum", "greater_than": "not more than",
            "less_than_equal": "more than the maximum", "less_than": "not less than"}[kind] + \
        f" {bound}"


def _write(shape: str | None, low: Any, high: Any, info: FieldInfo | None) -> str:
    """What fits: the shape, its range, an example."""
    span = _span(low, high)
    if shape == "integer":
        return f"write an integer{span}, such as {_example(int, low, high, info, 5)}."
    if shape == "number":
        return f"write a number{span}, such as {_example(float, low, high, info, 0.5)}."
    if shape == "decimal":
        example = _example(Decimal, low, high, info, Decimal("0.25"))
        return f'write a decimal string{span}, such as "{example}".'
    if shape == "boolean":
        return "write true or false."
    if shape == "string":
        return 'write text in quotes, such as "weekly check".'
    if shape == "datetime":
        return ("write RFC 3339 with an offset, such as 2026-03-29T01:00:00Z or "
                "2026-03-29T03:00:00+02:00.")
    if shape == "list":
        return "write a list (JSON [...], TOML [...])."
    return "write an object of named fields (JSON {...}, a TOML table)."


def _span(low: Any, high: Any) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    return f" of at most {high}" if high is not None else ""


def _example(kind: type, low: Any, high: Any, info: FieldInfo | None, usual: Any) -> Any:
    """The field's default if it is a ``kind``, else ``usual`` moved into the range."""
    default = info.default if info is not None else None
    if isinstance(default, kind) and not isinstance(default, bool):
        return default
    value = usual
    if low is not None and value < low:
        value = kind(low)
    if high is not None and value > high:
        value = kind(high)
    return value


def _other(kind: str, value: Any, context: dict[str, Any], where: str) -> tuple[str, str]:
    """Problem and fix of an error that is not about a value's shape or range."""
    name = where.rsplit(".", 1)[-1]
    if kind == "missing":
        return "is missing.", f"add {name}."
    if kind == "extra_forbidden":
        return "is not a field here.", f"remove {name}, or check its spelling."
    if kind == "string_too_long":
        limit = context.get("max_length")
        return (f"is longer than {limit} characters.",
                f"shorten it to at most {limit} characters.")
    if kind == "string_too_short":
        limit = context.get("min_length")
        return (f"is shorter than {limit} character{'s' if limit != 1 else ''}.",
                f"write at least {limit} character{'s' if limit != 1 else ''}.")
    if kind == "string_pattern_mismatch":
        return (f"{_shown(value)} does not match the pattern {context.get('pattern')}.",
                f"write text matching {context.get('pattern')}.")
    if kind in ("literal_error", "enum"):
        return f"{_shown(value)} is not allowed.", f"use {context.get('expected', '')}."
    if kind in ("too_long", "too_short"):
        return (f"has {context.get('actual_length')} items.",
                f"give {context.get('min_length', 0)} to {context.get('max_length')} items.")
    message = str(context.get("error") or "").strip() or str(dict(context) or "")
    text = message or kind.replace("_", " ")
    return f"{_shown(value)} is not accepted: {text}.", f"write a valid {name}."


def field_info(root: type[pydantic.BaseModel], loc: tuple[int | str, ...]) -> FieldInfo | None:
    """The field at ``loc`` under ``root`` (list indexes and union tags skipped)."""
    models: list[type[pydantic.BaseModel]] = [root]
    info: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):
            continue
        found = next((m.model_fields[part] for m in models if part in m.model_fields), None)
        if found is None:
            continue  # a union's tag, or a key of a free-form table
        info = found
        models = list(_models_in(found.annotation))
    return info


def _models_in(annotation: Any) -> Iterable[type[pydantic.BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _bounds(info: FieldInfo | None) -> tuple[Any, Any]:
    """The field's ``ge``/``gt`` and ``le``/``lt`` (``None`` where it has none)."""
    if info is None:
        return None, None
    low = high = None
    for item in [*info.metadata, *_nested_metadata(info.annotation)]:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        if isinstance(item, annotated_types.Gt):  # an integer above gt starts at gt + 1
            low = item.gt + 1 if _base_type(info.annotation) is int else item.gt
        if isinstance(item, annotated_types.Le | annotated_types.Lt):
            high = getattr(item, "le", getattr(item, "lt", None))
    return low, high


def _nested_metadata(annotation: Any) -> list[Any]:
    """The constraints inside ``Annotated[...]`` within a union such as ``X | None``."""
    found: list[Any] = []
    if typing.get_origin(annotation) is typing.Annotated:
        for item in annotation.__metadata__:
            found.extend(item.metadata if isinstance(item, FieldInfo) else [item])
        return found
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found.extend(_nested_metadata(arg))
    return found


def _base_type(annotation: Any) -> Any:
    """``int`` of ``Annotated[int, ...] | None`` and the like."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _base_type(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        bases = [_base_type(a) for a in typing.get_args(annotation) if a is not type(None)]
        return bases[0] if len(bases) == 1 else None
    return annotation
