-- The baseline batchq is measured against: the plain FIFO SKIP LOCKED queue
-- an application would otherwise write, recording outcomes the same way.
-- It lives in its own schema, created by the benchmarks, never by migrations.
CREATE SCHEMA IF NOT EXISTS batchq_fifo;

CREATE TABLE IF NOT EXISTS batchq_fifo.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant           text   NOT NULL,
    cost             bigint NOT NULL,
    payload          jsonb  NOT NULL,
    state            text   NOT NULL DEFAULT 'queued',
    attempt          integer NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz
);

CREATE INDEX IF NOT EXISTS jobs_fifo ON batchq_fifo.jobs (id) WHERE state = 'queued';

CREATE TABLE IF NOT EXISTS batchq_fifo.outcomes (
    job_id      bigint PRIMARY KEY,
    tenant      text   NOT NULL,
    cost        bigint NOT NULL,
    attempts    integer NOT NULL,
    enqueued_at timestamptz NOT NULL,
    claimed_at  timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now()
);
