-- +goose Up

-- Jobs that run later, and recurring schedules (docs/sql-api.md, "Run later";
-- docs/operating.md, "Schedules").

-- One index for every job waiting for a time, retried or scheduled: the
-- promotion (batchq.requeue) reads it from the oldest due job on, in one
-- range scan per queue, whatever the number of jobs scheduled later.
-- jobs_retry stays, for what counts the retrying jobs alone (the console's
-- backlog), which would otherwise step over every scheduled job.
CREATE INDEX jobs_due ON batchq.jobs (queue, run_after) WHERE state IN ('retrying', 'scheduled');
-- A tenant's scheduled jobs count toward its bound. tenant_ring.scheduled
-- is at least their number (NULL: none), kept by enqueue and requeue under
-- the ring row's lock; a cancel or an expiry leaves it high, and an enqueue
-- that finds the tenant looking full counts them here and mends it.
ALTER TABLE batchq.tenant_ring ADD COLUMN scheduled integer;
CREATE INDEX jobs_scheduled_tenant ON batchq.jobs (queue, tenant) WHERE state = 'scheduled';

-- The unfinished jobs show when a waiting one is due, and the backlog shows
-- scheduled jobs apart from queued ones, with the time the next is due.
CREATE OR REPLACE VIEW batchq.unfinished AS
SELECT w.queue, w.tenant, w.state, w.cost, w.enqueued_at, w.deadline, w.run_after
FROM batchq.jobs w WHERE w.state <> 'running'
UNION ALL
SELECT r.queue, r.tenant, r.state, r.cost, r.enqueued_at, r.deadline, r.run_after
FROM batchq.jobs r WHERE r.state = 'running';
CREATE OR REPLACE VIEW batchq.backlog AS
SELECT j.queue,
       j.tenant,
       count(*) FILTER (WHERE j.state = 'queued')                     AS queued_jobs,
       coalesce(sum(j.cost) FILTER (WHERE j.state = 'queued'), 0)::bigint AS queued_tokens,
       min(j.enqueued_at) FILTER (WHERE j.state = 'queued')           AS oldest_queued_at,
       now() - min(j.enqueued_at) FILTER (WHERE j.state = 'queued')   AS oldest_queued_age,
       count(*) FILTER (WHERE j.state = 'running')                    AS running_jobs,
       count(*) FILTER (WHERE j.state = 'retrying')                   AS retrying_jobs,
       min(j.deadline) FILTER (WHERE j.state <> 'running')            AS nearest_deadline,
       count(*) FILTER (WHERE j.state = 'scheduled')                  AS scheduled_jobs,
       min(j.run_after) FILTER (WHERE j.state = 'scheduled')          AS next_run_at
FROM batchq.unfinished j
GROUP BY j.queue, j.tenant;

-- A recurring schedule: each tick of its cron expression, in its time zone,
-- enqueues one job. Workers' maintenance computes the ticks (the cron
-- expression is read by the Go client, never by SQL) and keeps next_run_at,
-- the next tick not yet enqueued.
CREATE TABLE batchq.schedules (
    name         text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    queue        text NOT NULL REFERENCES batchq.queues (name) ON UPDATE CASCADE ON DELETE CASCADE, -- as queue_tenants
    tenant       text NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 256),
    kind         text NOT NULL DEFAULT 'default' CHECK (octet_length(kind) BETWEEN 1 AND 256),
    cron         text NOT NULL CHECK (octet_length(cron) BETWEEN 1 AND 256),
    timezone     text NOT NULL DEFAULT 'UTC' CHECK (octet_length(timezone) BETWEEN 1 AND 256),
    cost         bigint NOT NULL CHECK (cost BETWEEN 1 AND 1000000000),
    ttl          interval CHECK (ttl > interval '0'),
    max_attempts integer NOT NULL DEFAULT 0 CHECK (max_attempts BETWEEN 0 AND 1000),
    payload      jsonb NOT NULL DEFAULT '{}',
    -- What a pass does with ticks that passed while no maintenance ran:
    -- 'skip' enqueues none of them; 'one' enqueues one job, for the latest.
    missed       text NOT NULL DEFAULT 'one' CHECK (missed IN ('skip', 'one')),
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  bigint,
    last_error   text, -- why the last tick enqueued nothing (the tenant was full, say)
    paused_at    timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
-- Maintenance finds a queue's due schedules by this index.
CREATE INDEX schedules_due ON batchq.schedules (queue, next_run_at) WHERE paused_at IS NULL;

-- Functions whose arguments change: db/functions creates them anew.
-- enqueue and insert_jobs take the jobs' run-at times (enqueue's is optional,
-- so its callers need not change), enqueue_job a run_at and a delay, and
-- requeue the time it promotes as of (optional too). IF EXISTS: a database
-- migrated from empty gets them from db/functions only after the last
-- migration.
DROP FUNCTION IF EXISTS batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[]);
DROP FUNCTION IF EXISTS batchq.requeue(text, integer);
DROP FUNCTION IF EXISTS batchq.insert_jobs(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[]);
DROP FUNCTION IF EXISTS batchq.enqueue_error(text, text[], text[], bigint[], timestamptz[], interval[], integer[], jsonb[],
                                   text[]);
DROP FUNCTION IF EXISTS batchq.enqueue_job(text, text, bigint, jsonb, text, timestamptz, interval, integer, text);

-- +goose Down

-- Scheduled jobs wait as retrying ones, which the functions of the version
-- below move to their queue at the same time (run_after).
UPDATE batchq.jobs SET state = 'retrying' WHERE state = 'scheduled';
DROP TABLE batchq.schedules;
DROP VIEW batchq.backlog;
DROP VIEW batchq.unfinished;
CREATE VIEW batchq.unfinished AS
SELECT w.queue, w.tenant, w.state, w.cost, w.enqueued_at, w.deadline
FROM batchq.jobs w WHERE w.state <> 'running'
UNION ALL
SELECT r.queue, r.tenant, r.state, r.cost, r.enqueued_at, r.deadline
FROM batchq.jobs r WHERE r.state = 'running';
COMMENT ON VIEW batchq.unfinished IS 'The unfinished jobs, read so that a condition on the queue uses an index.';
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
DROP INDEX batchq.jobs_scheduled_tenant;
ALTER TABLE batchq.tenant_ring DROP COLUMN scheduled;
DROP INDEX batchq.jobs_due;
