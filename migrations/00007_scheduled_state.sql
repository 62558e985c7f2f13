-- +goose Up

-- A job enqueued to run later waits in 'scheduled' until its run-at, as a
-- retried job waits in 'retrying' for its backoff; maintenance moves both to
-- 'queued' by one statement (batchq.requeue). A migration of its own: a new
-- enum value cannot be used in the transaction that adds it, and 00008's
-- index and view use it.
ALTER TYPE batchq.job_state ADD VALUE IF NOT EXISTS 'scheduled';

-- +goose Down

-- PostgreSQL cannot drop a value from an enum, so the type is made anew
-- without it (00008's Down left no scheduled job), and with it what depends
-- on the type: the column's views and partial indexes, as 00002 and 00004
-- made them, and batchq.finish_jobs, whose result names the type. The next
-- migrate up creates finish_jobs again with the other function files
-- (migrations.DownTo forgets that they were applied); going on down to
-- 0.1.0, 00006's Down restores release 0.1.0's functions.
DROP VIEW batchq.backlog;
DROP VIEW batchq.unfinished;
DROP FUNCTION IF EXISTS batchq.finish_jobs(text, batchq.job_outcome, bigint[], uuid[], text[], jsonb[], bigint[]);
DROP INDEX batchq.jobs_claim, batchq.jobs_tenant_queue, batchq.jobs_lease, batchq.jobs_retry, batchq.jobs_deadline;
ALTER TYPE batchq.job_state RENAME TO job_state_with_scheduled;
CREATE TYPE batchq.job_state AS ENUM ('queued', 'running', 'retrying');
ALTER TABLE batchq.jobs ALTER COLUMN state TYPE batchq.job_state USING state::text::batchq.job_state;
DROP TYPE batchq.job_state_with_scheduled;

CREATE INDEX jobs_claim ON batchq.jobs (queue, round, pos, seq) WHERE state = 'queued';
CREATE INDEX jobs_tenant_queue ON batchq.jobs (pos, seq) WHERE state = 'queued';
CREATE INDEX jobs_lease ON batchq.jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_retry ON batchq.jobs (queue, run_after) WHERE state = 'retrying';
CREATE INDEX jobs_deadline ON batchq.jobs (queue, deadline) WHERE state <> 'running';

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
