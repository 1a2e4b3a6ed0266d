"""The spec model: versions, the discriminated trigger, errors naming the field, and a
spec_hash that covers the effective part only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchkeeper.triggers import SpecError, canonical_json, parse_spec

BASE: dict[str, Any] = {"version": 1, "trigger": {"type": "cron", "expr": "0 20 * * 3",
                                                  "zone": "Europe/Paris"}}


def test_descriptive_fields_do_not_change_the_hash() -> None:
    """title and notes are descriptive; the hash is over the effective part."""
    plain = parse_spec(BASE)
    renamed = parse_spec({**BASE, "title": "Holdings", "notes": "for the CFO"})
    assert plain.spec_hash == renamed.spec_hash
    assert parse_spec({**BASE, "instructions": "x"}).spec_hash != plain.spec_hash


def test_equivalent_durations_hash_alike() -> None:
    """600 seconds and PT10M are the same late_grace."""
    a = parse_spec({**BASE, "lateness": {"late_grace": 600}})
    b = parse_spec({**BASE, "lateness": {"late_grace": "PT10M"}})
    assert a.spec_hash == b.spec_hash == parse_spec(BASE).spec_hash


def test_the_hash_is_sha256_of_the_canonical_effective_json() -> None:
    """Recomputed independently from the documented rule."""
    import hashlib

    spec = parse_spec({**BASE, "jitter": 1.5, "limits": {"max_cost_usd": "0.50"}})
    effective = spec.effective()
    assert effective["jitter"] == "1.5" and effective["limits"]["max_cost_usd"] == "0.5"
    assert "title" not in effective
    assert spec.spec_hash == hashlib.sha256(canonical_json(effective).encode()).hexdigest()


def test_round_trip_through_json() -> None:
    """A stored spec reads back to the same hash."""
    spec = parse_spec({**BASE, "ends": {"until": "2027-01-01T00:00:00+01:00", "after": 4}})
    again = parse_spec(spec.to_json())
    assert again == spec and again.spec_hash == spec.spec_hash
    assert again.ends.until == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [({"version": None}, "version", "is missing"),
     ({"version": "1"}, "version", "not a spec version"),
     ({"trigger": {"type": "weekly"}}, "trigger.type", "unknown trigger type 'weekly'"),
     ({"trigger": {"expr": "0 9 * * *"}}, "trigger.type", "is missing"),
     ({"overrun": "sometimes"}, "overrun", "'sometimes' is not allowed"),
     ({"jitter": 7200}, "jitter", "between 0 and 1 hour"),
     ({"limits": {"max_attempts": 0}}, "limits.max_attempts", "0 is less than the minimum 1"),
     ({"ends": {"after": 0}}, "ends.after", "0 is not more than 0"),
     ({"ends": {"until": "2027-01-01T00:00"}}, "ends.until", "no UTC offset"),
     ({"output": {"kind": "artifact"}}, "output", "needs a directory and a type"),
     ({"titel": "typo"}, "titel", "is not a field"),
     ({"trigger": {"type": "at", "at": "2026-10-25T02:30", "zone": "Nowhere/City"}},
      "trigger.zone", "unknown time zone"),
     ({"delivery": [{"channel": "file", "destination": "../escape.jsonl"}]},
      "delivery.0.destination", "not a relative path inside WATCHKEEPER_HOME"),
     ({"delivery": [{"channel": "file", "destination": "/etc/passwd"}]},
      "delivery.0.destination", "not a relative path inside WATCHKEEPER_HOME"),
     ({"output": {"kind": "artifact", "directory": "a/../../b", "type": ".md"}},
      "output.directory", "not a relative path"),
     ({"output": {"kind": "artifact", "directory": "d", "type": "md;rm"}},
      "output.type", "not a file suffix"),
     ({"lateness": {"late_grace": "30m"}}, "lateness.late_grace", "'30m' is not a duration"),
     ({"trigger": {"type": "cron", "exp": "0 9 * * *", "zone": "UTC"}}, "trigger.exp",
      "is not a field"),
     ({"version": True}, "version", "not a spec version"),
     ({"trigger": {"type": "interval", "every": "P1M"}}, "trigger.every", "months or years"),
     ({"lateness": {"late_grace": 3e11}}, "lateness.late_grace", "longer than the maximum"),
     ({"limits": {"deadline": 3e11}}, "limits.deadline", "longer than the maximum"),
     # more seconds than a timedelta holds: still "too long", not "not a duration"
     ({"trigger": {"type": "interval", "every": 1e20}}, "trigger.every",
      "100,000,000,000,000,000,000 s is longer than the maximum of 316,224,000 s (3,660 days)"),
     ({"lateness": {"late_grace": 10**15}}, "lateness.late_grace",
      "1,000,000,000,000,000 s is longer than the maximum of 604,800 s (7 days)"),
     ({"limits": {"max_tasks_per_period": 10**12}}, "limits.max_tasks_per_period",
      "more than the maximum 1000000"),
     ({"trigger": {"type": "interval", "every": 60, "anchor": "0001-01-01T00:00:00Z"}},
      "trigger.anchor", "outside 1970-2200"),
     ({"trigger": {"type": "at", "at": "9999-12-31T23:00", "zone": "UTC"}}, "trigger.at",
      "outside 1970-2200"),
     ({"trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "localtime"}}, "trigger.zone",
      "unknown time zone 'localtime'"),
     ({"instructions": "a\x00b"}, "instructions", "NUL"),
     ({"ends": {"after": True}}, "ends.after", "True is not an integer")],
)
def test_errors_name_the_field(patch: dict[str, Any], field: str, words: str) -> None:
    """Every invalid input raises SpecError with the field path and a fix."""
    data = {**BASE, **patch}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert info.value.field == field
    assert words in info.value.problem
    assert info.value.fix


def test_min_interval_is_a_setting() -> None:
    """A 30 s interval is refused by default and accepted when the minimum is lowered."""
    data = {"version": 1, "trigger": {"type": "interval", "every": 30}}
    with pytest.raises(SpecError):
        parse_spec(data)
    assert parse_spec(data, min_interval=timedelta(seconds=5)).trigger.every == timedelta(seconds=30)


def test_a_repeated_at_time_means_its_first_instant() -> None:
    """02:30 on 2026-10-25 Berlin happens twice; 'at' takes 00:30Z and says so."""
    spec = parse_spec({"version": 1, "trigger": {"type": "at", "at": "2026-10-25T02:30",
                                                 "zone": "Europe/Berlin"}})
    instant, note = spec.trigger.resolve()  # type: ignore[union-attr]
    assert instant == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert note == "02:30 occurs twice in Europe/Berlin; this is the first (+02:00)."


TEXT = st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
               max_size=40)  # storable text: no NUL, no lone surrogate


@given(TEXT, TEXT)
def test_any_descriptive_text_keeps_the_hash(title: str, notes: str) -> None:
    """Property: no title or notes change the effective hash."""
    assert parse_spec({**BASE, "title": title, "notes": notes}).spec_hash == parse_spec(BASE).spec_hash


def test_a_misspelled_field_gets_a_suggestion() -> None:
    """'exp' instead of 'expr' names the misspelling and the likely field."""
    with pytest.raises(SpecError) as info:
        parse_spec({"version": 1, "trigger": {"type": "cron", "exp": "0 9 * * *", "zone": "UTC"}})
    assert info.value.fix == "did you mean 'expr'?"


def test_previews_respect_the_ends() -> None:
    """bounded_calendar stops at ends.until and after ends.after occurrences."""
    import itertools

    after = datetime(2026, 1, 1, tzinfo=UTC)
    spec = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 120},
                       "ends": {"after": 3}})
    assert len(list(itertools.islice(spec.bounded_calendar().slots_after(after), 10))) == 3
    until = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 60},
                        "ends": {"until": "2026-01-01T00:05:00Z"}})
    slots = list(itertools.islice(until.bounded_calendar().slots_after(after), 10))
    assert [s.scheduled_for.minute for s in slots] == [1, 2, 3, 4, 5]


def test_every_example_spec_parses() -> None:
    """The single-spec examples parse as shown in the README (replay files are lists)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "examples"
    specs = [p for p in sorted(root.rglob("*.toml"))
             if "definitions" not in tomllib.loads(p.read_text())]
    assert {p.name for p in specs} >= {"holdings_review.toml", "fund_below_5000.toml"}
    for path in specs:
        data = tomllib.loads(path.read_text())
        if "version" in data:  # weekly_rank_check.toml is a registration file
            parse_spec(data)


