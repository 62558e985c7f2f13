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

-- The row types of the console's backlog functions (db/functions/reports.sql),
-- as tenant_usage_rows is tenant_usage's.
CREATE VIEW batchq.console_backlog_rows AS
SELECT NULL::text        AS queue,
       NULL::text        AS tenant,
       NULL::bigint      AS queued_tokens,
       NULL::bigint      AS queued_span,
       NULL::timestamptz AS oldest_queued_at,
       NULL::bigint      AS running_jobs,
       NULL::bigint      AS scheduled_jobs
WHERE false;

CREATE VIEW batchq.console_queued_rows AS
SELECT NULL::text   AS tenant,
       NULL::bigint AS queued_jobs
WHERE false;

-- +goose Down
DROP FUNCTION IF EXISTS batchq.console_backlog(text, text);
DROP FUNCTION IF EXISTS batchq.console_queued(text, text[], bigint);
DROP VIEW batchq.console_queued_rows;
DROP VIEW batchq.console_backlog_rows;
DROP TABLE batchq.quota_pauses;
