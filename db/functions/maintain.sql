-- Maintenance, run by the worker pools of a queue in turns: rescue, expiry
-- and requeue. Each skips rows others hold, so any number of processes may
-- run it at once.
-- Each refuses a queue that does not exist (BQ201), as a claim does: a
-- worker or a cron job with its queue's name wrong, or whose queue was
-- deleted, hears of it rather than finding nothing to do for ever.

-- maintenance_turn reports whether a worker pool's periodic pass over
-- p_queue is its to run: whether no pass of the queue began within the last
-- p_every_us microseconds, by the server's clock, or the last began more
-- than that in the future (the clock was set back). It notes the pass as
-- begun when it says yes, so of pools asking at once exactly one is told yes
-- (the others wait on its row, then find it new). A fleet of worker
-- processes then runs about one pass per interval, where each ran its own; a
-- pool whose turn comes passes for them all, as every pass covers the whole
-- queue. Calls of rescue, expire, requeue, due_schedules and
-- apply_adjustments made otherwise (Client.Maintain, a cron job) ask no
-- turn. A queue that is not there gets a yes, for its pass to say so.
--
-- It takes the queue's row (FOR KEY SHARE) before the turn's, so a turn is
-- never noted for a queue being deleted. Held rows are waited for up to
-- 200 ms; past that (a transaction left open on the turn's row, say) the
-- answer is yes: a pass too many costs less than a fleet without one.
CREATE OR REPLACE FUNCTION batchq.maintenance_turn(p_queue text, p_every_us bigint) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    v_mine boolean;
BEGIN
    PERFORM batchq.check_queue_argument('maintenance turn', p_queue);
    IF p_every_us IS NULL OR p_every_us < 0 THEN
        PERFORM batchq.raise_invalid_argument('maintenance turn', 'every_us',
            format('must be >= 0 (got %s)', coalesce(p_every_us::text, 'null')));
    END IF;
    -- Most asks come within an interval of a pass: a plain read says no to
    -- them, locking nothing (a lock on the queue's row would be written into
    -- it, beside its enqueues' locks, once a tick per pool). A pass it finds
    -- has committed, so no is right; one that looks old is decided below,
    -- under the locks.
    IF EXISTS (SELECT 1 FROM batchq.maintenance_turns m
               WHERE m.queue = p_queue
                 AND abs(extract(epoch FROM clock_timestamp() - m.passed_at)) * 1000000 < p_every_us) THEN
        RETURN false;
    END IF;
    BEGIN
        PERFORM 1 FROM batchq.queues q WHERE q.name = p_queue FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN true; -- the pass says so (BQ201)
        END IF;
        -- The time is read once the row is held, so one that waited for
        -- another's turn finds it new. Measured as a difference, which no
        -- p_every_us overflows; either way, so a clock set back passes too.
        INSERT INTO batchq.maintenance_turns AS m (queue, passed_at) VALUES (p_queue, clock_timestamp())
        ON CONFLICT (queue) DO UPDATE SET passed_at = clock_timestamp()
        WHERE abs(extract(epoch FROM clock_timestamp() - m.passed_at)) * 1000000 >= p_every_us
        RETURNING true INTO v_mine;
    EXCEPTION WHEN lock_not_available THEN
        RETURN true;
    END;
    RETURN coalesce(v_mine, false);
END
$$;

-- check_limit refuses a maintenance batch size outside 1..100,000.
CREATE OR REPLACE FUNCTION batchq.check_limit(p_function text, p_queue text, p_limit integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM batchq.check_queue_argument(p_function, p_queue);
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 100000 THEN
        PERFORM batchq.raise_invalid_argument(p_function, 'limit',
            format('must be in 1..100000 (got %s)', coalesce(p_limit::text, 'null')));
    END IF;
END
$$;

-- rescue sends up to p_limit running jobs of p_queue whose lease expired
-- (their worker died or stalled) back to 'retrying', due now, while
-- attempts and deadline allow; the others are finished as 'failed' or
-- 'expired', and one an operator cancelled as 'cancelled'. Returns each
-- job, with its outcome when it has one.
CREATE OR REPLACE FUNCTION batchq.rescue(p_queue text, p_limit integer)
RETURNS TABLE (id bigint, retrying boolean, tenant text, cost bigint, outcome text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v record;
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        PERFORM batchq.check_limit('rescue', p_queue, p_limit);
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
    SELECT array_agg(l.id) FILTER (WHERE l.fate = 'retrying') AS retry,
           array_agg(l.id) FILTER (WHERE l.fate = 'expired') AS expired,
           array_agg(l.id) FILTER (WHERE l.fate = 'failed') AS failed,
           array_agg(l.id) FILTER (WHERE l.fate = 'cancelled') AS cancelled,
           array_agg(l.reason) FILTER (WHERE l.fate = 'cancelled') AS reasons
    INTO v
    FROM (SELECT j.id, j.last_error AS reason,
                 CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN j.attempt < j.max_attempts AND j.deadline > now() THEN 'retrying'
                      WHEN j.deadline <= now() THEN 'expired'
                      ELSE 'failed' END AS fate
          FROM batchq.jobs j
          WHERE j.queue = p_queue AND j.state = 'running' AND j.lease_expires_at < now()
          ORDER BY j.lease_expires_at
          LIMIT p_limit
          FOR UPDATE SKIP LOCKED) l;
    IF v.retry IS NOT NULL THEN
        RETURN QUERY
        UPDATE batchq.jobs j
        SET state = 'retrying', run_after = now(), last_error = 'lease expired before its worker finished it',
            lease_token = NULL, lease_expires_at = NULL, worker = NULL
        WHERE j.queue = p_queue AND j.id = ANY (v.retry)
        RETURNING j.id, true, j.tenant, j.cost, ''::text;
    END IF;
    IF v.expired IS NOT NULL THEN
        RETURN QUERY
        SELECT f.id, false, f.tenant, f.cost, 'expired'::text
        FROM batchq.finish_jobs(p_queue, 'expired', v.expired, NULL,
                                array_fill('lease expired before its worker finished it, and the deadline passed'::text,
                                           ARRAY[cardinality(v.expired)])) f;
    END IF;
    IF v.failed IS NOT NULL THEN
        RETURN QUERY
        SELECT f.id, false, f.tenant, f.cost, 'failed'::text
        FROM batchq.finish_jobs(p_queue, 'failed', v.failed, NULL,
                                array_fill('lease expired before its worker finished it, and no attempts are left'::text,
                                           ARRAY[cardinality(v.failed)])) f;
    END IF;
    IF v.cancelled IS NOT NULL THEN
        RETURN QUERY
        SELECT f.id, false, f.tenant, f.cost, 'cancelled'::text
        FROM batchq.finish_jobs(p_queue, 'cancelled', v.cancelled, NULL, v.reasons) f;
    END IF;
END
$$;

-- expire finishes up to p_limit waiting (queued or retrying) jobs of p_queue
-- whose deadline passed, wherever they stand in the backlog, as 'expired',
-- and hands the cost of the queued ones back to their tenants' ledgers.
-- Returns the jobs.
CREATE OR REPLACE FUNCTION batchq.expire(p_queue text, p_limit integer)
RETURNS TABLE (id bigint, tenant text, cost bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        PERFORM batchq.check_limit('expire', p_queue, p_limit);
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
    v_ids := ARRAY(SELECT o.id FROM batchq.jobs o
                   WHERE o.queue = p_queue AND o.state <> 'running' AND o.deadline <= now()
                   ORDER BY o.deadline
                   LIMIT p_limit
                   FOR UPDATE SKIP LOCKED);
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH gone AS (
        SELECT * FROM batchq.finish_jobs(p_queue, 'expired', v_ids, NULL,
                                         array_fill('deadline passed while waiting'::text, ARRAY[cardinality(v_ids)]))
    ), refunds AS (
        INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        SELECT p_queue, g.tenant, g.pos, g.seq, -g.cost FROM gone g WHERE g.state = 'queued'
    )
    SELECT g.id, g.tenant, g.cost FROM gone g;
END
$$;

-- requeue returns up to p_limit due jobs of p_queue to their tenants'
-- queues, at the tail, as if enqueued now (a tenant whose queue had emptied
-- rejoins the ring): 'retrying' ones whose backoff ended and 'scheduled' ones
-- whose run-at came, the one way a job waits for a time. Due means run_after
-- at or before p_at (NULL: now), oldest first. Tenants whose ring row an open enqueue
-- holds, or whose ledger has no room left (ledger_full, until its queue
-- drains), are passed over for a later call: it looks again past them, a few
-- times at most, so one long import does not hold up every other tenant's
-- retries. Returns how many jobs it requeued.
CREATE OR REPLACE FUNCTION batchq.requeue(p_queue text, p_limit integer, p_at timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_ids      bigint[];
    v_tenants  text[];
    v_costs    bigint[];
    v_locked   text[];
    v_n        integer;
    v_total    integer := 0;
    v_settings bigint;
    v_joined   text[];
    v_notify   boolean := false;
    v_busy     text[] := '{}'; -- tenants passed over
    v_at       timestamptz := coalesce(p_at, now());
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        PERFORM batchq.check_limit('requeue', p_queue, p_limit);
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
    -- Before ring_join reads the weights (docs/design/commit-time-check.md).
    SELECT s.last_value + s.is_called::integer INTO v_settings FROM batchq.settings_version s;
    FOR v_pass IN 1 .. 4 LOOP
        SELECT array_agg(d.id ORDER BY d.run_after, d.id), array_agg(d.tenant ORDER BY d.run_after, d.id),
               array_agg(d.cost ORDER BY d.run_after, d.id)
        INTO v_ids, v_tenants, v_costs
        FROM (SELECT j.id, j.tenant, j.cost, j.run_after FROM batchq.jobs j
              WHERE j.queue = p_queue AND j.state IN ('retrying', 'scheduled') AND j.run_after <= v_at
                AND j.tenant <> ALL (v_busy)
              ORDER BY j.run_after, j.id LIMIT p_limit - v_total
              FOR UPDATE SKIP LOCKED) d;
        EXIT WHEN v_ids IS NULL;
        -- The tenants it locked, less those whose ledger these jobs would
        -- take past the ceiling.
        SELECT coalesce(array_agg(r.tenant) FILTER (WHERE NOT x.full), '{}'),
               coalesce(array_agg(r.tenant) FILTER (WHERE r.head IS NULL AND NOT x.full), '{}')
        INTO v_locked, v_joined
        FROM batchq.ring_join(p_queue, v_tenants, v_costs, true) r
        CROSS JOIN LATERAL (SELECT t.cum + r.cost > batchq.key_ceiling()
                                   OR t.join_round + (t.cum + r.cost) / t.share > batchq.key_ceiling() AS full
                            FROM batchq.tenant_ring t WHERE t.queue = p_queue AND t.tenant = r.tenant) x;

        WITH src AS (
            SELECT j.id, r.pos, r.join_round, r.share, j.state = 'scheduled' AS was_scheduled,
                   (r.cum + sum(j.cost) OVER w)::bigint AS cum,
                   r.enq_seq + row_number() OVER w AS seq
            FROM unnest(v_ids) WITH ORDINALITY AS x (id, ord)
            JOIN batchq.jobs j ON j.queue = p_queue AND j.id = x.id
            JOIN batchq.tenant_ring r ON r.queue = p_queue AND r.tenant = j.tenant
            WHERE j.tenant = ANY (v_locked)
            WINDOW w AS (PARTITION BY j.tenant ORDER BY x.ord)
        ), upd AS (
            UPDATE batchq.jobs j
            -- A scheduled job counts as enqueued at its run-at: its wait, in
            -- reports and metrics, is from when it was due.
            SET state = 'queued', run_after = NULL, pos = s.pos, cum = s.cum, seq = s.seq,
                enqueued_at = CASE WHEN s.was_scheduled THEN j.run_after ELSE j.enqueued_at END,
                round = batchq.drr_round(s.join_round, s.cum, s.share)
            FROM src s WHERE j.queue = p_queue AND j.id = s.id
            RETURNING j.tenant, j.pos, j.cum, j.seq, j.round, batchq.drr_round(s.join_round, s.cum - j.cost + 1, s.share) AS start,
                      s.was_scheduled
        ), noted AS (
            -- Checked at commit (batchq.ring_check_at_commit).
            INSERT INTO batchq.ring_commit_checks (queue, min_round, tenants, pos, first_seq, settings, joined)
            SELECT p_queue, min(a.min_round), array_agg(a.tenant), array_agg(a.pos), array_agg(a.first_seq), v_settings,
                   v_joined
            FROM (SELECT u.tenant, min(u.pos) AS pos, min(u.seq) AS first_seq, min(u.start) AS min_round
                  FROM upd u GROUP BY u.tenant) a
            HAVING count(*) > 0
        ), ring AS (
            -- A scheduled job promoted no longer counts as scheduled.
            UPDATE batchq.tenant_ring r SET cum = a.cum, enq_seq = a.seq, reached = greatest(r.reached, a.round),
                scheduled = CASE WHEN a.promoted > 0 THEN greatest(coalesce(r.scheduled, 0) - a.promoted, 0)
                                 ELSE r.scheduled END
            FROM (SELECT u.tenant, max(u.cum) AS cum, max(u.seq) AS seq, max(u.round) AS round,
                         count(*) FILTER (WHERE u.was_scheduled)::integer AS promoted
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

