-- Enqueueing: the public SQL API any language calls inside its own
-- transaction (docs/sql-api.md), and the insert behind it.

-- insert_jobs inserts a batch of jobs into one queue, all or nothing, keyed
-- in the fair order, and returns one row per input line (ord, 1-based):
-- status 'inserted' with the new id, or 'duplicate' with the id of the job
-- that holds its unique key. When a tenant would pass its bound it writes
-- nothing and returns one row 'queue_full' with the tenant, its bound, how
-- many it has queued and how many the call would add; 'ledger_full' when
-- the tenant's ledger would pass the key ceiling; 'unknown_queue' when the
-- queue does not exist. It raises for none of them, so the caller's
-- transaction stays usable. Its arguments have been checked (batchq.enqueue
-- and its kin); NULL kinds, deadlines, attempts and payloads take the
-- defaults.
--
-- A line whose run-at (p_run_at) is later than this statement is inserted
-- 'scheduled', outside the fair order: it takes no key and no place in its
-- tenant's ledger until maintenance promotes it (batchq.requeue), which keys
-- it then at the tail of its tenant's queue, as if it were enqueued at that
-- moment. Its deadline defaults to its run-at plus the queue's TTL. A
-- tenant's scheduled jobs count toward its bound, with its queued ones, so a
-- promotion never takes a tenant past the bound. They are counted as the
-- queued ones are: first by tenant_ring.scheduled, which this function and
-- requeue keep under the ring row's lock and which a cancel or an expiry
-- leaves high (never low), then exactly, and the count mended, only for a
-- tenant that looks full.
--
-- It locks the tenants' ring rows (ring_join) and counts with fresh
-- snapshots afterwards, which makes the bound exact under concurrent
-- enqueues. Plans are made once per session, index access throughout; a
-- call of over 64 lines plans for its own arrays (docs/design/plans.md).
CREATE OR REPLACE FUNCTION batchq.insert_jobs(
    p_queue        text,
    p_tenant       text[],
    p_kind         text[],
    p_cost         bigint[],
    p_deadline     timestamptz[],
    p_max_attempts integer[],
    p_payload      jsonb[],
    p_unique_key   text[],
    p_run_at       timestamptz[]
) RETURNS SETOF batchq.enqueue_results
LANGUAGE plpgsql
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
    v_ring_cost   numeric[];
    v_ring_new    integer[];
    v_ring_head   bigint[];
    v_ring_bound  integer[];
    v_settings    bigint;
    v_joined      text[];
    v_one         record;
    v_head        bigint;
    v_ringed      boolean := false; -- the one-tenant path called ring_join
    v_lines_cost  numeric;          -- what the one tenant's lines cost in all
    v_one_tenant  boolean := false; -- every line one tenant's, to run now, without a unique key
    v_id          bigint;
    v_sched       boolean[];  -- each line: inserted 'scheduled', for later
    v_any_sched   boolean;
    v_ring_costs  bigint[];   -- each line's cost in its tenant's ledger (0 when scheduled)
    v_ring_sched  integer[];
    v_limit       bigint;
    v_count       bigint;
    v_sched_tenants text[];   -- the tenant of each scheduled job inserted
