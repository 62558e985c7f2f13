-- name: Complete :many
-- Finishes running jobs whose lease token still matches as succeeded; see
-- batchq.complete in db/functions/finish.sql. Returns the id and token of
-- each listed run it did not finish: those lost their lease.
SELECT c.id::bigint AS id, c.lease_token::uuid AS lease_token
FROM batchq.complete(@queue::text, @ids::bigint[], @tokens::uuid[], @actual_costs::bigint[], @results::text[]) c;

-- name: Fail :many
-- Records a failed attempt of running jobs whose lease token still matches;
-- see batchq.fail in db/functions/finish.sql. Returns the runs it recorded
-- and whether each job will be retried; the rest lost their lease.
SELECT f.id::bigint AS id, f.lease_token::uuid AS lease_token, f.retrying::boolean AS retrying
FROM batchq.fail(@queue::text, @ids::bigint[], @tokens::uuid[], @errors::text[], @retry_at::timestamptz[],
                 @final::boolean[]) f;

-- name: Release :many
-- Hands running jobs back without using an attempt, each after its delay
-- (@delays_us, microseconds); see batchq.release in db/functions/finish.sql.
-- Returns the runs it released; the rest lost their lease.
SELECT r.id::bigint AS id, r.lease_token::uuid AS lease_token
FROM batchq.release(@queue::text, @ids::bigint[], @tokens::uuid[], @delays_us::bigint[]) r;

-- name: Heartbeat :many
-- Extends the leases of running jobs whose token still matches by the
-- queue's lease length. Returns the runs it extended.
SELECT h.id::bigint AS id, h.lease_token::uuid AS lease_token, h.lease_expires_at::timestamptz AS lease_expires_at
FROM batchq.heartbeat(@queue::text, @ids::bigint[], @tokens::uuid[]) h;

-- name: Cancel :one
-- Removes a job that has not started (queued or retrying) with outcome
-- 'cancelled' and hands its cost back to its tenant's ledger; no row when
-- no such job waits. See batchq.cancel in db/functions/finish.sql.
SELECT c.id::bigint AS id FROM batchq.cancel(@id, @reason) AS c (id);
