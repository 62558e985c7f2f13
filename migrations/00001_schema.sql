-- +goose Up
-- Every batchq object lives in its own schema, beside the application's tables.
CREATE SCHEMA IF NOT EXISTS batchq;

-- +goose Down
DROP SCHEMA IF EXISTS batchq CASCADE;
