-- Every runtime statement, by name. Loaded once by runtime._db.load_queries.
-- Instants ($n::timestamptz) come from the caller's injected clock, never now().

-- name: migration_timeouts_off
-- Migrations wait for each other and may take long: not under the pool's timeouts.
SELECT set_config('lock_timeout', '0', false), set_config('statement_timeout', '0', false);

-- name: migration_timeouts_reset
-- Back to the session's own values (its startup parameters), as RESET would.
SELECT set_config('lock_timeout', (SELECT reset_val FROM pg_settings WHERE name = 'lock_timeout'),
                  false),
       set_config('statement_timeout',
                  (SELECT reset_val FROM pg_settings WHERE name = 'statement_timeout'), false);

-- name: migration_lock
SELECT pg_advisory_lock($1::bigint);

-- name: migration_unlock
SELECT pg_advisory_unlock($1::bigint);

-- name: migration_xact_lock
-- Behind a transaction pooler: the same key, held by the one transaction that migrates
-- (a session lock would stay on whichever server session the pooler picked).
SELECT pg_advisory_xact_lock($1::bigint);

-- name: session_probe
-- On a probe connection, inside a transaction: the server session's pid (compared with
-- the one the connection announced at startup: a pooler announces its own) and whether
-- pg_stat_activity reports transaction starts (a lost COMMIT is settled by them).
SELECT pg_backend_pid() AS pid, current_setting('track_activities')::boolean AS track_activities;

-- name: transaction_begin
-- Behind a transaction pooler, the first statement of every transaction: the search
-- path for this transaction only ($1, the quoted schema), and which server session runs
-- the transaction since when (now() is the transaction's start, pg_stat_activity's
-- xact_start), to settle a lost COMMIT.
SELECT set_config('search_path', $1, true) AS search_path, pg_backend_pid() AS pid,
       now() AS xact_start;

-- name: search_path_local
-- Behind a transaction pooler, before a statement run in a transaction of its own.
SELECT set_config('search_path', $1, true);

-- name: search_path
-- Every watchkeeper connection's search path is its own schema and nothing else
-- (a startup parameter, checked on arrival: runtime/store/_db.py).
SELECT current_setting('search_path');

-- name: session_identity
SELECT current_user AS role, current_database() AS database;

-- name: schema_present
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1);

-- name: schema_create
-- A utility statement takes no parameters: format's %I quotes the validated name.
SELECT format('CREATE SCHEMA IF NOT EXISTS %I', $1::text);

-- name: relations_in
-- Which of the relations named $2 exist in schema $1, and of which kind
-- (r table, S sequence, i index, v view, ...).
SELECT c.relname AS name, c.relkind::text AS kind
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY ($2::text[])
ORDER BY c.relname;

-- name: migrations_table
-- Unqualified: created in the first schema of the search path, watchkeeper's own.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: migrations_applied
SELECT version, sha256 FROM schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO schema_migrations (version, name, sha256) VALUES ($1, $2, $3);

-- ------------------------------------------- an install of the first release, in public
-- The first release migrated with the default search path: its tables, its sequence
-- and its schema_migrations are in public. runtime/store/_legacy.py moves them, once.

-- name: legacy_bookkeeping_columns
-- public.schema_migrations's columns, in order (ours: version, name, sha256, applied_at);
-- NULL when there is no such table.
SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relname = 'schema_migrations' AND c.relkind = 'r'
  AND a.attnum > 0 AND NOT a.attisdropped;

-- name: legacy_lock
-- Database-wide, for this transaction: $1 is the key the first release took to
-- migrate public, so a move never races that release's migrator nor another
-- schema's move of the same install.
SELECT pg_advisory_xact_lock($1::bigint);

-- name: migrations_applied_in_public
SELECT version, name, sha256 FROM public.schema_migrations ORDER BY version;

-- name: legacy_move_statements
-- One ALTER ... SET SCHEMA per relation, in the order given: $2 names, $3 kinds
-- ('r' table, 'S' sequence). A table takes its indexes, constraints, row type and
-- identity sequences along; values, grants and OIDs are kept.
SELECT format('ALTER %s public.%I SET SCHEMA %I',
              CASE o.kind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, o.name, $1::text)
FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS o (name, kind, n)
ORDER BY o.n;

