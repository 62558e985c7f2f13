-- name: Complete :many
-- Finishes running jobs whose lease token still matches as succeeded; see
-- batchq.complete in db/functions/finish.sql. Returns the id and token of
-- each listed run it did not finish: those lost their lease.
SELECT c.id::bigint AS id, c.lease_token::uuid AS lease_token
FROM batchq.complete(@queue::text, @ids::bigint[], @tokens::uuid[], @actual_costs::bigint[], @results::text[]) c;

-- name: Fail :many
-- Records a failed attempt of running jobs whose lease token still matches;
-- see batchq.fail in db/functions/finish.sql. Returns the runs it recorded
-- and what became of each job (retrying, failed, discarded, cancelled); the
-- rest lost their lease.
SELECT f.id::bigint AS id, f.lease_token::uuid AS lease_token, f.outcome::text AS outcome
FROM batchq.fail(@queue::text, @ids::bigint[], @tokens::uuid[], @errors::text[], @retry_at::timestamptz[],
                 @final::boolean[]) f;

-- name: Release :many
-- Hands running jobs back without using an attempt, each after its delay
-- (@delays_us, microseconds); see batchq.release in db/functions/finish.sql.
-- Returns the runs it released, or cancelled (an operator asked them to
-- stop); the rest lost their lease.
SELECT r.id::bigint AS id, r.lease_token::uuid AS lease_token, r.outcome::text AS outcome
FROM batchq.release(@queue::text, @ids::bigint[], @tokens::uuid[], @delays_us::bigint[]) r;

-- name: Heartbeat :many
-- Extends the leases of running jobs whose token still matches by the
-- queue's lease length. Returns the runs it extended, and whether an operator
-- asked each to stop.
SELECT h.id::bigint AS id, h.lease_token::uuid AS lease_token, h.lease_expires_at::timestamptz AS lease_expires_at,
       h.cancel_requested::boolean AS cancel_requested
FROM batchq.heartbeat(@queue::text, @ids::bigint[], @tokens::uuid[]) h;

-- name: Cancel :one
-- Cancels a job: a waiting one now, a running one by asking its worker to
-- stop it (stopping), unless it was asked already (asked_already); no row
-- when no unfinished job has the id. See batchq.cancel in
-- db/functions/finish.sql.
SELECT c.id::bigint AS id, c.stopping::boolean AS stopping, c.asked_already::boolean AS asked_already
FROM batchq.cancel(@id, @reason) c;
