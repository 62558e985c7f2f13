-- name: RescueLostLeases :many
-- Running jobs of a queue whose lease expired (their worker died or stalled)
-- go back to 'retrying', due now, while attempts and deadline allow; the
-- others are removed with outcome 'failed' or 'expired'. Returns each job,
-- with its outcome when it has one.
WITH lost AS (
    SELECT j.id, (j.attempt < j.max_attempts AND j.deadline > now()) AS retry
    FROM batchq.jobs j
    WHERE j.queue = @queue AND j.state = 'running' AND j.lease_expires_at < now()
    ORDER BY j.lease_expires_at
    LIMIT @max_jobs
    FOR UPDATE SKIP LOCKED
), retried AS (
    UPDATE batchq.jobs j
    SET state = 'retrying', run_after = now(), last_error = 'lease expired while running',
        lease_token = NULL, lease_expires_at = NULL, worker = NULL
    WHERE j.id = ANY (ARRAY(SELECT l.id FROM lost l WHERE l.retry))
    RETURNING j.id, j.tenant, j.cost
), dead AS (
    DELETE FROM batchq.jobs j
    WHERE j.id = ANY (ARRAY(SELECT l.id FROM lost l WHERE NOT l.retry))
    RETURNING j.*
), written AS (
    INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
                                 deadline, enqueued_at, first_claimed_at, worker, error, payload, unique_key)
    SELECT d.id, d.queue, d.tenant, d.kind,
           CASE WHEN d.deadline <= now() THEN 'expired' ELSE 'failed' END::batchq.job_outcome,
           d.cost, d.attempt, d.max_attempts, d.deadline, d.enqueued_at, d.first_claimed_at, d.worker,
           CASE WHEN d.deadline <= now() THEN 'lease expired while running, and the deadline passed'
                ELSE 'lease expired while running, and no attempts are left' END,
           d.payload, d.unique_key
    FROM dead d
)
SELECT r.id, true AS retrying, r.tenant, r.cost, ''::text AS outcome FROM retried r
UNION ALL
SELECT d.id, false AS retrying, d.tenant, d.cost,
       CASE WHEN d.deadline <= now() THEN 'expired' ELSE 'failed' END::text
FROM dead d;

-- name: ExpireOverdue :many
-- Removes queued and retrying jobs of a queue whose deadline has passed, with
-- outcome 'expired', wherever they stand in the backlog, and hands the cost
-- of the queued ones back to their tenants' ledgers. Returns the jobs.
WITH gone AS (
    DELETE FROM batchq.jobs j
    WHERE j.id = ANY (ARRAY(
        SELECT o.id FROM batchq.jobs o
        WHERE o.queue = @queue AND o.state <> 'running' AND o.deadline <= now()
        ORDER BY o.deadline
        LIMIT @max_jobs
        FOR UPDATE SKIP LOCKED))
    RETURNING j.*
), written AS (
    INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
                                 deadline, enqueued_at, first_claimed_at, error, payload, unique_key)
    SELECT g.id, g.queue, g.tenant, g.kind, 'expired', g.cost, g.attempt, g.max_attempts, g.deadline,
           g.enqueued_at, g.first_claimed_at, 'deadline passed while waiting', g.payload, g.unique_key
    FROM gone g
), refunds AS (
    INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
    SELECT g.queue, g.tenant, g.pos, g.seq, -g.cost FROM gone g WHERE g.state = 'queued'
)
SELECT g.id, g.tenant, g.cost FROM gone g;

-- name: Requeue :one
SELECT batchq.requeue(@queue, @max_jobs)::integer AS requeued;

-- name: ApplyAdjustments :one
SELECT batchq.apply_adjustments(@queue)::integer AS adjusted;

-- name: StaleTables :many
-- The queue's tables whose planner statistics are far from what they hold
-- now: live rows differ from the last ANALYZE's count by half or more (and
-- by more than 1,000 rows). A queue that filled from empty looks empty to the
-- planner until then. Only tables the current role may ANALYZE (it has its
-- owner's privileges) are listed.
SELECT c.relname::text AS name
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relnamespace = 'batchq'::regnamespace
  AND c.relname IN ('jobs', 'tenant_ring')
  AND pg_catalog.pg_has_role(c.relowner, 'USAGE')
  AND abs(s.n_live_tup - greatest(c.reltuples, 0)) > greatest(1000, 0.5 * greatest(c.reltuples, 0))
ORDER BY c.relname;
