-- watchkeeper 0006: model-backed runs and continuation roots (seed 004).
--
-- A run records the model that answered, every tool call it made (a read of a source
-- in the definition's scope, or one refused as outside it) and, when it ended by
-- asking to go on, its continuation intent: the reason, the next instructions, and
-- whether the runtime accepted it (a further root run of the same task, within the
-- same deadline and total budget, up to limits.max_roots) or refused it and why.
-- The intent is the one durable authorization of a further root: the task's `root`
-- says which root its next attempt runs, and a retry of root 2 reads root 2's intent.
-- A run's usage is written as each charge is made (before the model request or the
-- tool call it pays for), fenced by the lease token, so a killed worker's spending
-- still counts and a stale one cannot spend.

ALTER TABLE runs
    ADD COLUMN root         integer NOT NULL DEFAULT 1,
    ADD COLUMN model        text,
    ADD COLUMN tool_calls   jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN continuation jsonb;
ALTER TABLE runs DROP CONSTRAINT runs_outcome_check;
ALTER TABLE runs ADD CONSTRAINT runs_outcome_check CHECK (outcome IN (
    'running', 'succeeded', 'failed', 'failed_verification', 'timed_out', 'cancelled',
    'lease_lost', 'rejected_stale', 'unknown', 'interrupted', 'budget_exceeded',
    'continued'));

ALTER TABLE tasks ADD COLUMN root integer NOT NULL DEFAULT 1;

-- A report's one-line headline (the model agent's structured answer has one).
ALTER TABLE reports ADD COLUMN headline text NOT NULL DEFAULT '';

-- The history's runs gain root, model, usage, tool calls and the continuation intent
-- (its reason, instructions, status and refusal; the earlier root's report stays on the run).
CREATE OR REPLACE VIEW history_rows AS
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
                 'error', u.error, 'root', u.root, 'model', u.model, 'usage', u.usage,
                 'tool_calls', u.tool_calls,
                 -- the intent without the report it carries (kept on the run row)
                 'continuation', u.continuation - 'report') ORDER BY u.run_id)
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
