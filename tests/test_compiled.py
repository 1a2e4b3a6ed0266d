"""The tick's fast decoder of stored specs agrees with the full parser.

The road a tick takes: ``compile_spec`` at proposal, ``to_json`` into the store, JSON
text back, ``CompiledSpec.from_json`` with no validation. The road it no longer takes:
``parse_spec`` of the stored spec (``stored=True``) and the general enumeration of its
calendar (``due_window``). On every example spec and on generated ones (hypothesis)
both roads give the same admission fields and the same windows, slot by slot.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from watchkeeper.runtime.usecases._replay import load_replay_definitions
from watchkeeper.runtime.usecases._specfile import load_registrations, load_spec
from watchkeeper.triggers import (
    COMPILED_VERSION,
    DEFAULT_MIN_INTERVAL,
    CompiledSpec,
    Spec,
    SpecError,
    due_window,
    parse_spec,
    user_payload,
)

EXAMPLES = sorted(Path(__file__).parents[1].joinpath("examples").rglob("*.toml"))
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Antarctica/Troll",
         "America/Santiago", "Asia/Beirut", "Pacific/Apia", "UTC", "Asia/Kolkata",
         "America/Sao_Paulo", "Pacific/Chatham"]


def stored_road(spec: Spec) -> CompiledSpec:
    """What a tick decodes: compiled at proposal, stored as JSON, read back unvalidated."""
    compiled = CompiledSpec.from_json(json.dumps(spec.compiled.to_json()))
    assert compiled is not None
    return compiled


def full_road(spec: Spec) -> Spec:
    """The full parser, as a stored spec is read back (``stored=True``)."""
    stored = json.loads(json.dumps(spec.to_json()))
    return parse_spec(stored, min_interval=timedelta(0), stored=True)


def assert_agree(proposed: Spec, instants: list[datetime]) -> None:
    """Both roads give the same fields and, at each pair of instants, the same window
    (the full road's from the general enumeration of its trigger's calendar)."""
    fast, spec = stored_road(proposed), full_road(proposed)
    assert fast.to_json() == spec.compiled.to_json()
    assert (fast.trigger, fast.until, fast.after) == (spec.trigger.type, spec.ends.until,
                                                      spec.ends.after)
    assert (fast.jitter, fast.late_policy, fast.late_grace, fast.overrun, fast.zone) == (
        spec.jitter, spec.lateness.policy, spec.lateness.late_grace, spec.overrun, spec.zone)
    assert (fast.deadline, fast.max_attempts, fast.task_limit, fast.period) == (
        spec.limits.deadline, spec.limits.max_attempts, spec.limits.max_tasks_per_period,
        spec.limits.period)
    calendar = spec.trigger.calendar()  # the general enumeration, no compiled data
    for cursor, now in itertools.pairwise(instants):
        assert fast.window(cursor, now) == due_window(calendar, cursor, now,
                                                      until=spec.ends.until,
                                                      remaining=spec.ends.after)


def example_specs(path: Path) -> list[Spec]:
    """The specs of an example file: a spec, operator registrations or replay definitions."""
    data = tomllib.loads(path.read_text())
    if "definitions" not in data:
        return [load_spec(path, min_interval=DEFAULT_MIN_INTERVAL)]
    if any("cron" in d or "every" in d for d in data["definitions"]):
        return [d.spec() for d in load_registrations(path, min_interval=DEFAULT_MIN_INTERVAL)]
    return [d.spec for d in load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)]


def walk(start: datetime, steps: list[int]) -> list[datetime]:
    """Instants from ``start``, each ``steps[i]`` seconds after the last."""
    out = [start]
    for seconds in steps:
        out.append(out[-1] + timedelta(seconds=seconds))
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_spec_decodes_as_the_parser_reads_it(path: Path) -> None:
    """Each shipped example: same fields, same windows over a year of ticks."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    specs = example_specs(path)
    assert specs
    for spec in specs:
        assert_agree(spec, walk(start, [3_600 * 7 + 1] * 1200))


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid-looking spec data over every trigger type and policy (invalid ones are
    discarded by the test)."""
    kind = draw(st.sampled_from(["cron", "cron", "cron", "interval", "at"]))
    if kind == "cron":
        fields = [draw(st.sampled_from(choices)) for choices in (
            ["0", "30", "*/15", "0,30", "5-7", "*", "59"], ["*", "0", "1", "2", "9,17", "*/6"],
            ["*", "*", "1", "15", "29", "*/10"], ["*", "*", "3", "10", "2-4"],
            ["*", "*", "1-5", "0", "6,0"])]
        trigger: dict[str, Any] = {"type": "cron", "expr": " ".join(fields),
                                   "zone": draw(st.sampled_from(ZONES)),
                                   "dst_gap": draw(st.sampled_from(["skip", "run_after"]))}
    elif kind == "interval":
        trigger = {"type": "interval", "every": draw(st.sampled_from([60, 90, 3600, 86_400 * 3])),
                   "anchor": draw(st.sampled_from(["1970-01-01T00:00:00Z",
                                                   "2026-03-08T06:59:30Z"]))}
    else:
        trigger = {"type": "at", "zone": draw(st.sampled_from(ZONES)),
                   "at": draw(st.sampled_from(["2026-03-29T02:30:00", "2026-10-25T02:30:00",
                                               "2026-07-01T12:00:00", "2026-11-01T01:30:00"]))}
    data: dict[str, Any] = {"version": 1, "trigger": trigger,
                            "instructions": draw(st.text(max_size=20)),
                            "lateness": {"policy": draw(st.sampled_from(
                                ["skip_expired", "catch_up_once", "review_late"])),
                                "late_grace": draw(st.sampled_from([0, 30, 600, 0.25]))},
                            "overrun": draw(st.sampled_from(["skip", "queue_one", "allow",
                                                             "cancel_previous"])),
                            "jitter": draw(st.sampled_from([0, 0, 1.5, 900])),
                            "limits": {"deadline": draw(st.sampled_from([60, 600, 0.5])),
                                       "max_attempts": draw(st.integers(1, 5)),
                                       "period": draw(st.sampled_from(["day", "week", "month"]))}}
    if draw(st.booleans()):
        data["limits"]["max_tasks_per_period"] = draw(st.integers(0, 9))
    if draw(st.booleans()):
        data["ends"] = {"after": draw(st.integers(1, 40))}
    elif draw(st.booleans()):
        data["ends"] = {"until": draw(st.sampled_from(["2026-04-01T00:00:00Z",
                                                       "2026-11-01T06:30:00Z"]))}
    return data


@settings(max_examples=300, deadline=None)
@given(specs(), st.lists(st.integers(1, 40 * 86_400), min_size=1, max_size=40),
       st.integers(0, 330 * 86_400))
def test_generated_specs_decode_as_the_parser_reads_them(data: dict[str, Any], steps: list[int],
                                                         offset: int) -> None:
    """Any valid spec: same fields, and the same window at every tick of a random walk."""
    try:
        spec = parse_spec(data)
    except SpecError:
        assume(False)
    assert_agree(spec, walk(datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=offset), steps))


def test_the_payload_is_what_a_task_of_the_spec_carries() -> None:
    """user_payload holds the spec's agent, instructions, params, deliveries and audiences."""
    spec = parse_spec({"version": 1, "trigger": {"type": "cron", "expr": "0 9 * * *",
                                                 "zone": "UTC"},
                       "instructions": "Look.", "agent": {"name": "digest", "params": {"k": [1]}},
                       "audiences": ["research"],
                       "delivery": [{"channel": "file", "destination": "n.jsonl"}]})
    assert user_payload(spec) == {
        "agent": "digest", "message": "Look.", "params": {"k": [1]},
        "delivery": [{"channel": "file", "destination": "n.jsonl"}], "audiences": ["research"]}


def test_data_of_another_layout_is_not_read() -> None:
    """Another version (or the object layout of an older build) reads as None: compile
    the spec again."""
    data = parse_spec({"version": 1, "trigger": {"type": "interval", "every": 60}}).compiled.to_json()
    assert CompiledSpec.from_json(json.dumps(data)) is not None
    assert CompiledSpec.from_json(json.dumps([COMPILED_VERSION + 1, *data[1:]])) is None
    assert CompiledSpec.from_json(json.dumps({"version": 1, "trigger": {}})) is None
