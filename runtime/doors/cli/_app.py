"""What every command shares: the typer apps, the consoles, settings, opening the
database, the exit codes, JSON output, and parsing instants.

Exit codes (one mapping, here): 0 ok; 1 runtime failure; 2 bad input or configuration
(the message names the field or variable and the fix); 3 not found; 4 not authorized;
5 conflict with the current state; 6 the database is unreachable.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, date, datetime, time
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from watchkeeper.runtime import (
    AuthError,
    ConfigError,
    Conflict,
    DatabaseUnavailable,
    NotFound,
    WatchkeeperError,
)
from watchkeeper.triggers import SpecError, SpecProblem, format_utc

if TYPE_CHECKING:
    from watchkeeper.runtime import Database, Settings

# Each command imports what it uses inside its own function (the settings, the database,
# the supervisor, the HTTP server): --help and preview start without any of them.

__all__ = ["app", "collect", "db_app", "emit_json", "err", "exit_code", "fail_input", "fail_json",
           "first_leaf", "instant", "keys_app", "MAX_ID", "MAX_REVISION", "options", "out", "parse_instant",
           "prefs_app", "replays_app", "secrets_app", "series_error", "settings", "StdoutClosed",
           "users_app", "webhooks_app", "with_db", "write"]

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode="markdown",
                  help="Keep the standing agreements people make with their AI agents.")
users_app = typer.Typer(no_args_is_help=True, help="Users and their API tokens.")
db_app = typer.Typer(no_args_is_help=True, help="Database maintenance.")
webhooks_app = typer.Typer(no_args_is_help=True,
                           help="A tenant's webhook endpoints and their signing secrets.")
prefs_app = typer.Typer(no_args_is_help=True, help="A user's notification preferences.")
replays_app = typer.Typer(no_args_is_help=True, help="Tenants kept by 'replay --keep'.")
keys_app = typer.Typer(no_args_is_help=True,
                       help="API keys (agent, app, operator) and the tick secret.")
app.add_typer(users_app, name="users")
app.add_typer(db_app, name="db")
app.add_typer(webhooks_app, name="webhooks")
app.add_typer(prefs_app, name="prefs")
app.add_typer(replays_app, name="replays")
secrets_app = typer.Typer(no_args_is_help=True,
                          help="The key webhook signing secrets are sealed under.")
app.add_typer(keys_app, name="keys")
app.add_typer(secrets_app, name="secrets")

class StdoutClosed(Exception):
    """The reader of stdout went away (``| head``): a clean end, not a failure."""


class _Console(Console):
    """rich's console, but a closed pipe is :class:`StdoutClosed` (exit 0), not rich's
    ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise StdoutClosed


out = _Console()
if not out.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
    out = _Console(width=140)  # a pipe or a file: do not fold tables to 80 columns, unless
    # COLUMNS says how wide (as rich takes it for a terminal)
err = Console(stderr=True)
if not err.is_terminal:  # keep each message on one line for grep and scripts
    err = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")

_EXIT = ((SpecError, 2), (ConfigError, 2), (NotFound, 3), (AuthError, 4), (Conflict, 5),
         (DatabaseUnavailable, 6), (WatchkeeperError, 1))
"""Exit codes by error; also 6 for the embedded server's EmbeddedPostgresError
(:func:`exit_code`)."""


def exit_code(exc: BaseException) -> int | None:
    """The exit code this CLI maps ``exc`` to, or ``None`` (not one of ours: a bug)."""
    code = next((c for cls, c in _EXIT if isinstance(exc, cls)), None)
    if code is None and isinstance(exc, RuntimeError):
        # only a RuntimeError may be the embedded server's: its module (and psutil) is
        # imported here rather than by every command
        from watchkeeper.runtime import EmbeddedPostgresError
        if isinstance(exc, EmbeddedPostgresError):
            code = 6
    return code


