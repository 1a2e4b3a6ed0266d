"""watchkeeper's notification outbox: channels and the dispatcher.

The report commit writes delivery rows in the same transaction; the dispatcher
delivers them later and separately, so a failed notice is retried without ever
rerunning research (DESIGN "Outbox").

Errors::

    OutboxError
    └── DeliveryFailed  .retryable .retry_after
"""

from ._channels import Channel as Channel
from ._channels import FileChannel as FileChannel
from ._channels import LogChannel as LogChannel
from ._channels import Notice as Notice
from ._dispatch import DeliveryStore as DeliveryStore
from ._dispatch import Dispatcher as Dispatcher
from ._dispatch import DispatchStatistics as DispatchStatistics
from ._errors import DeliveryFailed as DeliveryFailed
from ._errors import OutboxError as OutboxError
from ._retry import backoff_seconds as backoff_seconds

__all__ = [
    "Channel", "FileChannel", "LogChannel", "Notice", "DeliveryStore", "Dispatcher",
    "DispatchStatistics", "DeliveryFailed", "OutboxError", "backoff_seconds",
]
