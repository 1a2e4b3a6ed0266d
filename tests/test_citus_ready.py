"""The schema is ready to distribute by tenant on Citus (docs/SCALE.md), checked without
Citus (it is not installable here, and nothing here emulates it).

Two checks. From the catalog of a freshly migrated database: every primary key, unique
constraint and foreign key of a tenant table includes ``tenant_id`` (a foreign key
between tenant tables maps ``tenant_id`` to ``tenant_id``: the two rows are colocated),
and the reference and coordinator tables reference no tenant table. From the named
queries the admission, claim and history paths use (found in those modules' source):
each pins one tenant (``tenant_id = $n``), keys every row by its tenant (a batch joined to
staged keys, an insert that names ``tenant_id``), or reads only reference tables — except
the statements docs/SCALE.md lists, each with what it does on Citus and what to do.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from watchkeeper.runtime.store._db import QUERIES

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
SCALE = ROOT / "docs" / "SCALE.md"

# Replicated to every node (create_reference_table): small, read by every tenant's rows,
# or keyed by something other than a tenant (an API key's id).
REFERENCE_TABLES = {"tenants", "api_keys"}
# Left on the coordinator as plain tables: never joined with a tenant table.
COORDINATOR_TABLES = {"supervisors", "schema_migrations"}

# The modules of each path; the named queries each uses are the names it quotes.
PATHS = {
    "admission": ("runtime/engine/_tick.py", "runtime/engine/_admission.py",
                  "runtime/engine/_scheduler.py", "runtime/engine/_poller.py",
                  "runtime/engine/_poll_decide.py"),
    "claim": ("runtime/engine/_worker.py", "runtime/engine/_effects.py",
              "runtime/engine/_delivery_store.py"),
    "history": ("runtime/usecases/_history.py", "runtime/usecases/_polls.py",
                "runtime/usecases/_definition_views.py"),
}

# The statements of these paths that do not stay on one tenant's shard, and how the
# classifier below sees them: 'every shard' (each tenant table joined to the others on
# tenant_id, so Citus runs it on every shard, colocated) or 'not by tenant' (a tenant
# table read by something else: a spec hash, an instant). docs/SCALE.md says what each
# does on Citus and what to do about it.
ACROSS_TENANTS = {
    "definitions_due_lock": "every shard",
    "definitions_due": "every shard",
    "conditions_due_lock": "every shard",
    "next_due": "not by tenant",
    "specs_by_hash": "not by tenant",
    "registrations_by_hash": "not by tenant",
    "revisions_compile": "not by tenant",
    "occurrences_run_stale": "not by tenant",
    "tasks_release_orphaned_holds": "every shard",
    "condition_polls_abandon": "not by tenant",
    "tasks_claim": "not by tenant",
    "tasks_take_over": "not by tenant",
    "task_unclaimable_expired_lock": "not by tenant",
    "deliveries_claim": "not by tenant",
    "definitions_list": "one tenant",
    "events_page": "one tenant",
    "history_page": "one tenant",
}

_REF = re.compile(r"\b(from|join|update|into)\s+(?:only\s+)?([a-z_]+)(?:\s+(?:as\s+)?([a-z_]+))?")
_KEYWORDS = {"where", "set", "on", "join", "left", "inner", "using", "order", "group",
             "limit", "for", "returning", "select", "values", "cross", "lateral", "as"}


def _normalized(sql: str) -> str:
    """Lower case without comments, row-lock clauses (``FOR UPDATE OF d`` names no table)
    and CASE expressions (``CASE WHEN $5 IS NULL THEN ... ELSE tenant_id = $5 END`` is an
    optional filter, not a pin)."""
    text = re.sub(r"--[^\n]*", "", sql).lower()
    text = re.sub(r"\bfor\s+(update|share)(\s+of\s+[a-z_]+(\s*,\s*[a-z_]+)*)?", " ", text)
    return re.sub(r"\bcase\b.*?\bend\b", " ", text, flags=re.S)


def _aliases(text: str) -> dict[str, str]:
    return {alias or table: table for _, table, alias in _REF.findall(text)
            if alias not in _KEYWORDS} | {table: table for _, table, _ in _REF.findall(text)}


def classify(sql: str, tenant_tables: set[str]) -> str:
    """How a statement reaches tenant rows: 'reference' (no tenant table), 'one tenant'
    (a tenant table pinned by ``tenant_id = $n`` or a literal), 'keyed' (rows keyed by a
    staged or unnested tenant_id, or inserted with one), 'every shard' (tenant tables
    only joined to each other on tenant_id) or 'not by tenant' (a tenant table with no
    tenant_id equality at all)."""
    text = _normalized(sql)
    aliases = _aliases(text)
    kinds: list[str] = []
    for match in _REF.finditer(text):
        verb, table, alias = match.groups()
        if table not in tenant_tables:
            continue
        if verb == "into":
            columns = re.match(r"\s*(?:as\s+[a-z_]+\s*)?\(([^)]*)\)", text[match.end(2):])
            named = columns is not None and "tenant_id" in {
                c.strip() for c in columns.group(1).split(",")}
            kinds.append("keyed" if named else "none")
            continue
        name = table if alias is None or alias in _KEYWORDS else alias
        sides = re.findall(rf"(?<![\w.]){name}\.tenant_id\s*=\s*([^\s,)]+)", text)
        sides += re.findall(rf"([^\s(,]+)\s*=\s*{name}\.tenant_id\b", text)
        if name == table:
            sides += re.findall(r"(?<![.\w])tenant_id\s*=\s*([^\s,)]+)", text)
        seen = set()
        for side in sides:
            if re.fullmatch(r"\$\d+(::\w+)?|'[^']*'", side):
                seen.add("pinned")
            else:
                other = aliases.get(side.split(".")[0], side.split(".")[0])
                seen.add("joined" if other in tenant_tables else "keyed")
        if not seen and re.search(r"\busing\s*\([^)]*\btenant_id\b", text):
            seen.add("keyed")  # JOIN staged keys USING (tenant_id, ...)
        kinds.append(next((k for k in ("pinned", "keyed", "joined") if k in seen), "none"))
    if not kinds:
        return "reference"
    if "none" in kinds:
        return "not by tenant"
    if "pinned" in kinds:
        return "one tenant"
    return "keyed" if "keyed" in kinds else "every shard"


def path_queries() -> dict[str, set[str]]:
    """The named queries each path's modules quote, by path."""
    return {path: {name for module in modules
                   for name in re.findall(r'"([a-z_]+)"', (ROOT / module).read_text())
                   if name in QUERIES}
            for path, modules in PATHS.items()}


