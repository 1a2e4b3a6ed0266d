-- watchkeeper 0012: a notice when the agreed run did not happen (issue 19, item 7).
--
-- A task that ends failed, timed_out or budget_exceeded (a failed task whose run was
-- stopped by its budget), or expired (its grace passed before it ran: skipped_expired),
-- or that waits in review_required, and an occurrence recorded skipped_expired or
-- review_required, each write one not_run_notices row and one delivery per entry of the
-- task's (or the revision's, or the operator binding's) delivery list, in the same
-- transaction as the fact itself. Triggers, so that every path that records such a fact
-- (the worker, a takeover, the drain, the tick's set-based admission, a worker that finds
-- nothing offers the agent) notifies the owner alike. The notice references the history
-- entry (the occurrence key, and the task if there is one); it never carries a report.
--
-- A delivery is now of a report (task_id, event report.committed) or of such a notice
-- (notice_id, event task.not_run), never both: task_id may be NULL, and the foreign key
-- to reports holds only when it is not (MATCH SIMPLE).
CREATE TABLE not_run_notices (
    tenant_id             text NOT NULL,
    notice_id             bigint GENERATED ALWAYS AS IDENTITY,
    definition_tenant_id  text NOT NULL,
    definition_id         text NOT NULL,
    binding_id            text NOT NULL,
    slot                  text NOT NULL,
    kind                  text NOT NULL,
    outcome               text NOT NULL CHECK (outcome IN (
                              'failed', 'timed_out', 'budget_exceeded', 'skipped_expired',
                              'review_required')),
    task_id               bigint,
    owner_user_id         text NOT NULL,
    scheduled_for         timestamptz NOT NULL,
    reason                text NOT NULL,
    importance            text NOT NULL DEFAULT 'high'
                          CHECK (importance IN ('low', 'normal', 'high')),
    recorded_at           timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, notice_id),
    -- one notice per occurrence and outcome, however many paths record it
    UNIQUE (tenant_id, definition_id, binding_id, slot, kind, outcome)
);

ALTER TABLE deliveries
    ALTER COLUMN task_id DROP NOT NULL,
    ADD COLUMN notice_id bigint,
    ADD CONSTRAINT deliveries_one_subject CHECK ((task_id IS NULL) <> (notice_id IS NULL)),
    ADD CONSTRAINT deliveries_notice_fk FOREIGN KEY (tenant_id, notice_id)
        REFERENCES not_run_notices (tenant_id, notice_id),
    ADD CONSTRAINT deliveries_notice_unique UNIQUE (tenant_id, notice_id, channel, destination);

-- Record one notice and queue its deliveries at p_at (an instant the caller's clock
-- gave: a task's finished_at, an occurrence's decided_at). Nothing without an owner (an
-- operator binding from a resolver, unknown here) or a second time for the same
-- occurrence and outcome. The delivery id is derived from the notice (stable, as a
-- report's is). Functions run with the search_path of the migration (the schema).
CREATE FUNCTION not_run_notice(p_tenant text, p_definition_tenant text, p_definition text,
                               p_binding text, p_slot text, p_kind text, p_outcome text,
                               p_task bigint, p_owner text, p_delivery jsonb,
                               p_scheduled_for timestamptz, p_reason text,
                               p_at timestamptz) RETURNS void LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    made bigint;
BEGIN
    IF p_owner IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO not_run_notices (tenant_id, definition_tenant_id, definition_id, binding_id,
                                 slot, kind, outcome, task_id, owner_user_id, scheduled_for,
                                 reason, recorded_at)
    VALUES (p_tenant, p_definition_tenant, p_definition, p_binding, p_slot, p_kind, p_outcome,
            p_task, p_owner, p_scheduled_for, p_reason, p_at)
    ON CONFLICT DO NOTHING
    RETURNING notice_id INTO made;
    IF made IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO deliveries (tenant_id, delivery_id, notice_id, channel, destination, status,
                            next_attempt_at, created_at, queued_at)
    SELECT p_tenant,
           md5('not_run/' || p_tenant || '/' || made || '/' || i.channel || '/'
               || i.destination)::uuid,
           made, i.channel, i.destination, 'pending', p_at, p_at, p_at
    FROM (SELECT DISTINCT coalesce(e ->> 'channel', 'log') AS channel,
                          coalesce(e ->> 'destination', '') AS destination
          FROM jsonb_array_elements(CASE jsonb_typeof(p_delivery) WHEN 'array' THEN p_delivery
                                    ELSE '[{"channel": "log"}]'::jsonb END) AS e) AS i
    ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION tasks_not_run() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM not_run_notice(
        NEW.tenant_id, NEW.definition_tenant_id, NEW.definition_id, NEW.binding_id, NEW.slot,
        NEW.kind,
        CASE WHEN NEW.status = 'expired' THEN 'skipped_expired'
             WHEN NEW.status = 'failed' AND EXISTS (
                 SELECT 1 FROM runs r WHERE r.tenant_id = NEW.tenant_id
                   AND r.task_id = NEW.task_id AND r.outcome = 'budget_exceeded')
             THEN 'budget_exceeded'
             ELSE NEW.status END,
        NEW.task_id, NEW.owner_user_id, NEW.delivery, NEW.scheduled_for, NEW.status_reason,
        coalesce(NEW.finished_at, NEW.expires_at));
    RETURN NULL;
END
$$;
-- Not after a review: whoever approved or skipped it knows (a run it approved that then
-- fails is notified, from 'running').
CREATE TRIGGER tasks_not_run AFTER UPDATE OF status ON tasks FOR EACH ROW
    WHEN (NEW.status IN ('failed', 'timed_out', 'expired', 'review_required')
          AND OLD.status IS DISTINCT FROM NEW.status AND OLD.status <> 'review_required')
    EXECUTE FUNCTION tasks_not_run();

CREATE FUNCTION occurrences_not_run() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    owner text;
    delivery jsonb;
BEGIN
    SELECT CASE WHEN d.origin = 'user' THEN d.owner_user_id ELSE b ->> 'owner_user_id' END,
           CASE WHEN d.origin = 'user' THEN coalesce(r.payload -> 'delivery', r.spec -> 'delivery')
                ELSE b -> 'delivery' END
      INTO owner, delivery
    FROM definitions d
    JOIN definition_revisions r
      ON r.tenant_id = d.tenant_id AND r.definition_id = d.definition_id
     AND r.revision = NEW.revision
    LEFT JOIN LATERAL (
        SELECT x FROM jsonb_array_elements(CASE jsonb_typeof(r.registration -> 'bindings')
                                           WHEN 'array' THEN r.registration -> 'bindings'
                                           ELSE '[]'::jsonb END) AS x
        WHERE x ->> 'tenant_id' = NEW.tenant_id AND x ->> 'binding_id' = NEW.binding_id
        LIMIT 1) AS bound (b) ON true
    WHERE d.tenant_id = NEW.definition_tenant_id AND d.definition_id = NEW.definition_id;
    PERFORM not_run_notice(
        NEW.tenant_id, NEW.definition_tenant_id, NEW.definition_id, NEW.binding_id, NEW.slot,
        NEW.kind, NEW.decision, NULL, owner, delivery, NEW.scheduled_for, NEW.reason,
        NEW.decided_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER occurrences_not_run AFTER INSERT ON occurrences FOR EACH ROW
    WHEN (NEW.decision IN ('skipped_expired', 'review_required'))
    EXECUTE FUNCTION occurrences_not_run();
