-- name: DueSchedules :many
-- Locks the due schedules of a queue for this transaction. See
-- batchq.due_schedules in db/functions/schedules.sql.
SELECT d.name::text AS name, d.cron::text AS cron, d.timezone::text AS timezone, d.missed::text AS missed,
       d.next_run_at::timestamptz AS next_run_at, d.at::timestamptz AS at
FROM batchq.due_schedules(@queue::text, sqlc.narg(at)::timestamptz, @max_schedules::integer) d;

-- name: FireSchedule :one
-- The job the tick enqueued, 0 for none. See batchq.fire_schedule in
-- db/functions/schedules.sql.
SELECT coalesce(batchq.fire_schedule(@name::text, @due::timestamptz, @tick::timestamptz, @enqueue::boolean,
                                     @next::timestamptz), 0)::bigint AS job_id;

-- name: ScheduleError :one
-- Records why a due schedule's tick waits. See batchq.schedule_error in
-- db/functions/schedules.sql.
SELECT batchq.schedule_error(@name::text, @due::timestamptz, @error::text)::boolean AS written;

-- name: CreateSchedule :exec
INSERT INTO batchq.schedules (name, queue, tenant, kind, cron, timezone, cost, ttl, max_attempts, payload, missed,
                              next_run_at, paused_at)
VALUES (@name, @queue, @tenant, @kind, @cron, @timezone, @cost, sqlc.narg(ttl)::interval, @max_attempts, @payload,
        @missed, @next_run_at, sqlc.narg(paused_at)::timestamptz);

-- name: UpdateSchedule :execrows
-- A new expression or time zone clears last_error: what it said (a tick that
-- could not be read, say) was of the old one.
UPDATE batchq.schedules
SET last_error = CASE WHEN (cron, timezone) IS DISTINCT FROM (@cron::text, @timezone::text) THEN NULL ELSE last_error END,
    queue = @queue, tenant = @tenant, kind = @kind, cron = @cron, timezone = @timezone, cost = @cost,
    ttl = sqlc.narg(ttl)::interval, max_attempts = @max_attempts, payload = @payload, missed = @missed,
    next_run_at = @next_run_at, paused_at = sqlc.narg(paused_at)::timestamptz, updated_at = now()
WHERE name = @name;

-- name: GetSchedule :one
SELECT * FROM batchq.schedules WHERE name = @name;

-- name: GetScheduleForUpdate :one
SELECT * FROM batchq.schedules WHERE name = @name FOR UPDATE;

-- name: ListSchedules :many
SELECT * FROM batchq.schedules
WHERE sqlc.narg(queue)::text IS NULL OR queue = sqlc.narg(queue)
ORDER BY name;

-- name: DeleteSchedule :execrows
DELETE FROM batchq.schedules WHERE name = @name;
