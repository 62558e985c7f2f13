-- name: GetJob :one
SELECT j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.unique_key,
       j.state::text AS state, j.attempt, j.max_attempts, j.run_after, j.lease_expires_at, j.worker,
       j.enqueued_at, j.first_claimed_at, j.last_error
FROM batchq.jobs j WHERE j.id = @id;

-- name: GetOutcome :one
SELECT * FROM batchq.outcomes o WHERE o.job_id = @id;

-- name: RetryNow :one
-- Makes a retrying job due now.
UPDATE batchq.jobs SET run_after = now() WHERE id = @id AND state = 'retrying' RETURNING id;

-- name: QueueCounts :one
-- What a queue holds now: used by workers to know when a drain is done.
SELECT count(*) FILTER (WHERE j.state = 'queued')   AS queued,
       count(*) FILTER (WHERE j.state = 'running')  AS running,
       count(*) FILTER (WHERE j.state = 'retrying') AS retrying
FROM batchq.jobs j WHERE j.queue = @queue;
