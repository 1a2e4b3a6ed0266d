"""Exact cron occurrences, DST transitions in pairs (cronsim's TestDstTransitions style).

Transition instants used below (tzdata 2026):
- Europe/Berlin: 2026-03-29T01:00Z (02:00 CET -> 03:00 CEST), 2026-10-25T01:00Z (03:00 -> 02:00)
- America/New_York: 2026-03-08T07:00Z (02:00 EST -> 03:00 EDT), 2026-11-01T06:00Z (02:00 EDT -> 01:00 EST)
- Australia/Lord_Howe (30 min): 2026-04-04T15:00Z (02:00 +11 -> 01:30 +10:30),
  2026-10-03T15:30Z (02:00 +10:30 -> 02:30 +11)
- Antarctica/Troll (2 h): 2026-03-29T01:00Z (01:00 +00 -> 03:00 +02), 2026-10-25T01:00Z (03:00 -> 01:00)
- America/Santiago (midnight): 2026-04-05T03:00Z (00:00 -03 -> 23:00 -04),
  2026-09-06T04:00Z (00:00 -04 -> 01:00 -03)
- Asia/Beirut (midnight): 2026-03-28T22:00Z (00:00 +02 -> 01:00 +03),
  2026-10-24T21:00Z (00:00 +03 -> 23:00 +02)
- Pacific/Apia: 2011-12-30 does not exist (2011-12-29T23:59:59-10:00 is followed by 2011-12-31T00:00+14:00)
  — the transition instant is 2011-12-30T10:00Z
- Asia/Singapore: 1981-12-31T16:00Z (23:30 +07:30 -> 1982-01-01 00:00 +08:00): a gap that
  crosses midnight, but 1981-12-31 happened (until 23:30)
"""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest

from watchkeeper.triggers import (
    CronExpression,
    CronSchedule,
    NonAdvancingScheduleError,
    NoOccurrenceError,
    Slot,
    SlotSkip,
    SpecError,
)
from watchkeeper.triggers._cron import _emit_after


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def nxt(expr: str, zone: str, after: str, count: int, dst_gap: str = "skip") -> list[str]:
    """The next ``count`` slots as 'UTC local key [skip]' strings."""
    schedule = CronSchedule(expr, zone, dst_gap)  # type: ignore[arg-type]
    out = []
    for slot in itertools.islice(schedule.slots_after(at(after)), count):
        text = f"{slot.scheduled_for:%Y-%m-%dT%H:%MZ} {slot.local.isoformat()}"
        out.append(text + (" skipped" if slot.skip is SlotSkip.DST_GAP else ""))
    return out


class TestBerlin0230:
    """A fixed-time 02:30 daily job across both 2026 Berlin changes."""

    def test_spring_gap_is_skipped_and_recorded(self) -> None:
        """The nonexistent 02:30 on 2026-03-29 is a skipped slot at the transition instant."""
        assert nxt("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00Z", 3) == [
            "2026-03-28T01:30Z 2026-03-28T02:30:00+01:00",
            "2026-03-29T01:00Z 2026-03-29T03:00:00+02:00 skipped",
            "2026-03-30T00:30Z 2026-03-30T02:30:00+02:00",
        ]

    def test_spring_gap_run_after_runs_once_after_the_gap(self) -> None:
        """dst_gap=run_after runs the missing 02:30 at 03:00 CEST, the first instant after."""
        assert nxt("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00Z", 3, "run_after") == [
            "2026-03-28T01:30Z 2026-03-28T02:30:00+01:00",
            "2026-03-29T01:00Z 2026-03-29T03:00:00+02:00",
            "2026-03-30T00:30Z 2026-03-30T02:30:00+02:00",
        ]

    def test_autumn_fold_fires_once_at_the_first_instant(self) -> None:
        """02:30 occurs twice on 2026-10-25; the fixed-time job fires at 02:30 CEST only."""
        assert nxt("30 2 * * *", "Europe/Berlin", "2026-10-24T00:00Z", 3) == [
            "2026-10-24T00:30Z 2026-10-24T02:30:00+02:00",
            "2026-10-25T00:30Z 2026-10-25T02:30:00+02:00",
            "2026-10-26T01:30Z 2026-10-26T02:30:00+01:00",
        ]

    def test_starting_between_the_two_copies_does_not_fire_the_second(self) -> None:
        """A cursor just after the first 02:30 must not produce the second copy."""
        assert nxt("30 2 * * *", "Europe/Berlin", "2026-10-25T00:31Z", 1) == [
            "2026-10-26T01:30Z 2026-10-26T02:30:00+01:00",
        ]

    def test_several_missing_times_run_after_once(self) -> None:
        """02:00, 02:15, 02:30, 02:45 all map to 03:00 CEST and fire once."""
        out = nxt("0,15,30,45 2 * * *", "Europe/Berlin", "2026-03-28T23:00Z", 2, "run_after")
        assert out == [
            "2026-03-29T01:00Z 2026-03-29T03:00:00+02:00",
            "2026-03-30T00:00Z 2026-03-30T02:00:00+02:00",
        ]

    def test_run_after_merges_with_a_real_slot_at_the_same_instant(self) -> None:
        """0 2,3: the missing 02:00 would run at 03:00, which is a slot already: one fire."""
        out = nxt("0 2,3 * * *", "Europe/Berlin", "2026-03-28T23:00Z", 2, "run_after")
        assert out == [
            "2026-03-29T01:00Z 2026-03-29T03:00:00+02:00",
            "2026-03-30T00:00Z 2026-03-30T02:00:00+02:00",
        ]


