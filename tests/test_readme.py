"""The README's examples are executed as written: the Python API's (an app proposes from
a dict, shows the preview and the hash, confirms as the owner, runs a supervisor with its
own agent object, pages the history and reads the report) and the quick start's chat app
walk-through (MCP proposal, confirmation through an app key, a signed notice, the report,
the history over the API and on the page)."""

from __future__ import annotations

import json
import os
import re
import socket
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


CHAT_AGENT = "<!-- the chat agent: tests/test_readme.py runs it -->"
CHAT_APP = "<!-- the chat app: tests/test_readme.py runs it -->"


def block_after(marker: str, language: str) -> str:
    """The fenced block of ``language`` that follows ``marker`` in README.md."""
    after = (ROOT / "README.md").read_text().split(marker, 1)[1]
    match = re.match(rf"\s*```{language}\n(.*?)```", after, re.S)
    assert match is not None, marker
    return match.group(1)


def free_port() -> int:
    """A TCP port nobody listens on now (the README's 8000 and 8099 may be taken)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_the_chat_app_walkthrough_runs(db: Database, db_dsn: str, tmp_path: Path) -> None:
    """Quick start, "Integrate with a chat app", every command as written (only the two
    ports moved to free ones) under ``bash -e``: the agent's MCP proposal has the five
    next Wednesdays 20:00 Paris and the hash that is stored; the app confirms for alice
    through its key (recorded so); the manual task completes; exactly one signed notice
    reaches the receiver, naming that task and the committed report's hash; the report
    and alice's history come back over the API; and signed in with alice's token the
    history page shows the task."""
    api_port, hook_port = free_port(), free_port()
    moved = lambda text: text.replace("8000", str(api_port)).replace("8099", str(hook_port))  # noqa: E731
    (tmp_path / "agent.py").write_text(moved(block_after(CHAT_AGENT, "python")))
    page_check = (  # the test's own last steps: sign in on the page as alice, fetch it
        f'curl -sf -c jar -o /dev/null -H "Origin: http://127.0.0.1:{api_port}" '
        f'--data-urlencode "token=$ALICE_TOKEN" http://127.0.0.1:{api_port}/sign-in\n'
        f"curl -sf -b jar http://127.0.0.1:{api_port}/definitions/holdings > page.html\n")
    script = ("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n"
              + moved(block_after(CHAT_APP, "sh")) + page_check)
    (tmp_path / "walkthrough.sh").write_text(script)
    env = {**os.environ, "DATABASE_URL": db_dsn, "WATCHKEEPER_HOME": str(tmp_path / "home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("WATCHKEEPER_SCHEMA", None)
    with anyio.fail_after(120):
        result = await anyio.run_process(["bash", str(tmp_path / "walkthrough.sh")], env=env,
                                          check=False, cwd=tmp_path)
    out, errors = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, out + errors

    proposal = json.loads((tmp_path / "proposal.json").read_text())
    stored = await db.pool.fetchrow(
        "SELECT r.spec_hash, r.proposed_by, r.confirmed_by, d.status FROM definition_revisions r "
        "JOIN definitions d USING (tenant_id, definition_id) "
        "WHERE tenant_id = 'acme' AND definition_id = 'holdings' AND revision = 1")
    app_key = await db.pool.fetchval("SELECT key_id FROM api_keys WHERE kind = 'app'")
    assert (proposal["revision"], proposal["spec_hash"]) == (1, stored["spec_hash"])
    assert (stored["status"], stored["confirmed_by"]) == (
        "active", f"user:acme/alice via app key {app_key}")
    paris = [datetime.fromisoformat(n["local"]) for n in proposal["next"]]
    assert len(paris) == 5 and all((p.weekday(), p.hour, p.minute) == (2, 20, 0) for p in paris)
    assert all(p.utcoffset() == p.astimezone(ZoneInfo("Europe/Paris")).utcoffset() for p in paris)
    assert [(b - a).days for a, b in zip(paris, paris[1:], strict=False)] == [7, 7, 7, 7]
    assert proposal["spec_hash"] in out.splitlines()  # the app showed the hash

    task = await db.pool.fetchrow("SELECT task_id, status FROM tasks WHERE tenant_id = 'acme'")
    report = await db.pool.fetchrow(
        "SELECT content_sha256, verified FROM reports WHERE tenant_id = 'acme'")
    assert (task["status"], report["verified"]) == ("completed", True)
    (notice,) = [json.loads(line) for line in
                 (tmp_path / "notices.jsonl").read_text().splitlines()]
    assert (notice["type"], notice["data"]["task_id"], notice["data"]["content_sha256"]) == (
        "report.committed", task["task_id"], report["content_sha256"])
    delivered = await db.pool.fetchval(
        "SELECT status FROM deliveries WHERE tenant_id = 'acme' AND channel = 'webhook'")
    assert delivered == "delivered"
    assert "# Holdings review\n" in out and "Review my holdings; tell me only what changed." in out
    history = json.loads(next(line for line in out.splitlines() if line.startswith('{"items"')))
    (entry,) = history["items"]
    assert (entry["task_id"], entry["task_status"], entry["kind"]) == (
        task["task_id"], "completed", "manual")
    page = (tmp_path / "page.html").read_text()
    assert f'href="/tasks/{task["task_id"]}"' in page and "Holdings review" in page
    assert f"via app key {app_key}" in page
