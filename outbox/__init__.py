"""watchkeeper's notification outbox: channels, preferences and the dispatcher.

The report commit writes delivery rows in the same transaction; the dispatcher
delivers them later and separately, so a failed notice is retried without ever
rerunning research (DESIGN "Outbox"). Channels: ``log``, ``file`` (JSON Lines) and
``webhook`` (Standard Webhooks signing); a channel is a small protocol.

Errors::

    OutboxError
    └── DeliveryFailed  .retryable .retry_after
"""

from typing import TYPE_CHECKING

from watchkeeper._lazy import lazy_exports

from ._errors import DeliveryFailed as DeliveryFailed
from ._errors import OutboxError as OutboxError

if TYPE_CHECKING:
    from ._channels import Channel as Channel
    from ._channels import FileChannel as FileChannel
    from ._channels import LogChannel as LogChannel
    from ._channels import Notice as Notice
    from ._dispatch import DeliveryStore as DeliveryStore
    from ._dispatch import Dispatcher as Dispatcher
    from ._dispatch import DispatchStatistics as DispatchStatistics
    from ._dispatch import Outcome as Outcome
    from ._dispatch import OutcomeKind as OutcomeKind
    from ._preferences import NoticeAction as NoticeAction
    from ._preferences import NoticeDecision as NoticeDecision
    from ._preferences import Preferences as Preferences
    from ._preferences import decide_notice as decide_notice
    from ._preferences import quiet_hours_end as quiet_hours_end
    from ._receiver import Receiver as Receiver
    from ._receiver import SignatureInvalid as SignatureInvalid
    from ._receiver import serve as serve
    from ._receiver import verify as verify
    from ._retry import backoff_seconds as backoff_seconds
    from ._webhook import Endpoint as Endpoint
    from ._webhook import WebhookChannel as WebhookChannel
    from ._webhook import retry_after_seconds as retry_after_seconds
    from ._webhook import signed_headers as signed_headers
    from ._webhook import webhook_body as webhook_body

__all__ = [
    "Channel", "FileChannel", "LogChannel", "Notice", "DeliveryStore", "Dispatcher",
    "DispatchStatistics", "Outcome", "OutcomeKind", "DeliveryFailed", "OutboxError",
    "NoticeAction", "NoticeDecision", "Preferences", "decide_notice", "quiet_hours_end",
    "Receiver", "SignatureInvalid", "serve", "verify", "backoff_seconds", "Endpoint",
    "webhook_body",
    "WebhookChannel", "retry_after_seconds", "signed_headers",
]

# Imported on first use (PEP 562): the errors above come with the package; each other
# name with its own module, so that the engine's outbox store does not import the local
# receiver's server (uvicorn) nor a preference check the HTTP client.
_SOURCES = {
    "._channels": (
        "Channel", "FileChannel", "LogChannel", "Notice",
    ),
    "._dispatch": (
        "DeliveryStore", "Dispatcher", "DispatchStatistics", "Outcome", "OutcomeKind",
    ),
    "._preferences": (
        "NoticeAction", "NoticeDecision", "Preferences", "decide_notice", "quiet_hours_end",
    ),
    "._receiver": (
        "Receiver", "SignatureInvalid", "serve", "verify",
    ),
    "._retry": (
        "backoff_seconds",
    ),
    "._webhook": (
        "Endpoint", "WebhookChannel", "retry_after_seconds", "signed_headers", "webhook_body",
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, globals(), _SOURCES)