class TestNewYorkHourly:
    """A wildcard hourly job fires every elapsed hour, in both folds."""

    def test_autumn_both_folds(self) -> None:
        """01:00 EDT and 01:00 EST both fire on 2026-11-01."""
        assert nxt("0 * * * *", "America/New_York", "2026-11-01T03:30Z", 4) == [
            "2026-11-01T04:00Z 2026-11-01T00:00:00-04:00",
            "2026-11-01T05:00Z 2026-11-01T01:00:00-04:00",
            "2026-11-01T06:00Z 2026-11-01T01:00:00-05:00",
            "2026-11-01T07:00Z 2026-11-01T02:00:00-05:00",
        ]

    def test_autumn_keys_are_distinct(self) -> None:
        """The two copies of 01:00 have different slot keys (fold 1 is marked)."""
        slots = list(itertools.islice(
            CronSchedule("0 * * * *", "America/New_York").slots_after(at("2026-11-01T04:30Z")), 2))
        assert [s.key for s in slots] == [
            "2026-11-01T01:00[America/New_York]",
            "2026-11-01T01:00[America/New_York]#fold1",
        ]

    def test_spring_missing_hour_has_no_run(self) -> None:
        """02:00 does not exist on 2026-03-08: no run, and nothing recorded for it."""
        assert nxt("0 * * * *", "America/New_York", "2026-03-08T05:30Z", 3) == [
            "2026-03-08T06:00Z 2026-03-08T01:00:00-05:00",
            "2026-03-08T07:00Z 2026-03-08T03:00:00-04:00",
            "2026-03-08T08:00Z 2026-03-08T04:00:00-04:00",
        ]

    def test_cursor_inside_the_first_fold_still_reaches_the_second(self) -> None:
        """After 01:45 EDT, the next */30 slots are 01:00 EST and 01:30 EST."""
        assert nxt("*/30 * * * *", "America/New_York", "2026-11-01T05:45Z", 3) == [
            "2026-11-01T06:00Z 2026-11-01T01:00:00-05:00",
            "2026-11-01T06:30Z 2026-11-01T01:30:00-05:00",
            "2026-11-01T07:00Z 2026-11-01T02:00:00-05:00",
        ]


class TestLordHowe:
    """A 30-minute DST shift."""

    def test_autumn_fixed_fires_once(self) -> None:
        """01:30 repeats on 2026-04-05; the fixed job fires at 01:30 +11:00 only."""
        assert nxt("30 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00Z", 2) == [
            "2026-04-04T14:30Z 2026-04-05T01:30:00+11:00",
            "2026-04-05T15:00Z 2026-04-06T01:30:00+10:30",
        ]

    def test_autumn_wildcard_fires_in_both_folds(self) -> None:
        """0,30 * * * *: 01:30 fires at +11:00 and again at +10:30."""
        assert nxt("0,30 * * * *", "Australia/Lord_Howe", "2026-04-04T13:45Z", 4) == [
            "2026-04-04T14:00Z 2026-04-05T01:00:00+11:00",
            "2026-04-04T14:30Z 2026-04-05T01:30:00+11:00",
            "2026-04-04T15:00Z 2026-04-05T01:30:00+10:30",
            "2026-04-04T15:30Z 2026-04-05T02:00:00+10:30",
        ]

    def test_spring_gap_of_thirty_minutes(self) -> None:
        """02:15 does not exist on 2026-10-04 (02:00 -> 02:30)."""
        assert nxt("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T00:00Z", 3) == [
            "2026-10-02T15:45Z 2026-10-03T02:15:00+10:30",
            "2026-10-03T15:30Z 2026-10-04T02:30:00+11:00 skipped",
            "2026-10-04T15:15Z 2026-10-05T02:15:00+11:00",
        ]


