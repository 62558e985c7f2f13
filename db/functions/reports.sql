-- Reports for analysts: plain SQL over the queue's tables, the same queries
-- `batchq report …` runs.

-- tenant_usage: per queue and tenant, the jobs that finished in [since,
-- until): how many by outcome, their tokens, the wait from enqueue to first
-- claim (p50 and p95 of the jobs that were claimed), and the tenant's share
-- of the queue's served tokens against its share of the weights. Token
-- columns count what the scheduler charged: succeeded jobs at their actual
-- cost (the estimate when none was reported), the others at their estimate;
-- served_tokens charges every attempt at the estimate and a succeeded job's
-- last at its actual cost. The window reaches the index on
-- outcomes.finished_at.
--
-- A window that holds no time is refused by name (BQ101), as matching_jobs
-- refuses one: since not before until, or either NULL, would match nothing
-- and answer that no job finished. It runs as the schema's owner, as the
-- console's reports do, so that the roles that may read it may also be
-- told why it refused.
CREATE OR REPLACE FUNCTION batchq.tenant_usage(since timestamptz, until timestamptz)
RETURNS SETOF batchq.tenant_usage_rows
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF since IS NULL OR until IS NULL THEN
        PERFORM batchq.raise_invalid_argument('tenant_usage', CASE WHEN since IS NULL THEN 'since' ELSE 'until' END,
            'must not be null, or no job matches');
    END IF;
    IF since >= until THEN
        PERFORM batchq.raise_invalid_argument('tenant_usage', 'since',
            format('must be before until, or no job matches (got %s, until %s)', batchq.rfc3339(since),
                   batchq.rfc3339(until)));
    END IF;
    RETURN QUERY
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
    ORDER BY r.queue, r.tenant;
END
$$;

-- console_backlog: what each tenant of p_queue (every queue when NULL; one
-- tenant when p_tenant is set) has waiting and running, read from the fair
-- order's own state in time that grows with the tenants, not the jobs: one
-- index probe per tenant in the ring (its first queued job) where counting a
-- million queued jobs takes a scan of them. The last job a tenant enqueued
-- is its ring row's enq_seq and cum, the ledger the next enqueue continues,
-- so the tail needs no probe. The web console reads it.
--
-- queued_tokens is exact: the ledger from the first queued job to the last
-- enqueued one, less the refunds of jobs that left between them (expired,
-- cancelled, released, the last one too) that maintenance has not folded
-- into the keys yet (a job claimed out of turn, past one another
-- transaction held, counts until that one is claimed). queued_span counts
-- the sequence numbers from the first queued job to the last enqueued: the
-- queued jobs, and any job that left from inside or the end of the backlog
-- out of turn since the tenant joined the ring, so it is an upper bound,
-- exact for a backlog nothing left early; console_queued counts exactly.
-- running jobs, and scheduled ones (a run-at not reached yet, or a retry's
-- backoff), come from their own partial indexes. A queue named that does
-- not exist is refused (BQ201).
CREATE OR REPLACE FUNCTION batchq.console_backlog(p_queue text, p_tenant text)
RETURNS SETOF batchq.console_backlog_rows
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT batchq.check_queue('console_backlog', p_queue) WHERE p_queue IS NOT NULL;
WITH q AS (
    SELECT r.queue, r.tenant,
           (r.cum - h.cum + h.cost + coalesce(a.delta, 0))::bigint AS queued_tokens,
           (r.enq_seq - h.seq + 1)::bigint AS queued_span,
           h.enqueued_at AS oldest_queued_at
    FROM batchq.tenant_ring r
    CROSS JOIN LATERAL (SELECT j.cum, j.cost, j.seq, j.enqueued_at FROM batchq.jobs j
                        WHERE j.pos = r.pos AND j.state = 'queued' ORDER BY j.seq LIMIT 1) h
    LEFT JOIN LATERAL (SELECT sum(d.delta) AS delta FROM batchq.ledger_adjustments d
                       WHERE d.queue = r.queue AND d.tenant = r.tenant AND d.pos = r.pos
                         AND d.after_seq >= h.seq AND d.after_seq <= r.enq_seq) a ON true
    WHERE (p_queue IS NULL OR r.queue = p_queue) AND (p_tenant IS NULL OR r.tenant = p_tenant)
), o AS (
    SELECT s.queue, s.tenant, sum(s.running)::bigint AS running_jobs, sum(s.scheduled)::bigint AS scheduled_jobs
    FROM (SELECT j.queue, j.tenant, count(*) AS running, 0 AS scheduled FROM batchq.jobs j
          WHERE j.state = 'running' AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
          GROUP BY j.queue, j.tenant
          UNION ALL
          SELECT j.queue, j.tenant, 0, count(*) FROM batchq.jobs j
          WHERE j.state IN ('retrying', 'scheduled') AND (p_queue IS NULL OR j.queue = p_queue) AND (p_tenant IS NULL OR j.tenant = p_tenant)
          GROUP BY j.queue, j.tenant) s
    GROUP BY s.queue, s.tenant
)
SELECT coalesce(q.queue, o.queue), coalesce(q.tenant, o.tenant), coalesce(q.queued_tokens, 0), coalesce(q.queued_span, 0),
       q.oldest_queued_at, coalesce(o.running_jobs, 0), coalesce(o.scheduled_jobs, 0)
