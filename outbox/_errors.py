"""The exceptions of :mod:`outbox`.

::

    OutboxError
    └── DeliveryFailed    .retryable (bool), .retry_after (seconds or None),
                          .status_code (HTTP status or None)

A channel raises :class:`DeliveryFailed` with the decision on it as typed data
(temporal's ``ApplicationError(non_retryable=...)`` model): the dispatcher never
parses messages to tell a retryable failure from a permanent one.
"""

from __future__ import annotations


class OutboxError(Exception):
    """Base class of all errors raised by :mod:`outbox`."""


class DeliveryFailed(OutboxError):
    """A delivery attempt failed.

    Attributes:
        retryable: whether another attempt may succeed (transport errors, 408, 429,
            5xx) or not (other 4xx, a destination that cannot exist).
        retry_after: seconds the destination asked us to wait, if it said so.
        status_code: the HTTP status of the response, if there was one.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status_code = status_code
