-- +goose Up

-- The round of a queue's latest claim moves out of batchq.queues into a row
-- of its own that only claims write. A claim advanced it in the queue's
-- settings row, and a settings change (a new quantum) holds that row while it
-- re-keys the backlog, waiting on job rows a claim holds: the two deadlocked,
-- SKIP LOCKED notwithstanding, because locking a row another transaction has
-- updated waits for that transaction. Nothing that waits on job rows touches
-- this row.
CREATE TABLE batchq.queue_cursors (
    queue text PRIMARY KEY REFERENCES batchq.queues (name) ON DELETE CASCADE,
    round bigint NOT NULL DEFAULT 0
);
INSERT INTO batchq.queue_cursors (queue, round) SELECT q.name, q.cursor_round FROM batchq.queues q;
ALTER TABLE batchq.queues DROP COLUMN cursor_round;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.ring_join(p_queue text, p_tenants text[], p_skip_locked boolean)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_locked text[];
    v_tenant text;
    v_round  bigint;
    v_quantum bigint;
BEGIN
    INSERT INTO batchq.tenant_ring (queue, tenant)
    SELECT p_queue, t FROM (SELECT DISTINCT t FROM unnest(p_tenants) AS t ORDER BY t) s
    ON CONFLICT DO NOTHING;

    IF p_skip_locked THEN
        SELECT array_agg(r.tenant) INTO v_locked FROM (
            SELECT r.tenant FROM batchq.tenant_ring r
            WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
            ORDER BY r.tenant FOR UPDATE SKIP LOCKED) r;
    ELSE
        SELECT array_agg(r.tenant) INTO v_locked FROM (
            SELECT r.tenant FROM batchq.tenant_ring r
            WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
            ORDER BY r.tenant FOR UPDATE) r;
    END IF;
    IF v_locked IS NULL THEN
        RETURN;
    END IF;

    SELECT coalesce(c.round, 0), q.quantum INTO v_round, v_quantum
    FROM batchq.queues q LEFT JOIN batchq.queue_cursors c ON c.queue = q.name
    WHERE q.name = p_queue;

    -- Rejoin in the order given: that is the order the tenants became active.
    FOR v_tenant IN
        SELECT t.tenant FROM unnest(p_tenants) WITH ORDINALITY AS t (tenant, ord)
        WHERE t.tenant = ANY (v_locked)
          AND NOT EXISTS (SELECT 1 FROM batchq.jobs j
                          WHERE j.queue = p_queue AND j.tenant = t.tenant AND j.state = 'queued')
        GROUP BY t.tenant ORDER BY min(t.ord)
    LOOP
        UPDATE batchq.tenant_ring r
        SET pos = nextval('batchq.ring_pos'),
            join_round = v_round,
            share = batchq.drr_share(v_quantum, coalesce(
                (SELECT w.weight FROM batchq.tenants w WHERE w.name = v_tenant), 1)),
            cum = 0
        WHERE r.queue = p_queue AND r.tenant = v_tenant;
    END LOOP;

    RETURN QUERY SELECT unnest(v_locked);
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE batchq.queues ADD COLUMN cursor_round bigint NOT NULL DEFAULT 0;
UPDATE batchq.queues q SET cursor_round = c.round FROM batchq.queue_cursors c WHERE c.queue = q.name;
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION batchq.ring_join(p_queue text, p_tenants text[], p_skip_locked boolean)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v_locked text[];
    v_tenant text;
    v_round  bigint;
    v_quantum bigint;
BEGIN
    INSERT INTO batchq.tenant_ring (queue, tenant)
    SELECT p_queue, t FROM (SELECT DISTINCT t FROM unnest(p_tenants) AS t ORDER BY t) s
    ON CONFLICT DO NOTHING;

    IF p_skip_locked THEN
        SELECT array_agg(r.tenant) INTO v_locked FROM (
            SELECT r.tenant FROM batchq.tenant_ring r
            WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
            ORDER BY r.tenant FOR UPDATE SKIP LOCKED) r;
    ELSE
        SELECT array_agg(r.tenant) INTO v_locked FROM (
            SELECT r.tenant FROM batchq.tenant_ring r
            WHERE r.queue = p_queue AND r.tenant = ANY (p_tenants)
            ORDER BY r.tenant FOR UPDATE) r;
    END IF;
    IF v_locked IS NULL THEN
        RETURN;
    END IF;

    SELECT q.cursor_round, q.quantum INTO v_round, v_quantum FROM batchq.queues q WHERE q.name = p_queue;

    -- Rejoin in the order given: that is the order the tenants became active.
    FOR v_tenant IN
        SELECT t.tenant FROM unnest(p_tenants) WITH ORDINALITY AS t (tenant, ord)
        WHERE t.tenant = ANY (v_locked)
          AND NOT EXISTS (SELECT 1 FROM batchq.jobs j
                          WHERE j.queue = p_queue AND j.tenant = t.tenant AND j.state = 'queued')
        GROUP BY t.tenant ORDER BY min(t.ord)
    LOOP
        UPDATE batchq.tenant_ring r
        SET pos = nextval('batchq.ring_pos'),
            join_round = v_round,
            share = batchq.drr_share(v_quantum, coalesce(
                (SELECT w.weight FROM batchq.tenants w WHERE w.name = v_tenant), 1)),
            cum = 0
        WHERE r.queue = p_queue AND r.tenant = v_tenant;
    END LOOP;

    RETURN QUERY SELECT unnest(v_locked);
END
$$;
-- +goose StatementEnd
DROP TABLE batchq.queue_cursors;
