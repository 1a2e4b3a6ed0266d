"""The exceptions of :mod:`triggers`.

::

    TriggerError                      base of everything raised here
    ├── SpecError (ValueError)        a definition spec is invalid: every problem found,
    │   │                             each naming the field and the fix (.problems)
    │   └── NoOccurrenceError         a valid-looking schedule that never fires
    └── NonAdvancingScheduleError     a next-time computation did not move forward (a bug guard)

Every error is raised while a spec is proposed or a schedule is enumerated;
none of them is retryable: the input has to change.

A spec with several mistakes raises *one* :class:`SpecError` that lists them all
(:attr:`SpecError.problems`), so whoever fixes it — often an agent — can do so in one
round. :class:`SpecProblems` gathers the problems of independent checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NoOccurrenceError", "NonAdvancingScheduleError", "SpecError", "SpecProblem",
           "SpecProblems", "SpecWarning", "TriggerError"]


class TriggerError(Exception):
    """Base class of all errors raised by :mod:`triggers`."""


def _sentence(text: str) -> str:
    """``text`` ending in a full stop (so "... Fix: ..." always reads as two sentences)."""
    text = text.rstrip()
    return text if not text or text[-1] in ".!?" else text + "."


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong with a spec.

    Attributes:
        field: dotted path of the offending field, e.g. ``"trigger.zone"``
            (``"file"`` for the file itself, ``"<path>:<line>"`` for a line of a file).
        problem: what is wrong, in one sentence.
        fix: what to write instead, in one sentence.
    """

    field: str
    problem: str
    fix: str

    def to_json(self) -> dict[str, str]:
        """``{"field", "message", "fix"}``: one entry of an RFC 9457 problem document's
        ``errors`` list (STYLE "Errors a client can act on")."""
        return {"field": self.field, "message": _sentence(self.problem), "fix": self.fix}

    def __str__(self) -> str:
        return f"{self.field}: {_sentence(self.problem)} Fix: {self.fix}"


@dataclass(frozen=True, slots=True)
class SpecWarning:
    """Something an accepted spec does that its author should know: a zone stored
    under another name (``US/Eastern is stored as America/New_York``), a fixed offset
    that never follows DST. Not an error: the spec is accepted as it is.

    Attributes:
        field: dotted path of the field it is about, e.g. ``"trigger.zone"``.
        message: what to know, in one or two sentences.
    """

    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        """``{"field", "message"}``: one entry of an answer's ``warnings`` list."""
        return {"field": self.field, "message": _sentence(self.message)}

    def __str__(self) -> str:
        return f"{self.field}: {_sentence(self.message)}"


class SpecError(TriggerError, ValueError):
    """A definition spec (or one of its fields) is invalid.

    ``SpecError(field, problem, fix)`` is one problem; :meth:`of` builds one error
    from several. ``str(exc)`` is ``"<field>: <problem> Fix: <fix>"`` for one problem,
    and for several a count followed by one such line per problem.

    Attributes:
        problems: every problem found, at least one, in a stable order (the order the
            fields appear in the spec's model, then the order of the checks).
        field: the first problem's field, e.g. ``"trigger.zone"``.
        problem: the first problem: what is wrong, in one sentence.
        fix: the first problem: what to write instead, in one sentence.
    """

    problems: tuple[SpecProblem, ...]

    def __init__(self, field: str, problem: str, fix: str, *,
                 more: Sequence[SpecProblem] = ()) -> None:
        self.problems = (SpecProblem(field, problem, fix), *more)
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(self._message())

    @classmethod
    def of(cls, problems: Iterable[SpecProblem]) -> SpecError:
        """One error carrying ``problems`` (in order, duplicates dropped).

        Raises:
            ValueError: ``problems`` is empty.
        """
        unique = tuple(dict.fromkeys(problems))
        if not unique:
            raise ValueError("SpecError.of needs at least one problem")
        first = unique[0]
        return cls(first.field, first.problem, first.fix, more=unique[1:])

    def _message(self) -> str:
        if len(self.problems) == 1:
            return str(self.problems[0])
        lines = "\n".join(f"- {p}" for p in self.problems)
        return f"{len(self.problems)} problems:\n{lines}"

    def to_json(self) -> list[dict[str, str]]:
        """Every problem as ``{"field", "message", "fix"}``, in order: the ``errors``
        member of an RFC 9457 problem document (the HTTP API adds type, title and
        status; the CLI prints it as is with ``--json``)."""
        return [p.to_json() for p in self.problems]

    def prefixed(self, prefix: str) -> SpecError:
        """The same problems with ``prefix.`` before every field (same class)."""
        return self.renamed(lambda field: f"{prefix}.{field}" if prefix else field)

    def renamed(self, rename: Callable[[str], str]) -> SpecError:
        """The same problems with every field passed through ``rename`` (same class)."""
        return _rebuild(type(self), tuple(
            SpecProblem(rename(p.field), p.problem, p.fix) for p in self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.problems)


def _rebuild(cls: type[SpecError], problems: tuple[SpecProblem, ...]) -> SpecError:
    """A ``cls`` carrying ``problems`` (also how a pickled error is restored)."""
    error = SpecError.__new__(cls)
    first = problems[0]
    SpecError.__init__(error, first.field, first.problem, first.fix, more=problems[1:])
    return error


class SpecProblems:
    """Gathers the problems of independent checks, then raises them as one error.

    ::

        found = SpecProblems()
        with found.check():
            check_identifier(value, "id")
        with found.check("limits"):
            Limits.model_validate(...)
        found.raise_if_any()
    """

    def __init__(self) -> None:
        self._problems: list[SpecProblem] = []
        self._errors: list[SpecError] = []

    def __bool__(self) -> bool:
        return bool(self._problems)

    @property
    def problems(self) -> tuple[SpecProblem, ...]:
        """The problems gathered so far, in order."""
        return tuple(self._problems)

    def add(self, field: str, problem: str, fix: str) -> None:
        """Record one problem."""
        self._problems.append(SpecProblem(field, problem, fix))

    def extend(self, error: SpecError, prefix: str = "") -> None:
        """Record every problem of ``error`` (fields prefixed with ``prefix.``)."""
        error = error.prefixed(prefix) if prefix else error
        self._errors.append(error)
        self._problems.extend(error.problems)

    @contextlib.contextmanager
    def check(self, prefix: str = "") -> Iterator[None]:
        """Run the block; a :class:`SpecError` it raises is recorded, not propagated."""
        try:
            yield
        except SpecError as exc:
            self.extend(exc, prefix)

    def raise_if_any(self) -> None:
        """Raise one :class:`SpecError` with every problem gathered, if any.

        A single recorded error is raised as itself (keeping its class, e.g.
        :class:`NoOccurrenceError`).

        Raises:
            SpecError: at least one problem was recorded.
        """
        if not self._problems:
            return
        if len(self._errors) == 1 and self._errors[0].problems == tuple(self._problems):
            raise self._errors[0]
        raise SpecError.of(self._problems)


class NoOccurrenceError(SpecError):
    """The schedule is well-formed but has no occurrence at all (e.g. ``0 0 31 2 *``),
    or none after the instant asked about."""


class NonAdvancingScheduleError(TriggerError):
    """A next-occurrence computation returned an instant that is not strictly later
    than the previous one. Raised instead of looping forever."""
