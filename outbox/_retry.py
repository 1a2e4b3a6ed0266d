"""Retry timing: exponential backoff with full jitter, from tenacity.

Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): the
delay of attempt n is uniform in ``[0, min(cap, base * 2**n))``. tenacity's
``wait_random_exponential`` computes exactly that; we only feed it the attempt number.
"""

from __future__ import annotations

from tenacity import RetryCallState, wait_random_exponential

__all__ = ["backoff_seconds"]


def backoff_seconds(attempt: int, *, base: float = 2.0, cap: float = 300.0) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = first retry).

    Args:
        attempt: >= 1.
        base: seconds; the expected scale of the first delay.
        cap: seconds; no delay exceeds it.

    Raises:
        ValueError: ``attempt`` < 1 or a negative ``base``/``cap``.
    """
    if attempt < 1 or base < 0 or cap < 0:
        raise ValueError("attempt must be >= 1 and base, cap >= 0")
    state = RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    return float(wait_random_exponential(multiplier=base, max=cap)(state))
