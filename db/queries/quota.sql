-- name: EnsureQuota :exec
INSERT INTO batchq.quota (key) VALUES (@key) ON CONFLICT (key) DO NOTHING;

-- name: LockQuota :one
SELECT q.state FROM batchq.quota q WHERE q.key = @key FOR UPDATE;

-- name: SaveQuota :exec
UPDATE batchq.quota
SET state              = @state,
    requests_limit     = sqlc.narg(requests_limit),
    requests_remaining = sqlc.narg(requests_remaining),
    requests_reset_at  = sqlc.narg(requests_reset_at),
    tokens_limit       = sqlc.narg(tokens_limit),
    tokens_remaining   = sqlc.narg(tokens_remaining),
    tokens_reset_at    = sqlc.narg(tokens_reset_at),
    paused_until       = sqlc.narg(paused_until),
    observed_at        = sqlc.narg(observed_at),
    updated_at         = now()
WHERE key = @key;
