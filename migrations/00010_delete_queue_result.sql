-- +goose Up

-- batchq.delete_queue returns how many schedules it deleted with the queue,
-- where it returned nothing: db/functions/operate.sql creates it anew.
DROP FUNCTION IF EXISTS batchq.delete_queue(text);

-- +goose Down

-- The function files of the version below create it with its old result
-- (migrations.DownTo forgets that they were applied); one of another result
-- left in place would stop them.
DROP FUNCTION IF EXISTS batchq.delete_queue(text);
