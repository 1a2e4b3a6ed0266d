"""The tick's common case (``engine/_quick.py``) stages exactly the row the general
planning stages (``plan_one`` -> ``decide_admission`` -> ``_stage_rows``) wherever it
answers, over generated specs of every trigger type and policy, cursors near DST
transitions and ticks early, on time and late; and it answers in the common case."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import assume, event, example, given, settings
from hypothesis import strategies as st
from test_calendar_properties import TRANSITIONS
from test_compiled import specs, stored_road

from watchkeeper.runtime.engine._admission import _stage_rows
from watchkeeper.runtime.engine._quick import quick_row
from watchkeeper.runtime.engine._tick import (
    due_definition,
    epoch_us,
    plan_one,
    schedule_stamp,
    trusted_schedule,
    wall_us,
)
from watchkeeper.triggers import USER_BINDING_ID, CompiledSpec, SpecError, decide_admission, parse_spec

POINTS = sorted({p for points in TRANSITIONS.values() for p in points}
                | {datetime(2026, 6, 1, 12, tzinfo=UTC)})


def locked_row(spec_hash: str, cursor: datetime, *, busy: bool = False, slots_seen: int = 0
               ) -> dict[str, Any]:
    """A row as ``definitions_due_lock`` returns it."""
    return {"tenant_id": "acme", "definition_id": "weekly-review", "owner_user_id": "alice",
            "fence": 3, "effective_revision": 2, "spec_hash": spec_hash, "cursor_at": cursor,
            "slots_seen": slots_seen, "busy": busy}


def general_rows(row: dict[str, Any], compiled: CompiledSpec, now: datetime) -> list[tuple[Any, ...]]:
    """The staged rows of the general way, with no task going and no budget (the only
    situation the quick path takes)."""
    plan = plan_one(due_definition(row, compiled), now, {})
    assert plan.failure is None
    verdicts = [(plan, cand, decide_admission(cand.lateness, compiled.overrun, [], None), None)
                for cand in plan.candidates]
    return _stage_rows([plan], verdicts, now)


def as_values(staged: tuple[Any, ...]) -> tuple[Any, ...]:
    """A staged row with its JSON text compared as data."""
    return tuple(str(v) if isinstance(v, str) else v for v in staged)


@settings(max_examples=1000, deadline=None)
@given(specs(), st.sampled_from(POINTS), st.integers(-3 * 86_400, 3 * 86_400),
       st.sampled_from([True, True, True, False]), st.integers(0, 2 * 86_400), st.integers(0, 30),
       st.sampled_from([False, False, False, True]))
@example({"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"}},
         datetime(2026, 12, 2, 19, tzinfo=UTC), -30, False, 31, 0, False)
def test_a_quick_row_is_the_general_row(data: dict[str, Any], point: datetime, cursor_s: int,
                                        aligned: bool, tick_s: int, slots_seen: int,
                                        busy: bool) -> None:
    """Where the quick path stages a row, the general planning stages the same row (every
    column: key, instants, wall and fold, verdict, lateness, payload stamp, cursor,
    slots_seen, next due, status) and nothing else; a definition with a task going
    (busy) is never quick. ``aligned``: the tick comes ``tick_s`` (mod 45 s) after the
    first slot past the cursor, as at a due instant; else anywhere after the cursor."""
    try:
        spec = parse_spec(data)
    except SpecError:
        assume(False)
    compiled = stored_road(spec)
    cursor = point + timedelta(seconds=cursor_s)
    now = cursor + timedelta(seconds=tick_s)
    if aligned:
        first = compiled.window(cursor, cursor).next_slot
        assume(first is not None)
        assert first is not None
        now = first.scheduled_for + timedelta(seconds=tick_s % 45)
    row = locked_row(spec.spec_hash, cursor, busy=busy, slots_seen=slots_seen)
    quick = quick_row(row, compiled, now, 0)
    if busy or compiled.task_limit is not None:
        assert quick is None
    event("quick" if quick is not None else "general")
    if quick is None:
        return
    staged, key = quick
    general = general_rows(row, compiled, now)
    assert [as_values(staged)] == [as_values(r) for r in general]
    assert key == ("acme", "weekly-review", USER_BINDING_ID, general[0][4], "scheduled")


def test_the_common_case_is_quick() -> None:
    """A weekly Paris review due a second ago, an hourly job and a 15-minute interval are
    staged by the quick path, with the values a reader computes by hand."""
    cases = [
        ({"type": "cron", "expr": "0 20 * * 3", "zone": "Europe/Paris"},
         datetime(2026, 12, 2, 19, tzinfo=UTC), "2026-12-02T20:00[Europe/Paris]",
         datetime(2026, 12, 9, 19, tzinfo=UTC)),
        ({"type": "cron", "expr": "0 * * * *", "zone": "America/New_York"},
         datetime(2026, 12, 2, 19, tzinfo=UTC), "2026-12-02T14:00[America/New_York]",
         datetime(2026, 12, 2, 20, tzinfo=UTC)),
        ({"type": "interval", "every": "PT15M"}, datetime(2026, 12, 2, 19, tzinfo=UTC),
         "2026-12-02T19:00:00Z", datetime(2026, 12, 2, 19, 15, tzinfo=UTC)),
    ]
    for trigger, due, slot, following in cases:
        spec = parse_spec({"version": 1, "trigger": trigger})
        now = due + timedelta(seconds=1)
        row = locked_row(spec.spec_hash, due - timedelta(minutes=10))
        quick = quick_row(row, stored_road(spec), now, 7)
        assert quick is not None, trigger
        staged, key = quick
        assert staged[0] == 7 and staged[4] == slot and key[3] == slot
        due_us = int(due.timestamp()) * 1_000_000
        assert staged[8] == due_us == epoch_us(due)  # scheduled_for, in µs since the epoch
        assert staged[14:18] == ("admitted", staged[15], False, 1.0)  # decision, late, lateness
        assert staged[-4:] == (due_us, 1, int(following.timestamp()) * 1_000_000, "active")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12), st.integers(0, 2**31 - 1), st.text(max_size=40),
       st.sampled_from(["scheduled", "manual"]),
       st.datetimes(timezones=st.just(UTC)))
@example("weekly-review", 2, "2026-12-02T20:00[Europe/Paris]", "scheduled",
         datetime(2026, 12, 2, 19, tzinfo=UTC))
@example('a"b\\c', 1, "2026-12-02T20:00[Europe/Paris]", "scheduled",
         datetime(2026, 12, 2, 19, 0, 0, 5, tzinfo=UTC))
def test_the_schedule_stamp_is_what_json_writes(definition_id: str, revision: int, slot: str,
                                                kind: str, when: datetime) -> None:
    """The stamp built without the encoder is, byte for byte, ``json.dumps`` of the
    trusted schedule, whatever the identifiers hold (quotes, escapes, non-ASCII), twice
    (the second time from the remembered part)."""
    expected = json.dumps({"schedule": trusted_schedule(definition_id, revision, slot, kind, when)})
    assert schedule_stamp(definition_id, revision, slot, kind, when) == expected
    assert schedule_stamp(definition_id, revision, slot, kind, when) == expected


@settings(max_examples=300, deadline=None)
@given(st.datetimes(timezones=st.just(UTC)))
def test_staged_instants_are_exact_microseconds(instant: datetime) -> None:
    """An instant staged as microseconds since the epoch (and a wall time likewise) is
    the same instant, to the microsecond, across the whole datetime range."""
    us = epoch_us(instant)
    assert us is not None
    assert datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us) == instant
    wall = instant.replace(tzinfo=None)
    assert datetime(1970, 1, 1) + timedelta(microseconds=wall_us(wall)) == wall  # noqa: DTZ001
