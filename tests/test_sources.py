"""The shipped sources: a historical series (known-at-time, missing is not zero), an
HTTP JSON source against a real local server (uvicorn), and a callable source."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest

from watchkeeper.outbox import serve
from watchkeeper.sources import (
    CallableSource,
    HttpJsonSource,
    SeriesError,
    SeriesSource,
    SourceRegistry,
    UnknownSource,
    read_series_csv,
)
from watchkeeper.triggers import ObservationStatus

pytestmark = pytest.mark.anyio

T0 = datetime(2024, 1, 1, tzinfo=UTC)
HEADER = "as_of,subject,value,unit,currency\n"


def series(tmp_path: Path, body: str) -> SeriesSource:
    path = tmp_path / "s.csv"
    path.write_text(HEADER + body)
    return SeriesSource.from_csv(path, name="s", version="3")


async def test_series_returns_only_what_was_known(tmp_path: Path) -> None:
    source = series(tmp_path, "2024-01-01,X,10,USD/share,usd\n2024-01-03T12:00:00Z,X,11,USD/share,USD\n")
    before = await source.read("X", T0 - timedelta(seconds=1))
    assert before.status is ObservationStatus.MISSING and "nothing known" in before.detail
    at = await source.read("X", T0)
    assert (at.value, at.as_of, at.currency, at.source_version) == (Decimal("10"), T0, "USD", "3")
    between = await source.read("X", T0 + timedelta(days=2, hours=11))
    assert between.value == Decimal("10")  # the 12:00 row is not known at 11:00
    after = await source.read("X", T0 + timedelta(days=2, hours=12))
    assert (after.value, after.observation_id) == (Decimal("11"), "X@2024-01-03T12:00:00Z")
    assert (await source.read("Y", T0)).detail == "no such subject in the series"


@pytest.mark.parametrize("cell", ["", "NA", "NaN", "null", "nan"])
async def test_a_missing_cell_is_missing_not_zero(tmp_path: Path, cell: str) -> None:
    source = series(tmp_path, f"2024-01-01,X,{cell},degC,\n")
    observation = await source.read("X", T0)
    assert observation.status is ObservationStatus.MISSING
    assert observation.value is None and observation.as_of == T0


@pytest.mark.parametrize(("body", "words"), [
    ("2024-01-01,X,1e999999999999,degC,\n", "out of range"),
    ("2024-01-01,X,ten,degC,\n", "not a number"),
    ("2024-01-01,X,1_0,degC,\n", "not a number"),
    ("2024-01-01,X,Infinity,degC,\n", "not finite"),
    ("yesterday,X,1,degC,\n", "as_of 'yesterday' is not an ISO 8601"),
    ("2024-01-01,,1,degC,\n", "subject is empty"),
    ("2024-01-01,X,1\n", "3 cells, expected 5"),
    ("2024-01-01\n", "1 cell, expected 5"),
    ("2024-01-01,X,1,blorbs,\n", "unit 'blorbs' is not a unit"),
    ("2024-01-01,X,1,USD,XXQ\n", "currency 'XXQ' is not an ISO 4217 currency code"),
])
def test_bad_rows_name_the_line(tmp_path: Path, body: str, words: str) -> None:
    path = tmp_path / "s.csv"
    path.write_text(HEADER + "2024-01-01,X,1,degC,\n" + body)
    with pytest.raises(SeriesError) as raised:
        read_series_csv(path)
    assert f"{path}:3" in str(raised.value) and words in str(raised.value)


def test_a_wrong_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("date,symbol,price\n")
    with pytest.raises(SeriesError, match="header must be as_of,subject,value,unit,currency"):
        read_series_csv(path)


class Quotes:
    """A small JSON API: /q/{subject} answers per the table; /slow never answers."""

    def __init__(self) -> None:
        self.never = anyio.Event()
        self.answers: dict[str, tuple[int, Any]] = {
            "AAPL": (200, {"price": 9.5, "time": "2024-01-02T21:00:00Z", "unit": "USD/share",
                           "ccy": "usd", "id": 77}),
            "NULL": (200, {"price": None, "time": "2024-01-02T21:00:00Z"}),
            "DOWN": (503, {"error": "maintenance"}),
            "EPOCH": (200, {"price": "0.1", "time": 1704229200}),
        }

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        subject = scope["path"].rsplit("/", 1)[-1]
        if subject == "SLOW":
            await self.never.wait()
        if subject == "TEXT":
            status, body = 200, b"<html>"
        else:
            status, document = self.answers.get(subject, (404, {}))
            body = json.dumps(document).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})


async def test_http_json_source_against_a_live_server() -> None:
    app = Quotes()
    fetched = datetime(2024, 1, 3, tzinfo=UTC)
    async with serve(app) as url:
        source = HttpJsonSource("quotes", "1", url + "q/{subject}", value="/price",
                                as_of="/time", unit="/unit", currency="/ccy",
                                observation_id="/id", timeout=0.5, now=lambda: fetched)
        try:
            ok = await source.read("AAPL", fetched)
            assert (ok.status, ok.value, ok.unit, ok.currency, ok.observation_id) == (
                ObservationStatus.OK, Decimal("9.5"), "USD/share", "USD", "77")
            assert ok.as_of == datetime(2024, 1, 2, 21, tzinfo=UTC) and ok.fetched_at == fetched
            epoch = await source.read("EPOCH", fetched)
            assert (epoch.value, epoch.as_of) == (Decimal("0.1"), datetime(2024, 1, 2, 21, tzinfo=UTC))
            null = await source.read("NULL", fetched)
            assert null.status is ObservationStatus.MISSING and null.value is None
            down = await source.read("DOWN", fetched)
            assert down.status is ObservationStatus.FAILED and "HTTP 503" in down.detail
            text = await source.read("TEXT", fetched)
            assert text.status is ObservationStatus.FAILED and "did not answer JSON" in text.detail
            slow = await source.read("SLOW", fetched)
            assert slow.status is ObservationStatus.TIMED_OUT and "timed out" in slow.detail
        finally:
            app.never.set()
            await source.aclose()


async def test_http_json_source_when_nothing_listens() -> None:
    source = HttpJsonSource("quotes", "1", "http://127.0.0.1:9/q/{subject}", value="/p")
    try:
        observation = await source.read("X", T0)
    finally:
        await source.aclose()
    assert observation.status is ObservationStatus.FAILED and "ConnectError" in observation.detail


async def test_callable_source_shapes() -> None:
    answers: dict[str, Any] = {"f": 0.1, "pair": (5, T0), "none": None, "text": "abc"}

    def read(subject: str, at: datetime) -> Any:
        if subject == "boom":
            raise RuntimeError("quota exceeded")
        return answers[subject]

    async def aread(subject: str, at: datetime) -> Any:
        return 7

    source = CallableSource("c", "1", read, unit="USD", now=lambda: T0)
    f = await source.read("f", T0)
    assert f.value == Decimal("0.1")  # the float's shortest text, not 0.1000000000000000055
    pair = await source.read("pair", T0 + timedelta(hours=1))
    assert (pair.value, pair.as_of) == (Decimal(5), T0)
    assert (await source.read("none", T0)).status is ObservationStatus.MISSING
    assert (await source.read("text", T0)).status is ObservationStatus.MISSING
    boom = await source.read("boom", T0)
    assert boom.status is ObservationStatus.FAILED and "quota exceeded" in boom.detail
    assert (await CallableSource("a", "1", aread).read("x", T0)).value == Decimal(7)


def test_registry_names_what_it_has() -> None:
    registry = SourceRegistry([CallableSource("a", "2", lambda s, at: 1)])
    assert registry.names() == {"a": "2"}
    with pytest.raises(UnknownSource, match=r"no source named 'b'.*registered: \['a'\]"):
        registry.get("b")
