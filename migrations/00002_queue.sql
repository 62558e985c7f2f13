-- +goose Up

-- Queues carry the settings every process of a fleet schedules with.
CREATE TABLE batchq.queues (
    name           text PRIMARY KEY
                   CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    quantum        bigint   NOT NULL DEFAULT 1000 CHECK (quantum > 0),
    max_per_tenant integer  NOT NULL DEFAULT 10000 CHECK (max_per_tenant > 0),
    default_ttl    interval NOT NULL DEFAULT '24 hours' CHECK (default_ttl > '0'),
    lease          interval NOT NULL DEFAULT '5 minutes' CHECK (lease > '0'),
    max_attempts   integer  NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    unique_for     interval NOT NULL DEFAULT '0' CHECK (unique_for >= '0'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- The round of a queue's latest claim: a tenant that joins the ring starts in
-- that round, behind every tenant already in it. It has a row of its own that
-- only claims write, never waiting for it (SKIP LOCKED): a settings change
-- holds the queue's row while it re-keys the backlog and waits on job rows
-- claims hold, so a claim that also waited for the queue's row could
-- deadlock with it.
CREATE TABLE batchq.queue_cursors (
    queue text PRIMARY KEY REFERENCES batchq.queues (name) ON DELETE CASCADE,
    round bigint NOT NULL DEFAULT 0
);

-- Tenants are shared by all queues: a weight (a plan) and an optional bound
-- that overrides the queue's max_per_tenant.
CREATE TABLE batchq.tenants (
    name       text PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 256),
    weight     double precision NOT NULL DEFAULT 1
               CHECK (weight > 0 AND weight < 'Infinity'::double precision),
    max_queued integer CHECK (max_queued > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The deficit-round-robin state of one tenant in one queue. A tenant is in the
-- ring while it has queued jobs; each time it (re)joins it gets a new ring
-- position (pos, from ring_pos) and starts in the queue's cursor round with an
-- empty ledger (cum = 0). share is its grant per visit: round(quantum × weight),
-- at least 1. A job whose cumulative cost in this membership is C is served on
-- visit ceil(C / share), in round join_round + ceil(C / share) - 1, so the claim
-- order is simply (round, pos, seq), seq numbering the tenant's jobs in arrival
-- order. Only enqueuers and maintenance lock this row; claims never touch it.
-- reached is the latest round any job of the tenant was keyed in, -1 for
-- none: a tenant that rejoins the ring while the cursor is still in that
-- round was visited in it, and joins the next (see ring_join). visited is
-- the cursor's round when a re-key counted the membership's visit in it as
-- made, -1 for none: the re-based ledger no longer shows it (see rekey).
CREATE SEQUENCE batchq.ring_pos;

CREATE TABLE batchq.tenant_ring (
    queue      text   NOT NULL REFERENCES batchq.queues (name) ON DELETE CASCADE,
    tenant     text   NOT NULL,
    pos        bigint NOT NULL DEFAULT 0,
    join_round bigint NOT NULL DEFAULT 0,
    share      bigint NOT NULL DEFAULT 1 CHECK (share > 0),
    cum        bigint NOT NULL DEFAULT 0,
    enq_seq    bigint NOT NULL DEFAULT 0,
    reached    bigint NOT NULL DEFAULT -1,
    visited    bigint NOT NULL DEFAULT -1,
    PRIMARY KEY (queue, tenant)
);

CREATE TYPE batchq.job_state AS ENUM ('queued', 'running', 'retrying');

-- One row per unfinished job. queued: waiting its turn, keyed by (round, pos,
-- seq); running: claimed under a lease; retrying: waiting for run_after before
-- it rejoins its tenant's queue (after a failure, a release or a lost lease).
CREATE TABLE batchq.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text   NOT NULL, -- a queue's name: see queues_keep_jobs below
    tenant           text   NOT NULL,
    kind             text   NOT NULL,
    cost             bigint NOT NULL CHECK (cost > 0),
    deadline         timestamptz NOT NULL,
    payload          jsonb  NOT NULL,
    unique_key       text,
    state            batchq.job_state NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL CHECK (max_attempts > 0),
    round            bigint NOT NULL,
    pos              bigint NOT NULL,
    cum              bigint NOT NULL,
    seq              bigint NOT NULL,
    run_after        timestamptz,
    lease_token      uuid,
    lease_expires_at timestamptz,
    worker           text,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    first_claimed_at timestamptz,
    claimed_at       timestamptz,
    last_error       text
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

-- The claim: one range scan in DRR order.
CREATE INDEX jobs_claim ON batchq.jobs (queue, round, pos, seq) WHERE state = 'queued';
-- A tenant's queue in arrival order: its head, its length, its re-keying.
-- Every queued job of a tenant in a queue carries the tenant's current ring
-- position: jobs become queued only through enqueue and requeue, which hold
-- the ring row and copy its pos, and a tenant takes a new position only when
-- nothing of it is queued. Positions come from one sequence for all queues,
-- so pos alone names the (queue, tenant) pair, and two bigints compare far
-- faster than two strings: this index is a fifth of a bulk enqueue's writes.
CREATE INDEX jobs_tenant_queue ON batchq.jobs (pos, seq) WHERE state = 'queued';
CREATE INDEX jobs_lease ON batchq.jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_retry ON batchq.jobs (queue, run_after) WHERE state = 'retrying';
-- The expiry sweep, per queue: a queue's sweep must not walk the expired jobs
-- of other queues (a queue whose workers are down can have a million).
CREATE INDEX jobs_deadline ON batchq.jobs (queue, deadline) WHERE state <> 'running';
CREATE UNIQUE INDEX jobs_unique ON batchq.jobs (queue, unique_key) WHERE unique_key IS NOT NULL;

-- jobs.queue names a queue, as a foreign key would keep it, without a key
-- check per inserted job (about 3 µs a job, 15% of a bulk enqueue): enqueue
-- holds its queue's row FOR KEY SHARE, as that check would, and a queue that
-- still has jobs can be neither deleted nor renamed.
-- +goose StatementBegin
CREATE FUNCTION batchq.queues_keep_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.queue = OLD.name) THEN
        RAISE foreign_key_violation USING
            MESSAGE = format('queue %L still has jobs', OLD.name),
            HINT = 'Cancel or finish its jobs first.';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER queues_keep_jobs BEFORE DELETE OR UPDATE OF name ON batchq.queues
    FOR EACH ROW EXECUTE FUNCTION batchq.queues_keep_jobs();

CREATE TYPE batchq.job_outcome AS ENUM ('succeeded', 'failed', 'expired', 'cancelled', 'discarded');

-- The audit trail: exactly one row per finished job (the primary key is the
-- job's id), written in the transaction that removes the job.
CREATE TABLE batchq.outcomes (
    job_id           bigint PRIMARY KEY,
    queue            text   NOT NULL,
    tenant           text   NOT NULL,
    kind             text   NOT NULL,
    outcome          batchq.job_outcome NOT NULL,
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

-- Outcomes arrive in finishing order, so a BRIN index serves every time
-- window (reports, prune) for a fraction of a btree's cost on the hot path.
CREATE INDEX outcomes_finished ON batchq.outcomes USING brin (finished_at) WITH (pages_per_range = 32);
CREATE INDEX outcomes_unique ON batchq.outcomes (queue, unique_key, finished_at) WHERE unique_key IS NOT NULL;

-- Corrections to a tenant's ledger that the completion path records without
-- touching the ring: actual cost minus estimate, or minus the cost of a job
-- dropped before it ran. Maintenance folds each into the keys of the jobs
-- queued behind the job it is about (seq > after_seq), so a refund deep in a
-- backlog never moves the tenant's head ahead of the ring. Insert-only for
-- writers, so completions never wait on a lock here.
CREATE TABLE batchq.ledger_adjustments (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue     text   NOT NULL,
    tenant    text   NOT NULL,
    pos       bigint NOT NULL,
    after_seq bigint NOT NULL,
    delta     bigint NOT NULL
);

CREATE INDEX ledger_adjustments_tenant ON batchq.ledger_adjustments (queue, tenant);

-- The rows batchq.claim returns.
CREATE VIEW batchq.claim_results AS
SELECT j.id, false AS expired, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt,
       j.max_attempts, j.lease_token, j.lease_expires_at, j.enqueued_at, j.round, j.pos, j.seq
FROM batchq.jobs j
WHERE false;
COMMENT ON VIEW batchq.claim_results IS 'The row type batchq.claim() returns; always empty.';

-- claim claims up to p_max_jobs queued jobs of a queue in DRR order, stopping
-- before the first live job that would take the total cost past p_budget.
-- Expired jobs among them are removed with outcome 'expired' instead, their
-- cost handed back to their tenant's ledger, and returned with expired = true
-- so the caller can claim again for their places. Rows other claimers hold
-- are skipped: the claim locks its rows in one range scan of the claim index
-- from its head. Rows come back in no particular order, each with its key
-- (round, pos, seq), whose order is the claim order: the caller sorts them
-- (sorting the whole rows here was about a thirteenth of a claim of 100, in
-- bench/cycle.sh). The jobs of one claim share a lease token, drawn once per
-- claim: a run is a job and the claim that took it, and a claim takes a job
-- at most once, so (id, token) still names one run.
--
-- It also keeps the ring's cursor, the round joining tenants join: the round
-- of the last row it claimed, as drr, having served those jobs one by one,
-- would be in that round. Not a dropped expired row's: drr drops those at
-- their tenant's visit, rounds before their keys say, so their rounds are no
-- sign of where the ring is, and a claim that only drops moves nothing. Not
-- past a row still waiting before the claim's first row in a round the
-- cursor has not passed: one another transaction holds, which the claim
-- skipped (say, maintenance re-keying a backlog), or one that became queued
-- after the claim locked its rows (the probe reads with a later snapshot):
-- the claim may have taken rows far behind it, and a tenant joining at
-- their round would wait out the whole span. The probe for such rows walks
-- the index from the cursor's round, not from its head: with no VACUUM
-- since, the head holds an entry for every job claimed, and walking them in
-- every claim that moves the cursor cost eight claimers a tenth of their
-- claims (in claim-and-complete cycles of 100, 262 against 292 a second). A
-- row waiting in a round the cursor has passed is behind it already: claims
-- go on past it while it is held, and the first claim after it is released
-- takes it. Rows others hold between the claim's first and last are not
-- looked for: that would walk every row it took. Every row it locked and
-- left (live jobs over the budget) comes after its last claimed row, since
-- spent grows along the claim order. A claim never waits for the cursor: if
-- another claim holds it, the next claim moves it.
--
-- Statements in turn, not one statement of CTEs: the CTEs kept every step's
-- rows in a tuplestore and scanned them again for the next, and kept the
-- cursor in every claim; statements pass a few arrays and skip what a claim
-- does not need (dropping, when nothing expired; the probe and the lock,
-- when the cursor already shows the round). In cycles of a claim of 100 and
-- its completion, alternated with the CTE version on one seed: 257 against
-- 237 a second with eight clients, 190 against 178 with one. Each statement
-- reads with a snapshot of its own; the rows the first one locked stay as
-- they were.
--
-- A function rather than statements the client prepares, for their plans: a
-- prepared statement whose LIMIT is a parameter is planned anew on every
-- execution (the generic plan, priced for a tenth of the table, never beats
-- a custom one), and planning was a fifth of a claim of 100. Here the plans
-- are made once per session. They are the same plans at any queue size,
-- index access throughout, so they are forced (seqscan off, as in enqueue: a
-- plan made while the queue was empty must not scan it once it is not), and
-- JIT is off, since a generic plan's price grows with the table.
-- +goose StatementBegin
CREATE FUNCTION batchq.claim(p_queue text, p_max_jobs integer, p_worker text, p_budget bigint)
RETURNS SETOF batchq.claim_results
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_take bigint[];       -- live jobs within the budget
    v_drop bigint[];       -- expired jobs
    v_last_round bigint;   -- the round of the last job it claims
    v_first_round bigint;  -- the key of the first row it locked: when it
    v_first_pos bigint;    -- claims anything, that row is claimed or dropped
    v_first_seq bigint;    -- (only a live row over the budget is left)
    v_cursor bigint;
    v_reached bigint;
BEGIN
    SELECT array_agg(o.id) FILTER (WHERE NOT o.expired AND o.spent <= p_budget),
           array_agg(o.id) FILTER (WHERE o.expired),
           max(o.round) FILTER (WHERE NOT o.expired AND o.spent <= p_budget),
           min(o.round) FILTER (WHERE o.n = 1), min(o.pos) FILTER (WHERE o.n = 1), min(o.seq) FILTER (WHERE o.n = 1)
    INTO v_take, v_drop, v_last_round, v_first_round, v_first_pos, v_first_seq
    FROM (SELECT c.id, c.round, c.pos, c.seq, c.expired,
                 sum(CASE WHEN c.expired THEN 0 ELSE c.cost END) OVER w AS spent,
                 row_number() OVER w AS n
          FROM (SELECT j.id, j.cost, j.round, j.pos, j.seq, j.deadline <= now() AS expired
                FROM batchq.jobs j
                WHERE j.queue = p_queue AND j.state = 'queued'
                ORDER BY j.round, j.pos, j.seq
                LIMIT p_max_jobs
                FOR UPDATE SKIP LOCKED) c
          WINDOW w AS (ORDER BY c.round, c.pos, c.seq)) o;

    IF v_drop IS NOT NULL THEN
        RETURN QUERY
        WITH expired AS (
            DELETE FROM batchq.jobs j
            WHERE j.id = ANY (v_drop)
            RETURNING j.*
        ), expired_outcomes AS (
            INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
                                         max_attempts, deadline, enqueued_at, first_claimed_at, error, payload,
                                         unique_key)
            SELECT e.id, e.queue, e.tenant, e.kind, 'expired', e.cost, e.attempt, e.max_attempts, e.deadline,
                   e.enqueued_at, e.first_claimed_at, 'deadline passed before the job was claimed', e.payload,
                   e.unique_key
            FROM expired e
        ), expired_refunds AS (
            INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
            SELECT e.queue, e.tenant, e.pos, e.seq, -e.cost FROM expired e
        )
        SELECT e.id, true, e.queue, e.tenant, e.kind, e.cost, e.deadline, e.payload, e.attempt,
               e.max_attempts, '00000000-0000-0000-0000-000000000000'::uuid, e.deadline, e.enqueued_at,
               e.round, e.pos, e.seq
        FROM expired e;
    END IF;

    IF v_take IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE batchq.jobs j
    SET state = 'running',
        attempt = j.attempt + 1,
        lease_token = (SELECT gen_random_uuid()),
        lease_expires_at = now() + (SELECT q.lease FROM batchq.queues q WHERE q.name = p_queue),
        worker = p_worker,
        claimed_at = now(),
        first_claimed_at = coalesce(j.first_claimed_at, now())
    WHERE j.id = ANY (v_take)
    RETURNING j.id, false, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.enqueued_at, j.round, j.pos, j.seq;

    -- Most claims stay in the round the cursor already shows.
    SELECT c.round INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = p_queue;
    IF v_cursor IS NULL OR v_cursor >= v_last_round THEN
        RETURN;
    END IF;
    v_reached := least(v_last_round,
                       (SELECT h.round FROM batchq.jobs h
                        WHERE h.queue = p_queue AND h.state = 'queued'
                          AND h.round >= v_cursor
                          AND (h.round, h.pos, h.seq) < (v_first_round, v_first_pos, v_first_seq)
                        ORDER BY h.round, h.pos, h.seq
                        LIMIT 1));
    IF v_reached > v_cursor THEN
        UPDATE batchq.queue_cursors cur SET round = v_reached
        WHERE cur.queue = p_queue AND cur.round < v_reached
          AND cur.queue = (SELECT l.queue FROM batchq.queue_cursors l
                           WHERE l.queue = p_queue AND l.round < v_reached
                           FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
END
$$;
-- +goose StatementEnd

-- complete finishes running jobs as succeeded: each listed (id, token) whose
-- token still holds the job's lease removes the job, writes its outcome and,
-- when the actual cost differs from the estimate, records the difference in
-- the tenant's ledger. p_actual_costs holds -1 for "as estimated" and
-- p_results '' for no result; either array may be NULL, for none at all.
-- Returns the id and token of each listed run it did not finish, whose lease
-- was lost: usually none, so a completion sends nothing back. A job listed
-- under two tokens (a rescued run and the current one) is finished by the
-- one that holds the lease.
--
-- It waits on job rows (a heartbeat may hold one), so it must take them in id
-- order (see apply_adjustments), and it does so without a locking step of its
-- own: the delete reaches its rows through one scan of the primary key for
-- the listed ids, which returns them in id order. Bitmap and sequential scans,
-- which would reach them in heap order, are off, and the token is checked by a
-- hashed lookup in the listed pairs rather than by a join, which could have
-- driven the scan from the list instead. Locking the rows in a statement of
-- their own first, as the other finishing statements do, wrote a WAL record
-- per job and found every row twice.
-- +goose StatementBegin
CREATE FUNCTION batchq.complete(p_ids bigint[], p_tokens uuid[], p_actual_costs bigint[], p_results text[])
RETURNS TABLE (id bigint, lease_token uuid)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT i.id, p_tokens[i.n] AS token, nullif(p_actual_costs[i.n], -1) AS actual_cost,
               nullif(p_results[i.n], '')::jsonb AS result
        FROM unnest(p_ids) WITH ORDINALITY AS i (id, n)
    ), done AS (
        -- Not the payload: a succeeded outcome does not keep it, and it is the
        -- widest column by far. IS TRUE keeps the lookup a filter of this
        -- scan (a bare IN would become a join).
        DELETE FROM batchq.jobs j
        WHERE j.id = ANY (p_ids)
          AND ((j.id, j.lease_token) IN (SELECT i.id, i.token FROM input i)) IS TRUE
        RETURNING j.id, j.queue, j.tenant, j.kind, j.cost, j.attempt, j.max_attempts, j.deadline, j.enqueued_at,
                  j.first_claimed_at, j.worker, j.unique_key, j.pos, j.seq, j.lease_token
    ), finished AS (
        SELECT d.*, i.actual_cost, i.result FROM done d JOIN input i ON i.id = d.id AND i.token = d.lease_token
    ), written AS (
        INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost, attempts,
                                     max_attempts, deadline, enqueued_at, first_claimed_at, worker, result, unique_key)
        SELECT f.id, f.queue, f.tenant, f.kind, 'succeeded', f.cost, f.actual_cost, f.attempt, f.max_attempts,
               f.deadline, f.enqueued_at, f.first_claimed_at, f.worker, f.result, f.unique_key
        FROM finished f
    ), corrections AS (
        INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        SELECT f.queue, f.tenant, f.pos, f.seq, f.actual_cost - f.cost
        FROM finished f
        WHERE f.actual_cost IS NOT NULL AND f.actual_cost <> f.cost
    )
    SELECT i.id, i.token FROM input i
    WHERE NOT EXISTS (SELECT FROM done d WHERE d.id = i.id AND d.lease_token = i.token);
END
$$;
-- +goose StatementEnd

-- A tenant's new jobs take their place in the ring as of the round current
-- when the transaction that added them commits, not when they were inserted.
--
-- enqueue (and requeue, for retries) keys new jobs from the ring as it
-- inserts them: a tenant that joins starts in the queue's cursor round, one
-- already in the ring continues its ledger behind its queued jobs. Claims
-- cannot see the new jobs until the transaction commits, and they go on
-- meanwhile: each round they serve moves the cursor past rounds the new jobs
-- may be keyed in. That matters when the tenant has nothing else queued by
-- the commit (it joined, or its queued jobs all ran while the transaction was
-- open): every new job keyed in a round the cursor has passed would sort
-- ahead of the whole ring, and they would run as one burst before every other
-- tenant, however long the transaction stayed open (with one tenant
-- backlogged a round is a single quantum, so a few milliseconds make tens of
-- rounds).
--
-- So each statement that adds jobs notes them here, one row per statement,
-- and at commit a deferred trigger checks the row: for each tenant whose
-- oldest queued job is one of the transaction's own and whose grants began
-- to pay for it in a round the cursor has passed, it starts the tenant's
-- membership afresh, as these jobs enqueued at the commit would (its queue
-- emptied meanwhile, as a tenant that leaves the ring does): its queued jobs
-- take a new ring position, at the end of the ring, and the cursor's round
-- as their join round, their ledger counted from the head; the adjustments
-- pending about the jobs that left are dropped, and those still to come
-- about them (a job of the old membership that was running at the commit)
-- name the old position, which folding drops. The jobs' relative order is
-- unchanged, and with one claimer and nothing running concurrently (the
-- cursor cannot move during the enqueue) nothing moves. The jobs it moves are
-- the transaction's own (the tenant's ring row, which the transaction holds,
-- guards every way a job of the tenant becomes queued), so it waits on
-- nobody.
--
-- Its cost: a row per statement, and at commit one read of the cursor; when
-- the cursor moved, one index probe per tenant; and when a tenant moves, a
-- rewrite of its queued jobs (on a 2-core VM about 10 µs a job: 100 ms for a
-- new tenant's import of 10,000, whose insert took 115 ms; BENCHMARKS.md, flood).
--
-- What is left: the cursor is read when the check starts, so claims that run
-- during the rest of the commit (the rewrite, other deferred work, the flush
-- to disk) can still put a tenant's first jobs that many rounds early; a
-- claim of the tenant's last old job that has not committed yet makes the
-- tenant look as if it still had one, and it is not moved. The cursor is read
-- with the transaction's snapshot: under REPEATABLE READ or SERIALIZABLE that
-- is the round current when the transaction started, so such a transaction
-- gains nothing here. The check runs when deferred constraints do: at PREPARE
-- TRANSACTION, or at once after SET CONSTRAINTS ALL IMMEDIATE; and not at all
-- in a session whose session_replication_role is replica.
--
-- The check also catches a weight or quantum change that committed while
-- the transaction was open. Such a change re-keys the tenants that have
-- committed queued jobs, waiting for the ring rows an open enqueue holds;
-- it cannot see a tenant whose only queued jobs are still uncommitted (one
-- joining the ring, say), whose jobs were keyed with the share of the moment
-- they were inserted. Every change draws from settings_version once it has
-- committed; each statement notes the value it started with, before it
-- reads a weight, and when the value moved by the commit the check re-keys
-- the noted tenants (rekey leaves those whose share is unchanged as they
-- are). Tenants that joined the ring in the statement are re-keyed at
-- commit whatever the value says (when their share is off): no change could
-- see them, and a change draws the value only after it committed, so an
-- enqueue committing in between sees the new weight but not the new value.
-- A sequence, not a row: its value reads without MVCC, where a row
-- updated by every change grows a chain of dead versions that each read
-- walks (autovacuum cannot keep up with a configuration sync). A change
-- that commits during the commit itself is not seen. Its value is
-- last_value + is_called, which the first nextval moves too.
CREATE SEQUENCE batchq.settings_version;

-- Unlogged: a row lives only within the transaction that wrote it.
CREATE UNLOGGED TABLE batchq.ring_commit_checks (
    id        bigint   GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue     text     NOT NULL,
    -- The earliest round whose grant goes to a new job: for the first new job
    -- of a tenant, the round its cost begins to be paid in, which is the round
    -- it is served in only when it costs no more than what is left of a grant.
    min_round bigint   NOT NULL,
    tenants   text[]   NOT NULL,
    pos       bigint[] NOT NULL, -- each tenant's ring position
    first_seq bigint[] NOT NULL, -- the seq of the first job the statement added
    settings  bigint   NOT NULL, -- settings_version when the statement began
    joined    text[]   NOT NULL DEFAULT '{}' -- tenants that joined the ring in the statement
);

-- +goose StatementBegin
CREATE FUNCTION batchq.ring_check_at_commit() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off -- as enqueue: plans cached on an empty queue must still use the index
SET jit = off -- as enqueue: a sequence has only a (disabled, so costed in the billions) seq scan
AS $$
DECLARE
    v_cursor bigint;
    v_pos    bigint;
    v        record;
BEGIN
    DELETE FROM batchq.ring_commit_checks k WHERE k.id = NEW.id;
    SELECT c.round INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = NEW.queue;
    -- Only when a new job lies behind the cursor. One tenant at a time: a
    -- join of the late tenants to the jobs was planned, once per session, as
    -- a scan of every queued job.
    IF v_cursor > NEW.min_round THEN
        FOR v IN
            -- The head's start: the round whose grant first goes to it. Not the
            -- round it is served in: a job costing k grants is served k - 1
            -- rounds after its start, and a tenant whose start the cursor has
            -- passed would gain those rounds however long it kept the
            -- transaction open.
            SELECT t.tenant, t.pos, h.seq AS head, h.paid, h.share
            FROM unnest(NEW.tenants, NEW.pos, NEW.first_seq) AS t (tenant, pos, first_seq)
            CROSS JOIN LATERAL (SELECT j.seq, j.cum - j.cost AS paid, r.share,
                                       batchq.drr_round(r.join_round, j.cum - j.cost + 1, r.share) AS start
                                FROM batchq.jobs j, batchq.tenant_ring r
                                WHERE j.pos = t.pos AND j.state = 'queued'
                                  AND r.queue = NEW.queue AND r.tenant = t.tenant
                                ORDER BY j.seq LIMIT 1) h
            WHERE h.seq >= t.first_seq AND h.start < v_cursor
        LOOP
            -- It joins as of now, as it would with these jobs enqueued now: in
            -- the cursor's round, at the end of the ring (a new position), its
            -- ledger starting at its head (what the jobs that left had paid
            -- goes with them).
            v_pos := nextval('batchq.ring_pos');
            UPDATE batchq.jobs j
            SET pos = v_pos, cum = j.cum - v.paid, round = batchq.drr_round(v_cursor, j.cum - v.paid, v.share)
            WHERE j.pos = v.pos AND j.state = 'queued';
            UPDATE batchq.tenant_ring r SET pos = v_pos, join_round = v_cursor, cum = r.cum - v.paid,
                reached = greatest(r.reached, batchq.drr_round(v_cursor, r.cum - v.paid, v.share)), visited = -1
            WHERE r.queue = NEW.queue AND r.tenant = v.tenant;
            -- Its queue emptied before these jobs came, so it starts afresh, as
            -- a tenant that left the ring does: adjustments about the jobs that
            -- left would otherwise move the new ones back when folded in. Those
            -- still to come about them (a job of the old membership running
            -- now, handed back or finished later) name the old position, and
            -- folding drops them; those about the new jobs move with them.
            DELETE FROM batchq.ledger_adjustments a
            WHERE a.queue = NEW.queue AND a.tenant = v.tenant AND a.pos = v.pos AND a.after_seq < v.head;
            UPDATE batchq.ledger_adjustments a SET pos = v_pos
            WHERE a.queue = NEW.queue AND a.tenant = v.tenant AND a.pos = v.pos;
            -- Workers may have found the queue empty meanwhile, and enqueue
            -- did not wake them for a tenant that had jobs queued then.
            PERFORM pg_notify('batchq_jobs', NEW.queue);
        END LOOP;
    END IF;
    -- After the move: a re-key counts the rounds up to the cursor's as
    -- granted since the membership began.
    IF NEW.settings <> (SELECT s.last_value + s.is_called::integer FROM batchq.settings_version s) THEN
        PERFORM batchq.rekey(array_fill(NEW.queue, ARRAY[cardinality(NEW.tenants)]), NEW.tenants);
    ELSIF cardinality(NEW.joined) > 0 THEN
        -- A tenant that joined is one no change could see; checked whatever
        -- the version says, which a change draws only after its commit.
        PERFORM batchq.rekey(array_fill(NEW.queue, ARRAY[cardinality(NEW.joined)]), NEW.joined);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER ring_commit_checks_at_commit
    AFTER INSERT ON batchq.ring_commit_checks
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION batchq.ring_check_at_commit();

-- The round in which a job is served: on visit ceil(cum / share) of a
-- membership that began in join_round; never before the first visit.
--
-- Neither helper is STRICT: a strict SQL function whose body is not strict
-- itself (greatest() skips nulls) cannot be inlined, and each call then runs
-- as a statement of its own, about 10 µs a row in a bulk enqueue. Their
-- arguments are never null. ceil(cum / share) is (cum - 1) / share + 1,
-- which cannot overflow however large the share.
CREATE FUNCTION batchq.drr_round(join_round bigint, cum bigint, share bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN join_round + greatest((cum - 1) / share + 1, 1) - 1;

-- The per-visit grant of a tenant, by drr's rule (drr.Config.Grant): quantum
-- exactly for weight 1; otherwise quantum × weight in double precision,
-- rounded half away from zero, at least 1 and at most the largest bigint.
-- The rounding is done on the double itself: round() on a double rounds
-- halves to even, and a cast to numeric keeps only 15 digits
-- (28.499999999999996 would become 28.5 and round up).
CREATE FUNCTION batchq.drr_share(quantum bigint, weight double precision) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN weight = 1 THEN greatest(quantum, 1)
        WHEN quantum * weight >= 9223372036854775807::double precision THEN 9223372036854775807
        ELSE greatest(1, trunc(quantum * weight)::bigint
                         + (quantum * weight - trunc(quantum * weight) >= 0.5)::integer)
    END;

-- ring_join locks the ring rows of p_tenants (creating missing ones), in name
-- order so concurrent callers cannot deadlock, and starts a new membership for
-- each tenant that has no queued job: a new position at the end of the ring,
-- in order of p_tenants, in the queue's cursor round, with an empty ledger.
-- A tenant that had a job keyed in the cursor's round or later (reached)
-- had its visit in that round: it joins the next one, as drr's tenant that
-- comes back in the round it left. Were it to join the cursor's round, at the
-- end of the ring, a tenant that refills its queue whenever its last job is
-- claimed (a chain of jobs, each enqueueing the next) would come first at
-- every claim, and the tenants already served in the round would wait for as
-- long as it kept on. reached is what the jobs were keyed in, whatever became
-- of them: a job claimed ahead of the cursor (a claim that skipped rows
-- other transactions hold keeps the cursor at theirs), cancelled, expired or
-- handed back counts as visited in its round, and a correction folded after the tenant's queue
-- emptied changes nothing. One round, never more. (A re-key or fold that
-- moves queued jobs later does not raise reached: such a tenant may then
-- come a round early, as before this rule.)
-- It returns a row per tenant it locked, in name order: how many elements of
-- p_tenants name it, and the seq of its oldest queued job (head), NULL when it
-- had none and joined now. With p_skip_locked it passes over rows another
-- transaction holds and returns only the tenants it locked.
-- +goose StatementBegin
CREATE FUNCTION batchq.ring_join(p_queue text, p_tenants text[], p_skip_locked boolean)
RETURNS TABLE (tenant text, lines integer, head bigint)
LANGUAGE plpgsql
-- Its own, whoever calls it: a session caches these plans for every caller
-- (see enqueue for why each is set). Hash and merge joins stay off even for
-- calls of many tenants: each statement here reaches the tables by a probe
-- per tenant and joins no array to another.
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_distinct text[];
    v_first    bigint[];
    v_lines    integer[];
    v_locked   text[];
    v_joined   bigint[];
    v_counts   integer[];
    v_pos      bigint[];
    v_heads    bigint[];
    v_round    bigint;
    v_quantum  bigint;
BEGIN
    -- Each tenant once, in tenant order, with its first line in the batch.
    SELECT array_agg(f.tenant ORDER BY f.tenant), array_agg(f.first ORDER BY f.tenant),
           array_agg(f.lines ORDER BY f.tenant)
    INTO v_distinct, v_first, v_lines
    FROM (SELECT t.tenant, min(t.ord) AS first, count(*)::integer AS lines
          FROM unnest(p_tenants) WITH ORDINALITY AS t (tenant, ord)
          GROUP BY t.tenant) f;
    -- Only rows that do not exist yet: an insert that meets a row another
    -- transaction has updated waits for that transaction to end, even with
    -- ON CONFLICT DO NOTHING, and with p_skip_locked nothing may wait (an
    -- open enqueue holds its tenants' rows until it commits).
    -- Every statement here and in enqueue finds a ring row by a probe of its
    -- (queue, tenant), in a subquery the planner cannot turn into a join. As a
    -- join, a plan kept for the session, made when the ring was small and
    -- not analyzed since (autovacuum may be off), read every ring row of the
    -- queue per call, live or dead.
    INSERT INTO batchq.tenant_ring (queue, tenant)
    SELECT p_queue, t FROM unnest(v_distinct) AS t
    WHERE (SELECT r.tenant FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = t) IS NULL
    ON CONFLICT DO NOTHING;

    -- Lock in tenant order, one index probe per tenant: however many
    -- tenants the ring holds, a batch reads only its own.
    IF p_skip_locked THEN
        SELECT array_agg(l.tenant ORDER BY d.ord), array_agg(d.first ORDER BY d.ord), array_agg(d.lines ORDER BY d.ord),
               array_agg(l.pos ORDER BY d.ord)
        INTO v_locked, v_joined, v_counts, v_pos
        FROM unnest(v_distinct, v_first, v_lines) WITH ORDINALITY AS d (tenant, first, lines, ord)
        CROSS JOIN LATERAL (SELECT r.tenant, r.pos FROM batchq.tenant_ring r
                            WHERE r.queue = p_queue AND r.tenant = d.tenant
                            FOR UPDATE SKIP LOCKED) l;
    ELSE
        SELECT array_agg(l.tenant ORDER BY d.ord), array_agg(d.first ORDER BY d.ord), array_agg(d.lines ORDER BY d.ord),
               array_agg(l.pos ORDER BY d.ord)
        INTO v_locked, v_joined, v_counts, v_pos
        FROM unnest(v_distinct, v_first, v_lines) WITH ORDINALITY AS d (tenant, first, lines, ord)
        CROSS JOIN LATERAL (SELECT r.tenant, r.pos FROM batchq.tenant_ring r
                            WHERE r.queue = p_queue AND r.tenant = d.tenant
                            FOR UPDATE) l;
    END IF;
    IF v_locked IS NULL THEN
        RETURN;
    END IF;

    -- Each locked tenant's head, probed once for this function and its
    -- caller: the first queued job at its ring position (a row created just
    -- now has position 0, which no job has). Ordered by seq so that, with
    -- sorts off, only jobs_tenant_queue serves it: planned from stale
    -- statistics, other plans read the whole queue once per tenant.
    SELECT array_agg((SELECT j.seq FROM batchq.jobs j
                      WHERE j.pos = l.pos AND j.state = 'queued'
                      ORDER BY j.seq LIMIT 1) ORDER BY l.ord)
    INTO v_heads
    FROM unnest(v_pos) WITH ORDINALITY AS l (pos, ord);

    SELECT coalesce(c.round, 0), q.quantum INTO v_round, v_quantum
    FROM batchq.queues q LEFT JOIN batchq.queue_cursors c ON c.queue = q.name
    WHERE q.name = p_queue;

    -- Locked tenants with nothing queued join the ring, in the order of their
    -- first lines: that is the order they became active. Positions are drawn
    -- in that order; concurrent joiners interleave, and any order among them
    -- is a fair one.
    WITH joiners AS (
        SELECT l.tenant, l.first
        FROM unnest(v_locked, v_joined, v_heads) AS l (tenant, first, head)
        WHERE l.head IS NULL
        ORDER BY l.first
    ), numbered AS (
        SELECT j.tenant, nextval('batchq.ring_pos') AS pos,
               (SELECT r.ctid FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = j.tenant) AS rid
        FROM joiners j
    )
    UPDATE batchq.tenant_ring r
    SET pos = n.pos, cum = 0, visited = -1,
        -- Visited in the cursor's round already: the next (see above).
        join_round = CASE WHEN r.reached >= v_round THEN v_round + 1 ELSE v_round END,
        share = batchq.drr_share(v_quantum,
                                 coalesce((SELECT w.weight FROM batchq.tenants w WHERE w.name = n.tenant), 1))
    FROM numbered n
    WHERE r.ctid = n.rid; -- this transaction holds the row, so its ctid stays

    RETURN QUERY SELECT l.tenant, l.lines, l.head FROM unnest(v_locked, v_counts, v_heads) AS l (tenant, lines, head);
END
$$;
-- +goose StatementEnd

-- enqueue inserts a batch of jobs into one queue, all or nothing, and returns
-- one row per input (ord is its 1-based position): status 'inserted' with the
-- new id, or 'duplicate' with the id of the job that already holds its unique
-- key. When a tenant would exceed its bound it writes no job and returns a
-- single row with status 'queue_full', the tenant, the bound, how many jobs
-- it has queued and how many the call would add (duplicates not counted); an
-- unknown queue returns 'unknown_queue'. Neither raises, so
-- the caller's transaction stays usable. The statements after ring_join run
-- with fresh snapshots while this transaction holds the tenants' ring rows,
-- which is what makes the bound exact under concurrent enqueues.
CREATE VIEW batchq.enqueue_results AS
SELECT NULL::integer AS ord, NULL::bigint AS job_id, NULL::text AS status,
       NULL::text AS tenant, NULL::integer AS bound, NULL::integer AS queued, NULL::integer AS adding
WHERE false;
COMMENT ON VIEW batchq.enqueue_results IS 'The row type batchq.enqueue() returns; always empty.';

-- +goose StatementBegin
CREATE FUNCTION batchq.enqueue(
    p_queue        text,
    p_tenant       text[],
    p_kind         text[],
    p_cost         bigint[],
    p_deadline     timestamptz[],
    p_max_attempts integer[],
    p_payload      jsonb[],
    p_unique_key   text[]
) RETURNS SETOF batchq.enqueue_results
LANGUAGE plpgsql
-- Every statement here reaches rows by an index. A session caches the plans
-- of this function; planned while a queue was empty, they would otherwise
-- scan the whole table for as long as the session lives once it is not.
-- Sorts are off for the same reason: planned on an empty table, the probes of
-- each tenant's head (in ring_join, which sets the same) read the claim index
-- or the deadline index and filtered them, the whole queue once per tenant (0.5 s
-- per call of 5,000 jobs into a queue of 25,000), where jobs_tenant_queue
-- gives the head in seq order without a sort. Sorts this function cannot do
-- without still run. JIT is off: those two settings price the plans in the
-- billions, and compiling them took over 100 ms a call.
-- Calls of up to 64 lines, as an application's one job per transaction, run
-- plans made once per session: planning this function's statements for each
-- call was 40% of a one-line call (0.97 ms a call against 0.57 with the
-- plans kept, at 10,000 tenants; left to choose, PostgreSQL kept planning
-- them). Such a plan expects about ten elements in every array, and with
-- hash and merge joins off it joins them to the tables by index probes, one
-- per tenant, however many tenants a queue has and whatever its statistics
-- said when the plan was made. It also joins the arrays to each other in
-- nested loops, which near 64 lines costs about what planning would: a call
-- of 64 lines took 4.5 ms, against 3.7-4.2 ms when it was planned each time.
-- A call of more lines plans every statement for its own arrays instead, as
-- do the functions it calls (ring_join; rekey does the same), with hash
-- joins allowed: a plan made for ten elements, for a call of 5,000 lines for
-- 5,000 tenants, compared every line with every tenant, 11 s a call (and
-- 18 s in rekey at its commit). The SET clauses below end that change with
-- the call.
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    q        batchq.queues;
    v_n      integer := coalesce(cardinality(p_tenant), 0);
    v_dup    bigint[];
    v_adds   boolean[];
    v_full   record;
    v_keyed  boolean := false;
    v_exact  integer;
    v_src_ord integer[];
    v_src_id  bigint[];
    v_ids     bigint[];
    v_inserted bigint;
    v_cursor   bigint;
    v_ring_tenant text[];
    v_ring_pos    bigint[];
    v_ring_share  bigint[];
    v_ring_cum    bigint[];
    v_ring_seq    bigint[];
    v_ring_round  bigint[];
    v_ring_lines  integer[];
    v_ring_new    integer[];
    v_ring_head   bigint[];
    v_ring_bound  integer[];
    v_settings    bigint;
    v_joined      text[];
BEGIN
    -- Held until commit, so the queue cannot go while its new jobs do not
    -- show yet (see queues_keep_jobs).
    SELECT * INTO q FROM batchq.queues WHERE name = p_queue FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, NULL::bigint, 'unknown_queue'::text, NULL::text, NULL::integer, NULL::integer, NULL::integer;
        RETURN;
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF v_n > 64 THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true), set_config('enable_hashjoin', 'on', true),
                set_config('enable_mergejoin', 'on', true);
    END IF;

    -- Before ring_join reads the weights (see ring_commit_checks).
    SELECT s.last_value + s.is_called::integer INTO v_settings FROM batchq.settings_version s;
    SELECT array_agg(l.tenant ORDER BY l.ord), array_agg(l.lines ORDER BY l.ord), array_agg(l.head ORDER BY l.ord)
    INTO v_ring_tenant, v_ring_lines, v_ring_head
    FROM batchq.ring_join(p_queue, p_tenant, false) WITH ORDINALITY AS l (tenant, lines, head, ord);
    v_joined := ARRAY(SELECT l.tenant FROM unnest(v_ring_tenant, v_ring_head) AS l (tenant, head) WHERE l.head IS NULL);

    -- Unique keys: a job already unfinished, or finished within unique_for,
    -- or an earlier line of this batch, holds the key. An empty key is no key.
    -- v_dup is the id of the job that holds a line's key, v_adds whether the
    -- line adds a job.
    v_dup := array_fill(NULL::bigint, ARRAY[v_n]);
    v_adds := array_fill(true, ARRAY[v_n]);
    IF NOT EXISTS (SELECT 1 FROM unnest(p_unique_key) k WHERE k <> '') THEN
        p_unique_key := array_fill(NULL::text, ARRAY[v_n]);
    ELSE
        v_keyed := true;
        p_unique_key := ARRAY(SELECT nullif(u.k, '') FROM unnest(p_unique_key) WITH ORDINALITY AS u (k, o) ORDER BY u.o);
        SELECT array_agg(d.existing ORDER BY d.ord),
               array_agg(d.existing IS NULL AND (d.first_ord IS NULL OR d.first_ord = d.ord) ORDER BY d.ord)
        INTO v_dup, v_adds
        FROM (
            SELECT i.ord,
                   CASE WHEN i.k IS NULL THEN NULL ELSE min(i.ord) OVER (PARTITION BY i.k) END AS first_ord,
                   CASE WHEN i.k IS NULL THEN NULL ELSE coalesce(
                       (SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue AND j.unique_key = i.k),
                       -- The window counts back from this statement, not from the
                       -- start of the caller's transaction: a job that finished
                       -- meanwhile is not unfinished, and unique_for 0 means none.
                       (SELECT o.job_id FROM batchq.outcomes o
                        WHERE q.unique_for > '0' AND o.queue = p_queue AND o.unique_key = i.k
                          AND o.finished_at > statement_timestamp() - q.unique_for
                        ORDER BY o.finished_at DESC LIMIT 1)) END AS existing
            FROM unnest(p_unique_key) WITH ORDINALITY AS i (k, ord)
        ) d;
    END IF;

    -- A tenant that joined the ring in this call (it had no queued job)
    -- joins the round current now, not the one current when ring_join ran:
    -- claims may have moved on meanwhile, and its first jobs must not come
    -- out ahead of the rounds already served.
    SELECT coalesce(max(c.round), 0) INTO v_cursor
    FROM batchq.queue_cursors c WHERE c.queue = p_queue;

    -- The batch's ring rows (ring_join holds them) and bounds, read once in
    -- ring_join's order, one probe per tenant: however many tenants the ring
    -- holds, a call reads only its own. The bounds and the keys below join
    -- these arrays, not the tables.
    SELECT array_agg(r.pos ORDER BY l.ord), array_agg(r.share ORDER BY l.ord), array_agg(r.cum ORDER BY l.ord),
           array_agg(r.enq_seq ORDER BY l.ord),
           array_agg(CASE WHEN l.head IS NULL THEN greatest(r.join_round, v_cursor) ELSE r.join_round END ORDER BY l.ord),
           array_agg(coalesce(r.max_queued, q.max_per_tenant) ORDER BY l.ord)
    INTO v_ring_pos, v_ring_share, v_ring_cum, v_ring_seq, v_ring_round, v_ring_bound
    FROM unnest(v_ring_tenant, v_ring_head) WITH ORDINALITY AS l (tenant, head, ord)
    LEFT JOIN LATERAL (SELECT r.pos, r.share, r.cum, r.enq_seq, r.join_round,
                              (SELECT w.max_queued FROM batchq.tenants w WHERE w.name = r.tenant) AS max_queued
                       FROM batchq.tenant_ring r
                       WHERE r.queue = p_queue AND r.tenant = l.tenant
                       LIMIT 1) r ON true;

    -- Each tenant's new jobs: its lines less duplicates. Grouped by tenant
    -- in name order, as ring_join lists them, over every line, so that the
    -- two lists hold the same tenants in the same order.
    IF v_keyed THEN
        SELECT array_agg(c.n ORDER BY c.tenant) INTO v_ring_new
        FROM (SELECT x.tenant,
                     (count(*) FILTER (WHERE x.adds))::integer AS n
              FROM unnest(p_tenant, v_adds) AS x (tenant, adds)
              GROUP BY x.tenant) c;
    ELSE
        v_ring_new := v_ring_lines;
    END IF;

    -- Bounds. The fast path counts a tenant's queue as the span of sequence
    -- numbers from its head to its newest job, which is never less than the
    -- true length (jobs removed from the middle leave gaps); only a tenant
    -- that looks full is counted exactly. Tenants in name order, so the
    -- first full one is reported whatever the order of the lines.
    FOR v_full IN
        SELECT b.tenant, b.pos, b.adding, b.bound, b.upper
        FROM (SELECT u.tenant, u.pos, u.adding, u.bound,
                     CASE WHEN u.head IS NULL THEN 0 ELSE u.enq_seq - u.head + 1 END AS upper
              FROM unnest(v_ring_tenant, v_ring_pos, v_ring_new, v_ring_head, v_ring_seq, v_ring_bound)
                   AS u (tenant, pos, adding, head, enq_seq, bound)) b
        WHERE b.adding > 0 AND b.upper + b.adding > b.bound
    LOOP
        SELECT count(*) INTO v_exact FROM (
            SELECT 1 FROM batchq.jobs j
            WHERE j.pos = v_full.pos AND j.state = 'queued'
            LIMIT v_full.bound) c;
        IF v_exact + v_full.adding > v_full.bound THEN
            RETURN QUERY SELECT 0, NULL::bigint, 'queue_full'::text, v_full.tenant, v_full.bound, v_exact, v_full.adding;
            RETURN;
        END IF;
    END LOOP;

    -- Keys: each tenant's new jobs continue its ledger in input order. Ids
    -- are drawn here so the result needs no join back to what was inserted.
    -- Rows are inserted, and their ids drawn, in claim order: a claim then
    -- reads and writes a few neighbouring pages, not one page per job (an
    -- import arrives grouped by tenant or shuffled, and claims interleave
    -- the tenants). Sorting 1,000 lines costs far less than the claims save.
    WITH keyed AS (
        SELECT x.ord::integer AS ord, x.tenant, x.kind, x.cost,
               -- The zero time asks for the queue's default TTL, 0 for its max
               -- attempts. The TTL counts from this statement, as a TTL the
               -- caller gives does from the call, not from the start of the
               -- caller's transaction, which may be older than the TTL.
               CASE WHEN x.deadline < '0002-01-01' THEN statement_timestamp() + q.default_ttl ELSE x.deadline END AS deadline,
               coalesce(nullif(x.max_attempts, 0), q.max_attempts) AS max_attempts,
               x.payload, x.unique_key, r.pos, r.join_round, r.share,
               (r.cum + sum(x.cost) OVER w)::bigint AS cum,
               r.enq_seq + row_number() OVER w AS seq
        FROM unnest(p_tenant, p_kind, p_cost, p_deadline, p_max_attempts, p_payload, p_unique_key, v_adds)
             WITH ORDINALITY AS x (tenant, kind, cost, deadline, max_attempts, payload, unique_key, adds, ord)
        JOIN unnest(v_ring_tenant, v_ring_pos, v_ring_share, v_ring_cum, v_ring_seq, v_ring_round)
             AS r (tenant, pos, share, cum, enq_seq, join_round) ON r.tenant = x.tenant
        WHERE x.adds
        WINDOW w AS (PARTITION BY x.tenant COLLATE "C" ORDER BY x.ord)
    ), src AS MATERIALIZED (
        -- nextval is evaluated after the sort (it is volatile), so ids follow it.
        SELECT k.*, batchq.drr_round(k.join_round, k.cum, k.share) AS round, nextval('batchq.jobs_id_seq') AS id
        FROM keyed k
        ORDER BY round, k.pos, k.seq
    ), ins_plain AS (
        -- Lines without a key, as most are, go in without ON CONFLICT: an
        -- insert with it takes a lock and writes a second WAL record per row
        -- (a speculative insertion) even when no row can conflict, about a
        -- twentieth of a call. Both inserts read src in the order it was
        -- written, which is id order.
        INSERT INTO batchq.jobs (id, queue, tenant, kind, cost, deadline, payload, unique_key, state,
                                 max_attempts, round, pos, cum, seq)
        OVERRIDING SYSTEM VALUE
        SELECT s.id, p_queue, s.tenant, s.kind, s.cost, s.deadline, s.payload, s.unique_key, 'queued',
               s.max_attempts, s.round, s.pos, s.cum, s.seq
        FROM src s
        WHERE s.unique_key IS NULL
        RETURNING id, jobs.tenant, jobs.pos, jobs.seq, jobs.cum, jobs.cost, jobs.round
    ), ins_keyed AS (
        INSERT INTO batchq.jobs (id, queue, tenant, kind, cost, deadline, payload, unique_key, state,
                                 max_attempts, round, pos, cum, seq)
        OVERRIDING SYSTEM VALUE
        SELECT s.id, p_queue, s.tenant, s.kind, s.cost, s.deadline, s.payload, s.unique_key, 'queued',
               s.max_attempts, s.round, s.pos, s.cum, s.seq
        FROM src s
        WHERE s.unique_key IS NOT NULL
        -- In key order: a key another transaction is inserting is waited for,
        -- and two calls of no tenant in common (so not ordered by the ring
        -- rows) that share keys would otherwise wait for each other's.
        ORDER BY s.unique_key COLLATE "C"
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING id, jobs.tenant, jobs.pos, jobs.seq, jobs.cum, jobs.cost, jobs.round
    ), ins AS (
        SELECT * FROM ins_plain UNION ALL SELECT * FROM ins_keyed
    ), noted AS (
        -- Checked at commit (ring_commit_checks).
        -- A tenant's first new job starts earliest: it is the one that has the
        -- least of the ledger before it.
        INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings, joined)
        SELECT p_queue, min(batchq.drr_round(k.join_round, a.paid + 1, k.share)), array_agg(a.tenant),
               array_agg(a.pos), array_agg(a.first_seq), v_settings, v_joined
        FROM (SELECT i.tenant, min(i.pos) AS pos, min(i.seq) AS first_seq, min(i.cum - i.cost) AS paid
              FROM ins i GROUP BY i.tenant) a
        JOIN unnest(v_ring_tenant, v_ring_round, v_ring_share) AS k (tenant, join_round, share) ON k.tenant = a.tenant
        HAVING count(*) > 0
    ), ring AS (
        -- Each row found by its own probe, as in ring_join.
        UPDATE batchq.tenant_ring r SET cum = a.cum, enq_seq = a.seq, join_round = k.join_round,
                                        reached = greatest(r.reached, a.round)
        FROM (SELECT i.tenant, max(i.cum) AS cum, max(i.seq) AS seq, max(i.round) AS round,
                     (SELECT x.ctid FROM batchq.tenant_ring x WHERE x.queue = p_queue AND x.tenant = i.tenant) AS rid
              FROM ins i GROUP BY i.tenant) a
        JOIN unnest(v_ring_tenant, v_ring_round) AS k (tenant, join_round) ON k.tenant = a.tenant
        WHERE r.ctid = a.rid
    )
    SELECT (SELECT array_agg(s.ord ORDER BY s.ord) FROM src s),
           (SELECT array_agg(s.id ORDER BY s.ord) FROM src s),
           (SELECT count(*) FROM ins)
    INTO v_src_ord, v_src_id, v_inserted;

    -- Lines whose unique key a concurrent transaction took and committed
    -- meanwhile were keyed but not inserted (ON CONFLICT DO NOTHING): their
    -- costs are taken out of the ledger of the tenant's later lines, which
    -- are this call's own rows, and of the ring. Seqs keep the gap. Noted
    -- again, for the commit-time check, with the rounds as they are now.
    IF v_inserted < coalesce(cardinality(v_src_id), 0) THEN
        WITH lines AS (
            SELECT s.id, p_tenant[s.ord] AS tenant, p_cost[s.ord] AS cost,
                   r.enq_seq + row_number() OVER (PARTITION BY p_tenant[s.ord] ORDER BY s.ord) AS seq
            FROM unnest(v_src_ord, v_src_id) AS s (ord, id)
            JOIN unnest(v_ring_tenant, v_ring_seq) AS r (tenant, enq_seq) ON r.tenant = p_tenant[s.ord]
        ), skipped AS (
            SELECT l.tenant, l.seq, l.cost FROM lines l
            WHERE NOT EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.id = l.id)
        ), fixed AS (
            UPDATE batchq.jobs j
            SET cum = j.cum - f.delta, round = batchq.drr_round(r.join_round, j.cum - f.delta, r.share)
            FROM (SELECT l.id, (SELECT sum(k.cost) FROM skipped k
                                WHERE k.tenant = l.tenant AND k.seq < l.seq)::bigint AS delta
                  FROM lines l) f
            CROSS JOIN unnest(v_ring_tenant, v_ring_round, v_ring_share) AS r (tenant, join_round, share)
            WHERE j.id = f.id AND f.delta > 0 AND r.tenant = j.tenant
            RETURNING j.tenant, j.pos, j.seq, j.cum, j.round,
                      batchq.drr_round(r.join_round, j.cum - j.cost + 1, r.share) AS start
        ), ring AS (
            -- A tenant's last job is among the fixed ones whenever any is.
            UPDATE batchq.tenant_ring r SET cum = a.cum
            FROM (SELECT a.tenant, a.cum,
                         (SELECT y.ctid FROM batchq.tenant_ring y WHERE y.queue = p_queue AND y.tenant = a.tenant) AS rid
                  FROM (SELECT DISTINCT ON (x.tenant) x.tenant, x.cum FROM fixed x ORDER BY x.tenant, x.seq DESC) a) a
            WHERE r.ctid = a.rid
        )
        INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings)
        SELECT p_queue, min(a.min_round), array_agg(a.tenant), array_agg(a.pos), array_agg(a.first_seq), v_settings
        FROM (SELECT x.tenant, min(x.pos) AS pos, min(x.seq) AS first_seq, min(x.start) AS min_round
              FROM fixed x GROUP BY x.tenant) a
        HAVING count(*) > 0;
    END IF;

    -- Each line's new id, NULL for a duplicate. Without duplicates src holds
    -- every line, and its ids in line order are the answer.
    IF coalesce(cardinality(v_src_id), 0) = v_n THEN
        v_ids := v_src_id;
    ELSE
        v_ids := array_fill(NULL::bigint, ARRAY[v_n]);
        FOR i IN 1 .. coalesce(cardinality(v_src_ord), 0) LOOP
            v_ids[v_src_ord[i]] := v_src_id[i];
        END LOOP;
    END IF;

    -- Wake the workers waiting on the queue (LISTEN batchq_jobs) only for a
    -- tenant that had nothing queued: one with jobs queued ahead of these is
    -- being served, or waits for quota, and a notification changes neither.
    -- Every transaction that notifies takes one lock, shared by the whole
    -- server, as its commit begins, and holds it until the commit is on disk,
    -- so notifying commits run one at a time. What a tenant had queued may
    -- all be claimed before this commits, and a worker may then wait for the
    -- new jobs until it polls; the commit-time check notifies for such a
    -- tenant when the cursor has passed its jobs (ring_check_at_commit).
    IF v_inserted > 0 AND cardinality(v_joined) > 0 THEN
        PERFORM pg_notify('batchq_jobs', p_queue);
    END IF;

    IF v_inserted = coalesce(cardinality(v_src_id), 0) THEN
        RETURN QUERY
        SELECT x.ord::integer, coalesce(x.id, x.dup, (SELECT j.id FROM batchq.jobs j
                                                      WHERE j.queue = p_queue AND j.unique_key = x.unique_key)),
               CASE WHEN x.id IS NULL THEN 'duplicate' ELSE 'inserted' END,
               x.tenant, NULL::integer, NULL::integer, NULL::integer
        FROM unnest(p_tenant, p_unique_key, v_dup, v_ids) WITH ORDINALITY AS x (tenant, unique_key, dup, id, ord)
        ORDER BY x.ord;
        RETURN;
    END IF;

    -- Some lines held a unique key that a concurrent transaction took and
    -- committed meanwhile: report that transaction's job instead. That job
    -- may have been claimed and finished since the insert found it, and then
    -- only its outcome still carries the key: the newest outcome with the key
    -- is taken, which is that job unless a third one took the key and
    -- finished within the same moments.
    RETURN QUERY
    SELECT x.ord::integer,
           CASE WHEN ok.id IS NOT NULL THEN x.id ELSE coalesce(x.dup,
                (SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue AND j.unique_key = x.unique_key),
                (SELECT o.job_id FROM batchq.outcomes o WHERE o.queue = p_queue AND o.unique_key = x.unique_key
                 ORDER BY o.finished_at DESC LIMIT 1)) END,
           CASE WHEN ok.id IS NOT NULL THEN 'inserted' ELSE 'duplicate' END,
           x.tenant, NULL::integer, NULL::integer, NULL::integer
    FROM unnest(p_tenant, p_unique_key, v_dup, v_ids) WITH ORDINALITY AS x (tenant, unique_key, dup, id, ord)
    LEFT JOIN batchq.jobs ok ON ok.id = x.id AND ok.id = ANY (v_ids)
    ORDER BY x.ord;
