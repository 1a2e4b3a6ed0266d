"""``watchkeeper replay`` on the real vega-datasets tables: the fire dates the replay
stores in PostgreSQL equal the ones computed here, independently, from the raw files
shipped in the ``vega-datasets`` package (read as CSV; the package is not imported,
since that would import pandas)."""

from __future__ import annotations

import csv
import importlib.util
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from watchkeeper.runtime import NotFound
from watchkeeper.runtime.store._db import QUERIES, Database
from watchkeeper.runtime.usecases import (
    PollCursor,
    PollsQuery,
    load_replay_definitions,
    polls,
    prune_replays,
    replay,
)
from watchkeeper.sources import SeriesSource
from watchkeeper.triggers import SpecError
from watchkeeper.triggers._spec import DEFAULT_MIN_INTERVAL

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def vega_rows(name: str) -> list[dict[str, str]]:
    spec = importlib.util.find_spec("vega_datasets")
    assert spec is not None and spec.origin is not None, "pip install -e '.[test]'"
    with (Path(spec.origin).parent / "_data" / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def daily_polls(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def latest(series: dict[date, Decimal], day: date, freshness: timedelta) -> Decimal | None:
    """The latest value known on ``day`` (as of that day or earlier), if fresh enough."""
    known = [d for d in series if d <= day]
    if not known or day - max(known) > freshness:
        return None
    return series[max(known)]


def edge_fires(verdicts: list[tuple[date, bool | None]], cooldown: timedelta,
               first_match: bool = False) -> list[date]:
    """The oracle: a fire on a true whose previous definite verdict was not true, and at
    least ``cooldown`` after the previous fire; unknown (None) is skipped entirely."""
    fires: list[date] = []
    previous: bool | None = None
    for day, verdict in verdicts:
        if verdict is None:
            continue
        if verdict and previous is not True and (not fires or day - fires[-1] >= cooldown):
            fires.append(day)
            if first_match:
                break
        previous = verdict
    return fires


async def stored_fires(db: Database, tenant: str, definition_id: str) -> list[date]:
    """Fire dates as the replay stored them: polls decided 'fired', each with its task."""
    rows = await db.pool.fetch(
        "SELECT p.scheduled_for, t.status FROM condition_polls p JOIN tasks t "
        "ON t.tenant_id = p.tenant_id AND t.task_id = p.task_id "
        "WHERE p.tenant_id = $1 AND p.definition_id = $2 AND p.action = 'fired' "
        "ORDER BY p.scheduled_for", tenant, definition_id)
    assert {r["status"] for r in rows} <= {"completed"}
    return [r["scheduled_for"].date() for r in rows]


async def run_example(db: Database, tmp_path: Path, toml: str, csv_name: str,
                      days: int | None = None, keep: bool = True) -> Any:
    definitions = load_replay_definitions(EXAMPLES / "conditions" / toml,
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / csv_name)
    span = source.span()
    assert span is not None
    events: list[dict[str, Any]] = []
    end = span[1] if days is None else span[0] + timedelta(days=days)
    summary = await replay(db, definitions, source, start=span[0], end=end, home=tmp_path,
                           on_event=events.append, keep=keep)
    return summary, events


async def test_stocks_example_fires_on_the_independently_computed_dates(
        db: Database, tmp_path: Path) -> None:
    """AAPL first at or below 10 USD/share (first_match) and MSFT at or above 30
    USD/share (every_edge, cooldown 90 days), polled daily over vega's monthly closes."""
    raw = vega_rows("stocks.csv")
    prices: dict[str, dict[date, Decimal]] = {}
    for row in raw:
        day = datetime.strptime(row["date"], "%b %d %Y").date()  # noqa: DTZ007 - a calendar date
        prices.setdefault(row["symbol"], {})[day] = Decimal(row["price"])
    every_day = daily_polls(min(d for s in prices.values() for d in s),
                            max(d for s in prices.values() for d in s))
    fresh = timedelta(days=45)

    def verdicts(symbol: str, test: Any) -> list[tuple[date, bool | None]]:
        out = []
        for day in every_day:
            value = latest(prices[symbol], day, fresh)
            out.append((day, None if value is None else test(value)))
        return out

    aapl = edge_fires(verdicts("AAPL", lambda v: v <= 10), timedelta(0), first_match=True)
    msft = edge_fires(verdicts("MSFT", lambda v: v >= 30), timedelta(days=90))
    ibm = edge_fires(verdicts("IBM", lambda v: v >= 120), timedelta(days=90))
    assert aapl == [date(2000, 10, 1)]  # a sanity anchor: AAPL closed at 9.78 that month
    assert len(msft) >= 3
    # IBM crosses 120 upwards on 2008-05-01, 2008-07-01 and 2009-11-01: the second edge is
    # 61 days after the first fire, inside the 90-day cooldown
    assert ibm == [date(2008, 5, 1), date(2009, 11, 1)]

    summary, events = await run_example(db, tmp_path, "stocks.toml", "stocks.csv")

    assert await stored_fires(db, summary.tenant_id, "aapl-first-at-or-below-10") == aapl
    assert await stored_fires(db, summary.tenant_id, "msft-at-or-above-30") == msft
    assert await stored_fires(db, summary.tenant_id, "ibm-at-or-above-120") == ibm
    suppressed = await db.pool.fetch(
        "SELECT scheduled_for FROM condition_polls WHERE tenant_id = $1 "
        "AND action = 'suppressed_cooldown'", summary.tenant_id)
    assert [r["scheduled_for"].date() for r in suppressed] == [date(2008, 7, 1)]
    fired = [e for e in events if e["action"] == "fired"]
    assert [(e["definition"], e["at"][:10]) for e in fired] == sorted(
        [("aapl-first-at-or-below-10", d.isoformat()) for d in aapl]
        + [("msft-at-or-above-30", d.isoformat()) for d in msft]
        + [("ibm-at-or-above-120", d.isoformat()) for d in ibm], key=lambda x: (x[1], x[0]))
    assert summary.tasks == {"completed": len(aapl) + len(msft) + len(ibm)}
    # the first_match definition stopped polling on its fire; nothing stays open
    statuses = await db.pool.fetch("SELECT definition_id, status FROM definitions "
                                   "WHERE tenant_id = $1 ORDER BY definition_id", summary.tenant_id)
    assert [tuple(r) for r in statuses] == [("aapl-first-at-or-below-10", "completed"),
                                            ("ibm-at-or-above-120", "cancelled"),
                                            ("msft-at-or-above-30", "cancelled")]
    polls = await db.pool.fetchval(
        "SELECT count(*) FROM condition_polls WHERE tenant_id = $1 AND definition_id = $2",
        summary.tenant_id, "aapl-first-at-or-below-10")
    assert polls == (aapl[0] - every_day[0]).days + 1


async def test_seattle_example_fires_across_units(db: Database, tmp_path: Path) -> None:
    """temp_max >= 86 degF over readings in degC: the edges computed here with the
    exact formula F = C * 9/5 + 32 on vega's raw rows. A day's maximum is known from the
    end of that day (the next day's 00:00 UTC poll)."""
    raw = vega_rows("seattle-weather.csv")
    temp = {date.fromisoformat(r["date"].replace("/", "-")) + timedelta(days=1):
            Decimal(r["temp_max"]) for r in raw}
    every_day = daily_polls(min(temp), max(temp))
    verdicts = []
    for day in every_day:
        value = latest(temp, day, timedelta(days=2))
        verdicts.append((day, None if value is None else value * 9 / 5 + 32 >= 86))
    expected = edge_fires(verdicts, timedelta(0))
    assert len(expected) > 10

    summary, events = await run_example(db, tmp_path, "seattle.toml", "seattle_weather.csv")

    assert await stored_fires(db, summary.tenant_id, "seattle-86f") == expected
    assert {e["verdict"] for e in events if e["action"] != "task_completed"} == {"true", "false"}
    # a hot day that is not an edge (the day after an edge, still >= 30 degC) does not fire
    stayed = [day for (day, v), (_, before) in zip(verdicts[1:], verdicts, strict=False)
              if v and before]
    assert stayed and not set(stayed) & set(expected)


async def test_replay_polls_only_its_own_tenant(db: Database, tmp_path: Path) -> None:
    """Two replays in one database: the second neither polls nor runs the first's
    definitions (they are cancelled when it ends)."""
    first, _ = await run_example(db, tmp_path, "seattle.toml", "seattle_weather.csv", 240)
    second, events = await run_example(db, tmp_path, "seattle.toml", "seattle_weather.csv", 240)
    assert first.tenant_id != second.tenant_id
    assert {e["definition"] for e in events} == {"seattle-86f"}
    counts = await db.pool.fetch("SELECT tenant_id, count(*) FROM condition_polls "
                                 "GROUP BY tenant_id")
    assert sorted(r["count"] for r in counts) == [first.polls, second.polls]
    assert first.polls == second.polls == 241


def test_definitions_file_errors_name_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "defs.toml"
    path.write_text('[[definitions]]\nid = "a"\nversion = 1\n[definitions.trigger]\n'
                    'type = "interval"\nevery = "PT1H"\n')
    with pytest.raises(SpecError) as raised:
        load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    assert raised.value.field == "definitions[0].trigger.type"
    path.write_text('[[definitions]]\nid = "a"\nversion = 1\n[definitions.trigger]\n'
                    'type = "condition"\nmode = "every_edge"\npoll_every = "P1D"\n'
                    'source = { name = "series", version = "1" }\n'
                    '[definitions.trigger.predicate]\nsubject = "x"\nop = "<="\n'
                    'threshold = "10 parsecs_per_fortnight"\n')
    with pytest.raises(SpecError) as raised:
        load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    assert raised.value.field == "definitions[0].trigger.predicate.threshold"



async def test_an_interrupted_replay_leaves_nothing_open(db: Database, tmp_path: Path) -> None:
    """A kept replay stopped by an error half-way (here: its event consumer fails on the
    first fire) cancels its definitions on the way out: nothing of it polls again."""
    definitions = load_replay_definitions(EXAMPLES / "conditions" / "stocks.toml",
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    span = source.span()
    assert span is not None

    def consumer(event: dict[str, Any]) -> None:
        if event["action"] == "fired":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await replay(db, definitions, source, start=span[0], end=span[1], home=tmp_path,
                     on_event=consumer, keep=True)
    rows = await db.pool.fetch("SELECT status FROM definitions WHERE tenant_id LIKE '\\_replay-%'")
    assert len(rows) == 3 and {r["status"] for r in rows} == {"cancelled"}


async def test_a_replay_removes_its_tenant_unless_kept(db: Database, tmp_path: Path) -> None:
    """By default a replay leaves nothing behind: no tenant, user, definition, poll, task
    or delivery of it remains, also when its consumer fails half-way."""
    summary, events = await run_example(db, tmp_path, "seattle.toml", "seattle_weather.csv", 240,
                                        keep=False)
    assert summary.polls == 241 and any(e["action"] == "fired" for e in events)
    definitions = load_replay_definitions(EXAMPLES / "conditions" / "stocks.toml",
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    span = source.span()
    assert span is not None

    def consumer(event: dict[str, Any]) -> None:
        if event["action"] == "task_completed":
            raise BrokenPipeError

    with pytest.raises(BrokenPipeError):
        await replay(db, definitions, source, start=span[0], end=span[1], home=tmp_path,
                     on_event=consumer)
    assert not list((tmp_path / "notices").glob("_replay-*"))  # its notice files too
    left = {table: await db.pool.fetchval(
        f"SELECT count(*) FROM {table} WHERE tenant_id LIKE '\\_replay-%'")  # noqa: S608
        for table in await tenant_tables(db)}
    assert left == dict.fromkeys(left, 0)


async def tenant_tables(db: Database) -> list[str]:
    """Every table of watchkeeper's schema with a tenant_id column."""
    rows = await db.pool.fetch(
        "SELECT c.table_name FROM information_schema.columns c "
        "JOIN information_schema.tables t USING (table_schema, table_name) "
        "WHERE c.column_name = 'tenant_id' AND t.table_type = 'BASE TABLE' "
        "AND c.table_schema = current_schema() ORDER BY 1")
    return [r["table_name"] for r in rows]


async def test_the_tenant_purge_lists_every_tenant_table(db: Database) -> None:
    """tenant_purge deletes from every table that has a tenant_id column (a new table
    must be added to it) and from nothing else."""
    sql = QUERIES["tenant_purge"]
    purged = set(re.findall(r"DELETE FROM (\w+) WHERE tenant_id = \$1", sql))
    assert purged == set(await tenant_tables(db))


async def test_a_kept_replay_settles_its_unsent_notices(db: Database, tmp_path: Path) -> None:
    """A kept replay that ends before its notices went out leaves none due: each unsent
    delivery is suppressed with the reason; 'replays prune' then removes the tenant."""
    definitions = load_replay_definitions(EXAMPLES / "conditions" / "stocks.toml",
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    span = source.span()
    assert span is not None

    def consumer(event: dict[str, Any]) -> None:
        if event["action"] == "task_completed":
            raise BrokenPipeError  # after the report commit, before the dispatcher ran

    with pytest.raises(BrokenPipeError):
        await replay(db, definitions, source, start=span[0], end=span[1], home=tmp_path,
                     on_event=consumer, keep=True)
    rows = await db.pool.fetch("SELECT status, status_reason FROM deliveries "
                               "WHERE tenant_id LIKE '\\_replay-%'")
    assert rows and {(r["status"], r["status_reason"]) for r in rows} == {
        ("suppressed", "the replay ended before this notice was sent")}
    tenant = await db.pool.fetchval("SELECT tenant_id FROM tenants WHERE tenant_id LIKE '\\_replay-%'")
    assert await prune_replays(db, datetime.now(UTC), timedelta(days=1)) == []
    (tmp_path / "notices" / tenant).mkdir(parents=True, exist_ok=True)
    assert await prune_replays(db, datetime.now(UTC) + timedelta(seconds=1),
                               home=tmp_path) == [tenant]
    assert not (tmp_path / "notices" / tenant).exists()
    assert await db.pool.fetchval("SELECT count(*) FROM tenants") == 0


async def test_a_replay_file_may_not_send_webhooks(tmp_path: Path) -> None:
    path = tmp_path / "defs.toml"
    path.write_text('[[definitions]]\nid = "a"\nversion = 1\n'
                    'delivery = [{ channel = "webhook", destination = "ops" }]\n'
                    '[definitions.trigger]\ntype = "condition"\nmode = "every_edge"\n'
                    'poll_every = "P1D"\nsource = { name = "series", version = "1" }\n'
                    '[definitions.trigger.predicate]\nsubject = "x"\nop = "<="\n'
                    'threshold = "10 USD"\n')
    definitions = load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource([], name="series", version="1")
    start = datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(SpecError) as raised:
        await replay(None, definitions, source, start=start,  # type: ignore[arg-type]
                     end=start + timedelta(days=1), home=tmp_path)
    assert raised.value.field == "a.delivery.0.channel"


async def test_poll_changes_are_filtered_before_the_limit_and_paged(
        db: Database, tmp_path: Path) -> None:
    """``changes`` keeps polls whose verdict differs from the previous poll of the same
    definition or that did something, decided over the whole timeline before the limit;
    paging forwards with the cursor returns exactly that list, however small the page."""
    summary, _ = await run_example(db, tmp_path, "stocks.toml", "stocks.csv", 1500)
    everything = await polls(db, PollsQuery(summary.tenant_id, since=summary.start,
                                            limit=10_000))
    assert everything.next_after is None and len(everything.polls) == summary.polls
    previous: dict[str, str | None] = {}
    expected = []
    for row in sorted(everything.polls, key=lambda r: (r["definition_id"], r["scheduled_for"])):
        if row["action"] != "none" or previous.get(row["definition_id"]) != row["verdict"]:
            expected.append((row["scheduled_for"], row["definition_id"]))
        previous[row["definition_id"]] = row["verdict"]
    expected.sort()
    assert 6 < len(expected) < summary.polls / 4
    seen, cursor, pages = [], None, 0
    while True:
        page = await polls(db, PollsQuery(summary.tenant_id, since=None if cursor else summary.start,
                                          after=cursor, limit=3, changes=True))
        seen += [(r["scheduled_for"], r["definition_id"]) for r in page.polls]
        pages += 1
        if page.next_after is None:
            break
        cursor = page.next_after
    assert seen == expected and pages == len(expected) // 3 + 1
    newest = await polls(db, PollsQuery(summary.tenant_id, limit=5, changes=True))
    assert [(r["scheduled_for"], r["definition_id"]) for r in newest.polls] == expected[-5:]
    decoded = PollCursor.decode(PollCursor(*[expected[0][0], "d", "owner", "s|x"]).encode())
    assert decoded == PollCursor(expected[0][0], "d", "owner", "s|x")
    with pytest.raises(NotFound):
        await polls(db, PollsQuery(summary.tenant_id, "no-such-definition"))


async def test_a_replay_refuses_an_agent_it_does_not_have(tmp_path: Path) -> None:
    """A definition naming agent 'research' is refused before anything is stored: the
    replay's worker has only 'digest' and would leave the task waiting forever."""
    path = tmp_path / "defs.toml"
    path.write_text('[[definitions]]\nid = "a"\nversion = 1\nagent = { name = "research" }\n'
                    '[definitions.trigger]\ntype = "condition"\nmode = "every_edge"\n'
                    'poll_every = "P1D"\nsource = { name = "series", version = "1" }\n'
                    '[definitions.trigger.predicate]\nsubject = "x"\nop = "<="\n'
                    'threshold = "10 USD"\n')
    definitions = load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource([], name="series", version="1")
    start = datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(SpecError) as raised:
        await replay(None, definitions, source, start=start,  # type: ignore[arg-type]
                     end=start + timedelta(days=1), home=tmp_path)
    assert raised.value.field == "a.agent.name"
    assert raised.value.problem.startswith("names agent 'research'; this replay has digest")


async def test_prune_leaves_a_running_replay_alone(db: Database, tmp_path: Path) -> None:
    """While a replay runs (here: blocked inside its first source read), prune removes
    nothing of it; once it ends, its own end settles it (removed by default)."""
    definitions = load_replay_definitions(EXAMPLES / "conditions" / "stocks.toml",
                                          min_interval=DEFAULT_MIN_INTERVAL)
    series = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    span = series.span()
    assert span is not None
    reading, release = anyio.Event(), anyio.Event()

    class Blocking:
        name, version = series.name, series.version

        async def read(self, subject: str, at: datetime) -> Any:
            reading.set()
            await release.wait()
            return await series.read(subject, at)

    summaries = []
    async with anyio.create_task_group() as tg:
        async def run() -> None:
            summaries.append(await replay(db, definitions, Blocking(), start=span[0],
                                          end=span[0] + timedelta(days=40), home=tmp_path))
        tg.start_soon(run)
        await reading.wait()
        assert await db.pool.fetchval("SELECT count(*) FROM tenants") == 1
        assert await prune_replays(db, datetime.now(UTC) + timedelta(seconds=1)) == []
        assert await db.pool.fetchval("SELECT count(*) FROM definitions") == 3
        release.set()
    assert summaries[0].polls > 0
    assert await db.pool.fetchval("SELECT count(*) FROM tenants") == 0


async def test_a_running_replay_holds_its_lock_but_no_vacuum_horizon(
        db: Database, tmp_path: Path) -> None:
    """A replay keeps a transaction open for as long as it runs (its tenant's lock), and
    that transaction holds no snapshot: while the replay's first fired task runs, the
    session holding the replay's advisory lock has no backend_xmin, so vacuum can remove
    what every other session (supervisors' staging tables included) leaves dead. It
    held the statement's snapshot before (the portal of the lock statement stayed
    open), and a long replay kept the whole database from being vacuumed."""
    from watchkeeper.runtime.engine._agents import AgentCatalog, DigestAgent

    seen: list[tuple[int, str | None]] = []

    class Probe:
        """The digest agent, after a look at the replay lock's session."""

        async def run(self, ctx: Any) -> Any:
            rows = await db.pool.fetch(
                "SELECT a.pid, a.backend_xmin::text AS xmin FROM pg_locks l "
                "JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' "
                "AND l.granted AND a.datname = current_database()")
            seen.extend((r["pid"], r["xmin"]) for r in rows)
            return await DigestAgent().run(ctx)

    agents = AgentCatalog()
    agents.add("digest", Probe())
    definitions = load_replay_definitions(EXAMPLES / "conditions" / "stocks.toml",
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    span = source.span()
    assert span is not None
    summary = await replay(db, definitions, source, start=span[0], end=span[1],
                           home=tmp_path, agents=agents)
    assert summary.tasks  # the probe ran, once per fired task
    assert len({pid for pid, _ in seen}) == 1 and len(seen) == sum(summary.tasks.values())
    assert {xmin for _, xmin in seen} == {None}
