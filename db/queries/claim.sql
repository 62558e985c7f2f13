-- name: Claim :many
-- Claims up to @max_jobs live queued jobs in DRR order, stopping before the
-- first job that would take the total cost past @budget. Expired jobs the scan
-- passes over (up to the round of the last job claimed, or all of them when
-- nothing live is left) are removed with outcome 'expired' and their cost is
-- handed back to their tenant's ledger. Rows other claimers hold are skipped.
WITH cand AS (
    SELECT j.id, j.cost, j.round, j.pos
    FROM batchq.jobs j
    WHERE j.queue = @queue AND j.state = 'queued' AND j.deadline > now()
    ORDER BY j.round, j.pos, j.id
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
), ordered AS (
    SELECT c.id, c.round, sum(c.cost) OVER (ORDER BY c.round, c.pos, c.id) AS spent
    FROM cand c
), expired AS (
    DELETE FROM batchq.jobs j
    WHERE j.id = ANY (ARRAY(
        SELECT x.id FROM batchq.jobs x
        WHERE x.queue = @queue AND x.state = 'queued' AND x.deadline <= now()
          AND x.round <= coalesce((SELECT max(c.round) FROM cand c), 9223372036854775807)
        ORDER BY x.round, x.pos, x.id
        LIMIT 1000
        FOR UPDATE SKIP LOCKED))
    RETURNING j.*
), expired_outcomes AS (
    INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
                                 max_attempts, deadline, enqueued_at, first_claimed_at, error, payload, unique_key)
    SELECT e.id, e.queue, e.tenant, e.kind, 'expired', e.cost, e.attempt, e.max_attempts, e.deadline,
           e.enqueued_at, e.first_claimed_at, 'deadline passed before the job was claimed', e.payload, e.unique_key
    FROM expired e
), expired_refunds AS (
    INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, delta)
    SELECT e.queue, e.tenant, e.pos, -sum(e.cost) FROM expired e GROUP BY e.queue, e.tenant, e.pos
), claimed AS (
    UPDATE batchq.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + (SELECT q.lease FROM batchq.queues q WHERE q.name = @queue),
        worker = @worker::text,
        claimed_at = now(),
        first_claimed_at = coalesce(j.first_claimed_at, now())
    WHERE j.id = ANY (ARRAY(SELECT o.id FROM ordered o WHERE o.spent <= @budget::bigint))
    RETURNING j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.enqueued_at, j.round, j.pos
), advanced AS (
    UPDATE batchq.queues q SET cursor_round = m.round
    FROM (SELECT max(c.round) AS round FROM claimed c) m
    WHERE q.name = @queue AND q.cursor_round < m.round
)
SELECT c.id, c.queue, c.tenant, c.kind, c.cost, c.deadline, c.payload, c.attempt, c.max_attempts,
       c.lease_token::uuid AS lease_token, c.lease_expires_at::timestamptz AS lease_expires_at, c.enqueued_at
FROM claimed c
ORDER BY c.round, c.pos, c.id;

-- name: NextCost :one
-- The cost of the job the next claim would start with, if any is queued.
SELECT j.cost FROM batchq.jobs j
WHERE j.queue = @queue AND j.state = 'queued' AND j.deadline > now()
ORDER BY j.round, j.pos, j.id
LIMIT 1;
