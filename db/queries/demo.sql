-- name: DemoProgress :many
-- For `batchq demo`'s live table, per tenant of a queue: finished jobs by
-- outcome, the tokens of jobs that reached the provider (actual cost, else the
-- estimate), those that finished since @since (a job handed back and run
-- later counts when it ran, not when it was first claimed), the 95th percentile of the wait from
-- enqueue to first claim (in seconds, nearest rank), and what is still
-- waiting or running.
WITH o AS (
    SELECT o.tenant,
           count(*) FILTER (WHERE o.outcome = 'succeeded') AS done,
           count(*) FILTER (WHERE o.outcome IN ('failed', 'discarded')) AS failed,
           count(*) FILTER (WHERE o.outcome = 'expired') AS expired,
           sum(coalesce(o.actual_cost, o.estimated_cost)) FILTER (WHERE o.first_claimed_at IS NOT NULL) AS tokens,
           sum(coalesce(o.actual_cost, o.estimated_cost)) FILTER (WHERE o.first_claimed_at IS NOT NULL AND o.finished_at >= @since::timestamptz) AS recent_tokens,
           percentile_disc(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM o.first_claimed_at - o.enqueued_at))
               FILTER (WHERE o.first_claimed_at IS NOT NULL) AS wait_p95
    FROM batchq.outcomes o
    WHERE o.queue = @queue::text
    GROUP BY o.tenant
), j AS (
    SELECT j.tenant,
           count(*) FILTER (WHERE j.state <> 'running') AS waiting,
           count(*) FILTER (WHERE j.state = 'running') AS running
    FROM batchq.jobs j
    WHERE j.queue = @queue::text
    GROUP BY j.tenant
)
SELECT coalesce(o.tenant, j.tenant)::text AS tenant,
       coalesce(o.done, 0)::bigint AS done,
       coalesce(o.failed, 0)::bigint AS failed,
       coalesce(o.expired, 0)::bigint AS expired,
       coalesce(o.tokens, 0)::bigint AS tokens,
       coalesce(o.recent_tokens, 0)::bigint AS recent_tokens,
       coalesce(o.wait_p95, 0)::double precision AS wait_p95_seconds,
       coalesce(j.waiting, 0)::bigint AS waiting,
       coalesce(j.running, 0)::bigint AS running
FROM o FULL JOIN j ON j.tenant = o.tenant
ORDER BY 1;

-- name: DemoOutcomes :many
-- Every finished job of a queue, for `batchq demo`'s final report.
SELECT o.job_id, o.tenant, o.kind, o.outcome::text AS outcome, o.estimated_cost, o.actual_cost,
       o.attempts, o.enqueued_at, o.first_claimed_at, o.finished_at
FROM batchq.outcomes o
WHERE o.queue = @queue::text
ORDER BY o.job_id;

-- name: DemoUnfinished :many
-- Every unfinished job of a queue, for `batchq demo`'s final report.
SELECT j.id, j.tenant, j.kind, j.state::text AS state, j.cost, j.enqueued_at, j.first_claimed_at
FROM batchq.jobs j
WHERE j.queue = @queue::text
ORDER BY j.id;
