-- Claims: the fair order as one index range scan (docs/design/cursor.md).

-- claim claims up to p_max_jobs queued jobs of p_queue in DRR order,
-- stopping before the first live job that would take the claimed cost past
-- p_budget. Expired jobs among them are finished as 'expired' instead, their
-- cost handed back to their tenant's ledger, and returned with expired =
-- true so the caller can claim again for their places. Rows other claimers
-- hold are skipped. Rows come back unsorted, each with its key (round, pos,
-- seq), whose order is the claim order. The jobs of one claim share a lease
-- token: a run is a job and the claim that took it.
--
-- A paused queue's claims take nothing; an unknown queue is refused
-- (BQ201). It also moves the queue's cursor, the round joining tenants
-- join, to the round of the last job it claimed, but not past a row still
-- waiting before its first one in a round the cursor has not passed (held
-- by another transaction, or queued since the claim locked its rows). It never waits
-- for the cursor's row: if another claim holds it, the next claim moves it.
--
-- Statements in turn, each with the plan made once per session, index
-- access throughout (docs/design/plans.md).
CREATE OR REPLACE FUNCTION batchq.claim(p_queue text, p_max_jobs integer, p_worker text, p_budget bigint)
RETURNS SETOF batchq.claim_results
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
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
    v_first_seq bigint;
    v_cursor bigint;
    v_reached bigint;
    v_held bigint;         -- the round of the first row waiting before them
    v_paused boolean;
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL THEN
        PERFORM batchq.check_queue_argument('claim', p_queue);
    END IF;
    IF p_max_jobs IS NULL OR p_max_jobs < 1 OR p_max_jobs > 100000 THEN
        PERFORM batchq.raise_invalid_argument('claim', 'max_jobs',
            format('must be in 1..100000 (got %s)', coalesce(p_max_jobs::text, 'null')));
    END IF;
    IF p_budget IS NULL OR p_budget < 1 THEN
        PERFORM batchq.raise_invalid_argument('claim', 'budget',
            format('must be at least 1 (got %s)', coalesce(p_budget::text, 'null')));
    END IF;
    IF octet_length(p_worker) > batchq.max_name_bytes() THEN
        PERFORM batchq.raise_invalid_argument('claim', 'worker',
            format('must be at most %s bytes (got %s)', batchq.max_name_bytes(), octet_length(p_worker)));
    END IF;
    -- Outcomes and reports show it: a line break would split their rows.
    IF p_worker ~ '[\x01-\x1f\x7f]' THEN
        PERFORM batchq.raise_invalid_argument('claim', 'worker',
            format('must not contain control characters (got %s)', batchq.quote(p_worker)));
    END IF;
    -- A paused queue hands out nothing; no such queue is refused (BQ201), so
    -- that a worker with a queue's name wrong, or whose queue was deleted,
    -- hears of it rather than finding nothing to do for ever.
    SELECT q.paused_at IS NOT NULL INTO v_paused FROM batchq.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
    IF v_paused THEN
        RETURN;
    END IF;

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
            SELECT * FROM batchq.finish_jobs(p_queue, 'expired', v_drop, NULL,
                                             array_fill('deadline passed before the job was claimed'::text,
                                                        ARRAY[cardinality(v_drop)]))
        ), refunds AS (
            INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
            SELECT p_queue, e.tenant, e.pos, e.seq, -e.cost FROM expired e
        )
        SELECT e.id, true, p_queue, e.tenant, e.kind, e.cost, e.deadline, e.payload, e.attempt, e.max_attempts,
               '00000000-0000-0000-0000-000000000000'::uuid, e.deadline, e.enqueued_at, e.round, e.pos, e.seq
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
    WHERE j.queue = p_queue AND j.id = ANY (v_take)
    RETURNING j.id, false, j.queue, j.tenant, j.kind, j.cost, j.deadline, j.payload, j.attempt, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.enqueued_at, j.round, j.pos, j.seq;

    -- Most claims stay in the round the cursor already shows.
    SELECT c.round INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = p_queue;
    IF v_cursor IS NULL OR v_cursor >= v_last_round THEN
        RETURN;
    END IF;
    -- The first row still waiting from the cursor's round up to this
    -- claim's first row holds the cursor back, unless another claim holds
    -- it: those rows are claimed, as this claim's are, and a tenant joining
    -- at their round would be served the rounds the claims went through.
    -- A plain read finds whether any row waits there at all (with one
    -- claimer, none does).
    v_held := (SELECT h.round FROM batchq.jobs h
               WHERE h.queue = p_queue AND h.state = 'queued'
                 AND h.round >= v_cursor
                 AND (h.round, h.pos, h.seq) < (v_first_round, v_first_pos, v_first_seq)
               ORDER BY h.round, h.pos, h.seq
               LIMIT 1);
    IF v_held IS NOT NULL THEN
        -- Claims (and whatever else takes rows out of the queue) lock rows
        -- FOR UPDATE, which a key-share read skips; a re-key or a fold
        -- holds the rows it moves FOR NO KEY UPDATE, which it reads
        -- through. The lock is only how the read tells them apart: it is
        -- taken in a subtransaction, rolled back when it took one, so a
        -- claim in a longer transaction of the caller's does not keep other
        -- claims and cancels off a row it did not take
        -- (TestClaimInACallersTransactionHoldsNoRowItDidNotTake).
        BEGIN
            v_held := (SELECT h.round FROM batchq.jobs h
                       WHERE h.queue = p_queue AND h.state = 'queued'
                         AND h.round >= v_cursor
                         AND (h.round, h.pos, h.seq) < (v_first_round, v_first_pos, v_first_seq)
                       ORDER BY h.round, h.pos, h.seq
                       LIMIT 1
                       FOR KEY SHARE SKIP LOCKED);
            IF v_held IS NOT NULL THEN
                RAISE SQLSTATE 'BQ999';
            END IF;
        EXCEPTION WHEN SQLSTATE 'BQ999' THEN
            NULL; -- v_held keeps its value: variables are not rolled back
        END;
    END IF;
    v_reached := least(v_last_round, v_held);
    IF v_reached > v_cursor THEN
        UPDATE batchq.queue_cursors cur SET round = v_reached
        WHERE cur.queue = p_queue AND cur.round < v_reached
          AND cur.queue = (SELECT l.queue FROM batchq.queue_cursors l
                           WHERE l.queue = p_queue AND l.round < v_reached
                           FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
END
$$;
