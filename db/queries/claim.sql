-- name: Claim :many
-- Claims up to @max_jobs queued jobs in DRR order within @budget; see
-- batchq.claim in db/functions/claim.sql.
SELECT * FROM batchq.claim(@queue::text, @max_jobs::integer, @worker::text, @budget::bigint);

-- name: NextCost :one
-- The cost of the job the next claim would start with, if any is queued.
SELECT j.cost FROM batchq.jobs j
WHERE j.queue = @queue AND j.state = 'queued' AND j.deadline > now()
ORDER BY j.round, j.pos, j.seq
LIMIT 1;