END
$$;
-- +goose StatementEnd

-- requeue returns up to p_limit due 'retrying' jobs of a queue to their
-- tenants' queues, at the tail, as if enqueued now (a tenant whose queue had
-- emptied rejoins the ring). Tenants whose ring row an open enqueue holds are
-- left for a later call, and passed over: when the due jobs it took belonged
-- to such tenants, it looks again past them (a few times at most), so one
-- long import transaction does not hold up every other tenant's retries.
-- Returns how many jobs it requeued.
-- +goose StatementBegin
CREATE FUNCTION batchq.requeue(p_queue text, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off -- as enqueue: index access whatever the statistics say
SET jit = off
AS $$
DECLARE
    v_ids      bigint[];
    v_tenants  text[];
    v_locked   text[];
    v_n        integer;
    v_total    integer := 0;
    v_settings bigint;
    v_joined   text[];
    v_notify   boolean := false;
    v_busy     text[] := '{}'; -- tenants whose ring row another transaction holds
BEGIN
    -- Before ring_join reads the weights (see ring_commit_checks).
    SELECT s.last_value + s.is_called::integer INTO v_settings FROM batchq.settings_version s;
    FOR v_pass IN 1 .. 4 LOOP
        SELECT array_agg(d.id ORDER BY d.run_after, d.id), array_agg(d.tenant ORDER BY d.run_after, d.id)
        INTO v_ids, v_tenants
        FROM (SELECT j.id, j.tenant, j.run_after FROM batchq.jobs j
              WHERE j.queue = p_queue AND j.state = 'retrying' AND j.run_after <= now()
                AND j.tenant <> ALL (v_busy)
              ORDER BY j.run_after, j.id LIMIT p_limit - v_total
              FOR UPDATE SKIP LOCKED) d;
        EXIT WHEN v_ids IS NULL;
        SELECT coalesce(array_agg(r.tenant), '{}'), coalesce(array_agg(r.tenant) FILTER (WHERE r.head IS NULL), '{}')
        INTO v_locked, v_joined
        FROM batchq.ring_join(p_queue, v_tenants, true) r;

        WITH src AS (
            SELECT j.id, r.pos, r.join_round, r.share,
                   (r.cum + sum(j.cost) OVER w)::bigint AS cum,
                   r.enq_seq + row_number() OVER w AS seq
            FROM unnest(v_ids) WITH ORDINALITY AS x (id, ord)
            JOIN batchq.jobs j ON j.id = x.id
            JOIN batchq.tenant_ring r ON r.queue = p_queue AND r.tenant = j.tenant
            WHERE j.tenant = ANY (v_locked)
            WINDOW w AS (PARTITION BY j.tenant ORDER BY x.ord)
        ), upd AS (
            UPDATE batchq.jobs j
            SET state = 'queued', run_after = NULL, pos = s.pos, cum = s.cum, seq = s.seq,
                round = batchq.drr_round(s.join_round, s.cum, s.share)
            FROM src s WHERE j.id = s.id
            RETURNING j.tenant, j.pos, j.cum, j.seq, j.round, batchq.drr_round(s.join_round, s.cum - j.cost + 1, s.share) AS start
        ), noted AS (
            -- Checked at commit (ring_commit_checks).
            INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings, joined)
            SELECT p_queue, min(a.min_round), array_agg(a.tenant), array_agg(a.pos), array_agg(a.first_seq), v_settings,
                   v_joined
            FROM (SELECT u.tenant, min(u.pos) AS pos, min(u.seq) AS first_seq, min(u.start) AS min_round
                  FROM upd u GROUP BY u.tenant) a
            HAVING count(*) > 0
        ), ring AS (
            UPDATE batchq.tenant_ring r SET cum = a.cum, enq_seq = a.seq, reached = greatest(r.reached, a.round)
            FROM (SELECT u.tenant, max(u.cum) AS cum, max(u.seq) AS seq, max(u.round) AS round
                  FROM upd u GROUP BY u.tenant) a
            WHERE r.queue = p_queue AND r.tenant = a.tenant
        )
        SELECT count(*) INTO v_n FROM upd;

        v_total := v_total + v_n;
        v_notify := v_notify OR (v_n > 0 AND cardinality(v_joined) > 0);
        -- Every job it took was requeued: it took all that were due, or
        -- p_limit.
        EXIT WHEN v_n = cardinality(v_ids) OR v_total >= p_limit;
        v_busy := v_busy || ARRAY(SELECT DISTINCT t FROM unnest(v_tenants) AS t WHERE t <> ALL (v_locked));
    END LOOP;

    -- As enqueue: only for a tenant that had nothing queued.
    IF v_notify THEN
        PERFORM pg_notify('batchq_jobs', p_queue);
    END IF;
    RETURN v_total;
