-- Ledger corrections folded into the fair order (docs/design/corrections.md).
--
-- Job rows: every statement that waits on job rows locks them in id order,
-- and a transaction that re-keys locks all it will touch in one such
-- statement first; claims, rescues and expiries skip locked rows and never
-- wait (docs/design/plans.md, "Lock order").

-- fold_adjustments folds the pending adjustments of one tenant's membership
-- p_pos (join_round and share as its ring row holds them) into the keys of
-- its queued jobs and its ring ledger, and reports whether there were any.
-- Adjustments of an earlier membership are dropped. The caller holds the ring
-- row, has locked the jobs the fold rewrites, and sets the planner settings.
-- With p_ids it folds only those adjustments; with p_next only into the jobs
-- before seq p_next, leaving the rest pending as one adjustment about the
-- jobs from p_next on.
CREATE OR REPLACE FUNCTION batchq.fold_adjustments(p_queue text, p_tenant text, p_pos bigint, p_join_round bigint,
                                                   p_share bigint, p_next bigint DEFAULT NULL,
                                                   p_ids bigint[] DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_seqs   bigint[];
    v_deltas bigint[];
    v_total  bigint;
    v_next   bigint := p_next; -- the first queued job left as it is; NULL: none
    v_refund boolean;  -- a correction downwards among them
    v_head   record;
    v_shift  bigint;
    v_floor  numeric;
    v_drop   bigint;
BEGIN
    WITH consumed AS (
        DELETE FROM batchq.ledger_adjustments a
        WHERE a.queue = p_queue AND a.tenant = p_tenant AND (p_ids IS NULL OR a.id = ANY (p_ids))
          AND (v_next IS NULL OR a.pos <> p_pos OR a.after_seq < v_next - 1)
        RETURNING a.pos, a.after_seq, a.delta
    )
    SELECT array_agg(c.after_seq), array_agg(c.delta), coalesce(sum(c.delta), 0), bool_or(c.delta < 0)
    INTO v_seqs, v_deltas, v_total, v_refund
    FROM consumed c WHERE c.pos = p_pos;
    -- Deltas that sum to nothing still move the jobs between them.
    IF v_seqs IS NULL THEN
        RETURN false;
    END IF;
    -- Refunds move the tenant's head no earlier than the round claims are
    -- in. Claims that ran ahead of the folds charged its jobs at their
    -- estimates; credit past the current round would let it take every
    -- claim from tenants that join now, as DRR never lets a deficit grow
    -- past a visit. The rest is dropped: one more correction, about the
    -- jobs from the head on. Only a refund can move the head earlier.
    IF v_refund THEN
        SELECT j.seq, j.cum INTO v_head FROM batchq.jobs j
        WHERE j.queue = p_queue AND j.pos = p_pos AND j.state = 'queued'
        ORDER BY j.seq LIMIT 1;
        IF FOUND THEN
            SELECT coalesce(sum(u.delta), 0) INTO v_shift
            FROM unnest(v_seqs, v_deltas) AS u (after_seq, delta) WHERE u.after_seq < v_head.seq;
        END IF;
        IF v_shift < 0 THEN
            -- The least ledger whose round is the cursor's (batchq.drr_round).
            SELECT (coalesce(max(c.round), 0) - p_join_round)::numeric * p_share + 1 INTO v_floor
            FROM batchq.queue_cursors c WHERE c.queue = p_queue;
            v_drop := least(v_floor, v_head.cum) - (v_head.cum + v_shift);
            IF v_drop > 0 THEN
                v_seqs := v_seqs || (v_head.seq - 1);
                v_deltas := v_deltas || v_drop;
                v_total := v_total + v_drop;
            END IF;
        END IF;
    END IF;
    -- A job takes the running sum of the corrections about jobs before it:
    -- one range of the tenant's queue per step.
    WITH steps AS (
        SELECT c.after_seq, (sum(c.delta) OVER (ORDER BY c.after_seq))::bigint AS delta,
               lead(c.after_seq) OVER (ORDER BY c.after_seq) AS upto
        FROM (SELECT u.after_seq, sum(u.delta) AS delta FROM unnest(v_seqs, v_deltas) AS u (after_seq, delta)
              GROUP BY u.after_seq) c
    ), shift AS (
        SELECT j.id, s.delta
        FROM steps s
        JOIN batchq.jobs j ON j.queue = p_queue AND j.pos = p_pos AND j.state = 'queued'
             AND j.seq > s.after_seq AND j.seq <= coalesce(s.upto, 9223372036854775807)
             AND j.seq < coalesce(v_next, 9223372036854775807)
        WHERE s.delta <> 0
    )
    UPDATE batchq.jobs j
    SET cum = j.cum + s.delta, round = batchq.drr_round(p_join_round, j.cum + s.delta, p_share)
    FROM shift s
    WHERE j.queue = p_queue AND j.id = s.id;
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

-- apply_adjustments folds a queue's pending ledger adjustments into the keys
-- of each tenant's queued jobs behind the job each is about: a tenant that
-- spent more than it estimated waits longer, one that spent less (or lost a
-- job to its deadline) comes sooner. Tenants whose ring row another
-- transaction holds are left for a later pass. Returns how many tenants it
-- adjusted. A tenant's corrections downwards are folded into its first
-- c_fold_jobs queued jobs, the rest kept pending; one with a correction
-- upwards is folded whole, unless no job would move by a grant or more. No
-- such queue is refused (BQ201).
CREATE OR REPLACE FUNCTION batchq.apply_adjustments(p_queue text) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL THEN
        PERFORM batchq.check_queue_argument('apply_adjustments', p_queue);
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
    RETURN batchq.fold_pending(p_queue, true);
END
$$;

-- fold_pending is apply_adjustments for a known queue. With p_wait it waits
-- for the jobs it rewrites, locking them in id order in one statement, as
-- every statement that waits on job rows does. Without it, it waits for
-- nothing: a tenant some of whose jobs to rewrite another transaction holds
-- is left for a later pass, as one whose ring row is held. That is for a
-- caller that already holds job rows (cancel_jobs), whose waiting here would
-- lock rows out of id order, and could close a cycle with a transaction
-- waiting for the rows it holds.
CREATE OR REPLACE FUNCTION batchq.fold_pending(p_queue text, p_wait boolean) RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    c_fold_jobs CONSTANT integer := 100;
    v         record;
    v_n       integer := 0;
    v_locked  text[];
    v_tenants text[];
    v_pos     bigint[];
    v_from    bigint[];
    v_next    bigint[];
    v_ids     bigint[];
    v_want    bigint[];
    v_got     bigint[];
    v_held    text[];
BEGIN
    v_locked := ARRAY(
        SELECT r.tenant FROM batchq.tenant_ring r
        WHERE r.queue = p_queue
          AND r.tenant IN (SELECT DISTINCT a.tenant FROM batchq.ledger_adjustments a WHERE a.queue = p_queue)
        ORDER BY r.tenant
        FOR UPDATE SKIP LOCKED);
    -- The adjustments this pass folds; one recorded meanwhile waits for the
    -- next pass.
    v_ids := ARRAY(SELECT a.id FROM batchq.ledger_adjustments a
                   WHERE a.queue = p_queue AND a.tenant = ANY (v_locked));
    -- Each tenant's window: from the first job an adjustment is about to its
    -- c_fold_jobs-th queued job (next_seq is the first past it, NULL when the
    -- window holds the rest), folded alone only when no job in it or just
    -- past it would move later. hi and lo are how far its jobs would move:
    -- each the sum of the corrections about jobs before it (a job sorts
    -- before a correction about itself).
    SELECT array_agg(w.tenant ORDER BY w.tenant), array_agg(w.pos ORDER BY w.tenant),
           array_agg(w.from_seq ORDER BY w.tenant),
           array_agg(CASE WHEN w.hi <= 0 THEN w.next_seq END ORDER BY w.tenant)
    INTO v_tenants, v_pos, v_from, v_next
    FROM (SELECT r.tenant, r.pos, r.share, k.seq AS next_seq,
                 (SELECT min(a.after_seq) FROM batchq.ledger_adjustments a
                  WHERE a.queue = p_queue AND a.id = ANY (v_ids) AND a.tenant = r.tenant AND a.pos = r.pos) AS from_seq,
                 coalesce(s.hi, 0) AS hi, coalesce(s.lo, 0) AS lo
          FROM batchq.tenant_ring r
          LEFT JOIN LATERAL (SELECT q.seq FROM batchq.jobs q
                             WHERE q.queue = p_queue AND q.pos = r.pos AND q.state = 'queued'
                             ORDER BY q.seq OFFSET c_fold_jobs LIMIT 1) k ON true
          LEFT JOIN LATERAL (SELECT max(e.shift) FILTER (WHERE e.job) AS hi, min(e.shift) FILTER (WHERE e.job) AS lo
                             FROM (SELECT e.job, sum(e.delta) OVER (ORDER BY e.at, e.job DESC) AS shift
                                   FROM (SELECT d.after_seq AS at, d.delta, false AS job
                                         FROM batchq.ledger_adjustments d
                                         WHERE d.queue = p_queue AND d.id = ANY (v_ids) AND d.tenant = r.tenant
                                           AND d.pos = r.pos
                                         UNION ALL
                                         SELECT q.seq, 0, true
                                         FROM (SELECT q.seq FROM batchq.jobs q
                                               WHERE q.queue = p_queue AND q.pos = r.pos AND q.state = 'queued'
                                               ORDER BY q.seq LIMIT c_fold_jobs + 1) q) e) e) s ON true
          WHERE r.queue = p_queue AND r.tenant = ANY (v_locked)) w
    WHERE NOT (w.next_seq IS NOT NULL AND w.lo >= 0 AND w.hi > 0 AND w.hi < w.share);
    -- The jobs the folds rewrite, locked in id order: claims pass over these
    -- meanwhile, not over a tenant's whole backlog. FOR NO KEY UPDATE, so
    -- that a claim's probe for rows holding the cursor back still finds them
    -- (batchq.claim).
    v_want := ARRAY(SELECT q.id FROM unnest(v_pos, v_from, v_next) AS w (pos, from_seq, next_seq)
                    CROSS JOIN LATERAL (SELECT q.id FROM batchq.jobs q
                                        WHERE q.queue = p_queue AND q.pos = w.pos AND q.state = 'queued'
                                          AND q.seq > w.from_seq
                                          AND q.seq < coalesce(w.next_seq, 9223372036854775807)
                                        OFFSET 0) q); -- kept a subquery: as a join it read the queue
    IF p_wait THEN
        PERFORM 1 FROM batchq.jobs j
        WHERE j.queue = p_queue AND j.id = ANY (v_want) AND j.state = 'queued'
        ORDER BY j.id
        FOR NO KEY UPDATE;
    ELSE
        v_got := ARRAY(SELECT j.id FROM batchq.jobs j
                       WHERE j.queue = p_queue AND j.id = ANY (v_want) AND j.state = 'queued'
                       ORDER BY j.id
                       FOR NO KEY UPDATE SKIP LOCKED);
        IF cardinality(v_got) < cardinality(v_want) THEN
            -- A job missing was held, or claimed since the window was read:
            -- its tenant waits for a later pass.
            v_held := ARRAY(SELECT DISTINCT j.tenant FROM batchq.jobs j
                            WHERE j.queue = p_queue AND j.id = ANY (v_want) AND NOT j.id = ANY (v_got));
            v_locked := ARRAY(SELECT t FROM unnest(v_locked) AS t WHERE NOT t = ANY (v_held));
        END IF;
    END IF;
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
