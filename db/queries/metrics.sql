-- name: MetricsLeaders :many
-- Which tenants package metrics names: per queue, the @top_tenants tenants
-- with the most queued tokens (then queued jobs, running jobs, name), each
-- row with the number of tenants that have unfinished jobs in the queue. All
-- queues when @queues is NULL; a queue with no unfinished job has no row.
--
-- It aggregates every unfinished job by tenant: a million tenants take
-- seconds, so the collector runs it in the background, at most once a
-- RankInterval, while each scrape runs only MetricsBacklog.
WITH per_tenant AS MATERIALIZED (
    SELECT j.queue,
           j.tenant,
           coalesce(sum(j.cost) FILTER (WHERE j.state = 'queued'), 0) AS queued_tokens,
           count(*) FILTER (WHERE j.state = 'queued')                  AS queued_jobs,
           count(*) FILTER (WHERE j.state = 'running')                 AS running_jobs
    FROM batchq.unfinished j -- so that a queue named is read by an index
    WHERE sqlc.narg(queues)::text[] IS NULL OR j.queue = ANY (sqlc.narg(queues)::text[])
    GROUP BY j.queue, j.tenant
), counts AS (
    SELECT p.queue, count(*) AS tenants FROM per_tenant p GROUP BY p.queue
)
-- ORDER BY … LIMIT per queue keeps only the leaders (a top-N heap), where
-- ranking every tenant would sort them all.
SELECT c.queue, l.tenant, c.tenants
FROM counts c
CROSS JOIN LATERAL (
    SELECT p.tenant
    FROM per_tenant p
    WHERE p.queue = c.queue
    ORDER BY p.queued_tokens DESC, p.queued_jobs DESC, p.running_jobs DESC, p.tenant
    LIMIT @top_tenants
) l
ORDER BY c.queue, l.tenant;

-- name: MetricsBacklog :many
-- The backlog gauges, read at each scrape: per queue, one row for each tenant
-- named in the pairs (@named_queues[i], @named_tenants[i]) that has
-- unfinished jobs, and one row with an empty tenant (no tenant has that
-- name) summing all the others; a queue with no unfinished job has that row,
-- of zeros.
-- oldest_queued_age_seconds is 0 when nothing is queued. All queues when
-- @queues is NULL. One pass over the unfinished jobs, hashed into these few
-- groups: a million jobs take well under a second.
WITH named AS (
    SELECT unnest(@named_queues::text[]) AS queue, unnest(@named_tenants::text[]) AS tenant
), grouped AS (
    SELECT j.queue,
           n.tenant,
           count(*) FILTER (WHERE j.state = 'queued')                  AS queued_jobs,
           coalesce(sum(j.cost) FILTER (WHERE j.state = 'queued'), 0) AS queued_tokens,
           min(j.enqueued_at) FILTER (WHERE j.state = 'queued')       AS oldest_queued_at,
           count(*) FILTER (WHERE j.state = 'running')                 AS running_jobs,
           count(*) FILTER (WHERE j.state = 'retrying')                AS retrying_jobs,
           count(*) FILTER (WHERE j.state = 'scheduled')               AS scheduled_jobs
    FROM batchq.unfinished j -- so that a queue named is read by an index
    -- A join, not a CASE: the planner then sees few groups and hashes them
    -- instead of sorting every job.
    LEFT JOIN named n ON n.queue = j.queue AND n.tenant = j.tenant
    WHERE sqlc.narg(queues)::text[] IS NULL OR j.queue = ANY (sqlc.narg(queues)::text[])
    GROUP BY j.queue, n.tenant
)
SELECT q.name                                                                AS queue,
       coalesce(g.tenant, '')::text                                          AS tenant,
       coalesce(g.queued_jobs, 0)::bigint                                    AS queued_jobs,
       coalesce(g.queued_tokens, 0)::bigint                                  AS queued_tokens,
       coalesce(extract(epoch FROM now() - g.oldest_queued_at), 0)::float8   AS oldest_queued_age_seconds,
       coalesce(g.running_jobs, 0)::bigint                                   AS running_jobs,
       coalesce(g.retrying_jobs, 0)::bigint                                  AS retrying_jobs,
       coalesce(g.scheduled_jobs, 0)::bigint                                 AS scheduled_jobs,
       (q.paused_at IS NOT NULL)::boolean                                    AS paused
FROM batchq.queues q
LEFT JOIN grouped g ON g.queue = q.name
WHERE sqlc.narg(queues)::text[] IS NULL OR q.name = ANY (sqlc.narg(queues)::text[])
ORDER BY q.name, 2;

-- name: MetricsQuota :many
-- The quota gauges: per key, what the provider last reported (NULL where it
-- never said), and how long the fleet stays paused after a 429 (0 when not).
SELECT q.key,
       q.requests_limit,
       q.requests_remaining,
       q.tokens_limit,
       q.tokens_remaining,
       coalesce(greatest(extract(epoch FROM q.paused_until - now()), 0), 0)::float8 AS pause_remaining_seconds
FROM batchq.quota q
ORDER BY q.key;
