"""Delivery channels. A channel is a small protocol, so a new one (email, chat)
needs no change to the dispatcher.

Built in: ``log`` (the ``watchkeeper.notify`` logger) and ``file`` (JSON Lines,
each notice appended on an ``O_APPEND`` descriptor and fsynced; a partial line left
by an earlier failed attempt is ended first, so every complete line parses).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import anyio

from watchkeeper.triggers import Importance

from ._errors import DeliveryFailed
from ._preferences import Preferences

__all__ = ["Channel", "FileChannel", "LogChannel", "Notice"]


@dataclass(frozen=True, slots=True)
class Notice:
    """One delivery attempt's input: the committed report *reference*, never a rerun.

    Attributes:
        delivery_id: stable id, also the idempotency key the receiver dedups on.
        channel, destination: where it goes.
        attempt: 1 for the first attempt.
        payload: JSON-compatible notice body (report reference, hash, title, summary).
        importance: the report's importance (preferences filter on it).
        queued_at: when the delivery was queued (committed, or redelivered): where
            ``max_age`` starts.
        preferences: the recipient's notification preferences, read at delivery time.
        lease_token: the fencing token of this claim; only the current claim's
            outcome is recorded.
        lease_expires_at: when this claim's lease ends (UTC); no send may start that
            could still be running then.
    """

    tenant_id: str
    delivery_id: str
    channel: str
    destination: str
    attempt: int
    payload: Mapping[str, Any]
    importance: Importance = Importance.NORMAL
    queued_at: datetime | None = None
    preferences: Preferences | None = None
    lease_token: int | None = None
    lease_expires_at: datetime | None = None


class Channel(Protocol):
    """Sends one notice; returns a short transport response summary.

    Raises:
        DeliveryFailed: with ``retryable`` set.
    """

    async def send(self, notice: Notice) -> str:
        """Deliver ``notice``."""
        ...


class LogChannel:
    """Writes the notice to the ``watchkeeper.notify`` logger at INFO."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("watchkeeper.notify")

    async def send(self, notice: Notice) -> str:
        """Log one line with the delivery id and the report reference."""
        self.logger.info("notice %s for %s: %s", notice.delivery_id, notice.tenant_id,
                         json.dumps(notice.payload, sort_keys=True))
        return "logged"


class FileChannel:
    """Appends the notice as one JSON line to ``destination``, a path under the tenant's
    own directory ``base_dir/<tenant>/`` (never outside it: tenants cannot write into each
    other's files, nor anywhere else), and fsyncs before reporting success."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir

    def path_of(self, tenant_id: str, destination: str) -> Path:
        """Where ``destination`` of ``tenant_id`` is written.

        Raises:
            DeliveryFailed: (permanent) the path would leave the tenant's directory.
        """
        base = (self.base_dir / tenant_id).resolve()
        if not base.is_relative_to(self.base_dir.resolve()) or base == self.base_dir.resolve():
            raise DeliveryFailed(f"tenant {tenant_id!r} has no directory here", retryable=False)
        path = (base / destination).resolve()
        if not path.is_relative_to(base) or path == base:
            raise DeliveryFailed(f"{destination!r} is outside {base}", retryable=False)
        return path

    async def send(self, notice: Notice) -> str:
        """Append and fsync one line."""
        path = self.path_of(notice.tenant_id, notice.destination)
        line = json.dumps({"delivery_id": notice.delivery_id, "attempt": notice.attempt,
                           **notice.payload}, sort_keys=True) + "\n"
        try:
            await anyio.to_thread.run_sync(_append, path, line.encode())
        except (IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
            raise DeliveryFailed(f"cannot append to {path}: {exc}; the destination must be a "
                                 "file path whose parents are directories",
                                 retryable=False) from exc
        except OSError as exc:
            raise DeliveryFailed(f"cannot append to {path}: {exc}", retryable=True) from exc
        return f"appended to {path}"


def _append(path: Path, data: bytes) -> None:
    """Append ``data`` (one line) and fsync. If an earlier attempt left a partial line
    (a short write, a crash), a newline first ends it, so this line parses on its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(f"write returned {written}")
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
