"""Settings from the environment: a pydantic model, each field read from its variable.

=============================== ======================================== =========
variable                        meaning                                  default
=============================== ======================================== =========
``DATABASE_URL``                PostgreSQL DSN; unset: embedded server   unset
``DATABASE_READ_URL``           a hot standby of it: ``serve``'s history, unset
                                reports, page and MCP reads go there
                                (the primary when it is unreachable)
``WATCHKEEPER_HOME``            data dir: embedded PostgreSQL, file      user data
                                deliveries, artifacts                    dir
``WATCHKEEPER_SCHEMA``          the PostgreSQL schema of every table     watchkeeper
                                watchkeeper creates (never ``public``)
``WATCHKEEPER_POOLER``          what a connection is on the server:      auto
                                ``session``, ``transaction`` or ``auto``
                                (a probe at start; :class:`~.store.Pooler`)
``WATCHKEEPER_TOKEN``           a user's API token (confirm, pause, ...) unset
``WATCHKEEPER_AGENT_KEY``       the agent key ``watchkeeper mcp`` acts   unset
                                as (``wk_agent_...``)
``WATCHKEEPER_MIN_INTERVAL``    minimum interval resolution, seconds     60
``WATCHKEEPER_CLOCK_SKEW_BUDGET`` max offset to PostgreSQL's clock, s    2
``WATCHKEEPER_LEASE_SECONDS``   task lease length, seconds               60
``WATCHKEEPER_WORKERS``         worker loops per supervisor              2
``WATCHKEEPER_TICK_SECONDS``    at most this many seconds between ticks  1
                                (a tick also runs at each due instant)
``WATCHKEEPER_LISTEN``          wake on PostgreSQL notifications         true
                                (LISTEN/NOTIFY); off: due instants and
                                the tick period only
``WATCHKEEPER_DELIVERY_MAX_ATTEMPTS`` attempts before a notice is dead   8
``WATCHKEEPER_DELIVERY_MAX_AGE`` seconds after the commit a notice may   86400
                                still be retried
``WATCHKEEPER_WEBHOOK_TIMEOUT`` webhook connect/read/write timeout, s    10
``WATCHKEEPER_DRAIN_SECONDS``   on SIGTERM, how long runs in flight may  30
                                finish before they are interrupted and
                                their tasks released
``WATCHKEEPER_SECRET_KEY``      the key webhook secrets are sealed under unset:
                                (URL-safe base64 of 32 bytes; several,   <home>/
                                comma-separated: the first seals)        secret.key
``WATCHKEEPER_LOCK_TIMEOUT``    seconds a statement may wait for a lock  5
                                another session holds (lock_timeout)
``WATCHKEEPER_STATEMENT_TIMEOUT`` seconds a statement may run            30
                                (statement_timeout)
``WATCHKEEPER_UNITS_FILE``      extra unit definitions (pint syntax),    unset
                                read by :func:`load_units_file`
``WATCHKEEPER_MAX_BODY_BYTES``  the largest request body the HTTP API    1048576
                                and ``/mcp`` read (413 beyond it)
=============================== ======================================== =========

Variable names are matched without regard to case, as pydantic-settings matches them
(``watchkeeper_workers`` counts); an empty value is a value, not unset (except
``WATCHKEEPER_UNITS_FILE``). The model is plain pydantic rather than a
``pydantic_settings.BaseSettings``: every command reads the settings, and importing
pydantic-settings (its dotenv, cloud and CLI sources) cost a short command such as
``watchkeeper preview`` about a tenth of its start (bench/cli_start.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from watchkeeper.triggers import MAX_UNITS_TEXT, SpecError, define_units

from ._errors import ConfigError
from .store._config import DEFAULT_SCHEMA, Pooler, check_schema, default_home

__all__ = ["Settings", "load_settings", "load_units_file"]


_PREFIX = "WATCHKEEPER_"

_VARIABLES: dict[str, tuple[str, ...]] = {
    "database_url": ("DATABASE_URL", "WATCHKEEPER_DATABASE_URL"),
    "database_read_url": ("DATABASE_READ_URL", "WATCHKEEPER_DATABASE_READ_URL"),
    "schema_": ("WATCHKEEPER_SCHEMA",),
}
"""The variables of the fields not named ``WATCHKEEPER_<FIELD>``, the first set wins."""


def variables_of(field: str) -> tuple[str, ...]:
    """The environment variables that set ``field`` of :class:`Settings`, in the order
    they are looked up (``"workers"`` -> ``("WATCHKEEPER_WORKERS",)``)."""
    return _VARIABLES.get(field, (f"{_PREFIX}{field.upper()}",))


def environment_values(environ: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fields of :class:`Settings` set in ``environ`` (default ``os.environ``), by
    field name, as the value of their variable (names matched without regard to case)."""
    folded = {name.lower(): value for name, value in (os.environ if environ is None
                                                       else environ).items()}
    values = {}
    for field in Settings.model_fields:
        for variable in variables_of(field):
            if variable.lower() in folded:
                values[field] = folded[variable.lower()]
                break
    return values


