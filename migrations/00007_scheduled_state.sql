-- +goose Up

-- A job enqueued to run later waits in 'scheduled' until its run-at, as a
-- retried job waits in 'retrying' for its backoff; maintenance moves both to
-- 'queued' by one statement (batchq.requeue). A migration of its own: a new
-- enum value cannot be used in the transaction that adds it, and 00008's
-- index and view use it.
ALTER TYPE batchq.job_state ADD VALUE IF NOT EXISTS 'scheduled';

-- +goose Down

-- PostgreSQL cannot drop a value from an enum; the value stays, unused
-- (00008's Down turned every scheduled job into a retrying one).
SELECT 1;
