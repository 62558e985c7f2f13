-- +goose Up

-- The 429s each quota key received, one row per pause a 429 set: save_quota
-- adds one whenever a save moves the key's paused_until later (only a 429
-- does), and keeps a day of them. Operators read how often the provider
-- refused in the last hour (the console's overview).
CREATE TABLE batchq.quota_pauses (
    key          text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    paused_until timestamptz NOT NULL
);
CREATE INDEX quota_pauses_key_at ON batchq.quota_pauses (key, at);

-- +goose Down
DROP TABLE batchq.quota_pauses;
