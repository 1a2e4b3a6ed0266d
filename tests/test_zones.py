"""Which zone names a new spec may use (resolve_zone, check_zone) and the name stored
for each, the warnings the answer and the preview carry, and that a stored spec keeps
loading whatever zone it was confirmed with (issue 19, item 9)."""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _api import serving
from hypothesis import given, settings
from hypothesis import strategies as st

from watchkeeper.runtime.engine._clock import FakeClock
from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.store._specs import spec_from_json
from watchkeeper.runtime.usecases import add_user, create_key
from watchkeeper.triggers import SpecError, ZoneKind, check_zone, parse_spec, resolve_zone
from watchkeeper.triggers._zones import _tz_text

CRON_CET = {"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1", "zone": "CET"}}


@pytest.mark.parametrize(("name", "problem", "fix"), [
    ("CET", "'CET' is an abbreviation or a POSIX rule name, not a place",
     "use 'Europe/Paris' or 'Europe/Berlin': pick the city whose rules you follow."),
    ("EST", "'EST' is an abbreviation", "use 'America/New_York'"),
    ("MST7MDT", "not a place", "use 'America/Denver': pick the city"),
    ("UTC+1", "'UTC+1' is a fixed offset, UTC+01:00 all year, and not a tz database name",
     "e.g. 'Europe/Paris' or 'Africa/Lagos', or 'UTC'; to keep UTC+01:00 all year on "
     "purpose, write 'Etc/GMT-1' (tzdata's Etc/GMT signs are inverted)."),
    ("+05:30", "UTC+05:30 all year", "e.g. 'Asia/Kolkata'"),
    ("Etc/GMT+13", "UTC-13:00 all year (tzdata's Etc/GMT signs are inverted), and not a tz "
     "database name", "or 'UTC'."),
    ("GMT", "'GMT' is another name for UTC.", "write 'UTC' (or 'Europe/London'"),
    ("Etc/Zulu", "another name for UTC", "write 'UTC'."),
    ("Zulu", "another name for UTC", "write 'UTC'."),
])
def test_non_geographic_names_are_refused_with_the_zone_to_use(name: str, problem: str,
                                                               fix: str) -> None:
    """Abbreviations, rule zones, offsets that are not tz database zones and UTC's other
    names are refused, each naming the place-based zone to write instead."""
    with pytest.raises(SpecError) as info:
        check_zone(name, "trigger.zone")
    assert info.value.field == "trigger.zone"
    assert info.value.problem.startswith(problem) or problem in info.value.problem
    assert fix in info.value.fix


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Europe/Paris", "Europe/Amsterdam",
                                  "America/Argentina/Buenos_Aires", "Antarctica/Troll"])
def test_utc_and_area_location_names_are_accepted_as_written(name: str) -> None:
    """UTC and canonical Area/Location names load under their own name, with no warning;
    so does a zone.tab name that tzdata links to another country's zone (Amsterdam)."""
    assert check_zone(name).key == name
    assert resolve_zone(name).warning() is None


@pytest.mark.parametrize(("name", "stored"), [
    ("US/Eastern", "America/New_York"), ("US/Pacific", "America/Los_Angeles"),
    ("US/Central", "America/Chicago"), ("Asia/Calcutta", "Asia/Kolkata"),
    ("Europe/Kiev", "Europe/Kyiv"), ("Japan", "Asia/Tokyo"),
])
def test_a_link_naming_a_place_is_stored_under_its_zone(name: str, stored: str) -> None:
    """A backward link is accepted, the spec holds the zone it links to, and the spec's
    warning says so ("US/Eastern is stored as America/New_York")."""
    spec = parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1",
                                                 "zone": name}})
    assert spec.trigger.zone == stored and spec.effective()["trigger"]["zone"] == stored
    assert [(w.field, w.message.split(":")[0]) for w in spec.warnings] == [
        ("trigger.zone", f"{name} is stored as {stored}")]
    at = parse_spec({"version": 1, "trigger": {"type": "at", "at": "2027-01-04T09:00",
                                               "zone": name}})
    assert at.trigger.zone == stored and len(at.warnings) == 1


def test_a_link_and_its_zone_have_the_same_hash() -> None:
    """US/Eastern and America/New_York propose the same effective spec (one hash)."""
    specs = [parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1",
                                                   "zone": z}})
             for z in ("US/Eastern", "America/New_York")]
    assert specs[0].spec_hash == specs[1].spec_hash and specs[1].warnings == ()