BEGIN
    -- Held until commit, so the queue cannot go while its new jobs do not
    -- show yet (batchq.queues_keep_jobs).
    SELECT * INTO q FROM batchq.queues WHERE name = p_queue FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, NULL::bigint, 'unknown_queue'::text, NULL::text, NULL::integer, NULL::integer, NULL::integer;
        RETURN;
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- Jobs of one tenant without unique keys, to run now: what an
    -- application's transaction enqueues most often (one job), and what an
    -- import for one tenant sends, in a few short statements. The same steps
    -- as below for that case: the ring row locked (a tenant with nothing
    -- queued joins the ring first, by ring_join, at the round current now),
    -- the head read with a fresh snapshot, the bound by the seq span, the
    -- jobs keyed on the tenant's ledger in line order, the commit-time check
    -- noted. A tenant that looks full, or whose ledger nears the ceiling,
    -- takes the general path.
    -- Told apart with no query for one job, the common case.
    IF v_n = 1 THEN
        v_one_tenant := coalesce(p_unique_key[1], '') = '' AND NOT coalesce(p_run_at[1] > statement_timestamp(), false);
        v_lines_cost := p_cost[1];
    ELSIF p_tenant[1] = ALL (p_tenant) THEN
        v_one_tenant := NOT EXISTS (SELECT 1 FROM unnest(p_unique_key) AS k (k) WHERE k.k <> '')
                        AND NOT coalesce((SELECT bool_or(r.t > statement_timestamp()) FROM unnest(p_run_at) AS r (t)), false);
        v_lines_cost := (SELECT sum(c.c) FROM unnest(p_cost) AS c (c));
    END IF;
    IF v_one_tenant AND p_tenant[1] IS NOT NULL
       AND greatest(cardinality(p_kind), cardinality(p_cost), cardinality(p_deadline), cardinality(p_max_attempts),
                    cardinality(p_payload), cardinality(p_unique_key), cardinality(p_run_at)) <= v_n THEN
        -- Before the ring row is read (docs/design/commit-time-check.md).
        SELECT s.last_value + s.is_called::integer INTO v_settings FROM batchq.settings_version s;
        LOOP
            SELECT r.ctid AS rid, r.pos, r.share, r.cum, r.enq_seq, r.join_round, coalesce(r.scheduled, 0) AS scheduled,
                   coalesce((SELECT t.max_queued FROM batchq.queue_tenants t WHERE t.queue = p_queue AND t.tenant = r.tenant),
                            (SELECT w.max_queued FROM batchq.tenants w WHERE w.name = r.tenant),
                            q.max_per_tenant) AS bound
            INTO v_one
            FROM batchq.tenant_ring r
            WHERE r.queue = p_queue AND r.tenant = p_tenant[1]
            FOR UPDATE OF r;
            EXIT WHEN v_ringed; -- the row as ring_join left it
            IF FOUND AND v_one.pos > 0 THEN
                SELECT j.seq INTO v_head FROM batchq.jobs j
                WHERE j.queue = p_queue AND j.pos = v_one.pos AND j.state = 'queued'
                ORDER BY j.seq LIMIT 1;
            END IF;
            EXIT WHEN v_head IS NOT NULL;
            -- Nothing queued: a new membership, as the general path starts
            -- one, in the round current now (read after ring_join, as there).
            SELECT l.head INTO v_head FROM batchq.ring_join(p_queue, p_tenant, p_cost, false) AS l;
            IF v_head IS NULL THEN
                v_joined := p_tenant[1:1];
                SELECT coalesce(max(c.round), 0) INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = p_queue;
            END IF;
            v_ringed := true;
        END LOOP;
        IF v_joined IS NOT NULL THEN
            v_one.join_round := greatest(v_one.join_round, v_cursor);
        END IF;
        IF (CASE WHEN v_head IS NULL THEN 0 ELSE v_one.enq_seq - v_head + 1 END) + v_n + v_one.scheduled <= v_one.bound
           AND v_one.cum + v_lines_cost <= batchq.key_ceiling()
           AND v_one.join_round + (v_one.cum + v_lines_cost) / v_one.share <= batchq.key_ceiling() THEN
            IF v_n = 1 THEN
                -- One row, without the lines' window: a few statements
                -- fewer nodes to start, and the call that happens most.
                INSERT INTO batchq.jobs (queue, tenant, kind, cost, deadline, payload, state, max_attempts, round, pos, cum,
                                         seq)
                VALUES (p_queue, p_tenant[1], coalesce(nullif(p_kind[1], ''), 'default'), p_cost[1],
                        CASE WHEN p_deadline[1] IS NULL OR p_deadline[1] < '0002-01-01'
                             THEN statement_timestamp() + q.default_ttl ELSE p_deadline[1] END,
                        coalesce(p_payload[1], '{}'::jsonb), 'queued', coalesce(nullif(p_max_attempts[1], 0), q.max_attempts),
                        batchq.drr_round(v_one.join_round, v_one.cum + p_cost[1], v_one.share), v_one.pos,
                        v_one.cum + p_cost[1], v_one.enq_seq + 1)
                RETURNING id INTO v_id;
                RETURN QUERY SELECT 1, v_id, 'inserted'::text, p_tenant[1], NULL::integer, NULL::integer, NULL::integer;
            ELSE
                -- Line order is the tenant's order, so the claim order: rows
                -- go in, and their ids are drawn, in it.
                RETURN QUERY
                WITH lines AS (
                    SELECT x.ord, x.cost, x.kind, x.deadline, x.max_attempts, x.payload,
                           v_one.cum + sum(x.cost) OVER (ORDER BY x.ord) AS cum
                    FROM unnest(p_cost, p_kind, p_deadline, p_max_attempts, p_payload)
                         WITH ORDINALITY AS x (cost, kind, deadline, max_attempts, payload, ord)
                    WHERE x.ord <= v_n
                ), ins AS (
                    INSERT INTO batchq.jobs (queue, tenant, kind, cost, deadline, payload, state, max_attempts, round, pos, cum, seq)
                    SELECT p_queue, p_tenant[1], coalesce(nullif(l.kind, ''), 'default'), l.cost,
                           CASE WHEN l.deadline IS NULL OR l.deadline < '0002-01-01'
                                THEN statement_timestamp() + q.default_ttl ELSE l.deadline END,
                           coalesce(l.payload, '{}'::jsonb), 'queued', coalesce(nullif(l.max_attempts, 0), q.max_attempts),
                           batchq.drr_round(v_one.join_round, l.cum::bigint, v_one.share), v_one.pos, l.cum, v_one.enq_seq + l.ord
                    FROM lines l
                    ORDER BY l.ord
                    RETURNING id, seq
                )
                SELECT (i.seq - v_one.enq_seq)::integer, i.id, 'inserted'::text, p_tenant[1], NULL::integer, NULL::integer,
                       NULL::integer
                FROM ins i
                ORDER BY i.seq;
            END IF;
            UPDATE batchq.tenant_ring r
            SET cum = r.cum + v_lines_cost, enq_seq = r.enq_seq + v_n, join_round = v_one.join_round,
                reached = greatest(r.reached, batchq.drr_round(v_one.join_round, (r.cum + v_lines_cost)::bigint, r.share))
            WHERE r.queue = p_queue AND r.ctid = v_one.rid; -- this transaction holds the row, so its ctid stays
            INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings, joined)
            VALUES (p_queue, batchq.drr_round(v_one.join_round, v_one.cum + 1, v_one.share), p_tenant[1:1],
                    ARRAY[v_one.pos], ARRAY[v_one.enq_seq + 1], v_settings, coalesce(v_joined, '{}'));
            -- As below: workers are woken for a tenant that had nothing queued.
            IF v_joined IS NOT NULL THEN
                PERFORM pg_notify('batchq_jobs', p_queue);
            END IF;
            RETURN;
        END IF;
        -- The general path looks again: ring_join's membership, with no job
        -- keyed in it, is taken up or started afresh there.
        v_joined := NULL;
    END IF;

    -- Kept plans join lines to tenants in nested loops, which costs lines ×
    -- tenants: past 64 × 64, plan for this call's arrays instead
    -- (docs/design/plans.md). An import of many lines for a few tenants
    -- keeps its plans.
    IF v_n > 64 AND v_n::bigint * (SELECT count(DISTINCT t.tenant) FROM unnest(p_tenant) AS t (tenant)) > 4096 THEN
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true), set_config('enable_hashjoin', 'on', true),
                set_config('enable_mergejoin', 'on', true);
    END IF;

    -- Lines to run later: their costs stay out of the ledger until promoted.
    -- A call with none (p_run_at NULL, or every time passed) skips the join.
    v_any_sched := p_run_at IS NOT NULL AND EXISTS (SELECT FROM unnest(p_run_at) AS r (t) WHERE r.t > statement_timestamp());
    v_sched := CASE WHEN v_any_sched
                    THEN ARRAY(SELECT coalesce(r.t > statement_timestamp(), false)
                               FROM generate_series(1, v_n) AS i (n) LEFT JOIN unnest(p_run_at) WITH ORDINALITY AS r (t, n)
                                    ON r.n = i.n
                               ORDER BY i.n)
                    ELSE array_fill(false, ARRAY[v_n]) END;
    v_ring_costs := CASE WHEN v_any_sched
                         THEN ARRAY(SELECT CASE WHEN x.sched THEN 0 ELSE x.cost END
                                    FROM unnest(v_sched, p_cost) WITH ORDINALITY AS x (sched, cost, n) ORDER BY x.n)
                         ELSE p_cost END;

    -- Before ring_join reads the weights (docs/design/commit-time-check.md).
    SELECT s.last_value + s.is_called::integer INTO v_settings FROM batchq.settings_version s;
    SELECT array_agg(l.tenant ORDER BY l.ord), array_agg(l.lines ORDER BY l.ord), array_agg(l.head ORDER BY l.ord),
           array_agg(l.cost ORDER BY l.ord)
    INTO v_ring_tenant, v_ring_lines, v_ring_head, v_ring_cost
    FROM batchq.ring_join(p_queue, p_tenant, v_ring_costs, false) WITH ORDINALITY AS l (tenant, lines, head, cost, ord);
    -- Joined: tenants that had nothing queued and queue a job now. (ring_join
    -- started a membership for a tenant whose lines are all scheduled too;
    -- with no job keyed in it, the next enqueue or promotion starts another.)
    v_joined := ARRAY(SELECT l.tenant FROM unnest(v_ring_tenant, v_ring_head) AS l (tenant, head)
                      WHERE l.head IS NULL
                        AND (NOT v_any_sched
                             OR EXISTS (SELECT 1 FROM unnest(p_tenant, v_sched) AS x (tenant, sched)
                                        WHERE x.tenant = l.tenant AND NOT x.sched)));

    -- Unique keys: a job unfinished, or finished within unique_for, or an
    -- earlier line of this batch holds the key. v_dup is the id of the job
    -- that holds a line's key, v_adds whether the line adds a job.
    v_dup := array_fill(NULL::bigint, ARRAY[v_n]);
    v_adds := array_fill(true, ARRAY[v_n]);
    IF NOT EXISTS (SELECT 1 FROM unnest(p_unique_key) k WHERE k <> '') THEN
        p_unique_key := array_fill(NULL::text, ARRAY[v_n]);
    ELSE
        v_keyed := true;
        -- One key per line: a short array leaves the last lines without.
        p_unique_key := ARRAY(SELECT nullif(u.k, '') FROM unnest(p_tenant, p_unique_key) WITH ORDINALITY AS u (t, k, o)
                              ORDER BY u.o);
        SELECT array_agg(d.existing ORDER BY d.ord),
               array_agg(d.existing IS NULL AND (d.first_ord IS NULL OR d.first_ord = d.ord) ORDER BY d.ord)
        INTO v_dup, v_adds
        FROM (
            SELECT i.ord,
                   CASE WHEN i.k IS NULL THEN NULL ELSE min(i.ord) OVER (PARTITION BY i.k) END AS first_ord,
                   CASE WHEN i.k IS NULL THEN NULL ELSE coalesce(
                       (SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue AND j.unique_key = i.k),
                       -- The window counts back from this statement: a job
                       -- that finished meanwhile is not unfinished.
                       (SELECT o.job_id FROM batchq.outcomes o
                        WHERE q.unique_for > '0' AND o.queue = p_queue AND o.unique_key = i.k
                          AND o.finished_at > statement_timestamp() - q.unique_for
                        ORDER BY o.finished_at DESC LIMIT 1)) END AS existing
            FROM unnest(p_unique_key) WITH ORDINALITY AS i (k, ord)
        ) d;
    END IF;

    -- A tenant that joined the ring in this call joins the round current now,
    -- not the one current when ring_join ran.
    SELECT coalesce(max(c.round), 0) INTO v_cursor
    FROM batchq.queue_cursors c WHERE c.queue = p_queue;

    -- The batch's ring rows (ring_join holds them) and bounds, read once in
    -- ring_join's order, one probe per tenant.
    SELECT array_agg(r.pos ORDER BY l.ord), array_agg(r.share ORDER BY l.ord), array_agg(r.cum ORDER BY l.ord),
           array_agg(r.enq_seq ORDER BY l.ord),
           array_agg(CASE WHEN l.head IS NULL THEN greatest(r.join_round, v_cursor) ELSE r.join_round END ORDER BY l.ord),
           array_agg(coalesce(r.queue_max_queued, r.max_queued, q.max_per_tenant) ORDER BY l.ord),
           array_agg(coalesce(r.scheduled, 0) ORDER BY l.ord)
    INTO v_ring_pos, v_ring_share, v_ring_cum, v_ring_seq, v_ring_round, v_ring_bound, v_ring_sched
    FROM unnest(v_ring_tenant, v_ring_head) WITH ORDINALITY AS l (tenant, head, ord)
    LEFT JOIN LATERAL (SELECT r.pos, r.share, r.cum, r.enq_seq, r.join_round, r.scheduled,
                              (SELECT t.max_queued FROM batchq.queue_tenants t
                               WHERE t.queue = p_queue AND t.tenant = r.tenant) AS queue_max_queued,
                              (SELECT w.max_queued FROM batchq.tenants w WHERE w.name = r.tenant) AS max_queued
                       FROM batchq.tenant_ring r
                       WHERE r.queue = p_queue AND r.tenant = l.tenant
                       LIMIT 1) r ON true;

    -- Each tenant's new jobs: its lines less duplicates, grouped by tenant
    -- in name order, as ring_join lists them.
    IF v_keyed THEN
        SELECT array_agg(c.n ORDER BY c.tenant) INTO v_ring_new
        FROM (SELECT x.tenant,
                     (count(*) FILTER (WHERE x.adds))::integer AS n
              FROM unnest(p_tenant, v_adds) AS x (tenant, adds)
              GROUP BY x.tenant) c;
    ELSE
        v_ring_new := v_ring_lines;
    END IF;


    -- Bounds and ledgers, tenants in name order. A tenant's queue counts
    -- first as the span of seqs from its head to its newest job, never less
    -- than its length, and its scheduled jobs as tenant_ring.scheduled,
    -- never less than their number; only one that looks full is counted
    -- exactly. Its
    -- ledger and last round after this call must stay within the key
    -- ceiling (duplicates counted: a bound from above).
    FOR v_full IN
        SELECT b.tenant, b.pos, b.adding, b.bound, b.upper, b.ledger_full, b.sched
        FROM (SELECT u.tenant, u.pos, u.adding, u.bound, u.sched,
                     CASE WHEN u.head IS NULL THEN 0 ELSE u.enq_seq - u.head + 1 END AS upper,
                     (u.cum + u.cost > batchq.key_ceiling()
                      OR u.join_round + (u.cum + u.cost) / u.share > batchq.key_ceiling()) AS ledger_full
              FROM unnest(v_ring_tenant, v_ring_pos, v_ring_new, v_ring_head, v_ring_seq, v_ring_bound, v_ring_cum,
                          v_ring_cost, v_ring_round, v_ring_share, v_ring_sched)
                   AS u (tenant, pos, adding, head, enq_seq, bound, cum, cost, join_round, share, sched)) b
        WHERE b.adding > 0 AND (b.upper::bigint + b.sched + b.adding > b.bound OR b.ledger_full)
    LOOP
        IF v_full.ledger_full THEN
            RETURN QUERY SELECT 0, NULL::bigint, 'ledger_full'::text, v_full.tenant, NULL::integer, NULL::integer,
                                v_full.adding;
            RETURN;
        END IF;
        SELECT count(*) INTO v_exact FROM (
            SELECT 1 FROM batchq.jobs j
            WHERE j.queue = p_queue AND j.pos = v_full.pos AND j.state = 'queued'
            LIMIT v_full.bound::bigint + 1) c;
        -- Its waiting jobs: queued and scheduled, these counted as far as
        -- decides; a count that found them all mends tenant_ring.scheduled,
        -- which cancels and expiries left high (this call holds the row).
        v_limit := greatest(v_full.bound::bigint + 1 - v_full.adding - v_exact, 0);
        SELECT count(*) INTO v_count FROM (
            SELECT 1 FROM batchq.jobs s
            WHERE s.queue = p_queue AND s.tenant = v_full.tenant AND s.state = 'scheduled'
            LIMIT v_limit) c;
        IF v_count < v_limit AND v_count <> v_full.sched THEN
            UPDATE batchq.tenant_ring r SET scheduled = v_count WHERE r.queue = p_queue AND r.tenant = v_full.tenant;
        END IF;
        IF v_exact::bigint + v_count + v_full.adding > v_full.bound THEN
            -- Full. The counts above stop where they decide; a bound lowered
            -- below the backlog leaves more, which the refusal reports.
            IF v_exact > v_full.bound THEN
                SELECT count(*) INTO v_exact FROM batchq.jobs j
                WHERE j.queue = p_queue AND j.pos = v_full.pos AND j.state = 'queued';
            END IF;
            IF v_count >= v_limit THEN
                SELECT count(*) INTO v_count FROM batchq.jobs s
                WHERE s.queue = p_queue AND s.tenant = v_full.tenant AND s.state = 'scheduled';
            END IF;
            RETURN QUERY SELECT 0, NULL::bigint, 'queue_full'::text, v_full.tenant, v_full.bound,
                                (v_exact + v_count)::integer, v_full.adding;
            RETURN;
        END IF;
    END LOOP;

    -- Keys: each tenant's new jobs continue its ledger in input order. Rows
    -- are inserted, and their ids drawn, in claim order, so a claim reads a
    -- few neighbouring pages.
    WITH keyed AS (
        SELECT x.ord::integer AS ord, x.tenant, coalesce(nullif(x.kind, ''), 'default') AS kind, x.cost,
               -- No deadline (or the zero time) asks for the queue's default
               -- TTL, counted from this statement.
               CASE WHEN x.deadline IS NULL OR x.deadline < '0002-01-01' THEN statement_timestamp() + q.default_ttl
                    ELSE x.deadline END AS deadline,
               coalesce(nullif(x.max_attempts, 0), q.max_attempts) AS max_attempts,
               coalesce(x.payload, '{}'::jsonb) AS payload, x.unique_key, r.pos, r.join_round, r.share,
               (r.cum + sum(x.cost) OVER w)::bigint AS cum,
               r.enq_seq + row_number() OVER w AS seq
        FROM unnest(p_tenant, p_kind, p_cost, p_deadline, p_max_attempts, p_payload, p_unique_key, v_adds)
             WITH ORDINALITY AS x (tenant, kind, cost, deadline, max_attempts, payload, unique_key, adds, ord)
        JOIN unnest(v_ring_tenant, v_ring_pos, v_ring_share, v_ring_cum, v_ring_seq, v_ring_round)
             AS r (tenant, pos, share, cum, enq_seq, join_round) ON r.tenant = x.tenant
        WHERE x.adds AND NOT v_sched[x.ord::integer]
        WINDOW w AS (PARTITION BY x.tenant COLLATE "C" ORDER BY x.ord)
    ), src AS MATERIALIZED (
        -- nextval is evaluated after the sort (it is volatile), so ids follow it.
        SELECT k.*, batchq.drr_round(k.join_round, k.cum, k.share) AS round, nextval('batchq.jobs_id_seq') AS id
        FROM keyed k
        ORDER BY round, k.pos, k.seq
    ), ins_plain AS (
        -- Lines without a key go in without ON CONFLICT, which costs a lock
        -- and a second WAL record per row.
        INSERT INTO batchq.jobs (id, queue, tenant, kind, cost, deadline, payload, unique_key, state,
                                 max_attempts, round, pos, cum, seq)
        OVERRIDING SYSTEM VALUE
        SELECT s.id, p_queue, s.tenant, s.kind, s.cost, s.deadline, s.payload, s.unique_key, 'queued',
               s.max_attempts, s.round, s.pos, s.cum, s.seq
        FROM src s
        WHERE s.unique_key IS NULL
        RETURNING id, jobs.tenant, jobs.pos, jobs.seq, jobs.cum, jobs.cost, jobs.round
    ), sched_src AS MATERIALIZED (
        -- Lines to run later: no key, no ledger; the deadline defaults to
        -- the run-at plus the queue's TTL, at most the last instant before
        -- year 10000, as every deadline is.
        SELECT x.ord::integer AS ord, x.tenant, coalesce(nullif(x.kind, ''), 'default') AS kind, x.cost,
               CASE WHEN x.deadline IS NULL OR x.deadline < '0002-01-01'
                    THEN least(x.run_at + q.default_ttl, '9999-12-31 23:59:59.999999+00'::timestamptz)
                    ELSE x.deadline END AS deadline,
               coalesce(nullif(x.max_attempts, 0), q.max_attempts) AS max_attempts,
               coalesce(x.payload, '{}'::jsonb) AS payload, x.unique_key, x.run_at,
               nextval('batchq.jobs_id_seq') AS id
        FROM unnest(p_tenant, p_kind, p_cost, p_deadline, p_max_attempts, p_payload, p_unique_key, v_adds, p_run_at)
             WITH ORDINALITY AS x (tenant, kind, cost, deadline, max_attempts, payload, unique_key, adds, run_at, ord)
        WHERE v_any_sched AND x.adds AND v_sched[x.ord::integer]
    ), ins_keyed AS (
        -- Every line with a key, queued or scheduled, in one insert and in
        -- key order, so two calls that share keys but no tenant cannot wait
        -- for each other's.
        INSERT INTO batchq.jobs (id, queue, tenant, kind, cost, deadline, payload, unique_key, state,
                                 max_attempts, round, pos, cum, seq, run_after)
        OVERRIDING SYSTEM VALUE
        SELECT k.id, p_queue, k.tenant, k.kind, k.cost, k.deadline, k.payload, k.unique_key, k.state,
               k.max_attempts, k.round, k.pos, k.cum, k.seq, k.run_after
        FROM (SELECT s.id, s.tenant, s.kind, s.cost, s.deadline, s.payload, s.unique_key,
                     'queued'::batchq.job_state AS state, s.max_attempts, s.round, s.pos, s.cum, s.seq,
                     NULL::timestamptz AS run_after
              FROM src s
              WHERE s.unique_key IS NOT NULL
              UNION ALL
              SELECT s.id, s.tenant, s.kind, s.cost, s.deadline, s.payload, s.unique_key, 'scheduled', s.max_attempts,
                     0, 0, 0, 0, s.run_at
              FROM sched_src s
              WHERE s.unique_key IS NOT NULL) k
        ORDER BY k.unique_key COLLATE "C"
        ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
        RETURNING id, jobs.tenant, jobs.pos, jobs.seq, jobs.cum, jobs.cost, jobs.round, jobs.state
    ), ins_sched AS (
        INSERT INTO batchq.jobs (id, queue, tenant, kind, cost, deadline, payload, unique_key, state,
                                 max_attempts, round, pos, cum, seq, run_after)
        OVERRIDING SYSTEM VALUE
        SELECT s.id, p_queue, s.tenant, s.kind, s.cost, s.deadline, s.payload, NULL, 'scheduled',
               s.max_attempts, 0, 0, 0, 0, s.run_at
        FROM sched_src s
        WHERE s.unique_key IS NULL
        RETURNING id, jobs.tenant
    ), ins AS (
        SELECT * FROM ins_plain
        UNION ALL
        SELECT k.id, k.tenant, k.pos, k.seq, k.cum, k.cost, k.round FROM ins_keyed k WHERE k.state = 'queued'
    ), ins_sched_all AS (
        SELECT i.tenant FROM ins_sched i
        UNION ALL
        SELECT k.tenant FROM ins_keyed k WHERE k.state = 'scheduled'
    ), noted AS (
        -- Checked at commit (batchq.ring_check_at_commit). A tenant's first
        -- new job starts earliest.
        INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings, joined)
        SELECT p_queue, min(batchq.drr_round(k.join_round, a.paid + 1, k.share)), array_agg(a.tenant),
               array_agg(a.pos), array_agg(a.first_seq), v_settings, v_joined
        FROM (SELECT i.tenant, min(i.pos) AS pos, min(i.seq) AS first_seq, min(i.cum - i.cost) AS paid
              FROM ins i GROUP BY i.tenant) a
        JOIN unnest(v_ring_tenant, v_ring_round, v_ring_share) AS k (tenant, join_round, share) ON k.tenant = a.tenant
        HAVING count(*) > 0
    ), ring AS (
        UPDATE batchq.tenant_ring r SET cum = a.cum, enq_seq = a.seq, join_round = k.join_round,
                                        reached = greatest(r.reached, a.round)
        FROM (SELECT i.tenant, max(i.cum) AS cum, max(i.seq) AS seq, max(i.round) AS round,
                     (SELECT x.ctid FROM batchq.tenant_ring x WHERE x.queue = p_queue AND x.tenant = i.tenant) AS rid
              FROM ins i GROUP BY i.tenant) a
        JOIN unnest(v_ring_tenant, v_ring_round) AS k (tenant, join_round) ON k.tenant = a.tenant
        WHERE r.ctid = a.rid -- found by its own probe (docs/design/plans.md, "Probes")
    )
    SELECT (SELECT array_agg(s.ord ORDER BY s.ord) FROM (SELECT s.ord FROM src s UNION ALL SELECT t.ord FROM sched_src t) s),
           (SELECT array_agg(s.id ORDER BY s.ord)
            FROM (SELECT s.ord, s.id FROM src s UNION ALL SELECT t.ord, t.id FROM sched_src t) s),
           (SELECT count(*) FROM ins) + (SELECT count(*) FROM ins_sched_all),
           (SELECT array_agg(i.tenant) FROM ins_sched_all i)
    INTO v_src_ord, v_src_id, v_inserted, v_sched_tenants;

    -- Scheduled jobs count toward their tenants' bounds from now on.
    IF v_sched_tenants IS NOT NULL THEN
        UPDATE batchq.tenant_ring r SET scheduled = coalesce(r.scheduled, 0) + a.n
        FROM (SELECT t.tenant, count(*)::integer AS n FROM unnest(v_sched_tenants) AS t (tenant) GROUP BY t.tenant) a
        WHERE r.queue = p_queue AND r.tenant = a.tenant;
    END IF;

    -- Lines whose unique key a concurrent transaction took and committed
    -- meanwhile were keyed but not inserted: their costs come out of the
    -- ledger of the tenant's later lines (this call's own rows) and of the
    -- ring, and the rounds are noted again for the commit-time check.
    IF v_inserted < coalesce(cardinality(v_src_id), 0) THEN
        WITH lines AS (
            SELECT s.id, p_tenant[s.ord] AS tenant, p_cost[s.ord] AS cost,
                   r.enq_seq + row_number() OVER (PARTITION BY p_tenant[s.ord] ORDER BY s.ord) AS seq
            FROM unnest(v_src_ord, v_src_id) AS s (ord, id)
            JOIN unnest(v_ring_tenant, v_ring_seq) AS r (tenant, enq_seq) ON r.tenant = p_tenant[s.ord]
            WHERE NOT v_sched[s.ord] -- scheduled lines hold no place in the ledger
        ), skipped AS (
            SELECT l.tenant, l.seq, l.cost FROM lines l
            WHERE NOT EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.queue = p_queue AND j.id = l.id)
        ), fixed AS (
            UPDATE batchq.jobs j
            SET cum = j.cum - f.delta, round = batchq.drr_round(r.join_round, j.cum - f.delta, r.share)
            FROM (SELECT l.id, (SELECT sum(k.cost) FROM skipped k
                                WHERE k.tenant = l.tenant AND k.seq < l.seq)::bigint AS delta
                  FROM lines l) f
            CROSS JOIN unnest(v_ring_tenant, v_ring_round, v_ring_share) AS r (tenant, join_round, share)
            WHERE j.queue = p_queue AND j.id = f.id AND f.delta > 0 AND r.tenant = j.tenant
            RETURNING j.tenant, j.pos, j.seq, j.cum, j.round,
                      batchq.drr_round(r.join_round, j.cum - j.cost + 1, r.share) AS start
        ), ring AS (
            -- A tenant's last job is among the fixed ones whenever any is.
            UPDATE batchq.tenant_ring r SET cum = a.cum
            FROM (SELECT a.tenant, a.cum,
                         (SELECT y.ctid FROM batchq.tenant_ring y WHERE y.queue = p_queue AND y.tenant = a.tenant) AS rid
                  FROM (SELECT DISTINCT ON (x.tenant) x.tenant, x.cum FROM fixed x ORDER BY x.tenant, x.seq DESC) a) a
            WHERE r.ctid = a.rid -- found by its own probe (docs/design/plans.md, "Probes")
        )
        INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings)
        SELECT p_queue, min(a.min_round), array_agg(a.tenant), array_agg(a.pos), array_agg(a.first_seq), v_settings
        FROM (SELECT x.tenant, min(x.pos) AS pos, min(x.seq) AS first_seq, min(x.start) AS min_round
              FROM fixed x GROUP BY x.tenant) a
        HAVING count(*) > 0;
    END IF;

    -- Each line's new id, NULL for a duplicate.
    IF coalesce(cardinality(v_src_id), 0) = v_n THEN
        v_ids := v_src_id;
    ELSE
        v_ids := array_fill(NULL::bigint, ARRAY[v_n]);
        FOR i IN 1 .. coalesce(cardinality(v_src_ord), 0) LOOP
            v_ids[v_src_ord[i]] := v_src_id[i];
        END LOOP;
    END IF;

    -- Wake the workers waiting on the queue (LISTEN batchq_jobs) only for a
    -- tenant that had nothing queued: one with jobs ahead of these is being
    -- served, or waits for quota. Notifying commits run one at a time.
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

    -- Some lines lost their unique key to a concurrent transaction: report
    -- that transaction's job, or, once it finished, the newest outcome with
    -- the key.
    RETURN QUERY
    SELECT x.ord::integer,
           CASE WHEN ok.id IS NOT NULL THEN x.id ELSE coalesce(x.dup,
                (SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue AND j.unique_key = x.unique_key),
                (SELECT o.job_id FROM batchq.outcomes o WHERE o.queue = p_queue AND o.unique_key = x.unique_key
                 ORDER BY o.finished_at DESC LIMIT 1)) END,
           CASE WHEN ok.id IS NOT NULL THEN 'inserted' ELSE 'duplicate' END,
           x.tenant, NULL::integer, NULL::integer, NULL::integer
    FROM unnest(p_tenant, p_unique_key, v_dup, v_ids) WITH ORDINALITY AS x (tenant, unique_key, dup, id, ord)
    LEFT JOIN batchq.jobs ok ON ok.queue = p_queue AND ok.id = x.id AND ok.id = ANY (v_ids)
    ORDER BY x.ord;
