"""Units beyond pint's defaults: ppb and ppt, mass concentrations as written, an
operator's definitions file, and a series that names every unknown unit at once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchkeeper.runtime import Settings, load_units_file
from watchkeeper.sources import SeriesError, read_series_csv
from watchkeeper.triggers import (
    MAX_UNITS_TEXT,
    Observation,
    ObservationStatus,
    SpecError,
    Verdict,
    check_unit,
    define_units,
    evaluate,
    parse_spec,
    threshold_in,
)

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def fresh(stem: str) -> str:
    """A unit name no other test defines (the registry is shared by the process); letters
    only, since digits after a name read as a power."""
    return f"{stem}_" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:8])


@pytest.mark.parametrize(("threshold", "unit", "expected"), [
    ("1 ppm", "ppb", Fraction(1000)),
    ("1 ppb", "ppt", Fraction(1000)),
    ("1 ppm", "ppt", Fraction(10**6)),
    ("5 ppb", "ppm", Fraction(1, 200)),
    ("1 ppt", "dimensionless", Fraction(1, 10**12)),
    ("1 percent", "ppb", Fraction(10**7)),
])
def test_ppb_and_ppt_convert_exactly(threshold: str, unit: str, expected: Fraction) -> None:
    """ppb is 1e-9 and ppt 1e-12 (parts per trillion, not pico-pints), as exact rationals."""
    magnitude, name = threshold.split()
    assert threshold_in(Decimal(magnitude), name, unit) == expected


@pytest.mark.parametrize("spelling", ["ug/m**3", "µg/m³", "μg/m³", "µg/m^3", "µg m⁻³", "ug/m^3"])
def test_mass_concentrations_parse_in_every_spelling(spelling: str) -> None:
    """The micro sign, the Greek mu, 'u', superscript and ** powers all mean ug/m**3;
    25 ug/m**3 is 0.025 mg/m**3."""
    assert check_unit(spelling).name == "meter ** -3 * microgram"
    assert threshold_in(Decimal(25), spelling, "mg/m**3") == Fraction(1, 40)


def test_superscript_powers_obey_the_power_limit() -> None:
    """m⁹⁹ is m**99: refused like m**99 (at most 6); s⁻² is a power of -2."""
    with pytest.raises(SpecError, match="exponent 99 is above 6"):
        check_unit("m⁹⁹")
    assert check_unit("s⁻²").name == "second ** -2"


def test_an_air_quality_condition_in_ppb_compares() -> None:
    """NO2 <= 40 ppb against a 0.035 ppm reading (35 ppb) is true; a 0.041 ppm one false."""
    spec = parse_spec({"version": 1, "trigger": {
        "type": "condition", "mode": "every_edge", "source": {"name": "aq", "version": "1"},
        "poll_every": 3600,
        "predicate": {"subject": "NO2", "op": "<=", "threshold": "40 ppb", "unit": "ppm"}}})
    predicate = spec.trigger.predicate  # type: ignore[union-attr]

    def reading(value: str) -> Verdict:
        seen = Observation("aq", "1", "NO2", "NO2@x", Decimal(value), "ppm", None, NOW, NOW,
                           ObservationStatus.OK)
        return evaluate(predicate, {"NO2": seen}, NOW).verdict
    assert (reading("0.035"), reading("0.041")) == (Verdict.TRUE, Verdict.FALSE)


@given(st.integers(1, 10**6), st.integers(1, 10**6))
def test_ppb_orders_like_the_numbers(a: int, b: int) -> None:
    """Property: a ppb <= b ppt exactly when 1000 a <= b (exact conversion, no float)."""
    bound = threshold_in(Decimal(b), "ppt", "ppb")
    assert bound is not None and (Fraction(a) <= bound) == (1000 * a <= b)


def test_define_units_adds_units_once() -> None:
    """Defined names are returned, convert exactly, and the same text again is a no-op."""
    ppq, grain = fresh("ppq"), fresh("grain")
    text = f"# extra units\n{ppq} = 1e-15\n\n{grain} = 64.79891 * milligram  # a grain\n"
    assert define_units(text) == [ppq, grain]
    assert define_units(text) == [ppq, grain]
    assert threshold_in(Decimal(1), "ppb", ppq) == Fraction(10**6)
    assert threshold_in(Decimal(1), grain, "mg") == Fraction("64.79891")


def test_a_unit_asked_about_before_it_was_defined_compares_after() -> None:
    """A cached 'not comparable' answer is forgotten once the unit is defined."""
    name = fresh("aqi")
    assert threshold_in(Decimal(1), name, "ppm") is None
    define_units(f"{name} = 2 * ppm")
    assert threshold_in(Decimal(1), name, "ppm") == Fraction(2)


def test_every_bad_line_is_refused_with_its_number() -> None:
    """Garbage, an unknown reference, a redefinition, a directive, a name a spec could
    not use and an empty value between '=' signs (pint would accept it): six problems,
    fields '<source>:<line>'; the good lines are defined."""
    good, after = fresh("good"), fresh("after")
    text = "\n".join([f"{good} = 1e-3", "bad line", f"{fresh('x')} = 3 * barbaz",
                      "ppm = 1e-6", "@import other.txt", "pm25 = 2 * meter",
                      f"{fresh('y')} = = 3", f"{after} = 2"])
    with pytest.raises(SpecError) as info:
        define_units(text, "units.txt")
    assert [p.field for p in info.value.problems] == [
        "units.txt:2", "units.txt:3", "units.txt:4", "units.txt:5", "units.txt:6", "units.txt:7"]
    assert info.value.problems[2].problem == "'ppm = 1e-6' redefines a unit that exists."
    assert check_unit(good).name == good and check_unit(after).name == after


def test_load_units_file_reads_the_setting(tmp_path: Path) -> None:
    """WATCHKEEPER_UNITS_FILE's units are defined; unset defines nothing."""
    name = fresh("ppq")
    path = tmp_path / "units.txt"
    path.write_text(f"{name} = 1e-15\n", encoding="utf-8")
    assert load_units_file(Settings(units_file=path)) == [name]
    assert load_units_file(Settings(units_file=None)) == []
    assert threshold_in(Decimal(1), "ppt", name) == Fraction(1000)


