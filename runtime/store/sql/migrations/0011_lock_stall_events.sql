-- watchkeeper 0011: a supervisor records a lock stall (a statement cancelled by
-- lock_timeout or statement_timeout: another session held a lock it needed) as an
-- operator event, as it records clock_uncertain.

ALTER TABLE schedule_events DROP CONSTRAINT schedule_events_kind_check;
ALTER TABLE schedule_events ADD CONSTRAINT schedule_events_kind_check
    CHECK (kind IN ('skipped_superseded', 'skipped_paused', 'skipped_dst_gap',
                    'skipped_reconfirmed', 'fenced_out', 'clock_uncertain',
                    'bindings_invalid', 'schedule_ended', 'planning_failed', 'lock_stall'));
