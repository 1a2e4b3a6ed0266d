"""Built-in channels: the file channel stays inside its base directory and appends whole
lines; the log channel logs one line per notice."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from outbox import DeliveryFailed, FileChannel, LogChannel, Notice

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
