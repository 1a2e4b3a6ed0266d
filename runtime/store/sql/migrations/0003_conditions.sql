-- watchkeeper 0003: conditional triggers (DESIGN "Conditions (three-valued)").
-- A condition definition's next_due_at is its next poll; the calendar tick and the
-- poller each scan only their own kind, through their own partial index.

ALTER TABLE definitions
    ADD COLUMN trigger_kind text NOT NULL DEFAULT 'calendar'
        CHECK (trigger_kind IN ('calendar', 'condition'));
DROP INDEX definitions_due;
CREATE INDEX definitions_due ON definitions (next_due_at, tenant_id, definition_id)
    WHERE status = 'active' AND trigger_kind = 'calendar';
CREATE INDEX definitions_poll_due ON definitions (next_due_at, tenant_id, definition_id)
    WHERE status = 'active' AND trigger_kind = 'condition';

-- A fire admits an occurrence of kind 'condition' (its slot is the poll's).
ALTER TABLE occurrences DROP CONSTRAINT occurrences_kind_check;
ALTER TABLE occurrences ADD CONSTRAINT occurrences_kind_check
    CHECK (kind IN ('scheduled', 'manual', 'condition'));

-- The condition's memory, per definition and binding: it lives here, not in prunable
-- history, so a first_match latch survives the deletion of old polls and receipts.
-- condition_key hashes source, predicate and mode: a revision that changes any of them
-- starts fresh; one that keeps them keeps this row. decided_through: a poll decided late
-- (a slow read overtaken by a later poll) must not rewrite what the later one saw.
CREATE TABLE condition_state (
    tenant_id      text NOT NULL,
    definition_id  text NOT NULL,
    binding_id     text NOT NULL,
    condition_key  text NOT NULL,
    revision       integer NOT NULL,
    last_definite  boolean,
    latched        boolean NOT NULL DEFAULT false,
    last_fired_at  timestamptz,
    decided_through timestamptz NOT NULL,  -- the latest poll slot this state has seen
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, definition_id, binding_id)
);

-- One row per poll slot: the claim is the insert (at most one poll per slot, however
-- many supervisors race); the decision is recorded on it in the admission transaction.
CREATE TABLE condition_polls (
    tenant_id      text NOT NULL,
    definition_id  text NOT NULL,
    binding_id     text NOT NULL,
    slot           text NOT NULL,
    scheduled_for  timestamptz NOT NULL,
    revision       integer NOT NULL,
    fence          bigint NOT NULL,
    condition_key  text NOT NULL,
    superseded     integer NOT NULL DEFAULT 0,
    claimed_at     timestamptz NOT NULL,
    claimed_by     text NOT NULL,
    status         text NOT NULL CHECK (status IN ('reading', 'decided')),
    read_at        timestamptz,
    verdict        text CHECK (verdict IN ('true', 'false', 'unknown')),
    action         text,
    reason         text,
    task_id        bigint,
    decided_at     timestamptz,
    PRIMARY KEY (tenant_id, definition_id, binding_id, slot)
);
CREATE INDEX condition_polls_reading ON condition_polls (claimed_at) WHERE status = 'reading';
CREATE INDEX condition_polls_timeline ON condition_polls (tenant_id, definition_id, scheduled_for);

-- What each poll saw, one row per subject: the observation receipt.
CREATE TABLE observation_receipts (
    tenant_id       text NOT NULL,
    definition_id   text NOT NULL,
    binding_id      text NOT NULL,
    slot            text NOT NULL,
    subject         text NOT NULL,
    source          text NOT NULL,
    source_version  text NOT NULL,
    observation_id  text NOT NULL,
    value           numeric,
    unit            text,
    currency        text,
    as_of           timestamptz,
    fetched_at      timestamptz NOT NULL,
    status          text NOT NULL,
    detail          text NOT NULL,
    verdict         text NOT NULL CHECK (verdict IN ('true', 'false', 'unknown')),
    PRIMARY KEY (tenant_id, definition_id, binding_id, slot, subject)
);

-- The polling budget per accounting period: every poll consumes one (unknown ones
-- included); it never refunds or replenishes inside its period.
CREATE TABLE poll_budget_ledger (
    tenant_id      text NOT NULL,
    definition_id  text NOT NULL,
    binding_id     text NOT NULL,
    period_start   timestamptz NOT NULL,
    period_end     timestamptz NOT NULL,
    poll_limit     integer NOT NULL,
    used           integer NOT NULL,
    PRIMARY KEY (tenant_id, definition_id, binding_id, period_start),
    CHECK (used <= poll_limit)
);
