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

-- The second baseline: batchq's own job and outcome rows, claimed in the fair
-- order their keys already hold by one plain SKIP LOCKED statement, without
-- the claim's budget, expiry and ring cursor (batchq.claim), and completed by
-- batchq's own completion. Beside the fair queue it splits what a fair job
-- costs beyond a FIFO one into what its rows cost (this against the FIFO
-- above) and what the fair claim's bookkeeping costs (the fair queue against
-- this). It returns what batchq.claim returns, so clients decode the same
-- (unsorted: ordering the rows is the fair client's bookkeeping). It
-- works in the batchq schema, which must be migrated. Its plan is kept per
-- session, as batchq.claim's is.
CREATE OR REPLACE FUNCTION batchq_fifo.bare_claim(p_queue text, p_max_jobs integer, p_worker text)
RETURNS TABLE (id bigint, queue text, tenant text, kind text, cost bigint, deadline timestamptz, payload jsonb,
               attempt integer, max_attempts integer, lease_token uuid, lease_expires_at timestamptz,
               enqueued_at timestamptz, round bigint, pos bigint, seq bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    UPDATE batchq.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        lease_token = (SELECT gen_random_uuid()),
        lease_expires_at = now() + (SELECT q.lease FROM batchq.queues q WHERE q.name = p_queue),
        worker = p_worker,
        claimed_at = now(),
        first_claimed_at = coalesce(j.first_claimed_at, now())
    WHERE j.id = ANY (ARRAY(
        SELECT c.id FROM batchq.jobs c
        WHERE c.queue = p_queue AND c.state = 'queued'
        ORDER BY c.round, c.pos, c.seq
        LIMIT p_max_jobs
        FOR UPDATE SKIP LOCKED))
    RETURNING j.id, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.enqueued_at, j.round, j.pos, j.seq;
END
$$;
