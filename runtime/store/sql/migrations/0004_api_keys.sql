-- watchkeeper 0004: API keys for the HTTP API and the MCP tools.
--
-- A key is shown once (wk_<kind>_<key_id>_<secret>) and stored as the SHA-256 of its
-- secret; a request is authenticated by looking the key up by its public key_id and
-- comparing digests in constant time. Kinds (DESIGN "Who may do what"): an agent key
-- and an app key and an operator key belong to one tenant; the tick secret drives one
-- tick and belongs to none. Revoked keys stay, for the audit trail of what they did.

CREATE TABLE api_keys (
    key_id         text PRIMARY KEY,
    kind           text NOT NULL CHECK (kind IN ('agent', 'app', 'operator', 'tick')),
    tenant_id      text REFERENCES tenants (tenant_id),
    name           text NOT NULL,
    secret_sha256  bytea NOT NULL,
    created_at     timestamptz NOT NULL,
    created_by     text NOT NULL,
    revoked_at     timestamptz,
    last_used_at   timestamptz,
    CHECK ((kind = 'tick') = (tenant_id IS NULL))
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, kind);

-- The last pause / resume / cancel: who did it and why (Temporal's pause carries a note).
ALTER TABLE definitions
    ADD COLUMN status_note text NOT NULL DEFAULT '',
    ADD COLUMN status_by   text;

-- The six facts of each occurrence, one row each (the history's read model;
-- PostgreSQL inlines the view, so each query's filters reach the indexes).
CREATE VIEW history_rows AS
SELECT o.tenant_id, o.definition_tenant_id, o.definition_id, o.binding_id, o.slot, o.kind,
       o.revision, o.scheduled_for, o.not_before, o.expires_at, o.zone, o.local_wall, o.fold,
       o.tzdata_version, o.decision, o.reason, o.late, o.lateness_seconds, o.decided_at,
       o.decided_by, o.run_status, o.run_error,
       coalesce(t.owner_user_id, d.owner_user_id) AS owner_user_id,
       d.origin, d.owner_user_id AS definition_owner, t.owner_user_id AS task_owner,
       t.task_id, t.status AS task_status, t.status_reason, t.attempts, t.started_at,
       t.finished_at, t.idempotency_key,
       r.content_sha256, r.verified, r.verification, r.committed_at, r.output_ref, r.importance,
       -- nested instants as ISO 8601 UTC ending in Z, like the top-level ones
       (SELECT json_agg(json_build_object(
                 'attempt', u.attempt, 'outcome', u.outcome, 'worker', u.worker,
                 'lease_token', u.lease_token,
                 'started_at', to_char(u.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                 'finished_at', to_char(u.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                 'error', u.error) ORDER BY u.run_id)
          FROM runs u WHERE u.tenant_id = t.tenant_id AND u.task_id = t.task_id) AS runs,
       (SELECT json_agg(json_build_object(
                 'delivery_id', x.delivery_id, 'channel', x.channel,
                 'destination', x.destination, 'status', x.status, 'attempts', x.attempts,
                 'redeliveries', x.redeliveries,
                 'delivered_at', to_char(x.delivered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                 'last_error', x.last_error)
                 ORDER BY x.channel, x.destination)
          FROM deliveries x WHERE x.tenant_id = t.tenant_id AND x.task_id = t.task_id)
         AS deliveries
FROM occurrences o
JOIN definitions d
  ON d.tenant_id = o.definition_tenant_id AND d.definition_id = o.definition_id
LEFT JOIN tasks t
  ON t.tenant_id = o.tenant_id AND t.definition_id = o.definition_id
 AND t.binding_id = o.binding_id AND t.slot = o.slot AND t.kind = o.kind
LEFT JOIN reports r ON r.tenant_id = t.tenant_id AND r.task_id = t.task_id;

-- A tenant's history newest first, page by page at the same cost however deep.
CREATE INDEX occurrences_by_tenant_time
    ON occurrences (tenant_id, scheduled_for, binding_id, slot, kind);
