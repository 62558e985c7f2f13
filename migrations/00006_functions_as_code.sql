-- +goose Up

-- From here on migrations hold the schema only: the text of every function
-- lives in db/functions/, one file per concern, and `batchq migrate up`
-- applies those files after the migrations whenever their text changed
-- (migrations.Up). This table records what it applied.
CREATE TABLE batchq.function_files (
    name       text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Functions whose arguments change: db/functions creates them anew.
-- complete and the finishing calls now name their queue, ring_join takes the
-- jobs' costs, rekey re-keys one queue at a time.
DROP FUNCTION batchq.complete(bigint[], uuid[], bigint[], text[]);
DROP FUNCTION batchq.ring_join(text, text[], boolean);
DROP FUNCTION batchq.rekey(text[], text[]);

-- The ranges within which no key, ledger or round of the fair order can
-- overflow (docs/design/fair-order.md, "Ranges"). Rows written before are
-- left as they are (NOT VALID); every new value is checked.
ALTER TABLE batchq.tenants
    ADD CONSTRAINT tenants_weight_range CHECK (weight BETWEEN 0.001 AND 1000000) NOT VALID;
ALTER TABLE batchq.queues
    ADD CONSTRAINT queues_quantum_range CHECK (quantum <= 1000000000) NOT VALID;

-- A paused queue hands out no job: claims find nothing until it is resumed,
-- while enqueues, running jobs and maintenance go on.
ALTER TABLE batchq.queues ADD COLUMN paused_at timestamptz;

-- An operator asked the job's worker to stop it: the heartbeat tells the
-- worker, which cancels the handler, and every way the run ends but success
-- finishes it as 'cancelled'.
ALTER TABLE batchq.jobs ADD COLUMN cancel_requested_at timestamptz;

-- A tenant's weight and bound in one queue, over its settings for every
-- queue (batchq.tenants).
CREATE TABLE batchq.queue_tenants (
    queue      text NOT NULL REFERENCES batchq.queues (name) ON DELETE CASCADE,
    tenant     text NOT NULL CHECK (octet_length(tenant) BETWEEN 1 AND 256),
    weight     double precision CHECK (weight BETWEEN 0.001 AND 1000000),
    max_queued integer CHECK (max_queued > 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, tenant)
);

-- +goose Down

-- Back to release 0.1.0: drop every function (and with them the two
-- triggers), then create them as migrations 00002, 00004 and 00005 did.
-- Re-run release 0.1.0's grants afterwards: dropping a function drops what
-- was granted on it.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    LOOP
        SELECT p.oid::regprocedure INTO f FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'batchq'::regnamespace LIMIT 1;
        EXIT WHEN f IS NULL;
        EXECUTE format('DROP FUNCTION %s CASCADE', f);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP TABLE batchq.queue_tenants;
ALTER TABLE batchq.jobs DROP COLUMN cancel_requested_at;
ALTER TABLE batchq.queues DROP COLUMN paused_at;
ALTER TABLE batchq.queues DROP CONSTRAINT queues_quantum_range;
ALTER TABLE batchq.tenants DROP CONSTRAINT tenants_weight_range;
DROP TABLE batchq.function_files;

-- Release 0.1.0's functions, triggers and privileges, as it shipped them.
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

CREATE FUNCTION batchq.drr_round(join_round bigint, cum bigint, share bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN join_round + greatest((cum - 1) / share + 1, 1) - 1;

CREATE FUNCTION batchq.drr_share(quantum bigint, weight double precision) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN weight = 1 THEN greatest(quantum, 1)
        WHEN quantum * weight >= 9223372036854775807::double precision THEN 9223372036854775807
        ELSE greatest(1, trunc(quantum * weight)::bigint
                         + (quantum * weight - trunc(quantum * weight) >= 0.5)::integer)
    END;

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

-- +goose StatementBegin
CREATE FUNCTION batchq.tenant_usage(since timestamptz, until timestamptz)
RETURNS SETOF batchq.tenant_usage_rows
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH w AS (
    SELECT o.queue,
           o.tenant,
           count(*) AS jobs,
           count(*) FILTER (WHERE o.outcome = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE o.outcome = 'failed')    AS failed,
           count(*) FILTER (WHERE o.outcome = 'expired')   AS expired,
           count(*) FILTER (WHERE o.outcome = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE o.outcome = 'discarded') AS discarded,
           coalesce(sum(coalesce(o.actual_cost, o.estimated_cost)) FILTER (WHERE o.outcome = 'succeeded'), 0)::bigint AS succeeded_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'failed'), 0)::bigint    AS failed_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'expired'), 0)::bigint   AS expired_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'cancelled'), 0)::bigint AS cancelled_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'discarded'), 0)::bigint AS discarded_tokens,
           coalesce(sum(o.actual_cost), 0)::bigint AS actual_tokens,
           -- What the ledger was charged: every attempt at the estimate (a
           -- release hands its attempt back with its charge), the last
           -- attempt of a succeeded job at its actual cost.
           coalesce(sum(CASE WHEN o.outcome = 'succeeded'
                             THEN o.estimated_cost * (o.attempts - 1) + coalesce(o.actual_cost, o.estimated_cost)
                             ELSE o.estimated_cost * o.attempts END), 0)::bigint AS served_tokens,
           percentile_cont(0.5)  WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at) AS wait_p95
    FROM batchq.outcomes o
    WHERE o.finished_at >= tenant_usage.since AND o.finished_at < tenant_usage.until
    GROUP BY o.queue, o.tenant
), s AS (
    SELECT w.*, coalesce(t.weight, 1) AS weight
    FROM w LEFT JOIN batchq.tenants t ON t.name = w.tenant
), r AS (
    -- Weights relative to the queue's largest, which add up without
    -- overflow however large the weights (two of 1e308 would not).
    SELECT s.*, s.weight / max(s.weight) OVER (PARTITION BY s.queue) AS rel
    FROM s
)
SELECT r.queue, r.tenant, r.jobs, r.succeeded, r.failed, r.expired, r.cancelled, r.discarded,
       r.succeeded_tokens, r.failed_tokens, r.expired_tokens, r.cancelled_tokens, r.discarded_tokens,
       r.actual_tokens, r.served_tokens, r.wait_p50, r.wait_p95, r.weight,
       r.served_tokens::double precision / nullif(sum(r.served_tokens) OVER (PARTITION BY r.queue), 0) AS token_share,
       r.rel / sum(r.rel) OVER (PARTITION BY r.queue) AS weight_share
FROM r
ORDER BY r.queue, r.tenant
$$;
-- +goose StatementEnd

COMMENT ON FUNCTION batchq.tenant_usage IS 'Usage per queue and tenant of the jobs that finished in [since, until).';

ALTER FUNCTION batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

ALTER FUNCTION batchq.requeue(text, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

ALTER FUNCTION batchq.apply_adjustments(text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

ALTER FUNCTION batchq.ring_check_at_commit()
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

REVOKE EXECUTE ON FUNCTION
    batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[]),
    batchq.requeue(text, integer),
    batchq.apply_adjustments(text),
    batchq.ring_join(text, text[], boolean),
    batchq.rekey(text[], text[]),
    batchq.fold_adjustments(text, text, bigint, bigint, bigint, bigint, bigint[]),
    batchq.ring_check_at_commit()
FROM PUBLIC;
