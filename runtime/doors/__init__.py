"""The doors: one folder per way in (``cli/`` today; ``api/``, ``mcp/`` and ``page/``
next).

A door parses its input, authenticates, calls one use case and renders the answer; it
decides nothing itself (no SQL, no policy). It imports the use cases and the runtime's
front door (``watchkeeper.runtime``), never the store or the engine directly, and no
door imports another (import-linter contracts in ``pyproject.toml``).
"""

__all__: list[str] = []
