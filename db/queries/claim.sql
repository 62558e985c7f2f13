-- name: Claim :many
-- Claims up to @max_jobs queued jobs in DRR order within @budget; see
-- batchq.claim in db/functions/claim.sql. The statement is its own
-- transaction, and it commits without waiting for the WAL flush
-- (synchronous_commit off, for this transaction only): a claim that a server
-- crash undoes leaves its jobs queued, as a worker's crash would after its
-- lease, so at-least-once holds; the completion that records a job's outcome
-- commits synchronously and flushes the claim before it (docs/guarantees.md).
SELECT c.* FROM batchq.claim(@queue::text, @max_jobs::integer, @worker::text, @budget::bigint) c
WHERE (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL;

-- name: NextCost :one
-- The cost of the job the next claim would start with, if any is queued.
SELECT j.cost FROM batchq.jobs j
WHERE j.queue = @queue AND j.state = 'queued' AND j.deadline > now()
ORDER BY j.round, j.pos, j.seq
LIMIT 1;