class Settings(BaseModel):
    """watchkeeper's settings; every field can be set by its environment variable.

    ``Settings(**fields)`` reads the environment (:func:`environment_values`), the
    fields given winning over it, by field name or by variable name
    (``Settings(DATABASE_URL=...)``, as pydantic-settings took them; other names are
    ignored); a bad value raises pydantic's ``ValidationError`` at its field name
    (:func:`load_settings` words it as the variable to fix).
    """

    model_config = ConfigDict(extra="ignore", validate_default=True)

    def __init__(self, **fields: Any) -> None:
        given = {name: value for name, value in fields.items() if name in type(self).model_fields}
        named = environment_values({name: value for name, value in fields.items()
                                    if name not in given})
        super().__init__(**{**environment_values(), **named, **given})

    database_url: str | None = None
    database_read_url: str | None = None
    home: Path = Field(default_factory=default_home)
    # Not named ``schema``, which would shadow BaseModel.schema (a pydantic warning).
    schema_: str = DEFAULT_SCHEMA
    pooler: Pooler = Pooler.AUTO
    token: str | None = None
    agent_key: str | None = None
    min_interval: float = Field(default=60.0, gt=0)
    clock_skew_budget: float = Field(default=2.0, gt=0)
    lease_seconds: float = Field(default=60.0, gt=0)
    workers: int = Field(default=2, ge=1, le=64)
    tick_seconds: float = Field(default=1.0, gt=0)
    listen: bool = True
    delivery_max_attempts: int = Field(default=8, ge=1, le=100)
    delivery_max_age: float = Field(default=86400.0, gt=0)
    webhook_timeout: float = Field(default=10.0, gt=0, le=30)
    drain_seconds: float = 30.0
    secret_key: SecretStr | None = None
    lock_timeout: float = Field(default=5.0, gt=0, le=3600)
    statement_timeout: float = Field(default=30.0, gt=0, le=86400)
    units_file: Path | None = None
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)

    @field_validator("units_file", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        """``WATCHKEEPER_UNITS_FILE=`` (empty) means unset, not the current directory."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("drain_seconds", mode="before")
    @classmethod
    def _drain_seconds(cls, value: object) -> float:
        """Seconds, finite and >= 0 (0: interrupt the runs in flight at once)."""
        fix = ("Fix: set WATCHKEEPER_DRAIN_SECONDS to the seconds runs in flight may take to "
               "finish after SIGTERM, a number >= 0 such as 30 (0 interrupts them at once), "
               "or unset it for 30.")
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ValueError(f"{value!r} is not a number of seconds. {fix}") from None
        if not 0 <= seconds < float("inf"):
            raise ValueError(f"{value!r} is not a finite number of seconds >= 0. {fix}")
        return seconds

    @field_validator("schema_")
    @classmethod
    def _plain_schema(cls, value: str) -> str:
        """A plain identifier, not ``public``, not a system schema (:func:`check_schema`)."""
        try:
            return check_schema(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc

    @property
    def schema(self) -> str:
        """``WATCHKEEPER_SCHEMA``: where watchkeeper's tables live."""
        return self.schema_

    @property
    def min_interval_delta(self) -> timedelta:
        """``min_interval`` as a timedelta."""
        return timedelta(seconds=self.min_interval)


def load_settings(**overrides: object) -> Settings:
    """The settings from the environment (``overrides`` by field name win), with every
    bad variable reported at once as configuration.

    Raises:
        ConfigError: one line per bad variable, each naming it and the fix.
    """
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for problem in exc.errors():
            name = (variables_of(str(problem["loc"][0]))[0] if problem["loc"]
                    else "WATCHKEEPER_SETTINGS")
            message = str(problem["msg"]).removeprefix("Value error, ").rstrip(".")
            fix = "" if "Fix:" in message else f". Fix: set {name} to a valid value or unset it."
            lines.append(f"setting {name}: {message}{fix or '.'}")
        raise ConfigError("\n".join(lines)) from exc


def load_units_file(settings: Settings) -> list[str]:
    """Add the units of ``WATCHKEEPER_UNITS_FILE`` (``settings.units_file``) to the
    shared unit registry; call it once at startup, before any spec or series is read.

    The file holds pint definitions, one per line (``ppq = 1e-15``,
    ``AQI = [air_quality_index]``; ``#`` starts a comment); see
    :func:`watchkeeper.triggers.define_units` for what is refused. Calling it again
    with the same file adds nothing.

    Returns:
        The names defined (empty when the setting is unset).

    Raises:
        SpecError: field ``WATCHKEEPER_UNITS_FILE`` when the file cannot be read, is
            over 1,000,000 bytes (:data:`~watchkeeper.triggers.MAX_UNITS_TEXT`;
            no more is read) or is not UTF-8; otherwise one problem per refused line,
            field ``"<path>:<line>"``.
    """
    path = settings.units_file
    if path is None:
        return []
    try:
        with path.open("rb") as handle:  # at most one byte past the limit is read
            data = handle.read(MAX_UNITS_TEXT + 1)
        if len(data) > MAX_UNITS_TEXT:
            raise SpecError("WATCHKEEPER_UNITS_FILE", f"{path} is over {MAX_UNITS_TEXT} bytes.",
                            "keep the units file to the definitions you use.")
        text = data.decode("utf-8")
    except OSError as exc:
        raise SpecError("WATCHKEEPER_UNITS_FILE", f"cannot read {path}: {exc.strerror}.",
                        "check the path, or unset WATCHKEEPER_UNITS_FILE.") from exc
    except UnicodeDecodeError as exc:
        raise SpecError("WATCHKEEPER_UNITS_FILE", f"{path}: not UTF-8 text (byte {exc.start}).",
                        "save it as UTF-8.") from exc
    return define_units(text, str(path))
