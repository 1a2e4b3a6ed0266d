-- watchkeeper 0001: definitions, occurrences, tasks, runs, reports, deliveries.
--
-- Every table carries tenant_id in its primary key so the schema can be
-- distributed by tenant (Citus). Operator-registered definitions live under the
-- reserved pseudo-tenant '_operator'; their occurrences and tasks live under the
-- tenant of each binding and point back with definition_tenant_id.
-- Instants are timestamptz and always written from the caller's injected clock.

CREATE TABLE tenants (
    tenant_id   text PRIMARY KEY,
    created_at  timestamptz NOT NULL
);

CREATE TABLE users (
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id),
    user_id       text NOT NULL,
    display_name  text NOT NULL DEFAULT '',
    zone          text NOT NULL DEFAULT 'UTC',
    token_sha256  bytea UNIQUE,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);

CREATE TABLE definitions (
    tenant_id            text NOT NULL,
    definition_id        text NOT NULL,
    origin               text NOT NULL CHECK (origin IN ('user', 'operator')),
    owner_user_id        text,
    status               text NOT NULL
                         CHECK (status IN ('proposed', 'active', 'paused', 'cancelled', 'completed',
                                           'failed')),
    fence                bigint NOT NULL DEFAULT 0,
    latest_revision      integer NOT NULL,
    effective_revision   integer,
    effective_since      timestamptz,
    cursor_at            timestamptz,
    slots_seen           bigint NOT NULL DEFAULT 0,
    next_due_at          timestamptz,
    paused_at            timestamptz,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, definition_id),
    CHECK (origin = 'operator' OR owner_user_id IS NOT NULL)
);
CREATE INDEX definitions_due ON definitions (next_due_at, tenant_id, definition_id)
    WHERE status = 'active';
-- Every admission moves next_due_at: have VACUUM always clean the due index, so dead
-- entries left by idle rows' neighbours never slow the "what is due" scan.
ALTER TABLE definitions SET (vacuum_index_cleanup = on);

CREATE TABLE definition_revisions (
    tenant_id       text NOT NULL,
    definition_id   text NOT NULL,
    revision        integer NOT NULL,
    spec            jsonb NOT NULL,
    spec_hash       text NOT NULL,
    registration    jsonb,
    status          text NOT NULL
                    CHECK (status IN ('proposed', 'confirmed', 'registered', 'superseded', 'withdrawn')),
    based_on        integer,
    proposed_by     text NOT NULL,
    proposed_at     timestamptz NOT NULL,
    confirmed_by    text,
    confirmed_at    timestamptz,
    PRIMARY KEY (tenant_id, definition_id, revision),
    FOREIGN KEY (tenant_id, definition_id) REFERENCES definitions (tenant_id, definition_id)
);
CREATE INDEX definition_revisions_hash ON definition_revisions (spec_hash);

-- The claim: one row per occurrence key. The primary key is the at-most-once mechanism.
CREATE TABLE occurrences (
    tenant_id             text NOT NULL,
    definition_id         text NOT NULL,
    binding_id            text NOT NULL,
    slot                  text NOT NULL,
    kind                  text NOT NULL CHECK (kind IN ('scheduled', 'manual')),
    definition_tenant_id  text NOT NULL,
    revision              integer NOT NULL,
    scheduled_for         timestamptz NOT NULL,
    not_before            timestamptz NOT NULL,
    expires_at            timestamptz NOT NULL,
    zone                  text NOT NULL,
    local_wall            timestamp NOT NULL,
    fold                  smallint NOT NULL DEFAULT 0,
    tzdata_version        text NOT NULL,
    decision              text NOT NULL CHECK (decision IN (
                              'admitted', 'skipped_expired', 'review_required', 'skipped_review',
                              'skipped_overrun', 'denied_budget', 'skipped_dst_gap')),
    reason                text NOT NULL,
    late                  boolean NOT NULL DEFAULT false,
    lateness_seconds      double precision NOT NULL DEFAULT 0,
    decided_at            timestamptz NOT NULL,
    decided_by            text NOT NULL,
    -- the `run` terminal (operator housekeeping) has no task: its outcome lives here
    run_status            text CHECK (run_status IN ('running', 'ok', 'failed', 'stale')),
    run_deadline_at       timestamptz,
    run_finished_at       timestamptz,
    run_error             text,
    PRIMARY KEY (tenant_id, definition_id, binding_id, slot, kind)
);
CREATE INDEX occurrences_history ON occurrences (definition_tenant_id, definition_id, scheduled_for);
CREATE INDEX occurrences_review ON occurrences (decision) WHERE decision = 'review_required';
CREATE INDEX occurrences_running ON occurrences (run_deadline_at) WHERE run_status = 'running';