def test_a_fixed_offset_is_accepted_with_a_warning_and_never_follows_dst() -> None:
    """Etc/GMT+7 is UTC-07:00 all year: 09:00 daily is 16:00Z in January and in July
    (Denver's 09:00 is 16:00Z in January, 15:00Z in July), and the warning says so."""
    spec = parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * *",
                                                 "zone": "Etc/GMT+7"}})
    assert spec.trigger.zone == "Etc/GMT+7"
    (warning,) = spec.warnings
    assert warning.field == "trigger.zone"
    assert warning.message.startswith("Etc/GMT+7 is a fixed offset, UTC-07:00 all year")
    assert "never follow DST" in warning.message and "'America/Denver'" in warning.message
    for month, expected in ((1, "2027-01-05T16:00:00+00:00"), (7, "2027-07-05T16:00:00+00:00")):
        slot = next(iter(spec.calendar().slots_after(datetime(2027, month, 5, tzinfo=UTC))))
        assert slot.scheduled_for.isoformat() == expected


def test_a_near_miss_gets_a_suggestion() -> None:
    """'europe/paris' (case) and 'Europe/Pariss' (spelling) suggest 'Europe/Paris'."""
    for name in ("europe/paris", "Europe/Pariss"):
        with pytest.raises(SpecError) as info:
            check_zone(name)
        assert info.value.problem == f"unknown time zone {name!r}."
        assert info.value.fix.startswith("did you mean 'Europe/Paris'? Otherwise use")


AREAS = {"Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia",
         "Europe", "Indian", "Pacific"}
RULE_ZONES = {"CET", "CST6CDT", "EET", "EST", "EST5EDT", "HST", "MET", "MST", "MST7MDT",
              "PST8PDT", "WET"}
TZ_NAMES = sorted(zoneinfo.available_timezones() - {"localtime", "posixrules", "Factory"})


def _links() -> dict[str, str]:
    """The tz database's links, read here with a regular expression over tzdata.zi."""
    return {m.group(2): m.group(1)
            for m in re.finditer(r"^L (\S+) (\S+)$", _tz_text("tzdata.zi"), re.MULTILINE)}


LINKS = _links()


def test_every_tz_name_is_accepted_or_refused_with_an_accepted_alternative() -> None:
    """Exhaustively over the tz database: a name is refused exactly when it is an
    abbreviation or rule zone, another name of UTC (a link to Etc/UTC or Etc/GMT, or
    Etc/GMT+0) or neither a place, a link to a place nor a whole-hour Etc/GMT offset;
    every zone a refusal names is itself accepted as written."""
    assert {"US/Eastern", "Asia/Calcutta", "Europe/Kiev"} <= set(LINKS)
    for name in TZ_NAMES:
        target = LINKS.get(name, name)
        utc_alias = target in ("Etc/UTC", "Etc/GMT") and name not in ("UTC", "Etc/UTC")
        place = (name.split("/")[0] in AREAS or target.split("/")[0] in AREAS) and "/" in (
            target if name not in LINKS or "/" not in name else name)
        etc = re.fullmatch(r"Etc/GMT[+-]([1-9]|1[0-4])", name) is not None
        expected = not (name in RULE_ZONES or utc_alias) and (
            place or etc or name in ("UTC", "Etc/UTC"))
        try:
            check_zone(name)
            accepted = True
        except SpecError as exc:
            accepted = False
            for suggested in re.findall(r"'([A-Za-z_/+-]+)'", exc.fix):
                assert resolve_zone(suggested).name == suggested, (name, suggested)
        assert accepted == expected, name


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(TZ_NAMES),
       when=st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2037, 12, 31),
                         timezones=st.just(UTC)))
def test_an_accepted_name_keeps_its_clock_under_the_name_stored(name: str,
                                                                when: datetime) -> None:
    """Whatever accepted name was written, the zone stored reads every instant from 1970
    to 2037 with the same UTC offset and abbreviation as the name written; the stored
    name is stored as itself, with no warning unless it is a fixed offset."""
    try:
        choice = resolve_zone(name)
    except SpecError:
        return
    written, stored = zoneinfo.ZoneInfo(name), zoneinfo.ZoneInfo(choice.name)
    assert when.astimezone(written).utcoffset() == when.astimezone(stored).utcoffset()
    assert when.astimezone(written).tzname() == when.astimezone(stored).tzname()
    again = resolve_zone(choice.name)
    assert again.name == choice.name and again.kind is not ZoneKind.LINK
    assert (choice.kind is ZoneKind.LINK) == (choice.name != name)
    assert (again.warning() is None) == (again.kind is not ZoneKind.FIXED_OFFSET)


