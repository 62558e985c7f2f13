-- Reports for analysts: plain SQL over the queue's tables, the same queries
-- `batchq report …` runs.

-- tenant_usage: per queue and tenant, the jobs that finished in [since,
-- until): how many by outcome, their tokens, the wait from enqueue to first
-- claim (p50 and p95 of the jobs that were claimed), and the tenant's share
-- of the queue's served tokens against its share of the weights. Token
-- columns count what the scheduler charged: succeeded jobs at their actual
-- cost (the estimate when none was reported), the others at their estimate;
-- served_tokens charges every attempt at the estimate and a succeeded job's
-- last at its actual cost. One SELECT, so the planner inlines it and the
-- window reaches the index on outcomes.finished_at.
CREATE OR REPLACE FUNCTION batchq.tenant_usage(since timestamptz, until timestamptz)
RETURNS SETOF batchq.tenant_usage_rows
LANGUAGE sql STABLE PARALLEL SAFE AS $$
WITH w AS (
    SELECT o.queue,
           o.tenant,
           count(*) AS jobs,
           count(*) FILTER (WHERE o.outcome = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE o.outcome = 'failed')    AS failed,
           count(*) FILTER (WHERE o.outcome = 'expired')   AS expired,
           count(*) FILTER (WHERE o.outcome = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE o.outcome = 'discarded') AS discarded,
           coalesce(sum(coalesce(o.actual_cost, o.estimated_cost)) FILTER (WHERE o.outcome = 'succeeded'), 0)::bigint AS succeeded_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'failed'), 0)::bigint    AS failed_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'expired'), 0)::bigint   AS expired_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'cancelled'), 0)::bigint AS cancelled_tokens,
           coalesce(sum(o.estimated_cost) FILTER (WHERE o.outcome = 'discarded'), 0)::bigint AS discarded_tokens,
           coalesce(sum(o.actual_cost), 0)::bigint AS actual_tokens,
           coalesce(sum(CASE WHEN o.outcome = 'succeeded'
                             THEN o.estimated_cost * (o.attempts - 1) + coalesce(o.actual_cost, o.estimated_cost)
                             ELSE o.estimated_cost * o.attempts END), 0)::bigint AS served_tokens,
           percentile_cont(0.5)  WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY o.first_claimed_at - o.enqueued_at) AS wait_p95
    FROM batchq.outcomes o
    WHERE o.finished_at >= tenant_usage.since AND o.finished_at < tenant_usage.until
    GROUP BY o.queue, o.tenant
), s AS (
    SELECT w.*, coalesce(qt.weight, t.weight, 1) AS weight
    FROM w
    LEFT JOIN batchq.queue_tenants qt ON qt.queue = w.queue AND qt.tenant = w.tenant
    LEFT JOIN batchq.tenants t ON t.name = w.tenant
), r AS (
    -- Weights relative to the queue's largest, which add up without
    -- overflow however large the weights.
    SELECT s.*, s.weight / max(s.weight) OVER (PARTITION BY s.queue) AS rel
    FROM s
)
SELECT r.queue, r.tenant, r.jobs, r.succeeded, r.failed, r.expired, r.cancelled, r.discarded,
       r.succeeded_tokens, r.failed_tokens, r.expired_tokens, r.cancelled_tokens, r.discarded_tokens,
       r.actual_tokens, r.served_tokens, r.wait_p50, r.wait_p95, r.weight,
       r.served_tokens::double precision / nullif(sum(r.served_tokens) OVER (PARTITION BY r.queue), 0) AS token_share,
       r.rel / sum(r.rel) OVER (PARTITION BY r.queue) AS weight_share
FROM r
ORDER BY r.queue, r.tenant
$$;