END
$$;

-- enqueue_error is the first job of a call that breaks a rule: {index,
-- sqlstate, field, rule}, or NULL when every job keeps them. The queue's
-- name counts as the first job's. PL/pgSQL, so the session keeps its plan
-- (a SQL function with subqueries is planned on every call), and a generic
-- one: left to choose, PostgreSQL keeps planning a call of one job afresh,
-- which took 0.5 ms of its 0.6 (docs/design/plans.md).
CREATE OR REPLACE FUNCTION batchq.enqueue_error(p_queue text, p_tenant text[], p_kind text[], p_cost bigint[],
                                                p_deadline timestamptz[], p_ttl interval[], p_max_attempts integer[],
                                                p_payload jsonb[], p_unique_key text[], p_run_at timestamptz[],
                                                p_delay interval[])
RETURNS text[]
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF cardinality(p_tenant) > 0 AND batchq.queue_name_error(p_queue) IS NOT NULL THEN
        RETURN ARRAY['1'] || batchq.queue_name_error(p_queue);
    END IF;
    RETURN (SELECT ARRAY[e.ord::text] || e.error
            FROM (SELECT x.ord,
                         coalesce(batchq.job_error(x.tenant, coalesce(nullif(x.kind, ''), 'default'), x.cost,
                                                   nullif(x.deadline, batchq.zero_time()), x.ttl,
                                                   x.max_attempts, x.payload, x.unique_key, statement_timestamp()),
                                  batchq.run_at_error(x.run_at, x.delay, nullif(x.deadline, batchq.zero_time()),
                                                      x.ttl)) AS error
                  FROM unnest(p_tenant, p_kind, p_cost, p_deadline, p_ttl, p_max_attempts, p_payload, p_unique_key,
                              p_run_at, p_delay)
                       WITH ORDINALITY AS x (tenant, kind, cost, deadline, ttl, max_attempts, payload, unique_key,
                                             run_at, delay, ord)
                  OFFSET 0) e -- each job's rules checked once
            WHERE e.error IS NOT NULL
            ORDER BY e.ord
            LIMIT 1);
