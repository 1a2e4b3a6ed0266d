"""``watchkeeper replay --json`` is a stable contract: the README's two examples print,
line for line, what they printed before the replay was made fast. The expected lines
(``tests/data/replay_*.jsonl.gz``) were captured from ``watchkeeper replay ... --json``
at commit 7159e3b (each poll through the claim and admission transactions); only task
ids, which come from a database sequence, are renumbered in order of appearance."""

from __future__ import annotations

import gzip
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from watchkeeper.runtime.engine import _poller as poller_module
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


MIXED = '''
[[definitions]]
id = "aapl-first"
version = 1
delivery = [{ channel = "file", destination = "aapl.jsonl" }]
[definitions.trigger]
type = "condition"
mode = "first_match"
source = { name = "series", version = "1" }
poll_every = "P3D"
[definitions.trigger.predicate]
subject = "AAPL"
op = "<="
threshold = "90 USD/share"
freshness = "P45D"

[[definitions]]
id = "ibm-edges"
version = 1
[definitions.trigger]
type = "condition"
mode = "every_edge"
cooldown = "P90D"
source = { name = "series", version = "1" }
poll_every = "P2D"
[definitions.trigger.predicate]
any = [{ subject = "IBM", op = ">=", threshold = "120 USD/share" },
       { subject = "GOOG", op = ">=", threshold = "700 USD/share" }]

[[definitions]]
id = "msft-budget"
version = 1
limits = { max_polls_per_period = 8, period = "month" }
[definitions.trigger]
type = "condition"
mode = "every_edge"
source = { name = "series", version = "1" }
poll_every = "P3D"
[definitions.trigger.predicate]
subject = "MSFT"
op = ">="
threshold = "30 USD/share"

[[definitions]]
id = "amzn-ends"
version = 1
ends = { after = 100 }
[definitions.trigger]
type = "condition"
mode = "every_edge"
source = { name = "series", version = "1" }
poll_every = "P5D"
[definitions.trigger.predicate]
subject = "AMZN"
op = ">="
threshold = "40 USD/share"
freshness = "P40D"
'''

_SEQUENCED = {"task_id", "run_id", "lease_token", "attempt_id", "delivery_id", "output_ref",
              "content_sha256", "task"}
_SHA = re.compile(r"sha256 [0-9a-f]{12}")  # a previous report's hash, named in a report
_REAL_CLOCK = {("tenants", "created_at"), ("users", "created_at"), ("users", "token_sha256")}


async def stored(db: Database, tenant: str) -> dict[str, list[str]]:
    """Every row of every tenant table of ``tenant``, as sorted text: the tenant's name
    replaced, ids from sequences (and what is derived from them: a report's hash over a
    text naming the tenant, a delivery id) and the real-clock creation of the tenant and
    its user left out."""
    rows: dict[str, list[str]] = {}
    tables = await db.pool.fetch(
        "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
        "USING (table_schema, table_name) WHERE c.column_name = 'tenant_id' "
        "AND t.table_type = 'BASE TABLE' AND c.table_schema = current_schema() ORDER BY 1")
    for (table,) in tables:
        found = await db.pool.fetch(f"SELECT * FROM {table} WHERE tenant_id = $1",  # noqa: S608
                                    tenant)
        rows[table] = sorted(json.dumps({k: _SHA.sub("sha256 H", str(v).replace(tenant, "T"))
                                         for k, v in dict(r).items()
                                         if k not in _SEQUENCED and (table, k) not in _REAL_CLOCK},
                                        sort_keys=True) for r in found)
    return rows


async def kept_replay(db: Database, definitions: Any, source: SeriesSource, start: datetime,
                      end: datetime, home: Path, *, batched: bool
                      ) -> tuple[list[str], dict[str, list[str]], Any]:
    """Replay with ``keep``: its --json lines (renumbered), every row it stored
    (:func:`stored`) and its summary."""
    lines: list[str] = []
    summary = await replay(db, definitions, source, start=start, end=end, home=home,
                           keep=True, batched=batched,
                           on_event=lambda e: lines.append(json.dumps(e)))
    return renumbered(lines), await stored(db, summary.tenant_id), summary


