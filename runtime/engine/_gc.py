"""The cyclic garbage collector, paused while an admission batch is in flight.

A batch of a tick allocates a few dozen container objects per due definition (the
locked row, the decoded compiled spec, the staged row), alive until the batch commits
and then freed by reference counting. With the collector running, the young
generation fills every 700 allocations and each collection traverses the batch's live
objects again, promoting them to older generations whose collections then traverse
them once more: measured, a fifth of a tick's CPU (bench/admission.py). Paused for the
batch, nothing is traversed that reference counting frees anyway; the one collection
after it finds the few survivors.

Pauses nest and overlap (two admission lanes of one tick, each in its own task): the
collector comes back when the last one ends, and only if it was enabled before the
first began. Reference cycles made meanwhile (asyncio's own, a traceback) wait for that
collection; a batch is bounded (``batch_size`` definitions), so they are too.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]

_depth = 0
_resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the ``with`` block (which may await: the pause is
    per process, counted, and ends when the last overlapping block ends)."""
    global _depth, _resume
    if _depth == 0:
        _resume = gc.isenabled()
        gc.disable()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _resume:
            gc.enable()
