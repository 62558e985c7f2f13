-- The baselines batchq is measured against. They live in their own schema,
-- created by the benchmarks, never by migrations.
--
-- jobs and outcomes: the plain FIFO SKIP LOCKED queue an application would
-- otherwise write for the same work, storing what batchq stores. A job row
-- holds what the design's data model asks of every job (queue, tenant, kind,
-- cost, deadline, payload, state, attempts, retry time, lease token and
-- expiry, worker, timestamps); the indexes are batchq's own less the ones that
-- serve fairness (claims by id instead of by DRR key, no per-tenant queue);
-- an outcome row is batchq's audit row, with batchq's indexes. Its claim
-- takes jobs in arrival order, (enqueued_at, id), by an index of its own, as
-- batchq's takes them by theirs (claimed by id alone, the primary key would
-- serve the order too, and the planner, which prices the two alike, chose it
-- and stepped over every running row). Claim and completion are functions
-- with batchq's settings, so their plans are kept per session as batchq's
-- are. Against it, what the fair queue costs more is what fairness costs: its
-- keys, the ring, the claim's bookkeeping. A test keeps both tables in step
-- with batchq's.
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
    state            batchq.job_state NOT NULL DEFAULT 'queued',
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL CHECK (max_attempts > 0),
    run_after        timestamptz,
    lease_token      uuid,
    lease_expires_at timestamptz,
    worker           text,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    first_claimed_at timestamptz,
    claimed_at       timestamptz,
    last_error       text,
    cancel_requested_at timestamptz
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

CREATE INDEX IF NOT EXISTS jobs_claim ON batchq_fifo.jobs (queue, enqueued_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS jobs_lease ON batchq_fifo.jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS jobs_retry ON batchq_fifo.jobs (queue, run_after) WHERE state = 'retrying';
CREATE INDEX IF NOT EXISTS jobs_due ON batchq_fifo.jobs (queue, run_after) WHERE state IN ('retrying', 'scheduled');
CREATE INDEX IF NOT EXISTS jobs_scheduled_tenant ON batchq_fifo.jobs (queue, tenant) WHERE state = 'scheduled';
CREATE INDEX IF NOT EXISTS jobs_deadline ON batchq_fifo.jobs (queue, deadline) WHERE state <> 'running';
CREATE UNIQUE INDEX IF NOT EXISTS jobs_unique ON batchq_fifo.jobs (queue, unique_key) WHERE unique_key IS NOT NULL;

-- batchq's outcome row, with its defaults, constraints, indexes and their
-- options.
CREATE TABLE IF NOT EXISTS batchq_fifo.outcomes (LIKE batchq.outcomes INCLUDING ALL);

-- claim claims up to p_max_jobs queued jobs of a queue in arrival order for
-- p_worker, under one lease token, and returns what a worker needs.
CREATE OR REPLACE FUNCTION batchq_fifo.claim(p_queue text, p_max_jobs integer, p_worker text)
RETURNS TABLE (id bigint, queue text, tenant text, kind text, cost bigint, deadline timestamptz, payload jsonb,
               attempt integer, max_attempts integer, lease_token uuid, lease_expires_at timestamptz,
               enqueued_at timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    UPDATE batchq_fifo.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        lease_token = (SELECT gen_random_uuid()),
        lease_expires_at = now() + interval '5 minutes',
        worker = p_worker,
        claimed_at = now(),
        first_claimed_at = coalesce(j.first_claimed_at, now())
    WHERE j.id = ANY (ARRAY(
        SELECT f.id FROM batchq_fifo.jobs f
        WHERE f.queue = p_queue AND f.state = 'queued'
        ORDER BY f.enqueued_at, f.id
        LIMIT p_max_jobs
        FOR UPDATE SKIP LOCKED))
    RETURNING j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.enqueued_at;
END
$$;

-- complete finishes each listed (id, token) whose token still holds the job's
-- lease: the job goes, its outcome row is written, in one statement. It
-- returns how many it finished.
CREATE OR REPLACE FUNCTION batchq_fifo.complete(p_ids bigint[], p_tokens uuid[]) RETURNS bigint
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH done AS (
        DELETE FROM batchq_fifo.jobs j
        WHERE j.id = ANY (p_ids)
          AND ((j.id, j.lease_token) IN (SELECT i.id, i.token FROM unnest(p_ids, p_tokens) AS i (id, token))) IS TRUE
        RETURNING j.*
    )
    INSERT INTO batchq_fifo.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts, max_attempts,
                                      deadline, enqueued_at, first_claimed_at, worker, unique_key)
    SELECT d.id, d.queue, d.tenant, d.kind, 'succeeded', d.cost, d.attempt, d.max_attempts,
           d.deadline, d.enqueued_at, d.first_claimed_at, d.worker, d.unique_key
    FROM done d;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

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
