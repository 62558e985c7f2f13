-- The web console's reads (package console). They read only what the app
-- role may read (docs/sql-api.md#roles): the views, the settings, the
-- console's backlog functions, and the outcomes' columns without payload or
-- result, so a console connected as a read-only role shows every page but
-- the jobs' payloads. None reads every queued job: at a million of them
-- that takes longer than a page may.

-- name: ConsoleQueues :many
-- Every queue with what it holds now, from batchq.console_backlog: queued
-- tokens (exact), queued_span (the queued jobs, an upper bound: see
-- console_backlog), running jobs, jobs waiting to retry, the oldest queued
-- job (the epoch for none: sqlc reads every cast column as NOT NULL); and
-- whether it is paused.
SELECT q.name, q.paused_at,
       coalesce(b.queued_tokens, 0)::bigint AS queued_tokens,
       coalesce(b.queued_span, 0)::bigint   AS queued_span,
       coalesce(b.running_jobs, 0)::bigint  AS running_jobs,
       coalesce(b.scheduled_jobs, 0)::bigint AS scheduled_jobs,
       coalesce(b.oldest_queued_at, 'epoch')::timestamptz AS oldest_queued_at
FROM batchq.queues q
LEFT JOIN (
    SELECT c.queue, sum(c.queued_tokens) AS queued_tokens, sum(c.queued_span) AS queued_span,
           sum(c.running_jobs) AS running_jobs, sum(c.scheduled_jobs) AS scheduled_jobs,
           min(c.oldest_queued_at) AS oldest_queued_at
    FROM batchq.console_backlog(NULL, NULL) c
    GROUP BY c.queue
) b ON b.queue = q.name
ORDER BY q.name;

-- name: ConsoleBacklog :many
-- What each tenant of one queue (one tenant when @tenant is set) has
-- waiting and running now: batchq.console_backlog.
SELECT c.tenant::text AS tenant, c.queued_tokens::bigint AS queued_tokens, c.queued_span::bigint AS queued_span,
       coalesce(c.oldest_queued_at, 'epoch')::timestamptz AS oldest_queued_at,
       c.running_jobs::bigint AS running_jobs, c.scheduled_jobs::bigint AS scheduled_jobs
FROM batchq.console_backlog(@queue::text, sqlc.narg(tenant)::text) c;

-- name: ConsoleQueued :many
-- The queued jobs of some tenants of one queue (all when @tenants is NULL),
-- counted up to @max_count each: batchq.console_queued.
SELECT c.tenant::text AS tenant, c.queued_jobs::bigint AS queued_jobs
FROM batchq.console_queued(@queue::text, sqlc.narg(tenants)::text[], @max_count::bigint) c;

-- name: ConsoleQueuedInQueues :many
-- The queued jobs of each of @queues, counted up to @max_count a tenant:
-- batchq.console_queued, one statement for them all. A queue deleted since
-- the caller listed it is left out (console_queued would refuse it); the
-- subquery stays one (OFFSET 0), so that the filter comes before the call.
SELECT x.queue::text AS queue, coalesce(sum(c.queued_jobs), 0)::bigint AS queued_jobs
FROM (SELECT u.queue FROM unnest(@queues::text[]) AS u (queue)
      WHERE EXISTS (SELECT FROM batchq.queues q WHERE q.name = u.queue) OFFSET 0) x
LEFT JOIN LATERAL batchq.console_queued(x.queue, NULL, @max_count::bigint) c ON true
GROUP BY x.queue;

-- name: ConsoleOutcomeCounts :many
-- How many jobs finished in [@since, @until) by queue and outcome.
SELECT a.queue, a.outcome::text AS outcome, count(*)::bigint AS jobs
FROM batchq.audit a
WHERE a.finished_at >= @since::timestamptz AND a.finished_at < @until::timestamptz
GROUP BY a.queue, a.outcome
ORDER BY a.queue, a.outcome;

-- name: ConsoleTenantOutcomeCounts :many
-- How many jobs of one tenant finished in [@since, @until) by queue and
-- outcome: a query of its own, so that it reads the tenant's outcomes by
-- index (outcomes_tenant) rather than every outcome of the window.
SELECT a.queue, a.outcome::text AS outcome, count(*)::bigint AS jobs
FROM batchq.audit a
WHERE a.tenant = @tenant::text AND a.finished_at >= @since::timestamptz AND a.finished_at < @until::timestamptz
GROUP BY a.queue, a.outcome
ORDER BY a.queue, a.outcome;

-- name: ConsoleUsage :many
-- Each tenant's use of one queue by the jobs that finished in [@since,
-- @until): how many, and the tokens the scheduler charged for them, counted
-- as batchq.tenant_usage counts served_tokens; with the tenant's weight in
-- the queue now.
WITH w AS (
    SELECT o.tenant, count(*) AS jobs,
           sum(CASE WHEN o.outcome = 'succeeded'
                    THEN o.estimated_cost * (o.attempts - 1) + coalesce(o.actual_cost, o.estimated_cost)
                    ELSE o.estimated_cost * o.attempts END) AS served_tokens
    FROM batchq.outcomes o
    WHERE o.queue = @queue::text AND o.finished_at >= @since::timestamptz AND o.finished_at < @until::timestamptz
    GROUP BY o.tenant
)
SELECT w.tenant, w.jobs::bigint AS jobs, w.served_tokens::bigint AS served_tokens,
       coalesce(qt.weight, t.weight, 1)::float8 AS weight
FROM w
LEFT JOIN batchq.queue_tenants qt ON qt.queue = @queue::text AND qt.tenant = w.tenant
LEFT JOIN batchq.tenants t ON t.name = w.tenant;

