"""The README's Python API example is executed as written: an app proposes from a dict,
shows the preview and the hash, confirms as the owner, runs a supervisor with its own
agent object, pages the history and reads the report."""

from __future__ import annotations

import os
import re
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import anyio
import pytest

from watchkeeper.runtime.store._db import Database

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- the embedding example: tests/test_readme.py runs it -->"

pytestmark = pytest.mark.anyio


def embedding_example() -> str:
    """The python block that follows the marker in README.md."""
    text = (ROOT / "README.md").read_text()
    after = text.split(MARKER, 1)[1]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match is not None
    return match.group(1)


async def test_the_embedding_example_runs(db: Database, db_dsn: str, tmp_path: Path) -> None:
    """It prints three Wednesday 20:00 Paris occurrences, the 64-digit hash, one
    completed manual occurrence and the agent's report; the store agrees; and it runs
    again on the same database (a new definition, alice's token re-issued)."""
    script = tmp_path / "embed.py"
    script.write_text(embedding_example())
    env = {**os.environ, "DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(tmp_path / "home")}
    with anyio.fail_after(60):
        result = await anyio.run_process([sys.executable, str(script)], env=env, check=False,
                                         cwd=tmp_path)
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    nexts = [datetime.fromisoformat(line.split()[2]) for line in out.splitlines()
             if line.startswith("next:")]
    paris = [n.astimezone(ZoneInfo("Europe/Paris")) for n in nexts]
    assert len(nexts) == 3 and all((p.weekday(), p.hour, p.minute) == (2, 20, 0) for p in paris)
    assert all(n.utcoffset() == p.utcoffset() for n, p in zip(nexts, paris, strict=True))
    (digest,) = re.findall(r"^spec_hash: ([0-9a-f]{64})$", out, re.M)
    assert re.search(r"^\S+Z manual completed$", out, re.M)
    assert "# Holdings review\n\nReview my holdings; notify me only if something changed." in out
    row = await db.pool.fetchrow(
        "SELECT r.spec_hash, d.status FROM definition_revisions r JOIN definitions d "
        "USING (tenant_id, definition_id) WHERE tenant_id = 'acme'")
    assert (row["spec_hash"], row["status"]) == (digest, "active")
    report = await db.pool.fetchrow("SELECT importance, verified FROM reports WHERE tenant_id = 'acme'")
    assert (report["importance"], report["verified"]) == ("high", True)
    with anyio.fail_after(60):
        again = await anyio.run_process([sys.executable, str(script)], env=env, check=False,
                                        cwd=tmp_path)
    assert again.returncode == 0, again.stderr.decode()
    assert await db.pool.fetchval("SELECT count(*) FROM reports WHERE tenant_id = 'acme'") == 2