def write(text: str) -> None:
    """Write to stdout; a closed pipe raises :class:`StdoutClosed`."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise StdoutClosed from exc


def collect() -> None:
    """Turn Python's garbage collector back on for a command that may run long (it is off
    while the command starts, :func:`watchkeeper.runtime.doors.cli.main`): collect once
    (what the start dropped, a ``--sources`` module's scratch included), then leave what
    survived out of every later collection (``gc.freeze``: it lives as long as the
    process). Does nothing when the collector is on."""
    if not gc.isenabled():
        gc.collect()
        gc.freeze()
        gc.enable()


def main(command: typer.Typer | None = None, *, logs: bool = True) -> None:
    """Run ``command`` (default :data:`app`; ``cli.main`` passes the one it registered)
    on the command line: with ``logs``, log warnings (and the log channel's notices) to
    stderr; end with 0 when the reader of stdout went away."""
    if logs:
        import logging

        logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("watchkeeper.notify").setLevel(logging.INFO)  # the log channel
    was_devnull = _stdout_is_devnull()
    try:
        (command or app)()
    except StdoutClosed:
        _quiet_stdout()
        raise SystemExit(0) from None
    except SystemExit as exc:
        # typer prints --help and usage errors through a rich console of its own, whose
        # broken-pipe handler points stdout at /dev/null and exits 1: a closed pipe too
        if exc.code == 1 and not was_devnull and _stdout_is_devnull():
            raise SystemExit(0) from None
        raise


def _stdout_is_devnull() -> bool:
    """Whether file descriptor 1 is /dev/null (rich redirects it there on a closed pipe)."""
    try:
        mine, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (mine.st_dev, mine.st_ino, mine.st_rdev) == (null.st_dev, null.st_ino, null.st_rdev)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def settings() -> Settings:
    """The settings from the environment, with the units file read.

    Raises:
        typer.Exit: code 2, every bad variable named with the fix.
    """
    from watchkeeper.runtime import load_settings, load_units_file

    try:
        config = load_settings()
    except ConfigError as exc:
        raise fail(exc) from exc
    try:
        load_units_file(config)  # once, before any spec or series is read
    except SpecError as exc:
        raise fail_input(exc) from exc
    return config


def with_db(fn: Callable[[Database, Settings], Awaitable[T]], *, json_errors: bool = False,
            migrate: bool = True, wait: bool = False) -> T:
    """Open the database (embedded or DATABASE_URL), migrate, run ``fn``; map errors
    to exit codes with the message on stderr (and, with ``json_errors``, a spec's
    problems as a JSON list on stdout). With ``wait`` (``run``, ``serve``), ``fn`` gets
    the database at once, while it is still being opened and migrated, with every
    failure for want of the server retried for as long as it takes
    (:meth:`Database.opening`); a process that runs does not exit for an outage."""
    import anyio

    from watchkeeper.runtime import Database
    from watchkeeper.runtime.usecases import database_server, database_timeouts, secret_keyring

    collect()
    config = settings()
    try:
        with database_server(config) as dsn:

            async def run() -> T:
                opener = Database.opening if wait else Database.open
                async with opener(dsn, schema=config.schema, migrate=migrate,
                                  pooler=config.pooler, timeouts=database_timeouts(config),
                                  keyring=secret_keyring(config) if migrate else None) as db:
                    return await fn(db, config)

            return anyio.run(run)
    except StdoutClosed:
        raise
    except SpecError as exc:
        raise (fail_json(exc) if json_errors else fail(exc)) from exc
    except BaseExceptionGroup as group:  # a task group's: report the error inside it
        leaf = first_leaf(group)
        if isinstance(leaf, StdoutClosed):
            raise leaf from None
        if isinstance(leaf, SpecError) and json_errors:
            raise fail_json(leaf) from group
        if exit_code(leaf) is not None:
            raise fail(leaf) from group
        raise
    except Exception as exc:
        if exit_code(exc) is None:
            raise
        raise fail(exc) from exc


def first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The exception inside a (nested) exception group to report: the first one this
    CLI maps to an exit code (or a closed stdout), else the first of all."""
    leaves: list[BaseException] = []

    def walk(node: BaseException) -> None:
        if isinstance(node, BaseExceptionGroup):
            for inner in node.exceptions:
                walk(inner)
        else:
            leaves.append(node)

    walk(group)
    return next((leaf for leaf in leaves
                 if isinstance(leaf, StdoutClosed) or exit_code(leaf) is not None), leaves[0])


def fail(exc: BaseException) -> typer.Exit:
    """Print ``exc`` on stderr and return the exit carrying its code."""
    code = exit_code(exc) or 1
    err.print(f"[red]error:[/] {escape(str(exc))}")
    return typer.Exit(code)


def fail_input(exc: SpecError) -> typer.Exit:
    """Bad input: the message (every problem, one per line) on stderr, exit 2."""
    return fail(exc)


def fail_json(exc: SpecError) -> typer.Exit:
    """Bad input under ``--json``: every problem as a JSON list of ``{field, message,
    fix}`` on stdout (the shape the HTTP API's problem details carry), the message on
    stderr, exit 2."""
    write(json.dumps(exc.to_json(), indent=2) + "\n")
    return fail(exc)


def emit_json(data: Any, *, line: bool = False) -> None:
    """``data`` as indented JSON on stdout (``line``: on one line, for a stream of
    objects); instants as ISO 8601 UTC ending in Z."""
    write(json.dumps(data, indent=None if line else 2, default=_json_value) + "\n")


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return format_utc(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)


MAX_ID = 2**63 - 1
"""The largest task id (PostgreSQL bigint)."""
MAX_REVISION = 2**31 - 1
"""The largest revision number (PostgreSQL integer)."""
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC)
"""Instants an option may name: the same years a spec may (1970 to 2200)."""


def instant(text: str | None, option: str) -> datetime | None:
    """An aware instant from an option (:func:`parse_instant`); ``None`` when the option
    was not given (an empty value was, and is refused).

    Raises:
        typer.Exit: code 2, naming ``option``.
    """
    if text is None:
        return None
    try:
        return parse_instant(text, option)
    except SpecError as exc:
        raise fail_input(exc) from exc


def parse_instant(text: str, option: str) -> datetime:
    """An aware instant from an option: ISO 8601 with an offset, or a plain date
    (``2026-12-02``), which means 00:00 UTC that day — as in series files — between
    1970 and 2200.

    Raises:
        SpecError: naming ``option`` and the fix.
    """
    try:
        if len(text) == 10 and text[4] == "-" and text[7] == "-":
            value = datetime.combine(date.fromisoformat(text), time(0), UTC)
        else:
            value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SpecError(option, f"{text!r} is not an ISO 8601 time or date.",
                        "write e.g. 2026-12-02T20:00:00Z or 2026-12-02.") from exc
    if value.tzinfo is None:
        raise SpecError(option, f"{text!r} has no UTC offset.",
                        "add Z or +01:00, or give a plain date (00:00 UTC).")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise SpecError(option, f"{text!r} is outside 1970-2200.",
                        "give an instant between 1970 and 2200.")
    return value


INSTANT_HELP = "ISO 8601 with an offset, or a date (00:00 UTC)"


@contextlib.contextmanager
def options(**names: str) -> Iterator[None]:
    """Re-raise a use case's :class:`SpecError` with its field named as the CLI option
    the user typed (``options(status="--status")``)."""
    try:
        yield
    except SpecError as exc:
        if not any(p.field in names for p in exc.problems):
            raise
        raise SpecError.of(SpecProblem(names.get(p.field, p.field), p.problem, p.fix)
                           for p in exc.problems) from exc


def series_error(exc: Exception, option: str = "--series") -> SpecError:
    """A series file's refusal (one line per problem) as one SpecError with a problem
    per line, each naming ``option`` and pointing at the README's "Series files"."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [str(exc)]
    return SpecError.of(SpecProblem(option, line, "fix the file (see the README's 'Series "
                                    "files').") for line in lines)