-- name: ConsoleWaits :many
-- The wait from enqueue to first claim of some tenants' jobs that finished
-- in one queue in [@since, @until): p50 and p95 of the jobs that were
-- claimed, -1µs for none (sqlc reads every cast column as NOT NULL).
SELECT o.tenant,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at), '-1 microsecond')::interval AS wait_p50,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at), '-1 microsecond')::interval AS wait_p95
FROM batchq.outcomes o
WHERE o.tenant = ANY (@tenants::text[]) AND o.queue = @queue::text
  AND o.finished_at >= @since::timestamptz AND o.finished_at < @until::timestamptz
GROUP BY o.tenant;

-- name: ConsoleWeights :many
-- The weights some tenants have in one queue now.
SELECT x.tenant::text AS tenant, coalesce(qt.weight, t.weight, 1)::float8 AS weight
FROM unnest(@tenants::text[]) AS x (tenant)
LEFT JOIN batchq.queue_tenants qt ON qt.queue = @queue::text AND qt.tenant = x.tenant
LEFT JOIN batchq.tenants t ON t.name = x.tenant;

-- name: ConsoleShares :many
-- The tokens one queue served in [@since, @until), by step of
-- @step_seconds (step 0 starts at @since), counted as batchq.tenant_usage
-- counts served tokens, at the jobs' finish: for each of @tenants (which
-- must be distinct), and for the rest summed under tenant ''. One pass over
-- the window's outcomes, shaped for a few hundred groups of plain values:
-- each row's step is date_bin's integer arithmetic on its finish, and its
-- line a hash join with @tenants, where a date_part and an array search on
-- every row led the planner to sort all of them; the bins become step
-- numbers once aggregated.
SELECT round(date_part('epoch', s.bin - @since::timestamptz) / @step_seconds::float8)::integer AS step,
       coalesce((@tenants::text[])[s.line], '')::text AS tenant,
       s.tokens::bigint AS tokens
FROM (SELECT date_bin(make_interval(secs => @step_seconds::float8), o.finished_at, @since::timestamptz) AS bin,
             coalesce(t.line, 0) AS line,
             sum(CASE WHEN o.outcome = 'succeeded'
                      THEN o.estimated_cost * (o.attempts - 1) + coalesce(o.actual_cost, o.estimated_cost)
                      ELSE o.estimated_cost * o.attempts END) AS tokens
      FROM batchq.outcomes o
      LEFT JOIN unnest(@tenants::text[]) WITH ORDINALITY AS t (tenant, line) ON t.tenant = o.tenant
      WHERE o.queue = @queue::text AND o.finished_at >= @since::timestamptz AND o.finished_at < @until::timestamptz
      GROUP BY 1, 2) s
ORDER BY 1, 2;

-- name: ConsoleTenantSettings :one
-- A tenant's settings in one queue: its own for the queue, its own for
-- every queue, and the queue's bound; and whether the queue knows the
-- tenant at all (batchq.console_tenant_known).
SELECT q.max_per_tenant,
       qt.weight AS queue_weight, qt.max_queued AS queue_max_queued,
       t.weight AS tenant_weight, t.max_queued AS tenant_max_queued,
       batchq.console_tenant_known(q.name, @tenant::text)::boolean AS known
FROM batchq.queues q
LEFT JOIN batchq.queue_tenants qt ON qt.queue = q.name AND qt.tenant = @tenant::text
LEFT JOIN batchq.tenants t ON t.name = @tenant::text
WHERE q.name = @queue::text;

-- name: ConsoleAuditJob :one
-- One finished job's outcome without its payload or result.
SELECT * FROM batchq.audit a WHERE a.job_id = @job_id;

-- name: ConsolePrivileges :one
-- What the console's role may read beyond the reports (the unfinished jobs
-- whole, the outcomes' payloads and results), and which of its actions it
-- may take, from what each calls: cancel jobs in bulk; pause and resume a
-- queue; write a tenant's settings (UpdateQueueTenant and UpdateTenant
-- write the settings rows, then re-key); retry a job (RetryNow updates the
-- job, Resubmit reads its outcome whole and enqueues a copy). A privilege
-- is asked for alone: has_table_privilege is true for a list when any of
-- it is held.
SELECT has_table_privilege('batchq.jobs', 'SELECT') AS jobs,
       has_column_privilege('batchq.outcomes', 'payload', 'SELECT') AS payloads,
       has_column_privilege('batchq.outcomes', 'result', 'SELECT') AS results,
       has_function_privilege('batchq.cancel_jobs(text, text, text, timestamptz, timestamptz, bigint, integer, text)', 'EXECUTE') AS cancel,
       (has_function_privilege('batchq.pause_queue(text)', 'EXECUTE')
           AND has_function_privilege('batchq.resume_queue(text)', 'EXECUTE'))::boolean AS pause,
       (has_table_privilege('batchq.queue_tenants', 'INSERT') AND has_table_privilege('batchq.queue_tenants', 'UPDATE')
           AND has_table_privilege('batchq.queue_tenants', 'DELETE')
           AND has_table_privilege('batchq.tenants', 'INSERT') AND has_table_privilege('batchq.tenants', 'UPDATE')
           AND has_function_privilege('batchq.rekey(text, text[])', 'EXECUTE'))::boolean AS settings,
       (has_table_privilege('batchq.jobs', 'UPDATE') AND has_table_privilege('batchq.outcomes', 'SELECT')
           AND has_function_privilege('batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[], timestamptz[])', 'EXECUTE'))::boolean AS retry;

-- name: ConsoleRateLimited :many
-- How many 429s each quota key received since @since: the pauses they set.
SELECT p.key, count(*)::bigint AS limited
FROM batchq.quota_pauses p
WHERE p.at >= @since::timestamptz
GROUP BY p.key
ORDER BY p.key;