class TestTroll:
    """A two-hour DST shift."""

    def test_spring_gap_of_two_hours(self) -> None:
        """02:30 does not exist on 2026-03-29 (01:00 -> 03:00)."""
        out = nxt("30 2 * * *", "Antarctica/Troll", "2026-03-28T00:00Z", 3, "run_after")
        assert out == [
            "2026-03-28T02:30Z 2026-03-28T02:30:00+00:00",
            "2026-03-29T01:00Z 2026-03-29T03:00:00+02:00",
            "2026-03-30T00:30Z 2026-03-30T02:30:00+02:00",
        ]

    def test_autumn_fold_of_two_hours(self) -> None:
        """01:30 repeats on 2026-10-25 two hours apart; fixed fires at the first."""
        assert nxt("30 1 * * *", "Antarctica/Troll", "2026-10-24T12:00Z", 2) == [
            "2026-10-24T23:30Z 2026-10-25T01:30:00+02:00",
            "2026-10-26T01:30Z 2026-10-26T01:30:00+00:00",
        ]


class TestMidnightChanges:
    """Zones whose clocks change at midnight."""

    def test_santiago_spring_midnight_does_not_exist(self) -> None:
        """00:00 on 2026-09-06 is skipped; the day still has 01:00."""
        assert nxt("0 0 * * *", "America/Santiago", "2026-09-05T00:00Z", 2) == [
            "2026-09-05T04:00Z 2026-09-05T00:00:00-04:00",
            "2026-09-06T04:00Z 2026-09-06T01:00:00-03:00 skipped",
        ]

    def test_santiago_autumn_repeated_2330(self) -> None:
        """23:30 on 2026-04-04 occurs twice; fixed fires once, at -03:00."""
        assert nxt("30 23 * * *", "America/Santiago", "2026-04-04T12:00Z", 2) == [
            "2026-04-05T02:30Z 2026-04-04T23:30:00-03:00",
            "2026-04-06T03:30Z 2026-04-05T23:30:00-04:00",
        ]

    def test_beirut_spring_and_autumn(self) -> None:
        """00:30 is missing on 2026-03-29; 23:30 repeats on 2026-10-24."""
        assert nxt("30 0 * * *", "Asia/Beirut", "2026-03-28T00:00Z", 2, "run_after") == [
            "2026-03-28T22:00Z 2026-03-29T01:00:00+03:00",
            "2026-03-29T21:30Z 2026-03-30T00:30:00+03:00",
        ]
        assert nxt("30 23 * * *", "Asia/Beirut", "2026-10-24T12:00Z", 2) == [
            "2026-10-24T20:30Z 2026-10-24T23:30:00+03:00",
            "2026-10-25T21:30Z 2026-10-25T23:30:00+02:00",
        ]


