"""The pure core of conditional triggers (``triggers``): Kleene three-valued logic,
predicates over observations, units with pint, and the firstMatch / everyEdge state
machine. Hypothesis for the laws; the cases from public bug reports as fixed tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchkeeper.triggers import (
    ConditionMode,
    ConditionState,
    EdgeAction,
    Observation,
    ObservationStatus,
    SpecError,
    Verdict,
    evaluate,
    not_admitted,
    parse_spec,
    step,
)
from watchkeeper.triggers._conditions import Comparison

T, F, U = Verdict.TRUE, Verdict.FALSE, Verdict.UNKNOWN
verdicts = st.sampled_from([T, F, U])
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
EVERY = ConditionMode.EVERY_EDGE
FIRST = ConditionMode.FIRST_MATCH

# ------------------------------------------------------------------ Kleene logic

# Kleene's strong logic as the truth order F < U < T: and = min, or = max, not = mirror.
RANK = {F: 0, U: 1, T: 2}
BY_RANK = {v: k for k, v in RANK.items()}


@given(verdicts, verdicts)
def test_and_or_are_min_max_in_the_truth_order(a: Verdict, b: Verdict) -> None:
    assert a & b is BY_RANK[min(RANK[a], RANK[b])]
    assert a | b is BY_RANK[max(RANK[a], RANK[b])]
    assert ~a is BY_RANK[2 - RANK[a]]


@given(verdicts, verdicts, verdicts)
def test_kleene_laws(a: Verdict, b: Verdict, c: Verdict) -> None:
    assert a & b is b & a and a | b is b | a
    assert (a & b) & c is a & (b & c) and (a | b) | c is a | (b | c)
    assert a & (b | c) is (a & b) | (a & c)
    assert a | (b & c) is (a | b) & (a | c)
    assert ~(a & b) is ~a | ~b and ~(a | b) is ~a & ~b
    assert ~~a is a
    assert a & T is a and a | F is a and a & F is F and a | T is T
    assert a & (a | b) is a and a | (a & b) is a


def test_no_excluded_middle() -> None:
    """Unknown is not a boolean: U or not U is U, and U and not U is U."""
    assert U | ~U is U and U & ~U is U


# ------------------------------------------------------------------ predicates


def obs(subject: str, value: Any, unit: str | None = "USD/share", currency: str | None = "USD",
        *, as_of: datetime = NOW, status: ObservationStatus = ObservationStatus.OK) -> Observation:
    return Observation("prices", "1", subject, f"{subject}@x",
                       None if value is None else Decimal(str(value)), unit, currency, as_of,
                       NOW, status)


def trigger_spec(predicate: Any, **extra: Any) -> dict[str, Any]:
    return {"version": 1, "trigger": {"type": "condition", "mode": "every_edge",
                                      "source": {"name": "s", "version": "1"},
                                      "poll_every": "PT1H", "predicate": predicate, **extra}}


def predicate(data: Any) -> Any:
    return parse_spec(trigger_spec(data)).trigger.predicate


def verdict(data: Any, observations: dict[str, Observation]) -> Verdict:
    return evaluate(predicate(data), observations, NOW).verdict


def test_fahrenheit_threshold_against_celsius_readings() -> None:
    """77 degF <= 25 degC is true (equal, exactly); 86 degF against 30.5 degC is true."""
    assert verdict({"subject": "t", "op": "<=", "threshold": "25 degC"},
                   {"t": obs("t", 77, "degF", None)}) is T
    assert verdict({"subject": "t", "op": ">=", "threshold": "86 degF"},
                   {"t": obs("t", "30.5", "degC", None)}) is T
    assert verdict({"subject": "t", "op": ">=", "threshold": "86 degF"},
                   {"t": obs("t", "29.9", "degC", None)}) is F


def test_decimal_sum_is_exact() -> None:
    """0.1 USD + 0.2 USD <= 0.3 USD is true (floats say 0.30000000000000004 > 0.3)."""
    assert not 0.1 + 0.2 <= 0.3
    total = Decimal("0.1") + Decimal("0.2")
    assert verdict({"subject": "p", "op": "<=", "threshold": "0.3 USD"},
                   {"p": obs("p", total, "USD", "USD")}) is T
    assert verdict({"subject": "p", "op": "==", "threshold": "0.3 USD"},
                   {"p": obs("p", total, "USD", "USD")}) is T


def test_temperature_differences_compare_across_scales() -> None:
    """A rise of 5 delta_degC equals 9 delta_degF."""
    assert verdict({"subject": "rise", "op": "==", "threshold": "9 delta_degF"},
                   {"rise": obs("rise", 5, "delta_degC", None)}) is T


@pytest.mark.parametrize(("threshold", "observed", "field"), [
    ("5 delta_degC", "degC", "threshold"),       # a difference against an absolute reading
    ("30 degC", "delta_degF", "threshold"),       # an absolute against a difference
    ("1 kilodegC", None, "threshold"),            # a prefixed offset unit
    ("10 furlongs_per_zorp", None, "threshold"),  # not a unit
    ("10 USD/share", "kilodegC", "unit"),
    ("10 USD/share", "EUR/share", "threshold"),   # another currency
    ("10 meter", "kilogram", "threshold"),        # another dimension
    ("ten USD", None, "threshold"),
    ("1 degC/s", None, "threshold"),              # an offset unit in a quotient
    ("1 m*degC", None, "threshold"),
    ("1 " + "m*" * 40 + "m", None, "threshold"),  # longer than 64 characters
    ("5", "percent", "threshold"),                # a bare 5 against percent is 500 %
    ("1 m**9**9**9", None, "threshold"),          # pint would compute 9**387420489
    ("1 km**99999999", None, "threshold"),
    ("1 m99999", None, "threshold"),              # pint reads it as m**99999
    ("1 degRe/s", None, "threshold"),
    ("\u0661\u0660 USD", None, "threshold"),       # Arabic-Indic digits
])
def test_bad_units_are_refused_at_proposal(threshold: str, observed: str | None,
                                           field: str) -> None:
    data: dict[str, Any] = {"subject": "x", "op": "<=", "threshold": threshold}
    if observed is not None:
        data["unit"] = observed
    with pytest.raises(SpecError) as raised:
        parse_spec(trigger_spec(data))
    assert raised.value.field.endswith(field), raised.value.field
    assert raised.value.field.startswith("trigger.predicate")


@pytest.mark.parametrize(("observation", "why"), [
    (obs("x", None, status=ObservationStatus.MISSING), "is missing"),
    (obs("x", 5, status=ObservationStatus.TIMED_OUT), "timed_out"),
    (obs("x", 5, status=ObservationStatus.FAILED), "failed"),
    (obs("x", 5, as_of=NOW - timedelta(days=3)), "older than its freshness"),
    (obs("x", 5, as_of=NOW + timedelta(seconds=1)), "no as_of at or before"),
    (obs("x", 5, "EUR/share", "EUR"), "does not compare"),
    (obs("x", 5, "meter", None), "does not compare"),
    (obs("x", 5, "kilogram", None), "does not compare"),
    (obs("x", 5, "USD/share", "EUR"), "contradicts"),
    (obs("x", 5, "not_a_unit", None), "'not_a_unit' is not a unit"),
    (obs("x", 5, "USD/share", "XXQ"), "'XXQ' is not an ISO 4217 currency code"),
])
def test_what_cannot_be_judged_is_unknown(observation: Observation, why: str) -> None:
    """Never false, never an exception: the comparison is unknown, with the reason."""
    result = evaluate(predicate({"subject": "x", "op": "<=", "threshold": "10 USD/share",
                                 "freshness": "P1D"}), {"x": observation}, NOW)
    assert result.verdict is U
    assert why in result.reason


def test_absent_subject_is_unknown() -> None:
    assert verdict({"subject": "x", "op": "<=", "threshold": "10 USD/share"}, {}) is U


def test_all_any_not_are_kleene() -> None:
    """all(false, unknown) is false; any(true, unknown) is true; all(true, unknown) and
    not(unknown) are unknown."""
    data = {"a": obs("a", 5), "b": obs("b", None, status=ObservationStatus.MISSING),
            "c": obs("c", 50)}
    le = {"op": "<=", "threshold": "10 USD/share"}
    assert verdict({"all": [{"subject": "c", **le}, {"subject": "b", **le}]}, data) is F
    assert verdict({"any": [{"subject": "a", **le}, {"subject": "b", **le}]}, data) is T
    assert verdict({"all": [{"subject": "a", **le}, {"subject": "b", **le}]}, data) is U
    assert verdict({"not": {"subject": "b", **le}}, data) is U
    assert verdict({"not": {"subject": "c", **le}}, data) is T


def test_depth_and_size_are_bounded() -> None:
    leaf = {"subject": "a", "op": "<=", "threshold": "1 USD"}
    deep: Any = leaf
    for _ in range(3):
        deep = {"not": deep}
    predicate(deep)  # depth 4
    with pytest.raises(SpecError) as raised:
        predicate({"not": deep})
    assert raised.value.field == "trigger.predicate" and "5 levels" in str(raised.value)
    predicate({"any": [leaf] * 16})
    with pytest.raises(SpecError) as raised:
        predicate({"any": [leaf] * 17})
    assert "17 comparisons" in str(raised.value)


@given(st.decimals(min_value=-1000, max_value=1000, places=2),
       st.decimals(min_value=-1000, max_value=1000, places=2))
def test_celsius_against_fahrenheit_agrees_with_the_formula(c: Decimal, f: Decimal) -> None:
    """An observation in degC against a threshold in degF: the verdict is the exact
    comparison c * 9/5 + 32 <= f (computed with Decimal, independently of pint)."""
    comparison = Comparison(subject="t", op="<=", threshold=f"{f} degF")
    expected = c * Decimal(9) / Decimal(5) + 32 <= f
    result = evaluate(comparison, {"t": obs("t", c, "degC", None)}, NOW)
    assert result.verdict is Verdict.of(expected)


@given(st.decimals(min_value=0, max_value=10_000, places=4),
       st.decimals(min_value=0, max_value=10_000, places=4))
def test_per_share_prices_compare_exactly(price: Decimal, bound: Decimal) -> None:
    comparison = Comparison(subject="p", op=">=", threshold=f"{bound} USD/share")
    result = evaluate(comparison, {"p": obs("p", price)}, NOW)
    assert result.verdict is Verdict.of(price >= bound)


readings = st.tuples(
    st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False),
    st.sampled_from(["USD/share", "USD", "EUR/share", "share", "", "kUSD/share", "m"]),
    st.sampled_from(["USD", "EUR", None]))


@given(readings, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
       st.decimals(min_value=-1000, max_value=1000, places=2, allow_nan=False))
def test_a_reading_handed_to_every_poll_is_judged_as_a_fresh_one(
        reading: tuple[Decimal, str, str | None], op: str, bound: Decimal) -> None:
    """compare keeps its last steps' answer for a reading it saw (a series hands the
    same value object to every poll until its next row): the same reading read again,
    at a later poll, gives the verdict and reason that a new object of the same text
    gives, and a new object of another text (1.50 vs 1.5) keeps its own words."""
    value, unit, currency = reading
    comparison = Comparison(subject="p", op=op, threshold=f"{bound} USD/share")
    read = Observation("prices", "1", "p", "p@x", value, unit or None, currency, NOW, NOW,
                       ObservationStatus.OK)
    first = evaluate(comparison, {"p": read}, NOW).leaves[0]
    later = evaluate(comparison, {"p": read}, NOW + timedelta(days=1)).leaves[0]
    fresh = evaluate(comparison, {"p": obs("p", str(value), unit or None, currency)},
                     NOW).leaves[0]
    assert (later.verdict, later.reason) == (first.verdict, first.reason) == (
        fresh.verdict, fresh.reason)
    assert later.observation is read
    longer = evaluate(comparison, {"p": obs("p", f"{value}0" if "." in str(value) else
                                            f"{value}.0", unit or None, currency)},
                      NOW).leaves[0]
    assert longer.verdict is first.verdict
    assert str(value) in first.reason or first.verdict is Verdict.UNKNOWN
    if first.verdict is not Verdict.UNKNOWN:
        assert f"{value}0" in longer.reason or f"{value}.0" in longer.reason


def test_a_reading_is_judged_anew_once_units_are_defined() -> None:
    """A unit unknown at a first poll makes the reading unknown; once the unit is
    defined (a units file), the same reading object compares (the kept answer is
    dropped with the unit registry's other cached answers)."""
    from watchkeeper.triggers import define_units

    name = "wkmemo_lb"
    comparison = Comparison(subject="w", op=">=", threshold="1 kg")
    read = Observation("scale", "1", "w", "w@x", Decimal("3"), name, None, NOW, NOW,
                       ObservationStatus.OK)
    before = evaluate(comparison, {"w": read}, NOW)
    assert before.verdict is Verdict.UNKNOWN and name in before.reason
    define_units(f"{name} = 0.5 * kilogram")
    after = evaluate(comparison, {"w": read}, NOW)
    assert after.verdict is Verdict.TRUE  # 3 x 0.5 kg = 1.5 kg >= 1 kg
    assert after.reason == f"true: w 3 {name} >= 1 kg"


# ------------------------------------------------------------------ edge state machine


def run(sequence: str, mode: ConditionMode = EVERY, cooldown: timedelta = timedelta(0),
        minutes: list[int] | None = None) -> list[EdgeAction]:
    """Feed verdicts (T/F/U letters) one per minute (or at ``minutes``); every fire is
    taken as admitted."""
    state = ConditionState()
    actions = []
    for index, letter in enumerate(sequence):
        at = NOW + timedelta(minutes=minutes[index] if minutes else index)
        result = step(state, {"T": T, "F": F, "U": U}[letter], at, mode, cooldown)
        actions.append(result.action)
        state = result.state
    return actions


def fires(sequence: str, **options: Any) -> int:
    return run(sequence, **options).count(EdgeAction.FIRE)


@pytest.mark.parametrize(("sequence", "expected"), [
    ("FTUT", 1), ("FUT", 1), ("FTUFT", 2), ("F" + "T" * 60, 1), ("TUT", 1), ("TFT", 2),
    ("UUU", 0), ("T", 1), ("FFF", 0), ("TUFUT", 2),
])
def test_every_edge_sequences(sequence: str, expected: int) -> None:
    assert fires(sequence) == expected


def test_cooldown_suppresses_the_second_edge_and_a_later_one_fires() -> None:
    """Cooldown 10 min: edges at minutes 1 and 3 -> fire, suppressed_cooldown; the edge
    at minute 12 fires."""
    actions = run("FTFTFT", cooldown=timedelta(minutes=10), minutes=[0, 1, 2, 3, 11, 12])
    assert [a.value for a in actions] == ["none", "fired", "none", "suppressed_cooldown",
                                          "none", "fired"]


def test_cooldown_is_measured_from_the_last_fire() -> None:
    """A suppressed edge does not restart the cooldown: the edge at minute 11 (10 min
    after the fire at 1) fires although an edge was suppressed at minute 9."""
    actions = run("TFTFT", cooldown=timedelta(minutes=10), minutes=[1, 8, 9, 10, 11])
    assert [a.value for a in actions] == ["fired", "none", "suppressed_cooldown", "none",
                                          "fired"]


def test_first_match_fires_once() -> None:
    assert run("FUTFTT", FIRST).count(EdgeAction.FIRE) == 1


def test_first_match_latches_only_when_admitted() -> None:
    """A fire that was not admitted keeps the previous state: the next true fires."""
    before = ConditionState(last_definite=False)
    fired = step(before, T, NOW, FIRST)
    assert fired.action is EdgeAction.FIRE and fired.state.latched
    kept = not_admitted(before)
    assert not kept.latched
    assert step(kept, T, NOW + timedelta(minutes=1), FIRST).action is EdgeAction.FIRE


letters = st.text(alphabet="TFU", max_size=40)


@given(letters, letters)
def test_unknown_never_fires_and_never_rearms(prefix: str, suffix: str) -> None:
    """Inserting unknowns anywhere never changes what fires: unknown carries no
    evidence. In particular true, unknown, true never fires twice."""
    plain = prefix + suffix
    spiked = prefix + "UUU" + suffix
    def definite(seq: str) -> list[EdgeAction]:
        return [a for a, letter in zip(run(seq), seq, strict=True) if letter != "U"]

    assert definite(spiked) == definite(plain)
    assert EdgeAction.FIRE not in [a for a, letter in zip(run(spiked), spiked, strict=True)
                                   if letter == "U"]


@given(letters)
def test_every_edge_fires_exactly_on_definite_rises(sequence: str) -> None:
    """Without cooldown: a fire on each T whose previous definite verdict is F (or none)."""
    expected, last = [], None
    for letter in sequence:
        if letter == "U":
            expected.append(False)
            continue
        expected.append(letter == "T" and last != "T")
        last = letter
    assert [a is EdgeAction.FIRE for a in run(sequence)] == expected


@given(letters, st.integers(min_value=0, max_value=30))
def test_cooldown_never_fires_twice_within_it(sequence: str, minutes: int) -> None:
    """Two fires are always at least the cooldown apart; a suppressed edge is a T."""
    actions = run(sequence, cooldown=timedelta(minutes=minutes))
    fired = [i for i, a in enumerate(actions) if a is EdgeAction.FIRE]
    assert all(b - a >= minutes for a, b in zip(fired, fired[1:], strict=False))
    assert all(sequence[i] == "T" for i, a in enumerate(actions)
               if a is EdgeAction.SUPPRESSED_COOLDOWN)


# ------------------------------------------------------------------ spec


def test_cooldown_belongs_to_every_edge() -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec({"version": 1, "trigger": {
            "type": "condition", "mode": "first_match", "source": {"name": "s", "version": "1"},
            "poll_every": "PT1H", "cooldown": "PT1H",
            "predicate": {"subject": "a", "op": "<=", "threshold": "1 USD"}}})
    assert raised.value.field == "trigger.cooldown"


def test_poll_every_has_the_minimum_resolution() -> None:
    with pytest.raises(SpecError) as raised:
        parse_spec(trigger_spec({"subject": "a", "op": "<=", "threshold": "1 USD"})
                   | {"trigger": {**trigger_spec({"subject": "a", "op": "<=",
                                                  "threshold": "1 USD"})["trigger"],
                                  "poll_every": "PT1S"}})
    assert raised.value.field == "trigger.poll_every"


def test_condition_key_tracks_source_predicate_and_mode() -> None:
    """A revision that changes only the poll interval or the title keeps the key (and
    so the state); one that changes the threshold gets a new key."""
    base = trigger_spec({"subject": "a", "op": "<=", "threshold": "1 USD"})
    key = parse_spec(base).trigger.condition_key
    slower = {**base, "title": "x", "trigger": {**base["trigger"], "poll_every": "PT2H"}}
    assert parse_spec(slower).trigger.condition_key == key
    moved = trigger_spec({"subject": "a", "op": "<=", "threshold": "2 USD"})
    assert parse_spec(moved).trigger.condition_key != key


def test_huge_numbers_are_refused_or_unknown() -> None:
    """Exact conversion makes a Fraction: 1e999999999 would be a billion-digit integer.
    A threshold out of range is refused at proposal; a reading out of range is unknown."""
    with pytest.raises(SpecError) as raised:
        predicate({"subject": "x", "op": "<=", "threshold": "1e999999999 USD"})
    assert raised.value.field == "trigger.predicate.threshold"
    assert "out of range" in str(raised.value)
    result = evaluate(predicate({"subject": "x", "op": "<=", "threshold": "10 USD/share"}),
                      {"x": obs("x", "1e999999999")}, NOW)
    assert result.verdict is U and "out of range" in result.reason
    assert verdict({"subject": "x", "op": ">=", "threshold": "1e99 USD/share"},
                   {"x": obs("x", "2e99")}) is T


@pytest.mark.parametrize(("threshold", "value", "unit", "expected"), [
    ("1013 hPa", "1013", "mbar", T),
    ("1 m**3", "999", "L", F),            # 999 L <= 1 m**3 ... is true; >= is false
    ("2 W/m**2", "0.002", "kW/m**2", T),
    ("9.81 m/s**2", "9.81", "m/s**2", T),
    ("300 kelvin", "26.85", "degC", T),   # 300 K = 26.85 degC exactly
])
def test_units_with_powers_and_prefixes(threshold: str, value: str, unit: str,
                                        expected: Verdict) -> None:
    assert verdict({"subject": "x", "op": ">=", "threshold": threshold},
                   {"x": obs("x", value, unit, None)}) is expected


def test_freshness_in_months_is_refused() -> None:
    with pytest.raises(SpecError) as raised:
        predicate({"subject": "x", "op": "<=", "threshold": "1 USD", "freshness": "P1M"})
    assert raised.value.field == "trigger.predicate.freshness"