@settings(max_examples=200, deadline=None)
@given(hours=st.integers(-12, 14).filter(bool), hour=st.integers(0, 23),
       minute=st.integers(0, 59), day=st.dates(min_value=datetime(1971, 1, 1).date(),
                                               max_value=datetime(2099, 12, 1).date()))
def test_a_fixed_offset_fires_at_the_same_utc_time_every_day_of_the_year(
        hours: int, hour: int, minute: int, day: object) -> None:
    """Etc/GMT-N is UTC+N all year (the sign inverted): a daily hh:mm there fires at
    hh:mm - N h UTC on any date, and the warning names the offset with the right sign."""
    name = f"Etc/GMT{'-' if hours > 0 else '+'}{abs(hours)}"
    choice = resolve_zone(name)
    assert choice.kind is ZoneKind.FIXED_OFFSET and choice.offset_minutes == hours * 60
    warning = choice.warning()
    assert warning is not None
    assert f"UTC{'+' if hours > 0 else '-'}{abs(hours):02d}:00 all year" in warning.message
    spec = parse_spec({"version": 1, "trigger": {"type": "cron", "expr": f"{minute} {hour} * * *",
                                                 "zone": name}})
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)  # type: ignore[attr-defined]
    local = datetime(day.year, day.month, day.day, hour, minute,  # type: ignore[attr-defined]
                     tzinfo=UTC)
    wanted = local - timedelta(hours=hours)  # the first one strictly after midnight UTC
    wanted += timedelta(days=-1 if wanted > start + timedelta(days=1) else
                        1 if wanted <= start else 0)
    slot = next(iter(spec.calendar().slots_after(start)))
    assert slot.scheduled_for == wanted


@pytest.mark.parametrize("name", sorted(RULE_ZONES))
def test_abbreviations_and_rule_zones_stay_refused_with_a_place(name: str) -> None:
    """EST, CET, MST7MDT and the other rule zones are refused (links to a city since
    tzdata 2024b, never stored as one), each fix naming a place accepted as written."""
    with pytest.raises(SpecError) as info:
        resolve_zone(name, "trigger.zone")
    assert "not a place" in info.value.problem
    places = re.findall(r"'([A-Za-z_/]+)'", info.value.fix)
    assert places and all(resolve_zone(p).kind is ZoneKind.PLACE for p in places)


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
    """users add with zone EST is refused (naming 'zone'); Europe/Paris is accepted, and
    US/Pacific is stored as America/Los_Angeles."""
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(SpecError) as info:
        await add_user(db, clock, "acme", "alice", zone="EST")
    assert info.value.field == "zone" and "America/New_York" in info.value.fix
    assert await add_user(db, clock, "acme", "alice", zone="Europe/Paris")
    assert await add_user(db, clock, "acme", "bob", zone="US/Pacific")
    assert dict(await db.pool.fetch("SELECT user_id, zone FROM users")) == {
        "alice": "Europe/Paris", "bob": "America/Los_Angeles"}


@pytest.mark.anyio
async def test_the_proposal_answer_and_the_preview_say_what_is_stored(
        db: Database, tmp_path: Path) -> None:
    """Over the HTTP API: proposing US/Eastern answers 201 with the effective zone
    America/New_York, a warning and a summary saying "US/Eastern is stored as
    America/New_York", and stores America/New_York; previewing Etc/GMT+7 answers the
    fixed-offset warning and 16:00Z for 09:00 on 2027-07-05 (Denver would be 15:00Z)."""
    clock = FakeClock(datetime(2027, 7, 1, tzinfo=UTC))
    await add_user(db, clock, "acme", "alice")
    agent = (await create_key(db, clock, "agent", tenant_id="acme", name="chat")).token
    spec = {"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * 1", "zone": "US/Eastern"}}
    async with serving(db, clock, tmp_path) as api:
        made = await api.call("POST", "/v1/definitions/d/revisions", agent,
                              body={"spec": spec, "owner": "alice"})
        fixed = await api.call("POST", "/v1/previews", agent, body={
            "spec": {**spec, "trigger": {"type": "cron", "expr": "0 9 * * *",
                                         "zone": "Etc/GMT+7"}},
            "after": "2027-07-05T00:00:00Z", "count": 1})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["effective"]["trigger"]["zone"] == "America/New_York"
    assert [w["field"] for w in body["warnings"]] == ["trigger.zone"]
    assert body["warnings"][0]["message"].startswith("US/Eastern is stored as America/New_York")
    assert "US/Eastern is stored as America/New_York" in body["summary"]
    assert body["next"][0]["local"] == "2027-07-05T09:00:00-04:00"
    assert await db.pool.fetchval(
        "SELECT spec->'trigger'->>'zone' FROM definition_revisions") == "America/New_York"
    assert fixed.status_code == 200, fixed.text
    preview = fixed.json()
    assert preview["next"][0]["scheduled_for"].startswith("2027-07-05T16:00:00")
    assert "never follow DST" in preview["warnings"][0]["message"]
    assert "never follow DST" in preview["summary"]


