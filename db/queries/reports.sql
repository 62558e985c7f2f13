-- name: Backlog :many
-- What each tenant has waiting and running, per queue, and whether the
-- queue is paused; all queues when @queue is NULL.
SELECT b.queue, b.tenant, b.queued_jobs, b.queued_tokens, b.oldest_queued_at, b.oldest_queued_age, b.running_jobs,
       b.retrying_jobs, b.nearest_deadline, (q.paused_at IS NOT NULL)::boolean AS paused, b.scheduled_jobs,
       b.next_run_at
FROM batchq.backlog b JOIN batchq.queues q ON q.name = b.queue
WHERE sqlc.narg(queue)::text IS NULL OR b.queue = sqlc.narg(queue)
ORDER BY b.queue, b.tenant;

-- name: TenantUsage :many
-- Usage per queue and tenant of the jobs that finished in [@since, @until);
-- all queues when @queue is NULL.
SELECT * FROM batchq.tenant_usage(@since::timestamptz, @until::timestamptz) u
WHERE sqlc.narg(queue)::text IS NULL OR u.queue = sqlc.narg(queue)
ORDER BY u.queue, u.tenant;

-- name: Audit :many
-- The newest outcomes that finished in [@since, @until), optionally of one
-- queue, tenant or outcome, newest first.
SELECT * FROM batchq.audit a
WHERE a.finished_at >= @since::timestamptz AND a.finished_at < @until::timestamptz
  AND (sqlc.narg(queue)::text IS NULL OR a.queue = sqlc.narg(queue))
  AND (sqlc.narg(tenant)::text IS NULL OR a.tenant = sqlc.narg(tenant))
  AND (sqlc.narg(outcome)::text IS NULL OR a.outcome::text = sqlc.narg(outcome))
ORDER BY a.finished_at DESC, a.job_id DESC
LIMIT @max_rows;

-- name: QuotaReport :many
-- The fleet's shared quota state, one row per quota key.
SELECT q.key, q.requests_limit, q.requests_remaining, q.requests_reset_at,
       q.tokens_limit, q.tokens_remaining, q.tokens_reset_at,
       q.paused_until, q.observed_at, q.updated_at
FROM batchq.quota q
ORDER BY q.key;

-- name: PruneBound :one
-- The highest job id among outcomes finished before @before: PruneOutcomes
-- walks job ids up to it, never past it. The subquery keeps the planner from
-- answering max() by walking the primary key down from the newest outcome
-- (seconds at ten million rows); it reads the old ranges of the BRIN index.
SELECT coalesce(max(s.job_id), 0)::bigint AS last_id
FROM (SELECT o.job_id FROM batchq.outcomes o WHERE o.finished_at < @before::timestamptz OFFSET 0) s;

-- name: PruneOutcomes :one
-- Deletes up to @max_rows outcomes finished before @before whose job id is in
-- (@after, @last], in id order, and returns how many it found and the last id
-- it looked at: the next call starts after it. Walking the primary key
-- forward, batch by batch, never rescans the rows earlier batches deleted.
-- An outcome whose unique key still deduplicates enqueues (it finished
-- within its queue's unique_for, as enqueue checks it) is kept, so pruning
-- never lets a retried import pay twice.
WITH doomed AS (
    SELECT o.job_id FROM batchq.outcomes o
    WHERE o.job_id > @after::bigint AND o.job_id <= @last::bigint AND o.finished_at < @before::timestamptz
      AND NOT EXISTS (SELECT 1 FROM batchq.queues q
                      WHERE o.unique_key IS NOT NULL AND q.name = o.queue
                        AND o.finished_at > now() - q.unique_for)
    ORDER BY o.job_id
    LIMIT @max_rows
), gone AS (
    DELETE FROM batchq.outcomes o
    WHERE o.job_id = ANY (ARRAY(SELECT d.job_id FROM doomed d))
    RETURNING o.job_id, (o.ctid::text::point)[0]::bigint AS block
)
SELECT (SELECT count(*) FROM doomed) AS found,
       (SELECT coalesce(max(d.job_id), 0) FROM doomed d)::bigint AS last_id,
       (SELECT count(*) FROM gone) AS deleted,
       ARRAY(SELECT DISTINCT g.block FROM gone g)::bigint[] AS blocks;

-- name: ResetOutcomeRanges :exec
-- Forgets the finished_at summaries of the BRIN ranges holding @blocks, whose
-- outcomes a prune deleted. A summary only ever widens, so without this a
-- range whose pages new outcomes reuse would span from its oldest pruned
-- outcome to now, and every time window since would read it. The next VACUUM
-- summarizes them again, after it removed the deleted rows, from what is
-- left (not a summary made now: any transaction still running anywhere in
-- the cluster keeps the deleted rows in it). Until then a window reads these
-- ranges whole, as it reads the pages it is about.
SELECT count(*) FROM unnest(@blocks::bigint[]) AS b (block),
    LATERAL brin_desummarize_range('batchq.outcomes_finished'::regclass, b.block);
