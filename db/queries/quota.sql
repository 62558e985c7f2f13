-- name: GetQuota :one
SELECT q.state, q.version FROM batchq.quota q WHERE q.key = @key;

-- name: SaveQuota :one
-- Saves a key's state: its first save when @version is NULL, else only if
-- nobody saved it since it was read at @version. false: someone saved first,
-- so decide again on what they saved. See batchq.save_quota in
-- db/functions/quota.sql, which checks the state and fills the columns
-- operators read from it.
SELECT batchq.save_quota(@key::text, sqlc.narg(version)::bigint, @state::jsonb)::boolean AS saved;

-- name: DatabaseClock :one
-- The database's clock, which the shared quota rows keep their times on.
SELECT clock_timestamp()::timestamptz AS now;