END
$$;
-- +goose StatementEnd

-- fold_adjustments folds the pending ledger adjustments of one tenant into
-- the keys of its queued jobs in membership p_pos (join_round and share as
-- the ring row holds them) and into the ring's ledger, and reports whether
-- there were any. Adjustments of an earlier membership are dropped: a tenant
-- whose queue emptied starts afresh. The caller holds the ring row and has
-- locked the tenant's queued jobs the fold rewrites, and sets the planner
-- settings (as apply_adjustments and rekey do).
--
-- With p_ids it folds only those adjustments (the ones its caller decided
-- about). With p_next it folds them into the tenant's queued jobs before seq
-- p_next only (the caller has locked those) and leaves the rest of each adjustment
-- pending, as one adjustment about the jobs after those (and any enqueued
-- later, whose keys continue the ring's ledger as it was). A completion's correction is about every job queued
-- behind it, so folding it whole rewrites a tenant's whole backlog, on every
-- maintenance pass while completions report actual costs: a million rows
-- for an import of a million jobs. The keys claims reach soon are the
-- head's; the rest are folded as the head comes to them. Meanwhile the
-- ledger as if everything were folded is each key plus the pending
-- adjustments before it, and the ring's cum plus all of them. The caller
-- folds a window only when the corrections it consumes add up to nothing or
-- less, so the folded keys stay ahead of the rest, in the tenant's order.
-- +goose StatementBegin
CREATE FUNCTION batchq.fold_adjustments(p_queue text, p_tenant text, p_pos bigint, p_join_round bigint,
                                        p_share bigint, p_next bigint DEFAULT NULL, p_ids bigint[] DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_seqs   bigint[];
    v_deltas bigint[];
    v_total  bigint;
    v_next   bigint := p_next; -- the first queued job left as it is; NULL: none
BEGIN
    WITH consumed AS (
        -- Those about jobs from v_next on only stay as they are.
        DELETE FROM batchq.ledger_adjustments a
        WHERE a.queue = p_queue AND a.tenant = p_tenant AND (p_ids IS NULL OR a.id = ANY (p_ids))
          AND (v_next IS NULL OR a.pos <> p_pos OR a.after_seq < v_next - 1)
        RETURNING a.pos, a.after_seq, a.delta
    )
    SELECT array_agg(c.after_seq), array_agg(c.delta), coalesce(sum(c.delta), 0)
    INTO v_seqs, v_deltas, v_total
    FROM consumed c WHERE c.pos = p_pos;
    -- Deltas that sum to nothing still move the jobs between them.
    IF v_seqs IS NULL THEN
        RETURN false;
    END IF;
    -- A job takes the sum of the corrections about jobs before it: the
    -- running sum at the last correction before it. One range of the
    -- tenant's queue per step, so a fold costs a pass over the jobs it
    -- rewrites, not that times the corrections.
    WITH steps AS (
        SELECT c.after_seq, (sum(c.delta) OVER (ORDER BY c.after_seq))::bigint AS delta,
               lead(c.after_seq) OVER (ORDER BY c.after_seq) AS upto
        FROM (SELECT u.after_seq, sum(u.delta) AS delta FROM unnest(v_seqs, v_deltas) AS u (after_seq, delta)
              GROUP BY u.after_seq) c
    ), shift AS (
        SELECT j.id, s.delta
        FROM steps s
        JOIN batchq.jobs j ON j.pos = p_pos AND j.state = 'queued'
             AND j.seq > s.after_seq AND j.seq <= coalesce(s.upto, 9223372036854775807)
             AND j.seq < coalesce(v_next, 9223372036854775807)
        WHERE s.delta <> 0
    )
    UPDATE batchq.jobs j
    SET cum = j.cum + s.delta, round = batchq.drr_round(p_join_round, j.cum + s.delta, p_share)
    FROM shift s
    WHERE j.id = s.id;
    IF v_next IS NULL THEN
        UPDATE batchq.tenant_ring r SET cum = r.cum + v_total
        WHERE r.queue = p_queue AND r.tenant = p_tenant;
    ELSIF v_total <> 0 THEN
        INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        VALUES (p_queue, p_tenant, p_pos, v_next - 1, v_total);
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- apply_adjustments folds pending ledger adjustments into the keys of each
-- tenant's queued jobs behind the job each is about: a tenant that spent more
-- than it estimated waits longer, one that spent less (or lost a job to its
-- deadline) comes sooner. Adjustments of an earlier membership are dropped: a
-- tenant whose queue emptied starts afresh. Tenants whose ring row is locked
-- are left for later. Returns how many tenants it adjusted.
--
-- Job rows: every statement that waits on job rows locks them in id order
-- (failures, releases and heartbeats lock ORDER BY id, completions delete
-- through one primary-key scan of their ids; claims, rescues and expiries
-- skip locked rows and never wait), and a transaction
-- that re-keys locks all it will touch in one such statement first. Locking
-- in any other order could hold a job a claim had just taken (a recheck locks
-- the newest version of a row before it finds the row no longer qualifies)
-- while waiting for a job a completion holds, and the completion wait for
-- the first.
-- +goose StatementBegin
CREATE FUNCTION batchq.apply_adjustments(p_queue text) RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off -- as enqueue: index access whatever the statistics say
SET jit = off
AS $$
DECLARE
    -- Each pass folds a tenant's corrections into its first this many queued
    -- jobs (see fold_adjustments). Claims that take more of one tenant's jobs
    -- between two passes meet keys that do not have the corrections made
    -- since: the order by estimates, as before any correction. A pass
    -- rewrites up to this many rows for each tenant with new corrections, so
    -- it is sized for a fleet a provider's quota paces to hundreds of calls a
    -- second, spread over tenants: a hundred jobs of one tenant last a pass
    -- (a second) unless that tenant alone takes over a hundred calls a second.
    c_fold_jobs CONSTANT integer := 100;
    v         record;
    v_n       integer := 0;
    v_locked  text[];
    v_tenants text[];
    v_pos     bigint[];
    v_from    bigint[];
    v_next    bigint[];
    v_ids     bigint[];
BEGIN
    v_locked := ARRAY(
        SELECT r.tenant FROM batchq.tenant_ring r
        WHERE r.queue = p_queue
          AND r.tenant IN (SELECT DISTINCT a.tenant FROM batchq.ledger_adjustments a WHERE a.queue = p_queue)
        ORDER BY r.tenant
        FOR UPDATE SKIP LOCKED);
    -- The adjustments this pass folds: those of the locked tenants now. One
    -- recorded while the pass runs waits for the next, so each decision below
    -- is about the adjustments its fold consumes.
    v_ids := ARRAY(SELECT a.id FROM batchq.ledger_adjustments a
                   WHERE a.queue = p_queue AND a.tenant = ANY (v_locked));
    -- Each tenant's window: from the first job an adjustment is about to its
    -- fold_jobs-th queued job, when no job of the window, nor the first past
    -- it, would move later (the corrections about the jobs before each add up
    -- to nothing or less): its jobs move earlier, ahead of the
    -- rest, as they are in the tenant's order. A correction upwards moves
    -- every job behind it later; folded into a window alone, it would leave
    -- the jobs past the window ahead of the folded ones in the fair order, and
    -- claims would take the tenant's jobs from there, at their estimates,
    -- while the window stayed where it was. So a tenant with one is folded
    -- whole; unless it has more jobs than a window and no job would move
    -- by a grant or more, or earlier: then it waits for more, since folding
    -- them would move no job by more than a round and rewrite the backlog
    -- (until then its jobs come up to a round early). (The ring rows are
    -- held, so no job of these tenants becomes queued meanwhile.) next_seq
    -- is the first job past the window, NULL when the window holds the rest.
    SELECT array_agg(w.tenant ORDER BY w.tenant), array_agg(w.pos ORDER BY w.tenant),
           array_agg(w.from_seq ORDER BY w.tenant),
           array_agg(CASE WHEN w.hi <= 0 THEN w.next_seq END ORDER BY w.tenant)
    INTO v_tenants, v_pos, v_from, v_next
    FROM (SELECT r.tenant, r.pos, r.share, k.seq AS next_seq,
                 (SELECT min(a.after_seq) FROM batchq.ledger_adjustments a
                  WHERE a.id = ANY (v_ids) AND a.tenant = r.tenant AND a.pos = r.pos) AS from_seq,
                 coalesce(s.hi, 0) AS hi, coalesce(s.lo, 0) AS lo
          FROM batchq.tenant_ring r
          -- The first job past the window; none when the tenant has no more.
          LEFT JOIN LATERAL (SELECT q.seq FROM batchq.jobs q WHERE q.pos = r.pos AND q.state = 'queued'
                             ORDER BY q.seq OFFSET c_fold_jobs LIMIT 1) k ON true
          -- How far the window's jobs, and the first past it, would move:
          -- each the sum of the corrections about jobs before it. (Not the
          -- running sums at the corrections themselves: those are about jobs
          -- already claimed, between which nothing queued moves. Corrections
          -- of both signs about jobs ahead of the whole backlog move every
          -- queued job by their sum.) A job sorts before a correction about
          -- itself.
          LEFT JOIN LATERAL (SELECT max(e.shift) FILTER (WHERE e.job) AS hi, min(e.shift) FILTER (WHERE e.job) AS lo
                             FROM (SELECT e.job, sum(e.delta) OVER (ORDER BY e.at, e.job DESC) AS shift
                                   FROM (SELECT d.after_seq AS at, d.delta, false AS job
                                         FROM batchq.ledger_adjustments d
                                         WHERE d.id = ANY (v_ids) AND d.tenant = r.tenant AND d.pos = r.pos
                                         UNION ALL
                                         SELECT q.seq, 0, true
                                         FROM (SELECT q.seq FROM batchq.jobs q WHERE q.pos = r.pos AND q.state = 'queued'
                                               ORDER BY q.seq LIMIT c_fold_jobs + 1) q) e) e) s ON true
          WHERE r.queue = p_queue AND r.tenant = ANY (v_locked)) w
    WHERE NOT (w.next_seq IS NOT NULL AND w.lo >= 0 AND w.hi > 0 AND w.hi < w.share);
    -- The jobs the folds rewrite, locked in id order as every statement that
    -- waits on job rows locks them: claims pass over these meanwhile, not
    -- over a tenant's whole backlog.
    PERFORM 1 FROM batchq.jobs j
    WHERE j.id = ANY (ARRAY(SELECT q.id FROM unnest(v_pos, v_from, v_next) AS w (pos, from_seq, next_seq)
                            CROSS JOIN LATERAL (SELECT q.id FROM batchq.jobs q
                                                WHERE q.pos = w.pos AND q.state = 'queued' AND q.seq > w.from_seq
                                                  AND q.seq < coalesce(w.next_seq, 9223372036854775807)
                                                -- A subquery the planner keeps: as a join, it
                                                -- read every queued job of the queue.
                                                OFFSET 0) q))
      AND j.state = 'queued'
    ORDER BY j.id
    FOR UPDATE;
    FOR v IN
        SELECT r.tenant, r.pos, r.join_round, r.share, w.next_seq FROM batchq.tenant_ring r
        JOIN unnest(v_tenants, v_next) AS w (tenant, next_seq) ON w.tenant = r.tenant
        WHERE r.queue = p_queue AND r.tenant = ANY (v_locked)
        ORDER BY r.tenant
    LOOP
        IF batchq.fold_adjustments(p_queue, v.tenant, v.pos, v.join_round, v.share, v.next_seq, v_ids) THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- rekey re-schedules the queued jobs of (queue, tenant) pairs after a weight
-- or a quantum changed. As in drr, where a visit adds the grant the weight
-- gives at that moment, the new share takes effect on the tenant's next
-- visit: its visits up to the queue's cursor round (the rounds before it, if
-- the tenant has not been served in it) keep what they were granted at the
-- old share, later ones grant the new share. So a job whose
-- cumulative cost C is within what was granted (C <= granted) is due in the
-- cursor's round, and one beyond it is served ceil((C - granted) / share)
-- rounds after the cursor's. The membership is re-based to say exactly that:
-- it joined in the cursor's round with a ledger of C - granted + share (a
-- share too large to add without overflow is left out, and the membership
-- joins the round after). A tenant whose share does not change is left as it
-- is, and one with no queued job keeps its ledger and takes the new share
-- at its next membership. A tenant keeps its ring position either way.
--
-- Ring rows are locked first, in (queue, tenant) order, which holds off
-- enqueues and requeues of these tenants; then every queued job of every
-- pair in one statement, in id order. Locking pair by pair would hold one
-- tenant's rows while waiting for another's, and a recheck locks even a row a
-- claim has just taken, so a completion holding the second could be waiting
-- for the first. The updates then only touch rows this transaction holds.
-- +goose StatementBegin
CREATE FUNCTION batchq.rekey(p_queues text[], p_tenants text[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off -- as enqueue: index access whatever the statistics say
SET jit = off
SET plan_cache_mode = auto -- whatever the session's; custom plans for many tenants, below
AS $$
DECLARE
    v         record;
    v_share   bigint;
    v_cursor  bigint;
    v_start   bigint;
    v_k       bigint;
    v_granted numeric;
    v_before  bigint;
    v_queues  text[];
    v_tenants text[];
    v_pos     bigint[];
BEGIN
    IF cardinality(p_tenants) > 64 THEN -- as enqueue: plans for many tenants
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    PERFORM 1 FROM batchq.tenant_ring r
    JOIN unnest(p_queues, p_tenants) AS p (queue, tenant) ON r.queue = p.queue AND r.tenant = p.tenant
    ORDER BY r.queue COLLATE "C", r.tenant -- queues in byte order, as EnqueueMany runs them
    FOR UPDATE OF r;
    -- Only the pairs whose share changes: the ring rows are held now, and
    -- only their holder changes a share.
    SELECT array_agg(r.queue ORDER BY r.queue, r.tenant), array_agg(r.tenant ORDER BY r.queue, r.tenant),
           array_agg(r.pos ORDER BY r.queue, r.tenant)
    INTO v_queues, v_tenants, v_pos
    FROM (SELECT DISTINCT p.queue, p.tenant FROM unnest(p_queues, p_tenants) AS p (queue, tenant)) p
    JOIN batchq.tenant_ring r ON r.queue = p.queue AND r.tenant = p.tenant
    JOIN batchq.queues q ON q.name = r.queue
    LEFT JOIN batchq.tenants w ON w.name = r.tenant
    WHERE r.share <> batchq.drr_share(q.quantum, coalesce(w.weight, 1));
    IF v_queues IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM batchq.jobs j
    WHERE j.pos = ANY (v_pos) AND j.state = 'queued'
    ORDER BY j.id
    FOR UPDATE OF j;

    FOR v IN
        SELECT r.queue, r.tenant, r.pos, r.join_round, r.share, r.visited
        FROM unnest(v_queues, v_tenants) AS p (queue, tenant)
        JOIN batchq.tenant_ring r ON r.queue = p.queue AND r.tenant = p.tenant
    LOOP
        SELECT batchq.drr_share(q.quantum, coalesce(w.weight, 1)), coalesce(c.round, 0)
        INTO v_share, v_cursor
        FROM batchq.queues q
        LEFT JOIN batchq.tenants w ON w.name = v.tenant
        LEFT JOIN batchq.queue_cursors c ON c.queue = q.name
        WHERE q.name = v.queue;
        -- Pending adjustments first, at the old share: they are about the
        -- ledger the jobs were keyed on.
        PERFORM batchq.fold_adjustments(v.queue, v.tenant, v.pos, v.join_round, v.share);
        -- The rounds granted so far: from the membership's first to the
        -- cursor's. (A membership begins in the cursor's round, or in the
        -- next one after a re-base without the share: then none.) The
        -- cursor's round counts only if the tenant was served in it: its
        -- queued jobs start past what the rounds before had granted. A
        -- tenant still to come in that round (the cursor holds no position)
        -- gets it at the new share, as drr grants on the visit. A re-key
        -- that counted the visit as made re-based the ledger to begin in
        -- that round with the share granted whole, which hides what was
        -- spent: visited remembers it, or a second change before the next
        -- claim would grant the round again.
        v_start := greatest(v_cursor, v.join_round - 1);
        SELECT j.cum - j.cost INTO v_before FROM batchq.jobs j
        WHERE j.pos = v.pos AND j.state = 'queued'
        ORDER BY j.seq LIMIT 1;
        IF v_start >= v.join_round AND v_before <= (v_start - v.join_round)::numeric * v.share
           AND v.visited <> v_cursor THEN
            v_start := v_start - 1;
        END IF;
        v_granted := (v_start - v.join_round + 1)::numeric * v.share;
        v_k := CASE WHEN v_share <= 4611686018427387904 THEN 1 ELSE 0 END;
        UPDATE batchq.jobs j
        SET cum = n.cum, round = batchq.drr_round(v_start + 1 - v_k, n.cum, v_share)
        FROM (SELECT m.id, least(greatest(m.cum - v_granted + v_k * v_share,
                                          -9223372036854775807), 9223372036854775807)::bigint AS cum
              FROM batchq.jobs m
              WHERE m.pos = v.pos AND m.state = 'queued') n
        WHERE j.id = n.id;
        IF FOUND THEN
            UPDATE batchq.tenant_ring r
            SET join_round = v_start + 1 - v_k, share = v_share,
                cum = least(greatest(r.cum - v_granted + v_k * v_share,
                                     -9223372036854775807), 9223372036854775807)::bigint,
                visited = CASE WHEN v_start = v_cursor THEN v_cursor ELSE r.visited END
            WHERE r.queue = v.queue AND r.tenant = v.tenant;
        ELSE
            -- Nothing left to re-key: the ring keeps its ledger, and the
            -- tenant's next job starts a new membership with the new share.
            UPDATE batchq.tenant_ring r SET share = v_share WHERE r.queue = v.queue AND r.tenant = v.tenant;
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER ring_commit_checks_at_commit ON batchq.ring_commit_checks;
DROP FUNCTION batchq.ring_check_at_commit;
DROP TABLE batchq.ring_commit_checks;
DROP SEQUENCE batchq.settings_version;
DROP FUNCTION batchq.rekey;
DROP FUNCTION batchq.apply_adjustments;
DROP FUNCTION batchq.fold_adjustments;
DROP FUNCTION batchq.requeue;
DROP FUNCTION batchq.enqueue;
DROP VIEW batchq.enqueue_results;
DROP FUNCTION batchq.ring_join;
DROP FUNCTION batchq.drr_share;
DROP FUNCTION batchq.drr_round;
DROP FUNCTION batchq.complete;
DROP FUNCTION batchq.claim;
DROP VIEW batchq.claim_results;
DROP TABLE batchq.ledger_adjustments;
DROP TABLE batchq.outcomes;
DROP TYPE batchq.job_outcome;
DROP TABLE batchq.jobs;
DROP TRIGGER queues_keep_jobs ON batchq.queues;
DROP FUNCTION batchq.queues_keep_jobs;
DROP TYPE batchq.job_state;
DROP TABLE batchq.tenant_ring;
DROP SEQUENCE batchq.ring_pos;
DROP TABLE batchq.tenants;
DROP TABLE batchq.queue_cursors;
DROP TABLE batchq.queues;