END
$$;

-- enqueue inserts jobs into one queue inside the caller's transaction, all
-- or nothing: the form package queue calls, one array per field, a job per
-- element of p_tenant. Every other array holds one element per tenant, or
-- is NULL (BQ101 naming the array otherwise: an array cut short would give
-- the last jobs defaults in silence); arrays are read by position, whatever
-- their first index, and one of more dimensions is refused. A NULL array, or a NULL element, asks
-- for the default (kind 'default', the queue's TTL and attempts, payload
-- {}, no unique key, run now); a deadline or run-at before year 2 counts as
-- none. A job whose
-- run-at is later than now waits 'scheduled' until then, and its deadline
-- must come after its run-at. A job that breaks a rule raises (class BQ1); a
-- full tenant, an unknown queue and a full ledger come back as a status row
-- (batchq.insert_jobs), leaving the transaction usable.
CREATE OR REPLACE FUNCTION batchq.enqueue(
    p_queue        text,
    p_tenant       text[],
    p_kind         text[],
    p_cost         bigint[],
    p_deadline     timestamptz[],
    p_max_attempts integer[],
    p_payload      jsonb[],
    p_unique_key   text[],
    p_run_at       timestamptz[] DEFAULT NULL
) RETURNS SETOF batchq.enqueue_results
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    v_n     integer := coalesce(cardinality(p_tenant), 0);
    v_error text[];
    v_bad   record;
