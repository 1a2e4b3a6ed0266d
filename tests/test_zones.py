"""Which zone names a new spec may use (check_zone), and that a stored spec keeps
loading whatever zone it was confirmed with."""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime

import pytest

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._specs import spec_from_json
from watchkeeper.runtime.usecases import add_user
from watchkeeper.triggers import SpecError, check_zone, parse_spec

CRON_CET = {"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1", "zone": "CET"}}


@pytest.mark.parametrize(("name", "problem", "fix"), [
    ("CET", "'CET' is an abbreviation or a POSIX rule name, not a place",
     "use 'Europe/Paris' or 'Europe/Berlin': pick the city whose rules you follow."),
    ("EST", "'EST' is an abbreviation", "use 'America/New_York'"),
    ("MST7MDT", "not a place", "use 'America/Denver': pick the city"),
    ("Etc/GMT+5", "'Etc/GMT+5' is a fixed offset, UTC-05:00 all year (tzdata's Etc/GMT signs "
     "are inverted); a fixed offset never follows DST.",
     "use the zone of the city whose clock you mean, e.g. 'America/New_York' or "
     "'America/Bogota', or 'UTC'."),
    ("UTC+1", "'UTC+1' is a fixed offset, UTC+01:00 all year", "e.g. 'Europe/Paris'"),
    ("+05:30", "UTC+05:30 all year", "e.g. 'Asia/Kolkata'"),
    ("GMT", "'GMT' is another name for UTC.", "write 'UTC' (or 'Europe/London'"),
    ("Etc/Zulu", "another name for UTC", "write 'UTC'."),
    ("US/Eastern", "an old alias", "use its current name 'America/New_York'."),
    ("Japan", "an old alias", "use its current name 'Asia/Tokyo'."),
])
def test_non_geographic_names_are_refused_with_the_zone_to_use(name: str, problem: str,
                                                               fix: str) -> None:
    """Abbreviations, fixed offsets, UTC's other names and old aliases are refused,
    each naming the place-based zone to write instead."""
    with pytest.raises(SpecError) as info:
        check_zone(name, "trigger.zone")
    assert info.value.field == "trigger.zone"
    assert info.value.problem.startswith(problem) or problem in info.value.problem
    assert fix in info.value.fix


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Europe/Paris", "Asia/Calcutta",
                                  "America/Argentina/Buenos_Aires", "Antarctica/Troll"])
def test_utc_and_area_location_names_are_accepted(name: str) -> None:
    """UTC and Area/Location names, canonical or a backward link (Asia/Calcutta), load."""
    assert check_zone(name).key == name


def test_a_near_miss_gets_a_suggestion() -> None:
    """'europe/paris' (case) and 'Europe/Pariss' (spelling) suggest 'Europe/Paris'."""
    for name in ("europe/paris", "Europe/Pariss"):
        with pytest.raises(SpecError) as info:
            check_zone(name)
        assert info.value.problem == f"unknown time zone {name!r}."
        assert info.value.fix.startswith("did you mean 'Europe/Paris'? Otherwise use")


def test_every_tz_name_is_accepted_or_refused_with_an_accepted_alternative() -> None:
    """Exhaustively over the tz database: a name is accepted exactly when it is UTC,
    Etc/UTC or Area/Location with a geographic area; every zone a refusal names is
    itself accepted."""
    areas = {"Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia",
             "Europe", "Indian", "Pacific"}
    for name in sorted(zoneinfo.available_timezones() - {"localtime", "posixrules", "Factory"}):
        geographic = "/" in name and name.split("/")[0] in areas
        try:
            check_zone(name)
            accepted = True
        except SpecError as exc:
            accepted = False
            for suggested in re.findall(r"'([A-Za-z_/+-]+)'", exc.fix):
                check_zone(suggested)
        assert accepted == (geographic or name in ("UTC", "Etc/UTC")), name


def test_a_new_spec_may_not_use_cet_in_either_trigger() -> None:
    """cron and at triggers both refuse CET at proposal, naming trigger.zone."""
    at = {"version": 1, "trigger": {"type": "at", "at": "2026-12-02T20:00", "zone": "EST"}}
    for data in (CRON_CET, at):
        with pytest.raises(SpecError) as info:
            parse_spec(data)
        assert info.value.field == "trigger.zone"


def test_a_stored_spec_with_cet_still_loads_and_follows_cet() -> None:
    """A spec confirmed with CET before the rule reads back (stored=True and the store's
    spec_from_json): 09:00 CET on Monday 2026-03-30 is 07:00Z (summer time)."""
    spec = parse_spec(CRON_CET, stored=True)
    stored = spec_from_json("a-cet-spec-hash", spec.to_json())
    assert stored.zone == "CET"
    slot = next(iter(stored.calendar().slots_after(datetime(2026, 3, 29, tzinfo=UTC))))
    assert slot.scheduled_for == datetime(2026, 3, 30, 7, 0, tzinfo=UTC)


@pytest.mark.anyio
async def test_a_user_zone_is_held_to_the_same_rule(db: Database) -> None:
    """users add with zone EST is refused (naming 'zone'); Europe/Paris is accepted."""
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(SpecError) as info:
        await add_user(db, clock, "acme", "alice", zone="EST")
    assert info.value.field == "zone" and "America/New_York" in info.value.fix
    assert await add_user(db, clock, "acme", "alice", zone="Europe/Paris")
    assert await db.pool.fetchval("SELECT zone FROM users WHERE user_id = 'alice'") == \
        "Europe/Paris"
