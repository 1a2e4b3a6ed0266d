"""The exceptions of :mod:`runtime`.

::

    WatchkeeperError
    ├── ConfigError              bad settings or environment; names the variable
    ├── NotFound                 no such tenant, user, definition, revision, task
    ├── Conflict                 the state changed under you (stale base revision,
    │                            a cancelled definition, a duplicate manual trigger)
    ├── AuthError                missing, wrong or revoked credentials (HTTP 401)
    │   └── Forbidden            authenticated, but this principal may not do this
    │                            (an agent key asking to confirm: HTTP 403)
    ├── DatabaseUnavailable      transient: connection refused or dropped (retryable)
    │   ├── CommitOutcomeUnknown the COMMIT acknowledgement was lost
    │   └── LockStall            a statement gave up waiting for a lock, or ran past
    │                            its time (lock_timeout, statement_timeout); retryable
    ├── StaleLease               the fencing token is no longer current
    ├── EffectOutcomeUnknown     an external effect was started by an earlier attempt
    │                            and its outcome was never recorded
    ├── AgentError               an agent's run failed; ``retryable`` says whether
    │                            another attempt could succeed
    └── BudgetExceeded           a run used up its model/tool/cost budget (never retried)

Whether a failed run is retried is data on the error, never parsed from a message:
:attr:`AgentError.retryable` (an invalid answer is permanent, a crash is not),
``BudgetExceeded.retryable = False``; any other exception an agent raises is retryable.

Spec problems raise :class:`triggers.SpecError` (a ``ValueError``) unchanged.
asyncpg errors never leave this package: :func:`watchkeeper.runtime.store._db.translated` maps them.
"""

from __future__ import annotations


class WatchkeeperError(Exception):
    """Base class of all errors raised by :mod:`runtime`."""


class ConfigError(WatchkeeperError):
    """A setting or the environment is wrong; the message names it and the fix."""


class NotFound(WatchkeeperError):
    """The named tenant, user, definition, revision or task does not exist."""


class Conflict(WatchkeeperError):
    """The request contradicts the current state; nothing was written."""


class AuthError(WatchkeeperError):
    """The caller is not authenticated, or is not allowed to do this."""


class Forbidden(AuthError):
    """The caller is authenticated but its principal may never do this (DESIGN "Who
    may do what": an agent key may propose and read, never confirm). Another tenant's
    resources are never ``Forbidden``: they are :class:`NotFound`."""


class DatabaseUnavailable(WatchkeeperError):
    """PostgreSQL could not be reached or the connection dropped. Retryable."""

    retryable = True


class LockStall(DatabaseUnavailable):
    """A statement was cancelled by PostgreSQL's ``lock_timeout`` (it waited that long
    for a lock another session holds) or ``statement_timeout``; its transaction rolled
    back, nothing was written. Retryable.

    Attributes:
        setting: ``"lock_timeout"`` or ``"statement_timeout"``.
    """

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class CommitOutcomeUnknown(DatabaseUnavailable):
    """The connection dropped while COMMIT was in flight: the transaction may or may
    not have committed. Recover by settling the old session (:meth:`Database.settle`)
    and then reading the receipt by its key; never retry under a new identity.

    Attributes:
        backend_pid, backend_start: the server session that held the transaction
            (``None`` if unknown), so it can be ended before the read-back.
        transaction_start: behind a transaction pooler, the transaction's own start
            (``now()`` inside it; ``None`` on a direct session): the server session
            is ended only while it is still inside that transaction, never once the
            pooler has handed it to other work.
    """

    def __init__(self, message: str, backend_pid: int | None = None,
                 backend_start: object = None, transaction_start: object = None) -> None:
        super().__init__(message)
        self.backend_pid = backend_pid
        self.backend_start = backend_start
        self.transaction_start = transaction_start


class StaleLease(WatchkeeperError):
    """A worker's fencing token is no longer current; it must do nothing more."""


class EffectOutcomeUnknown(WatchkeeperError):
    """An earlier attempt started this external effect and never recorded its outcome.
    The task is marked ``unknown`` for reconciliation by the effect's idempotency key."""

    def __init__(self, effect_key: str) -> None:
        self.effect_key = effect_key
        super().__init__(f"effect {effect_key!r} was started by an earlier attempt; outcome unknown")


class AgentError(WatchkeeperError):
    """An agent's run failed.

    Attributes:
        retryable: ``True`` when another attempt could succeed (a crash, a non-zero exit
            status); ``False`` when it cannot (an answer of the wrong shape: the same
            agent would give it again). The worker fails the task at once when it is
            ``False``, and retries within the deadline, attempts and budget otherwise.
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class BudgetExceeded(WatchkeeperError):
    """A run tried to spend beyond its declared model-request, tool or cost budget, or
    reported (after the fact) that it had. Never retried: the budget spans attempts."""

    retryable = False