THREE_MISTAKES: dict[str, Any] = {
    "version": 1,
    "trigger": {"type": "cron", "expr": "0 9 * * *", "zone": "Mars/Olympus"},
    "lateness": {"policy": "sometimes"},
    "titel": "typo",
}


def test_every_problem_is_reported_at_once() -> None:
    """A bad zone, a bad lateness policy and an unknown field: one error, those three
    fields in the spec's field order, each with its problem and fix."""
    with pytest.raises(SpecError) as info:
        parse_spec(THREE_MISTAKES)
    error = info.value
    assert [p.field for p in error.problems] == ["trigger.zone", "lateness.policy", "titel"]
    assert [p.problem for p in error.problems] == [
        "unknown time zone 'Mars/Olympus'.", "'sometimes' is not allowed.",
        "is not a field of this spec.",
    ]
    assert error.problems[1].fix == "use 'skip_expired', 'catch_up_once' or 'review_late'."
    assert (error.field, error.problem, error.fix) == (
        error.problems[0].field, error.problems[0].problem, error.problems[0].fix)


def problems_of(data: dict[str, Any]) -> list[str]:
    """The fields of the problems parse_spec reports for ``data``, in order."""
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return [p.field for p in info.value.problems]


def test_the_problem_order_is_stable() -> None:
    """The same mistakes in another key order (unknown fields too) are reported in the
    same order: the model's field order, unknown fields by name."""
    ordered = {**THREE_MISTAKES, "aaa": 1, "zzz": 2}
    shuffled = {"zzz": 2, "titel": "typo", "lateness": {"policy": "sometimes"},
                "trigger": THREE_MISTAKES["trigger"], "aaa": 1, "version": 1}
    assert problems_of(ordered) == problems_of(shuffled) == [
        "trigger.zone", "lateness.policy", "aaa", "titel", "zzz"]


