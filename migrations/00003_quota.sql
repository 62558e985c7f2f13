-- +goose Up

-- The fleet's shared throttle state: one row per quota key (a provider and
-- model), so a hundred workers pace from one number. Each decision reads the
-- row and writes it back only if version has not moved meanwhile (else it
-- decides again), so no lock is held between the two. state is the
-- throttle's whole State; the columns beside it repeat what an operator asks
-- about (limits, what is left, resets, pauses), kept in step by every save.
CREATE TABLE batchq.quota (
    key                text PRIMARY KEY CHECK (octet_length(key) BETWEEN 1 AND 256),
    version            bigint NOT NULL DEFAULT 0,
    state              jsonb NOT NULL DEFAULT '{}',
    requests_limit     bigint,
    requests_remaining bigint,
    requests_reset_at  timestamptz,
    tokens_limit       bigint,
    tokens_remaining   bigint,
    tokens_reset_at    timestamptz,
    paused_until       timestamptz,
    observed_at        timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE batchq.quota;
