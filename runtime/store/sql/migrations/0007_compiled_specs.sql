-- watchkeeper 0007: the tick reads compiled specs, admits set-based, and wakes on notice.
--
-- compiled: what planning and admission need of the spec (triggers.CompiledSpec: the
-- calendar with a cron expression already expanded into bit masks, ends, jitter,
-- lateness, overrun, task budget and limits), written at proposal. payload: what each
-- task of a user-confirmed definition carries (triggers.user_payload: agent,
-- instructions, params, delivery, audiences), copied into its tasks by the admission
-- statement itself. Both are NULL on revisions written before this migration (or by an
-- older release during an upgrade): the tick then compiles the stored spec once and
-- fills them in (engine/_tick.py).
ALTER TABLE definition_revisions ADD COLUMN compiled jsonb, ADD COLUMN payload jsonb;

-- Wake-up notices (LISTEN/NOTIFY; channels are per schema, so two installations in
-- one database do not wake each other). A definition that becomes due sooner than it
-- was — confirmed, resumed, registered, a new revision made effective — notifies
-- "<schema>_due"; the tick's own advances move next_due_at later and notify nothing.
-- New tasks notify "<schema>_work" and new deliveries "<schema>_deliver", once per
-- statement. A notice is delivered at COMMIT, and identical notices of one
-- transaction are delivered once.
CREATE FUNCTION notify_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_due', NEW.trigger_kind);
    RETURN NULL;
END
$$;
CREATE TRIGGER definitions_due_sooner AFTER UPDATE ON definitions FOR EACH ROW
    WHEN (NEW.status = 'active' AND NEW.next_due_at IS NOT NULL
          AND (OLD.status IS DISTINCT FROM 'active' OR OLD.next_due_at IS NULL
               OR NEW.next_due_at < OLD.next_due_at OR NEW.fence <> OLD.fence))
    EXECUTE FUNCTION notify_due();

CREATE FUNCTION notify_channel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_' || TG_ARGV[0], '');
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_notify_work AFTER INSERT ON tasks FOR EACH STATEMENT
    EXECUTE FUNCTION notify_channel('work');
CREATE TRIGGER deliveries_notify AFTER INSERT ON deliveries FOR EACH STATEMENT
    EXECUTE FUNCTION notify_channel('deliver');
