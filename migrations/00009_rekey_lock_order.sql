-- +goose Up

-- rekey and apply_adjustments re-key a tenant's queued jobs. They updated the
-- jobs they had read as queued in whatever order the plan gave; one a claim
-- took meanwhile was then locked by the update's recheck (PostgreSQL locks
-- the newest version of a row before it finds the row no longer qualifies)
-- and held until commit, while the update went on to wait for another job a
-- completion was deleting, and the completion then waited for the first: a
-- deadlock. Now they lock the tenant's queued jobs first, in id order, as
-- every statement that waits on job rows does (completions delete through
-- the primary key, failures lock ORDER BY id, claims never wait), so no two
-- of them can wait on each other in a cycle.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.apply_adjustments(p_queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v        record;
    v_seqs   bigint[];
    v_deltas bigint[];
    v_total  bigint;
    v_n      integer := 0;
BEGIN
    FOR v IN
        SELECT r.tenant, r.pos, r.join_round, r.share FROM batchq.tenant_ring r
        WHERE r.queue = p_queue
          AND r.tenant IN (SELECT DISTINCT a.tenant FROM batchq.ledger_adjustments a WHERE a.queue = p_queue)
        ORDER BY r.tenant
        FOR UPDATE SKIP LOCKED
    LOOP
        -- Adjustments of an earlier membership are dropped: a tenant whose
        -- queue emptied starts afresh.
        WITH consumed AS (
            DELETE FROM batchq.ledger_adjustments a
            WHERE a.queue = p_queue AND a.tenant = v.tenant
            RETURNING a.pos, a.after_seq, a.delta
        )
        SELECT array_agg(c.after_seq), array_agg(c.delta), coalesce(sum(c.delta), 0)
        INTO v_seqs, v_deltas, v_total
        FROM consumed c WHERE c.pos = v.pos;
        CONTINUE WHEN v_total = 0;
        WITH mine AS (
            SELECT j.id, j.seq FROM batchq.jobs j
            WHERE j.queue = p_queue AND j.tenant = v.tenant AND j.state = 'queued' AND j.pos = v.pos
            ORDER BY j.id
            FOR UPDATE
        ), shift AS (
            SELECT m.id, (SELECT sum(u.delta) FROM unnest(v_seqs, v_deltas) AS u (after_seq, delta)
                          WHERE u.after_seq < m.seq)::bigint AS delta
            FROM mine m
        )
        UPDATE batchq.jobs j
        SET cum = j.cum + s.delta, round = batchq.drr_round(v.join_round, j.cum + s.delta, v.share)
        FROM shift s
        WHERE j.id = s.id AND s.delta <> 0;
        UPDATE batchq.tenant_ring r SET cum = r.cum + v_total
        WHERE r.queue = p_queue AND r.tenant = v.tenant;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.rekey(p_queue text, p_tenant text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_share bigint;
    v_start bigint;
    v_cum   bigint;
BEGIN
    PERFORM 1 FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = p_tenant FOR UPDATE;
    SELECT batchq.drr_share(q.quantum, coalesce(w.weight, 1)) INTO v_share
    FROM batchq.queues q LEFT JOIN batchq.tenants w ON w.name = p_tenant
    WHERE q.name = p_queue;
    WITH locked AS (
        SELECT j.id, j.seq, j.cost, j.round FROM batchq.jobs j
        WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.state = 'queued'
        ORDER BY j.id
        FOR UPDATE
    ), mine AS (
        SELECT l.* FROM locked l
    ), src AS (
        SELECT m.id, (sum(m.cost) OVER (ORDER BY m.seq))::bigint AS cum,
               first_value(m.round) OVER (ORDER BY m.seq) AS start
        FROM mine m
    ), upd AS (
        UPDATE batchq.jobs j SET cum = s.cum, round = batchq.drr_round(s.start, s.cum, v_share)
        FROM src s WHERE j.id = s.id
        RETURNING j.cum, s.start
    )
    SELECT max(u.start), max(u.cum) INTO v_start, v_cum FROM upd u;
    IF v_start IS NULL THEN
        -- Nothing left to re-key: the ring keeps its ledger, and the tenant's
        -- next job starts a new membership with the new share.
        UPDATE batchq.tenant_ring r SET share = v_share WHERE r.queue = p_queue AND r.tenant = p_tenant;
        RETURN;
    END IF;
    UPDATE batchq.tenant_ring r SET join_round = v_start, share = v_share, cum = v_cum
    WHERE r.queue = p_queue AND r.tenant = p_tenant;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.apply_adjustments(p_queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v        record;
    v_seqs   bigint[];
    v_deltas bigint[];
    v_total  bigint;
    v_n      integer := 0;
BEGIN
    FOR v IN
        SELECT r.tenant, r.pos, r.join_round, r.share FROM batchq.tenant_ring r
        WHERE r.queue = p_queue
          AND r.tenant IN (SELECT DISTINCT a.tenant FROM batchq.ledger_adjustments a WHERE a.queue = p_queue)
        ORDER BY r.tenant
        FOR UPDATE SKIP LOCKED
    LOOP
        -- Adjustments of an earlier membership are dropped: a tenant whose
        -- queue emptied starts afresh.
        WITH consumed AS (
            DELETE FROM batchq.ledger_adjustments a
            WHERE a.queue = p_queue AND a.tenant = v.tenant
            RETURNING a.pos, a.after_seq, a.delta
        )
        SELECT array_agg(c.after_seq), array_agg(c.delta), coalesce(sum(c.delta), 0)
        INTO v_seqs, v_deltas, v_total
        FROM consumed c WHERE c.pos = v.pos;
        CONTINUE WHEN v_total = 0;
        WITH shift AS (
            SELECT j.id, (SELECT sum(u.delta) FROM unnest(v_seqs, v_deltas) AS u (after_seq, delta)
                          WHERE u.after_seq < j.seq)::bigint AS delta
            FROM batchq.jobs j
            WHERE j.queue = p_queue AND j.tenant = v.tenant AND j.state = 'queued' AND j.pos = v.pos
        )
        UPDATE batchq.jobs j
        SET cum = j.cum + s.delta, round = batchq.drr_round(v.join_round, j.cum + s.delta, v.share)
        FROM shift s
        WHERE j.id = s.id AND s.delta <> 0;
        UPDATE batchq.tenant_ring r SET cum = r.cum + v_total
        WHERE r.queue = p_queue AND r.tenant = v.tenant;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.rekey(p_queue text, p_tenant text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_share bigint;
    v_start bigint;
BEGIN
    PERFORM 1 FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = p_tenant FOR UPDATE;
    SELECT batchq.drr_share(q.quantum, coalesce(w.weight, 1)) INTO v_share
    FROM batchq.queues q LEFT JOIN batchq.tenants w ON w.name = p_tenant
    WHERE q.name = p_queue;
    SELECT j.round INTO v_start FROM batchq.jobs j
    WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.state = 'queued'
    ORDER BY j.seq LIMIT 1;
    IF v_start IS NULL THEN
        UPDATE batchq.tenant_ring r SET share = v_share WHERE r.queue = p_queue AND r.tenant = p_tenant;
        RETURN;
    END IF;
    WITH src AS (
        SELECT j.id, (sum(j.cost) OVER (ORDER BY j.seq))::bigint AS cum
        FROM batchq.jobs j
        WHERE j.queue = p_queue AND j.tenant = p_tenant AND j.state = 'queued'
    ), upd AS (
        UPDATE batchq.jobs j SET cum = s.cum, round = batchq.drr_round(v_start, s.cum, v_share)
        FROM src s WHERE j.id = s.id AND j.state = 'queued'
    )
    UPDATE batchq.tenant_ring r
    SET join_round = v_start, share = v_share, cum = coalesce((SELECT max(s.cum) FROM src s), r.cum)
    WHERE r.queue = p_queue AND r.tenant = p_tenant;
END
$$;
-- +goose StatementEnd