-- Decisions that claim no key: superseded and paused ranges, fenced-out computations,
-- clock uncertainty, invalid binding sets. One row per decision, never per missed slot.
CREATE TABLE schedule_events (
    tenant_id             text NOT NULL,
    event_id              bigint GENERATED ALWAYS AS IDENTITY,
    definition_id         text NOT NULL,
    binding_id            text NOT NULL,
    revision              integer,
    kind                  text NOT NULL CHECK (kind IN (
                              'skipped_superseded', 'skipped_paused', 'skipped_dst_gap',
                              'skipped_reconfirmed', 'fenced_out', 'clock_uncertain',
                              'bindings_invalid', 'schedule_ended', 'planning_failed')),
    first_slot            text,
    last_slot             text,
    first_at              timestamptz,
    last_at               timestamptz,
    count                 integer NOT NULL DEFAULT 0,
    reason                text NOT NULL,
    recorded_at           timestamptz NOT NULL,
    recorded_by           text NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);
CREATE INDEX schedule_events_history ON schedule_events (tenant_id, definition_id, recorded_at);

CREATE SEQUENCE lease_tokens AS bigint;

CREATE TABLE tasks (
    tenant_id             text NOT NULL,
    task_id               bigint GENERATED ALWAYS AS IDENTITY,
    definition_tenant_id  text NOT NULL,
    definition_id         text NOT NULL,
    binding_id            text NOT NULL,
    slot                  text NOT NULL,
    kind                  text NOT NULL,
    idempotency_key       text GENERATED ALWAYS AS
                          (definition_id || '/' || binding_id || '/' || slot || '/' || kind) STORED,
    revision              integer NOT NULL,
    owner_user_id         text NOT NULL,
    agent                 text NOT NULL,
    message               text NOT NULL DEFAULT '',
    params                jsonb NOT NULL DEFAULT '{}',
    delivery              jsonb NOT NULL DEFAULT '[]',
    audiences             jsonb,
    status                text NOT NULL CHECK (status IN (
                              'pending', 'held', 'running', 'suspended', 'review_required',
                              'completed', 'failed', 'failed_verification', 'timed_out',
                              'cancelled', 'expired', 'unknown')),
    status_reason         text NOT NULL DEFAULT '',
    late                  boolean NOT NULL DEFAULT false,
    late_policy           text NOT NULL,
    scheduled_for         timestamptz NOT NULL,
    not_before            timestamptz NOT NULL,
    expires_at            timestamptz NOT NULL,
    deadline_seconds      double precision NOT NULL,
    deadline_at           timestamptz,
    max_attempts          integer NOT NULL,
    attempts              integer NOT NULL DEFAULT 0,
    held_behind           bigint,
    lease_owner           text,
    lease_token           bigint,
    lease_expires_at      timestamptz,
    cancel_requested_at   timestamptz,
    admitted_at           timestamptz NOT NULL,
    started_at            timestamptz,
    finished_at           timestamptz,
    PRIMARY KEY (tenant_id, task_id),
    -- one task per occurrence key; the occurrence row (inserted first, same transaction)
    -- is the claim. No foreign key: its per-row check costs a third of admission time.
    UNIQUE (tenant_id, definition_id, binding_id, slot, kind)
);
CREATE INDEX tasks_claimable ON tasks (not_before) WHERE status = 'pending';
CREATE INDEX tasks_leases ON tasks (lease_expires_at) WHERE status = 'running';
CREATE INDEX tasks_active ON tasks (tenant_id, definition_id, binding_id)
    WHERE status IN ('pending', 'held', 'running', 'suspended', 'review_required');
