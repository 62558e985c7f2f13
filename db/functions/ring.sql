-- The tenant ring: who is in it, at which position, from which round
-- (docs/design/fair-order.md).

-- ring_join locks the ring rows of p_tenants in p_queue (creating missing
-- ones) in name order, so concurrent callers cannot deadlock, and starts a
-- new membership for each tenant with no queued job: a new position at the
-- end of the ring, in the order of the tenants' first lines, joining the
-- cursor's round with an empty ledger, or the next round if the tenant had a
-- job keyed in the cursor's round already (reached). It returns a row per
-- tenant it locked, in name order: how many lines name it, what they cost in
-- all (p_costs, one per line; NULL counts 0), and the seq of its oldest
-- queued job (head), NULL when it joined now. With p_skip_locked it passes
-- over rows another transaction holds and returns only those it locked.
--
-- Every statement reaches a ring row or a tenant's head by an index probe
-- per tenant, never by a join the planner could turn into a scan of the
-- queue's ring or jobs (docs/design/plans.md).
CREATE OR REPLACE FUNCTION batchq.ring_join(p_queue text, p_tenants text[], p_costs bigint[], p_skip_locked boolean)
RETURNS TABLE (tenant text, lines integer, head bigint, cost numeric)
LANGUAGE plpgsql
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
    v_cost     numeric[];
    v_locked   text[];
    v_joined   bigint[];
    v_counts   integer[];
    v_costs    numeric[];
    v_pos      bigint[];
    v_heads    bigint[];
    v_round    bigint;
    v_quantum  bigint;
BEGIN
    -- Each tenant once, in tenant order, with its first line in the batch.
    SELECT array_agg(f.tenant ORDER BY f.tenant), array_agg(f.first ORDER BY f.tenant),
           array_agg(f.lines ORDER BY f.tenant), array_agg(f.cost ORDER BY f.tenant)
    INTO v_distinct, v_first, v_lines, v_cost
    FROM (SELECT t.tenant, min(t.ord) AS first, count(*)::integer AS lines, coalesce(sum(t.cost), 0) AS cost
          FROM unnest(p_tenants, p_costs) WITH ORDINALITY AS t (tenant, cost, ord)
          WHERE t.tenant IS NOT NULL
          GROUP BY t.tenant) f;
    -- Only rows that do not exist yet: an insert that meets a row another
    -- transaction has updated waits for it, even with ON CONFLICT DO
    -- NOTHING, and with p_skip_locked nothing may wait.
    INSERT INTO batchq.tenant_ring (queue, tenant)
    SELECT p_queue, t FROM unnest(v_distinct) AS t
    WHERE (SELECT r.tenant FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = t) IS NULL
    ON CONFLICT DO NOTHING;

    IF p_skip_locked THEN
        SELECT array_agg(l.tenant ORDER BY d.ord), array_agg(d.first ORDER BY d.ord), array_agg(d.lines ORDER BY d.ord),
               array_agg(d.cost ORDER BY d.ord), array_agg(l.pos ORDER BY d.ord)
        INTO v_locked, v_joined, v_counts, v_costs, v_pos
        FROM unnest(v_distinct, v_first, v_lines, v_cost) WITH ORDINALITY AS d (tenant, first, lines, cost, ord)
        CROSS JOIN LATERAL (SELECT r.tenant, r.pos FROM batchq.tenant_ring r
                            WHERE r.queue = p_queue AND r.tenant = d.tenant
                            FOR UPDATE SKIP LOCKED) l;
    ELSE
        SELECT array_agg(l.tenant ORDER BY d.ord), array_agg(d.first ORDER BY d.ord), array_agg(d.lines ORDER BY d.ord),
               array_agg(d.cost ORDER BY d.ord), array_agg(l.pos ORDER BY d.ord)
        INTO v_locked, v_joined, v_counts, v_costs, v_pos
        FROM unnest(v_distinct, v_first, v_lines, v_cost) WITH ORDINALITY AS d (tenant, first, lines, cost, ord)
        CROSS JOIN LATERAL (SELECT r.tenant, r.pos FROM batchq.tenant_ring r
                            WHERE r.queue = p_queue AND r.tenant = d.tenant
                            FOR UPDATE) l;
    END IF;
    IF v_locked IS NULL THEN
        RETURN;
    END IF;

    -- Each locked tenant's head: its first queued job at its ring position (a
    -- row created just now has position 0, which no job has). Ordered by
    -- seq so that, with sorts off, only jobs_tenant_queue serves it.
    SELECT array_agg((SELECT j.seq FROM batchq.jobs j
                      WHERE j.queue = p_queue AND j.pos = l.pos AND j.state = 'queued'
                      ORDER BY j.seq LIMIT 1) ORDER BY l.ord)
    INTO v_heads
    FROM unnest(v_pos) WITH ORDINALITY AS l (pos, ord);

    SELECT coalesce(c.round, 0), q.quantum INTO v_round, v_quantum
    FROM batchq.queues q LEFT JOIN batchq.queue_cursors c ON c.queue = q.name AND c.queue = p_queue
    WHERE q.name = p_queue;

    -- Tenants with nothing queued join in the order of their first lines:
    -- the order they became active. A tenant keyed in the cursor's round
    -- already had its visit there and joins the next round.
    WITH joiners AS (
        SELECT l.tenant, l.first
        FROM unnest(v_locked, v_joined, v_heads) AS l (tenant, first, head)
        WHERE l.head IS NULL
        ORDER BY l.first
    ), numbered AS (
        -- The weight is a column of its own, so that drr_share, which reads
        -- it four times, is inlined; with the call as its argument it ran
        -- as a SQL function of its own, some 20 us a call. (nextval keeps
        -- this CTE from being folded into the update.)
        SELECT j.tenant, nextval('batchq.ring_pos') AS pos, batchq.tenant_weight(p_queue, j.tenant) AS weight,
               (SELECT r.ctid FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = j.tenant) AS rid
        FROM joiners j
    )
    UPDATE batchq.tenant_ring r
    SET pos = n.pos, cum = 0, visited = -1,
        join_round = CASE WHEN r.reached >= v_round THEN v_round + 1 ELSE v_round END,
        share = batchq.drr_share(v_quantum, n.weight)
    FROM numbered n
    WHERE r.ctid = n.rid; -- this transaction holds the row, so its ctid stays

    RETURN QUERY SELECT l.tenant, l.lines, l.head, l.cost
                 FROM unnest(v_locked, v_counts, v_heads, v_costs) AS l (tenant, lines, head, cost);
