"""Regenerate the series CSVs in this directory from the datasets shipped by the
``vega-datasets`` package (pip install vega-datasets):

* ``stocks.csv``: monthly closing prices of MSFT, AMZN, IBM, GOOG and AAPL, 2000-2010,
  in USD per share (vega's ``stocks``; the date is the month's first day, 00:00 UTC);
* ``seattle_weather.csv``: Seattle's daily ``temp_max`` and ``temp_min`` (degC),
  ``precipitation`` (mm) and ``wind`` (m/s), 2012-2015 (vega's ``seattle-weather``).
  A day's maximum is only known once the day is over, so each row's ``as_of`` is the
  end of its day (the next day, 00:00 UTC): a poll never sees a day's maximum before
  the day has ended. (The stocks rows keep vega's date: the price as of that date.)

Output format (what ``watchkeeper replay --series`` reads): the header
``as_of,subject,value,unit,currency``; numbers copied as written in the source file.

Usage: python examples/series/convert_vega.py
"""

from __future__ import annotations

import csv
import importlib.util
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent


def vega_file(name: str) -> Path:
    """The raw file inside the installed vega_datasets package (not imported: it would
    import pandas)."""
    spec = importlib.util.find_spec("vega_datasets")
    if spec is None or spec.origin is None:
        raise SystemExit("pip install vega-datasets first")
    return Path(spec.origin).parent / "_data" / name


def stocks() -> list[tuple[str, str, str, str, str]]:
    """(as_of, subject, value, unit, currency) rows of vega's stocks.csv."""
    rows = []
    with vega_file("stocks.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            day = datetime.strptime(row["date"], "%b %d %Y").date()  # noqa: DTZ007 - a calendar date
            rows.append((f"{day.isoformat()}T00:00:00Z", row["symbol"], row["price"],
                         "USD/share", "USD"))
    return rows


SEATTLE_UNITS = {"temp_max": "degC", "temp_min": "degC", "precipitation": "mm", "wind": "m/s"}


def seattle() -> list[tuple[str, str, str, str, str]]:
    """(as_of, subject, value, unit, currency) rows of vega's seattle-weather.csv."""
    rows = []
    with vega_file("seattle-weather.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            day = datetime.strptime(row["date"], "%Y/%m/%d").date()  # noqa: DTZ007 - a calendar date
            known = day + timedelta(days=1)  # the end of the day the values describe
            for field, unit in SEATTLE_UNITS.items():
                rows.append((f"{known.isoformat()}T00:00:00Z", f"seattle/{field}", row[field],
                             unit, ""))
    return rows


def write(path: Path, rows: list[tuple[str, str, str, str, str]]) -> None:
    """Write rows under the replay header."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(("as_of", "subject", "value", "unit", "currency"))
        writer.writerows(rows)


if __name__ == "__main__":
    write(HERE / "stocks.csv", stocks())
    write(HERE / "seattle_weather.csv", seattle())
    print(f"wrote {HERE / 'stocks.csv'} and {HERE / 'seattle_weather.csv'}")