BEGIN
    -- The arrays are read by position. One whose first index is not 1
    -- ('[0:1]={a,b}') counts as its elements in order; one of more than one
    -- dimension is refused, as its elements make no list of jobs.
    IF (array_lower(p_tenant, 1) <> 1 OR array_lower(p_kind, 1) <> 1 OR array_lower(p_cost, 1) <> 1
        OR array_lower(p_deadline, 1) <> 1 OR array_lower(p_max_attempts, 1) <> 1
        OR array_lower(p_payload, 1) <> 1 OR array_lower(p_unique_key, 1) <> 1 OR array_lower(p_run_at, 1) <> 1
        OR array_ndims(p_tenant) > 1 OR array_ndims(p_kind) > 1 OR array_ndims(p_cost) > 1
        OR array_ndims(p_deadline) > 1 OR array_ndims(p_max_attempts) > 1 OR array_ndims(p_payload) > 1
        OR array_ndims(p_unique_key) > 1 OR array_ndims(p_run_at) > 1) IS TRUE THEN
        SELECT a.name, a.dims INTO v_bad
        FROM (VALUES (0, 'tenants', array_ndims(p_tenant)), (1, 'kinds', array_ndims(p_kind)),
                     (2, 'costs', array_ndims(p_cost)), (3, 'deadlines', array_ndims(p_deadline)),
                     (4, 'max_attempts', array_ndims(p_max_attempts)), (5, 'payloads', array_ndims(p_payload)),
                     (6, 'unique_keys', array_ndims(p_unique_key)), (7, 'run_ats', array_ndims(p_run_at)))
             AS a (ord, name, dims)
        WHERE a.dims > 1
        ORDER BY a.ord
        LIMIT 1;
        IF FOUND THEN
            PERFORM batchq.raise_invalid_argument('enqueue', v_bad.name,
                format('must be a one-dimensional array, an element per job (got %s dimensions)', v_bad.dims));
        END IF;
        p_tenant := p_tenant[:];
        p_kind := p_kind[:];
        p_cost := p_cost[:];
        p_deadline := p_deadline[:];
        p_max_attempts := p_max_attempts[:];
        p_payload := p_payload[:];
        p_unique_key := p_unique_key[:];
        p_run_at := p_run_at[:];
    END IF;
    -- A call of no jobs refuses a name no queue can have, as a call of
    -- some does and as enqueue_jobs does.
    IF v_n = 0 AND batchq.queue_name_error(p_queue) IS NOT NULL THEN
        PERFORM batchq.raise_invalid_job(0, batchq.queue_name_error(p_queue));
    END IF;
    IF coalesce(cardinality(p_kind), v_n) <> v_n OR coalesce(cardinality(p_cost), v_n) <> v_n
       OR coalesce(cardinality(p_deadline), v_n) <> v_n OR coalesce(cardinality(p_max_attempts), v_n) <> v_n
       OR coalesce(cardinality(p_payload), v_n) <> v_n OR coalesce(cardinality(p_unique_key), v_n) <> v_n
       OR coalesce(cardinality(p_run_at), v_n) <> v_n THEN
        SELECT a.name, a.got INTO v_bad
        FROM (VALUES (1, 'kinds', cardinality(p_kind)), (2, 'costs', cardinality(p_cost)),
                     (3, 'deadlines', cardinality(p_deadline)), (4, 'max_attempts', cardinality(p_max_attempts)),
                     (5, 'payloads', cardinality(p_payload)), (6, 'unique_keys', cardinality(p_unique_key)),
                     (7, 'run_ats', cardinality(p_run_at))) AS a (ord, name, got)
        WHERE a.got <> v_n
        ORDER BY a.ord
        LIMIT 1;
        PERFORM batchq.raise_invalid_argument('enqueue', v_bad.name,
            format('must hold one element per tenant, or be NULL (got %s for %s)', v_bad.got, v_n));
    END IF;
    v_error := batchq.enqueue_error(p_queue, p_tenant, p_kind, p_cost, p_deadline, NULL, p_max_attempts,
                                    p_payload, p_unique_key, p_run_at, NULL);
    IF v_error IS NOT NULL THEN
        PERFORM batchq.raise_invalid_job(v_error[1]::integer, v_error[2:4]);
    END IF;
    RETURN QUERY SELECT * FROM batchq.insert_jobs(p_queue, p_tenant, p_kind, p_cost, p_deadline, p_max_attempts,
                                                  p_payload, p_unique_key, p_run_at);
