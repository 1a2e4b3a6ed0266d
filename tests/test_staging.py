"""Staging (``Connection.stage``): a small batch is sent with the statement that reads it,
as one array per column; a large one is COPYed into a temporary table made by its
transaction. Both ways store the same rows, and neither leaves a table behind."""

from __future__ import annotations

from datetime import UTC, datetime
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
