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
