-- watchkeeper 0005: a run can end `interrupted`.
--
-- A supervisor that is shut down gracefully (SIGTERM) gives its running tasks a drain
-- deadline; a run still going then is cancelled, recorded `interrupted` with the reason,
-- and its task is released at once (pending, lease cleared) for another supervisor to
-- run as its next attempt, rather than held until the lease expires.
ALTER TABLE runs DROP CONSTRAINT runs_outcome_check;
ALTER TABLE runs ADD CONSTRAINT runs_outcome_check CHECK (outcome IN (
    'running', 'succeeded', 'failed', 'failed_verification', 'timed_out', 'cancelled',
    'lease_lost', 'rejected_stale', 'unknown', 'interrupted'));
