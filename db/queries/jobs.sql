-- name: GetJob :one
SELECT j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.unique_key,
       j.state::text AS state, j.attempt, j.max_attempts, j.run_after, j.lease_expires_at, j.worker,
       j.enqueued_at, j.first_claimed_at, j.last_error, j.cancel_requested_at
FROM batchq.jobs j WHERE j.id = @id;

-- name: GetOutcome :one
SELECT * FROM batchq.outcomes o WHERE o.job_id = @id;

-- name: RetryNow :one
-- Makes a retrying or scheduled job due now.
UPDATE batchq.jobs SET run_after = now() WHERE id = @id AND state IN ('retrying', 'scheduled') RETURNING id;

-- name: QueueHasJobs :one
-- Whether a queue holds any unfinished job: how a draining worker knows it
-- is done, asked every poll while other workers finish the last jobs. Each
-- probe reads the index of its state, not the table: queued jobs by the
-- claim index, retrying and scheduled ones by the due index, running ones
-- by the lease index. Those are the indexes claims, requeues and rescues
-- read, so their entries of finished jobs are marked dead as they go. The
-- deadline index, which holds every waiting job too, is read by nothing
-- during a drain: after one of 200,000 jobs its first probe visited every
-- finished row (120 ms a poll, on a busy server). The lease index does not
-- hold the queue, so a plan made when many jobs ran would read the whole
-- table instead (30 ms a poll after 50,000 jobs). Ordered by its index's
-- columns, each probe stays on it; as an EXISTS it would not, as
-- PostgreSQL drops the order of an EXISTS.
SELECT (SELECT true FROM batchq.jobs j WHERE j.queue = @queue AND j.state = 'queued'
        ORDER BY j.round, j.pos, j.seq LIMIT 1) IS NOT NULL
    OR (SELECT true FROM batchq.jobs j WHERE j.queue = @queue AND j.state IN ('retrying', 'scheduled')
        ORDER BY j.run_after LIMIT 1) IS NOT NULL
    OR (SELECT true FROM batchq.jobs j WHERE j.queue = @queue AND j.state = 'running'
        ORDER BY j.lease_expires_at LIMIT 1) IS NOT NULL AS has_jobs;