async def test_batched_replay_stores_and_prints_what_polling_each_instant_does(
        db: Database, tmp_path: Path) -> None:
    """Four definitions over three years of the stocks series (a first_match, an
    every_edge with a cooldown over two subjects, one with a polling budget that runs out
    every month, one whose schedule ends): the batched replay prints the same lines and stores the same
    rows, in every table, as the replay that polls every instant through the poller."""
    path = tmp_path / "mixed.toml"
    path.write_text(MIXED)
    definitions = load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    start, end = datetime(2007, 1, 1, tzinfo=UTC), datetime(2009, 12, 31, tzinfo=UTC)
    step_lines, step_rows, step = await kept_replay(db, definitions, source, start, end,
                                                    tmp_path, batched=False)
    batch_lines, batch_rows, batch = await kept_replay(db, definitions, source, start, end,
                                                       tmp_path, batched=True)
    assert batch_lines == step_lines
    assert batch_rows == step_rows
    assert (batch.polls, batch.actions, batch.tasks) == (step.polls, step.actions, step.tasks)
    actions = step.actions
    assert {"fired", "none", "suppressed_cooldown", "denied_poll_budget"} <= set(actions)
    assert len(step_rows["condition_polls"]) == step.polls > 1000


def many_definitions(count: int) -> str:
    """``count`` weekly condition definitions (TOML) over four subjects of the stocks
    series: thresholds around each subject's price, both directions, a quarter
    first_match, some every_edge with a 90-day cooldown."""
    prices = {"AAPL": 10, "MSFT": 30, "IBM": 90, "AMZN": 40}
    tables = []
    for n in range(count):
        subject = list(prices)[n % 4]
        mode = "first_match" if n % 4 == 0 else "every_edge"
        cooldown = 'cooldown = "P90D"\n' if n % 5 == 0 and mode == "every_edge" else ""
        tables.append(f"""[[definitions]]
id = "d{n:03}"
version = 1
title = "watch {n}"
delivery = []
[definitions.trigger]
type = "condition"
mode = "{mode}"
{cooldown}source = {{ name = "series", version = "1" }}
poll_every = "P7D"
[definitions.trigger.predicate]
subject = "{subject}"
op = "{("<=", ">=")[(n // 2) % 2]}"
threshold = "{prices[subject] + n % 7 - 3} USD/share"
freshness = "P45D"
unit = "USD/share"
""")
    return "\n".join(tables)


async def test_a_replay_whose_instants_take_two_passes_decides_quiet_polls_at_the_claim(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """240 definitions polled through the poller (batched=False) take two passes an
    instant (its batch is 200): the second pass finds the first's readings kept and
    decides its quiet polls at the claim. It prints the same lines and stores the same
    rows, in every table, as the same replay with no poll decided at the claim (each
    through step 3)."""
    path = tmp_path / "many.toml"
    path.write_text(many_definitions(240))
    definitions = load_replay_definitions(path, min_interval=DEFAULT_MIN_INTERVAL)
    source = SeriesSource.from_csv(EXAMPLES / "series" / "stocks.csv")
    start, end = datetime(2000, 1, 1, tzinfo=UTC), datetime(2000, 7, 1, tzinfo=UTC)
    at_claim = poller_module._decided_at_claim  # noqa: SLF001 - the shortcut under test
    decided: list[int] = []

    async def counted(*args: Any) -> Any:
        out = await at_claim(*args)
        decided.append(len(out))
        return out

    async def never(*_: Any) -> dict[Any, Any]:
        return {}

    results = []
    for shortcut in (counted, never):
        monkeypatch.setattr(poller_module, "_decided_at_claim", shortcut)
        results.append(await kept_replay(db, definitions, source, start, end, tmp_path,
                                         batched=False))
    (fused_lines, fused_rows, fused), (step_lines, step_rows, step) = results
    assert sum(decided) > 500  # quiet polls decided at their claim
    assert fused_lines == step_lines
    assert fused_rows == step_rows
    assert (fused.polls, fused.actions, fused.tasks) == (step.polls, step.actions, step.tasks)
    assert {"fired", "none", "suppressed_cooldown"} <= set(step.actions)
    assert len(step_rows["condition_polls"]) == step.polls > 3000
