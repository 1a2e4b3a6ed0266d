-- watchkeeper 0015: one projection of a delivery, as every door shows it.
--
-- A delivery row with its task, definition and slot (a notice that a run did not
-- happen, notice_id, shows its task if it had one) and its event type. The list of a
-- tenant's deliveries and the lookup of one by id (a redelivery's answer) both read
-- it, so the two cannot drift apart.

CREATE OR REPLACE VIEW delivery_rows AS
SELECT d.tenant_id, d.delivery_id, coalesce(d.task_id, n.task_id) AS task_id,
       coalesce(t.definition_id, n.definition_id) AS definition_id,
       coalesce(t.slot, n.slot) AS slot, d.channel,
       d.destination, d.status, d.attempts, d.redeliveries, d.next_attempt_at, d.created_at,
       d.delivered_at, d.dead_at, d.response_status, d.response, d.last_error, d.status_reason,
       CASE WHEN d.notice_id IS NULL THEN 'report.committed' ELSE 'task.not_run' END AS event
FROM deliveries d
LEFT JOIN tasks t ON t.tenant_id = d.tenant_id AND t.task_id = d.task_id
LEFT JOIN not_run_notices n ON n.tenant_id = d.tenant_id AND n.notice_id = d.notice_id;
