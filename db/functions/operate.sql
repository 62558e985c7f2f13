-- Operator controls: pause and resume a queue, cancel jobs in bulk, delete
-- a queue. Of the roles of migrations/grants/grants.sql, only the operator
-- role may call them (and the schema's owner).

-- pause_queue stops a queue's claims: workers find nothing to claim until
-- resume_queue, while enqueues, running jobs and maintenance go on. Returns
-- whether the queue was running (false when it was paused already).
CREATE OR REPLACE FUNCTION batchq.pause_queue(p_queue text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM batchq.check_queue_argument('pause queue', p_queue);
    UPDATE batchq.queues q SET paused_at = now(), updated_at = now() WHERE q.name = p_queue AND q.paused_at IS NULL;
    IF FOUND THEN
        -- Pools hand back the jobs they claimed ahead as soon as they hear
        -- it, not at their next look (a name holds no space).
        PERFORM pg_notify('batchq_jobs', p_queue || ' paused');
        RETURN true;
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
    RETURN false;
END
$$;

-- resume_queue lets a paused queue's workers claim again, and wakes them.
-- Returns whether the queue was paused.
CREATE OR REPLACE FUNCTION batchq.resume_queue(p_queue text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM batchq.check_queue_argument('resume queue', p_queue);
    UPDATE batchq.queues q SET paused_at = NULL, updated_at = now() WHERE q.name = p_queue AND q.paused_at IS NOT NULL;
    IF FOUND THEN
        PERFORM pg_notify('batchq_jobs', p_queue);
        RETURN true;
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
    RETURN false;
END
$$;

-- check_job_filter refuses a filter of jobs whose names break their rules.
CREATE OR REPLACE FUNCTION batchq.check_job_filter(p_function text, p_queue text, p_tenant text, p_kind text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_error text[] := coalesce(batchq.queue_name_error(p_queue),
                               CASE WHEN p_tenant IS NOT NULL THEN batchq.name_error('tenant', p_tenant) END,
                               CASE WHEN p_kind IS NOT NULL THEN batchq.name_error('kind', p_kind) END);
BEGIN
    IF v_error IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = v_error[1],
            MESSAGE = format('batchq: %s: %s: %s', p_function, v_error[2], v_error[3]),
            COLUMN = v_error[2],
            DETAIL = jsonb_build_object('index', 0, 'field', v_error[2], 'rule', v_error[3])::text;
    END IF;
    PERFORM batchq.raise_unknown_queue(p_queue);
END
$$;

-- check_job_window refuses a window of enqueue times [p_after, p_before)
-- that holds no time: no job matches it, and a count or a cancel with the
-- two swapped would find nothing and say so as if the queue held nothing.
-- `batchq jobs cancel` refuses it the same way.
CREATE OR REPLACE FUNCTION batchq.check_job_window(p_function text, p_before timestamptz, p_after timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_after >= p_before THEN
        PERFORM batchq.raise_invalid_argument(p_function, 'enqueued_after',
            format('must be before enqueued_before, or no job matches (got %s, enqueued_before %s)',
                   batchq.rfc3339(p_after), batchq.rfc3339(p_before)));
    END IF;
END
$$;

-- matching_jobs counts the unfinished jobs of a queue that a bulk cancel
-- with the same filter would touch, by state: what `batchq jobs cancel`
-- shows before it acts. NULL filters match every job.
CREATE OR REPLACE FUNCTION batchq.matching_jobs(p_queue text, p_tenant text DEFAULT NULL, p_kind text DEFAULT NULL,
                                                p_enqueued_before timestamptz DEFAULT NULL,
                                                p_enqueued_after timestamptz DEFAULT NULL)
RETURNS TABLE (state text, jobs bigint, tokens numeric)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM batchq.check_job_filter('count jobs', p_queue, p_tenant, p_kind);
    PERFORM batchq.check_job_window('count jobs', p_enqueued_before, p_enqueued_after);
    RETURN QUERY
    SELECT s.state::text, coalesce(c.jobs, 0), coalesce(c.tokens, 0)
    FROM unnest(enum_range(NULL::batchq.job_state)) AS s (state)
    LEFT JOIN (SELECT j.state, count(*) AS jobs, sum(j.cost) AS tokens
               FROM batchq.jobs j
               WHERE j.queue = p_queue
                 AND (p_tenant IS NULL OR j.tenant = p_tenant) AND (p_kind IS NULL OR j.kind = p_kind)
                 AND (p_enqueued_before IS NULL OR j.enqueued_at < p_enqueued_before)
                 AND (p_enqueued_after IS NULL OR j.enqueued_at >= p_enqueued_after)
               GROUP BY j.state) c ON c.state = s.state
    ORDER BY s.state;
END
$$;

-- cancel_jobs cancels the unfinished jobs of a queue that match a filter,
-- up to p_limit of them with ids above p_after_id, in id order, in one
-- transaction: a waiting job is finished as 'cancelled' (its cost leaves
-- its tenant's ledger, and the fair order is re-keyed), a running one is
-- asked to stop (see batchq.cancel); one asked already is left as it is.
-- Returns how many it cancelled and newly asked to stop, and the last id it
-- reached, to pass as p_after_id to the next call: 0 when it reached the
-- end. Calls in turn walk the queue once, whatever it holds.
CREATE OR REPLACE FUNCTION batchq.cancel_jobs(p_queue text, p_tenant text DEFAULT NULL, p_kind text DEFAULT NULL,
                                              p_enqueued_before timestamptz DEFAULT NULL,
                                              p_enqueued_after timestamptz DEFAULT NULL,
                                              p_after_id bigint DEFAULT 0, p_limit integer DEFAULT 1000,
                                              p_reason text DEFAULT 'cancelled')
RETURNS TABLE (cancelled integer, stopping integer, last_id bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_waiting bigint[];
    v_running bigint[];
    v_last    bigint;
    v_n       integer;
    v_reason  text := coalesce(nullif(p_reason, ''), 'cancelled');
BEGIN
    PERFORM batchq.check_job_filter('cancel jobs', p_queue, p_tenant, p_kind);
    PERFORM batchq.check_job_window('cancel jobs', p_enqueued_before, p_enqueued_after);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        PERFORM batchq.raise_invalid_argument('cancel jobs', 'limit',
            format('must be in 1..100000 (got %s)', coalesce(p_limit::text, 'null')));
    END IF;
    IF octet_length(p_reason) > 4096 THEN
        PERFORM batchq.raise_invalid_argument('cancel jobs', 'reason',
            format('must be at most 4096 bytes (got %s)', octet_length(p_reason)));
    END IF;
    -- In id order, waiting for a claim or a finish that holds a row (claims
    -- never wait for this, and every statement that waits on job rows takes
    -- them in id order).
    -- A running job asked to stop already keeps its request's time and
    -- reason, and is not counted again: running this again (the same
    -- command, with the default reason) must not pass for asking anew, nor
    -- put its words over the first request's.
    SELECT array_agg(l.id ORDER BY l.id) FILTER (WHERE l.state <> 'running'),
           array_agg(l.id ORDER BY l.id) FILTER (WHERE l.state = 'running' AND l.cancel_requested_at IS NULL),
           max(l.id), count(*)
    INTO v_waiting, v_running, v_last, v_n
    FROM (SELECT j.id, j.state, j.cancel_requested_at FROM batchq.jobs j
          WHERE j.queue = p_queue AND j.id > coalesce(p_after_id, 0)
            AND (p_tenant IS NULL OR j.tenant = p_tenant) AND (p_kind IS NULL OR j.kind = p_kind)
            AND (p_enqueued_before IS NULL OR j.enqueued_at < p_enqueued_before)
            AND (p_enqueued_after IS NULL OR j.enqueued_at >= p_enqueued_after)
          ORDER BY j.id
          LIMIT p_limit
          FOR UPDATE OF j) l;
    IF v_running IS NOT NULL THEN
        UPDATE batchq.jobs j SET cancel_requested_at = now(), last_error = v_reason
        WHERE j.queue = p_queue AND j.id = ANY (v_running);
    END IF;
    IF v_waiting IS NOT NULL THEN
        PERFORM 1 FROM batchq.cancel_waiting(p_queue, v_waiting, v_reason);
        -- Their costs leave their tenants' ledgers now, so the jobs left
        -- are re-keyed at once, not at the next maintenance pass; but
        -- without waiting for job rows past the batch, which could close a
        -- cycle with a transaction waiting for the batch (fold_pending).
        PERFORM batchq.fold_pending(p_queue, false);
    END IF;
    RETURN QUERY SELECT coalesce(cardinality(v_waiting), 0), coalesce(cardinality(v_running), 0),
                        CASE WHEN v_n = p_limit THEN v_last ELSE 0 END;
END
$$;

-- delete_queue deletes a queue that holds no unfinished job, with its ring,
-- cursor, pending corrections, per-queue tenant settings, schedules and
-- maintenance turn, and
-- returns how many schedules went with it; its outcomes stay, as history. A
-- queue that holds jobs is refused (BQ203) with how many, by state, and how
-- many schedules it has: they may enqueue more, and would go with it.
CREATE OR REPLACE FUNCTION batchq.delete_queue(p_queue text) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_counts    jsonb;
    v_total     bigint;
    v_schedules bigint;
BEGIN
    PERFORM batchq.check_queue_argument('delete queue', p_queue);
    -- Held, so no enqueue adds a job and no schedule is made for the queue
    -- meanwhile (both hold it FOR KEY SHARE). A queue of the name made again
    -- while this waited for the one deleted meanwhile is locked in its turn:
    -- nothing below runs on a queue this does not hold.
    LOOP
        PERFORM 1 FROM batchq.queues q WHERE q.name = p_queue FOR UPDATE;
        EXIT WHEN FOUND;
        PERFORM batchq.raise_unknown_queue(p_queue);
    END LOOP;
    SELECT coalesce(jsonb_object_agg(c.state, c.n), '{}'), coalesce(sum(c.n), 0) INTO v_counts, v_total
    FROM (SELECT j.state::text AS state, count(*) AS n FROM batchq.jobs j WHERE j.queue = p_queue GROUP BY j.state) c;
    IF v_total > 0 THEN
        SELECT count(*) INTO v_schedules FROM batchq.schedules s WHERE s.queue = p_queue;
        -- queue.QueueNotEmptyError words it the same.
        RAISE EXCEPTION USING
            ERRCODE = 'BQ203',
            MESSAGE = format('batchq: queue %s holds %s %s (%s queued, %s running, %s retrying, %s scheduled): '
                             'cancel %s (batchq jobs cancel --queue %s) or let %s finish first%s',
                             batchq.quote(p_queue), v_total,
                             CASE WHEN v_total = 1 THEN 'unfinished job' ELSE 'unfinished jobs' END,
                             coalesce(v_counts->>'queued', '0'), coalesce(v_counts->>'running', '0'),
                             coalesce(v_counts->>'retrying', '0'), coalesce(v_counts->>'scheduled', '0'),
                             CASE WHEN v_total = 1 THEN 'it' ELSE 'them' END, p_queue,
                             CASE WHEN v_total = 1 THEN 'it' ELSE 'them' END,
                             CASE WHEN v_schedules = 0 THEN ''
                                  ELSE format('; it also has %s %s, which may enqueue more and are deleted with it '
                                              '(batchq schedules list --queue %s)', v_schedules,
                                              CASE WHEN v_schedules = 1 THEN 'schedule' ELSE 'schedules' END, p_queue)
                             END),
            DETAIL = (jsonb_build_object('queue', p_queue, 'jobs', v_total, 'schedules', v_schedules) || v_counts)::text;
    END IF;
    -- The ring rows before the corrections, in tenant order, as a fold
    -- takes them: a fold holding a ring row and waiting for a correction
    -- this deleted would otherwise meet the cascade into the ring.
    PERFORM 1 FROM batchq.tenant_ring r WHERE r.queue = p_queue ORDER BY r.tenant FOR UPDATE;
    DELETE FROM batchq.ledger_adjustments a WHERE a.queue = p_queue;
    -- Deleting the queue would cascade to them; deleted here, they are counted.
    DELETE FROM batchq.schedules s WHERE s.queue = p_queue;
    GET DIAGNOSTICS v_schedules = ROW_COUNT;
    DELETE FROM batchq.queues q WHERE q.name = p_queue;
    DELETE FROM batchq.maintenance_turns m WHERE m.queue = p_queue;
    RETURN v_schedules;
END
$$;
