-- watchkeeper 0008: the source a condition revision polls, as a column.
--
-- The poller's claim (conditions_due_lock) keeps only the definitions whose source this
-- poller has. Read out of the spec JSON inside the query, the planner could not
-- estimate that filter (it guessed 0.5 % of the rows) and at 100,000 condition
-- definitions chose to scan every revision and sort them all, 0.9 s a pass instead of
-- walking definitions_poll_due to the first `limit` due rows (37 ms). A stored column,
-- generated from the spec (immutable per revision), has statistics of its own.
-- NULL on calendar revisions.
ALTER TABLE definition_revisions
    ADD COLUMN poll_source text
    GENERATED ALWAYS AS (spec -> 'trigger' -> 'source' ->> 'name') STORED;
