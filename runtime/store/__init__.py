"""The store: PostgreSQL access and nothing else.

Lives here: the connection pool and named queries (``_db``: every statement is named in
``sql/queries.sql``, every schema change is a numbered file in ``sql/migrations/``,
asyncpg errors are translated at this boundary; every table lives in watchkeeper's own
PostgreSQL schema, never ``public``), the one-time move of a first-release install out of
``public`` (``_legacy``), the embedded PostgreSQL server for when
``DATABASE_URL`` is unset (``_embedded``, with the POSIX ACL helper ``_acl``), and the
per-process cache of parsed stored specs (``_specs``); where the store lives as the
settings name it (``_config``: schema, pooler, home), apart so that reading the settings
imports no driver. Each name here is imported on first use (``watchkeeper._lazy``).

May import: ``watchkeeper.triggers`` (value types) and ``watchkeeper.runtime._errors``.
Never the engine, the use cases or a door (an import-linter layers contract).
"""

from typing import TYPE_CHECKING

from watchkeeper._lazy import lazy_exports

if TYPE_CHECKING:
    from ._config import DEFAULT_SCHEMA as DEFAULT_SCHEMA
    from ._config import Pooler as Pooler
    from ._config import check_schema as check_schema
    from ._config import default_home as default_home
    from ._db import Connection as Connection
    from ._db import Database as Database
    from ._db import JsonText as JsonText
    from ._db import Migration as Migration
    from ._db import StoreError as StoreError
    from ._db import Timeouts as Timeouts
    from ._db import migrations as migrations
    from ._db import server_settings as server_settings
    from ._embedded import EmbeddedPostgresError as EmbeddedPostgresError
    from ._embedded import embedded_postgres as embedded_postgres
    from ._specs import spec_from_json as spec_from_json
    from ._specs import spec_from_row as spec_from_row

__all__ = ["DEFAULT_SCHEMA", "Connection", "Database", "EmbeddedPostgresError", "JsonText",
           "Migration", "Pooler", "StoreError", "Timeouts", "check_schema", "default_home",
           "embedded_postgres", "migrations", "server_settings", "spec_from_json",
           "spec_from_row"]

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "._config": (
        "DEFAULT_SCHEMA", "Pooler", "check_schema", "default_home",
    ),
    "._db": (
        "Connection", "Database", "JsonText", "Migration", "StoreError", "Timeouts",
        "migrations", "server_settings",
    ),
    "._embedded": (
        "EmbeddedPostgresError", "embedded_postgres",
    ),
    "._specs": (
        "spec_from_json", "spec_from_row",
    ),
})
