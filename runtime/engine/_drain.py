"""A supervisor's graceful shutdown: its phases and what the drain did.

SIGTERM (or :meth:`Supervisor.drain`) starts a drain: the supervisor claims nothing
new — no tick admissions, polls, task claims or delivery claims — and what is in
flight gets a drain deadline (``WATCHKEEPER_DRAIN_SECONDS``, default 30 s). What is still
running then is interrupted: each run is recorded ``interrupted`` with the reason and
its task released at once (pending, lease cleared), so another supervisor runs it as
its next attempt within the task's deadline, ``max_attempts`` and budget instead of
waiting for the lease to expire. A second request interrupts at once; a third cancels
everything (what was being recorded then is left to lease expiry, as after SIGKILL).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._worker import TaskOutcome

__all__ = ["DrainReport", "Shutdown"]


class Shutdown(enum.StrEnum):
    """Where a supervisor is in its shutdown; each stop request moves it one step."""

    RUNNING = "running"
    """No stop requested."""
    DRAINING = "draining"
    """Claiming nothing new; what is in flight has until the drain deadline."""
    INTERRUPTING = "interrupting"
    """In-flight runs cancelled, recorded ``interrupted``, their tasks released."""
    ABANDONED = "abandoned"
    """Everything cancelled at once; leases still held expire and are taken over."""


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What a supervisor's drain did (:meth:`Supervisor.drain_report`).

    Attributes:
        seconds: the drain deadline it was given, seconds (0: none).
        reason: why what was left was interrupted (the deadline passed, or a second
            request); ``None`` when everything in flight finished in time.
        finished: tasks whose run was in flight when the drain began and that ended on
            their own during it (completed, failed, retried, ...).
        interrupted: tasks whose run was interrupted: ``status`` ``pending`` when the
            task was released for another attempt, else how it ended (``failed``: that
            was its last attempt; ``timed_out``: its deadline had passed).
        deliveries_released: notices in flight that were released (due again at once).
    """

    seconds: float
    reason: str | None
    finished: tuple[TaskOutcome, ...]
    interrupted: tuple[TaskOutcome, ...]
    deliveries_released: int = 0

    @property
    def released(self) -> tuple[TaskOutcome, ...]:
        """The interrupted tasks that were given back for another attempt."""
        return tuple(o for o in self.interrupted if o.status == "pending")

    def summary(self) -> str:
        """One line for people, e.g. ``drained: 2 finished, 1 interrupted and released
        (task 17)``."""
        released = self.released
        ended = [o for o in self.interrupted if o.status != "pending"]
        parts = [f"{len(self.finished)} finished",
                 f"{len(released)} interrupted and released"
                 + (f" ({_tasks(released)})" if released else "")]
        if ended:
            parts.append(f"{len(ended)} interrupted and ended ("
                         + ", ".join(f"task {o.task_id} {o.status}" for o in ended) + ")")
        if self.deliveries_released:
            noun = "notice" if self.deliveries_released == 1 else "notices"
            parts.append(f"{self.deliveries_released} {noun} released")
        return "drained: " + ", ".join(parts)


def _tasks(outcomes: tuple[TaskOutcome, ...]) -> str:
    return "task " + ", ".join(str(o.task_id) for o in outcomes)
