"""The command agent's answer contract: what its stdout may be, checked as a whole.

stdout is either plain markdown (the report; usage unknown) or one JSON object::

    {"report": "# ...", "importance": "low|normal|high", "artifact": "path or null",
     "headline": "one line",
     "usage": {"model_requests": 3, "tool_attempts": 5, "input_tokens": 1200,
               "output_tokens": 800, "cost_usd": "0.042"},
     "continuation": {"reason": "...", "instructions": "..."}}

``continuation`` is the run's explicit request for a further root run of the task
(granted within ``limits.max_roots``, the deadline and the budget).

Every key is optional (``report`` defaults to empty, ``importance`` to ``normal``, each
usage figure to 0); an unknown key is refused, so a typo (``"importnce"``) is not
silently dropped. Counts are non-negative JSON integers; ``cost_usd`` is a decimal
string or a JSON number (read exactly, never through a float), finite, non-negative,
with at most :data:`COST_DECIMAL_PLACES` digits after the point. The report and the
artifact path must be text PostgreSQL can store (:func:`storable_problem`: no NUL
character, no lone surrogate). JSON that is not an object (``[...]``, ``"..."``, a
number) is plain markdown, however deep its arrays nest; stdout that starts with ``{``
but is too deep (or has a number too long) for the JSON reader is refused, as no
object of the contract nests more than two levels. An answer that breaks the contract
raises :class:`AnswerInvalid` naming every problem at once; the worker fails the task
without another attempt (the same agent would print the same answer again).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr
from pydantic_core import PydanticCustomError

from watchkeeper.triggers import Importance

__all__ = ["COST_DECIMAL_PLACES", "COST_STEP", "MAX_COUNT", "Answer", "AnswerContinuation", "AnswerInvalid",
           "AnswerUsage", "parse_answer", "storable", "storable_problem"]

MAX_COUNT = 10**12
"""Upper bound of one reported count (requests, attempts, tokens): far above any real
run, low enough that sums over attempts stay within PostgreSQL's bigint."""

COST_DECIMAL_PLACES = 18
"""Digits a cost may have after the decimal point: finer than any price, and far within
PostgreSQL's ``numeric`` (16,383 digits after the point), which the run budget's sums
cast every recorded cost to."""

COST_STEP = Decimal(1).scaleb(-COST_DECIMAL_PLACES)
"""The smallest recordable cost (USD): a cost is rounded up to a multiple of it."""

_SHOWN = 60
"""Characters of a refused value quoted in a problem (a report may be megabytes)."""

_Count = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]


def storable_problem(what: str, text: str) -> str | None:
    """Why PostgreSQL's ``text`` cannot hold ``text``, or ``None`` when it can.

    ``what`` names the value in the sentence (``"the report"``). Two things cannot be
    stored: a NUL character (U+0000, refused by every PostgreSQL text type) and a lone
    surrogate (U+D800..U+DFFF, which has no UTF-8 encoding). Offsets count characters
    from 0. Source: PostgreSQL docs, "Character Types" ("the character with code zero
    cannot be stored") and the UTF-8 definition (RFC 3629 section 3).
    """
    nul = text.find("\x00")
    if nul >= 0:
        return f"{what} contains a NUL character at offset {nul}; PostgreSQL text cannot hold it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"{what} contains a lone surrogate U+{ord(text[exc.start]):04X} at offset "
                f"{exc.start}; it has no UTF-8 encoding, so PostgreSQL text cannot hold it")
    return None


def storable(what: str) -> AfterValidator:
    """A pydantic check that a string field passes :func:`storable_problem`."""
    def check(value: str | None) -> str | None:
        problem = None if value is None else storable_problem(what, value)
        if problem is not None:
            raise PydanticCustomError("not_storable", problem)
        return value
    return AfterValidator(check)


class AnswerUsage(BaseModel):
    """What the command reports it consumed in this run (dimensionless counts; cost in
    USD, a :class:`~decimal.Decimal`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_requests: _Count = 0
    tool_attempts: _Count = 0
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cost_usd: Annotated[Decimal, Field(ge=0, le=10**9, allow_inf_nan=False,
                                       decimal_places=COST_DECIMAL_PLACES)] = Decimal(0)


class AnswerContinuation(BaseModel):
    """A continuation intent in an agent's answer (a command's JSON, the model agent's
    structured answer): why, and what the next root should do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: Annotated[StrictStr, Field(min_length=1, max_length=20_000, pattern=r"\S",
                                       description="Why the work cannot be finished in this "
                                       "run."),
                      storable("the continuation's reason")]
    instructions: Annotated[StrictStr, Field(min_length=1, max_length=20_000, pattern=r"\S",
                                             description="What the next run should do."),
                            storable("the continuation's instructions")]


class Answer(BaseModel):
    """A command agent's JSON answer (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    report: Annotated[StrictStr, storable("the report")] = ""
    importance: Importance = Importance.NORMAL
    artifact: Annotated[StrictStr | None, Field(min_length=1),
                        storable("the artifact path")] = None
    usage: AnswerUsage = AnswerUsage()
    headline: Annotated[StrictStr, Field(max_length=200), storable("the headline")] = ""
    continuation: AnswerContinuation | None = None


class AnswerInvalid(ValueError):
    """stdout breaks the answer contract.

    Attributes:
        problems: one ``"<field>: <what is wrong> (got <value>)"`` line per problem.
    """

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_answer(text: str) -> Answer:
    """Read a command agent's stdout (see the module docstring for the contract).

    Plain text (anything that is not a JSON object) is the markdown report itself, with
    importance ``normal`` and no usage reported. JSON numbers are parsed as exact
    decimals; ``NaN`` and ``Infinity`` are read and then refused as costs.

    Raises:
        AnswerInvalid: a JSON object that breaks the contract, every problem named; a
            report that cannot be stored; stdout starting with ``{`` that nests too
            deep or holds a number too long to read.
    """
    try:
        data: Any = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError:
        data = None
    except (RecursionError, ValueError) as exc:  # too deep; an integer past 4,300 digits
        if text.lstrip().startswith("{"):
            raise AnswerInvalid((f"answer: a JSON object the reader cannot follow "
                                 f"({_unreadable(exc)}); the contract's objects nest two "
                                 "levels and hold short numbers",)) from None
        data = None
    if not isinstance(data, dict):
        data = {"report": text}
    try:
        return Answer.model_validate(data)
    except pydantic.ValidationError as exc:
        raise AnswerInvalid(tuple(_problem(error) for error in exc.errors())) from None


def _unreadable(exc: BaseException) -> str:
    """Why the JSON reader gave up, in a few words."""
    if isinstance(exc, RecursionError):
        return "nested deeper than Python's recursion limit"
    return str(exc).split(";")[0]


def _problem(error: Any) -> str:
    """One pydantic error as ``field: message (got value)``, the value cut to
    :data:`_SHOWN` characters."""
    where = ".".join(str(part) for part in error["loc"]) or "answer"
    shown = repr(error["input"])
    if len(shown) > _SHOWN:
        shown = f"{shown[:_SHOWN]}... ({len(shown)} characters)"
    return f"{where}: {error['msg']} (got {shown})"
