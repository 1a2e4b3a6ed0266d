"""``watchkeeper replay --json`` is a stable contract: the README's two examples print,
line for line, what they printed before the replay was made fast. The expected lines
(``tests/data/replay_*.jsonl.gz``) were captured from ``watchkeeper replay ... --json``
at commit 7159e3b (each poll through the claim and admission transactions); only task
ids, which come from a database sequence, are renumbered in order of appearance."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from watchkeeper.runtime.store._db import Database
from watchkeeper.runtime.usecases import load_replay_definitions, replay
from watchkeeper.sources import SeriesSource
from watchkeeper.triggers._spec import DEFAULT_MIN_INTERVAL

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DATA = Path(__file__).resolve().parent / "data"


def renumbered(lines: list[str]) -> list[str]:
    """The JSON lines with each task id replaced by its rank of first appearance."""
    ranks: dict[int, int] = {}
    out = []
    for line in lines:
        event = json.loads(line)
        if event.get("task") is not None:
            event["task"] = ranks.setdefault(event["task"], len(ranks) + 1)
        out.append(json.dumps(event))
    return out


async def printed(db: Database, tmp_path: Path, toml: str, csv_name: str) -> list[str]:
    """The lines ``replay --json`` prints for an example (the CLI writes
    ``json.dumps(event)`` per event)."""
    definitions = load_replay_definitions(EXAMPLES / "conditions" / toml,
                                          min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / csv_name)
    span = source.span()
    assert span is not None
    lines: list[str] = []

    def show(event: dict[str, Any]) -> None:
        lines.append(json.dumps(event))

    await replay(db, definitions, source, start=span[0], end=span[1], home=tmp_path,
                 on_event=show)
    return lines


def expected(name: str) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


@pytest.mark.parametrize(("toml", "csv_name", "golden"), [
    ("stocks.toml", "stocks.csv", "replay_stocks.jsonl.gz"),
    ("seattle.toml", "seattle_weather.csv", "replay_seattle.jsonl.gz"),
])
async def test_replay_json_lines_are_unchanged(db: Database, tmp_path: Path, toml: str,
                                               csv_name: str, golden: str) -> None:
    """Every line of the example's --json output equals the captured one, in order."""
    got = renumbered(await printed(db, tmp_path, toml, csv_name))
    want = renumbered(expected(golden))
    assert len(got) == len(want)
    for number, (line, wanted) in enumerate(zip(got, want, strict=True), 1):
        assert line == wanted, f"line {number} differs"