def test_a_supervisor_preloads_every_zone_a_stored_schedule_can_name() -> None:
    """preload_zones (run as a supervisor starts) loads each zone of the tz database but
    the host-specific ones, once: afterwards every stored schedule's zone is served from
    memory, the same object each time, equal to zoneinfo's own."""
    from watchkeeper.triggers import _cron, preload_zones

    expected = (zoneinfo.available_timezones() - {"localtime", "posixrules", "Factory"}) | {"UTC"}
    assert preload_zones() == len(_cron._ZONES) >= len(expected) > 500
    assert expected <= set(_cron._ZONES)
    for name in ("Europe/Paris", "Asia/Kathmandu", "America/St_Johns", "UTC"):
        zone = _cron.stored_zone(name)
        assert zone is _cron._ZONES[name] and zone == zoneinfo.ZoneInfo(name)
        assert datetime(2026, 7, 1, tzinfo=zone).utcoffset() == \
            datetime(2026, 7, 1, tzinfo=zoneinfo.ZoneInfo(name)).utcoffset()


def _walked_tz_names(tmp_path: Path) -> set[str]:
    """Names of a made-up tz directory, for the cases the host's may not have."""
    (tmp_path / "Area").mkdir()
    (tmp_path / "Area" / "Town").write_bytes(b"TZif2...")
    (tmp_path / "Area" / "Notes").write_bytes(b"# not a zone")
    (tmp_path / "right").mkdir()
    (tmp_path / "right" / "Leap").write_bytes(b"TZif2...")
    (tmp_path / "Linked").symlink_to(tmp_path / "Area", target_is_directory=True)
    (tmp_path / "Alias").symlink_to(tmp_path / "Area" / "Town")
    return {"Area/Town", "Area/Notes", "right/Leap", "Linked/Town", "Alias", "Area",
            "Area/../Area/Town", "./Alias", "Area//Town", "/Area/Town", "Area/Town/"}


def test_a_zone_is_known_exactly_when_the_full_listing_has_it(
        tmp_path: Path) -> None:
    """is_known_zone (one file opened) agrees with zoneinfo.available_timezones (every
    file opened, less the host-specific names) on every name the host's tz database and
    the tzdata package hold, on file names that are not zones, and on paths a walk of
    the directory would not produce (right/, a symlinked directory, '..', '//')."""
    from watchkeeper.triggers._zones import _known_zones, is_known_zone

    listed = zoneinfo.available_timezones()
    odd = {"localtime", "posixrules", "Factory", "zone.tab", "tzdata.zi", "leapseconds",
           "iso3166.tab", "posix/Europe/Paris", "right/Europe/Paris", "Europe", "",
           "Europe/Paris/", "Europe//Paris", "../zoneinfo/UTC", "Europe/Paris\0", "Mars/Base",
           "europe/paris", "EUROPE/PARIS", "America/new_york"}
    for name in listed | odd:
        assert is_known_zone(name) == (name in _known_zones()), name
    assert is_known_zone("Europe/Paris") and not is_known_zone("posixrules")
    # a tz directory of its own, where the host's may lack the odd cases
    names = _walked_tz_names(tmp_path)
    zoneinfo.reset_tzpath([str(tmp_path)])
    is_known_zone.cache_clear()
    try:
        walked = zoneinfo.available_timezones()
        for name in names:
            assert is_known_zone(name) == (name in walked), name
        assert {"Area/Town", "Alias"} <= walked and "Linked/Town" not in walked
    finally:
        zoneinfo.reset_tzpath()
        is_known_zone.cache_clear()