def test_the_message_lists_every_problem_one_per_line() -> None:
    """str() gives a count, then one line per problem: field, problem, 'Fix:', fix."""
    with pytest.raises(SpecError) as info:
        parse_spec(THREE_MISTAKES)
    lines = str(info.value).splitlines()
    assert lines[0] == "3 problems:"
    assert lines[2] == ("- lateness.policy: 'sometimes' is not allowed. "
                        "Fix: use 'skip_expired', 'catch_up_once' or 'review_late'.")
    assert [line.split(":")[0] for line in lines[1:]] == ["- trigger.zone", "- lateness.policy",
                                                          "- titel"]
    assert all(". Fix: " in line for line in lines[1:])


def test_to_json_is_a_list_of_field_message_fix() -> None:
    """to_json() is the RFC 9457 'errors' list: {field, message, fix} per problem."""
    with pytest.raises(SpecError) as info:
        parse_spec(THREE_MISTAKES)
    assert info.value.to_json()[2] == {
        "field": "titel", "message": "is not a field of this spec.",
        "fix": "did you mean 'title'?"}
    assert [set(item) for item in info.value.to_json()] == [{"field", "message", "fix"}] * 3


def test_one_problem_keeps_the_one_line_message() -> None:
    """A single problem reads as before: 'field: problem Fix: fix', no count."""
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "overrun": "sometimes"})
    assert str(info.value) == ("overrun: 'sometimes' is not allowed. Fix: use 'skip', "
                               "'queue_one', 'allow' or 'cancel_previous'.")
    assert len(info.value.problems) == 1


