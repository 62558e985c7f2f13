-- A sketch of enqueue with keys set later: the enqueue writes a lean row and
-- counts it against its tenant's bound; a mover keys staged rows into
-- batchq.jobs in arrival order. Measured by bench/staged.sh; not part of
-- batchq's schema.
CREATE TABLE batchq.staged (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text NOT NULL,
    tenant       text NOT NULL,
    kind         text NOT NULL,
    cost         bigint NOT NULL,
    deadline     timestamptz NOT NULL,
    payload      jsonb NOT NULL,
    max_attempts integer NOT NULL
);
-- A tenant's jobs not yet finished, staged or keyed: the bound's count, one
-- row per (queue, tenant), which enqueue locks and a finish would lower.
CREATE TABLE batchq.staged_counts (
    queue  text NOT NULL,
    tenant text NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (queue, tenant)
);

-- stage: the enqueue. Every tenant's count is raised, in tenant order (no
-- deadlock between calls), unless it would pass the bound; then the rows go
-- in. Each job's arguments are checked first, as batchq.enqueue checks them.
-- Returns how many went in, or raises queue_full.
CREATE FUNCTION batchq.stage(p_queue text, p_tenant text[], p_kind text[], p_cost bigint[], p_deadline timestamptz[],
                             p_max_attempts integer[], p_payload jsonb[]) RETURNS bigint
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    q       batchq.queues;
    v_n     integer := cardinality(p_tenant);
    v_ok    integer;
    v_want  integer;
    v_error text[];
BEGIN
    v_error := batchq.enqueue_error(p_queue, p_tenant, p_kind, p_cost, p_deadline, NULL, p_max_attempts, p_payload,
                                    NULL, NULL, NULL);
    IF v_error IS NOT NULL THEN
        PERFORM batchq.raise_invalid_job(v_error[1]::integer, v_error[2:4]);
    END IF;
    SELECT * INTO q FROM batchq.queues WHERE name = p_queue FOR KEY SHARE;
    IF v_n = 1 THEN
        INSERT INTO batchq.staged_counts AS c (queue, tenant, n) VALUES (p_queue, p_tenant[1], 1)
        ON CONFLICT (queue, tenant) DO UPDATE SET n = c.n + 1 WHERE c.n + 1 <= q.max_per_tenant;
        GET DIAGNOSTICS v_ok = ROW_COUNT;
        v_want := 1;
    ELSE
        WITH t AS (SELECT x.tenant, count(*) AS k FROM unnest(p_tenant) AS x (tenant) GROUP BY x.tenant
                   ORDER BY x.tenant COLLATE "C"),
             up AS (INSERT INTO batchq.staged_counts AS c (queue, tenant, n) SELECT p_queue, t.tenant, t.k FROM t
                    ON CONFLICT (queue, tenant) DO UPDATE SET n = c.n + excluded.n
                    WHERE c.n + excluded.n <= q.max_per_tenant
                    RETURNING 1)
        SELECT (SELECT count(*) FROM up), (SELECT count(*) FROM t) INTO v_ok, v_want;
    END IF;
    IF v_ok <> v_want THEN
        RAISE EXCEPTION 'queue_full' USING ERRCODE = 'BQ200';
    END IF;
    INSERT INTO batchq.staged (queue, tenant, kind, cost, deadline, payload, max_attempts)
    SELECT p_queue, x.tenant, coalesce(nullif(x.kind, ''), 'default'), x.cost,
           CASE WHEN x.deadline IS NULL OR x.deadline < '0002-01-01' THEN statement_timestamp() + q.default_ttl
                ELSE x.deadline END,
           coalesce(x.payload, '{}'), coalesce(nullif(x.max_attempts, 0), q.max_attempts)
    FROM unnest(p_tenant, p_kind, p_cost, p_deadline, p_max_attempts, p_payload)
         AS x (tenant, kind, cost, deadline, max_attempts, payload);
    RETURN v_n;
END
$$;

-- move_staged: up to p_limit staged rows, oldest first, keyed into
-- batchq.jobs by today's insert (the upper bound of what a mover would
-- cost: it checks the bound again, which a mover would not need).
CREATE FUNCTION batchq.move_staged(p_queue text, p_limit integer) RETURNS bigint
LANGUAGE sql AS $$
    WITH m AS (
        DELETE FROM batchq.staged s
        WHERE s.id IN (SELECT t.id FROM batchq.staged t WHERE t.queue = p_queue ORDER BY t.id LIMIT p_limit
                       FOR UPDATE SKIP LOCKED)
        RETURNING s.*
    ), a AS (
        SELECT array_agg(m.tenant ORDER BY m.id) AS tenant, array_agg(m.kind ORDER BY m.id) AS kind,
               array_agg(m.cost ORDER BY m.id) AS cost, array_agg(m.deadline ORDER BY m.id) AS deadline,
               array_agg(m.max_attempts ORDER BY m.id) AS max_attempts, array_agg(m.payload ORDER BY m.id) AS payload
        FROM m
    )
    SELECT count(*) FROM a, batchq.insert_jobs(p_queue, a.tenant, a.kind, a.cost, a.deadline, a.max_attempts, a.payload,
                                               NULL, NULL) AS r
    WHERE a.tenant IS NOT NULL
$$;
