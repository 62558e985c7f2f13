-- The web console's reads (package console). They read only what the app
-- role may read (docs/sql-api.md#roles): the views, the settings, and the
-- outcomes' columns without payload or result, so a console connected as a
-- read-only role shows every page but the jobs' payloads.

-- name: ConsoleQueues :many
-- Every queue with what it holds now: queued jobs and tokens, running jobs,
-- jobs waiting to retry, the oldest queued job; and whether it is paused.
SELECT q.name, q.paused_at,
       coalesce(b.queued_jobs, 0)::bigint   AS queued_jobs,
       coalesce(b.queued_tokens, 0)::bigint AS queued_tokens,
       coalesce(b.running_jobs, 0)::bigint  AS running_jobs,
       coalesce(b.retrying_jobs, 0)::bigint AS retrying_jobs,
       coalesce(b.oldest_queued_at, 'epoch')::timestamptz AS oldest_queued_at -- epoch: none
FROM batchq.queues q
LEFT JOIN (
    SELECT u.queue,
           count(*) FILTER (WHERE u.state = 'queued')    AS queued_jobs,
           sum(u.cost) FILTER (WHERE u.state = 'queued') AS queued_tokens,
           count(*) FILTER (WHERE u.state = 'running')   AS running_jobs,
           count(*) FILTER (WHERE u.state = 'retrying')  AS retrying_jobs,
           min(u.enqueued_at) FILTER (WHERE u.state = 'queued') AS oldest_queued_at
    FROM batchq.unfinished u
    GROUP BY u.queue
) b ON b.queue = q.name
ORDER BY q.name;

-- name: ConsoleOutcomeCounts :many
-- How many jobs finished in [@since, @until) by queue and outcome, of one
-- tenant when @tenant is set.
SELECT a.queue, a.outcome::text AS outcome, count(*)::bigint AS jobs
FROM batchq.audit a
WHERE a.finished_at >= @since::timestamptz AND a.finished_at < @until::timestamptz
  AND (sqlc.narg(tenant)::text IS NULL OR a.tenant = sqlc.narg(tenant))
GROUP BY a.queue, a.outcome
ORDER BY a.queue, a.outcome;

-- name: ConsoleQueueTenants :many
-- One queue's tenants: what each has queued and running now, its weight,
-- and its use of the queue by the jobs that finished in [@since, @until)
-- (batchq.tenant_usage). The @top tenants with the most queued tokens (then
-- the most served tokens in the window) have a row each; the rest are summed
-- in one row whose tenant is ''. tenants counts the tenants of a row. sqlc
-- reads every cast column as NOT NULL, so what may be missing comes as a
-- value no row has: the epoch for a time, -1µs for a wait, 0 for a weight.
WITH b AS (
    SELECT u.tenant,
           count(*) FILTER (WHERE u.state = 'queued')    AS queued_jobs,
           sum(u.cost) FILTER (WHERE u.state = 'queued') AS queued_tokens,
           count(*) FILTER (WHERE u.state = 'running')   AS running_jobs,
           count(*) FILTER (WHERE u.state = 'retrying')  AS retrying_jobs,
           min(u.enqueued_at) FILTER (WHERE u.state = 'queued') AS oldest_queued_at
    FROM batchq.unfinished u
    WHERE u.queue = @queue::text
    GROUP BY u.tenant
), w AS (
    SELECT * FROM batchq.tenant_usage(@since::timestamptz, @until::timestamptz) t WHERE t.queue = @queue::text
), t AS (
    SELECT coalesce(b.tenant, w.tenant) AS tenant,
           coalesce(b.queued_jobs, 0) AS queued_jobs, coalesce(b.queued_tokens, 0) AS queued_tokens,
           coalesce(b.running_jobs, 0) AS running_jobs, coalesce(b.retrying_jobs, 0) AS retrying_jobs,
           b.oldest_queued_at,
           coalesce(w.jobs, 0) AS finished_jobs, coalesce(w.served_tokens, 0) AS served_tokens,
           w.token_share, w.weight_share, w.wait_p50, w.wait_p95
    FROM b FULL JOIN w ON w.tenant = b.tenant
), r AS (
    SELECT t.*, row_number() OVER (ORDER BY t.queued_tokens DESC, t.served_tokens DESC, t.tenant) AS rank
    FROM t
)
SELECT (CASE WHEN r.rank <= @top::bigint THEN r.tenant ELSE '' END)::text AS tenant, -- '': the others
       count(*)::bigint                  AS tenants,
       sum(r.queued_jobs)::bigint        AS queued_jobs,
       sum(r.queued_tokens)::bigint      AS queued_tokens,
       sum(r.running_jobs)::bigint       AS running_jobs,
       sum(r.retrying_jobs)::bigint      AS retrying_jobs,
       coalesce(min(r.oldest_queued_at), 'epoch')::timestamptz AS oldest_queued_at, -- epoch: none
       sum(r.finished_jobs)::bigint      AS finished_jobs,
       sum(r.served_tokens)::bigint      AS served_tokens,
       coalesce(sum(r.token_share), 0)::float8  AS token_share,
       coalesce(sum(r.weight_share), 0)::float8 AS weight_share,
       -- -1µs: none (no claim in the window, or the others)
       coalesce(CASE WHEN count(*) = 1 THEN max(r.wait_p50) END, '-1 microsecond')::interval AS wait_p50,
       coalesce(CASE WHEN count(*) = 1 THEN max(r.wait_p95) END, '-1 microsecond')::interval AS wait_p95,
       coalesce(CASE WHEN count(*) = 1 THEN max(coalesce(qt.weight, tn.weight, 1)) END, 0)::float8 AS weight
FROM r
LEFT JOIN batchq.queue_tenants qt ON qt.queue = @queue::text AND qt.tenant = r.tenant AND r.rank <= @top::bigint
LEFT JOIN batchq.tenants tn ON tn.name = r.tenant AND r.rank <= @top::bigint
GROUP BY 1
ORDER BY min(r.rank);

-- name: ConsoleShares :many
-- The tokens one queue served to each tenant in [@since, @until), by step
-- of @step_seconds (bucket 0 starts at @since), counted as
-- batchq.tenant_usage counts served tokens, at the jobs' finish. The @lines
-- tenants served the most in the window have their own rows; the rest are
-- summed under tenant ''.
WITH x AS (
    SELECT floor(extract(epoch FROM o.finished_at - @since::timestamptz) / @step_seconds::float8)::integer AS bucket,
           o.tenant,
           sum(CASE WHEN o.outcome = 'succeeded'
                    THEN o.estimated_cost * (o.attempts - 1) + coalesce(o.actual_cost, o.estimated_cost)
                    ELSE o.estimated_cost * o.attempts END) AS tokens
    FROM batchq.outcomes o
    WHERE o.queue = @queue::text AND o.finished_at >= @since::timestamptz AND o.finished_at < @until::timestamptz
    GROUP BY 1, 2
), top AS (
    SELECT x.tenant FROM x GROUP BY x.tenant HAVING sum(x.tokens) > 0
    ORDER BY sum(x.tokens) DESC, x.tenant LIMIT @lines::bigint
)
SELECT x.bucket::integer AS bucket, (CASE WHEN x.tenant IN (SELECT top.tenant FROM top) THEN x.tenant ELSE '' END)::text AS tenant,
       sum(x.tokens)::bigint AS tokens
FROM x
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: ConsoleTenantBacklog :one
-- What one tenant has queued and running in one queue now.
SELECT count(*) FILTER (WHERE u.state = 'queued')::bigint AS queued_jobs,
       coalesce(sum(u.cost) FILTER (WHERE u.state = 'queued'), 0)::bigint AS queued_tokens,
       count(*) FILTER (WHERE u.state = 'running')::bigint AS running_jobs,
       count(*) FILTER (WHERE u.state = 'retrying')::bigint AS retrying_jobs,
       coalesce(min(u.enqueued_at) FILTER (WHERE u.state = 'queued'), 'epoch')::timestamptz AS oldest_queued_at -- epoch: none
FROM batchq.unfinished u
WHERE u.queue = @queue::text AND u.tenant = @tenant::text;

-- name: ConsoleTenantSettings :one
-- A tenant's settings in one queue: its own for the queue, its own for
-- every queue, and the queue's bound.
SELECT q.max_per_tenant,
       qt.weight AS queue_weight, qt.max_queued AS queue_max_queued,
       t.weight AS tenant_weight, t.max_queued AS tenant_max_queued
FROM batchq.queues q
LEFT JOIN batchq.queue_tenants qt ON qt.queue = q.name AND qt.tenant = @tenant::text
LEFT JOIN batchq.tenants t ON t.name = @tenant::text
WHERE q.name = @queue::text;

-- name: ConsoleAuditJob :one
-- One finished job's outcome without its payload or result.
SELECT * FROM batchq.audit a WHERE a.job_id = @job_id;

-- name: ConsolePrivileges :one
-- What the console's role may read beyond the reports: the unfinished jobs
-- whole, and the outcomes' payloads and results.
SELECT has_table_privilege('batchq.jobs', 'SELECT') AS jobs,
       has_column_privilege('batchq.outcomes', 'payload', 'SELECT') AS payloads,
       has_column_privilege('batchq.outcomes', 'result', 'SELECT') AS results;

-- name: ConsoleRateLimited :many
-- How many 429s each quota key received since @since: the pauses they set.
SELECT p.key, count(*)::bigint AS limited
FROM batchq.quota_pauses p
WHERE p.at >= @since::timestamptz
GROUP BY p.key
ORDER BY p.key;
