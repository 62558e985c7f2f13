-- Re-keying a queue's tenants after a weight or quantum change
-- (docs/design/settings-changes.md).

-- rekey re-schedules the queued jobs of p_tenants in p_queue whose share
-- changed. As in drr, where a visit adds the grant the weight gives at that
-- moment, the new share takes effect on the tenant's next visit: its visits
-- up to the cursor's round keep what they were granted at the old share, and
-- later ones grant the new share. The membership is re-based to say exactly
-- that: it joins the cursor's round with a ledger of what is left beyond
-- what was granted, plus the new share (a share too large to add is left
-- out, and the membership joins the round after). A tenant keeps its ring
-- position; one with no queued job takes the new share at its next
-- membership.
--
-- It locks the queue's row FOR KEY SHARE, then the ring rows, in tenant
-- order, which holds off enqueues and
-- requeues of these tenants, then every queued job of those whose share
-- changes in one statement, in id order. Callers re-keying several queues
-- do so in queue name order. A ring row held for long (by an application's
-- transaction that enqueued for its tenant and stays open) does not stop
-- the enqueues of the tenants before it meanwhile: after a short wait the
-- call lets go of the ring rows it took, waits for that row alone, and
-- starts again (docs/design/settings-changes.md).
CREATE OR REPLACE FUNCTION batchq.rekey(p_queue text, p_tenants text[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
SET plan_cache_mode = auto
AS $$
DECLARE
    v         record;
    v_share   bigint;
    v_cursor  bigint;
    v_start   bigint;
    v_k       bigint;
    v_granted numeric;
    v_before  bigint;
    v_tenants text[];
    v_pos     bigint[];
    v_timeout text := current_setting('lock_timeout');
    v_free    text[];
    v_wait_ms integer := 100; -- this pass's limit on each wait for a ring row
BEGIN
    IF cardinality(p_tenants) > 64 THEN -- custom plans for many tenants (docs/design/plans.md)
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    -- The queue's row before the ring rows, as delete_queue takes them: the
    -- second update of a ring row in a transaction checks its foreign key,
    -- which takes the queue's row FOR KEY SHARE, and a delete holding the
    -- row and waiting for the ring would otherwise close a cycle.
    PERFORM 1 FROM batchq.queues q WHERE q.name = p_queue FOR KEY SHARE;
    -- The ring rows, in tenant order. Held for long, a row would have this
    -- call hold every row before it as long, and stop their tenants'
    -- enqueues: a wait of over 100 ms lets go of them all (the
    -- subtransaction's row locks go with it), waits for the first row it
    -- could not take alone, and starts again. Enqueues hold a ring row for
    -- as long as their transaction, most for well under that. Each new pass
    -- waits twice as long, and the sixth as long as it takes, as the call
    -- always did: a tenant whose enqueues queue up for its row, each longer
    -- than the limit, would otherwise take it back from every pass. A
    -- caller's own lock_timeout governs the waits as before.
    LOOP
        BEGIN
            IF v_timeout = '0' AND v_wait_ms IS NOT NULL THEN
                PERFORM set_config('lock_timeout', v_wait_ms || 'ms', true);
            END IF;
            PERFORM 1 FROM batchq.tenant_ring r
            WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
            ORDER BY r.tenant
            FOR UPDATE OF r;
            PERFORM set_config('lock_timeout', v_timeout, true);
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            -- The setting went back with the subtransaction.
            IF v_timeout <> '0' OR v_wait_ms IS NULL THEN
                RAISE;
            END IF;
        END;
        -- Which rows are free now, found by taking them and letting go.
        BEGIN
            v_free := ARRAY(SELECT r.tenant FROM batchq.tenant_ring r
                            WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
                            ORDER BY r.tenant
                            FOR UPDATE OF r SKIP LOCKED);
            RAISE SQLSTATE 'BQ999';
        EXCEPTION WHEN SQLSTATE 'BQ999' THEN
            NULL; -- v_free keeps its value: variables are not rolled back
        END;
        -- The first held row, alone, until its holder ends; then let go.
        BEGIN
            PERFORM 1 FROM batchq.tenant_ring r
            WHERE r.queue = p_queue
              AND r.tenant = (SELECT min(h.tenant) FROM batchq.tenant_ring h
                              WHERE h.queue = p_queue AND h.tenant = ANY (p_tenants)
                                AND h.tenant <> ALL (v_free))
            FOR UPDATE OF r;
            RAISE SQLSTATE 'BQ999';
        EXCEPTION WHEN SQLSTATE 'BQ999' THEN
            NULL;
        END;
        v_wait_ms := CASE WHEN v_wait_ms < 1600 THEN v_wait_ms * 2 END; -- NULL: no limit of its own
    END LOOP;
    -- Only the tenants whose share changes: the ring rows are held now, and
    -- only their holder changes a share.
    SELECT array_agg(r.tenant ORDER BY r.tenant), array_agg(r.pos ORDER BY r.tenant)
    INTO v_tenants, v_pos
    FROM batchq.tenant_ring r
    JOIN batchq.queues q ON q.name = r.queue
    -- The weight apart, so that drr_share is inlined (see ring_join).
    CROSS JOIN LATERAL (SELECT batchq.tenant_weight(p_queue, r.tenant) AS weight OFFSET 0) w
    WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
      AND r.share <> batchq.drr_share(q.quantum, w.weight);
    IF v_tenants IS NULL THEN
        RETURN;
    END IF;
    -- FOR NO KEY UPDATE: claims skip these rows, and their probe for rows
    -- that hold the cursor back still finds them (batchq.claim).
    PERFORM 1 FROM batchq.jobs j
    WHERE j.queue = p_queue AND j.pos = ANY (v_pos) AND j.state = 'queued'
    ORDER BY j.id
    FOR NO KEY UPDATE OF j;

    FOR v IN
        SELECT r.tenant, r.pos, r.join_round, r.share, r.visited
        FROM batchq.tenant_ring r
        WHERE r.queue = p_queue AND r.tenant = ANY (v_tenants)
        ORDER BY r.tenant
    LOOP
        SELECT batchq.drr_share(q.quantum, w.weight), coalesce(c.round, 0)
        INTO v_share, v_cursor
        FROM (SELECT batchq.tenant_weight(p_queue, v.tenant) AS weight OFFSET 0) w
        CROSS JOIN batchq.queues q
        LEFT JOIN batchq.queue_cursors c ON c.queue = q.name AND c.queue = p_queue
        WHERE q.name = p_queue;
        -- Pending adjustments first, at the old share: they are about the
        -- ledger the jobs were keyed on.
        PERFORM batchq.fold_adjustments(p_queue, v.tenant, v.pos, v.join_round, v.share);
        -- The rounds granted so far: from the membership's first to the
        -- cursor's, which counts only if the tenant was served in it
        -- (visited remembers a re-key that counted it).
        v_start := greatest(v_cursor, v.join_round - 1);
        SELECT j.cum - j.cost INTO v_before FROM batchq.jobs j
        WHERE j.queue = p_queue AND j.pos = v.pos AND j.state = 'queued'
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
              WHERE m.queue = p_queue AND m.pos = v.pos AND m.state = 'queued') n
        WHERE j.queue = p_queue AND j.id = n.id;
        IF FOUND THEN
            UPDATE batchq.tenant_ring r
            SET join_round = v_start + 1 - v_k, share = v_share,
                cum = least(greatest(r.cum - v_granted + v_k * v_share,
                                     -9223372036854775807), 9223372036854775807)::bigint,
                visited = CASE WHEN v_start = v_cursor THEN v_cursor ELSE r.visited END
            WHERE r.queue = p_queue AND r.tenant = v.tenant;
        ELSE
            UPDATE batchq.tenant_ring r SET share = v_share WHERE r.queue = p_queue AND r.tenant = v.tenant;
        END IF;
    END LOOP;
END
$$;
