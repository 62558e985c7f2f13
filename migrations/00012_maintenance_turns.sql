-- +goose Up

-- When the fleet last began a maintenance pass of each queue, so that the
-- worker pools of a queue take turns (batchq.maintenance_turn) rather than
-- each run a pass every interval. Unlogged: its rows never need to outlive
-- a crash, which at worst lets the next pass run at once.
CREATE UNLOGGED TABLE batchq.maintenance_turns (
    queue     text PRIMARY KEY,
    passed_at timestamptz NOT NULL
);

-- +goose Down

-- The function files of the version below do not create
-- batchq.maintenance_turn (migrations.DownTo forgets that they were applied).
DROP FUNCTION IF EXISTS batchq.maintenance_turn(text, bigint);
DROP TABLE batchq.maintenance_turns;