END
$$;

-- raise_refused raises a status row insert_jobs returned instead of ids:
-- queue_full (BQ200), unknown_queue (BQ201) or ledger_full (BQ202).
CREATE OR REPLACE FUNCTION batchq.raise_refused(p_queue text, r batchq.enqueue_results) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    CASE r.status
    WHEN 'queue_full' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BQ200',
            MESSAGE = format('batchq: queue_full: tenant %s has %s queued %s in queue %s (bound %s); %s more %s',
                             batchq.quote(r.tenant), r.queued, CASE WHEN r.queued = 1 THEN 'job' ELSE 'jobs' END,
                             batchq.quote(p_queue), r.bound, r.adding,
                             CASE WHEN r.adding = 1 THEN 'does not fit' ELSE 'do not fit' END),
            DETAIL = jsonb_build_object('queue', p_queue, 'tenant', r.tenant, 'bound', r.bound, 'queued', r.queued,
                                       'adding', r.adding)::text;
    WHEN 'unknown_queue' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BQ201',
            MESSAGE = format('batchq: unknown queue: %s', batchq.quote(p_queue)),
            DETAIL = jsonb_build_object('queue', p_queue)::text;
    WHEN 'ledger_full' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BQ202',
            MESSAGE = format('batchq: ledger_full: tenant %s in queue %s has no room left in its ledger; '
                             'its queued jobs must drain before it takes more', batchq.quote(r.tenant),
                             batchq.quote(p_queue)),
            DETAIL = jsonb_build_object('queue', p_queue, 'tenant', r.tenant)::text;
    ELSE
        NULL;
    END CASE;