CREATE INDEX tasks_held ON tasks (tenant_id, held_behind) WHERE status = 'held';

CREATE TABLE runs (
    tenant_id     text NOT NULL,
    run_id        bigint GENERATED ALWAYS AS IDENTITY,
    task_id       bigint NOT NULL,
    attempt       integer NOT NULL,
    lease_token   bigint NOT NULL,
    worker        text NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    outcome       text NOT NULL CHECK (outcome IN (
                      'running', 'succeeded', 'failed', 'failed_verification', 'timed_out',
                      'cancelled', 'lease_lost', 'rejected_stale', 'unknown')),
    error         text,
    usage         jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant_id, run_id),
    UNIQUE (tenant_id, task_id, attempt),
    FOREIGN KEY (tenant_id, task_id) REFERENCES tasks (tenant_id, task_id)
);

-- The receipt: what the run produced and whether it met the output promise.
CREATE TABLE reports (
    tenant_id      text NOT NULL,
    task_id        bigint NOT NULL,
    run_id         bigint NOT NULL,
    content_md     text NOT NULL,
    importance     text NOT NULL CHECK (importance IN ('low', 'normal', 'high')),
    content_sha256 text NOT NULL,
    output_ref     text NOT NULL,
    verified       boolean NOT NULL,
    verification   text NOT NULL,
    finished_at    timestamptz NOT NULL,
    committed_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, task_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES tasks (tenant_id, task_id)
);

CREATE TABLE deliveries (
    tenant_id        text NOT NULL,
    delivery_id      uuid NOT NULL,
    task_id          bigint NOT NULL,
    channel          text NOT NULL,
    destination      text NOT NULL,
    status           text NOT NULL CHECK (status IN (
                         'pending', 'delivering', 'delivered', 'retrying', 'dead', 'suppressed')),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    lease_owner      text,
    lease_expires_at timestamptz,
    last_error       text,
    response         text,
    created_at       timestamptz NOT NULL,
    delivered_at     timestamptz,
    PRIMARY KEY (tenant_id, delivery_id),
    UNIQUE (tenant_id, task_id, channel, destination),
    FOREIGN KEY (tenant_id, task_id) REFERENCES reports (tenant_id, task_id)
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status IN ('pending', 'retrying');

-- A task budget per accounting period; its limit is fixed when the period opens.
CREATE TABLE budget_ledger (
    tenant_id      text NOT NULL,
    definition_id  text NOT NULL,
    binding_id     text NOT NULL,
    period_start   timestamptz NOT NULL,
    period_end     timestamptz NOT NULL,
    task_limit     integer NOT NULL,
    used           integer NOT NULL,
    PRIMARY KEY (tenant_id, definition_id, binding_id, period_start),
    CHECK (used <= task_limit)
);

-- External effects, recorded before they are made so a retry cannot repeat one.
CREATE TABLE effects (
    tenant_id      text NOT NULL,
    effect_key     text NOT NULL,
    task_id        bigint NOT NULL,
    lease_token    bigint NOT NULL,
    status         text NOT NULL CHECK (status IN ('started', 'done', 'failed', 'not_applied')),
    result         jsonb,
    recorded_at    timestamptz NOT NULL,
    finished_at    timestamptz,
    PRIMARY KEY (tenant_id, effect_key),
    FOREIGN KEY (tenant_id, task_id) REFERENCES tasks (tenant_id, task_id)
);

CREATE TABLE supervisors (
    supervisor_id    text PRIMARY KEY,
    hostname         text NOT NULL,
    pid              integer NOT NULL,
    started_at       timestamptz NOT NULL,
    heartbeat_at     timestamptz NOT NULL,
    status           text NOT NULL,
    clock_offset_ms  double precision,
    detail           jsonb NOT NULL DEFAULT '{}'
);
