"""What each refusal of a use case is, in RFC 9457 terms, the same in every door: the
HTTP status, the problem type's slug and its title. The API answers it as
``application/problem+json``, the MCP tools as an ``isError`` result."""

from __future__ import annotations

from watchkeeper.triggers import SpecError

from .._errors import (
    AuthError,
    ConfigError,
    Conflict,
    DatabaseUnavailable,
    Forbidden,
    NotFound,
    WatchkeeperError,
)

__all__ = ["PROBLEM_KINDS", "PROBLEM_TYPE_BASE", "ProblemKind", "problem_kind"]

PROBLEM_TYPE_BASE = "urn:watchkeeper:problem:"
"""The prefix of every problem type (``urn:watchkeeper:problem:<slug>``)."""

ProblemKind = tuple[int, str, str]
"""``(status, slug, title)``."""

PROBLEM_KINDS: tuple[tuple[type[BaseException], int, str, str], ...] = (
    (SpecError, 422, "invalid-input", "The input is not valid"),
    (Forbidden, 403, "forbidden", "This principal may not do this"),
    (AuthError, 401, "unauthenticated", "Authentication is required"),
    (NotFound, 404, "not-found", "Not found"),
    (Conflict, 409, "conflict", "Conflicts with the current state"),
    (DatabaseUnavailable, 503, "unavailable", "The database is unreachable"),
    (ConfigError, 503, "misconfigured", "The deployment is misconfigured"),
    (WatchkeeperError, 500, "internal", "Internal error"),
)
"""Each refusal's class, first match wins (the CLI's exit codes map to the same kinds:
2 -> 422, 4 -> 401, 3 -> 404, 5 -> 409, 6 -> 503)."""


def problem_kind(exc: BaseException) -> ProblemKind:
    """``(status, slug, title)`` of ``exc``: the first :data:`PROBLEM_KINDS` entry it is
    an instance of, else ``(500, "internal", "Internal error")``."""
    return next(((status, slug, title) for cls, status, slug, title in PROBLEM_KINDS
                 if isinstance(exc, cls)), (500, "internal", "Internal error"))
