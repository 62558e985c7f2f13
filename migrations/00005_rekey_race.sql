-- +goose Up

-- rekey (00002) re-schedules a tenant's queued jobs after its weight or the
-- queue's quantum changed. It reads the head's round in one statement and
-- re-keys the queued jobs in the next; claims that took every queued job in
-- between left it nothing to re-key, and it set the ring's cum to NULL
-- (a not-null violation, so SetTenant and UpdateQueue failed under load).
-- It also re-keyed jobs that a claim had taken meanwhile. Now it re-keys only
-- jobs still queued, and the ring's ledger covers every job it counted (a
-- job claimed meanwhile was spent in this membership); with none left, the
-- ring keeps its ledger and the tenant's next job starts a new membership.
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

-- +goose Down
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
        FROM src s WHERE j.id = s.id
        RETURNING j.cum
    )
    UPDATE batchq.tenant_ring r
    SET join_round = v_start, share = v_share, cum = (SELECT max(u.cum) FROM upd u)
    WHERE r.queue = p_queue AND r.tenant = p_tenant;
END
$$;
-- +goose StatementEnd
