"""Staging (``Connection.stage``): a small batch is sent with the statement that reads it,
as one array per column; a large one is COPYed into a temporary table made by its
transaction. Both ways store the same rows, and neither leaves a table behind."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from _helpers import confirmed, owner, utc
from conftest import TEST_KEYRING
from test_replay_output import MIXED, kept_replay, stored

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.engine._scheduler import tick
from watchkeeper.runtime.store import _db
from watchkeeper.runtime.store._db import INLINE_VALUES, STAGING_COLUMNS, Database
from watchkeeper.runtime.usecases import load_replay_definitions
from watchkeeper.sources import SeriesSource
from watchkeeper.triggers._spec import DEFAULT_MIN_INTERVAL

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TEMP_TABLES = "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()"


async def test_a_small_batch_makes_no_table_and_a_large_one_takes_it_along(db: Database) -> None:
    """Three rows are kept for the statement (no temporary table exists); once the rows
    staged for the table pass INLINE_VALUES they are all COPYed, the first three included
    and the columns not given NULL; the table goes with the transaction."""
    width = len(STAGING_COLUMNS["wk_stage_polls"])
    large = INLINE_VALUES // width + 1
    async with db.connection() as conn:
        async with conn.transaction():
            await conn.stage("wk_stage_polls", ["slot", "definition_id"],
                             [(f"s{i}", "d") for i in range(3)])
            assert await conn.raw.fetchval(TEMP_TABLES) == 0
            await conn.stage("wk_stage_polls", ["definition_id", "slot", "verdict"],
                             [("e", f"t{i}", "true") for i in range(large)])
            assert await conn.raw.fetchval(TEMP_TABLES) == 1
            rows = await conn.raw.fetch("SELECT definition_id, slot, verdict, reason "
                                        "FROM wk_stage_polls")
        assert sorted(map(tuple, rows)) == sorted(
            [("d", f"s{i}", None, None) for i in range(3)]
            + [("e", f"t{i}", "true", None) for i in range(large)])
        assert await conn.raw.fetchval(TEMP_TABLES) == 0


async def test_staging_names_its_table_and_columns(db: Database) -> None:
    """A table that is not a staging table, a column the table lacks, or no transaction:
    StoreError naming what is wrong, nothing staged."""
    async with db.connection() as conn:
        with pytest.raises(_db.StoreError, match="a staging table"):
            await conn.stage("wk_stage_polls", ["slot"], [("s",)])  # no transaction
        async with conn.transaction():
            with pytest.raises(_db.StoreError, match="a staging table"):
                await conn.stage("tasks", ["slot"], [("s",)])
            with pytest.raises(_db.StoreError, match=r"\['colour'\] are not the table's"):
                await conn.stage("wk_stage_polls", ["slot", "colour"], [("s", "red")])


@pytest.mark.parametrize("inline_values", [0, 10**9])
async def test_a_replay_stores_the_same_rows_staged_inline_or_copied(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        inline_values: int) -> None:
    """The mixed replay of ``test_replay_output`` (claims, decisions, receipts, states,
    fires, quiet batches, a budget, an end), every batch COPYed (0) or every batch sent
    inline: the same lines and every stored row the same as with the default, which sends
    small batches inline and COPYs large ones."""
    path = tmp_path / "mixed.toml"
    path.write_text(MIXED)
    definitions = load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    start, end = datetime(2007, 1, 1, tzinfo=UTC), datetime(2008, 6, 30, tzinfo=UTC)
    default = await kept_replay(db, definitions, source, start, end, tmp_path, batched=True)
    monkeypatch.setattr(_db, "INLINE_VALUES", inline_values)
    other = await kept_replay(db, definitions, source, start, end, tmp_path, batched=True)
    assert other[0] == default[0]
    assert other[1] == default[1]
    assert sum(default[2].actions.values()) > 300 and default[2].actions.get("fired")


@pytest.mark.parametrize("inline_values", [0, 10**9])
async def test_a_tick_admits_the_same_rows_staged_inline_or_copied(
        db: Database, db_dsn: str, monkeypatch: pytest.MonkeyPatch, inline_values: int) -> None:
    """The same definitions (cron in two zones, an interval, a late one skipped) in two
    schemas, ticked at the same instants, one staging the default way and the other
    every batch as ``inline_values`` says: every stored row is the same."""
    specs = [{"trigger": {"type": "cron", "expr": "0 8 * * *", "zone": "Europe/Paris"}},
             {"trigger": {"type": "cron", "expr": "0 2 * * 1-5", "zone": "America/New_York"}},
             {"trigger": {"type": "interval", "every": 1800}},
             {"trigger": {"type": "interval", "every": 3600},
              "lateness": {"policy": "skip_expired", "late_grace": 60}}]

    async def lived(store: Database) -> dict[str, list[str]]:
        clock = FakeClock(utc("2026-06-01T05:30:00Z"))
        me = await owner(store, clock)
        for i, spec in enumerate(specs):
            await confirmed(store, clock, spec, definition_id=f"d{i}", principal=me)
        planned = []
        for at in ("2026-06-01T06:10:00Z", "2026-06-01T06:30:00Z", "2026-06-02T06:00:00Z"):
            clock.set_wall(utc(at))
            planned.append((await tick(store, clock)).planned)
        assert planned == [4, 1, 4]
        return await stored(store, "acme")

    expected = await lived(db)
    monkeypatch.setattr(_db, "INLINE_VALUES", inline_values)
    async with Database.open(db_dsn, schema="wk_staged_other", keyring=TEST_KEYRING) as other:
        assert await lived(other) == expected
    assert len(expected["occurrences"]) >= 9 and expected["tasks"]


# Read-back probes (from a review of the kept batches): a read-only named query reads
# every column of a staging table the way the runtime's readers do (FROM wk_stage_x
# alias, rewritten when the batch is kept).

_names = itertools.count()


def reader(monkeypatch: pytest.MonkeyPatch, table: str) -> str:
    """Register a named query reading every column of ``table`` (as runtime readers do)."""
    name = f"review_read_{table}_{next(_names)}"
    cols = ", ".join(f"s.{c}" for c, _ in STAGING_COLUMNS[table])
    monkeypatch.setitem(_db.QUERIES, name, f"SELECT {cols} FROM {table} s")
    monkeypatch.setitem(_db.STAGING_READS, name, frozenset({table}))
    return name


async def staged_back(db: Database, monkeypatch: pytest.MonkeyPatch, table: str,
                      columns: list[str], rows: list[tuple]) -> list[tuple]:
    name = reader(monkeypatch, table)
    async with db.connection() as conn, conn.transaction():
        await conn.stage(table, columns, rows)
        return [tuple(r) for r in await conn.fetch(name)]


async def test_a_jsonb_list_value_reads_back_the_same_inline_as_copied(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jsonb codec takes any JSON value (dict, list, JsonText): a list is one jsonb
    value kept or COPYed (found by a review: in a jsonb[] parameter asyncpg took it for
    a dimension of the array, and unnest flattened it)."""
    cols = ["tenant_id", "params", "audiences"]
    rows = [("t", {"a": 1}, ["x", "y"]), ("u", None, ["z", "w"])]
    copied_limit = 0
    monkeypatch.setattr(_db, "INLINE_VALUES", copied_limit)
    copied = await staged_back(db, monkeypatch, "wk_stage_tasks", cols, rows)
    monkeypatch.setattr(_db, "INLINE_VALUES", INLINE_VALUES)
    inline = await staged_back(db, monkeypatch, "wk_stage_tasks", cols, rows)
    assert inline == copied


