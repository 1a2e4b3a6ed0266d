"""Where the store lives, as the settings name it: the schema (:data:`DEFAULT_SCHEMA`,
:func:`check_schema`), what a connection is on the server (:class:`Pooler`), and the
data directory (:func:`default_home`).

Apart from ``_db`` and ``_embedded`` (which re-export these names) so that reading the
settings does not import the database driver or the embedded server's helpers.
"""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path

import platformdirs

from .._errors import ConfigError

__all__ = ["DEFAULT_SCHEMA", "Pooler", "check_schema", "default_home"]

DEFAULT_SCHEMA = "watchkeeper"
_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: longer names are silently truncated


class Pooler(enum.StrEnum):
    """What a client connection is on the server (``WATCHKEEPER_POOLER``).

    ``SESSION``: one server session for the connection's whole life (PostgreSQL itself,
    or a pooler in session mode). ``TRANSACTION``: a server session only for the length
    of each transaction (PgBouncer ``pool_mode = transaction``; the module docstring
    of ``_db`` says what changes). ``AUTO``: :meth:`Database.open` decides on a probe
    connection: ``TRANSACTION`` when the server pid differs from the one announced at
    startup, else ``SESSION``.
    """

    AUTO = "auto"
    SESSION = "session"
    TRANSACTION = "transaction"


def check_schema(name: str) -> str:
    """Return ``name`` if it may be watchkeeper's schema.

    A plain identifier (lowercase ASCII letters, digits, ``_``; not starting with a
    digit; at most 63 bytes, PostgreSQL's limit), so it reads the same quoted or not.
    Not ``public`` (the application's), not ``information_schema`` and not ``pg_*``
    (reserved for system schemas, PostgreSQL docs "CREATE SCHEMA").

    Raises:
        ConfigError: naming the value and the fix.
    """
    fix = "Fix: set WATCHKEEPER_SCHEMA to a plain identifier of your own, e.g. watchkeeper."
    if not _PLAIN_IDENTIFIER.fullmatch(name) or len(name.encode()) > _IDENTIFIER_BYTES:
        raise ConfigError(
            f"schema {name!r} is not a plain identifier (lowercase letters, digits and _, "
            f"not starting with a digit, at most {_IDENTIFIER_BYTES} characters). {fix}")
    if name == "public":
        raise ConfigError(f"schema 'public' belongs to the application sharing the database. {fix}")
    if name == "information_schema" or name.startswith("pg_"):
        raise ConfigError(f"schema {name!r} is reserved for PostgreSQL's own catalogs. {fix}")
    return name


def default_home() -> Path:
    """``$WATCHKEEPER_HOME`` if set and non-empty, else the user data dir of "watchkeeper"."""
    configured = os.environ.get("WATCHKEEPER_HOME")
    if configured:
        return Path(configured).expanduser()
    return Path(platformdirs.user_data_dir("watchkeeper"))