class TestApia:
    """Pacific/Apia skipped Friday 2011-12-30 entirely."""

    def test_friday_noon_has_no_occurrence_that_week(self) -> None:
        """The Friday-noon job is skipped that week; it never runs on Saturday the 31st."""
        assert nxt("0 12 * * 5", "Pacific/Apia", "2011-12-20T00:00Z", 3) == [
            "2011-12-23T22:00Z 2011-12-23T12:00:00-10:00",
            "2011-12-30T10:00Z 2011-12-31T00:00:00+14:00 skipped",
            "2012-01-05T22:00Z 2012-01-06T12:00:00+14:00",
        ]

    def test_run_after_does_not_move_a_day_that_never_was(self) -> None:
        """With run_after the missing Friday is still skipped: nothing fires on Saturday
        2011-12-31 00:00+14:00 (2011-12-30T10:00Z)."""
        assert nxt("0 12 * * 5", "Pacific/Apia", "2011-12-20T00:00Z", 3, "run_after") == [
            "2011-12-23T22:00Z 2011-12-23T12:00:00-10:00",
            "2011-12-30T10:00Z 2011-12-31T00:00:00+14:00 skipped",
            "2012-01-05T22:00Z 2012-01-06T12:00:00+14:00",
        ]

    def test_a_daily_noon_job_fires_once_on_the_31st(self) -> None:
        """Daily 12:00 with run_after: the 30th is skipped, the 31st fires once, at noon."""
        assert nxt("0 12 * * *", "Pacific/Apia", "2011-12-29T00:00Z", 3, "run_after") == [
            "2011-12-29T22:00Z 2011-12-29T12:00:00-10:00",
            "2011-12-30T10:00Z 2011-12-31T00:00:00+14:00 skipped",
            "2011-12-30T22:00Z 2011-12-31T12:00:00+14:00",
        ]

    def test_a_daily_midnight_job_records_the_missing_day(self) -> None:
        """Daily 00:00 with run_after: the 30th's midnight is a skipped slot, and the 31st's
        midnight (the same instant, the transition) fires as its own slot."""
        schedule = CronSchedule("0 0 * * *", "Pacific/Apia", "run_after")
        slots = list(itertools.islice(schedule.slots_after(at("2011-12-29T12:00Z")), 2))
        assert [(s.key, s.scheduled_for.isoformat(), s.fires) for s in slots] == [
            ("2011-12-30T00:00[Pacific/Apia]", "2011-12-30T10:00:00+00:00", False),
            ("2011-12-31T00:00[Pacific/Apia]", "2011-12-30T10:00:00+00:00", True),
        ]
        assert slots[0].note is not None and "the whole day does not exist" in slots[0].note

    def test_a_gap_across_midnight_still_runs_after(self) -> None:
        """Singapore's 1981-12-31 existed until 23:30: a missing 23:30 runs at 00:00 the
        next day with run_after (only a day that never happened loses its run)."""
        assert nxt("30 23 * * *", "Asia/Singapore", "1981-12-30T12:00Z", 3, "run_after") == [
            "1981-12-30T16:00Z 1981-12-30T23:30:00+07:30",
            "1981-12-31T16:00Z 1982-01-01T00:00:00+08:00",
            "1982-01-01T15:30Z 1982-01-01T23:30:00+08:00",
        ]

    def test_the_note_names_both_days(self) -> None:
        """The gap note says the clocks jumped a whole day."""
        slot = list(itertools.islice(
            CronSchedule("0 12 * * 5", "Pacific/Apia").slots_after(at("2011-12-24T00:00Z")), 1))[0]
        assert slot.note is not None
        assert "from 2011-12-30 00:00 to 2011-12-31 00:00+14:00" in slot.note


class TestPeerBugReports:
    """Cases from public bug reports in peer schedulers."""

    def test_london_every_other_hour_across_fall_back(self) -> None:
        """0 1-23/2 in Europe/London from 00:30 BST: the repeated 01:00 fires once."""
        assert nxt("0 1-23/2 * * *", "Europe/London", "2024-10-27T00:30+01:00", 4) == [
            "2024-10-27T00:00Z 2024-10-27T01:00:00+01:00",
            "2024-10-27T03:00Z 2024-10-27T03:00:00+00:00",
            "2024-10-27T05:00Z 2024-10-27T05:00:00+00:00",
            "2024-10-27T07:00Z 2024-10-27T07:00:00+00:00",
        ]

    def test_day_of_month_or_day_of_week(self) -> None:
        """0 13 8 1,4,7,10 3: the 8th of the month OR any Wednesday (Vixie OR)."""
        assert nxt("0 13 8 1,4,7,10 3", "UTC", "2020-09-24T00:00Z", 3) == [
            "2020-10-07T13:00Z 2020-10-07T13:00:00+00:00",
            "2020-10-08T13:00Z 2020-10-08T13:00:00+00:00",
            "2020-10-14T13:00Z 2020-10-14T13:00:00+00:00",
        ]

    def test_star_step_day_of_month_means_and(self) -> None:
        """Vixie: a day field starting with '*' is unrestricted, so */2 with Monday is AND."""
        assert [s[:10] for s in nxt("0 0 */2 * 1", "UTC", "2026-01-01T00:00Z", 3)] == [
            "2026-01-05", "2026-01-19", "2026-02-09",
        ]

    def test_star_45_fires_at_00_and_45(self) -> None:
        """*/45 in the minute field means 0 and 45."""
        assert [s[11:16] for s in nxt("*/45 * * * *", "UTC", "2026-01-01T00:10Z", 4)] == [
            "00:45", "01:00", "01:45", "02:00",
        ]

    @pytest.mark.parametrize(
        ("expr", "expected"),
        [("0 9 * * sat-sat", ["2026-01-03", "2026-01-10"]),
         ("0 9 13-13 * *", ["2026-01-13", "2026-02-13"]),
         ("0 9 * * 1-1,3", ["2026-01-05", "2026-01-07"]),
         ("0 9 * * 1/6", ["2026-01-04", "2026-01-05"])],
    )
    def test_equal_ended_ranges_and_weekday_steps_read_as_vixie(self, expr: str,
                                                                expected: list[str]) -> None:
        """sat-sat is Saturday (croniter: every day); 1/6 in day-of-week is 1-7/6,
        Monday and Sunday (croniter: Monday only)."""
        assert [s[:10] for s in nxt(expr, "UTC", "2026-01-01T00:00Z", 2)] == expected

    def test_equal_ended_minute_range_is_one_minute(self) -> None:
        """5-5 in the minute field is 5 past, not every minute."""
        assert [s[11:16] for s in nxt("5-5 9 * * *", "UTC", "2026-01-01T00:00Z", 2)] == [
            "09:05", "09:05"]

    def test_value_slash_step_means_value_to_max(self) -> None:
        """5/15 means 5-59/15."""
        assert [s[14:16] for s in nxt("5/15 * * * *", "UTC", "2026-01-01T00:00Z", 5)] == [
            "05", "20", "35", "50", "05",
        ]

    def test_weekday_slots_after_an_outage(self) -> None:
        """30 6-16/4 * * 1-5: after Thursday 14:30 come Friday's three and Monday 06:30."""
        assert [s[:17] for s in nxt("30 6-16/4 * * 1-5", "UTC", "2023-06-15T14:30Z", 4)] == [
            "2023-06-16T06:30Z", "2023-06-16T10:30Z", "2023-06-16T14:30Z", "2023-06-19T06:30Z",
        ]


