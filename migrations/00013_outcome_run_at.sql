-- +goose Up

-- A job finished while it was still scheduled (cancelled, or expired, before
-- its run-at came) keeps its run-at in its outcome: its time to live counts
-- from there, and `batchq jobs retry` gives the copy the same one, not one
-- that adds the wait it never made. NULL for every other outcome.
ALTER TABLE batchq.outcomes ADD COLUMN run_at timestamptz;

-- +goose Down

ALTER TABLE batchq.outcomes DROP COLUMN run_at;
