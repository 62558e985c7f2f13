-- name: Claim :many
-- Claims up to @max_jobs queued jobs in DRR order, stopping before the first
-- live job that would take the total cost past @budget. Expired jobs among
-- them are removed with outcome 'expired' instead, their cost handed back to
-- their tenant's ledger, and returned with expired = true so the caller can
-- claim again for their places. Rows other claimers hold are skipped; the
-- whole claim is one range scan of the claim index from its head.
WITH cand AS (
    SELECT j.id, j.cost, j.round, j.pos, j.seq, j.deadline <= now() AS expired
    FROM batchq.jobs j
    WHERE j.queue = @queue AND j.state = 'queued'
    ORDER BY j.round, j.pos, j.seq
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
), ordered AS (
    SELECT c.id, c.round, c.pos, c.seq, c.expired,
           sum(CASE WHEN c.expired THEN 0 ELSE c.cost END) OVER (ORDER BY c.round, c.pos, c.seq) AS spent
    FROM cand c
), expired AS (
    DELETE FROM batchq.jobs j
    WHERE j.id = ANY (ARRAY(SELECT o.id FROM ordered o WHERE o.expired))
    RETURNING j.*
), expired_outcomes AS (
    INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
                                 max_attempts, deadline, enqueued_at, first_claimed_at, error, payload, unique_key)
    SELECT e.id, e.queue, e.tenant, e.kind, 'expired', e.cost, e.attempt, e.max_attempts, e.deadline,
           e.enqueued_at, e.first_claimed_at, 'deadline passed before the job was claimed', e.payload, e.unique_key
    FROM expired e
), expired_refunds AS (
    INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
    SELECT e.queue, e.tenant, e.pos, e.seq, -e.cost FROM expired e
), claimed AS (
    UPDATE batchq.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        lease_token = (SELECT gen_random_uuid()),
        lease_expires_at = now() + (SELECT q.lease FROM batchq.queues q WHERE q.name = @queue),
        worker = @worker::text,
        claimed_at = now(),
        first_claimed_at = coalesce(j.first_claimed_at, now())
    WHERE j.id = ANY (ARRAY(SELECT o.id FROM ordered o WHERE NOT o.expired AND o.spent <= @budget::bigint))
    RETURNING j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.enqueued_at, j.round, j.pos, j.seq
), taken AS (
    -- The first row this claim took or dropped: every expired row, and every
    -- live one within the budget (claimed holds exactly those).
    SELECT o.round, o.pos, o.seq FROM ordered o
    WHERE o.expired OR o.spent <= @budget::bigint
    ORDER BY o.round, o.pos, o.seq
    LIMIT 1
), reached AS MATERIALIZED (
    -- Only when the cursor is behind that row: most claims stay in the
    -- round the cursor already shows, and skip the probe and the lock.
    -- Materialized so the probe runs once, not once in the filter and again
    -- in the SET.
    SELECT least(t.round, (SELECT h.round FROM batchq.jobs h
                           WHERE h.queue = @queue AND h.state = 'queued'
                             AND (h.round, h.pos, h.seq) < (t.round, t.pos, t.seq)
                           ORDER BY h.round, h.pos, h.seq
                           LIMIT 1)) AS round
    FROM taken t JOIN batchq.queue_cursors c ON c.queue = @queue AND c.round < t.round
), advanced AS (
    -- The cursor only tells joining tenants which round they join: the round
    -- of the first row this claim took, or of a row still waiting before it.
    -- Not the last row's: a claim skips rows other transactions hold (say,
    -- maintenance re-keying a backlog) and may take rows far behind them,
    -- and a tenant joining at that round would wait out the whole span.
    -- A claim never waits for the cursor: if another claim holds it, the
    -- next claim moves it. The lock refers to m so it is taken per row
    -- reached gives, that is only when the cursor moves.
    UPDATE batchq.queue_cursors cur SET round = m.round
    FROM reached m
    WHERE cur.queue = @queue AND cur.round < m.round
      AND cur.queue = (SELECT l.queue FROM batchq.queue_cursors l
                       WHERE l.queue = @queue AND l.round < m.round
                       FOR NO KEY UPDATE SKIP LOCKED)
)
SELECT c.id, false AS expired, c.queue, c.tenant, c.kind, c.cost, c.deadline, c.payload, c.attempt,
       c.max_attempts, c.lease_token::uuid AS lease_token, c.lease_expires_at::timestamptz AS lease_expires_at,
       c.enqueued_at, c.round, c.pos, c.seq
FROM claimed c
UNION ALL
SELECT e.id, true AS expired, e.queue, e.tenant, e.kind, e.cost, e.deadline, e.payload, e.attempt,
       e.max_attempts, '00000000-0000-0000-0000-000000000000'::uuid, e.deadline, e.enqueued_at,
       e.round, e.pos, e.seq
FROM expired e
ORDER BY round, pos, seq;

-- name: NextCost :one
-- The cost of the job the next claim would start with, if any is queued.
SELECT j.cost FROM batchq.jobs j
WHERE j.queue = @queue AND j.state = 'queued' AND j.deadline > now()
ORDER BY j.round, j.pos, j.seq
LIMIT 1;