-- name: staging_tables
-- Per-transaction staging: COPY (binary) in, INSERT ... SELECT out, never shared between
-- sessions. A small batch never reaches a table: Connection.stage sends it with each
-- statement that reads the table, as one array per column, the table's name in that
-- statement replaced by unnest over them (its columns and types are these). Not run as
-- one statement: Connection.stage creates the one table it fills, in
-- the transaction that fills it, from this table's statement here; ON COMMIT DROP (the
-- commit or rollback removes it), so a session holds no temporary table when it exits:
-- a session that has one drops it on its way out in a transaction whose COMMIT waits for
-- the synchronous standby, and a backend terminated while that standby is gone (the old
-- primary of a failover, shutting down) then never exits. wk_stage_admission: a tick batch (admission_write: one
-- row per candidate occurrence, the cursor columns on a plan's first row, a plan
-- without candidates as a row without a slot); its instants (*_us) are microseconds
-- since 1970-01-01 00:00 UTC (local_wall_us: of the naive wall time), which the client
-- encodes in a fiftieth of the work of a timestamptz. wk_stage_tasks: the tasks a
-- condition's fire or a review's approval admits. wk_stage_polls, wk_stage_receipts: a
-- replay's quiet polls, decided, and their receipts (quiet_polls_write).
-- wk_stage_claims, wk_stage_advances: a poll pass's claimed polls and its definitions'
-- advances (condition_polls_claim); wk_stage_decisions, wk_stage_observations,
-- wk_stage_poll_receipts, wk_stage_states: a decided chunk of polls, the observations
-- read for it (each once, by its ordinal n), the receipts naming them, and the
-- condition states the chunk left (condition_polls_decide).
CREATE TEMP TABLE IF NOT EXISTS wk_stage_admission (
    n integer, tenant_id text, definition_id text, binding_id text, slot text, kind text,
    definition_tenant_id text, revision integer, scheduled_for_us bigint,
    not_before_us bigint, expires_at_us bigint, zone text, local_wall_us bigint,
    fold smallint, decision text, reason text, late boolean, lateness_seconds double precision,
    run_status text, run_deadline_us bigint, task_status text, owner_user_id text,
    held_behind bigint, late_policy text, deadline_seconds double precision,
    max_attempts integer, params jsonb, payload jsonb, cursor_us bigint,
    slots_seen bigint, next_due_us bigint, status text
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_tasks (
    tenant_id text, definition_tenant_id text, definition_id text, binding_id text, slot text,
    kind text, revision integer, owner_user_id text, agent text, message text, params jsonb,
    delivery jsonb, audiences jsonb, status text, status_reason text, late boolean,
    late_policy text, scheduled_for timestamptz, not_before timestamptz,
    expires_at timestamptz, deadline_seconds double precision, max_attempts integer,
    held_behind bigint
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_polls (
    definition_id text, slot text, scheduled_for timestamptz, verdict text, action text,
    reason text
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_receipts (
    definition_id text, slot text, subject text, source text, source_version text,
    observation_id text, value numeric, unit text, currency text, as_of timestamptz,
    fetched_at timestamptz, status text, detail text, verdict text
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_claims (
    tenant_id text, definition_id text, binding_id text, slot text, scheduled_for_us bigint,
    revision integer, fence bigint, condition_key text, superseded integer, action text,
    reason text, verdict text, read_at_us bigint
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_advances (
    tenant_id text, definition_id text, cursor_us bigint, slots_seen bigint,
    next_due_us bigint, status text
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_decisions (
    tenant_id text, definition_id text, binding_id text, slot text, read_at_us bigint,
    verdict text, action text, reason text, task_id bigint
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_observations (
    n integer, subject text, source text, source_version text, observation_id text,
    value numeric, unit text, currency text, as_of_us bigint, fetched_at_us bigint,
    status text, detail text
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_poll_receipts (
    tenant_id text, definition_id text, binding_id text, slot text, observation integer,
    verdict text
) ON COMMIT DROP;
CREATE TEMP TABLE IF NOT EXISTS wk_stage_states (
    tenant_id text, definition_id text, binding_id text, condition_key text,
    revision integer, last_definite boolean, latched boolean, last_fired_at_us bigint,
    decided_through_us bigint
) ON COMMIT DROP;

-- name: admission_planner
-- Admission joins a batch of keys to tables that are hot in cache: index lookups are
-- cheap, so tell the planner (for this transaction only) rather than let it hash a
-- sequential scan of every definition; and plan each batch for its own keys (a cached
-- generic plan cannot see how few rows a batch touches).
SELECT set_config('random_page_cost', '1.1', true),
       set_config('plan_cache_mode', 'force_custom_plan', true);

-- name: server_clock
SELECT clock_timestamp();

-- ---------------------------------------------------------------- tenants and users

-- name: tenant_ensure
INSERT INTO tenants (tenant_id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING;

-- name: user_insert
INSERT INTO users (tenant_id, user_id, display_name, zone, token_sha256, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING user_id;

-- name: user_rotate_token
-- The page sessions the old token signed in end with it, in the same statement ($4: now).
WITH rotated AS (
    UPDATE users SET token_sha256 = $3 WHERE tenant_id = $1 AND user_id = $2
    RETURNING tenant_id, user_id
), sessions AS (
    UPDATE page_sessions p SET revoked_at = $4, revoked_why = 'token replaced'
    FROM rotated r
    WHERE p.tenant_id = r.tenant_id AND p.user_id = r.user_id AND p.revoked_at IS NULL
)
SELECT user_id FROM rotated;

-- name: user_by_token
SELECT tenant_id, user_id FROM users WHERE token_sha256 = $1;

-- name: user_get
SELECT tenant_id, user_id, display_name, zone FROM users WHERE tenant_id = $1 AND user_id = $2;

-- name: users_list
SELECT tenant_id, user_id, display_name, zone, created_at FROM users
WHERE $1::text IS NULL OR tenant_id = $1
ORDER BY tenant_id, user_id;

-- ---------------------------------------------------------------- definitions

-- name: definition_lock
SELECT * FROM definitions WHERE tenant_id = $1 AND definition_id = $2 FOR UPDATE;

-- name: definition_get
SELECT d.*, r.spec, r.spec_hash, r.registration
FROM definitions d
LEFT JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = d.effective_revision
WHERE d.tenant_id = $1 AND d.definition_id = $2;

-- name: definition_id_is_operator
SELECT tenant_id FROM definitions WHERE tenant_id = '_operator' AND definition_id = $1;

-- name: definition_id_is_user
-- Registration only (rare): a scan rather than an index every admission would update.
SELECT tenant_id FROM definitions WHERE definition_id = $1 AND origin = 'user' LIMIT 1;

-- name: definition_insert
INSERT INTO definitions (tenant_id, definition_id, origin, owner_user_id, status,
                         latest_revision, created_at, updated_at)
VALUES ($1, $2, $3, $4, 'proposed', 0, $5, $5)
ON CONFLICT DO NOTHING;

-- name: definitions_list
SELECT d.tenant_id, d.definition_id, d.origin, d.owner_user_id, d.status, d.fence,
       d.latest_revision, d.effective_revision, d.next_due_at, d.slots_seen,
       r.spec->>'title' AS title, r.spec->'trigger' AS trigger
FROM definitions d
LEFT JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = coalesce(d.effective_revision, d.latest_revision)
WHERE ($1::text IS NULL OR d.tenant_id = $1)
  AND ($2::text IS NULL OR d.owner_user_id = $2)
  AND ($3::text IS NULL OR (d.tenant_id, d.definition_id) > ($3, $4::text))
ORDER BY d.tenant_id, d.definition_id
LIMIT $5;

-- name: revision_insert
-- $13, $14: the spec compiled for the tick and its tasks' payload (store/_specs.py).
INSERT INTO definition_revisions (tenant_id, definition_id, revision, spec, spec_hash,
                                  registration, status, based_on, proposed_by, proposed_at,
                                  confirmed_by, confirmed_at, compiled, payload)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: revision_get
SELECT * FROM definition_revisions
WHERE tenant_id = $1 AND definition_id = $2 AND revision = $3;

-- name: revisions_list
SELECT revision, spec_hash, status, based_on, proposed_by, proposed_at, confirmed_by,
       confirmed_at, rejected_by, rejected_at, spec->>'title' AS title
FROM definition_revisions
WHERE tenant_id = $1 AND definition_id = $2
ORDER BY revision;

-- name: revision_confirm
UPDATE definition_revisions SET status = 'confirmed', confirmed_by = $4, confirmed_at = $5
WHERE tenant_id = $1 AND definition_id = $2 AND revision = $3 AND status = 'proposed';

-- name: revision_reject
UPDATE definition_revisions SET status = 'rejected', rejected_by = $4, rejected_at = $5
WHERE tenant_id = $1 AND definition_id = $2 AND revision = $3 AND status = 'proposed';

-- name: revisions_retire
-- Older effective revisions become superseded; older open proposals are withdrawn.
UPDATE definition_revisions
SET status = CASE WHEN status = 'proposed' THEN 'withdrawn' ELSE 'superseded' END
WHERE tenant_id = $1 AND definition_id = $2 AND revision < $3
  AND status IN ('proposed', 'confirmed', 'registered');

-- name: definition_set_latest
UPDATE definitions SET latest_revision = $3, updated_at = $4
WHERE tenant_id = $1 AND definition_id = $2;

-- name: definition_make_effective
-- A newly confirmed (or registered) revision: new fence, fresh cursor and count.
UPDATE definitions
SET effective_revision = $3, effective_since = $4, cursor_at = $5, slots_seen = 0,
    next_due_at = $6, status = $7, fence = fence + 1, updated_at = $4,
    paused_at = CASE WHEN $7 = 'paused' THEN paused_at ELSE NULL END, trigger_kind = $8
WHERE tenant_id = $1 AND definition_id = $2
RETURNING fence;

-- name: definition_set_descriptive
-- A descriptive-only edit: the effective part is unchanged, so no new fence.
UPDATE definitions SET effective_revision = $3, updated_at = $4
WHERE tenant_id = $1 AND definition_id = $2;

-- name: definition_set_status
-- $9, $10: the note and who changed the status (a pause, resume or cancel).
UPDATE definitions
SET status = $3, paused_at = $4, cursor_at = $5, slots_seen = $6, next_due_at = $7,
    fence = fence + 1, updated_at = $8, status_note = $9, status_by = $10
WHERE tenant_id = $1 AND definition_id = $2
RETURNING fence;

-- name: tasks_cancel_waiting
-- Cancel a definition's tasks that have not started; they never run. A task waiting as
-- root 2 or later has a report from its earlier root: it is asked to stop instead
-- (tasks_request_cancel), so the worker that claims it ends it with that report.
UPDATE tasks SET status = 'cancelled', status_reason = $3, finished_at = $4
WHERE definition_tenant_id = $1 AND definition_id = $2
  AND status IN ('pending', 'held', 'review_required') AND root = 1
RETURNING tenant_id, task_id;

-- name: tasks_request_cancel
-- Ask the workers of a definition's started tasks to stop.
UPDATE tasks SET cancel_requested_at = $3
WHERE definition_tenant_id = $1 AND definition_id = $2
  AND status IN ('running', 'suspended') AND cancel_requested_at IS NULL
RETURNING tenant_id, task_id;

-- name: tasks_request_cancel_later_roots
-- A cancelled definition's tasks waiting as root 2 or later: the worker that claims one
-- ends it with the report its earlier root wrote (tasks_cancel_waiting leaves them).
UPDATE tasks SET cancel_requested_at = $3
WHERE definition_tenant_id = $1 AND definition_id = $2
  AND status = 'pending' AND root > 1 AND cancel_requested_at IS NULL
RETURNING tenant_id, task_id;

-- name: event_insert
INSERT INTO schedule_events (tenant_id, definition_id, binding_id, revision, kind, first_slot,
                             last_slot, first_at, last_at, count, reason, recorded_at, recorded_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);

-- ---------------------------------------------------------------- tick and admission

-- name: definitions_due_lock
-- Phase A of a tick: the due user-confirmed calendar definitions, oldest first, after
-- the keyset position ($3, $4, $5), locked; rows another replica holds are skipped (it
-- admits them). Their planning needs no I/O, so it happens inside this transaction,
-- under these locks. busy: the owner binding has a task that has not ended (only then
-- does admission read the active tasks, for the overrun rule).
SELECT d.next_due_at, d.tenant_id, d.definition_id, d.owner_user_id, d.fence,
       d.effective_revision, d.cursor_at, d.slots_seen, r.spec_hash,
       r.compiled::text AS compiled,
       EXISTS (SELECT FROM tasks t
               WHERE t.tenant_id = d.tenant_id AND t.definition_id = d.definition_id
                 AND t.binding_id = 'owner'
                 AND t.status IN ('pending', 'held', 'running', 'suspended', 'review_required')
              ) AS busy
FROM definitions d
JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = d.effective_revision
WHERE d.status = 'active' AND d.trigger_kind = 'calendar' AND d.next_due_at <= $1
  AND d.origin = 'user'
  AND (d.next_due_at, d.tenant_id, d.definition_id) > ($3::timestamptz, $4::text, $5::text)
ORDER BY d.next_due_at, d.tenant_id, d.definition_id
LIMIT $2
FOR UPDATE OF d SKIP LOCKED;

-- name: definitions_due
-- Phase B of a tick: the due calendar definitions of origin $6 (operator-registered),
-- keyset-paginated, not locked (a binding resolver may do I/O before admission locks
-- and rechecks them).
SELECT d.next_due_at, d.tenant_id, d.definition_id, d.origin, d.owner_user_id, d.fence,
       d.effective_revision, d.cursor_at, d.slots_seen, r.spec_hash,
       r.compiled::text AS compiled
FROM definitions d
JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = d.effective_revision
WHERE d.status = 'active' AND d.trigger_kind = 'calendar' AND d.next_due_at <= $1
  AND d.origin = $6
  AND (d.next_due_at, d.tenant_id, d.definition_id) > ($3::timestamptz, $4::text, $5::text)
ORDER BY d.next_due_at, d.tenant_id, d.definition_id
LIMIT $2;

-- name: next_due
-- When the tick next has work: the earliest next_due_at of an active calendar
-- definition, or NULL (the supervisor sleeps until then, or until a notice).
SELECT min(next_due_at) FROM definitions WHERE status = 'active' AND trigger_kind = 'calendar';

-- name: specs_by_hash
SELECT DISTINCT ON (spec_hash) spec_hash, spec, registration
FROM definition_revisions WHERE spec_hash = ANY($1::text[]);

-- name: registrations_by_hash
SELECT DISTINCT ON (spec_hash) spec_hash, registration
FROM definition_revisions WHERE spec_hash = ANY($1::text[]);

-- name: revisions_compile
-- A revision written before compiled specs existed (or compiled in an older layout):
-- store what the tick compiled from its spec, for every revision of that spec.
-- Set-based: an upgrade may meet many such revisions in one batch.
UPDATE definition_revisions r SET compiled = u.compiled, payload = u.payload
FROM unnest($1::text[], $2::jsonb[], $3::jsonb[]) AS u (spec_hash, compiled, payload)
WHERE r.spec_hash = u.spec_hash
  AND (r.compiled IS NULL OR r.payload IS NULL
       OR (r.compiled ->> 0)::int IS DISTINCT FROM $4);

-- name: definitions_lock_batch
-- Phase 2 of a tick: lock the planned definitions; rows another replica holds are skipped.
SELECT d.tenant_id, d.definition_id, d.fence, d.cursor_at, d.status, d.effective_revision
FROM definitions d
JOIN unnest($1::text[], $2::text[]) AS k (tenant_id, definition_id)
  ON d.tenant_id = k.tenant_id AND d.definition_id = k.definition_id
WHERE d.definition_id = ANY($2::text[])  -- lets the planner use the primary key
FOR UPDATE OF d SKIP LOCKED;

-- name: tasks_active_for
SELECT t.tenant_id, t.definition_id, t.binding_id, t.task_id, t.status
FROM tasks t
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k (tenant_id, definition_id, binding_id)
  ON t.tenant_id = k.tenant_id AND t.definition_id = k.definition_id
 AND t.binding_id = k.binding_id
WHERE t.status IN ('pending', 'held', 'running', 'suspended', 'review_required')
  AND t.definition_id = ANY($2::text[])
FOR SHARE OF t;  -- a task cannot end (and miss releasing one held behind it) meanwhile

-- name: budget_for
SELECT b.tenant_id, b.definition_id, b.binding_id, b.period_start, b.task_limit, b.used
FROM budget_ledger b
JOIN unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
     AS k (tenant_id, definition_id, binding_id, period_start)
  ON b.tenant_id = k.tenant_id AND b.definition_id = k.definition_id
 AND b.binding_id = k.binding_id AND b.period_start = k.period_start;

-- name: admission_write
-- One statement per admission batch (DESIGN "Admission": set-based, each occurrence still
-- keyed), over the rows COPYed into wk_stage_admission just before. claimed: the claim is
-- the insert — a key that exists already loses, silently, here (the primary key is the
-- at-most-once mechanism). A task is inserted for every claimed occurrence whose plan
-- admits one (task_status not NULL); its payload is the operator binding's or, for a
-- user-confirmed definition (payload NULL), its revision's (definition_revisions.payload)
-- with the staged params (the runtime's schedule stamp) merged into that payload's.
-- Every planned definition's cursor advances (rows with a status; a manual trigger
-- stages none). Staged instants are microseconds since the Unix epoch, made exact
-- timestamps here (whole seconds, then the microseconds). Returns the ordinals of the
-- claimed occurrences.
WITH staged AS (
    SELECT s.*,
           to_timestamp(s.scheduled_for_us / 1000000)
               + (s.scheduled_for_us % 1000000) * interval '1 microsecond' AS scheduled_for,
           to_timestamp(s.not_before_us / 1000000)
               + (s.not_before_us % 1000000) * interval '1 microsecond' AS not_before,
           to_timestamp(s.expires_at_us / 1000000)
               + (s.expires_at_us % 1000000) * interval '1 microsecond' AS expires_at
    FROM wk_stage_admission s WHERE s.slot IS NOT NULL
),
claimed AS (
    INSERT INTO occurrences (tenant_id, definition_id, binding_id, slot, kind,
                             definition_tenant_id, revision, scheduled_for, not_before,
                             expires_at, zone, local_wall, fold, decision, reason, late,
                             lateness_seconds, run_status, run_deadline_at, tzdata_version,
                             decided_at, decided_by)
    SELECT tenant_id, definition_id, binding_id, slot, kind, definition_tenant_id, revision,
           scheduled_for, not_before, expires_at, zone,
           timestamp '1970-01-01' + (local_wall_us / 1000000) * interval '1 second'
               + (local_wall_us % 1000000) * interval '1 microsecond',
           fold, decision, reason, late, lateness_seconds, run_status,
           to_timestamp(run_deadline_us / 1000000)
               + (run_deadline_us % 1000000) * interval '1 microsecond',
           $1::text, $2::timestamptz, $3::text
    FROM staged
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, definition_id, binding_id, slot, kind
),
kept AS (
    SELECT s.* FROM staged s
    JOIN claimed c USING (tenant_id, definition_id, binding_id, slot, kind)
),
admitted AS (
    INSERT INTO tasks (tenant_id, definition_tenant_id, definition_id, binding_id, slot, kind,
                       revision, owner_user_id, agent, message, params, delivery, audiences,
                       status, status_reason, late, late_policy, scheduled_for, not_before,
                       expires_at, deadline_seconds, max_attempts, held_behind, admitted_at)
    SELECT k.tenant_id, k.definition_tenant_id, k.definition_id, k.binding_id, k.slot, k.kind,
           k.revision, k.owner_user_id, coalesce(k.payload, r.payload) ->> 'agent',
           coalesce(k.payload, r.payload) ->> 'message',
           CASE WHEN k.payload IS NULL THEN coalesce(r.payload -> 'params', '{}') || k.params
                ELSE k.params END,
           coalesce(k.payload, r.payload) -> 'delivery',
           nullif(coalesce(k.payload, r.payload) -> 'audiences', 'null'),
           k.task_status, k.reason, k.late, k.late_policy, k.scheduled_for, k.not_before,
           k.expires_at, k.deadline_seconds, k.max_attempts, k.held_behind, $2::timestamptz
    FROM kept k
    LEFT JOIN definition_revisions r
      ON k.payload IS NULL AND r.tenant_id = k.definition_tenant_id
     AND r.definition_id = k.definition_id AND r.revision = k.revision
    WHERE k.task_status IS NOT NULL
),
advanced AS (
    UPDATE definitions d
    SET cursor_at = to_timestamp(a.cursor_us / 1000000)
                    + (a.cursor_us % 1000000) * interval '1 microsecond',
        slots_seen = a.slots_seen,
        next_due_at = to_timestamp(a.next_due_us / 1000000)
                      + (a.next_due_us % 1000000) * interval '1 microsecond',
        status = a.status, updated_at = $2::timestamptz
    FROM wk_stage_admission a
    WHERE a.status IS NOT NULL
      AND d.tenant_id = a.tenant_id AND d.definition_id = a.definition_id
)
SELECT coalesce(array_agg(n ORDER BY n), '{}') AS claimed FROM kept;

-- name: tasks_insert
-- Rows were COPYed into the session's staging table (wk_stage_tasks) just before. A row
-- with no agent is a user-confirmed definition's: its agent, message, delivery and
-- audiences are its revision's payload, its params that payload's merged with the
-- staged ones (what the runtime stamps), as in admission_write.
INSERT INTO tasks (tenant_id, definition_tenant_id, definition_id, binding_id, slot, kind,
                   revision, owner_user_id, agent, message, params, delivery, audiences,
                   status, status_reason, late, late_policy, scheduled_for, not_before,
                   expires_at, deadline_seconds, max_attempts, held_behind, admitted_at)
SELECT s.tenant_id, s.definition_tenant_id, s.definition_id, s.binding_id, s.slot, s.kind,
       s.revision, s.owner_user_id, coalesce(s.agent, r.payload ->> 'agent'),
       coalesce(s.message, r.payload ->> 'message'),
       CASE WHEN s.agent IS NULL THEN coalesce(r.payload -> 'params', '{}') || s.params
            ELSE s.params END,
       CASE WHEN s.agent IS NULL THEN r.payload -> 'delivery' ELSE s.delivery END,
       CASE WHEN s.agent IS NULL THEN nullif(r.payload -> 'audiences', 'null')
            ELSE s.audiences END,
       s.status, s.status_reason, s.late, s.late_policy, s.scheduled_for, s.not_before,
       s.expires_at, s.deadline_seconds, s.max_attempts, s.held_behind, $1::timestamptz
FROM wk_stage_tasks s
LEFT JOIN definition_revisions r
  ON s.agent IS NULL AND r.tenant_id = s.definition_tenant_id
 AND r.definition_id = s.definition_id AND r.revision = s.revision;

-- name: budget_consume
INSERT INTO budget_ledger AS b (tenant_id, definition_id, binding_id, period_start, period_end,
                                task_limit, used)
SELECT i.*, 1
FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[],
            $6::integer[]) AS i
ON CONFLICT (tenant_id, definition_id, binding_id, period_start)
DO UPDATE SET used = b.used + 1;

-- name: tasks_cancel_previous
-- cancel_previous: waiting tasks end now; started ones are asked to stop.
UPDATE tasks t
SET status = CASE WHEN t.status IN ('pending', 'held', 'review_required') THEN 'cancelled'
                  ELSE t.status END,
    status_reason = CASE WHEN t.status IN ('pending', 'held', 'review_required') THEN $3
                         ELSE t.status_reason END,
    finished_at = CASE WHEN t.status IN ('pending', 'held', 'review_required') THEN $4
                       ELSE t.finished_at END,
    cancel_requested_at = coalesce(t.cancel_requested_at, $4)
FROM unnest($1::text[], $2::bigint[]) AS k (tenant_id, task_id)
WHERE t.tenant_id = k.tenant_id AND t.task_id = k.task_id
  AND t.status IN ('pending', 'held', 'review_required', 'running', 'suspended');

-- name: events_insert
INSERT INTO schedule_events (tenant_id, definition_id, binding_id, revision, kind, first_slot,
                             last_slot, first_at, last_at, count, reason, recorded_at, recorded_by)
SELECT i.*, $12::timestamptz, $13::text
FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::text[],
            $7::text[], $8::timestamptz[], $9::timestamptz[], $10::integer[], $11::text[]) AS i;

-- name: definitions_advance
UPDATE definitions d
SET cursor_at = i.cursor_at, slots_seen = i.slots_seen, next_due_at = i.next_due_at,
    status = i.status, updated_at = $7
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::timestamptz[],
            $6::text[]) AS i (tenant_id, definition_id, cursor_at, slots_seen, next_due_at, status)
WHERE d.tenant_id = i.tenant_id AND d.definition_id = i.definition_id
  AND d.definition_id = ANY($2::text[]);  -- lets the planner use the primary key

-- name: occurrence_get
SELECT o.*, t.task_id, t.status AS task_status
FROM occurrences o
LEFT JOIN tasks t
  ON t.tenant_id = o.tenant_id AND t.definition_id = o.definition_id
 AND t.binding_id = o.binding_id AND t.slot = o.slot AND t.kind = o.kind
WHERE o.tenant_id = $1 AND o.definition_id = $2 AND o.binding_id = $3 AND o.slot = $4
  AND o.kind = $5;

-- name: occurrence_run_finished
UPDATE occurrences SET run_status = $5, run_finished_at = $6, run_error = $7
WHERE tenant_id = $1 AND definition_id = $2 AND binding_id = $3 AND slot = $4
  AND kind = 'scheduled' AND run_status = 'running';

-- name: occurrences_run_stale
UPDATE occurrences SET run_status = 'stale', run_finished_at = $1,
       run_error = 'claim older than stale_claim_after with no outcome'
WHERE run_status = 'running' AND run_deadline_at < $1
RETURNING tenant_id, definition_id, slot;

-- ---------------------------------------------------------------- workers and leases

-- name: tasks_claim
-- A worker claims due pending tasks; each gets a lease and a fresh fencing token.
-- $5: only this tenant's tasks (a replay's worker), or NULL for every tenant but the
-- replays' (they run on a virtual clock: '_replay-...'). $6: the agent names this worker
-- has: a task whose agent it lacks is left pending for a supervisor that has it.
WITH c AS (
    SELECT tenant_id, task_id FROM tasks
    WHERE status = 'pending' AND not_before <= $1
      AND CASE WHEN $5::text IS NULL THEN tenant_id NOT LIKE '\_replay-%' ELSE tenant_id = $5 END
      AND agent = ANY($6::text[])
    ORDER BY not_before, task_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE tasks t
SET status = 'running', lease_owner = $3, lease_token = nextval('lease_tokens'),
    lease_expires_at = $1 + make_interval(secs => $4), attempts = t.attempts + 1,
    started_at = coalesce(t.started_at, $1),
    deadline_at = coalesce(t.deadline_at, $1 + make_interval(secs => t.deadline_seconds))
FROM c
WHERE t.tenant_id = c.tenant_id AND t.task_id = c.task_id
RETURNING t.*;

-- name: tasks_take_over
-- Running tasks whose lease expired get a new owner and a newer fencing token; $6 as
-- in tasks_claim (only a worker that has the task's agent takes it over). The old run is
-- marked lease_lost in the same statement: no moment
-- where the task has a new token and the old run still reads 'running'.
WITH c AS (
    SELECT tenant_id, task_id FROM tasks
    WHERE status = 'running' AND lease_expires_at < $1
      AND CASE WHEN $5::text IS NULL THEN tenant_id NOT LIKE '\_replay-%' ELSE tenant_id = $5 END
      AND agent = ANY($6::text[])
    ORDER BY lease_expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE tasks t
    SET lease_owner = $3, lease_token = nextval('lease_tokens'),
        lease_expires_at = $1 + make_interval(secs => $4), attempts = t.attempts + 1
    FROM c
    WHERE t.tenant_id = c.tenant_id AND t.task_id = c.task_id
    RETURNING t.*
), lost AS (
    UPDATE runs r SET outcome = 'lease_lost', finished_at = $1,
           error = 'lease expired; taken over by a newer fencing token'
    FROM taken
    WHERE r.tenant_id = taken.tenant_id AND r.task_id = taken.task_id AND r.outcome = 'running'
)
SELECT * FROM taken;

-- name: task_unclaimable_expired_lock
-- The lateness rule for a task that waited for its agent: a first attempt (never
-- claimed, not late, not released from a queue_one hold) past its expires_at whose agent
-- is not in $2 (what the live supervisors and this worker offer), under a policy that
-- decides at expiry (skip_expired, review_late; catch_up_once waits to run late).
-- $3 as in tasks_claim.
SELECT tenant_id, task_id, agent, late_policy, not_before, expires_at
FROM tasks
WHERE status = 'pending' AND not_before < $1 AND expires_at < $1
  AND attempts = 0 AND NOT late AND held_behind IS NULL
  AND late_policy IN ('skip_expired', 'review_late')
  AND NOT (agent = ANY($2::text[]))
  AND CASE WHEN $3::text IS NULL THEN tenant_id NOT LIKE '\_replay-%' ELSE tenant_id = $3 END
ORDER BY expires_at, tenant_id, task_id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: task_unclaimable_expire
UPDATE tasks SET status = $3, status_reason = $4, finished_at = $5
WHERE tenant_id = $1 AND task_id = $2 AND status = 'pending'
RETURNING task_id;

-- name: tasks_unclaimable
-- Tasks waiting for an agent that nobody offers ($2: the agents the live supervisors
-- offer): due pending ones, and running ones whose lease expired (waiting for a
-- takeover); longest wait first. $4: one tenant, or NULL for every tenant but the
-- replays'.
SELECT tenant_id, task_id, definition_id, binding_id, slot, kind, agent, status, late_policy,
       attempts, not_before, expires_at,
       CASE WHEN status = 'pending' THEN not_before ELSE lease_expires_at END AS waiting_since
FROM tasks
WHERE ((status = 'pending' AND not_before <= $1) OR (status = 'running' AND lease_expires_at < $1))
  AND NOT (agent = ANY($2::text[]))
  AND CASE WHEN $4::text IS NULL THEN tenant_id NOT LIKE '\_replay-%' ELSE tenant_id = $4 END
ORDER BY waiting_since, tenant_id, task_id
LIMIT $3;

-- name: effects_unfinished
SELECT effect_key, status FROM effects
WHERE tenant_id = $1 AND task_id = $2 AND status IN ('started', 'failed');

-- name: lease_renew
-- Renewal is fenced: only the current token extends the lease.
UPDATE tasks SET lease_expires_at = $4::timestamptz + make_interval(secs => $5::double precision)
WHERE tenant_id = $1 AND task_id = $2 AND lease_token = $3 AND status = 'running'
RETURNING cancel_requested_at;

-- name: run_insert
-- $7: the task's root this run belongs to (1, or the root a continuation started).
INSERT INTO runs (tenant_id, task_id, attempt, lease_token, worker, started_at, outcome, root)
VALUES ($1, $2, $3, $4, $5, $6, 'running', $7)
RETURNING run_id;

-- name: run_finish
-- $7 model, $8 tool calls, $9 continuation intent: NULL keeps what the run recorded.
UPDATE runs SET outcome = $3, finished_at = $4, error = $5, usage = $6,
       model = coalesce($7, model), tool_calls = coalesce($8, tool_calls),
       continuation = coalesce($9, continuation)
WHERE tenant_id = $1 AND run_id = $2 AND outcome = 'running';

-- name: run_charge
-- Fenced: the run's usage, model and tool calls so far, written before the model request
-- or tool call the latest charge pays for. No row: the token is no longer current, and
-- the spending must not happen.
UPDATE runs r SET usage = $3, model = coalesce($4, r.model), tool_calls = $5
FROM tasks t
WHERE r.tenant_id = $1 AND r.run_id = $2 AND r.outcome = 'running'
  AND t.tenant_id = r.tenant_id AND t.task_id = r.task_id
  AND t.lease_token = $6 AND t.status = 'running'
RETURNING r.run_id;

-- name: run_record_usage
-- What a run has spent (a model response's tokens and cost), written to its own row
-- whatever became of its lease: a stale run's spending still counts toward the task's
-- budget. Not after the run has ended (its closing write has the final figures).
UPDATE runs SET usage = $3, model = coalesce($4, model), tool_calls = $5
WHERE tenant_id = $1 AND run_id = $2 AND outcome IN ('running', 'lease_lost');

-- name: task_continue
-- Fenced: a run ended with an accepted continuation intent; the task goes on as its next
-- root ($4), claimable now ($5), with limits.max_attempts ($6) attempts for that root.
UPDATE tasks
SET status = 'pending', status_reason = $7, not_before = least(not_before, $5),
    lease_owner = NULL, lease_expires_at = NULL, root = $4, max_attempts = attempts + $6
WHERE tenant_id = $1 AND task_id = $2 AND lease_token = $3 AND status = 'running'
  AND cancel_requested_at IS NULL
RETURNING task_id;

-- name: task_lease_state
-- Whether token $3 still holds the task, and whether a cancellation was requested.
SELECT lease_token = $3 AND status = 'running' AS current,
       cancel_requested_at IS NOT NULL AS cancel_requested
FROM tasks WHERE tenant_id = $1 AND task_id = $2;

-- name: run_continuation_of
-- The accepted intent that started root $3 of a task (the run that ended root $3 - 1),
-- with that run's report.
SELECT run_id, attempt, root, continuation
FROM runs
WHERE tenant_id = $1 AND task_id = $2 AND root = $3 - 1 AND outcome = 'continued'
ORDER BY run_id DESC LIMIT 1;

-- name: task_finish
-- Fenced: a stale token finishes nothing.
UPDATE tasks
SET status = $4, status_reason = $5, finished_at = $6, lease_owner = NULL,
    lease_expires_at = NULL
WHERE tenant_id = $1 AND task_id = $2 AND lease_token = $3 AND status = 'running'
RETURNING task_id;

-- name: task_retry
-- Fenced: back to pending for a new attempt at not_before = $4 (the backoff).
UPDATE tasks
SET status = 'pending', status_reason = $5, not_before = $4, lease_owner = NULL,
    lease_expires_at = NULL
WHERE tenant_id = $1 AND task_id = $2 AND lease_token = $3 AND status = 'running'
RETURNING task_id;

-- name: task_release
-- Fenced: a run interrupted by a supervisor's shutdown gives its task back at once:
-- pending and claimable now ($4: not_before is never later than that), the lease
-- cleared, so another worker claims it as the next attempt without waiting for the
-- lease to expire.
UPDATE tasks
SET status = 'pending', status_reason = $5, not_before = least(not_before, $4),
    lease_owner = NULL, lease_expires_at = NULL
WHERE tenant_id = $1 AND task_id = $2 AND lease_token = $3 AND status = 'running'
RETURNING task_id;

-- name: tasks_release_held
-- queue_one: the task held behind a finished one may now be claimed.
UPDATE tasks SET status = 'pending', status_reason = 'the previous task ended'
WHERE tenant_id = $1 AND held_behind = $2 AND status = 'held';

-- name: report_insert
INSERT INTO reports (tenant_id, task_id, run_id, content_md, importance, content_sha256,
                     output_ref, verified, verification, finished_at, committed_at, headline)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: deliveries_insert
INSERT INTO deliveries (tenant_id, delivery_id, task_id, channel, destination, status,
                        next_attempt_at, created_at, queued_at)
SELECT $1, i.delivery_id, $2, i.channel, i.destination, 'pending', $3, $3, $3
FROM unnest($4::uuid[], $5::text[], $6::text[]) AS i (delivery_id, channel, destination)
ON CONFLICT DO NOTHING;

-- name: reports_previous
-- The binding's latest verified reports, newest task first. A verified report is what
-- makes a task 'completed', so this walks the partial index tasks_completed backwards
-- and stops at the limit: the cost does not grow with the history or the backlog.
SELECT t.slot, r.content_sha256, r.committed_at
FROM tasks t
JOIN reports r ON r.tenant_id = t.tenant_id AND r.task_id = t.task_id
WHERE t.tenant_id = $1 AND t.definition_id = $2 AND t.binding_id = $3
  AND t.status = 'completed' AND r.verified
ORDER BY t.task_id DESC
LIMIT $4;

-- name: revision_spec
SELECT spec, spec_hash FROM definition_revisions
WHERE tenant_id = $1 AND definition_id = $2 AND revision = $3;

-- name: effect_lock_task
SELECT task_id FROM tasks
WHERE tenant_id = $1 AND task_id = $2 AND lease_token = $3 AND status = 'running'
FOR UPDATE;

-- name: effect_start
-- A key seen before is claimed again only if its last attempt provably did nothing.
INSERT INTO effects AS e (tenant_id, effect_key, task_id, lease_token, status, recorded_at)
VALUES ($1, $2, $3, $4, 'started', $5)
ON CONFLICT (tenant_id, effect_key) DO UPDATE
SET status = 'started', lease_token = EXCLUDED.lease_token, recorded_at = EXCLUDED.recorded_at,
    finished_at = NULL, result = NULL
WHERE e.status = 'not_applied'
RETURNING effect_key;

-- name: effect_get
SELECT status, result FROM effects WHERE tenant_id = $1 AND effect_key = $2;

-- name: effect_finish
UPDATE effects SET status = $4, result = $5, finished_at = $6
WHERE tenant_id = $1 AND effect_key = $2 AND lease_token = $3 AND status = 'started';

-- name: report_get
SELECT * FROM reports WHERE tenant_id = $1 AND task_id = $2;

-- name: report_usage
-- What a task's runs spent in all (every attempt and root), the model of the run that
-- wrote the report ($3), the roots it took and the tool calls made.
SELECT (SELECT model FROM runs WHERE tenant_id = $1 AND run_id = $3) AS model,
       coalesce(max(root), 1) AS roots, count(*) AS runs,
       coalesce(sum(jsonb_array_length(tool_calls)), 0) AS tool_calls,
       coalesce(sum((usage->>'model_requests')::bigint), 0) AS model_requests,
       coalesce(sum((usage->>'tool_attempts')::bigint), 0) AS tool_attempts,
       coalesce(sum((usage->>'input_tokens')::bigint), 0) AS input_tokens,
       coalesce(sum((usage->>'output_tokens')::bigint), 0) AS output_tokens,
       coalesce(sum((usage->>'cost_usd')::numeric), 0) AS cost_usd
FROM runs WHERE tenant_id = $1 AND task_id = $2;

-- ---------------------------------------------------------------- outbox

-- name: deliveries_claim
-- Several dispatchers never hold one row at once: SKIP LOCKED plus a lease. A row whose
-- lease expired (its dispatcher died before recording) is taken over: attempt + 1, same id.
-- $5: only this tenant's rows (a replay's dispatcher), or NULL for every tenant but the
-- replays'.
WITH c AS (
    SELECT tenant_id, delivery_id FROM deliveries
    WHERE ((status IN ('pending', 'retrying') AND next_attempt_at <= $1)
           OR (status = 'delivering' AND lease_expires_at < $1))
      AND CASE WHEN $5::text IS NULL THEN tenant_id NOT LIKE '\_replay-%' ELSE tenant_id = $5 END
    ORDER BY next_attempt_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d
SET status = 'delivering', attempts = d.attempts + 1, lease_owner = $3,
    lease_expires_at = $1 + make_interval(secs => $4), lease_token = nextval('lease_tokens')
FROM c
WHERE d.tenant_id = c.tenant_id AND d.delivery_id = c.delivery_id
RETURNING d.tenant_id, d.delivery_id, d.task_id, d.notice_id, d.channel, d.destination,
          d.attempts, d.queued_at, d.lease_token, d.lease_expires_at;

-- name: delivery_payloads
-- The notice body (a reference to the committed report) and, read now, the recipient's
-- preferences and zone. The headline is the one the agent gave, else the report's first line.
SELECT t.tenant_id, t.task_id, t.definition_id, t.binding_id, t.slot, t.kind, t.owner_user_id,
       t.scheduled_for, r.importance, r.content_sha256, r.output_ref, r.committed_at,
       coalesce(nullif(r.headline, ''), split_part(r.content_md, E'\n', 1)) AS headline,
       u.zone AS user_zone, p.user_id IS NOT NULL AS has_preferences, p.channels,
       p.min_importance, p.quiet_start, p.quiet_end
FROM tasks t
JOIN reports r ON r.tenant_id = t.tenant_id AND r.task_id = t.task_id
JOIN unnest($1::text[], $2::bigint[]) AS k (tenant_id, task_id)
  ON t.tenant_id = k.tenant_id AND t.task_id = k.task_id
LEFT JOIN users u ON u.tenant_id = t.tenant_id AND u.user_id = t.owner_user_id
LEFT JOIN notification_preferences p
  ON p.tenant_id = t.tenant_id AND p.user_id = t.owner_user_id;

-- name: not_run_payloads
-- The body of a notice that an agreed run did not happen (migration 0012): the history
-- entry's key, the outcome and its reason, never a report; and, read now, the
-- recipient's preferences and zone.
SELECT n.tenant_id, n.notice_id, n.definition_id, n.binding_id, n.slot, n.kind, n.outcome,
       n.task_id, n.owner_user_id, n.scheduled_for, n.reason, n.importance, n.recorded_at,
       u.zone AS user_zone, p.user_id IS NOT NULL AS has_preferences, p.channels,
       p.min_importance, p.quiet_start, p.quiet_end
FROM not_run_notices n
JOIN unnest($1::text[], $2::bigint[]) AS k (tenant_id, notice_id)
  ON n.tenant_id = k.tenant_id AND n.notice_id = k.notice_id
LEFT JOIN users u ON u.tenant_id = n.tenant_id AND u.user_id = n.owner_user_id
LEFT JOIN notification_preferences p
  ON p.tenant_id = n.tenant_id AND p.user_id = n.owner_user_id;

-- name: deliveries_record
-- One pass's outcomes, only for rows whose claim (lease token) is still current: a pass
-- whose lease expired and was taken over records nothing. A deferral (quiet hours, or a
-- notice released unsent) or a suppression is not an attempt.
UPDATE deliveries d
SET status = CASE i.kind WHEN 'deferred' THEN 'pending' ELSE i.kind END,
    attempts = CASE WHEN i.kind IN ('deferred', 'suppressed') THEN d.attempts - 1
                    ELSE d.attempts END,
    next_attempt_at = coalesce(i.next_at, d.next_attempt_at),
    delivered_at = CASE WHEN i.kind = 'delivered' THEN i.at ELSE d.delivered_at END,
    dead_at = CASE WHEN i.kind = 'dead' THEN i.at ELSE d.dead_at END,
    response = CASE WHEN i.kind = 'delivered' THEN i.detail ELSE d.response END,
    response_status = i.status_code,
    last_error = CASE WHEN i.kind IN ('retrying', 'dead') THEN i.detail
                      WHEN i.kind = 'delivered' THEN NULL ELSE d.last_error END,
    status_reason = CASE WHEN i.kind IN ('suppressed', 'deferred') THEN i.detail
                         ELSE d.status_reason END,
    lease_owner = NULL, lease_expires_at = NULL, lease_token = NULL
FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::text[],
            $6::timestamptz[], $7::integer[], $8::bigint[])
     AS i (tenant_id, delivery_id, kind, at, detail, next_at, status_code, lease_token)
WHERE d.tenant_id = i.tenant_id AND d.delivery_id = i.delivery_id
  AND d.delivery_id = ANY($2::uuid[]) AND d.lease_token = i.lease_token
  AND d.status = 'delivering'
RETURNING d.tenant_id, d.delivery_id;

-- name: delivery_attempts_insert
INSERT INTO delivery_attempts (tenant_id, delivery_id, attempt, dispatcher, finished_at, outcome,
                               response_status, detail)
SELECT i.*
FROM unnest($1::text[], $2::uuid[], $3::integer[], $4::text[], $5::timestamptz[], $6::text[],
            $7::integer[], $8::text[]) AS i;

-- name: webhook_endpoint_get
-- The endpoint and its secrets signing at $3, newest first: sealed (with the wrapped data
-- key and the key's id), or, for a row no process has sealed yet, in clear.
SELECT e.url, s.sealed, s.data_keys, s.key_ids, s.clear
FROM webhook_endpoints e
LEFT JOIN LATERAL (
    SELECT array_agg(x.sealed ORDER BY x.secret_id DESC) AS sealed,
           array_agg(x.data_key ORDER BY x.secret_id DESC) AS data_keys,
           array_agg(x.key_id ORDER BY x.secret_id DESC) AS key_ids,
           array_agg(x.secret ORDER BY x.secret_id DESC) AS clear
    FROM webhook_secrets x
    WHERE x.tenant_id = e.tenant_id AND x.endpoint = e.name
      AND (x.expires_at IS NULL OR x.expires_at > $3)
) s ON true
WHERE e.tenant_id = $1 AND e.name = $2;

-- name: webhook_endpoint_insert
INSERT INTO webhook_endpoints (tenant_id, name, url, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING name;

-- name: webhook_secret_insert
INSERT INTO webhook_secrets (tenant_id, endpoint, sealed, data_key, key_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: webhook_secrets_unsealed
-- Secrets still in clear (stored before migration 0010), locked for sealing.
SELECT tenant_id, endpoint, secret_id, secret FROM webhook_secrets
WHERE sealed IS NULL
ORDER BY tenant_id, endpoint, secret_id
FOR UPDATE SKIP LOCKED;

-- name: webhook_secret_seal
UPDATE webhook_secrets SET sealed = $4, data_key = $5, key_id = $6, secret = NULL
WHERE tenant_id = $1 AND endpoint = $2 AND secret_id = $3 AND sealed IS NULL;

-- name: webhook_secret_keys
-- Each key that wrapped a stored secret, how many, and one of them to try.
SELECT DISTINCT ON (key_id) key_id, count(*) OVER (PARTITION BY key_id) AS secrets,
       tenant_id, endpoint, sealed, data_key
FROM webhook_secrets
WHERE sealed IS NOT NULL
ORDER BY key_id, secret_id;

-- name: webhook_secrets_sealed_locked
-- Every sealed secret, locked for re-wrapping under a new key.
SELECT tenant_id, endpoint, secret_id, sealed, data_key, key_id FROM webhook_secrets
WHERE sealed IS NOT NULL
ORDER BY tenant_id, endpoint, secret_id
FOR UPDATE;

-- name: webhook_secret_rewrap
UPDATE webhook_secrets SET data_key = $4, key_id = $5
WHERE tenant_id = $1 AND endpoint = $2 AND secret_id = $3;

-- name: webhook_secrets_expire
-- Rotation: the current secrets keep signing until $3, then only the new one does.
UPDATE webhook_secrets SET expires_at = $3
WHERE tenant_id = $1 AND endpoint = $2 AND (expires_at IS NULL OR expires_at > $3);

-- name: webhook_endpoint_delete
DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND name = $2 RETURNING name;

-- name: webhook_endpoints_existing
-- Which of the names $2 are endpoints of tenant $1.
SELECT name FROM webhook_endpoints WHERE tenant_id = $1 AND name = ANY($2::text[]);

-- name: webhook_endpoint_users
-- Active or paused definitions whose effective revision delivers to endpoint $2 of
-- tenant $1: the user's own spec, or a static operator binding for that tenant.
SELECT d.tenant_id, d.definition_id
FROM definitions d
JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = d.effective_revision
WHERE d.status IN ('active', 'paused')
  AND ((d.tenant_id = $1
        AND jsonb_path_exists(r.spec,
              '$.delivery[*] ? (@.channel == "webhook" && @.destination == $n)',
              jsonb_build_object('n', $2::text)))
    OR jsonb_path_exists(r.registration,
              '$.bindings[*] ? (@.tenant_id == $t).delivery[*] ? (@.channel == "webhook" && @.destination == $n)',
              jsonb_build_object('t', $1::text, 'n', $2::text)))
ORDER BY d.tenant_id, d.definition_id
LIMIT 20;

-- name: deliveries_release_deferred
-- Preferences changed: notices held back by the old quiet hours are due again now, so
-- the dispatcher applies the new preferences to them at once.
UPDATE deliveries x
SET next_attempt_at = $3, status_reason = 'preferences changed: re-evaluated'
WHERE x.tenant_id = $1 AND x.status = 'pending' AND x.next_attempt_at > $3
  AND (EXISTS (SELECT 1 FROM tasks t WHERE t.tenant_id = x.tenant_id
                 AND t.task_id = x.task_id AND t.owner_user_id = $2)
       OR EXISTS (SELECT 1 FROM not_run_notices n WHERE n.tenant_id = x.tenant_id
                    AND n.notice_id = x.notice_id AND n.owner_user_id = $2));

-- name: webhook_endpoints_list
SELECT e.tenant_id, e.name, e.url, e.created_at,
       count(s.secret_id) FILTER (WHERE s.expires_at IS NULL OR s.expires_at > $2) AS active_secrets
FROM webhook_endpoints e
LEFT JOIN webhook_secrets s ON s.tenant_id = e.tenant_id AND s.endpoint = e.name
WHERE $1::text IS NULL OR e.tenant_id = $1
GROUP BY e.tenant_id, e.name, e.url, e.created_at
ORDER BY e.tenant_id, e.name;

-- name: preferences_upsert
INSERT INTO notification_preferences (tenant_id, user_id, channels, min_importance, quiet_start,
                                      quiet_end, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (tenant_id, user_id) DO UPDATE
SET channels = EXCLUDED.channels, min_importance = EXCLUDED.min_importance,
    quiet_start = EXCLUDED.quiet_start, quiet_end = EXCLUDED.quiet_end,
    updated_at = EXCLUDED.updated_at;

-- name: preferences_get
SELECT p.*, u.zone FROM notification_preferences p
JOIN users u ON u.tenant_id = p.tenant_id AND u.user_id = p.user_id
WHERE p.tenant_id = $1 AND p.user_id = $2;

-- name: deliveries_summary
-- The outbox backlog by status, and how late the oldest due notice is: of tenant $1, or
-- of every tenant but the replays' (their clock is virtual).
SELECT status, count(*) AS count, min(next_attempt_at) FILTER (
           WHERE status IN ('pending', 'retrying')) AS oldest_due
FROM deliveries
WHERE ($1::text IS NULL AND tenant_id NOT LIKE '\_replay-%') OR tenant_id = $1
GROUP BY status ORDER BY status;

-- name: deliveries_list
-- Deliveries newest first (delivery_rows, migration 0015), each filter optional.
SELECT * FROM delivery_rows
WHERE ($1::text IS NULL OR tenant_id = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::bigint IS NULL OR task_id = $3)
ORDER BY created_at DESC, delivery_id
LIMIT $4;

-- name: delivery_show
-- One delivery as deliveries_list shows it, by its id.
SELECT * FROM delivery_rows WHERE tenant_id = $1 AND delivery_id = $2;

-- name: delivery_attempts_list
SELECT attempt, dispatcher, finished_at, outcome, response_status, detail
FROM delivery_attempts WHERE tenant_id = $1 AND delivery_id = $2 ORDER BY attempt_id;

-- name: delivery_redeliver
-- Re-queue a finished delivery under the same delivery id (the receiver dedups by it).
UPDATE deliveries
SET status = 'pending', next_attempt_at = $3, queued_at = $3, attempts = 0,
    redeliveries = redeliveries + 1, last_error = NULL, status_reason = $4, dead_at = NULL,
    delivered_at = NULL, response = NULL, response_status = NULL
WHERE tenant_id = $1 AND delivery_id = $2 AND status IN ('dead', 'delivered', 'suppressed')
RETURNING delivery_id;

-- name: delivery_get
SELECT tenant_id, delivery_id, status FROM deliveries WHERE tenant_id = $1 AND delivery_id = $2;

-- name: definitions_lock_batch_wait
SELECT d.tenant_id, d.definition_id, d.fence, d.cursor_at, d.status, d.effective_revision
FROM definitions d
JOIN unnest($1::text[], $2::text[]) AS k (tenant_id, definition_id)
  ON d.tenant_id = k.tenant_id AND d.definition_id = k.definition_id
WHERE d.definition_id = ANY($2::text[])
FOR UPDATE OF d;

-- name: task_review_get
-- $5: the definition's own tenant (a task of another tenant's definition of the same id
-- is never decided here).
SELECT task_id FROM tasks
WHERE tenant_id = $1 AND definition_id = $2 AND binding_id = $3 AND slot = $4
  AND definition_tenant_id = $5 AND status = 'review_required'
FOR UPDATE;

-- name: task_review_decide
-- The dispatch that stopped for review ran nothing: an approved task starts afresh (late).
UPDATE tasks
SET status = $3::text, status_reason = $4, late = true, not_before = $5::timestamptz,
    finished_at = CASE WHEN $3::text = 'expired' THEN $5::timestamptz END,
    lease_token = NULL, attempts = 0, started_at = NULL, deadline_at = NULL
WHERE tenant_id = $1 AND task_id = $2 AND status = 'review_required';

-- name: occurrence_review_decide
UPDATE occurrences
SET decision = $5, reason = $6, late = $7, decided_at = $8, decided_by = $9
WHERE tenant_id = $1 AND definition_id = $2 AND binding_id = $3 AND slot = $4
  AND kind = 'scheduled' AND decision = 'review_required';

-- ---------------------------------------------------------------- supervisors

-- name: supervisor_upsert
INSERT INTO supervisors (supervisor_id, hostname, pid, started_at, heartbeat_at, status,
                         clock_offset_ms, detail)
VALUES ($1, $2, $3, $4, $4, $5, $6, $7)
ON CONFLICT (supervisor_id) DO UPDATE
SET heartbeat_at = EXCLUDED.heartbeat_at, status = EXCLUDED.status,
    clock_offset_ms = EXCLUDED.clock_offset_ms, detail = EXCLUDED.detail;

-- name: supervisor_set_status
UPDATE supervisors SET status = $2, detail = $3 WHERE supervisor_id = $1;

-- Supervisors whose heartbeat expired at $1 (more than $2 of their own intervals old,
-- 5 s when the heartbeat does not say) and that never recorded a stop: a process that was
-- killed, or lost its host. Marked 'lost', keeping what it was and when it was found out;
-- a supervisor that comes back overwrites the mark with its next heartbeat.
-- name: supervisors_mark_lost
UPDATE supervisors
SET status = 'lost',
    detail = detail || jsonb_build_object('lost_at', $1::timestamptz, 'was', status)
WHERE status NOT IN ('stopped', 'lost')
  AND heartbeat_at < $1::timestamptz - make_interval(
        secs => $2::float8 * coalesce((detail ->> 'heartbeat_seconds')::float8, 5))
RETURNING supervisor_id, hostname, pid, heartbeat_at, detail ->> 'was' AS was;

-- name: supervisors_agents_ever
-- Every agent name any supervisor has offered (its heartbeat's detail.agents), stopped
-- and lost ones included.
SELECT DISTINCT jsonb_array_elements_text(detail -> 'agents') AS agent
FROM supervisors WHERE jsonb_typeof(detail -> 'agents') = 'array';

-- name: supervisors_live_count
-- The supervisors running at $1 (status running: a draining or clock-uncertain one
-- admits nothing; a heartbeat within $2 of its own intervals, as
-- _fleet.SupervisorState.live): the fleet that shares the admission lanes.
SELECT count(*) FROM supervisors
WHERE status = 'running'
  AND heartbeat_at >= $1::timestamptz - make_interval(
        secs => $2::float8 * coalesce((detail ->> 'heartbeat_seconds')::float8, 5));

-- name: supervisors_list
SELECT supervisor_id, hostname, pid, started_at, heartbeat_at, status, clock_offset_ms, detail
FROM supervisors ORDER BY heartbeat_at DESC;

-- ---------------------------------------------------------------- history

-- name: history_page
-- One entry per occurrence with its task, runs, report and deliveries (the six facts),
-- newest first, keyset-paginated on (scheduled_for, tenant_id, binding_id, slot, kind);
-- $1: a tenant (its own rows, or for '_operator' the rows of its definitions) or NULL.
SELECT h.* FROM history_rows h
WHERE ($1::text IS NULL OR h.tenant_id = $1 OR h.definition_tenant_id = $1)
  AND ($2::text IS NULL OR h.definition_id = $2)
  AND ($3::text IS NULL OR h.owner_user_id = $3)
  AND ($4::text IS NULL OR h.decision = $4 OR h.task_status = $4)
  AND ($5::timestamptz IS NULL OR h.scheduled_for >= $5)
  AND ($6::timestamptz IS NULL OR h.scheduled_for < $6)
  AND ($7::timestamptz IS NULL
       OR (h.scheduled_for, h.tenant_id, h.binding_id, h.slot, h.kind)
          < ($7, $8::text, $9::text, $10::text, $11::text))
ORDER BY h.scheduled_for DESC, h.tenant_id DESC, h.binding_id DESC, h.slot DESC, h.kind DESC
LIMIT $12;

-- name: history_page_tenant
-- history_page for one tenant's own rows ($1, never '_operator'): the index on
-- (tenant_id, scheduled_for, binding_id, slot, kind) walks it backwards from the
-- cursor, so a page costs the same at any depth. Parameters as history_page but $3 and
-- $13 (below); a cursor of another tenant ($8) yields nothing.
SELECT h.* FROM history_rows h
WHERE h.tenant_id = $1
  AND ($2::text IS NULL OR h.definition_id = $2)
  -- one user's: $3 their definitions' ids (NULL: every definition), $13 the user, for the
  -- operator bindings they own. Filtering on the ids lets the planner estimate from the
  -- occurrences' own statistics (an owner column of the definitions would not).
  AND ($3::text[] IS NULL OR h.definition_id = ANY($3)
       OR (h.origin = 'operator' AND h.task_owner = $13))
  AND ($4::text IS NULL OR h.decision = $4 OR h.task_status = $4)
  AND ($5::timestamptz IS NULL OR h.scheduled_for >= $5)
  AND ($6::timestamptz IS NULL OR h.scheduled_for < $6)
  AND ($7::timestamptz IS NULL
       OR ((h.scheduled_for, h.binding_id, h.slot, h.kind) < ($7, $9::text, $10::text, $11::text)
           AND $8::text = $1))
ORDER BY h.scheduled_for DESC, h.binding_id DESC, h.slot DESC, h.kind DESC
LIMIT $12;

-- name: history_task
-- One task of tenant $1 ($2) with its six facts.
SELECT h.* FROM history_rows h WHERE h.tenant_id = $1 AND h.task_id = $2;

-- name: events_page
SELECT tenant_id, definition_id, binding_id, revision, kind, first_slot, last_slot, first_at,
       last_at, count, reason, recorded_at, recorded_by
FROM schedule_events
WHERE ($1::text IS NULL OR tenant_id = $1)
  AND ($2::text IS NULL OR definition_id = $2)
  AND ($3::timestamptz IS NULL OR recorded_at >= $3)
  AND ($4::timestamptz IS NULL OR recorded_at < $4)
ORDER BY recorded_at DESC, event_id DESC
LIMIT $5;

-- name: run_reject_stale
-- A stale worker's late commit changed nothing; its own run row says so ($6 model and
-- $7 tool calls: NULL keeps what the run recorded).
UPDATE runs SET outcome = 'rejected_stale', finished_at = $3, error = $4, usage = $5,
       model = coalesce($6, model), tool_calls = coalesce($7, tool_calls)
WHERE tenant_id = $1 AND run_id = $2 AND outcome IN ('running', 'lease_lost');

-- name: backend_identity
-- and whether this user may create the staging tables (Connection.stage, in each
-- transaction that fills one): checked once per session, so a missing grant is named at start.
-- Also whether the session is read-only (a standby, or default_transaction_read_only):
-- such a session is not pooled, as when its first statement wrote.
SELECT a.pid, a.backend_start,
       has_database_privilege(current_database(), 'TEMPORARY') AS temporary,
       current_setting('transaction_read_only') = 'on' AS read_only
FROM (SELECT pg_backend_pid() AS me) s LEFT JOIN pg_stat_activity a ON a.pid = s.me;

-- name: backend_terminate
-- Waits up to $3 ms for the session to exit (PostgreSQL >= 14).
SELECT pg_terminate_backend(pid, $3::bigint)
FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2;

-- name: backend_alive
SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2);

-- name: transaction_terminate
-- Behind a transaction pooler: end server session $1 only while it is still inside the
-- transaction that started at $2 (one the pooler has handed to other work is left
-- alone); waits up to $3 ms for it to exit.
SELECT pg_terminate_backend(pid, $3::bigint)
FROM pg_stat_activity WHERE pid = $1 AND xact_start = $2;

-- name: transaction_alive
SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND xact_start = $2);

-- name: users_existing
SELECT u.tenant_id, u.user_id FROM users u
JOIN unnest($1::text[], $2::text[]) AS k (tenant_id, user_id)
  ON u.tenant_id = k.tenant_id AND u.user_id = k.user_id;

-- name: runs_usage_total
-- A task's run budget spans its attempts and roots: what every run but $3 (the one
-- starting) used. Charges are written before they are spent, so a killed or stale run's
-- spending counts too.
SELECT coalesce(sum((usage->>'model_requests')::bigint), 0) AS model_requests,
       coalesce(sum((usage->>'tool_attempts')::bigint), 0) AS tool_attempts,
       coalesce(sum((usage->>'cost_usd')::numeric), 0) AS cost_usd,
       coalesce(sum((usage->>'input_tokens')::bigint), 0) AS input_tokens,
       coalesce(sum((usage->>'output_tokens')::bigint), 0) AS output_tokens
FROM runs WHERE tenant_id = $1 AND task_id = $2 AND run_id <> $3;

-- name: tasks_release_orphaned_holds
-- Safety net for queue_one: a held task whose predecessor has ended is released.
UPDATE tasks t SET status = 'pending', status_reason = 'the previous task ended'
WHERE t.status = 'held'
  AND NOT EXISTS (SELECT 1 FROM tasks p
                  WHERE p.tenant_id = t.tenant_id AND p.task_id = t.held_behind
                    AND p.status IN ('pending', 'held', 'running', 'suspended', 'review_required'))
RETURNING t.tenant_id, t.task_id;

-- name: occurrences_by_keys
SELECT tenant_id, definition_id, binding_id, slot, kind, decision, decided_by, decided_at
FROM occurrences o
JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
     AS k (tenant_id, definition_id, binding_id, slot, kind)
  USING (tenant_id, definition_id, binding_id, slot, kind);

-- name: tenant_exists
SELECT tenant_id FROM tenants WHERE tenant_id = $1;

-- ---------------------------------------------------------------- conditions

-- name: conditions_due_lock
-- Poll phase 1: the condition definitions whose next poll is due; rows another
-- supervisor holds are skipped (it polls them). $3: one tenant only (a replay), or NULL
-- for every tenant but the replays' ('_replay-...', on a virtual clock). $4: the source
-- names this poller has (the revision's poll_source): a poll it could not read is left
-- to a poller that can. The spec itself is not read: the poller parses each spec_hash once per process
-- (specs_by_hash for the ones it has not seen).
SELECT d.tenant_id, d.definition_id, d.origin, d.owner_user_id, d.fence,
       d.effective_revision, d.cursor_at, d.slots_seen, d.next_due_at, r.spec_hash
FROM definitions d
JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = d.effective_revision
WHERE d.status = 'active' AND d.trigger_kind = 'condition' AND d.next_due_at <= $1
  AND CASE WHEN $3::text IS NULL THEN d.tenant_id NOT LIKE '\_replay-%'
           ELSE d.tenant_id = $3 END
  AND r.poll_source = ANY($4::text[])
ORDER BY d.next_due_at, d.tenant_id, d.definition_id
LIMIT $2
FOR UPDATE OF d SKIP LOCKED;

-- name: condition_polls_claim
-- Poll phase 1, set-based, over the rows COPYed into wk_stage_claims and
-- wk_stage_advances just before: in one statement, insert the batch's poll rows (the
-- primary key makes it at most one poll per slot, however many supervisors race: a
-- slot polled already loses, silently), advance every locked definition to its next
-- poll, and charge the polling budget of each poll actually claimed (every poll is
-- charged, whatever it will return). A poll staged with its action is inserted decided:
-- one over budget ('denied_poll_budget', its reason; nothing read), or a quiet one
-- judged at its claim on readings kept from an earlier pass (its verdict and read_at_us;
-- its receipts and condition state staged in wk_stage_observations,
-- wk_stage_poll_receipts and wk_stage_states as for condition_polls_decide, and written
-- only if its poll was claimed). $1: now (claimed_at; decided_at of a poll inserted
-- decided), $2: the claimant; $3..$9: the charges (tenant, definition, binding, slot,
-- period start, period end, limit). Staged instants are microseconds since the Unix
-- epoch (as in admission_write).
-- Returns the (tenant, definition, slot) of each staged poll NOT claimed (its slot was
-- polled already): none, but in a race.
WITH claimed AS (
    INSERT INTO condition_polls (tenant_id, definition_id, binding_id, slot, scheduled_for,
                                 revision, fence, condition_key, superseded, claimed_at,
                                 claimed_by, status, action, reason, decided_at, verdict,
                                 read_at)
    SELECT c.tenant_id, c.definition_id, c.binding_id, c.slot,
           to_timestamp(c.scheduled_for_us / 1000000) + (c.scheduled_for_us % 1000000) * interval '1 microsecond',
           c.revision, c.fence, c.condition_key, c.superseded, $1::timestamptz, $2::text,
           CASE WHEN c.action IS NULL THEN 'reading' ELSE 'decided' END, c.action, c.reason,
           CASE WHEN c.action IS NULL THEN NULL ELSE $1::timestamptz END, c.verdict,
           to_timestamp(c.read_at_us / 1000000) + (c.read_at_us % 1000000) * interval '1 microsecond'
    FROM wk_stage_claims c
    ON CONFLICT DO NOTHING
    RETURNING tenant_id, definition_id, binding_id, slot
),
advanced AS (
    UPDATE definitions d
    SET cursor_at = to_timestamp(a.cursor_us / 1000000) + (a.cursor_us % 1000000) * interval '1 microsecond',
        slots_seen = a.slots_seen,
        next_due_at = to_timestamp(a.next_due_us / 1000000) + (a.next_due_us % 1000000) * interval '1 microsecond',
        status = a.status, updated_at = $1::timestamptz
    FROM wk_stage_advances a
    WHERE d.tenant_id = a.tenant_id AND d.definition_id = a.definition_id
),
charged AS (
    INSERT INTO poll_budget_ledger AS b (tenant_id, definition_id, binding_id, period_start,
                                         period_end, poll_limit, used)
    SELECT k.tenant_id, k.definition_id, k.binding_id, k.period_start, k.period_end,
           k.poll_limit, 1
    FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
                $8::timestamptz[], $9::integer[])
         AS k (tenant_id, definition_id, binding_id, slot, period_start, period_end,
               poll_limit)
    JOIN claimed c USING (tenant_id, definition_id, slot)
    ON CONFLICT (tenant_id, definition_id, binding_id, period_start)
    DO UPDATE SET used = b.used + 1
),
receipts AS (
    INSERT INTO observation_receipts (tenant_id, definition_id, binding_id, slot, subject,
                                      source, source_version, observation_id, value, unit,
                                      currency, as_of, fetched_at, status, detail, verdict)
    SELECT r.tenant_id, r.definition_id, r.binding_id, r.slot, o.subject, o.source,
           o.source_version, o.observation_id, o.value, o.unit, o.currency,
           to_timestamp(o.as_of_us / 1000000) + (o.as_of_us % 1000000) * interval '1 microsecond',
           to_timestamp(o.fetched_at_us / 1000000) + (o.fetched_at_us % 1000000) * interval '1 microsecond',
           o.status, o.detail, r.verdict
    FROM wk_stage_poll_receipts r
    JOIN wk_stage_observations o ON o.n = r.observation
    JOIN claimed c USING (tenant_id, definition_id, binding_id, slot)
    ON CONFLICT DO NOTHING
),
states AS (
    INSERT INTO condition_state AS s (tenant_id, definition_id, binding_id, condition_key,
                                      revision, last_definite, latched, last_fired_at,
                                      decided_through, updated_at)
    SELECT k.tenant_id, k.definition_id, k.binding_id, k.condition_key, k.revision,
           k.last_definite, k.latched,
           to_timestamp(k.last_fired_at_us / 1000000) + (k.last_fired_at_us % 1000000) * interval '1 microsecond',
           to_timestamp(k.decided_through_us / 1000000) + (k.decided_through_us % 1000000) * interval '1 microsecond',
           $1::timestamptz
    FROM wk_stage_states k
    JOIN claimed c USING (tenant_id, definition_id, binding_id)
    ON CONFLICT (tenant_id, definition_id, binding_id) DO UPDATE
    SET condition_key = EXCLUDED.condition_key, revision = EXCLUDED.revision,
        last_definite = EXCLUDED.last_definite, latched = EXCLUDED.latched,
        last_fired_at = EXCLUDED.last_fired_at, decided_through = EXCLUDED.decided_through,
        updated_at = EXCLUDED.updated_at
)
SELECT s.tenant_id, s.definition_id, s.slot
FROM wk_stage_claims s
WHERE NOT EXISTS (SELECT FROM claimed c WHERE c.tenant_id = s.tenant_id
                  AND c.definition_id = s.definition_id AND c.slot = s.slot);

-- name: poll_budgets_for
-- The polling budget ledger rows of a batch's (tenant, definition, binding, period).
SELECT b.tenant_id, b.definition_id, b.period_start, b.poll_limit, b.used
FROM poll_budget_ledger b
JOIN unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
     AS k (tenant_id, definition_id, binding_id, period_start)
  ON b.tenant_id = k.tenant_id AND b.definition_id = k.definition_id
 AND b.binding_id = k.binding_id AND b.period_start = k.period_start;

-- name: condition_polls_get
-- Polls by key (a lost COMMIT's read-back).
SELECT p.tenant_id, p.definition_id, p.slot, p.status, p.action, p.reason, p.task_id
FROM condition_polls p
JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[])
     AS k (tenant_id, definition_id, binding_id, slot)
  ON p.tenant_id = k.tenant_id AND p.definition_id = k.definition_id
 AND p.binding_id = k.binding_id AND p.slot = k.slot;

-- name: condition_polls_lock
-- Poll phase 3: the batch's poll rows and their definitions, locked together in key
-- order (the definition waits for a confirm, pause or cancel in flight; its fence and
-- revision are rechecked). Every poller locks in this order, so two pollers never
-- deadlock. A poll whose row or definition is gone is missing here
-- (condition_polls_lock_alone tells which).
SELECT p.tenant_id, p.definition_id, p.slot, p.status, p.action, p.task_id,
       d.status AS definition_status, d.fence, d.effective_revision
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])
     AS k (tenant_id, definition_id, binding_id, slot)
JOIN condition_polls p
  ON p.tenant_id = k.tenant_id AND p.definition_id = k.definition_id
 AND p.binding_id = k.binding_id AND p.slot = k.slot
JOIN definitions d ON d.tenant_id = p.tenant_id AND d.definition_id = p.definition_id
WHERE p.definition_id = ANY($2::text[]) AND d.definition_id = ANY($2::text[])
ORDER BY p.tenant_id, p.definition_id, p.binding_id, p.slot
FOR UPDATE OF p, d;

-- name: condition_polls_lock_alone
-- The poll rows of keys condition_polls_lock did not return (their definition is gone,
-- or the poll itself), locked.
SELECT p.tenant_id, p.definition_id, p.slot, p.status, p.action, p.task_id
FROM condition_polls p
JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[])
     AS k (tenant_id, definition_id, binding_id, slot)
  ON p.tenant_id = k.tenant_id AND p.definition_id = k.definition_id
 AND p.binding_id = k.binding_id AND p.slot = k.slot
ORDER BY p.tenant_id, p.definition_id, p.binding_id, p.slot
FOR UPDATE OF p;

-- name: condition_states_get
-- Poll phase 3: the stored condition states of the batch's bindings. Read after
-- condition_polls_lock, in a statement of its own (a fresh snapshot): only a poller
-- holding the definition's row lock writes its condition state, so no lock is needed.
SELECT s.tenant_id, s.definition_id, s.binding_id, s.condition_key, s.last_definite,
       s.latched, s.last_fired_at, s.decided_through
FROM condition_state s
JOIN unnest($1::text[], $2::text[], $3::text[]) AS k (tenant_id, definition_id, binding_id)
  ON s.tenant_id = k.tenant_id AND s.definition_id = k.definition_id
 AND s.binding_id = k.binding_id
WHERE s.definition_id = ANY($2::text[]);

-- name: condition_polls_decide
-- Poll phase 3, set-based, over the rows COPYed just before into wk_stage_observations
-- (each observation read for the chunk once, by its ordinal n), wk_stage_poll_receipts
-- (one per poll and subject, naming its observation), wk_stage_states (one per binding:
-- the state the chunk's poll of it left) and wk_stage_decisions (the polls still
-- 'reading'): in one statement, the observation receipts, the condition states, the
-- definitions that complete (a first_match that fired and was admitted, or a latched
-- one a revision re-activated: $2, $3) and the polls' decisions. $1: now (decided_at,
-- updated_at). Staged instants are microseconds since the Unix epoch.
WITH receipts AS (
    INSERT INTO observation_receipts (tenant_id, definition_id, binding_id, slot, subject,
                                      source, source_version, observation_id, value, unit,
                                      currency, as_of, fetched_at, status, detail, verdict)
    SELECT r.tenant_id, r.definition_id, r.binding_id, r.slot, o.subject, o.source,
           o.source_version, o.observation_id, o.value, o.unit, o.currency,
           to_timestamp(o.as_of_us / 1000000) + (o.as_of_us % 1000000) * interval '1 microsecond',
           to_timestamp(o.fetched_at_us / 1000000) + (o.fetched_at_us % 1000000) * interval '1 microsecond',
           o.status, o.detail, r.verdict
    FROM wk_stage_poll_receipts r
    JOIN wk_stage_observations o ON o.n = r.observation
    ON CONFLICT DO NOTHING
),
states AS (
    INSERT INTO condition_state AS s (tenant_id, definition_id, binding_id, condition_key,
                                      revision, last_definite, latched, last_fired_at,
                                      decided_through, updated_at)
    SELECT k.tenant_id, k.definition_id, k.binding_id, k.condition_key, k.revision,
           k.last_definite, k.latched,
           to_timestamp(k.last_fired_at_us / 1000000) + (k.last_fired_at_us % 1000000) * interval '1 microsecond',
           to_timestamp(k.decided_through_us / 1000000) + (k.decided_through_us % 1000000) * interval '1 microsecond',
           $1::timestamptz
    FROM wk_stage_states k
    ON CONFLICT (tenant_id, definition_id, binding_id) DO UPDATE
    SET condition_key = EXCLUDED.condition_key, revision = EXCLUDED.revision,
        last_definite = EXCLUDED.last_definite, latched = EXCLUDED.latched,
        last_fired_at = EXCLUDED.last_fired_at, decided_through = EXCLUDED.decided_through,
        updated_at = EXCLUDED.updated_at
),
completed AS (
    UPDATE definitions d SET status = 'completed', next_due_at = NULL, updated_at = $1
    FROM unnest($2::text[], $3::text[]) AS k (tenant_id, definition_id)
    WHERE d.tenant_id = k.tenant_id AND d.definition_id = k.definition_id
      AND d.definition_id = ANY($3::text[])
)
UPDATE condition_polls p
SET status = 'decided', read_at = to_timestamp(k.read_at_us / 1000000) + (k.read_at_us % 1000000) * interval '1 microsecond',
    verdict = k.verdict, action = k.action, reason = k.reason, task_id = k.task_id,
    decided_at = $1
FROM wk_stage_decisions k
WHERE p.tenant_id = k.tenant_id AND p.definition_id = k.definition_id
  AND p.binding_id = k.binding_id AND p.slot = k.slot AND p.status = 'reading';

-- name: condition_polls_abandon
-- Polls claimed by a poller that never decided them (it died between the read and the
-- admission): decided 'abandoned', so the timeline has no hole and nothing waits.
-- $3: one tenant (a replay, on its own clock), or NULL for all but the replays'.
UPDATE condition_polls
SET status = 'decided', action = 'abandoned', decided_at = $1,
    reason = 'the poller stopped between reading the source and deciding; nothing admitted'
WHERE status = 'reading' AND claimed_at < $2
  AND CASE WHEN $3::text IS NULL THEN tenant_id NOT LIKE '\_replay-%' ELSE tenant_id = $3 END
RETURNING tenant_id, definition_id, slot;

-- name: occurrences_insert_conditions
-- The occurrences of a batch's fired polls (kind 'condition', one per poll slot); the
-- key is the claim: an existing one loses, silently. Returns the keys inserted.
INSERT INTO occurrences (tenant_id, definition_id, binding_id, slot, kind, definition_tenant_id,
                         revision, scheduled_for, not_before, expires_at, zone, local_wall, fold,
                         decision, reason, late, lateness_seconds, tzdata_version, decided_at,
                         decided_by)
SELECT k.tenant_id, k.definition_id, k.binding_id, k.slot, 'condition', k.definition_tenant_id,
       k.revision, k.scheduled_for, k.not_before, k.expires_at, 'UTC', k.local_wall, 0,
       k.decision, k.reason, false, 0, $12::text, $13::timestamptz, $14::text
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::integer[],
            $7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::timestamp[],
            $11::text[], $15::text[])
     AS k (tenant_id, definition_id, binding_id, slot, definition_tenant_id, revision,
           scheduled_for, not_before, expires_at, local_wall, decision, reason)
ON CONFLICT DO NOTHING
RETURNING tenant_id, definition_id, binding_id, slot;

-- name: condition_polls_page
-- The poll timeline of one definition (or all of a tenant), each poll with the verdict of
-- the poll before it (over the whole timeline, so the first poll of a window knows
-- whether it changed anything). Filters come before the limit: $5 keeps only polls whose
-- verdict changed or that did something. Ascending from $3 (scheduled_for >= $3) or after
-- the keyset position ($6, $7, $8, $9) = (scheduled_for, definition_id, binding_id, slot);
-- with neither, the newest $4 (newest first; the caller shows them oldest first).
WITH timeline AS (
    SELECT p.*, lag(p.verdict) OVER (PARTITION BY p.definition_id, p.binding_id
                                     ORDER BY p.scheduled_for, p.slot) AS previous_verdict
    FROM condition_polls p
    WHERE p.tenant_id = $1 AND ($2::text IS NULL OR p.definition_id = $2)
), picked AS (
    SELECT * FROM timeline t
    WHERE ($3::timestamptz IS NULL OR t.scheduled_for >= $3)
      AND ($6::timestamptz IS NULL
           OR (t.scheduled_for, t.definition_id, t.binding_id, t.slot) > ($6, $7, $8, $9))
      AND (NOT $5 OR t.action IS DISTINCT FROM 'none'
           OR t.verdict IS DISTINCT FROM t.previous_verdict)
    ORDER BY CASE WHEN $3::timestamptz IS NULL AND $6::timestamptz IS NULL
                  THEN (t.scheduled_for, t.definition_id, t.binding_id, t.slot) END DESC,
             t.scheduled_for, t.definition_id, t.binding_id, t.slot
    LIMIT $4
)
SELECT p.tenant_id, p.definition_id, p.binding_id, p.slot, p.scheduled_for, p.revision,
       p.superseded, p.status, p.read_at, p.verdict, p.previous_verdict, p.action, p.reason,
       p.task_id, p.decided_at,
       (SELECT json_agg(json_build_object(
                  'subject', o.subject, 'value', o.value::text, 'unit', o.unit,
                  'currency', o.currency, 'source', o.source,
                  'source_version', o.source_version,
                  'as_of', to_char(o.as_of AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                  'status', o.status, 'verdict', o.verdict) ORDER BY o.subject)
          FROM observation_receipts o
         WHERE o.tenant_id = p.tenant_id AND o.definition_id = p.definition_id
           AND o.binding_id = p.binding_id AND o.slot = p.slot) AS observations
FROM picked p
ORDER BY CASE WHEN $3::timestamptz IS NULL AND $6::timestamptz IS NULL
              THEN (p.scheduled_for, p.definition_id, p.binding_id, p.slot) END DESC,
         p.scheduled_for, p.definition_id, p.binding_id, p.slot;

-- name: task_ids_for
-- The task of each (tenant, definition, binding, slot) of kind $5.
SELECT t.tenant_id, t.definition_id, t.binding_id, t.slot, t.task_id
FROM tasks t
JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[])
     AS k (tenant_id, definition_id, binding_id, slot)
  ON t.tenant_id = k.tenant_id AND t.definition_id = k.definition_id
 AND t.binding_id = k.binding_id AND t.slot = k.slot
WHERE t.kind = $5 AND t.definition_id = ANY($2::text[]);

-- name: quiet_polls_write
-- A replay's quiet run (engine/_quiet.py), in one statement: the decided polls of tenant
-- $1 and their receipts (binding $2), COPYed into wk_stage_polls and wk_stage_receipts
-- just before — each poll claimed, read and decided at its own instant by $3, under its
-- definition's revision, fence and condition key (the per-definition arrays) — and each
-- definition's advance to its next poll and its condition state, at its last poll. A
-- poll slot that exists already is a conflict (the primary key): the statement fails
-- and the batch is rolled back. Returns the polls inserted.
WITH defs AS (
    SELECT * FROM unnest($4::text[], $5::timestamptz[], $6::bigint[], $7::timestamptz[],
                         $8::text[], $9::integer[], $10::bigint[], $11::boolean[],
                         $12::boolean[], $13::timestamptz[])
         AS a (definition_id, cursor_at, slots_seen, next_due_at, condition_key, revision,
               fence, last_definite, latched, last_fired_at)
),
polls AS (
    INSERT INTO condition_polls (tenant_id, definition_id, binding_id, slot, scheduled_for,
                                 revision, fence, condition_key, superseded, claimed_at,
                                 claimed_by, status, read_at, verdict, action, reason,
                                 decided_at)
    SELECT $1::text, p.definition_id, $2::text, p.slot, p.scheduled_for, d.revision, d.fence,
           d.condition_key, 0, p.scheduled_for, $3::text, 'decided', p.scheduled_for,
           p.verdict, p.action, p.reason, p.scheduled_for
    FROM wk_stage_polls p JOIN defs d USING (definition_id)
    RETURNING 1
),
receipts AS (
    INSERT INTO observation_receipts (tenant_id, definition_id, binding_id, slot, subject,
                                      source, source_version, observation_id, value, unit,
                                      currency, as_of, fetched_at, status, detail, verdict)
    SELECT $1::text, r.definition_id, $2::text, r.slot, r.subject, r.source, r.source_version,
           r.observation_id, r.value, r.unit, r.currency, r.as_of, r.fetched_at, r.status,
           r.detail, r.verdict
    FROM wk_stage_receipts r
),
advanced AS (
    UPDATE definitions d
    SET cursor_at = a.cursor_at, slots_seen = a.slots_seen, next_due_at = a.next_due_at,
        updated_at = a.cursor_at
    FROM defs a
    WHERE d.tenant_id = $1 AND d.definition_id = a.definition_id
),
states AS (
    INSERT INTO condition_state AS s (tenant_id, definition_id, binding_id, condition_key,
                                      revision, last_definite, latched, last_fired_at,
                                      decided_through, updated_at)
    SELECT $1::text, a.definition_id, $2::text, a.condition_key, a.revision, a.last_definite,
           a.latched, a.last_fired_at, a.cursor_at, a.cursor_at
    FROM defs a
    ON CONFLICT (tenant_id, definition_id, binding_id) DO UPDATE
    SET condition_key = EXCLUDED.condition_key, revision = EXCLUDED.revision,
        last_definite = EXCLUDED.last_definite, latched = EXCLUDED.latched,
        last_fired_at = EXCLUDED.last_fired_at, decided_through = EXCLUDED.decided_through,
        updated_at = EXCLUDED.updated_at
)
SELECT count(*) FROM polls;

-- name: replay_conditions
-- A replay's active condition definitions with their effective spec and stored
-- condition state (its quiet runs are decided in memory from these).
SELECT d.tenant_id, d.definition_id, d.origin, d.owner_user_id, d.fence,
       d.effective_revision, d.cursor_at, d.slots_seen, d.next_due_at, d.status,
       r.spec_hash, r.spec, s.condition_key, s.last_definite, s.latched, s.last_fired_at,
       s.decided_through
FROM definitions d
JOIN definition_revisions r
  ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
 AND r.revision = d.effective_revision
LEFT JOIN condition_state s
  ON s.tenant_id = d.tenant_id AND s.definition_id = d.definition_id AND s.binding_id = $2
WHERE d.tenant_id = $1 AND d.status = 'active' AND d.trigger_kind = 'condition'
ORDER BY d.definition_id;

-- name: replay_next_poll
-- The earliest next poll of a replay tenant's active condition definitions.
SELECT min(next_due_at) FROM definitions
WHERE tenant_id = $1 AND status = 'active' AND trigger_kind = 'condition';

-- name: definition_is_open
SELECT status IN ('active', 'paused') FROM definitions WHERE tenant_id = $1 AND definition_id = $2;

-- name: definition_visible
-- Whether a definition id names something in tenant $1 (any tenant when NULL): its own
-- definition, or an operator-registered one (whose occurrences live in the bindings'
-- tenants).
SELECT EXISTS (SELECT 1 FROM definitions
               WHERE definition_id = $2
                 AND ($1::text IS NULL OR tenant_id = $1 OR tenant_id = '_operator'));

-- ---------------------------------------------------------------- replay tenants

-- name: tenant_purge
-- Remove every row of one tenant, in one statement (foreign keys are checked at its
-- end). Only replay tenants are ever purged (the caller checks the '_replay-' prefix;
-- so does this WHERE). tests/test_replay.py checks that every table with a tenant_id
-- column is listed here.
WITH
  a AS (DELETE FROM delivery_attempts WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  b AS (DELETE FROM deliveries WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  nr AS (DELETE FROM not_run_notices WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  c AS (DELETE FROM effects WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  d AS (DELETE FROM reports WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  e AS (DELETE FROM runs WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  f AS (DELETE FROM tasks WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  g AS (DELETE FROM observation_receipts WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  h AS (DELETE FROM condition_polls WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  i AS (DELETE FROM condition_state WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  j AS (DELETE FROM poll_budget_ledger WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  k AS (DELETE FROM budget_ledger WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  l AS (DELETE FROM schedule_events WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  m AS (DELETE FROM occurrences WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  n AS (DELETE FROM definition_revisions WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  o AS (DELETE FROM definitions WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  p AS (DELETE FROM notification_preferences WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  q AS (DELETE FROM webhook_secrets WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  r AS (DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  pg AS (DELETE FROM page_sessions WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  s AS (DELETE FROM users WHERE tenant_id = $1 AND $1 LIKE '\_replay-%'),
  t AS (DELETE FROM api_keys WHERE tenant_id = $1 AND $1 LIKE '\_replay-%')
DELETE FROM tenants WHERE tenant_id = $1 AND $1 LIKE '\_replay-%' RETURNING tenant_id;

-- name: deliveries_settle_tenant
-- A kept replay's notices that were never sent (the replay ended first): suppressed with
-- the reason, so nothing of a replay stays due forever.
UPDATE deliveries
SET status = 'suppressed', status_reason = $2, lease_owner = NULL, lease_expires_at = NULL
WHERE tenant_id = $1 AND status IN ('pending', 'retrying', 'delivering')
RETURNING delivery_id;

-- name: replay_tenants_before
-- Replay tenants created before $1, oldest first.
SELECT tenant_id, created_at FROM tenants
WHERE tenant_id LIKE '\_replay-%' AND created_at < $1
ORDER BY created_at;

-- ---------------------------------------------------------------- API keys

-- name: api_key_insert
INSERT INTO api_keys (key_id, kind, tenant_id, name, secret_sha256, created_at, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: api_key_get
SELECT key_id, kind, tenant_id, name, secret_sha256, created_at, created_by, revoked_at,
       last_used_at
FROM api_keys WHERE key_id = $1;

-- name: api_key_used
-- At most one write a minute per key: last_used_at is for people, not an audit log.
UPDATE api_keys SET last_used_at = $2
WHERE key_id = $1 AND (last_used_at IS NULL OR last_used_at < $2::timestamptz - interval '1 minute');

-- name: api_keys_list
SELECT key_id, kind, tenant_id, name, created_at, created_by, revoked_at, last_used_at
FROM api_keys
WHERE ($1::text IS NULL OR tenant_id = $1)
ORDER BY tenant_id NULLS FIRST, created_at, key_id;

-- name: api_key_revoke
-- The page sessions the key signed in end with it, in the same statement.
WITH revoked AS (
    UPDATE api_keys SET revoked_at = $3
    WHERE key_id = $1 AND tenant_id IS NOT DISTINCT FROM coalesce($2, tenant_id)
      AND revoked_at IS NULL
    RETURNING key_id
), sessions AS (
    UPDATE page_sessions SET revoked_at = $3, revoked_why = 'key revoked'
    WHERE key_id IN (SELECT key_id FROM revoked) AND revoked_at IS NULL
)
SELECT key_id FROM revoked;

-- name: replay_lock
-- A running replay holds this lock on its tenant in a transaction it keeps open for as
-- long as it runs (a killed replay's session ends and releases it), so prune never
-- removes a live one. Transaction-scoped, not a session lock: a pooler in transaction
-- mode keeps one server session for an open transaction, never for a client.
SELECT pg_advisory_xact_lock(hashtextextended('watchkeeper replay ' || $1, 0));

-- name: snapshot_release
-- Sent with no parameters, so by the simple protocol: it closes the unnamed portal that
-- the statement before it (sent with parameters) left open, and with it that
-- statement's snapshot. A transaction kept open afterwards (replay_lock's) then holds
-- back no vacuum horizon: without it a replay kept every dead row of the database,
-- catalogs included, from being vacuumed for as long as it ran.
SELECT 1;

-- name: replay_try_lock
-- Held by prune's transaction while it removes the tenant.
SELECT pg_try_advisory_xact_lock(hashtextextended('watchkeeper replay ' || $1, 0));

-- name: plan_for_these_values
-- Inside a transaction: plan the next statements for the values they get, never with a
-- generic plan cached from other values (a history page's best plan depends on whether
-- a cursor, an owner or a definition is given; a generic one sorts the whole tenant).
SET LOCAL plan_cache_mode = force_custom_plan;

-- name: definitions_of_owner
SELECT definition_id FROM definitions WHERE tenant_id = $1 AND owner_user_id = $2;

-- ---------------------------------------------------------------- page sessions

-- name: page_session_insert
INSERT INTO page_sessions (session_sha256, kind, tenant_id, user_id, token_sha256, key_id,
                           created_at, expires_at, last_seen_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7);

-- name: page_session_use
-- The principal of a session at $2 (now): not revoked, not expired, and its credential
-- still the one that signed in (the user's token unchanged, the operator key unrevoked);
-- last_seen_at moves to $2.
UPDATE page_sessions s SET last_seen_at = $2
WHERE s.session_sha256 = $1 AND s.revoked_at IS NULL AND s.expires_at > $2
  AND CASE s.kind
        WHEN 'user' THEN EXISTS (
            SELECT 1 FROM users u
            WHERE u.tenant_id = s.tenant_id AND u.user_id = s.user_id
              AND u.token_sha256 = s.token_sha256)
        ELSE EXISTS (
            SELECT 1 FROM api_keys k
            WHERE k.key_id = s.key_id AND k.kind = 'operator' AND k.revoked_at IS NULL)
      END
RETURNING s.kind, s.tenant_id, s.user_id, s.key_id, s.expires_at;

-- name: page_session_revoke
UPDATE page_sessions SET revoked_at = $2, revoked_why = $3
WHERE session_sha256 = $1 AND revoked_at IS NULL
RETURNING kind;

-- name: page_sessions_prune
-- Sessions past their expiry ($1: now) are of no use to anyone.
DELETE FROM page_sessions WHERE expires_at <= $1;

-- name: read_freshness
-- On the read standby (DATABASE_READ_URL), before a read: how old its data may be, in
-- seconds. 0 when it streams from the primary and has replayed all it received (the WAL
-- receiver's status needs pg_read_all_stats or a superuser; without it this case is not
-- seen and the next applies); else the time since the last transaction it replayed was
-- committed on the primary (NULL when it has replayed none since it started); 0 on a
-- server not in recovery (a promoted standby).
SELECT pg_last_xact_replay_timestamp() AS replayed_at,
       CASE
         WHEN NOT pg_is_in_recovery() THEN 0::float8
         WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
              AND EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming')
           THEN 0::float8
         ELSE greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))::float8
       END AS lag_seconds;
