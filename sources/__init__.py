"""watchkeeper's observation sources (read-only, versioned, unit-aware).

Conditional triggers and their sources (historical series replay, HTTP JSON, Python
callables) are the subject of issue 4 and are not built yet; this package exists so
the layout and its import contract (``sources`` never imports ``runtime``) are in
place. It exports nothing.
"""

__all__: list[str] = []