async def _tables(conn: asyncpg.Connection) -> dict[str, bool | None]:
    """Every table of the schema: True when its tenant_id is NOT NULL, False when
    nullable, None when it has none."""
    rows = await conn.fetch("""
        SELECT c.relname, a.attnotnull
        FROM pg_class c
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id'
                                AND NOT a.attisdropped
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'""")
    return {r["relname"]: r["attnotnull"] for r in rows}


async def test_every_key_of_a_tenant_table_includes_tenant_id(db_dsn: str) -> None:
    """Every primary key, unique constraint and foreign key of a tenant table includes
    tenant_id, a foreign key to another tenant table pairs tenant_id with tenant_id, and
    reference and coordinator tables point at no tenant table (read from pg_constraint
    of a freshly migrated database)."""
    conn = await asyncpg.connect(db_dsn, server_settings={"search_path": "watchkeeper"})
    try:
        tables = await _tables(conn)
        constraints = await conn.fetch("""
            SELECT k.conname, k.contype::text AS type, c.relname AS tbl,
                   f.relname AS ref,
                   ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u (n, i)
                         JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
                         ORDER BY u.i) AS cols,
                   ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY u (n, i)
                         JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n
                         ORDER BY u.i) AS ref_cols
            FROM pg_constraint k
            JOIN pg_class c ON c.oid = k.conrelid
            LEFT JOIN pg_class f ON f.oid = k.confrelid
            WHERE c.relnamespace = current_schema()::regnamespace
              AND k.contype IN ('p', 'u', 'f')""")
    finally:
        await conn.close()
    tenant = {name for name, not_null in tables.items() if not_null} - REFERENCE_TABLES
    # every table is classified, and the document names each class's tables
    assert set(tables) == tenant | REFERENCE_TABLES | COORDINATOR_TABLES
    assert not {name for name in COORDINATOR_TABLES if tables[name] is not None}
    doc = SCALE.read_text()
    assert [name for name in sorted(tables) if f"`{name}`" not in doc] == []
    assert len(tenant) >= 20  # what the migrations make today, so the test cannot pass empty

    wrong = []
    for k in constraints:
        if k["tbl"] in tenant and "tenant_id" not in k["cols"]:
            wrong.append(f"{k['tbl']}.{k['conname']}: {k['cols']} lacks tenant_id")
        if k["type"] == "f" and k["ref"] in tenant:
            paired = dict(zip(k["cols"], k["ref_cols"], strict=True)).get("tenant_id")
            if k["tbl"] not in tenant:
                wrong.append(f"{k['tbl']}.{k['conname']}: a non-tenant table references "
                             f"tenant table {k['ref']}")
            elif paired != "tenant_id":
                wrong.append(f"{k['tbl']}.{k['conname']}: tenant_id maps to {paired}")
    assert wrong == []
    # the keys that carry the at-most-once and fencing guarantees are among those checked
    checked = {(k["tbl"], tuple(k["cols"])) for k in constraints}
    assert ("occurrences", ("tenant_id", "definition_id", "binding_id", "slot", "kind")) in checked
    assert ("users", ("token_sha256", "tenant_id")) in checked
    assert ("page_sessions", ("session_sha256", "tenant_id")) in checked


