"""The source protocol and the registry of sources by name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Protocol, runtime_checkable

from watchkeeper.triggers import Observation

__all__ = ["Source", "SourceRegistry", "UnknownSource"]


@runtime_checkable
class Source(Protocol):
    """A read-only, versioned source of observations.

    Attributes:
        name: the name definitions refer to (``trigger.source.name``).
        version: the version definitions are confirmed with; a definition confirmed
            with another version gets ``unknown`` from the runtime, never this source's
            readings.

    A source may also set ``in_memory = True`` (as :class:`SeriesSource` does) when its
    reads answer from memory at once and never raise: the runtime then reads it
    without a timeout. Any other source is read under one.
    """

    name: str
    version: str

    async def read(self, subject: str, at: datetime) -> Observation:
        """The latest observation of ``subject`` known at ``at`` (aware UTC).

        Never raises for a bad or absent reading: that is an observation with status
        ``missing``, ``failed`` or ``timed_out`` (and a ``detail``).
        """
        ...


class UnknownSource(LookupError):
    """No source of that name is registered."""


class SourceRegistry:
    """Sources by name (one version each), e.g. ``SourceRegistry([SeriesSource(...)])``."""

    def __init__(self, sources: Iterable[Source] = ()) -> None:
        self._sources: dict[str, Source] = {}
        for source in sources:
            self.add(source)

    def add(self, source: Source) -> None:
        """Register ``source`` under its name, replacing one of the same name."""
        self._sources[source.name] = source

    def get(self, name: str) -> Source:
        """The source called ``name``.

        Raises:
            UnknownSource: none is registered under that name.
        """
        try:
            return self._sources[name]
        except KeyError:
            raise UnknownSource(f"no source named {name!r} in this supervisor "
                                f"(registered: {sorted(self._sources) or 'none'})") from None

    def names(self) -> Mapping[str, str]:
        """name -> version of every registered source."""
        return {name: source.version for name, source in sorted(self._sources.items())}

    def __len__(self) -> int:
        return len(self._sources)

    def __iter__(self) -> Iterator[Source]:
        """The registered sources, by name."""
        return iter([source for _, source in sorted(self._sources.items())])
