-- The arithmetic of the fair order (docs/design/fair-order.md).

-- drr_round is the round in which a job is served: on visit ceil(cum / share)
-- of a membership that began in join_round, never before the first visit.
-- Not STRICT, so the planner inlines it: its arguments are never null.
-- (cum - 1) / share + 1 is ceil(cum / share) without overflowing.
CREATE OR REPLACE FUNCTION batchq.drr_round(join_round bigint, cum bigint, share bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN join_round + greatest((cum - 1) / share + 1, 1) - 1;

-- drr_share is a tenant's grant per visit, by drr's rule (drr.Config.Grant):
-- the quantum for weight 1; otherwise quantum × weight rounded half away from
-- zero on the double itself, at least 1.
CREATE OR REPLACE FUNCTION batchq.drr_share(quantum bigint, weight double precision) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE
        WHEN weight = 1 THEN greatest(quantum, 1)
        WHEN quantum * weight >= 9223372036854775807::double precision THEN 9223372036854775807
        ELSE greatest(1, trunc(quantum * weight)::bigint
                         + (quantum * weight - trunc(quantum * weight) >= 0.5)::integer)
    END;

-- tenant_weight is a tenant's weight in a queue: its setting for that queue
-- (batchq.queue_tenants), else its setting for every queue
-- (batchq.tenants), else 1. Looked up once per tenant that joins the ring or
-- is re-keyed, by two primary-key probes. PL/pgSQL, so the session keeps its
-- plan: a SQL function with subqueries is never inlined and is planned on
-- every call.
CREATE OR REPLACE FUNCTION batchq.tenant_weight(p_queue text, p_tenant text) RETURNS double precision
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN coalesce((SELECT q.weight FROM batchq.queue_tenants q WHERE q.queue = p_queue AND q.tenant = p_tenant),
                    (SELECT t.weight FROM batchq.tenants t WHERE t.name = p_tenant),
                    1);
END
$$;
