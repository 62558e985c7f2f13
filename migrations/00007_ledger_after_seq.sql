-- +goose Up

-- A ledger adjustment corrects the jobs queued behind the job it is about,
-- not the whole backlog. Refunding a job expired or cancelled deep in a
-- backlog to every queued job of its tenant moved the tenant's head to an
-- earlier round, even before the queue's cursor, and the tenant then took
-- every claim until its debt was spent. after_seq is the tenant sequence
-- number of the job the adjustment is about; only queued jobs with a larger
-- seq (and the ledger new jobs continue from) take it.
ALTER TABLE batchq.ledger_adjustments ADD COLUMN after_seq bigint NOT NULL DEFAULT 0;

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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.apply_adjustments(p_queue text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v       record;
    v_delta bigint;
    v_n     integer := 0;
BEGIN
    FOR v IN
        SELECT r.tenant, r.pos, r.join_round, r.share FROM batchq.tenant_ring r
        WHERE r.queue = p_queue
          AND r.tenant IN (SELECT DISTINCT a.tenant FROM batchq.ledger_adjustments a WHERE a.queue = p_queue)
        ORDER BY r.tenant
        FOR UPDATE SKIP LOCKED
    LOOP
        WITH consumed AS (
            DELETE FROM batchq.ledger_adjustments a
            WHERE a.queue = p_queue AND a.tenant = v.tenant
            RETURNING a.pos, a.delta
        )
        SELECT coalesce(sum(c.delta) FILTER (WHERE c.pos = v.pos), 0) INTO v_delta FROM consumed c;
        CONTINUE WHEN v_delta = 0;
        UPDATE batchq.jobs j
        SET cum = j.cum + v_delta, round = batchq.drr_round(v.join_round, j.cum + v_delta, v.share)
        WHERE j.queue = p_queue AND j.tenant = v.tenant AND j.state = 'queued' AND j.pos = v.pos;
        UPDATE batchq.tenant_ring r SET cum = r.cum + v_delta
        WHERE r.queue = p_queue AND r.tenant = v.tenant;
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
-- +goose StatementEnd
ALTER TABLE batchq.ledger_adjustments DROP COLUMN after_seq;