END
$$;

-- rewrite_turn waits until no other transaction's commit-time check is
-- rewriting jobs, or a second at most, and holds the turn until this
-- transaction ends; it reports whether it got the turn. The turn is a
-- transaction-level advisory lock, batchq's key (1650553969, 1), taken
-- nowhere else. Checks that rewrite thousands of jobs together each take as
-- long as all of them, and claims go on through rounds meanwhile, so each
-- tenant they move lands that many rounds behind the cursor when its commit
-- shows its jobs, and is served alone until it catches up. One at a time,
-- each check reads the cursor when its turn comes, after the last one's
-- jobs became visible (docs/design/commit-time-check.md). A wait that runs
-- out, behind a transaction that ran its checks early (SET CONSTRAINTS ALL
-- IMMEDIATE, PREPARE TRANSACTION) and holds the turn to its end, goes on
-- without it, as checks did before there was a turn; so does one the
-- deadlock detector ends (that transaction waiting, say, for a ring row this
-- one holds). A transaction waits once: after a wait that ran out, its other
-- checks go on without the turn at once, so a commit of many statements'
-- checks waits a second at most, not a second each.
CREATE OR REPLACE FUNCTION batchq.rewrite_turn() RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF current_setting('batchq.rewrite_turn_missed', true) = 'on' THEN
        RETURN pg_try_advisory_xact_lock(1650553969, 1);
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', '1s', true);
        PERFORM pg_advisory_xact_lock(1650553969, 1);
        -- The lock is kept, the transaction's own lock_timeout restored. (A
        -- wait that runs out rolls back this block, the setting with it.)
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
        RETURN true;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        NULL;
    END;
    -- Until this transaction ends.
    PERFORM set_config('batchq.rewrite_turn_missed', 'on', true);
    RETURN false;
END
$$;

-- ring_check_at_commit runs when a transaction that added queued jobs
-- commits (a deferred trigger on batchq.ring_commit_checks, one row per
-- statement): a tenant whose oldest queued job is one of the transaction's
-- own, and whose grants began to pay for it in a round the cursor has passed
-- meanwhile, starts its membership afresh at the end of the ring in the
-- cursor's round, as if its jobs had been enqueued now; and a weight or
-- quantum change that committed while the transaction was open re-keys the
-- tenants it noted (docs/design/commit-time-check.md).
CREATE OR REPLACE FUNCTION batchq.ring_check_at_commit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_cursor bigint;
    v_pos    bigint;
    v        record;
