"""watchkeeper's observation sources: read-only, versioned, unit-aware.

A :class:`Source` has a ``name`` and a ``version`` and answers ``read(subject, at)``
with a :class:`triggers.Observation`; a bad or absent reading is an observation with
status ``missing``, ``failed`` or ``timed_out``, never an exception and never a zero.
Shipped:

* :class:`SeriesSource` — replays a historical series (CSV or rows) as the clock
  advances, returning only what was known at the time asked about;
* :class:`HttpJsonSource` — an HTTP JSON API over httpx, values picked by JSON pointer;
* :class:`CallableSource` — any Python callable.

``sources`` may import ``triggers`` (the value types) and never imports ``runtime``.
"""

from ._base import Source as Source
from ._base import SourceRegistry as SourceRegistry
from ._base import UnknownSource as UnknownSource
from ._callable import CallableSource as CallableSource
from ._http import HttpJsonSource as HttpJsonSource
from ._series import HEADER as HEADER
from ._series import SeriesError as SeriesError
from ._series import SeriesRow as SeriesRow
from ._series import SeriesSource as SeriesSource
from ._series import read_series_csv as read_series_csv

__all__ = ["HEADER", "CallableSource", "HttpJsonSource", "SeriesError", "SeriesRow",
           "SeriesSource", "Source", "SourceRegistry", "UnknownSource", "read_series_csv"]