class TestValidation:
    """Expressions are validated at proposal, with the field named."""

    @pytest.mark.parametrize("expr", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"])
    def test_expressions_that_never_fire_are_rejected(self, expr: str) -> None:
        """croniter only fails when iterated; we reject at parse time."""
        with pytest.raises(NoOccurrenceError) as info:
            CronExpression.parse(expr)
        assert info.value.field == "trigger.expr"

    def test_february_29_is_accepted(self) -> None:
        """0 0 29 2 * fires in leap years; its next occurrence after 2097 is 2104."""
        assert nxt("0 0 29 2 *", "UTC", "2097-01-01T00:00Z", 1) == [
            "2104-02-29T00:00Z 2104-02-29T00:00:00+00:00"
        ]

    def test_or_semantics_rescues_an_impossible_day(self) -> None:
        """0 0 31 2 1 fires on Mondays in February (OR), so it is accepted."""
        assert nxt("0 0 31 2 1", "UTC", "2026-01-01T00:00Z", 1) == [
            "2026-02-02T00:00Z 2026-02-02T00:00:00+00:00"
        ]

    @pytest.mark.parametrize(
        ("expr", "words"),
        [
            ("0 9 * *", "has 4 fields"),
            ("0 0 9 * * 1", "has 6 fields"),
            ("@daily", "has 1 field;"),
            ("0 9 L * *", "extensions"),
            ("0 9 * * 1#2", "extensions"),
            ("H 9 * * *", "extensions"),
            ("60 9 * * *", "not a valid cron expression"),
            ("0 24 * * *", "not a valid cron expression"),
            ("5-1 * * * *", "reversed range"),
            ("0 9 * * fri-mon", "reversed range"),
            ("*/0 * * * *", "not a valid cron expression"),
        ],
    )
    def test_bad_expressions_name_the_problem(self, expr: str, words: str) -> None:
        """Each bad expression gets a SpecError on trigger.expr with a fix."""
        with pytest.raises(SpecError) as info:
            CronExpression.parse(expr)
        assert info.value.field == "trigger.expr"
        assert words in info.value.problem
        assert info.value.fix

    def test_fixed_time_and_wildcard_classification(self) -> None:
        """Wildcard iff the minute or the hour field starts with '*'."""
        fixed = ["30 2 * * *", "0 1,13 * * *", "0 1-23/2 * * *"]
        wild = ["0 * * * *", "*/15 1 * * *", "0 */3 * * *"]
        assert [CronExpression.parse(e).fixed_time for e in fixed] == [True] * 3
        assert [CronExpression.parse(e).fixed_time for e in wild] == [False] * 3

    def test_missing_zone_is_an_error(self) -> None:
        """A cron without a zone is rejected."""
        with pytest.raises(SpecError) as info:
            CronSchedule("0 9 * * 1", "")
        assert info.value.field == "trigger.zone"


class TestNonAdvancingGuard:
    """A computation that repeats an instant raises instead of looping."""

    def test_repeated_instant_raises(self) -> None:
        """Two firing slots at the same instant are a bug, not a loop."""
        instant = at("2026-01-01T00:00Z")
        twice = iter([Slot("a", instant, "UTC", instant.replace(tzinfo=None)),
                      Slot("b", instant, "UTC", instant.replace(tzinfo=None))])
        emitted = _emit_after(twice, at("2025-12-31T00:00Z"))
        assert next(emitted).key == "a"
        with pytest.raises(NonAdvancingScheduleError):
            next(emitted)
