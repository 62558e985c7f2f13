-- How jobs finish: every outcome is written by finish_jobs, in the
-- transaction that removes the job, so each job has exactly one outcome.

-- finish_jobs removes the listed jobs of p_queue and writes each one's
-- outcome: the move from batchq.jobs to batchq.outcomes that every finishing
-- path makes. With p_tokens it finishes only the runs whose token still holds
-- the job's lease (a job listed under two tokens is finished by the one that
-- holds it, a run listed twice once, as first listed); without, the caller
-- has locked the rows. p_errors, p_results and p_actual_costs (-1 for none)
-- hold one element per id, in the ids' order, or are NULL for none at all. A succeeded outcome
-- does not keep the payload. Returns the jobs it finished.
--
-- Rows are reached through one scan of the primary key for the listed ids,
-- which takes them in id order, as every statement that waits on job rows
-- must; the token is checked by a hashed lookup, not a join, which could
-- drive the scan from the list instead.
CREATE OR REPLACE FUNCTION batchq.finish_jobs(p_queue text, p_outcome batchq.job_outcome, p_ids bigint[],
                                              p_tokens uuid[] DEFAULT NULL, p_errors text[] DEFAULT NULL,
                                              p_results jsonb[] DEFAULT NULL, p_actual_costs bigint[] DEFAULT NULL)
RETURNS TABLE (id bigint, lease_token uuid, tenant text, kind text, cost bigint, actual_cost bigint,
               state batchq.job_state, pos bigint, seq bigint, round bigint, deadline timestamptz, attempt integer,
               max_attempts integer, enqueued_at timestamptz, payload jsonb)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    WITH input AS (
        -- By position, as every other reader of these arrays: a subscript
        -- would pair an array that starts at 0 with the wrong ids.
        SELECT DISTINCT ON (i.id, i.token) i.id, i.token, i.error, nullif(i.actual_cost, -1) AS actual_cost, i.result
        FROM unnest(p_ids, p_tokens, p_errors, p_results, p_actual_costs) WITH ORDINALITY
             AS i (id, token, error, result, actual_cost, n)
        ORDER BY i.id, i.token, i.n
    ), done AS (
        -- IS TRUE keeps the lookup a filter of the scan (a bare IN would
        -- become a join).
        DELETE FROM batchq.jobs j
        WHERE j.queue = p_queue AND j.id = ANY (p_ids)
          AND (p_tokens IS NULL OR ((j.id, j.lease_token) IN (SELECT i.id, i.token FROM input i)) IS TRUE)
        RETURNING j.id, j.lease_token, j.tenant, j.kind, j.cost, j.state, j.pos, j.seq, j.round, j.deadline, j.attempt,
                  j.max_attempts, j.enqueued_at, j.first_claimed_at, j.worker, j.unique_key,
                  CASE WHEN j.state = 'scheduled' THEN j.run_after END AS run_at,
                  CASE WHEN p_outcome = 'succeeded' THEN NULL ELSE j.payload END AS payload
    ), finished AS (
        SELECT d.*, i.error, i.result, i.actual_cost
        FROM done d
        JOIN input i ON i.id = d.id AND (p_tokens IS NULL OR i.token = d.lease_token)
    ), written AS (
        INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost, attempts,
                                     max_attempts, deadline, enqueued_at, first_claimed_at, worker, error, result,
                                     payload, unique_key, run_at)
        SELECT f.id, p_queue, f.tenant, f.kind, p_outcome, f.cost, f.actual_cost, f.attempt, f.max_attempts,
               f.deadline, f.enqueued_at, f.first_claimed_at, f.worker, f.error, f.result, f.payload, f.unique_key,
               f.run_at
        FROM finished f
    )
    SELECT f.id, f.lease_token, f.tenant, f.kind, f.cost, f.actual_cost, f.state, f.pos, f.seq, f.round, f.deadline,
           f.attempt, f.max_attempts, f.enqueued_at, f.payload
    FROM finished f;
END
$$;

