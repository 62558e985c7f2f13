-- name: PauseQueue :one
-- Stops a queue's claims; false when it was paused already. See
-- db/functions/operate.sql.
SELECT batchq.pause_queue(@queue::text)::boolean AS paused;

-- name: ResumeQueue :one
-- Lets a paused queue's workers claim again; false when it was not paused.
SELECT batchq.resume_queue(@queue::text)::boolean AS resumed;

-- name: DeleteQueue :one
-- Deletes a queue that holds no unfinished job, and says how many schedules
-- went with it.
SELECT batchq.delete_queue(@queue::text)::bigint AS schedules;

-- name: MatchingJobs :many
-- The unfinished jobs of a queue a bulk cancel with this filter would
-- touch, by state.
SELECT m.state::text AS state, m.jobs::bigint AS jobs, m.tokens::bigint AS tokens
FROM batchq.matching_jobs(@queue::text, sqlc.narg(tenant)::text, sqlc.narg(kind)::text,
                          sqlc.narg(enqueued_before)::timestamptz, sqlc.narg(enqueued_after)::timestamptz) m;

-- name: CancelJobs :one
-- Cancels up to @max_jobs matching jobs with ids above @after_id, in one
-- transaction; last_id is where the next call starts, 0 at the end.
SELECT c.cancelled::integer AS cancelled, c.stopping::integer AS stopping, c.last_id::bigint AS last_id
FROM batchq.cancel_jobs(@queue::text, sqlc.narg(tenant)::text, sqlc.narg(kind)::text,
                        sqlc.narg(enqueued_before)::timestamptz, sqlc.narg(enqueued_after)::timestamptz,
                        @after_id::bigint, @max_jobs::integer, @reason::text) c;
