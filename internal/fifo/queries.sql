-- name: Insert :exec
INSERT INTO batchq_fifo.jobs (tenant, cost, payload)
SELECT unnest(@tenants::text[]), unnest(@costs::bigint[]), '{}'::jsonb;

-- name: Claim :many
UPDATE batchq_fifo.jobs j
SET state = 'running', attempt = j.attempt + 1, claimed_at = now(),
    lease_expires_at = now() + interval '5 minutes'
WHERE j.id = ANY (ARRAY(
    SELECT f.id FROM batchq_fifo.jobs f
    WHERE f.state = 'queued'
    ORDER BY f.id
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.tenant, j.cost, j.payload;

-- name: Complete :exec
WITH done AS (
    DELETE FROM batchq_fifo.jobs j
    WHERE j.id = ANY (@ids::bigint[]) AND j.state = 'running'
    RETURNING j.*
)
INSERT INTO batchq_fifo.outcomes (job_id, tenant, cost, attempts, enqueued_at, claimed_at)
SELECT d.id, d.tenant, d.cost, d.attempt, d.enqueued_at, d.claimed_at FROM done d;

-- name: Reset :exec
TRUNCATE batchq_fifo.jobs, batchq_fifo.outcomes;

-- name: BareClaim :many
-- The casts tell sqlc the types of the function's columns.
SELECT b.id::bigint AS id, b.queue::text AS queue, b.tenant::text AS tenant, b.kind::text AS kind,
       b.cost::bigint AS cost, b.deadline::timestamptz AS deadline, b.payload::jsonb AS payload,
       b.attempt::integer AS attempt, b.max_attempts::integer AS max_attempts, b.lease_token::uuid AS lease_token,
       b.lease_expires_at::timestamptz AS lease_expires_at, b.enqueued_at::timestamptz AS enqueued_at,
       b.round::bigint AS round, b.pos::bigint AS pos, b.seq::bigint AS seq
FROM batchq_fifo.bare_claim(@queue::text, @max_jobs::integer, @worker::text) b;
