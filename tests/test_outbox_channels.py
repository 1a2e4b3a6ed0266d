"""Built-in channels: the file channel stays inside its base directory and appends whole
lines; the log channel logs one line per notice; the webhook channel classifies what a
live server answers; signatures; quiet hours (pure, with hypothesis)."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook

from watchkeeper.outbox import (
    DeliveryFailed,
    Endpoint,
    FileChannel,
    LogChannel,
    Notice,
    Preferences,
    SignatureInvalid,
    WebhookChannel,
    quiet_hours_end,
    serve,
    signed_headers,
    verify,
)

pytestmark = pytest.mark.anyio


def notice(destination: str, attempt: int = 1) -> Notice:
    return Notice("acme", "00000000-0000-0000-0000-000000000001", "file", destination, attempt,
                  {"report_ref": "report:acme/1", "content_sha256": "ab" * 32})


async def test_file_channel_appends_one_line_per_notice(tmp_path: Path) -> None:
    """Two sends are two complete JSON lines, in order."""
    channel = FileChannel(tmp_path)
    await channel.send(notice("out/notices.jsonl"))
    await channel.send(notice("out/notices.jsonl", attempt=2))
    lines = (tmp_path / "acme" / "out" / "notices.jsonl").read_text().splitlines()
    assert [json.loads(x)["attempt"] for x in lines] == [1, 2]
    assert json.loads(lines[0])["report_ref"] == "report:acme/1"


@pytest.mark.parametrize("destination", ["../escape.jsonl", "/etc/watchkeeper.jsonl", "a/../../x"])
async def test_file_channel_never_leaves_its_base(tmp_path: Path, destination: str) -> None:
    """A destination outside the base directory is a permanent failure; nothing is written."""
    base = tmp_path / "home"
    base.mkdir()
    with pytest.raises(DeliveryFailed) as info:
        await FileChannel(base).send(notice(destination))
    assert info.value.retryable is False
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["home"]  # noqa: ASYNC240 - a test


async def test_file_channel_refuses_a_symlink_out(tmp_path: Path) -> None:
    """A symlink inside the base pointing outside is refused too."""
    base = tmp_path / "home"
    (base / "acme").mkdir(parents=True)
    (base / "acme" / "link").symlink_to(tmp_path)
    with pytest.raises(DeliveryFailed):
        await FileChannel(base).send(notice("link/x.jsonl"))


async def test_log_channel_logs_the_reference(caplog: pytest.LogCaptureFixture) -> None:
    """One INFO line with the delivery id and the report reference."""
    with caplog.at_level(logging.INFO, logger="watchkeeper.notify"):
        assert await LogChannel().send(notice("")) == "logged"
    (record,) = caplog.records
    assert "00000000-0000-0000-0000-000000000001" in record.getMessage()
    assert "report:acme/1" in record.getMessage()


async def test_tenants_cannot_reach_each_other(tmp_path: Path) -> None:
    """Each tenant writes under its own directory; a '..' tenant id is refused."""
    channel = FileChannel(tmp_path)
    await channel.send(notice("n.jsonl"))
    other = Notice("globex", "id-2", "file", "n.jsonl", 1, {"x": 1})
    await channel.send(other)
    assert (tmp_path / "acme" / "n.jsonl").exists() and (tmp_path / "globex" / "n.jsonl").exists()
    with pytest.raises(DeliveryFailed):
        await channel.send(Notice("..", "id-3", "file", "n.jsonl", 1, {}))


async def test_a_partial_line_is_ended_before_the_next_notice(tmp_path: Path) -> None:
    """A failed attempt that left half a line (short write, crash) does not swallow the
    retry: the retry's line starts on a line of its own and parses."""
    channel = FileChannel(tmp_path)
    target = channel.path_of("acme", "n.jsonl")
    target.parent.mkdir(parents=True)
    target.write_bytes(b'{"delivery_id": "00000000-0000-0000-0000-000000000001", "att')
    await channel.send(notice("n.jsonl", attempt=2))
    lines = target.read_text().split("\n")
    assert lines[0].startswith('{"delivery_id"') and lines[2] == ""
    assert json.loads(lines[1])["attempt"] == 2


@pytest.mark.parametrize("setup", ["directory", "file-parent"])
async def test_a_destination_that_cannot_be_a_file_is_permanent(tmp_path: Path, setup: str) -> None:
    """A destination that is a directory, or whose parent is a file, never works: dead at
    once instead of retried until max_attempts."""
    channel = FileChannel(tmp_path)
    (tmp_path / "acme").mkdir()
    if setup == "directory":
        (tmp_path / "acme" / "n.jsonl").mkdir()
        destination = "n.jsonl"
    else:
        (tmp_path / "acme" / "plain").write_text("")
        destination = "plain/n.jsonl"
    with pytest.raises(DeliveryFailed) as caught:
        await channel.send(notice(destination))
    assert caught.value.retryable is False


# ---------------------------------------------------------------- signatures


SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("change", "why"),
    [({"webhook-signature": "v1,@@not-base64@@"}, "no valid signature"),
     ({"webhook-timestamp": "9" * 30}, "bad webhook-timestamp"),
     ({"webhook-timestamp": "abc"}, "bad webhook-timestamp"),
     ({"webhook-id": ""}, "missing Standard Webhooks headers")],
)
def test_malformed_headers_are_signature_invalid(change: dict[str, str], why: str) -> None:
    """Whatever arrives, verify answers SignatureInvalid (the receiver's 400), never
    another exception (a 500 that invites retries)."""
    body = '{"a":1}'
    headers = signed_headers("dlv-1", body, (SECRET,), NOW) | change
    with pytest.raises(SignatureInvalid, match=why):
        verify((SECRET,), headers, body.encode(), NOW)


def test_a_body_that_is_not_utf8_is_signature_invalid() -> None:
    headers = signed_headers("dlv-1", "x", (SECRET,), NOW)
    with pytest.raises(SignatureInvalid, match="not UTF-8"):
        verify((SECRET,), headers, b"\xff\xfe", NOW)


def test_the_library_verifies_what_we_sign() -> None:
    """Interoperability: standardwebhooks' own verify accepts our headers and body."""
    body = json.dumps({"text": "Zürich 5 000 USD"}, ensure_ascii=False)
    now = datetime.now(UTC)
    headers = signed_headers("dlv-1", body, (SECRET,), now)
    assert Webhook(SECRET).verify(body.encode(), headers) == {"text": "Zürich 5 000 USD"}


# ---------------------------------------------------------------- webhook responses


async def _respond_with(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> str:
    """Send one notice to a live server that answers as given; the channel's result."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async with serve(app) as url:
        async def resolve(tenant: str, name: str) -> Endpoint:
            return Endpoint(url, (SECRET,))
        channel = WebhookChannel(resolve, now=lambda: datetime.now(UTC), timeout=5)
        try:
            return await channel.send(notice("hook"))
        finally:
            await channel.aclose()


async def test_a_garbled_compressed_error_body_is_a_retryable_failure() -> None:
    with pytest.raises(DeliveryFailed) as caught:
        await _respond_with(502, [(b"content-encoding", b"gzip")], b"not gzip at all")
    assert (caught.value.retryable, caught.value.status_code) == (True, 502)


async def test_a_garbled_compressed_success_body_is_still_a_success() -> None:
    """The body of a 2xx is not read: the receiver said it has the notice."""
    assert await _respond_with(200, [(b"content-encoding", b"gzip")], b"nope") == "200 OK"


async def test_a_redirect_is_permanent_and_names_the_new_location() -> None:
    with pytest.raises(DeliveryFailed) as caught:
        await _respond_with(308, [(b"location", b"https://elsewhere.example/hook")], b"")
    assert caught.value.retryable is False and caught.value.status_code == 308
    assert "https://elsewhere.example/hook" in str(caught.value)


async def test_an_error_body_is_read_only_in_part() -> None:
    with pytest.raises(DeliveryFailed) as caught:
        await _respond_with(500, [], b"x" * 5_000_000)
    assert len(str(caught.value)) < 400


# ---------------------------------------------------------------- quiet hours


def prefs(zone: str, start: str, end: str) -> Preferences:
    return Preferences(zone=zone, quiet_start=time.fromisoformat(start),
                       quiet_end=time.fromisoformat(end))


@pytest.mark.parametrize(
    ("zone", "start", "end", "now", "expected"),
    [  # New York falls back 2026-11-01 02:00 EDT -> 01:00 EST; quiet 23:00-01:30
        ("America/New_York", "23:00", "01:30", "2026-11-01T05:10:00Z", "2026-11-01T05:30:00Z"),
        ("America/New_York", "23:00", "01:30", "2026-11-01T06:10:00Z", None),
        # Lord Howe falls back 30 min: 2026-04-05 02:00 +11 -> 01:30 +10:30; quiet 22:00-01:45
        ("Australia/Lord_Howe", "22:00", "01:45", "2026-04-04T14:40:00Z", "2026-04-04T14:45:00Z"),
        ("Australia/Lord_Howe", "22:00", "01:45", "2026-04-04T15:05:00Z", None),
        # Berlin springs forward 2026-03-29 02:00 -> 03:00; quiet 22:00-02:30 ends at the gap's end
        ("Europe/Berlin", "22:00", "02:30", "2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z"),
    ],
)
def test_quiet_hours_end_once_across_dst(zone: str, start: str, end: str, now: str,
                                         expected: str | None) -> None:
    """Quiet hours end at the first instant of their end wall time; in the repeated hour
    after that instant they are over (the notice goes now), as a calendar occurrence
    fires once per repeated wall time."""
    got = quiet_hours_end(prefs(zone, start, end), datetime.fromisoformat(now))
    assert got == (None if expected is None else datetime.fromisoformat(expected))


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "UTC"]


@settings(max_examples=400, deadline=None)
@given(zone=st.sampled_from(ZONES),
       start=st.times().map(lambda t: t.replace(second=0, microsecond=0)),
       end=st.times().map(lambda t: t.replace(second=0, microsecond=0)),
       now=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1),
                        timezones=st.just(UTC)))
def test_quiet_hours_end_is_in_the_future_and_outside_quiet_hours(
        zone: str, start: time, end: time, now: datetime) -> None:
    """Whenever a notice is held, it is held until a later instant, and at that instant
    it is no longer held (no deferral loop, no deferral into the past)."""
    p = Preferences(zone=zone, quiet_start=start, quiet_end=end)
    until = quiet_hours_end(p, now)
    if until is not None:
        assert until > now
        assert quiet_hours_end(p, until) is None