async def test_mixed_values_read_back_the_same_inline_as_copied(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """NULLs, numeric NaN/large, timestamptz, JsonText, unicode and empty strings."""
    cols = [c for c, _ in STAGING_COLUMNS["wk_stage_receipts"]]
    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    rows = [("d", "s", "subj", "src", None, "o1", Decimal("NaN"), "", "€", at, None, "ok",
             "a--b $1 'q'", "true"),
            ("d", "s2", None, None, None, None, Decimal("1e-30"), None, None, None, at,
             None, None, None)]
    monkeypatch.setattr(_db, "INLINE_VALUES", 0)
    copied = await staged_back(db, monkeypatch, "wk_stage_receipts", cols, rows)
    monkeypatch.setattr(_db, "INLINE_VALUES", INLINE_VALUES)
    inline = await staged_back(db, monkeypatch, "wk_stage_receipts", cols, rows)
    assert str(inline) == str(copied)


async def test_a_rolled_back_savepoint_keeps_the_rows_staged_before_it(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small batch kept before a savepoint, then moved into the COPY of the larger
    batch staged inside it: the rollback to the savepoint leaves the first batch staged
    (found by a review: it was lost with the table the savepoint had made)."""
    name = reader(monkeypatch, "wk_stage_polls")
    width = len(STAGING_COLUMNS["wk_stage_polls"])
    large = INLINE_VALUES // width + 1
    async with db.connection() as conn, conn.transaction():
        await conn.stage("wk_stage_polls", ["definition_id", "slot"], [("before", "s0")])
        with pytest.raises(RuntimeError):
            async with conn.transaction():  # a savepoint
                await conn.stage("wk_stage_polls", ["definition_id", "slot"],
                                 [("inside", f"s{i}") for i in range(large)])
                raise RuntimeError("roll the savepoint back")
        rows = await conn.fetch(name)
    assert ("before", "s0") in {(r["definition_id"], r["slot"]) for r in rows}


async def test_staging_again_after_a_rolled_back_savepoint_that_copied(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollback to a savepoint drops the temporary table made inside it: staging
    after it makes the table again (found by a review: the COPY failed)."""
    name = reader(monkeypatch, "wk_stage_polls")
    width = len(STAGING_COLUMNS["wk_stage_polls"])
    large = INLINE_VALUES // width + 1
    async with db.connection() as conn, conn.transaction():
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await conn.stage("wk_stage_polls", ["definition_id", "slot"],
                                 [("inside", f"s{i}") for i in range(large)])
                raise RuntimeError("roll the savepoint back")
        await conn.stage("wk_stage_polls", ["definition_id", "slot"], [("after", "s1")])
        rows = await conn.fetch(name)
    assert [(r["definition_id"], r["slot"]) for r in rows] == [("after", "s1")]


async def test_a_reader_after_the_transaction_does_not_see_its_inline_rows(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a transaction ends its staged rows are gone, kept or COPYed: a reader run
    later on the same Connection finds no staging table (found by a review: kept rows
    were still sent)."""
    name = reader(monkeypatch, "wk_stage_polls")
    async with db.connection() as conn:
        async with conn.transaction():
            await conn.stage("wk_stage_polls", ["definition_id", "slot"], [("old", "s")])
        with pytest.raises(_db.StoreError):
            rows = await conn.fetch(name)
            raise AssertionError(f"read rows of an ended transaction: {list(map(tuple, rows))}")


async def test_staging_needs_a_transaction_of_the_connection(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction opened on the raw asyncpg connection is not one the Connection
    tracks (its staged rows would outlive it): staging there is refused, and rows staged
    by an earlier transaction are not read by a later one."""
    name = reader(monkeypatch, "wk_stage_polls")
    async with db.connection() as conn:
        async with conn.transaction():
            await conn.stage("wk_stage_polls", ["definition_id", "slot"], [("old", "s")])
        async with conn.raw.transaction():
            with pytest.raises(_db.StoreError, match="Connection.transaction"):
                await conn.stage("wk_stage_polls", ["definition_id", "slot"], [("new", "s")])
        async with conn.transaction():
            await conn.stage("wk_stage_polls", ["definition_id", "slot"], [("new", "s")])
            rows = await conn.fetch(name)
    assert [r["definition_id"] for r in rows] == ["new"]


async def test_subset_reordered_threshold_and_empty_batches_agree(
        db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reversed column subset, empty batches, a batch exactly at the limit, a batch
    crossing it (all rows COPYed), a small one after a COPY, two readers in one
    transaction: every reader sees every row staged so far, NULL where not given."""
    name = reader(monkeypatch, "wk_stage_polls")
    width = len(STAGING_COLUMNS["wk_stage_polls"])
    at = INLINE_VALUES // width
    async with db.connection() as conn, conn.transaction():
        await conn.stage("wk_stage_polls", ["reason", "slot"], [])
        assert await conn.fetch(name) == []
        await conn.stage("wk_stage_polls", ["reason", "slot", "definition_id"],
                         [("r", f"s{i}", "d") for i in range(at)])
        first = await conn.fetch(name)
        assert len(first) == at and tuple(first[0]) == ("d", "s0", None, None, None, "r")
        await conn.stage("wk_stage_polls", ["slot"], [("x",)])  # crosses: COPY all
        second = await conn.fetch(name)
        await conn.stage("wk_stage_polls", ["slot"], [("y",)])  # COPY then small
        third = await conn.fetch(name)
    assert [tuple(r) for r in second[:at]] == [tuple(r) for r in first]
    assert len(second) == at + 1 and len(third) == at + 2
