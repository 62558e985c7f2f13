-- +goose Up

-- Reports for analysts: plain SQL over the queue's tables, the same queries
-- `batchq report …` runs. Durations are intervals; tokens are the jobs'
-- costs (estimates, or the actual cost a completion reported).

-- The unfinished jobs, in two parts, so that a condition on the queue
-- reaches an index whatever the other queues hold: the waiting jobs (queued
-- or retrying) through jobs_deadline, which is keyed by queue, and the
-- running ones, few at any time, through jobs_lease. With no condition on
-- the queue, one scan of the table reads the waiting jobs. The backlog below
-- and the metrics' backlog gauges read the jobs through it.
CREATE VIEW batchq.unfinished AS
SELECT w.queue, w.tenant, w.state, w.cost, w.enqueued_at, w.deadline
FROM batchq.jobs w WHERE w.state <> 'running'
UNION ALL
SELECT r.queue, r.tenant, r.state, r.cost, r.enqueued_at, r.deadline
FROM batchq.jobs r WHERE r.state = 'running';
COMMENT ON VIEW batchq.unfinished IS 'The unfinished jobs, read so that a condition on the queue uses an index.';

-- backlog: what each tenant has waiting in each queue, now. queued jobs wait
-- their turn; retrying jobs wait for their backoff before they rejoin; the
-- nearest deadline is that of the waiting (queued or retrying) jobs.
CREATE VIEW batchq.backlog AS
SELECT j.queue,
       j.tenant,
       count(*) FILTER (WHERE j.state = 'queued')                     AS queued_jobs,
       coalesce(sum(j.cost) FILTER (WHERE j.state = 'queued'), 0)::bigint AS queued_tokens,
       min(j.enqueued_at) FILTER (WHERE j.state = 'queued')           AS oldest_queued_at,
       now() - min(j.enqueued_at) FILTER (WHERE j.state = 'queued')   AS oldest_queued_age,
       count(*) FILTER (WHERE j.state = 'running')                    AS running_jobs,
       count(*) FILTER (WHERE j.state = 'retrying')                   AS retrying_jobs,
       min(j.deadline) FILTER (WHERE j.state <> 'running')            AS nearest_deadline
FROM batchq.unfinished j
GROUP BY j.queue, j.tenant;
COMMENT ON VIEW batchq.backlog IS 'Waiting and running work per queue and tenant, now.';

-- audit: the outcomes, one row per finished job, with how long it waited
-- (enqueue to first claim), ran (first claim to finish: every attempt and the
-- backoffs between them) and took in all (enqueue to finish). wait and run are
-- NULL for a job never claimed.
CREATE VIEW batchq.audit AS
SELECT o.job_id,
       o.queue,
       o.tenant,
       o.kind,
       o.outcome,
       o.attempts,
       o.max_attempts,
       o.estimated_cost,
       o.actual_cost,
       o.enqueued_at,
       o.first_claimed_at,
       o.finished_at,
       o.deadline,
       o.first_claimed_at - o.enqueued_at AS wait,
       o.finished_at - o.first_claimed_at AS run,
       o.finished_at - o.enqueued_at      AS total,
       o.worker,
       o.error,
       o.unique_key
FROM batchq.outcomes o;
COMMENT ON VIEW batchq.audit IS 'The audit trail: finished jobs with wait, run and total durations.';

-- The row type batchq.tenant_usage() returns. Token columns by outcome count
-- what the scheduler charged: succeeded jobs at their actual cost (the
-- estimate when none was reported), the others at their estimate.
-- served_tokens is what the scheduler charged the tenant for those jobs:
-- each claim of a job that ran charges its estimate (a job that failed and
-- was retried, or whose lease was lost, is charged once per attempt), and a
-- succeeded job's last attempt is charged its actual cost where one was
-- reported; a job that went while queued (expired, cancelled, or released
-- before it started) was refunded. token_share is the tenant's part of
-- its queue's served tokens in the window; weight_share is its weight's part
-- of the weights of the tenants with outcomes in that queue in the window.
CREATE VIEW batchq.tenant_usage_rows AS
SELECT NULL::text             AS queue,
       NULL::text             AS tenant,
       NULL::bigint           AS jobs,
       NULL::bigint           AS succeeded,
       NULL::bigint           AS failed,
       NULL::bigint           AS expired,
       NULL::bigint           AS cancelled,
       NULL::bigint           AS discarded,
       NULL::bigint           AS succeeded_tokens,
       NULL::bigint           AS failed_tokens,
       NULL::bigint           AS expired_tokens,
       NULL::bigint           AS cancelled_tokens,
       NULL::bigint           AS discarded_tokens,
       NULL::bigint           AS actual_tokens,
       NULL::bigint           AS served_tokens,
       NULL::interval         AS wait_p50,
       NULL::interval         AS wait_p95,
       NULL::double precision AS weight,
       NULL::double precision AS token_share,
       NULL::double precision AS weight_share
