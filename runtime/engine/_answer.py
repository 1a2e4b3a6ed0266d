"""The command agent's answer contract: what its stdout may be, checked as a whole.

stdout is either plain markdown (the report; usage unknown) or one JSON object::

    {"report": "# ...", "importance": "low|normal|high", "artifact": "path or null",
     "usage": {"model_requests": 3, "tool_attempts": 5, "input_tokens": 1200,
               "output_tokens": 800, "cost_usd": "0.042"}}

Every key is optional (``report`` defaults to empty, ``importance`` to ``normal``, each
usage figure to 0); an unknown key is refused, so a typo (``"importnce"``) is not
silently dropped. Counts are non-negative JSON integers; ``cost_usd`` is a decimal
string or a JSON number (read exactly, never through a float), finite and non-negative.
An answer that breaks the contract raises :class:`AnswerInvalid` naming every problem
at once; the worker fails the task without another attempt (the same agent would print
the same answer again).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from watchkeeper.triggers import Importance

__all__ = ["Answer", "AnswerInvalid", "AnswerUsage", "parse_answer"]

_MAX_COUNT = 10**12
"""Upper bound of one reported count (requests, attempts, tokens): far above any real
run, low enough that sums over attempts stay within PostgreSQL's bigint."""

_Count = Annotated[StrictInt, Field(ge=0, le=_MAX_COUNT)]


class AnswerUsage(BaseModel):
    """What the command reports it consumed in this run (dimensionless counts; cost in
    USD, a :class:`~decimal.Decimal`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_requests: _Count = 0
    tool_attempts: _Count = 0
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cost_usd: Annotated[Decimal, Field(ge=0, le=10**9, allow_inf_nan=False)] = Decimal(0)


class Answer(BaseModel):
    """A command agent's JSON answer (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    report: StrictStr = ""
    importance: Importance = Importance.NORMAL
    artifact: Annotated[StrictStr, Field(min_length=1)] | None = None
    usage: AnswerUsage = AnswerUsage()


class AnswerInvalid(ValueError):
    """stdout was a JSON object that breaks the answer contract.

    Attributes:
        problems: one ``"<field>: <what is wrong> (got <value>)"`` line per problem.
    """

    def __init__(self, problems: tuple[str, ...]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_answer(text: str) -> Answer:
    """Read a command agent's stdout.

    Plain text (anything that is not a JSON object) is the markdown report itself, with
    importance ``normal`` and no usage reported. JSON numbers are parsed as exact
    decimals; ``NaN`` and ``Infinity`` are read and then refused as costs.

    Raises:
        AnswerInvalid: a JSON object that breaks the contract, every problem named.
    """
    try:
        data = json.loads(text, parse_float=Decimal)
    except ValueError:
        return Answer(report=text)
    if not isinstance(data, dict):
        return Answer(report=text)
    try:
        return Answer.model_validate(data)
    except pydantic.ValidationError as exc:
        raise AnswerInvalid(tuple(_problem(error) for error in exc.errors())) from None


def _problem(error: Any) -> str:
    """One pydantic error as ``field: message (got value)``."""
    where = ".".join(str(part) for part in error["loc"]) or "answer"
    return f"{where}: {error['msg']} (got {error['input']!r})"
