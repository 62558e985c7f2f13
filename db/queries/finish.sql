-- name: Complete :many
-- Finishes running jobs whose lease token still matches as succeeded; see
-- batchq.complete in migrations/00002_queue.sql. Returns the id and token of
-- each listed run it did not finish: those lost their lease.
SELECT c.id::bigint AS id, c.lease_token::uuid AS lease_token
FROM batchq.complete(@ids::bigint[], @tokens::uuid[], @actual_costs::bigint[], @results::text[]) c;

-- name: Fail :many
-- Records a failed attempt of running jobs whose lease token still matches.
-- A job with attempts left whose retry time falls before its deadline waits
-- in 'retrying' until @retry_at; any other is removed with outcome 'failed',
-- and one marked final (retrying would not help) with outcome 'discarded'. Returns the id and token of each run it recorded,
-- and what became of its job; the rest lost their lease. As in Complete, of a
-- job listed under two tokens only the run holding the lease counts.
WITH input AS (
    SELECT i.id, (@tokens::uuid[])[i.n] AS token, (@errors::text[])[i.n] AS error,
           (@retry_at::timestamptz[])[i.n] AS retry_at, (@final::boolean[])[i.n] AS final
    FROM unnest(@ids::bigint[]) WITH ORDINALITY AS i (id, n)
), target AS (
    SELECT j.id, (NOT i.final AND j.attempt < j.max_attempts AND i.retry_at < j.deadline) AS retry
    FROM batchq.jobs j JOIN input i ON i.id = j.id
    WHERE j.id = ANY (@ids::bigint[]) AND j.lease_token = i.token
    ORDER BY j.id -- every statement that waits on job rows locks them in id order
    FOR UPDATE OF j
), retried AS (
    UPDATE batchq.jobs j
    SET state = 'retrying', run_after = i.retry_at, last_error = i.error,
        lease_token = NULL, lease_expires_at = NULL, worker = NULL
    FROM input i
    WHERE j.id = ANY (ARRAY(SELECT t.id FROM target t WHERE t.retry)) AND i.id = j.id AND i.token = j.lease_token
    RETURNING j.id, i.token
), dead AS (
    DELETE FROM batchq.jobs j
    WHERE j.id = ANY (ARRAY(SELECT t.id FROM target t WHERE NOT t.retry))
    RETURNING j.*
), written AS (
    INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
                                 deadline, enqueued_at, first_claimed_at, worker, error, payload, unique_key)
    SELECT d.id, d.queue, d.tenant, d.kind,
           CASE WHEN i.final THEN 'discarded' ELSE 'failed' END::batchq.job_outcome,
           d.cost, d.attempt, d.max_attempts, d.deadline,
           d.enqueued_at, d.first_claimed_at, d.worker, i.error, d.payload, d.unique_key
    FROM dead d JOIN input i ON i.id = d.id AND i.token = d.lease_token
)
SELECT r.id, r.token::uuid AS lease_token, true AS retrying FROM retried r
UNION ALL
SELECT d.id, d.lease_token::uuid, false AS retrying FROM dead d;

-- name: Release :many
-- Hands running jobs back without using an attempt (the provider refused to
-- start them, the throttle had no room for them after all, or the worker is
-- shutting down): each waits in 'retrying' for its delay (@delays_us,
-- microseconds, added to the database's clock), then rejoins its tenant's
-- queue at the tail. A released job never ran, so, as for a job that expired
-- before it ran, its cost goes back to the tenant's ledger for the jobs
-- behind its old place: rejoining charges it once more, and the tenant pays
-- for it once. Returns the runs (id, token) released; the rest lost their
-- lease.
WITH input AS (
    SELECT i.id, (@tokens::uuid[])[i.n] AS token, (@delays_us::bigint[])[i.n] AS delay_us
    FROM unnest(@ids::bigint[]) WITH ORDINALITY AS i (id, n)
), target AS (
    SELECT j.id, i.token, i.delay_us FROM batchq.jobs j JOIN input i ON i.id = j.id
    WHERE j.id = ANY (@ids::bigint[]) AND j.lease_token = i.token
    ORDER BY j.id -- every statement that waits on job rows locks them in id order
    FOR UPDATE OF j
), released AS (
    UPDATE batchq.jobs j
    SET state = 'retrying', run_after = now() + make_interval(secs => greatest(t.delay_us, 0) / 1e6),
        attempt = j.attempt - 1, lease_token = NULL, lease_expires_at = NULL, worker = NULL
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, t.token, j.queue, j.tenant, j.pos, j.seq, j.cost
), refunds AS (
    INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
    SELECT r.queue, r.tenant, r.pos, r.seq, -r.cost FROM released r
)
SELECT r.id, r.token::uuid AS lease_token FROM released r;

-- name: Heartbeat :many
-- Extends the leases of running jobs whose token still matches by the
-- queue's lease length. Returns the runs (id, token) extended.
WITH input AS (
    SELECT i.id, (@tokens::uuid[])[i.n] AS token
    FROM unnest(@ids::bigint[]) WITH ORDINALITY AS i (id, n)
), target AS (
    SELECT j.id FROM batchq.jobs j JOIN input i ON i.id = j.id
    WHERE j.id = ANY (@ids::bigint[]) AND j.lease_token = i.token
    ORDER BY j.id -- every statement that waits on job rows locks them in id order
    FOR UPDATE OF j
)
UPDATE batchq.jobs j
SET lease_expires_at = now() + (SELECT q.lease FROM batchq.queues q WHERE q.name = j.queue)
FROM target t
WHERE j.id = t.id
RETURNING j.id, j.lease_token, j.lease_expires_at::timestamptz AS lease_expires_at;

-- name: Cancel :one
-- Removes a job that has not started (queued or retrying) with outcome
-- 'cancelled' and hands its cost back to its tenant's ledger.
WITH gone AS (
    DELETE FROM batchq.jobs j
    WHERE j.id = @id AND j.state <> 'running'
    RETURNING j.*
), written AS (
    INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
                                 deadline, enqueued_at, first_claimed_at, error, payload, unique_key)
    SELECT g.id, g.queue, g.tenant, g.kind, 'cancelled', g.cost, g.attempt, g.max_attempts, g.deadline,
           g.enqueued_at, g.first_claimed_at, @reason, g.payload, g.unique_key
    FROM gone g
), refund AS (
    INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
    SELECT g.queue, g.tenant, g.pos, g.seq, -g.cost FROM gone g WHERE g.state = 'queued'
)
SELECT g.id FROM gone g;