def test_load_units_file_names_the_file_and_line(tmp_path: Path) -> None:
    """A bad line is named by path and line number; a Latin-1 file by its byte; a
    missing file by the setting."""
    path = tmp_path / "units.txt"
    path.write_text(f"{fresh('ok')} = 1\nnonsense\n", encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_units_file(Settings(units_file=path))
    assert info.value.field == f"{path}:2"
    path.write_bytes("caf\u00e9 = 1\n".encode("latin-1"))
    with pytest.raises(SpecError) as info:
        load_units_file(Settings(units_file=path))
    assert (info.value.field, info.value.problem) == (
        "WATCHKEEPER_UNITS_FILE", f"{path}: not UTF-8 text (byte 3).")
    with pytest.raises(SpecError) as info:
        load_units_file(Settings(units_file=tmp_path / "missing.txt"))
    assert info.value.field == "WATCHKEEPER_UNITS_FILE"


def test_an_empty_units_file_setting_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHKEEPER_UNITS_FILE= (empty) is no file, not the current directory."""
    monkeypatch.setenv("WATCHKEEPER_UNITS_FILE", "")
    assert Settings().units_file is None
    assert load_units_file(Settings()) == []


def test_a_series_names_every_unknown_unit_with_its_lines_and_subjects(tmp_path: Path) -> None:
    """Two unknown units over four rows, a bad currency and a bad number: one error with
    one line each, naming every line and subject; good rows do not hide them."""
    path = tmp_path / "aq.csv"
    path.write_text("as_of,subject,value,unit,currency\n"
                    "2026-01-01,NO2,12,ppb,\n"
                    "2026-01-01,AQ1,3,ppq,\n"
                    "2026-01-02,AQ1,3,ppq,\n"
                    "2026-01-02,AQ2,3,ppq,\n"
                    "2026-01-03,AQ3,3,furlongz,\n"
                    "2026-01-04,X,3,USD,EURO\n"
                    "2026-01-05,Y,abc,,\n")
    with pytest.raises(SeriesError) as info:
        read_series_csv(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 4
    assert lines[0].startswith(f"{path}:3: unit 'ppq' is not a unit (")
    assert lines[0].split(")")[-2:] == ["; on lines 3-5, subjects AQ1, AQ2. Fix: use a pint "
                                        "unit such as 'USD/share', 'degF', 'delta_degC', 'ppb', "
                                        "'ug/m**3' or 'percent' (currencies are ISO 4217 codes",
                                        ", or define it in WATCHKEEPER_UNITS_FILE."]
    assert lines[1].startswith(f"{path}:6: unit 'furlongz' is not a unit") and \
        "on line 6, subject AQ3." in lines[1]
    assert lines[2].startswith(f"{path}:7: currency 'EURO' is not an ISO 4217 currency code; "
                               "on line 7, subject X. Fix:")
    assert lines[3] == f"{path}:8: value 'abc' is not a number (leave the cell empty for a " \
        "missing value)"


# ------------------------------------------------------------------ bounded definitions


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("definition", "words"), [
    ("{name} = 9**9**9 * meter", "exponent 9 is above 6"),
    ("{name} = meter ** 2**2**2", "a power of a power"),
    ("{name} = (2**6)**6 * meter", "a power of a power"),
    ("{name} = 10**(9*9*9*9*9*9*9*9*9) * meter", "is not a number"),
    ("{name} = km**6,0,0,0,0,0,0", "exponent 6000000 is above 6"),  # pint drops commas
    ("{name} = 5 / 9 * kelvin; offset: 9**9**9", "exponent 9 is above 6"),
    ("{name}- = 9**9**9", "exponent 9 is above 6"),
    ("[{name}] = [length] ** 9**9**9", "exponent 9 is above 6"),
    ("{name} = 2 * meter = _ = {name}_x ** 99", "exponent 99 is above 6"),
    ("{name} = 1e999999 * meter", "the number 1e999999 is out of range"),
    ("{name} = 1,0e9,99 * meter", "the number 10e999 is out of range"),
    ("{name} = 2**6:**6 * meter", "':' is not a number"),
])
def test_an_exponent_bomb_in_a_units_file_is_refused_with_its_line(definition: str,
                                                                  words: str) -> None:
    """Every expression pint would evaluate (value, offset, prefix, dimension, alias) is
    held to a spec's bounds before pint sees it: refused with its line, at once (pint
    would compute 9**387420489, or a million-digit Fraction, and hang every command)."""
    good = fresh("good")
    with pytest.raises(SpecError) as raised:
        define_units(f"{good} = 2 * meter\n" + definition.format(name=fresh("bomb")),
                     "units.txt")
    assert [p.field for p in raised.value.problems] == ["units.txt:2"]
    assert words in raised.value.problem and raised.value.problem.endswith(").")
    assert check_unit(good).name == good


@pytest.mark.timeout(20)
def test_a_huge_literal_or_a_long_line_is_refused_by_its_length() -> None:
    """A 100,000-digit number and a 500,000-character expression are refused by their
    length (256 characters, the comment not counted) before anything reads them; a long
    comment is fine."""
    digits, long, after = fresh("digits"), fresh("long"), fresh("after")
    text = "\n".join([f"{digits} = {'9' * 100_000} * meter",
                      f"{long} = " + "meter * " * 62_500 + "meter",
                      f"{after} = 3 * meter  # " + "c" * 300_000])
    with pytest.raises(SpecError) as raised:
        define_units(text, "units.txt")
    assert [(p.field, p.problem.split(" is ")[-1]) for p in raised.value.problems] == [
        ("units.txt:1", f"{len(digits) + 3 + 100_000 + 8} characters long, over 256."),
        ("units.txt:2", f"{len(long) + 3 + 8 * 62_500 + 5} characters long, over 256.")]
    assert threshold_in(Decimal(1), after, "meter") == Fraction(3)


def test_a_text_over_a_million_characters_is_refused_whole() -> None:
    """define_units refuses a text over MAX_UNITS_TEXT characters without reading a line
    of it (nothing is defined)."""
    name = fresh("unread")
    with pytest.raises(SpecError) as raised:
        define_units(f"{name} = 2 * meter\n" + "#" * MAX_UNITS_TEXT, "units.txt")
    assert (raised.value.field, raised.value.problem) == (
        "units.txt", f"is over {MAX_UNITS_TEXT} characters long.")
    assert threshold_in(Decimal(1), name, "meter") is None


@pytest.mark.timeout(20)
def test_an_endless_units_file_is_read_only_to_the_limit(tmp_path: Path) -> None:
    """WATCHKEEPER_UNITS_FILE=/dev/zero (or any file over 1,000,000 bytes) is refused
    after reading one byte past the limit, not read into memory whole."""
    with pytest.raises(SpecError) as raised:
        load_units_file(Settings(units_file=Path("/dev/zero")))
    assert (raised.value.field, raised.value.problem) == (
        "WATCHKEEPER_UNITS_FILE", f"/dev/zero is over {MAX_UNITS_TEXT} bytes.")
    path = tmp_path / "units.txt"
    path.write_bytes(b"#" * MAX_UNITS_TEXT)
    assert load_units_file(Settings(units_file=path)) == []


def test_a_chain_of_definitions_cannot_build_a_huge_unit() -> None:
    """Each line within the bounds, a chain still could (a = 1e100 m, b = a**3, c = b**2
    is 1e600 m): a unit beyond 1e+-300 of its root units is refused, as is a unit of
    size zero or below (comparisons assume conversions keep the order)."""
    a, b, c, zero, negative = (fresh(s) for s in ("a", "b", "c", "zero", "neg"))
    with pytest.raises(SpecError) as raised:
        define_units(f"{a} = 1e100 * meter\n{b} = {a} ** 3\n{c} = {b} ** 2\n"
                     f"{zero} = 0 * meter\n{negative} = -2 * meter", "units.txt")
    assert [(p.field, p.problem) for p in raised.value.problems] == [
        ("units.txt:3", f"'{b} ** 2' is about 1e600 of its root units, beyond 1e-300..1e300."),
        ("units.txt:4", "'0 * meter' is not a positive size."),
        ("units.txt:5", "'-2 * meter' is not a positive size.")]
    assert threshold_in(Decimal(1), b, "meter**3") == Fraction(10) ** 300


@given(st.integers(-10_000, 10_000), st.integers(1, 9))
def test_a_defined_number_is_accepted_exactly_when_in_range(exponent: int, mantissa: int) -> None:
    """Property: 'x = <m>e<n> * meter' is defined exactly when the number is within
    1e-100..1e100 (the bound of a spec's thresholds), and converts exactly."""
    name = fresh("num")
    expected = -100 <= exponent <= 100
    try:
        define_units(f"{name} = {mantissa}e{exponent} * meter")
        accepted = True
    except SpecError as exc:
        assert "out of range" in exc.problem
        accepted = False
    assert accepted is expected
    if accepted:
        assert threshold_in(Decimal(1), name, "meter") == Fraction(mantissa) * Fraction(10) ** exponent


@given(st.integers(1, 99_999), st.data())
def test_commas_cannot_smuggle_a_large_exponent(exponent: int, data: st.DataObject) -> None:
    """Property: pint drops commas, so m**6,0,0 is m**600; a unit's exponent written with
    commas anywhere is accepted exactly when the number without them is at most 6."""
    digits = str(exponent)
    cuts = data.draw(st.sets(st.integers(1, max(len(digits) - 1, 1)), max_size=4))
    written = "".join(("," if i in cuts and i < len(digits) else "") + d
                      for i, d in enumerate(digits))
    try:
        check_unit(f"m**{written}")
        accepted = True
    except SpecError:
        accepted = False
    assert accepted is (exponent <= 6)


@pytest.mark.parametrize("threshold", ["1 km**6,6,6,6,6,6,6", "1 m**(1*99)", "1 m**6,0"])
def test_a_threshold_cannot_smuggle_a_large_exponent_either(threshold: str) -> None:
    """The same bound protects a spec's threshold (km**6,6,6,6,6,6,6 was meter**6666666,
    and its conversion a number of 20 million digits in every poll)."""
    with pytest.raises(SpecError) as raised:
        parse_spec({"version": 1, "trigger": {
            "type": "condition", "mode": "first_match", "source": {"name": "s", "version": "1"},
            "poll_every": 3600, "predicate": {"subject": "x", "op": "<", "threshold": threshold}}})
    assert raised.value.field == "trigger.predicate.threshold"


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_units_file_bomb_stops_no_command(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHKEEPER_UNITS_FILE holding 'bomb = 9**9**9 * meter': a command exits 2 at once
    naming the file's line and the bound, instead of hanging."""
    from test_cli import cli

    path = tmp_path / "units.txt"
    path.write_text("ok_unit_q = 2 * meter\nbomb = 9**9**9 * meter\n", encoding="utf-8")
    monkeypatch.setenv("WATCHKEEPER_UNITS_FILE", str(path))
    code, out, err = await cli("preview", "--cron", "0 9 * * 1", "--tz", "UTC", dsn=None,
                               home=tmp_path, check=False)
    assert (code, out) == (2, "")
    assert f"{path}:2: '9**9**9 * meter' is refused (exponent 9 is above 6)." in " ".join(
        err.split())
