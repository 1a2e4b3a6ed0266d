"""Tool results: an answer as structured content (and the same JSON as text), a refusal
as an error result the model can read and act on — mapped in one place from the
runtime's exception tree, as the HTTP API maps it to statuses and the CLI to exit codes.

=================== ====== ===================== ==========================================
exception           status type                  what the model should do
=================== ====== ===================== ==========================================
SpecError           422    invalid-input         fix every listed field, call again
Forbidden           403    forbidden             not retry: an agent key may never do this
AuthError           401    unauthenticated       not retry: the key is unknown or revoked
NotFound            404    not-found             check the id (another tenant's is absent)
Conflict            409    conflict              re-read, then base the edit on the latest
DatabaseUnavailable 503    unavailable           retry later (``retryable``)
ConfigError         503    misconfigured         tell the operator
WatchkeeperError    500    internal              tell the operator (no detail is shown)
=================== ====== ===================== ==========================================

An exception outside this tree is a crash: it is left to the SDK, which logs it and
answers ``Error executing tool <name>`` without its text.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from watchkeeper.runtime import (
    DatabaseUnavailable,
)
from watchkeeper.runtime import usecases as uc
from watchkeeper.triggers import SpecError

from ._models import FieldProblem, ToolProblem

__all__ = ["KNOWN", "READ_META", "TYPE_BASE", "answer", "problem_of", "read_from", "refusal"]

TYPE_BASE = uc.PROBLEM_TYPE_BASE


KNOWN: tuple[type[BaseException], ...] = tuple(cls for cls, *_ in uc.PROBLEM_KINDS)
"""The exceptions a tool answers as a refusal (anything else is a crash)."""


def problem_of(exc: BaseException) -> ToolProblem:
    """The problem details of ``exc`` (one of :data:`KNOWN`): a spec error lists every
    problem with its field and fix; an internal error shows no detail."""
    status, slug, title = uc.problem_kind(exc)
    errors = [FieldProblem(**p) for p in exc.to_json()] if isinstance(exc, SpecError) else []
    return ToolProblem(type=TYPE_BASE + slug, title=title, status=status,
                       detail=str(exc) if status != 500 else "",
                       retryable=isinstance(exc, DatabaseUnavailable), errors=errors)


def _text(data: Any) -> list[TextContent]:
    return [TextContent(type="text", text=json.dumps(data, indent=2, ensure_ascii=False))]


def answer(model: BaseModel) -> CallToolResult:
    """A successful result: ``model`` as structured content and as JSON text."""
    data = model.model_dump(mode="json")
    return CallToolResult(content=_text(data), structured_content=data)


READ_META = "watchkeeper/read"
"""The key of ``_meta`` that says where an answer was read (with a read standby)."""


def read_from(result: CallToolResult, source: uc.ReadSource | None) -> CallToolResult:
    """``result`` saying where it was read, when a read standby is configured: in
    ``_meta`` (``{"watchkeeper/read": {"server", "lag_seconds", "replayed_at",
    "fallback"}}``) and as a second text item the model reads ("Read from the standby:
    it may be up to 0.4 s behind the primary."); unchanged when ``source`` is ``None``."""
    if source is None:
        return result
    return result.model_copy(update={
        "meta": {**(result.meta or {}), READ_META: source.to_json()},
        "content": [*result.content, TextContent(type="text", text=source.describe())]})


def refusal(exc: BaseException) -> CallToolResult:
    """An error result (``isError``) carrying ``exc``'s problem details, structured and as
    JSON text."""
    data = problem_of(exc).model_dump(mode="json")
    return CallToolResult(content=_text(data), structured_content=data, is_error=True)
