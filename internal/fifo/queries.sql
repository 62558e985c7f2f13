-- name: Insert :exec
-- As an import writes jobs: one statement, the queue's defaults filled in.
INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT @queue::text, unnest(@tenants::text[]), 'job', unnest(@costs::bigint[]), now() + interval '1 day', '{}'::jsonb, 5;

-- name: Claim :many
-- The casts tell sqlc the types of the function's columns.
SELECT c.id::bigint AS id, c.queue::text AS queue, c.tenant::text AS tenant, c.kind::text AS kind,
       c.cost::bigint AS cost, c.deadline::timestamptz AS deadline, c.payload::jsonb AS payload,
       c.attempt::integer AS attempt, c.max_attempts::integer AS max_attempts, c.lease_token::uuid AS lease_token,
       c.lease_expires_at::timestamptz AS lease_expires_at, c.enqueued_at::timestamptz AS enqueued_at
FROM batchq_fifo.claim(@queue::text, @max_jobs::integer, @worker::text) c;

-- name: Complete :one
SELECT batchq_fifo.complete(@ids::bigint[], @tokens::uuid[])::bigint AS finished;

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
