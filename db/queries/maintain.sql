-- name: RescueLostLeases :many
-- Running jobs of a queue whose lease expired go back to 'retrying' while
-- attempts and deadline allow; the others finish as 'failed' or 'expired'.
-- See batchq.rescue in db/functions/maintain.sql.
SELECT r.id::bigint AS id, r.retrying::boolean AS retrying, r.tenant::text AS tenant, r.cost::bigint AS cost,
       r.outcome::text AS outcome
FROM batchq.rescue(@queue::text, @max_jobs::integer) r;

-- name: ExpireOverdue :many
-- Removes waiting jobs of a queue whose deadline has passed, with outcome
-- 'expired', wherever they stand in the backlog. See batchq.expire in
-- db/functions/maintain.sql.
SELECT e.id::bigint AS id, e.tenant::text AS tenant, e.cost::bigint AS cost
FROM batchq.expire(@queue::text, @max_jobs::integer) e;

-- name: Requeue :one
-- Moves due retrying and scheduled jobs to their tenants' queues, as of
-- @at (NULL: the database's now). See batchq.requeue in
-- db/functions/maintain.sql.
SELECT batchq.requeue(@queue::text, @max_jobs::integer, sqlc.narg(at)::timestamptz)::integer AS requeued;

-- name: ApplyAdjustments :one
SELECT batchq.apply_adjustments(@queue::text)::integer AS adjusted;

-- name: StaleTables :many
-- The queue's tables whose planner statistics are far from what they hold
-- now: live rows exceed the last ANALYZE's count by half or more (and by
-- more than 1,000 rows), or fall short of it as far while that ANALYZE is
-- older than @shrunk_after_us. A queue that filled from empty looks empty to
-- the planner until then. A table that shrank waits: a draining queue
-- halves again and again, plans made for more rows read fewer as well, and
-- each ANALYZE has every session plan its statements again; but one queue
-- growing while others drain may need new statistics for its own plans.
-- Only tables the current role may ANALYZE (it has its owner's privileges)
-- are listed.
SELECT c.relname::text AS name
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relnamespace = 'batchq'::regnamespace
  AND c.relname IN ('jobs', 'tenant_ring')
  AND pg_catalog.pg_has_role(c.relowner, 'USAGE')
  AND (s.n_live_tup - greatest(c.reltuples, 0) > greatest(1000, 0.5 * greatest(c.reltuples, 0))
       OR (greatest(c.reltuples, 0) - s.n_live_tup > greatest(1000, 0.5 * greatest(c.reltuples, 0))
           AND coalesce(greatest(s.last_analyze, s.last_autoanalyze), '-infinity')
               < now() - interval '1 microsecond' * @shrunk_after_us::bigint))
ORDER BY c.relname;

-- name: MaintenanceTurn :one
-- Whether a pool's periodic pass is its to run: none of the fleet's began
-- within every_us. See batchq.maintenance_turn in db/functions/maintain.sql.
SELECT batchq.maintenance_turn(@queue::text, @every_us::bigint)::boolean AS mine;