def test_a_problem_without_a_full_stop_gets_one_before_fix() -> None:
    """'Fix:' always starts a new sentence, whatever the problem text ends with."""
    assert str(SpecError("x", "is wrong", "do y.")) == "x: is wrong. Fix: do y."


def test_checks_inside_one_table_are_collected_too() -> None:
    """Two bad deliveries, a bad artifact directory and suffix, and a NUL: every one,
    each delivery named by its index."""
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, "instructions": "a\x00b",
                    "delivery": [{"channel": "webhook", "destination": "a b"},
                                 {"channel": "file"}],
                    "output": {"kind": "artifact", "directory": "/x", "type": "md;"}})
    assert [p.field for p in info.value.problems] == [
        "instructions", "delivery.0.destination", "delivery.1.destination",
        "output.directory", "output.type"]


def test_every_bad_cron_field_is_named() -> None:
    """An hour 'L' and a day-of-week '5#2' are two problems of trigger.expr."""
    with pytest.raises(SpecError) as info:
        parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "0 L * * 5#2",
                                              "zone": "UTC"}})
    assert [(p.field, p.problem.split("'")[1]) for p in info.value.problems] == [
        ("trigger.expr", "L"), ("trigger.expr", "5#2")]


def test_every_bad_comparison_of_a_predicate_is_named() -> None:
    """An unknown unit, a bare threshold against percent and a month freshness, in three
    comparisons: three problems, each at its comparison's index (no echo of the list)."""
    predicate = {"all": [{"subject": "a", "op": "<", "threshold": "5 blorbs"},
                         {"subject": "b", "op": "<", "threshold": "5", "unit": "percent"},
                         {"subject": "c", "op": "<", "threshold": "5 USD", "freshness": "P1M"}]}
    with pytest.raises(SpecError) as info:
        parse_spec({"version": 1, "trigger": {
            "type": "condition", "mode": "every_edge", "source": {"name": "s", "version": "1"},
            "poll_every": 60, "predicate": predicate}})
    assert [p.field for p in info.value.problems] == [
        "trigger.predicate.all.0.threshold", "trigger.predicate.all.1.threshold",
        "trigger.predicate.all.2.freshness"]


def test_a_misspelling_is_not_also_reported_missing() -> None:
    """'exp' for 'expr' is one problem (with the suggestion), beside the others."""
    with pytest.raises(SpecError) as info:
        parse_spec({"version": 1, "trigger": {"type": "cron", "exp": "0 9 * * *",
                                              "zone": "UTC"}, "jitter": 7200})
    assert [(p.field, p.fix) for p in info.value.problems] == [
        ("trigger.exp", "did you mean 'expr'?"), ("jitter", "e.g. jitter = 'PT30S'.")]


def test_a_spec_error_survives_pickling() -> None:
    """Every problem, and the class, come back from pickle (errors cross processes)."""
    import pickle

    with pytest.raises(SpecError) as info:
        parse_spec(THREE_MISTAKES)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is SpecError and again.problems == info.value.problems


@pytest.mark.parametrize(("key", "meant"), [("limts", "limits"), ("delivry", "delivery"),
                                            ("instructons", "instructions")])
def test_a_misspelled_optional_top_level_key_gets_its_likely_name(key: str, meant: str) -> None:
    """An unknown top-level key close to an optional field of the spec names that field."""
    with pytest.raises(SpecError) as info:
        parse_spec({"version": 1, "trigger": {"type": "interval", "every": 3600}, key: {}})
    assert (info.value.field, info.value.fix) == (key, f"did you mean {meant!r}?")
