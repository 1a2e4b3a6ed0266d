"""PostgreSQL storage for the outbox dispatcher (:class:`outbox.DeliveryStore`), and the
webhook endpoints the webhook channel resolves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from watchkeeper.outbox import DeliveryFailed, Endpoint, Notice, Outcome, Preferences
from watchkeeper.triggers import Importance, format_utc

from .._errors import ConfigError
from ..store._db import Database
from ..store._sealing import SealedSecret
from ._clock import Clock

__all__ = ["NOT_RUN_EVENT", "PgDeliveryStore", "not_run_payload"]

NOT_RUN_EVENT = "task.not_run"
"""The Standard Webhooks event type of a notice that an agreed run did not happen."""


class PgDeliveryStore:
    """Delivery rows in ``deliveries``; payloads built from the committed report; the
    recipient's preferences read at claim time (i.e. at delivery time). With
    ``tenant_id``, only that tenant's rows are claimed (a replay's dispatcher)."""

    def __init__(self, db: Database, clock: Clock, *, tenant_id: str | None = None) -> None:
        self.db, self.clock, self.tenant_id = db, clock, tenant_id

    async def claim_due(self, now: datetime, limit: int, owner: str,
                        lease_seconds: float) -> Sequence[Notice]:
        """Lease due rows (``SKIP LOCKED``) and attach their body: the report reference,
        or the notice that the agreed run did not happen (:func:`not_run_payload`)."""
        rows = await self.db.fetch("deliveries_claim", now, limit, owner, lease_seconds,
                                   self.tenant_id)
        if not rows:
            return []
        reported = [r for r in rows if r["task_id"] is not None]
        payloads = await self.db.fetch("delivery_payloads", [r["tenant_id"] for r in reported],
                                       [r["task_id"] for r in reported]) if reported else []
        missed = [r for r in rows if r["notice_id"] is not None]
        notes = await self.db.fetch("not_run_payloads", [r["tenant_id"] for r in missed],
                                    [r["notice_id"] for r in missed]) if missed else []
        by_task = {(p["tenant_id"], p["task_id"]): p for p in payloads}
        by_notice = {(p["tenant_id"], p["notice_id"]): p for p in notes}
        notices = []
        for r in rows:
            if r["task_id"] is not None:
                p = by_task[(r["tenant_id"], r["task_id"])]
                body = _payload(p)
            else:
                p = by_notice[(r["tenant_id"], r["notice_id"])]
                body = not_run_payload(p)
            notices.append(Notice(
                r["tenant_id"], str(r["delivery_id"]), r["channel"], r["destination"],
                r["attempts"], body, Importance(p["importance"]), r["queued_at"],
                _preferences(p), r["lease_token"], r["lease_expires_at"]))
        return notices

    async def record(self, owner: str, outcomes: Sequence[Outcome]) -> None:
        """Write a pass's outcomes and its attempt log in one transaction; an outcome
        whose claim is no longer current (its lease expired and another dispatcher took
        the row over) is dropped, attempt log included."""
        if not outcomes:
            return
        rows = [(o.notice.tenant_id, o.notice.delivery_id, o.kind.value, o.at, o.detail[:2000],
                 o.next_at, o.status_code, o.notice.lease_token) for o in outcomes]
        async with self.db.transaction() as tx:
            kept = await tx.fetch("deliveries_record", *[list(c) for c in zip(*rows, strict=True)])
            mine = {(r["tenant_id"], str(r["delivery_id"])) for r in kept}
            log = [(o.notice.tenant_id, o.notice.delivery_id, o.notice.attempt, owner, o.at,
                    o.kind.value, o.status_code, o.detail[:2000]) for o in outcomes
                   if (o.notice.tenant_id, o.notice.delivery_id) in mine]
            if log:
                await tx.execute("delivery_attempts_insert",
                                 *[list(c) for c in zip(*log, strict=True)])

    async def endpoint(self, tenant_id: str, name: str) -> Endpoint:
        """The tenant's webhook endpoint ``name`` with its active secrets.

        Raises:
            DeliveryFailed: (permanent) no such endpoint; (retryable) a secret sealed
                under a key this process does not hold (it is logged, and retried:
                restart the process with the key).
        """
        row = await self.db.fetchrow("webhook_endpoint_get", tenant_id, name, self.clock.now())
        if row is None:
            raise DeliveryFailed(f"tenant {tenant_id} has no webhook endpoint named {name!r}",
                                 retryable=False)
        secrets: list[str] = []
        for sealed, data_key, key, clear in zip(row["sealed"] or (), row["data_keys"] or (),
                                                row["key_ids"] or (), row["clear"] or (),
                                                strict=True):
            if sealed is None:  # stored before migration 0010, not sealed yet
                secrets.append(clear)
                continue
            try:
                secrets.append(self.db.sealing_keyring().open(
                    SealedSecret(bytes(sealed), bytes(data_key), key), tenant_id, name))
            except ConfigError as exc:  # a key this process lacks: another may hold it
                raise DeliveryFailed(f"cannot open the signing secret of webhook {name!r}: "
                                     f"{exc}", retryable=True) from exc
        return Endpoint(row["url"], tuple(secrets))


def _payload(r: Mapping[str, Any]) -> dict[str, Any]:
    """The notice body: a reference to the committed report, never the research itself."""
    plain = {k: r[k] for k in ("tenant_id", "task_id", "definition_id", "binding_id", "slot",
                               "kind", "owner_user_id", "importance", "content_sha256",
                               "output_ref", "headline")}
    plain["headline"] = (r["headline"] or "").lstrip("#").strip()
    plain["scheduled_for"] = format_utc(r["scheduled_for"])
    plain["committed_at"] = format_utc(r["committed_at"])
    plain["report_ref"] = f"report:{r['tenant_id']}/{r['task_id']}"
    return plain


def not_run_payload(r: Mapping[str, Any]) -> dict[str, Any]:
    """The body of a ``task.not_run`` notice (a ``not_run_notices`` row, migration 0012):
    ``type``, the history entry it is about (``history_ref``: tenant, definition,
    binding, slot and kind, the occurrence's key; ``task_id`` and ``task_ref`` when a
    task was admitted), the ``outcome`` (``failed``, ``timed_out``, ``budget_exceeded``,
    ``skipped_expired``, ``review_required``), its ``reason``, ``scheduled_for`` and
    ``recorded_at`` (UTC, ``Z``), ``importance`` and a ``headline``. Never a report."""
    task = r["task_id"]
    slot = r["slot"]
    return {
        "type": NOT_RUN_EVENT, "tenant_id": r["tenant_id"], "definition_id": r["definition_id"],
        "binding_id": r["binding_id"], "slot": slot, "kind": r["kind"],
        "owner_user_id": r["owner_user_id"], "outcome": r["outcome"], "reason": r["reason"],
        "task_id": task, "task_ref": None if task is None else f"task:{r['tenant_id']}/{task}",
        "history_ref": (f"history:{r['tenant_id']}/{r['definition_id']}/{r['binding_id']}/"
                        f"{slot}/{r['kind']}"),
        "scheduled_for": format_utc(r["scheduled_for"]),
        "recorded_at": format_utc(r["recorded_at"]), "importance": r["importance"],
        "headline": _NOT_RUN_HEADLINES[r["outcome"]].format(definition=r["definition_id"],
                                                          slot=slot),
    }


_NOT_RUN_HEADLINES = {
    "failed": "{definition}: the run of {slot} failed",
    "timed_out": "{definition}: the run of {slot} timed out",
    "budget_exceeded": "{definition}: the run of {slot} stopped at its budget",
    "skipped_expired": "{definition}: {slot} was skipped, too late to run",
    "review_required": "{definition}: {slot} is late and waits for your review",
}


def _preferences(r: Mapping[str, Any]) -> Preferences | None:
    if not r["has_preferences"]:
        return None
    channels = r["channels"]
    return Preferences(zone=r["user_zone"] or "UTC",
                       channels=None if channels is None else frozenset(channels),
                       min_importance=Importance(r["min_importance"]),
                       quiet_start=r["quiet_start"], quiet_end=r["quiet_end"])