END
$$;

-- run_at_of is when a job given a run_at and a delay, as enqueue_job and
-- enqueue_jobs take them (checked by run_at_error), may first run: its
-- run_at, or its delay from now; NULL for now. A run_at before year 2 (Go's
-- zero time) is none, beside a delay too.
CREATE OR REPLACE FUNCTION batchq.run_at_of(run_at timestamptz, delay interval) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN coalesce(CASE WHEN run_at >= '0002-01-01' THEN run_at END, statement_timestamp() + nullif(delay, interval '0'));

-- enqueue_job inserts one job inside the caller's transaction and returns
-- its id, or the id of the job that already holds its unique key with
-- duplicate = true. Call it with named arguments:
--
--   SELECT * FROM batchq.enqueue_job(queue => 'summaries', tenant => 'acme', cost => 1200,
--                                    payload => '{"doc": 42}', ttl => '1 hour');
--
-- Defaults: kind 'default', payload {}, the queue's TTL and attempts, no
-- unique key, run now. deadline and ttl are alternatives; a ttl of 0 is
-- none. run_at (a time) and delay (from now) are alternatives too: the job
-- waits 'scheduled' until then, and a ttl counts from then. A job
-- that breaks a rule, a full tenant, an unknown queue and a full ledger
-- raise (classes BQ1 and BQ2), which aborts the transaction as any error
-- does.
CREATE OR REPLACE FUNCTION batchq.enqueue_job(
    queue        text,
    tenant       text,
    cost         bigint,
    payload      jsonb DEFAULT NULL,
    kind         text DEFAULT NULL,
    deadline     timestamptz DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    unique_key   text DEFAULT NULL,
    run_at       timestamptz DEFAULT NULL,
    delay        interval DEFAULT NULL
) RETURNS TABLE (job_id bigint, duplicate boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_variable
DECLARE
    v_error text[];
    r       batchq.enqueue_results;
BEGIN
    -- Go's zero time is no deadline, as in enqueue and enqueue_jobs.
    deadline := nullif(deadline, batchq.zero_time());
    v_error := coalesce(batchq.queue_name_error(queue),
                        batchq.job_error(tenant, coalesce(nullif(kind, ''), 'default'), cost, deadline, ttl,
                                         max_attempts, payload, unique_key, statement_timestamp()),
                        batchq.run_at_error(run_at, delay, deadline, ttl));
    IF v_error IS NOT NULL THEN
        PERFORM batchq.raise_invalid_job(0, v_error);
    END IF;
    run_at := batchq.run_at_of(run_at, delay);
    SELECT * INTO r
    FROM batchq.insert_jobs(queue, ARRAY[tenant], ARRAY[kind], ARRAY[cost],
                            ARRAY[coalesce(deadline, greatest(run_at, statement_timestamp()) + nullif(ttl, interval '0'))],
                            ARRAY[max_attempts], ARRAY[payload], ARRAY[unique_key], ARRAY[run_at]);
    PERFORM batchq.raise_refused(queue, r);
    RETURN QUERY SELECT r.job_id, r.status = 'duplicate';
END
$$;

-- job_field_error is the rule for one field of a job given as JSON
-- (enqueue_jobs): NULL when the field is known and of its type, else
-- {sqlstate, field, rule}. Whole numbers are checked here, their ranges with
-- the job's other rules.
CREATE OR REPLACE FUNCTION batchq.job_field_error(key text, value jsonb) RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN key NOT IN ('tenant', 'cost', 'payload', 'kind', 'deadline', 'ttl', 'max_attempts', 'unique_key', 'run_at',
                         'delay') THEN
            ARRAY['BQ104', key, 'is not a field of a job (tenant, cost, payload, kind, deadline, ttl, max_attempts, unique_key, run_at, delay)']
        WHEN key = 'payload' OR jsonb_typeof(value) = 'null' THEN NULL
        WHEN key IN ('tenant', 'kind', 'unique_key', 'deadline', 'run_at') AND jsonb_typeof(value) <> 'string' THEN
            ARRAY['BQ104', key, format('must be a string (got %s)', jsonb_typeof(value))]
        WHEN key IN ('ttl', 'delay') AND jsonb_typeof(value) NOT IN ('string', 'number') THEN
            ARRAY['BQ104', key, format('must be a string or a number (got %s)', jsonb_typeof(value))]
        WHEN key IN ('ttl', 'delay') AND jsonb_typeof(value) = 'number' AND abs(value::text::numeric) > 300000000000 THEN
            ARRAY['BQ103', key, format('must be at most 300000000000 seconds either way (got %s)', batchq.json_shown(value))]
        -- Seconds below zero by less than a microsecond may make a zero
        -- interval, which would read as none: still negative. (Larger ones
        -- are refused with the job's other rules, as a duration.) Compared
        -- as numeric: -1e-400 is no double.
        WHEN key IN ('ttl', 'delay') AND jsonb_typeof(value) = 'number' AND value::text::numeric < 0
             AND value::text::numeric > -0.000001 THEN
            ARRAY['BQ103', key, format('must be %s 0 (got %s)', CASE key WHEN 'ttl' THEN '>' ELSE '>=' END, batchq.json_shown(value))]
        -- A ttl of less than a microsecond would make a zero interval,
        -- which reads as none (the queue's TTL): refused, not lengthened.
        WHEN key = 'ttl' AND jsonb_typeof(value) = 'number' AND value::text::numeric > 0
             AND value::text::numeric < 0.000001 THEN
            ARRAY['BQ103', key, format('must be 0 (none) or at least 0.000001 seconds (got %s)', batchq.json_shown(value))]
        WHEN key IN ('deadline', 'run_at')
             AND value #>> '{}' !~* '^\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]\d\d:[0-5]\d)$' THEN
            ARRAY['BQ103', key, format('must be an RFC 3339 time such as "2026-12-01T02:00:00Z" (got %s)', batchq.json_shown(value))]
        WHEN key IN ('cost', 'max_attempts') AND jsonb_typeof(value) <> 'number' THEN
            ARRAY['BQ104', key, format('must be a number (got %s)', jsonb_typeof(value))]
        WHEN key = 'cost' AND (value::text::numeric <> trunc(value::text::numeric)
                               OR abs(value::text::numeric) > 9223372036854775807) THEN
            ARRAY['BQ101', key, format('must be in 1..%s (got %s)', batchq.max_cost(), batchq.json_shown(value))]
        WHEN key = 'max_attempts' AND (value::text::numeric <> trunc(value::text::numeric)
                                       OR abs(value::text::numeric) > 2147483647) THEN
            ARRAY['BQ101', key, format('must be in 1..%s, or 0 for the queue''s setting (got %s)',
                                       batchq.max_attempts_limit(), batchq.json_shown(value))]
    END;

-- json_interval reads a ttl given as JSON: an interval's text, or seconds.
CREATE OR REPLACE FUNCTION batchq.json_interval(value jsonb) RETURNS interval
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE jsonb_typeof(value)
        WHEN 'number' THEN make_interval(secs => value::text::double precision)
        WHEN 'string' THEN (value #>> '{}')::interval
    END;

-- enqueue_jobs inserts many jobs into one queue inside the caller's
-- transaction, all or nothing. jobs is a JSON array of objects with the
-- fields of enqueue_job: tenant and cost (required), payload, kind,
-- deadline (RFC 3339), ttl (a PostgreSQL interval such as "1 hour", or
-- seconds), max_attempts, unique_key, run_at (RFC 3339) or delay (as ttl).
-- A payload of JSON null is stored as
-- null, as the Go client stores it; a missing one is {}. It returns a row per job, in order:
-- its place (ord, from 1), its id, and whether it was a duplicate. Errors
-- as enqueue_job's, the index of the job in their DETAIL.
CREATE OR REPLACE FUNCTION batchq.enqueue_jobs(queue text, jobs jsonb)
RETURNS TABLE (ord integer, job_id bigint, duplicate boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_variable
DECLARE
    v_tenant       text[];
    v_kind         text[];
    v_cost         bigint[];
    v_deadline     timestamptz[];
    v_ttl          interval[];
    v_max_attempts integer[];
    v_payload      jsonb[];
    v_unique_key   text[];
    v_run_at       timestamptz[];
    v_delay        interval[];
    v_error        text[];
    v_bad          record;
    r              batchq.enqueue_results;
BEGIN
    -- A name no queue can have is refused as enqueue_job refuses it, also
    -- in a call of no jobs; it counts as the first job's, as in
    -- enqueue_error.
    v_error := batchq.queue_name_error(queue);
    IF v_error IS NOT NULL THEN
        PERFORM batchq.raise_invalid_job(CASE WHEN jsonb_typeof(jobs) = 'array' AND jsonb_array_length(jobs) > 0
                                              THEN 1 ELSE 0 END, v_error);
    END IF;
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'BQ104',
            MESSAGE = format('batchq: invalid job: jobs: must be a JSON array of objects (got %s)',
                             coalesce(jsonb_typeof(jobs), 'null')),
            COLUMN = 'jobs',
            DETAIL = jsonb_build_object('index', 0, 'field', 'jobs', 'rule', 'must be a JSON array of objects')::text;
    END IF;
    -- Each job must be an object of known fields with their JSON types.
    SELECT j.ord, e.error INTO v_bad
    FROM jsonb_array_elements(jobs) WITH ORDINALITY AS j (job, ord)
    CROSS JOIN LATERAL (
        SELECT CASE WHEN jsonb_typeof(j.job) <> 'object' THEN
                        ARRAY['BQ104', 'job', format('must be a JSON object (got %s)', jsonb_typeof(j.job))]
                    ELSE (SELECT f.error
                          FROM (SELECT f.key, batchq.job_field_error(f.key, f.value) AS error
                                FROM jsonb_each(j.job) AS f (key, value) OFFSET 0) f
                          WHERE f.error IS NOT NULL
                          ORDER BY f.key LIMIT 1)
               END AS error) e
    WHERE e.error IS NOT NULL
    ORDER BY j.ord LIMIT 1;
    IF FOUND THEN
        PERFORM batchq.raise_invalid_job(v_bad.ord::integer, v_bad.error);
    END IF;

    -- Deadlines and intervals that do not parse are named with their job.
    BEGIN
        SELECT array_agg(j.job->>'tenant' ORDER BY j.ord), array_agg(j.job->>'kind' ORDER BY j.ord),
               array_agg((j.job->>'cost')::numeric::bigint ORDER BY j.ord),
               array_agg((j.job->>'deadline')::timestamptz ORDER BY j.ord),
               array_agg(batchq.json_interval(j.job->'ttl') ORDER BY j.ord),
               array_agg((j.job->>'max_attempts')::numeric::integer ORDER BY j.ord),
               array_agg(j.job->'payload' ORDER BY j.ord), array_agg(j.job->>'unique_key' ORDER BY j.ord),
               array_agg((j.job->>'run_at')::timestamptz ORDER BY j.ord),
               array_agg(batchq.json_interval(j.job->'delay') ORDER BY j.ord)
        INTO v_tenant, v_kind, v_cost, v_deadline, v_ttl, v_max_attempts, v_payload, v_unique_key, v_run_at, v_delay
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS j (job, ord);
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow
                   OR invalid_time_zone_displacement_value OR invalid_text_representation
                   OR numeric_value_out_of_range THEN
        FOR v_bad IN SELECT j.ord, j.job FROM jsonb_array_elements(jobs) WITH ORDINALITY AS j (job, ord) ORDER BY j.ord LOOP
            BEGIN
                PERFORM (v_bad.job->>'deadline')::timestamptz;
            EXCEPTION WHEN OTHERS THEN
                PERFORM batchq.raise_invalid_job(v_bad.ord::integer,
                    ARRAY['BQ103', 'deadline', format('must be a time such as "2026-12-01T02:00:00Z" (got %s)',
                                                      batchq.quote(v_bad.job->>'deadline'))]);
            END;
            BEGIN
                PERFORM batchq.json_interval(v_bad.job->'ttl');
            EXCEPTION WHEN OTHERS THEN
                PERFORM batchq.raise_invalid_job(v_bad.ord::integer,
                    ARRAY['BQ103', 'ttl', format('must be an interval such as "1 hour", or a number of seconds (got %s)',
                                                 batchq.json_shown(v_bad.job->'ttl'))]);
            END;
            BEGIN
                PERFORM (v_bad.job->>'run_at')::timestamptz;
            EXCEPTION WHEN OTHERS THEN
                PERFORM batchq.raise_invalid_job(v_bad.ord::integer,
                    ARRAY['BQ103', 'run_at', format('must be a time such as "2026-12-01T02:00:00Z" (got %s)',
                                                    batchq.quote(v_bad.job->>'run_at'))]);
            END;
            BEGIN
                PERFORM batchq.json_interval(v_bad.job->'delay');
            EXCEPTION WHEN OTHERS THEN
                PERFORM batchq.raise_invalid_job(v_bad.ord::integer,
                    ARRAY['BQ103', 'delay', format('must be an interval such as "10 minutes", or a number of seconds (got %s)',
                                                   batchq.json_shown(v_bad.job->'delay'))]);
            END;
        END LOOP;
        RAISE; -- no single job's: raise what it was
    END;

    v_error := batchq.enqueue_error(queue, v_tenant, v_kind, v_cost, v_deadline, v_ttl, v_max_attempts, v_payload,
                                    v_unique_key, v_run_at, v_delay);
    IF v_error IS NOT NULL THEN
        PERFORM batchq.raise_invalid_job(v_error[1]::integer, v_error[2:4]);
    END IF;
    -- When each job may first run, once: its deadline counts from it.
    v_run_at := ARRAY(SELECT batchq.run_at_of(d.run_at, d.delay)
                      FROM unnest(v_run_at, v_delay) WITH ORDINALITY AS d (run_at, delay, n)
                      ORDER BY d.n);
    FOR r IN
        SELECT * FROM batchq.insert_jobs(queue, v_tenant, v_kind, v_cost,
                                         ARRAY(SELECT coalesce(nullif(d.deadline, batchq.zero_time()),
                                                               greatest(d.run_at, statement_timestamp())
                                                               + nullif(d.ttl, interval '0'))
                                               FROM unnest(v_deadline, v_ttl, v_run_at)
                                                    WITH ORDINALITY AS d (deadline, ttl, run_at, n)
                                               ORDER BY d.n),
                                         v_max_attempts, v_payload, v_unique_key, v_run_at)
    LOOP
        PERFORM batchq.raise_refused(queue, r);
        ord := r.ord;
        job_id := r.job_id;
        duplicate := r.status = 'duplicate';
        RETURN NEXT;
    END LOOP;
END
$$;
