"""An HTTP JSON source over httpx: GET a URL per subject, pick the value (and
optionally its unit, currency, as_of and identity) out of the JSON with RFC 6901 JSON
pointers (the ``jsonpointer`` package).

A timeout is an observation with status ``timed_out``, a transport error or a non-2xx
answer ``failed``, a null or absent value ``missing`` — all ``unknown`` to a
predicate, never a zero. Numbers are read as ``Decimal`` (no binary rounding).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx
import jsonpointer

from watchkeeper.triggers import Observation, ObservationStatus

from ._series import SeriesError, parse_instant

__all__ = ["HttpJsonSource"]


class HttpJsonSource:
    """``GET url_template.format(subject=...)`` and read the value from the JSON.

    Args:
        name, version: the source identity definitions name.
        url_template: e.g. ``"https://api.example.com/quotes/{subject}"`` (the subject
            is URL-quoted).
        value: JSON pointer to the value, e.g. ``"/quote/close"``.
        unit, currency: fixed unit and currency, or JSON pointers (starting with ``/``)
            into the answer.
        as_of: JSON pointer to the fact's time (ISO 8601, or Unix seconds); without it,
            the fetch time.
        observation_id: JSON pointer to a stable id; without it, subject@as_of.
        timeout: seconds for the whole request.
        now: the wall clock (aware UTC), injected.
        client: a shared ``httpx.AsyncClient`` (one is made if omitted).
    """

    def __init__(self, name: str, version: str, url_template: str, *, value: str,
                 unit: str | None = None, currency: str | None = None, as_of: str | None = None,
                 observation_id: str | None = None, timeout: float = 10.0,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 client: httpx.AsyncClient | None = None) -> None:
        self.name, self.version, self.url_template = name, version, url_template
        self.value, self.unit, self.currency = value, unit, currency
        self.as_of, self.observation_id = as_of, observation_id
        self.timeout, self.now = timeout, now
        self.client = client or httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aclose()

    async def read(self, subject: str, at: datetime) -> Observation:
        """Fetch ``subject`` now (an HTTP source is live: ``at`` is not replayed)."""
        fetched = self.now()
        url = self.url_template.format(subject=quote(subject, safe=""))

        def bad(status: ObservationStatus, detail: str, as_of: datetime | None = None) -> Observation:
            return Observation(self.name, self.version, subject, f"{subject}@{fetched.isoformat()}",
                               None, None, None, as_of, fetched, status, detail)

        try:
            response = await self.client.get(url, timeout=self.timeout)
        except httpx.TimeoutException as exc:
            return bad(ObservationStatus.TIMED_OUT, f"{url} timed out after {self.timeout:g} s "
                                                    f"({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return bad(ObservationStatus.FAILED, f"{url}: {type(exc).__name__}: {exc}")
        if not 200 <= response.status_code < 300:
            return bad(ObservationStatus.FAILED, f"{url} answered HTTP {response.status_code}")
        try:
            document = json.loads(response.content, parse_float=Decimal)
        except (ValueError, RecursionError) as exc:
            return bad(ObservationStatus.FAILED, f"{url} did not answer JSON ({exc})")
        try:
            as_of = self._as_of(document, fetched)
        except (SeriesError, jsonpointer.JsonPointerException, TypeError, ValueError,
                OverflowError, OSError) as exc:
            return bad(ObservationStatus.FAILED, f"{url}: as_of: {exc}")
        raw = _pointer(document, self.value)
        value = _decimal(raw)
        ident = _pointer(document, self.observation_id) if self.observation_id else None
        identity = str(ident) if ident is not None else f"{subject}@{as_of.isoformat()}"
        unit = self._field(document, self.unit)
        currency = self._field(document, self.currency)
        if value is None:
            detail = "no value at " + self.value if raw is None else f"{raw!r} is not a number"
            return Observation(self.name, self.version, subject, identity, None, unit, currency,
                               as_of, fetched, ObservationStatus.MISSING, detail)
        return Observation(self.name, self.version, subject, identity, value, unit,
                           currency.upper() if currency else None, as_of, fetched)

    def _as_of(self, document: Any, fetched: datetime) -> datetime:
        if self.as_of is None:
            return fetched
        raw = jsonpointer.resolve_pointer(document, self.as_of)
        if isinstance(raw, int | float | Decimal) and not isinstance(raw, bool):
            return datetime.fromtimestamp(float(raw), UTC)
        return parse_instant(str(raw), "as_of")

    @staticmethod
    def _field(document: Any, spec: str | None) -> str | None:
        if spec is None or not spec.startswith("/"):
            return spec
        value = _pointer(document, spec)
        return None if value is None else str(value)


def _pointer(document: Any, pointer: str | None) -> Any:
    if pointer is None:
        return None
    try:
        return jsonpointer.resolve_pointer(document, pointer)
    except jsonpointer.JsonPointerException:
        return None


_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?", re.ASCII)


def _decimal(raw: Any) -> Decimal | None:
    if raw is None or isinstance(raw, bool):
        return None
    if isinstance(raw, str) and not _NUMBER.fullmatch(raw):
        return None  # ASCII decimal numbers only: not "1_000", not other scripts' digits
    try:
        value = Decimal(str(raw))
    except ArithmeticError:
        return None
    return value if value.is_finite() else None