def test_the_classifier_tells_pinned_keyed_and_unfiltered_statements_apart() -> None:
    """The classifier itself, on statements whose answer is known."""
    tenant = {"tasks", "runs"}
    assert classify("SELECT * FROM tasks WHERE tenant_id = $1 AND task_id = $2",
                    tenant) == "one tenant"
    assert classify("SELECT * FROM tasks WHERE status = 'pending' LIMIT 1", tenant) == \
        "not by tenant"
    assert classify("SELECT * FROM tasks t JOIN unnest($1::text[]) AS k (tenant_id) "
                    "ON t.tenant_id = k.tenant_id", tenant) == "keyed"
    assert classify("SELECT * FROM tasks t JOIN runs r ON r.tenant_id = t.tenant_id "
                    "AND r.task_id = t.task_id FOR UPDATE OF t", tenant) == "every shard"
    assert classify("UPDATE tasks SET x = 1 WHERE CASE WHEN $1::text IS NULL THEN true "
                    "ELSE tenant_id = $1 END", tenant) == "not by tenant"
    assert classify("INSERT INTO runs (tenant_id, run_id) VALUES ($1, $2)", tenant) == "keyed"
    assert classify("INSERT INTO runs (run_id) VALUES ($1)", tenant) == "not by tenant"
    assert classify("SELECT clock_timestamp()", tenant) == "reference"


async def test_admission_claim_and_history_queries_stay_on_their_tenant(db_dsn: str) -> None:
    """Every named query of the admission, claim and history paths pins one tenant, keys
    each row by its tenant, or reads only reference tables; the others are exactly the
    statements docs/SCALE.md lists, each classified as listed there."""
    conn = await asyncpg.connect(db_dsn, server_settings={"search_path": "watchkeeper"})
    try:
        tables = await _tables(conn)
    finally:
        await conn.close()
    tenant = {name for name, not_null in tables.items() if not_null} - REFERENCE_TABLES
    tenant.add("history_rows")  # the history's view: occurrences and the facts after them
    used = path_queries()
    assert {path: len(names) >= 10 for path, names in used.items()} == {
        "admission": True, "claim": True, "history": True}
    everything = set().union(*used.values())
    found = {name: classify(QUERIES[name], tenant) for name in sorted(everything)}
    across = {name: kind for name, kind in found.items()
              if kind not in ("one tenant", "keyed", "reference")}
    assert across == {name: kind for name, kind in ACROSS_TENANTS.items()
                      if kind not in ("one tenant", "keyed")}
    # the listed ones are on these paths and classified as listed; the doc names each
    assert {name: found.get(name) for name in ACROSS_TENANTS} == ACROSS_TENANTS
    doc = SCALE.read_text()
    assert [name for name in ACROSS_TENANTS if f"`{name}`" not in doc] == []