FROM q FULL JOIN o ON o.queue = q.queue AND o.tenant = q.tenant
$$;

-- console_queued: how many jobs each of p_tenants (every tenant when NULL)
-- has queued in p_queue, counted, up to p_limit each (a tenant with more
-- gets p_limit: count it with console_backlog's queued_span instead). It
-- reads the tenants' queued jobs in the fair order's index, nothing else.
-- The limit is what bounds that read: NULL, which LIMIT takes for none, is
-- refused with the numbers below 1 (BQ101). No such queue is refused
-- (BQ201).
CREATE OR REPLACE FUNCTION batchq.console_queued(p_queue text, p_tenants text[], p_limit bigint)
RETURNS SETOF batchq.console_queued_rows
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM batchq.check_queue('console_queued', p_queue);
    IF p_limit IS NULL OR p_limit < 1 THEN
        PERFORM batchq.raise_invalid_argument('console_queued', 'limit',
            format('must be at least 1 (got %s)', coalesce(p_limit::text, 'null')));
    END IF;
    RETURN QUERY
    SELECT r.tenant, (SELECT count(*) FROM (SELECT FROM batchq.jobs j WHERE j.pos = r.pos AND j.state = 'queued' LIMIT p_limit) c)
    FROM batchq.tenant_ring r
    WHERE r.queue = p_queue AND (p_tenants IS NULL OR r.tenant = ANY (p_tenants));
END
$$;

-- console_tenant_known: whether p_queue knows p_tenant, so that the web
-- console answers 404 for a tenant page that names a tenant the queue never
-- saw. A tenant is known where it has a ring row (every enqueue makes one,
-- scheduled jobs too, and it stays when the jobs finish: only deleting the
-- queue removes it, so it covers every unfinished job and every outcome
-- since the queue was made), settings for that queue or for every queue, or
-- outcomes there of the last day: a queue deleted and made again keeps the
-- outcomes of its namesake, which the console's pages show for a day. Index
-- probes: four primary keys, and, only for a queue made in the last day
-- and a tenant they did not find, the tenant's outcomes from a day ago to
-- the queue's making (outcomes_tenant), which is all a ring row does not
-- cover. No such queue is refused (BQ201): it knows no tenant, and a
-- tenant with settings for every queue would pass for known in it.
CREATE OR REPLACE FUNCTION batchq.console_tenant_known(p_queue text, p_tenant text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_created timestamptz;
BEGIN
    PERFORM batchq.check_queue_argument('console_tenant_known', p_queue);
    SELECT q.created_at INTO v_created FROM batchq.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
    IF EXISTS (SELECT FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = p_tenant)
       OR EXISTS (SELECT FROM batchq.queue_tenants qt WHERE qt.queue = p_queue AND qt.tenant = p_tenant)
       OR EXISTS (SELECT FROM batchq.tenants t WHERE t.name = p_tenant) THEN
        RETURN true;
    END IF;
    IF v_created <= statement_timestamp() - interval '1 day' THEN
        RETURN false;
    END IF;
    RETURN EXISTS (SELECT FROM batchq.outcomes o
                   WHERE o.tenant = p_tenant AND o.finished_at >= statement_timestamp() - interval '1 day'
                     AND o.finished_at < v_created AND o.queue = p_queue);
END
$$;
