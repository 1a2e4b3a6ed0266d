"""The effect gate: the only way an agent makes an external effect.

Before an effect, the gate checks in one short transaction that the worker's lease
token is still current and records the effect's idempotency key as ``started``
(seed 003: "the effect layer checks the token again before a side effect"). A
retried or stale run therefore cannot repeat it: a key already ``done`` returns the
recorded result without acting; a key an earlier attempt ``started`` and never
finished, or whose action raised, raises :class:`EffectOutcomeUnknown`, and the task
becomes ``unknown`` for reconciliation by that key instead of being retried blindly. An
action that raises :class:`EffectNotApplied` declares that nothing happened: a retry may
perform it again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from .._errors import EffectOutcomeUnknown, StaleLease
from ..store._db import Database
from ._clock import Clock

__all__ = ["EffectGate", "EffectNotApplied"]


class EffectNotApplied(Exception):  # noqa: N818 - it names a fact, not an error condition
    """Raised by an effect's action when the provider *definitely* did not apply it (a
    refused request, a validation error): the effect may be attempted again by a retry.
    Any other exception leaves the outcome unknown and the task becomes ``unknown``."""

T = TypeVar("T")


class EffectGate:
    """Fenced, idempotent external effects for one task attempt.

    Args:
        idempotency_key: the task's idempotency key; effect keys are scoped under it.
        lease_token: the attempt's fencing token.
    """

    def __init__(self, db: Database, clock: Clock, *, tenant_id: str, task_id: int,
                 idempotency_key: str, lease_token: int) -> None:
        self._db, self._clock = db, clock
        self._tenant, self._task = tenant_id, task_id
        self._scope, self._token = idempotency_key, lease_token

    def key(self, name: str) -> str:
        """The stored idempotency key of the effect ``name`` (task key + name); pass it
        to the provider so a reconciliation can look the effect up there."""
        return f"{self._scope}#{name}"

    async def perform(self, name: str, action: Callable[[str], Awaitable[T]]) -> T | Any:
        """Record ``name`` as started, then await ``action(idempotency_key)``.

        Returns:
            ``action``'s result (which must be JSON-serializable), or the result
            recorded by an earlier attempt that completed the same effect.

        Raises:
            StaleLease: the token is no longer current; nothing was done.
            EffectOutcomeUnknown: an earlier attempt started this effect and its outcome
                was never recorded.
        """
        key = self.key(name)
        async with self._db.transaction() as tx:
            if await tx.fetchval("effect_lock_task", self._tenant, self._task, self._token) is None:
                raise StaleLease(f"task {self._task}: lease token {self._token} is not current")
            started = await tx.fetchval("effect_start", self._tenant, key, self._task,
                                        self._token, self._clock.now())
            if started is None:
                existing = await tx.fetchrow("effect_get", self._tenant, key)
                assert existing is not None
                if existing["status"] == "done":
                    return existing["result"]
                raise EffectOutcomeUnknown(key)
        try:
            result = await action(key)
        except EffectNotApplied:
            with anyio.CancelScope(shield=True):
                await self._db.execute("effect_finish", self._tenant, key, self._token,
                                       "not_applied", None, self._clock.now())
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):  # record even when cancelled
                await self._db.execute("effect_finish", self._tenant, key, self._token, "failed",
                                       None, self._clock.now())
            raise
        await self._db.execute("effect_finish", self._tenant, key, self._token, "done", result,
                               self._clock.now())
        return result
