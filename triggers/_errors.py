"""The exceptions of :mod:`triggers`.

::

    TriggerError                      base of everything raised here
    ├── SpecError (ValueError)        a definition spec is invalid: names the field and the fix
    │   └── NoOccurrenceError         a valid-looking schedule that never fires
    └── NonAdvancingScheduleError     a next-time computation did not move forward (a bug guard)

Every error is raised while a spec is proposed or a schedule is enumerated;
none of them is retryable: the input has to change.
"""

from __future__ import annotations


class TriggerError(Exception):
    """Base class of all errors raised by :mod:`triggers`."""


class SpecError(TriggerError, ValueError):
    """A definition spec (or one of its fields) is invalid.

    Attributes:
        field: dotted path of the offending field, e.g. ``"trigger.zone"``.
        problem: what is wrong, in one sentence.
        fix: what to write instead, in one sentence.
    """

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem} Fix: {fix}")


class NoOccurrenceError(SpecError):
    """The schedule is well-formed but has no occurrence at all (e.g. ``0 0 31 2 *``),
    or none after the instant asked about."""


class NonAdvancingScheduleError(TriggerError):
    """A next-occurrence computation returned an instant that is not strictly later
    than the previous one. Raised instead of looping forever."""
