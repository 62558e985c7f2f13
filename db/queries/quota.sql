-- name: GetQuota :one
SELECT q.state, q.version FROM batchq.quota q WHERE q.key = @key;

-- name: InsertQuota :execrows
-- The first save of a key; 0 rows: another process saved it first.
INSERT INTO batchq.quota (key, state, requests_limit, requests_remaining, requests_reset_at,
                          tokens_limit, tokens_remaining, tokens_reset_at, paused_until, observed_at)
VALUES (@key, @state, sqlc.narg(requests_limit), sqlc.narg(requests_remaining), sqlc.narg(requests_reset_at),
        sqlc.narg(tokens_limit), sqlc.narg(tokens_remaining), sqlc.narg(tokens_reset_at),
        sqlc.narg(paused_until), sqlc.narg(observed_at))
ON CONFLICT (key) DO NOTHING;

-- name: SaveQuota :execrows
-- Saves a key's state if nobody saved it since it was read at @version;
-- 0 rows: someone did, so decide again on what they saved.
UPDATE batchq.quota
SET state              = @state,
    version            = version + 1,
    requests_limit     = sqlc.narg(requests_limit),
    requests_remaining = sqlc.narg(requests_remaining),
    requests_reset_at  = sqlc.narg(requests_reset_at),
    tokens_limit       = sqlc.narg(tokens_limit),
    tokens_remaining   = sqlc.narg(tokens_remaining),
    tokens_reset_at    = sqlc.narg(tokens_reset_at),
    paused_until       = sqlc.narg(paused_until),
    observed_at        = sqlc.narg(observed_at),
    updated_at         = now()
WHERE key = @key AND version = @version;

-- name: DatabaseClock :one
-- The database's clock, which the shared quota rows keep their times on.
SELECT clock_timestamp()::timestamptz AS now;
