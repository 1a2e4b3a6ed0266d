"""The webhook channel: an HTTP POST signed per the Standard Webhooks convention.

Headers (https://www.standardwebhooks.com/): ``webhook-id`` (the delivery id, stable
across retries, so the receiver can dedup), ``webhook-timestamp`` (Unix seconds) and
``webhook-signature`` (``v1,<base64 HMAC-SHA256>``, one per active secret, space
separated, so a secret can be rotated without a gap), computed by the
``standardwebhooks`` package; plus ``idempotency-key`` (the delivery id again).

Outcomes: 2xx is success; 408, 429 and 5xx and transport errors (refused, reset,
timed out, a malformed response) are retryable, honouring ``Retry-After`` (seconds or
an HTTP date); any other status is permanent, redirects included (a signed notice is
not resent to wherever a 3xx points: the endpoint's URL is to be fixed).
"""

from __future__ import annotations

import email.utils
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook

from ._channels import Notice
from ._errors import DeliveryFailed

__all__ = ["EVENT_TYPE", "Endpoint", "WebhookChannel", "retry_after_seconds", "signed_headers",
           "webhook_body"]

RETRYABLE = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a webhook goes: its URL and the active signing secrets (``whsec_...``)."""

    url: str
    secrets: tuple[str, ...]


EndpointResolver = Callable[[str, str], Awaitable[Endpoint]]
"""(tenant_id, endpoint name) -> Endpoint; raises DeliveryFailed if unknown."""


def signed_headers(delivery_id: str, body: str, secrets: tuple[str, ...],
                   when: datetime) -> dict[str, str]:
    """The Standard Webhooks headers for ``body`` sent at ``when`` (aware)."""
    stamp = when.astimezone(UTC).replace(tzinfo=None)  # the library reads it as UTC
    signatures = " ".join(Webhook(secret).sign(delivery_id, stamp, body) for secret in secrets)
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": signatures,
        "idempotency-key": delivery_id,
        "content-type": "application/json",
        "user-agent": "watchkeeper-outbox",
    }


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds (RFC 9110 §10.2.3: delay-seconds or an HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


EVENT_TYPE = "report.committed"
"""The event type of a notice whose payload names none: a committed report. A payload
that carries ``type`` (``task.not_run``: the agreed run did not happen) is sent as that."""


def webhook_body(notice: Notice) -> str:
    """The JSON body of a notice, in the Standard Webhooks payload shape: ``type`` (the
    payload's ``type``, else :data:`EVENT_TYPE`), ``timestamp`` (the report's commit
    instant, or when the missed run was recorded; ISO 8601 UTC) and ``data`` (the
    delivery id and the rest of the payload). Compact, keys sorted: the bytes that are
    signed."""
    payload = dict(notice.payload)
    event = payload.pop("type", EVENT_TYPE)
    data = {"delivery_id": notice.delivery_id, **payload}
    stamp = payload.get("committed_at", payload.get("recorded_at"))
    return json.dumps({"type": event, "timestamp": stamp, "data": data}, sort_keys=True,
                      separators=(",", ":"))


class WebhookChannel:
    """Sends notices to the tenant's named endpoint.

    Args:
        resolve: looks an endpoint up by (tenant, name).
        now: the wall clock (for ``webhook-timestamp`` and ``Retry-After`` dates).
        client: a shared ``httpx.AsyncClient`` (one is made if omitted).
        timeout: seconds for connect, read and write.
    """

    def __init__(self, resolve: EndpointResolver, *, now: Callable[[], datetime],
                 client: httpx.AsyncClient | None = None, timeout: float = 10.0) -> None:
        self.resolve, self.now, self.timeout = resolve, now, timeout
        self.client = client or httpx.AsyncClient(timeout=timeout, follow_redirects=False)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aclose()

    async def send(self, notice: Notice) -> str:
        """POST the signed notice; the response summary on success."""
        endpoint = await self.resolve(notice.tenant_id, notice.destination)
        if not endpoint.secrets:
            raise DeliveryFailed(f"webhook {notice.destination!r} has no active secret",
                                 retryable=False)
        body = webhook_body(notice)
        headers = signed_headers(notice.delivery_id, body, endpoint.secrets, self.now())
        try:
            async with self.client.stream("POST", endpoint.url, content=body.encode(),
                                          headers=headers, timeout=self.timeout) as response:
                status = response.status_code
                summary = f"{status} {response.reason_phrase}".strip()
                if 200 <= status < 300:
                    return summary  # the body of a success is not read
                excerpt = await _excerpt(response)
        except httpx.TimeoutException as exc:
            raise DeliveryFailed(f"{endpoint.url} timed out after {self.timeout:g} s "
                                 f"({type(exc).__name__})", retryable=True) from exc
        except httpx.HTTPError as exc:  # transport, protocol and decoding errors
            raise DeliveryFailed(f"transport error posting to {endpoint.url}: "
                                 f"{type(exc).__name__}: {exc}", retryable=True) from exc
        if 300 <= status < 400:
            raise DeliveryFailed(
                f"HTTP {summary}: redirects are not followed (a signed notice is not resent "
                f"to another host); set the endpoint's URL to "
                f"{response.headers.get('location', 'the new location')}",
                retryable=False, status_code=status)
        retryable = status in RETRYABLE or status >= 500
        raise DeliveryFailed(
            f"HTTP {summary}: {excerpt}", retryable=retryable, status_code=status,
            retry_after=retry_after_seconds(response.headers.get("retry-after"), self.now())
            if retryable else None)


async def _excerpt(response: httpx.Response, limit: int = 2048) -> str:
    """The first ``limit`` bytes of an error response's body, as text (never the whole
    body: a hostile endpoint could send gigabytes)."""
    data = b""
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) >= limit:
            break
    return data[:limit].decode("utf-8", "replace")[:200]
