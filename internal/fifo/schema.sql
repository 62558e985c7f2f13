-- The baselines batchq is measured against. They live in their own schema,
-- created by the benchmarks, never by migrations.
--
-- jobs and outcomes: the plain FIFO SKIP LOCKED queue an application would
-- otherwise write for the same work, storing what batchq stores. A job row
-- holds what the design's data model asks of every job (queue, tenant, kind,
-- cost, deadline, payload, state, attempts, retry time, lease token and
-- expiry, worker, timestamps); the indexes are batchq's own less the ones that
-- serve fairness (claims by id instead of by DRR key, no per-tenant queue);
-- an outcome row is batchq's audit row, with batchq's indexes. Against it,
-- what the fair queue costs more is what fairness costs: its keys, the ring,
-- the claim's bookkeeping. A test keeps both tables in step with batchq's.
--
-- lean_jobs and lean_outcomes: the narrowest FIFO queue that still records
-- an outcome per job, without deadlines, kinds, lease tokens or an audit
-- trail worth the name. Against it, the gap is also what batchq's rows cost.
CREATE SCHEMA IF NOT EXISTS batchq_fifo;

CREATE TABLE IF NOT EXISTS batchq_fifo.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text   NOT NULL,
    tenant           text   NOT NULL,
    kind             text   NOT NULL,
    cost             bigint NOT NULL CHECK (cost > 0),
    deadline         timestamptz NOT NULL,
    payload          jsonb  NOT NULL,
    unique_key       text,
    state            text   NOT NULL DEFAULT 'queued',
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL CHECK (max_attempts > 0),
    run_after        timestamptz,
    lease_token      uuid,
    lease_expires_at timestamptz,
    worker           text,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    first_claimed_at timestamptz,
    claimed_at       timestamptz,
    last_error       text
) WITH (fillfactor = 90);

CREATE INDEX IF NOT EXISTS jobs_claim ON batchq_fifo.jobs (queue, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS jobs_lease ON batchq_fifo.jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS jobs_retry ON batchq_fifo.jobs (queue, run_after) WHERE state = 'retrying';
CREATE INDEX IF NOT EXISTS jobs_deadline ON batchq_fifo.jobs (queue, deadline) WHERE state <> 'running';
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique ON batchq_fifo.jobs (queue, unique_key) WHERE unique_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS batchq_fifo.outcomes (
    job_id           bigint PRIMARY KEY,
    queue            text   NOT NULL,
    tenant           text   NOT NULL,
    kind             text   NOT NULL,
    outcome          text   NOT NULL,
    estimated_cost   bigint NOT NULL,
    actual_cost      bigint,
    attempts         integer NOT NULL,
    max_attempts     integer NOT NULL,
    deadline         timestamptz NOT NULL,
    enqueued_at      timestamptz NOT NULL,
    first_claimed_at timestamptz,
    finished_at      timestamptz NOT NULL DEFAULT now(),
    worker           text,
    error            text,
    result           jsonb,
    payload          jsonb,
    unique_key       text
);

CREATE INDEX IF NOT EXISTS outcomes_finished ON batchq_fifo.outcomes USING brin (finished_at)
    WITH (pages_per_range = 32, autosummarize = on);
CREATE INDEX IF NOT EXISTS outcomes_unique ON batchq_fifo.outcomes (queue, unique_key, finished_at)
    WHERE unique_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS outcomes_tenant ON batchq_fifo.outcomes (tenant, finished_at);

CREATE TABLE IF NOT EXISTS batchq_fifo.lean_jobs (
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

CREATE INDEX IF NOT EXISTS lean_jobs_fifo ON batchq_fifo.lean_jobs (id) WHERE state = 'queued';

CREATE TABLE IF NOT EXISTS batchq_fifo.lean_outcomes (
    job_id      bigint PRIMARY KEY,
    tenant      text   NOT NULL,
    cost        bigint NOT NULL,
    attempts    integer NOT NULL,
    enqueued_at timestamptz NOT NULL,
    claimed_at  timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now()
);
