"""Identifiers and the fan-out bindings of operator-registered definitions.

A binding is one (tenant, binding id) unit a registered definition fans out to,
with a real owner user (no synthetic actor), an agent, a message and params, and
its delivery and audiences (seed 001). A resolved set is validated as a whole:
duplicate (tenant, binding id) pairs, empty values or reserved keys fail the
definition's whole tick contribution and claim nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ._agent_params import MODEL_AGENT, RESERVED_PARAM_KEYS, ModelAgentParams
from ._errors import SpecError
from ._spec import Delivery
from ._storable import refuse_unstorable

__all__ = [
    "IDENTIFIER_PATTERN",
    "Binding",
    "BindingSetError",
    "OPERATOR_TENANT",
    "RESERVED_PARAM_KEYS",
    "USER_BINDING_ID",
    "check_identifier",
    "validate_bindings",
]

OPERATOR_TENANT = "_operator"
"""Pseudo-tenant under which operator-registered definitions are stored; user
tenants may not start with ``_``."""

USER_BINDING_ID = "owner"
"""The one binding of a user-confirmed definition; reserved for operator bindings."""


_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
IDENTIFIER_PATTERN = f"^{_IDENT.pattern}$"
"""The rule of :func:`check_identifier` as a JSON Schema ``pattern`` (for doors' schemas)."""
"""Matched whole (``fullmatch``): ``$`` would also match before a final newline."""


def check_identifier(value: str, field: str) -> str:
    """Return ``value`` if it is a valid identifier (1-128 chars of letters, digits,
    ``. _ : @ -``, starting with a letter or digit).

    Raises:
        SpecError: naming ``field``.
    """
    if not isinstance(value, str) or not _IDENT.fullmatch(value):
        raise SpecError(
            field, f"{value!r} is not a valid identifier.",
            "use 1-128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit.",
        )
    return value


class Binding(BaseModel):
    """One fan-out unit of an operator-registered agent definition."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant_id: str
    binding_id: str
    owner_user_id: str
    agent: str = "digest"
    message: str = ""
    params: dict[str, JsonValue] = Field(default_factory=dict)
    delivery: tuple[Delivery, ...] = (Delivery(),)
    audiences: tuple[str, ...] | None = None


class BindingSetError(SpecError):
    """A resolved binding set is invalid as a whole: one problem (field ``bindings``)
    whose text lists every fault found, so a tick records them in one reason.

    Attributes:
        messages: one sentence per fault found.
    """

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages
        super().__init__(
            "bindings", "; ".join(messages) + ".",
            "make every (tenant_id, binding_id) pair unique and every value non-empty; "
            "'schedule' in params is reserved.",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.messages,)


def validate_bindings(items: Iterable[Binding | Mapping[str, Any]] | Any) -> tuple[Binding, ...]:
    """Validate a resolved binding set as a whole.

    Raises:
        BindingSetError: listing every problem (duplicates, empty or malformed
            values, reserved keys); nothing of the set may be used.
    """
    problems: list[str] = []
    bindings: list[Binding] = []
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise BindingSetError([f"a binding set must be a list, not {type(items).__name__}"])
    for index, item in enumerate(items):
        try:
            binding = item if isinstance(item, Binding) else Binding.model_validate(item)
        except (pydantic.ValidationError, TypeError) as exc:
            if isinstance(exc, TypeError):
                problems.append(f"binding {index}: {type(item).__name__} is not a binding")
                continue
            problems.append(f"binding {index}: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}")
            continue
        problems.extend(_problems(index, binding))
        bindings.append(binding)
    pairs = Counter((b.tenant_id, b.binding_id) for b in bindings)
    problems.extend(f"duplicate binding {t}/{b} ({n} times)" for (t, b), n in pairs.items() if n > 1)
    if problems:
        raise BindingSetError(problems)
    return tuple(bindings)


def _problems(index: int, binding: Binding) -> list[str]:
    found = []
    for name in ("tenant_id", "binding_id", "owner_user_id", "agent"):
        value = getattr(binding, name)
        if not value.strip():
            found.append(f"binding {index}: {name} is empty")
        elif not _IDENT.fullmatch(value):
            found.append(f"binding {index}: {name} {value!r} is not a valid identifier")
    if binding.tenant_id.startswith("_"):
        found.append(f"binding {index}: tenant_id {binding.tenant_id!r} is reserved")
    if binding.binding_id == USER_BINDING_ID:
        found.append(f"binding {index}: binding_id {USER_BINDING_ID!r} is reserved")
    reserved = RESERVED_PARAM_KEYS & set(binding.params)
    if reserved:
        found.append(f"binding {index}: params key(s) {sorted(reserved)} are reserved")
    if binding.agent == MODEL_AGENT:
        try:
            ModelAgentParams.from_task_params(dict(binding.params))
        except pydantic.ValidationError as exc:
            found.extend(f"binding {index}: params.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                         for e in exc.errors())
    try:
        refuse_unstorable(binding.model_dump(mode="python"), f"binding {index}")
    except SpecError as exc:
        found.extend(f"{p.field} {p.problem.rstrip('.')}" for p in exc.problems)
    return found