-- check_runs refuses arrays that do not list one element per run.
CREATE OR REPLACE FUNCTION batchq.check_runs(p_function text, p_queue text, p_ids bigint[], p_tokens uuid[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM batchq.check_queue_argument(p_function, p_queue);
    IF cardinality(p_ids) <> cardinality(p_tokens) OR (p_ids IS NULL) <> (p_tokens IS NULL) THEN
        PERFORM batchq.raise_invalid_argument(p_function, 'tokens',
            format('must hold one lease token per id (got %s for %s)', coalesce(cardinality(p_tokens)::text, 'null'),
                   coalesce(cardinality(p_ids), 0)));
    END IF;
END
$$;

-- complete finishes running jobs of p_queue as succeeded: each listed (id,
-- token) whose token still holds the job's lease. p_actual_costs holds -1
-- for "as estimated", p_results '' for no result; either may be NULL for
-- none at all. A job whose actual cost differs from its estimate has the
-- difference recorded in its tenant's ledger. Returns the runs it did not
-- finish, whose lease was lost: usually none. A run listed twice counts
-- once, as first listed. No such queue is refused (BQ201), as a claim
-- refuses it: looked up only when a run was not finished, or none listed.
CREATE OR REPLACE FUNCTION batchq.complete(p_queue text, p_ids bigint[], p_tokens uuid[], p_actual_costs bigint[],
                                           p_results text[])
RETURNS TABLE (id bigint, lease_token uuid)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_results jsonb[];
    v_bad     record;
    v_msg     text;
    v_detail  text;
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        PERFORM batchq.check_runs('complete', p_queue, p_ids, p_tokens);
    END IF;
    IF cardinality(p_actual_costs) <> coalesce(cardinality(p_ids), 0) THEN
        PERFORM batchq.raise_invalid_argument('complete', 'actual_costs',
            format('must hold one element per id, or be NULL (got %s for %s)', cardinality(p_actual_costs),
                   coalesce(cardinality(p_ids), 0)));
    END IF;
    IF cardinality(p_results) <> coalesce(cardinality(p_ids), 0) THEN
        PERFORM batchq.raise_invalid_argument('complete', 'results',
            format('must hold one element per id, or be NULL (got %s for %s)', cardinality(p_results),
                   coalesce(cardinality(p_ids), 0)));
    END IF;
    IF p_actual_costs IS NOT NULL THEN
        SELECT x.n, x.cost INTO v_bad FROM unnest(p_actual_costs) WITH ORDINALITY AS x (cost, n)
        WHERE x.cost IS NULL OR (x.cost <> -1 AND x.cost NOT BETWEEN 1 AND batchq.max_cost())
        ORDER BY x.n LIMIT 1;
        IF FOUND THEN
            PERFORM batchq.raise_invalid_argument('complete', 'actual_costs',
                format('element %s: must be -1 (none) or in 1..%s (got %s)', v_bad.n, batchq.max_cost(),
                       coalesce(v_bad.cost::text, 'null')));
        END IF;
    END IF;
    IF p_results IS NOT NULL THEN
        BEGIN
            v_results := ARRAY(SELECT nullif(r.text, '')::jsonb FROM unnest(p_results) WITH ORDINALITY AS r (text, n)
                               ORDER BY r.n);
        EXCEPTION WHEN invalid_text_representation OR untranslatable_character OR numeric_value_out_of_range
                       OR character_not_in_repertoire THEN
            -- Not JSON, or JSON that jsonb cannot store: name the first.
            FOR v_bad IN SELECT r.text, r.n FROM unnest(p_results) WITH ORDINALITY AS r (text, n) ORDER BY r.n LOOP
                BEGIN
                    PERFORM nullif(v_bad.text, '')::jsonb;
                EXCEPTION WHEN OTHERS THEN
                    GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
                    PERFORM batchq.raise_invalid_argument('complete', 'results',
                        format('element %s: must be JSON that jsonb can store, or empty (%s%s)', v_bad.n, v_msg,
                               coalesce(': ' || nullif(v_detail, ''), '')));
                END;
            END LOOP;
            RAISE;
        END;
        SELECT x.n, octet_length(x.result::text) AS size INTO v_bad
        FROM unnest(v_results) WITH ORDINALITY AS x (result, n)
        WHERE octet_length(x.result::text) > batchq.max_result_bytes()
        ORDER BY x.n LIMIT 1;
        IF FOUND THEN
            PERFORM batchq.raise_invalid_argument('complete', 'results',
                format('element %s: must be at most %s bytes as jsonb text (got %s)', v_bad.n,
                       batchq.max_result_bytes(), v_bad.size));
        END IF;
    END IF;
    RETURN QUERY
    WITH done AS (
        SELECT * FROM batchq.finish_jobs(p_queue, 'succeeded', p_ids, p_tokens, NULL, v_results, p_actual_costs)
    ), corrections AS (
        INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        SELECT p_queue, d.tenant, d.pos, d.seq, d.actual_cost - d.cost
        FROM done d
        WHERE d.actual_cost IS NOT NULL AND d.actual_cost <> d.cost
    )
    SELECT DISTINCT i.id, i.token
    FROM unnest(p_ids, p_tokens) AS i (id, token)
    WHERE NOT EXISTS (SELECT FROM done d WHERE d.id = i.id AND d.lease_token = i.token);
    IF FOUND OR coalesce(cardinality(p_ids), 0) = 0 THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
END
$$;

-- fail records a failed attempt of each listed run of p_queue whose token
-- still holds the job's lease. A job an operator cancelled while it ran is
-- finished as 'cancelled'; one with attempts left whose retry time
-- (p_retry_at) falls before its deadline waits in 'retrying' until then; any
-- other is finished as 'failed', or 'discarded' when its p_final says
-- retrying would not help. Returns each run it recorded and what became of
-- its job; the runs missing lost their lease. A run listed twice counts once,
-- as first listed. No such queue is refused (BQ201), looked up only when no
-- run held its lease.
CREATE OR REPLACE FUNCTION batchq.fail(p_queue text, p_ids bigint[], p_tokens uuid[], p_errors text[],
                                       p_retry_at timestamptz[], p_final boolean[])
RETURNS TABLE (id bigint, lease_token uuid, outcome text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v record;
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        PERFORM batchq.check_runs('fail', p_queue, p_ids, p_tokens);
    END IF;
    -- Each refusal names the array it is about, and the element.
    SELECT x.field, x.got INTO v
    FROM (VALUES (1, 'errors', cardinality(p_errors)), (2, 'retry_at', cardinality(p_retry_at)),
                 (3, 'final', cardinality(p_final))) AS x (k, field, got)
    WHERE x.got IS DISTINCT FROM cardinality(p_ids)
    ORDER BY x.k LIMIT 1;
    IF FOUND THEN
        PERFORM batchq.raise_invalid_argument('fail', v.field,
            format('must hold one element per id (got %s for %s)', coalesce(v.got::text, 'null'),
                   coalesce(cardinality(p_ids), 0)));
    END IF;
    SELECT x.n, octet_length(x.error) AS size, x.retry_at IS NULL AS no_retry_at, x.final IS NULL AS no_final INTO v
    FROM unnest(p_errors, p_retry_at, p_final) WITH ORDINALITY AS x (error, retry_at, final, n)
    WHERE octet_length(x.error) > 4096 OR x.retry_at IS NULL OR x.final IS NULL
    ORDER BY x.n LIMIT 1;
    IF FOUND THEN
        PERFORM batchq.raise_invalid_argument('fail',
            CASE WHEN v.size > 4096 THEN 'errors' WHEN v.no_retry_at THEN 'retry_at' ELSE 'final' END,
            format('element %s: %s', v.n,
                   CASE WHEN v.size > 4096 THEN format('must be at most 4096 bytes (got %s)', v.size)
                        ELSE 'must not be null' END));
    END IF;
    -- Lock the runs that still hold their lease, in id order, and sort them
    -- by what becomes of them.
    SELECT array_agg(t.id ORDER BY t.id) FILTER (WHERE t.fate = 'retrying') AS retry,
           array_agg(t.token ORDER BY t.id) FILTER (WHERE t.fate = 'retrying') AS retry_tokens,
           array_agg(t.error ORDER BY t.id) FILTER (WHERE t.fate = 'retrying') AS retry_errors,
           array_agg(t.retry_at ORDER BY t.id) FILTER (WHERE t.fate = 'retrying') AS retry_at,
           array_agg(t.id ORDER BY t.id) FILTER (WHERE t.fate = 'failed') AS failed,
           array_agg(t.error ORDER BY t.id) FILTER (WHERE t.fate = 'failed') AS failed_errors,
           array_agg(t.id ORDER BY t.id) FILTER (WHERE t.fate = 'discarded') AS discarded,
           array_agg(t.error ORDER BY t.id) FILTER (WHERE t.fate = 'discarded') AS discarded_errors,
           array_agg(t.id ORDER BY t.id) FILTER (WHERE t.fate = 'cancelled') AS cancelled,
           array_agg(t.reason ORDER BY t.id) FILTER (WHERE t.fate = 'cancelled') AS cancelled_reasons
    INTO v
    FROM (SELECT DISTINCT ON (l.id) l.*
          FROM (SELECT j.id, i.token, i.error, i.retry_at, i.n, j.last_error AS reason,
                       CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                            WHEN NOT i.final AND j.attempt < j.max_attempts AND i.retry_at < j.deadline THEN 'retrying'
                            WHEN i.final THEN 'discarded'
                            ELSE 'failed' END AS fate
                FROM batchq.jobs j
                JOIN unnest(p_ids, p_tokens, p_errors, p_retry_at, p_final) WITH ORDINALITY
                     AS i (id, token, error, retry_at, final, n) ON i.id = j.id AND i.token = j.lease_token
                WHERE j.queue = p_queue AND j.id = ANY (p_ids)
                ORDER BY j.id
                FOR UPDATE OF j) l
          ORDER BY l.id, l.n) t;
    IF v.retry IS NULL AND v.failed IS NULL AND v.discarded IS NULL AND v.cancelled IS NULL THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
    IF v.retry IS NOT NULL THEN
        RETURN QUERY
        UPDATE batchq.jobs j
        SET state = 'retrying', run_after = i.retry_at, last_error = i.error,
            lease_token = NULL, lease_expires_at = NULL, worker = NULL
        FROM unnest(v.retry, v.retry_tokens, v.retry_errors, v.retry_at) AS i (id, token, error, retry_at)
        WHERE j.queue = p_queue AND j.id = ANY (v.retry) AND i.id = j.id AND i.token = j.lease_token
        RETURNING j.id, i.token, 'retrying'::text;
    END IF;
    IF v.failed IS NOT NULL THEN
        RETURN QUERY
        SELECT f.id, f.lease_token, 'failed'::text FROM batchq.finish_jobs(p_queue, 'failed', v.failed, NULL, v.failed_errors) f;
    END IF;
    IF v.discarded IS NOT NULL THEN
        RETURN QUERY
        SELECT f.id, f.lease_token, 'discarded'::text
        FROM batchq.finish_jobs(p_queue, 'discarded', v.discarded, NULL, v.discarded_errors) f;
    END IF;
    IF v.cancelled IS NOT NULL THEN
        RETURN QUERY
        SELECT f.id, f.lease_token, 'cancelled'::text
        FROM batchq.finish_jobs(p_queue, 'cancelled', v.cancelled, NULL, v.cancelled_reasons) f;
    END IF;
END
$$;

-- release hands running jobs of p_queue back without using an attempt (the
-- provider refused to start them, the throttle had no room after all, the
-- worker is shutting down): each waits in 'retrying' for its delay
-- (p_delays_us, microseconds on the database's clock), then rejoins its
-- tenant's queue at the tail. It never ran, so its cost goes back to its
-- tenant's ledger, as an expired job's does. A job an operator cancelled is
-- finished as 'cancelled' instead, its attempt and cost handed back too. Returns the runs it released or
-- cancelled; the rest lost their lease. No such queue is refused (BQ201),
-- looked up only when no run held its lease.
CREATE OR REPLACE FUNCTION batchq.release(p_queue text, p_ids bigint[], p_tokens uuid[], p_delays_us bigint[])
RETURNS TABLE (id bigint, lease_token uuid, outcome text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_cancel  bigint[];
    v_reasons text[];
    v_bad     record;
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        PERFORM batchq.check_runs('release', p_queue, p_ids, p_tokens);
    END IF;
    -- Each refusal names the element and what it got, as fail's do.
    IF cardinality(p_delays_us) IS DISTINCT FROM cardinality(p_ids) THEN
        PERFORM batchq.raise_invalid_argument('release', 'delays',
            format('must hold one delay per id (got %s for %s)', coalesce(cardinality(p_delays_us)::text, 'null'),
                   coalesce(cardinality(p_ids), 0)));
    END IF;
    SELECT d.n, d.delay_us INTO v_bad
    FROM unnest(p_delays_us) WITH ORDINALITY AS d (delay_us, n)
    WHERE d.delay_us IS NULL OR d.delay_us < 0 OR d.delay_us > 86400000000
    ORDER BY d.n LIMIT 1;
    IF FOUND THEN
        PERFORM batchq.raise_invalid_argument('release', 'delays',
            format('element %s: must be in 0..86400000000 microseconds, 0s..24h (got %s)', v_bad.n,
                   coalesce(v_bad.delay_us::text, 'null')));
    END IF;
    -- Every run that holds its lease, locked in id order in this one
    -- statement (locking the cancelled ones first, and the rest after, took
    -- rows out of id order, and deadlocked with a heartbeat or a bulk
    -- cancel); those an operator asked to stop are finished as cancelled.
    SELECT array_agg(l.id ORDER BY l.id) FILTER (WHERE l.asked),
           array_agg(l.reason ORDER BY l.id) FILTER (WHERE l.asked)
    INTO v_cancel, v_reasons
    FROM (SELECT j.id, j.last_error AS reason, j.cancel_requested_at IS NOT NULL AS asked FROM batchq.jobs j
          JOIN unnest(p_ids, p_tokens) AS i (id, token) ON i.id = j.id AND i.token = j.lease_token
          WHERE j.queue = p_queue AND j.id = ANY (p_ids)
          ORDER BY j.id
          FOR UPDATE OF j) l;
    IF v_cancel IS NOT NULL THEN
        -- They never ran either: the attempt and the cost go back, as a
        -- released job's do, and a job that never ran was never served.
        UPDATE batchq.jobs j SET attempt = j.attempt - 1,
                                 first_claimed_at = CASE WHEN j.attempt > 1 THEN j.first_claimed_at END
        WHERE j.queue = p_queue AND j.id = ANY (v_cancel);
        RETURN QUERY
        WITH gone AS (
            SELECT * FROM batchq.finish_jobs(p_queue, 'cancelled', v_cancel, NULL, v_reasons)
        ), refunds AS (
            INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
            SELECT p_queue, g.tenant, g.pos, g.seq, -g.cost FROM gone g
        )
        SELECT g.id, g.lease_token, 'cancelled'::text FROM gone g;
    END IF;
    RETURN QUERY
    WITH target AS (
        SELECT j.id, i.token, i.delay_us
        FROM batchq.jobs j
        JOIN unnest(p_ids, p_tokens, p_delays_us) AS i (id, token, delay_us) ON i.id = j.id AND i.token = j.lease_token
        WHERE j.queue = p_queue AND j.id = ANY (p_ids)
        ORDER BY j.id
        FOR UPDATE OF j
    ), released AS (
        UPDATE batchq.jobs j
        SET state = 'retrying', run_after = now() + make_interval(secs => t.delay_us / 1e6),
            attempt = j.attempt - 1, lease_token = NULL, lease_expires_at = NULL, worker = NULL,
            -- A job handed back before any attempt ran waits still: its
            -- wait (first_claimed_at - enqueued_at) ends at a claim that
            -- runs it, not at one that handed it back.
            first_claimed_at = CASE WHEN j.attempt > 1 THEN j.first_claimed_at END
        FROM target t
        WHERE j.queue = p_queue AND j.id = t.id
        RETURNING j.id, t.token, j.tenant, j.pos, j.seq, j.cost
    ), refunds AS (
        INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        SELECT p_queue, r.tenant, r.pos, r.seq, -r.cost FROM released r
    )
    SELECT r.id, r.token, 'released'::text FROM released r;
    IF NOT FOUND AND v_cancel IS NULL THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
END
$$;

-- heartbeat extends the leases of running jobs of p_queue whose token still
-- holds them by the queue's lease length. Returns the runs whose token
-- still holds the lease, with its end, and whether an operator asked for
-- each to stop. It never waits for a row another transaction holds (a
-- finish of the run in flight, an operator's cancel in an open
-- transaction): such a run is returned with its lease as it was, not
-- extended, for the next beat; waiting for one row would keep every other
-- run's lease from being extended, and let them run out. No such queue is
-- refused (BQ201), looked up only when no run held its lease.
CREATE OR REPLACE FUNCTION batchq.heartbeat(p_queue text, p_ids bigint[], p_tokens uuid[])
RETURNS TABLE (id bigint, lease_token uuid, lease_expires_at timestamptz, cancel_requested boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_tokens) THEN
        PERFORM batchq.check_runs('heartbeat', p_queue, p_ids, p_tokens);
    END IF;
    RETURN QUERY
    WITH target AS (
        SELECT j.id
        FROM batchq.jobs j
        JOIN unnest(p_ids, p_tokens) AS i (id, token) ON i.id = j.id AND i.token = j.lease_token
        WHERE j.queue = p_queue AND j.id = ANY (p_ids)
        ORDER BY j.id
        FOR UPDATE OF j SKIP LOCKED
    ), extended AS (
        UPDATE batchq.jobs j
        SET lease_expires_at = now() + (SELECT q.lease FROM batchq.queues q WHERE q.name = p_queue)
        FROM target t
        WHERE j.queue = p_queue AND j.id = t.id
        RETURNING j.id, j.lease_token, j.lease_expires_at, j.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT e.id, e.lease_token, e.lease_expires_at, e.cancel_requested FROM extended e
    UNION ALL
    -- Passed over: held by another transaction. As its last commit left it.
    SELECT j.id, j.lease_token, j.lease_expires_at, j.cancel_requested_at IS NOT NULL
    FROM batchq.jobs j
    JOIN unnest(p_ids, p_tokens) AS i (id, token) ON i.id = j.id AND i.token = j.lease_token
    WHERE j.queue = p_queue AND j.id = ANY (p_ids) AND j.state = 'running'
      AND NOT EXISTS (SELECT 1 FROM extended e WHERE e.id = j.id);
    IF NOT FOUND THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
END
$$;

-- cancel_waiting finishes the listed waiting (queued or retrying) jobs of
-- p_queue, which the caller has locked, as 'cancelled' with p_reason, and
-- hands a queued job's cost back to its tenant's ledger, so the fair order
-- is re-keyed as for any removal. Returns the jobs.
CREATE OR REPLACE FUNCTION batchq.cancel_waiting(p_queue text, p_ids bigint[], p_reason text)
RETURNS TABLE (id bigint, tenant text, cost bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH gone AS (
        SELECT * FROM batchq.finish_jobs(p_queue, 'cancelled', p_ids, NULL,
                                         array_fill(p_reason, ARRAY[cardinality(p_ids)]))
    ), refund AS (
        INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        SELECT p_queue, g.tenant, g.pos, g.seq, -g.cost FROM gone g WHERE g.state = 'queued'
    )
    SELECT g.id, g.tenant, g.cost FROM gone g;
END
$$;

-- cancel cancels one job: a waiting one (queued or retrying) is finished as
-- 'cancelled' now; a running one is asked to stop: its worker learns it at
-- its next heartbeat and cancels the handler, and the run ends as
-- 'cancelled' unless it succeeds first. A running job asked already keeps
-- the first request's time and reason, as with cancel_jobs. Returns the
-- job, whether it was only asked to stop, and whether it had been asked
-- already, by an earlier call (asked_already); nothing when no unfinished
-- job has the id.
CREATE OR REPLACE FUNCTION batchq.cancel(p_id bigint, p_reason text)
RETURNS TABLE (id bigint, stopping boolean, asked_already boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue text;
    v_state batchq.job_state;
    v_reason text := coalesce(nullif(p_reason, ''), 'cancelled');
BEGIN
    IF octet_length(p_reason) > 4096 THEN
        PERFORM batchq.raise_invalid_argument('cancel', 'reason',
            format('must be at most 4096 bytes (got %s)', octet_length(p_reason)));
    END IF;
    SELECT j.queue, j.state INTO v_queue, v_state FROM batchq.jobs j WHERE j.id = p_id FOR UPDATE;
    IF v_queue IS NULL THEN
        RETURN;
    END IF;
    IF v_state = 'running' THEN
        UPDATE batchq.jobs j SET cancel_requested_at = now(), last_error = v_reason
        WHERE j.queue = v_queue AND j.id = p_id AND j.cancel_requested_at IS NULL;
        RETURN QUERY SELECT p_id, true, NOT FOUND;
        RETURN;
    END IF;
    RETURN QUERY SELECT c.id, false, false FROM batchq.cancel_waiting(v_queue, ARRAY[p_id], v_reason) c;
END
$$;
