"""A short run of the fault harness (``bench/faults.py``) against the test server.

The harness is a subprocess: it creates its own database on the server of ``db_dsn``,
starts three supervisor processes, injects every kind of fault for 20 s, settles,
drains, and prints each invariant (it exits 1 if one is violated). Here every
invariant line must read 0 and enough occurrences must have been due and tasks run
for the faults to have had something to break.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import asyncpg
import pytest

from watchkeeper.runtime._errors import DatabaseUnavailable
from watchkeeper.runtime.store._db import Database

pytestmark = pytest.mark.anyio

HARNESS = Path(__file__).resolve().parent.parent / "bench" / "faults.py"


def figure(output: str, name: str) -> int:
    """The number printed before ``name`` in the harness's output."""
    found = re.search(rf"^\s+(\d+)\s+{re.escape(name)}", output, re.MULTILINE)
    assert found is not None, f"no figure {name!r} in:\n{output}"
    return int(found.group(1))


async def test_every_invariant_holds_under_faults(db_dsn: str) -> None:
    """20 s of faults (seed 7, one every 2 s on average), 40 interval definitions every
    second, 4 cron and 4 condition definitions: nothing lost, nothing run or applied
    twice, no report under a stale token, no webhook-id processed twice."""
    with anyio.fail_after(180):
        done = await anyio.run_process(
            [sys.executable, str(HARNESS), "--dsn", db_dsn, "--seconds", "20", "--seed", "7",
             "--fault-every", "2", "--intervals", "40", "--crons", "4", "--conditions", "4"],
            check=False)
    output = done.stdout.decode() + done.stderr.decode()
    section = output.split("invariants (each must be 0):", 1)
    assert len(section) == 2, output
    lines = [line for line in section[1].splitlines() if re.match(r"^\s+\d+\s", line)]
    assert len(lines) >= 12, output
    assert all(int(line.split()[0]) == 0 for line in lines), output
    assert done.returncode == 0, output
    assert figure(output, "occurrences due (interval + cron, computed)") >= 40 * 18
    assert figure(output, "tasks") >= 100, output
    assert figure(output, "webhook-ids processed by the receiver") >= 50, output


async def test_a_backend_terminated_inside_a_transaction_is_transient(db_dsn: str) -> None:
    """Found by the harness: a backend terminated while a transaction is open on it. asyncpg
    then releases the pooled connection by itself and its proxy refuses every call, so
    the rollback guard's ``is_closed()`` raised ``InterfaceError`` out of the transaction,
    a non-transient error that ended the whole supervisor process. It must come out as
    :class:`DatabaseUnavailable` (the loops restart on it)."""
    async with Database.open(db_dsn, migrate=False) as db:
        admin = await asyncpg.connect(db_dsn)
        try:
            with pytest.raises(DatabaseUnavailable):
                async with db.transaction() as tx:
                    pid = await tx.raw.fetchval("SELECT pg_backend_pid()")
                    await admin.execute("SELECT pg_terminate_backend($1)", pid)
                    await anyio.sleep(0.3)  # the client sees the socket close meanwhile
                    await tx.fetchval("effect_get", "t", "k")
        finally:
            await admin.close()
        assert await db.pool.fetchval("SELECT 1") == 1  # the pool recovers