BEGIN
    DELETE FROM batchq.ring_commit_checks k WHERE k.queue = NEW.queue AND k.id = NEW.id;
    SELECT c.round INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = NEW.queue;
    IF v_cursor > NEW.min_round THEN
        -- A rewrite of more than a few jobs waits for its turn, then reads
        -- the cursor again (batchq.rewrite_turn). The transaction's own jobs
        -- of the noted tenants bound what it may move.
        IF (SELECT sum((SELECT r.enq_seq FROM batchq.tenant_ring r WHERE r.queue = NEW.queue AND r.tenant = t.tenant)
                       - t.first_seq + 1)
            FROM unnest(NEW.tenants, NEW.first_seq) AS t (tenant, first_seq)) > 32 THEN
            PERFORM batchq.rewrite_turn();
            SELECT c.round INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = NEW.queue;
        END IF;
        FOR v IN
            -- The head's start: the round whose grant first goes to it, not
            -- the round it is served in (a job costing k grants is served k
            -- - 1 rounds after its start).
            SELECT t.tenant, t.pos, h.seq AS head, h.paid, h.share
            FROM unnest(NEW.tenants, NEW.pos, NEW.first_seq) AS t (tenant, pos, first_seq)
            CROSS JOIN LATERAL (SELECT j.seq, j.cum - j.cost AS paid, r.share,
                                       batchq.drr_round(r.join_round, j.cum - j.cost + 1, r.share) AS start
                                FROM batchq.jobs j, batchq.tenant_ring r
                                WHERE j.queue = NEW.queue AND j.pos = t.pos AND j.state = 'queued'
                                  AND r.queue = NEW.queue AND r.tenant = t.tenant
                                ORDER BY j.seq LIMIT 1) h
            WHERE h.seq >= t.first_seq AND h.start < v_cursor
        LOOP
            -- A new position, the cursor's round, the ledger counted from the
            -- head: what the jobs that left had paid goes with them.
            v_pos := nextval('batchq.ring_pos');
            UPDATE batchq.jobs j
            SET pos = v_pos, cum = j.cum - v.paid, round = batchq.drr_round(v_cursor, j.cum - v.paid, v.share)
            WHERE j.queue = NEW.queue AND j.pos = v.pos AND j.state = 'queued';
            UPDATE batchq.tenant_ring r SET pos = v_pos, join_round = v_cursor, cum = r.cum - v.paid,
                reached = greatest(r.reached, batchq.drr_round(v_cursor, r.cum - v.paid, v.share)), visited = -1
            WHERE r.queue = NEW.queue AND r.tenant = v.tenant;
            -- The membership starts afresh: corrections about the jobs that
            -- left are dropped, those about the moved jobs move with them.
            DELETE FROM batchq.ledger_adjustments a
            WHERE a.queue = NEW.queue AND a.tenant = v.tenant AND a.pos = v.pos AND a.after_seq < v.head;
            UPDATE batchq.ledger_adjustments a SET pos = v_pos
            WHERE a.queue = NEW.queue AND a.tenant = v.tenant AND a.pos = v.pos;
            -- Workers may have found the queue empty meanwhile.
            PERFORM pg_notify('batchq_jobs', NEW.queue);
        END LOOP;
    END IF;
    IF NEW.settings <> (SELECT s.last_value + s.is_called::integer FROM batchq.settings_version s) THEN
        PERFORM batchq.rekey(NEW.queue, NEW.tenants);
    ELSIF cardinality(NEW.joined) > 0
          AND EXISTS (SELECT 1 FROM batchq.tenant_ring r, batchq.queues q,
                             LATERAL (SELECT batchq.tenant_weight(NEW.queue, r.tenant) AS weight OFFSET 0) w -- as ring_join's
                      WHERE r.queue = NEW.queue AND r.tenant = ANY (NEW.joined) AND q.name = NEW.queue
                        AND r.share <> batchq.drr_share(q.quantum, w.weight)) THEN
        -- Tenants that joined in the statement, which no change could see,
        -- when one's share is off. This transaction holds their ring rows,
        -- so the shares read here are the ones rekey would find.
        PERFORM batchq.rekey(NEW.queue, NEW.joined);
    END IF;
    RETURN NULL;
END
$$;
