-- +goose Up

-- batchq.cancel also says whether a running job had been asked to stop
-- already (asked_already), where it said only that it runs and will stop:
-- db/functions/finish.sql creates it anew.
DROP FUNCTION IF EXISTS batchq.cancel(bigint, text);

-- +goose Down

-- The function files of the version below create it with its old result
-- (migrations.DownTo forgets that they were applied); one of another result
-- left in place would stop them.
DROP FUNCTION IF EXISTS batchq.cancel(bigint, text);
