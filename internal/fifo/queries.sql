-- name: Insert :exec
-- As an import writes jobs: one statement, the queue's defaults filled in.
INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT @queue::text, unnest(@tenants::text[]), 'job', unnest(@costs::bigint[]), now() + interval '1 day', '{}'::jsonb, 5;

-- name: Claim :many
-- One token per claim, as batchq draws it; what a worker needs to run the job.
UPDATE batchq_fifo.jobs j
SET state = 'running',
    attempt = j.attempt + 1,
    lease_token = (SELECT gen_random_uuid()),
    lease_expires_at = now() + interval '5 minutes',
    worker = @worker::text,
    claimed_at = now(),
    first_claimed_at = coalesce(j.first_claimed_at, now())
WHERE j.id = ANY (ARRAY(
    SELECT f.id FROM batchq_fifo.jobs f
    WHERE f.queue = @queue::text AND f.state = 'queued'
    ORDER BY f.id
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
          j.lease_token, j.lease_expires_at, j.enqueued_at;

-- name: Complete :execrows
-- Each listed (id, token) that still holds its lease: the job goes, its
-- outcome row is written, in one statement.
WITH done AS (
    DELETE FROM batchq_fifo.jobs j
    WHERE j.id = ANY (@ids::bigint[])
      AND ((j.id, j.lease_token) IN (SELECT unnest(@ids::bigint[]), unnest(@tokens::uuid[]))) IS TRUE
    RETURNING j.*
)
INSERT INTO batchq_fifo.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
                                  deadline, enqueued_at, first_claimed_at, worker, unique_key)
SELECT d.id, d.queue, d.tenant, d.kind, 'succeeded', d.cost, d.attempt, d.max_attempts,
       d.deadline, d.enqueued_at, d.first_claimed_at, d.worker, d.unique_key
FROM done d;

-- name: LeanInsert :exec
INSERT INTO batchq_fifo.lean_jobs (tenant, cost, payload)
SELECT unnest(@tenants::text[]), unnest(@costs::bigint[]), '{}'::jsonb;

-- name: LeanClaim :many
UPDATE batchq_fifo.lean_jobs j
SET state = 'running', attempt = j.attempt + 1, claimed_at = now(),
    lease_expires_at = now() + interval '5 minutes'
WHERE j.id = ANY (ARRAY(
    SELECT f.id FROM batchq_fifo.lean_jobs f
    WHERE f.state = 'queued'
    ORDER BY f.id
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.tenant, j.cost, j.payload;

-- name: LeanComplete :exec
WITH done AS (
    DELETE FROM batchq_fifo.lean_jobs j
    WHERE j.id = ANY (@ids::bigint[]) AND j.state = 'running'
    RETURNING j.*
)
INSERT INTO batchq_fifo.lean_outcomes (job_id, tenant, cost, attempts, enqueued_at, claimed_at)
SELECT d.id, d.tenant, d.cost, d.attempt, d.enqueued_at, d.claimed_at FROM done d;

-- name: Reset :exec
TRUNCATE batchq_fifo.jobs, batchq_fifo.outcomes, batchq_fifo.lean_jobs, batchq_fifo.lean_outcomes;