WHERE false;
COMMENT ON VIEW batchq.tenant_usage_rows IS 'The row type batchq.tenant_usage() returns; always empty.';

-- tenant_usage: per queue and tenant, the jobs that finished in
-- [since, until): how many by outcome, their tokens, the wait from enqueue to
-- first claim (p50 and p95 of the jobs that were claimed), and the tenant's
-- share of the queue's served tokens against its share of the weights.
-- A single-SELECT SQL function, so the planner inlines it and the time window
-- reaches the index on outcomes.finished_at.
-- +goose StatementBegin
CREATE FUNCTION batchq.tenant_usage(since timestamptz, until timestamptz)
RETURNS SETOF batchq.tenant_usage_rows
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH w AS (
    SELECT o.queue,
           o.tenant,
           count(*) AS jobs,
           count(*) FILTER (WHERE o.outcome = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE o.outcome = 'failed')    AS failed,
           count(*) FILTER (WHERE o.outcome = 'expired')   AS expired,
           count(*) FILTER (WHERE o.outcome = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE o.outcome = 'discarded') AS discarded,
           coalesce(sum(coalesce(o.actual_cost, o.estimated_cost)) FILTER (WHERE o.outcome = 'succeeded'), 0)::bigint AS succeeded_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'failed'), 0)::bigint    AS failed_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'expired'), 0)::bigint   AS expired_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'cancelled'), 0)::bigint AS cancelled_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'discarded'), 0)::bigint AS discarded_tokens,
           coalesce(sum(o.actual_cost), 0)::bigint AS actual_tokens,
           -- What the ledger was charged: every attempt at the estimate (a
           -- release hands its attempt back with its charge), the last
           -- attempt of a succeeded job at its actual cost.
           coalesce(sum(CASE WHEN o.outcome = 'succeeded'
                             THEN o.estimated_cost * (o.attempts - 1) + coalesce(o.actual_cost, o.estimated_cost)
                             ELSE o.estimated_cost * o.attempts END), 0)::bigint AS served_tokens,
           percentile_cont(0.5)  WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at) AS wait_p95
    FROM batchq.outcomes o
    WHERE o.finished_at >= tenant_usage.since AND o.finished_at < tenant_usage.until
    GROUP BY o.queue, o.tenant
), s AS (
    SELECT w.*, coalesce(t.weight, 1) AS weight
    FROM w LEFT JOIN batchq.tenants t ON t.name = w.tenant
), r AS (
    -- Weights relative to the queue's largest, which add up without
    -- overflow however large the weights (two of 1e308 would not).
    SELECT s.*, s.weight / max(s.weight) OVER (PARTITION BY s.queue) AS rel
    FROM s
)
SELECT r.queue, r.tenant, r.jobs, r.succeeded, r.failed, r.expired, r.cancelled, r.discarded,
       r.succeeded_tokens, r.failed_tokens, r.expired_tokens, r.cancelled_tokens, r.discarded_tokens,
       r.actual_tokens, r.served_tokens, r.wait_p50, r.wait_p95, r.weight,
       r.served_tokens::double precision / nullif(sum(r.served_tokens) OVER (PARTITION BY r.queue), 0) AS token_share,
       r.rel / sum(r.rel) OVER (PARTITION BY r.queue) AS weight_share
FROM r
ORDER BY r.queue, r.tenant
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION batchq.tenant_usage IS 'Usage per queue and tenant of the jobs that finished in [since, until).';

-- The BRIN index on outcomes.finished_at serves every time window above and
-- pruning. VACUUM summarizes its page ranges; until it does, a window query
-- reads every page not yet summarized, and autovacuum comes to an insert-only
-- table only after a fifth of its size was added (two million rows at ten
-- million). With autosummarize, autovacuum summarizes each range soon after
-- inserts move on to the next one.
ALTER INDEX batchq.outcomes_finished SET (autosummarize = on);

-- One tenant's audit trail over any window, newest first: what analysts ask
-- most, and what the BRIN index cannot narrow (at ten million outcomes a month
-- of one tenant took 3.8 s by BRIN, 35 ms with this index). Completions pay a
-- btree insert for it, into a leaf chosen by tenant: inserting 100 outcome
-- rows took 1.13 ms with it and 0.75 ms without (medians of 100 alternations),
-- about a tenth of a fair drain's time per job. Building it takes a lock that
-- holds up completions while it runs: about 25 s per ten million existing
-- outcomes.
CREATE INDEX outcomes_tenant ON batchq.outcomes (tenant, finished_at);

-- +goose Down
DROP INDEX batchq.outcomes_tenant;
ALTER INDEX batchq.outcomes_finished RESET (autosummarize);
DROP FUNCTION batchq.tenant_usage;
DROP VIEW batchq.tenant_usage_rows;
DROP VIEW batchq.audit;
DROP VIEW batchq.backlog;
DROP VIEW batchq.unfinished;
