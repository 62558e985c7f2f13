-- Recurring schedules: each tick of a schedule enqueues one job. The ticks
-- are computed by the Go client from the cron expression (SQL has no cron
-- parser); these functions let a worker's maintenance, which writes no
-- table itself, take the due schedules and fire them.

-- due_schedules locks up to p_limit schedules of p_queue whose next tick is
-- at or before p_at (NULL: now) and that are not paused, skipping those
-- another transaction holds, and returns them with the time they were found
-- due at (at). It locks the queue's row, the schedules, then their tenants'
-- ring rows in tenant order, so that firing them waits for nothing: it
-- waits up to 200 ms for a ring row another transaction holds (an
-- application's open enqueue, say), and past that leaves out the schedules
-- of the tenants whose rows it could not take, due for the next pass. No
-- such queue is refused (BQ201). The caller fires each (fire_schedule) in
-- the same transaction: a schedule is taken by one maintainer at a time,
-- and the next one finds its next tick moved on.
CREATE OR REPLACE FUNCTION batchq.due_schedules(p_queue text, p_at timestamptz, p_limit integer)
RETURNS TABLE (name text, cron text, timezone text, missed text, next_run_at timestamptz, at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_names   text[];
    v_tenants text[];
    v_held    text[];
    v_timeout text := current_setting('lock_timeout');
BEGIN
    IF batchq.queue_name_error(p_queue) IS NOT NULL OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        PERFORM batchq.check_limit('due_schedules', p_queue, p_limit);
    END IF;
    -- Most passes find nothing due: they lock nothing.
    IF NOT EXISTS (SELECT FROM batchq.schedules s
                   WHERE s.queue = p_queue AND s.paused_at IS NULL AND s.next_run_at <= coalesce(p_at, now())) THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
        RETURN;
    END IF;
    -- The queue's row before its schedules, in the order delete_queue takes
    -- them: firing enqueues, which takes the row FOR KEY SHARE, and taken
    -- after the schedules it could close a cycle with a delete holding the
    -- row and waiting for them.
    PERFORM 1 FROM batchq.queues q WHERE q.name = p_queue FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM batchq.raise_unknown_queue(p_queue);
    END IF;
    SELECT array_agg(d.name ORDER BY d.next_run_at, d.name), array_agg(DISTINCT d.tenant) INTO v_names, v_tenants
    FROM (SELECT s.name, s.tenant, s.next_run_at FROM batchq.schedules s
          WHERE s.queue = p_queue AND s.paused_at IS NULL AND s.next_run_at <= coalesce(p_at, now())
          ORDER BY s.next_run_at
          LIMIT p_limit
          FOR UPDATE SKIP LOCKED) d;
    IF v_names IS NULL THEN
        RETURN;
    END IF;
    -- Then their tenants' ring rows, in tenant order. Firing the ticks one
    -- by one took each tenant's row as it came, out of tenant order, and met
    -- what locks several tenants' rows in order (an enqueue for many
    -- tenants, a quantum change) holding one and waiting for another.
    BEGIN
        PERFORM set_config('lock_timeout', '200ms', true);
        PERFORM 1 FROM batchq.tenant_ring r
        WHERE r.queue = p_queue AND r.tenant = ANY (v_tenants)
        ORDER BY r.tenant
        FOR UPDATE;
        v_held := v_tenants;
        PERFORM set_config('lock_timeout', v_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
        -- Rolled back, with the setting: take the rows that are free.
        v_held := ARRAY(SELECT r.tenant FROM batchq.tenant_ring r
                        WHERE r.queue = p_queue AND r.tenant = ANY (v_tenants)
                        ORDER BY r.tenant
                        FOR UPDATE SKIP LOCKED);
    END;
    RETURN QUERY
    SELECT s.name, s.cron, s.timezone, s.missed, s.next_run_at, coalesce(p_at, now())
    FROM batchq.schedules s
    WHERE s.name = ANY (v_names)
      AND (s.tenant = ANY (v_held)
           OR NOT EXISTS (SELECT FROM batchq.tenant_ring r WHERE r.queue = p_queue AND r.tenant = s.tenant))
    ORDER BY s.next_run_at, s.name;
END
$$;

-- raise_schedule_not_found refuses a schedule name that names none (BQ204),
-- in the words of the Go client's ErrScheduleNotFound.
CREATE OR REPLACE FUNCTION batchq.raise_schedule_not_found(p_name text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'BQ204',
        MESSAGE = format('batchq: schedule not found: %s', batchq.quote(p_name)),
        DETAIL = jsonb_build_object('schedule', p_name)::text;
END
$$;

-- fire_schedule handles a due schedule whose next tick was p_due: with
-- p_enqueue, it enqueues the job of tick p_tick (p_due, or a later tick that
-- also passed) with the unique key 'batchq:schedule:<name>:<tick>', so a
-- tick enqueues one job however many maintainers handle it; then the next
-- tick becomes p_next. A tick the tenant has no room for (queue_full,
-- ledger_full) enqueues nothing and is recorded in last_error; the schedule
-- goes on. Nothing happens when the schedule's next tick is no longer p_due
-- (another maintainer handled it), nor when an open transaction holds the
-- tenant's ring row (an application's enqueue) for longer than the lock
-- timeout: the tick stays due for the next pass, and maintenance does not
-- wait on an application. Returns the job's id, NULL when none was
-- enqueued. A NULL name is refused (BQ101, naming the argument), and no
-- such schedule (BQ204, in the words of the Go
-- client's ErrScheduleNotFound), not answered with NULL as if another
-- maintainer had handled the tick: a caller with the name wrong would fire
-- nothing for ever.
CREATE OR REPLACE FUNCTION batchq.fire_schedule(p_name text, p_due timestamptz, p_tick timestamptz,
                                                p_enqueue boolean, p_next timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    s     batchq.schedules;
    r     batchq.enqueue_results;
    v_err text;
BEGIN
    -- A NULL due would match no next tick and so pass for any: the
    -- schedule would fire, and move on, whenever it was called.
    IF p_name IS NULL THEN
        PERFORM batchq.raise_invalid_argument('fire_schedule', 'name', 'must name a schedule (got null)');
    END IF;
    IF p_due IS NULL THEN
        PERFORM batchq.raise_invalid_argument('fire_schedule', 'due',
            'must be the schedule''s next tick, as due_schedules gave it (got null)');
    END IF;
    IF p_tick IS NULL OR p_tick < p_due THEN
        PERFORM batchq.raise_invalid_argument('fire_schedule', 'tick',
            format('must be at or after the due tick (got %s, due %s)', batchq.rfc3339(p_tick), batchq.rfc3339(p_due)));
    END IF;
    IF p_enqueue IS NULL THEN
        PERFORM batchq.raise_invalid_argument('fire_schedule', 'enqueue',
            'must be true (enqueue the tick''s job) or false (skip the tick) (got null)');
    END IF;
    IF p_next IS NULL OR p_next <= p_tick THEN
        PERFORM batchq.raise_invalid_argument('fire_schedule', 'next',
            format('must be after the tick (got %s, tick %s)', batchq.rfc3339(p_next), batchq.rfc3339(p_tick)));
    END IF;
    SELECT * INTO s FROM batchq.schedules x WHERE x.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM batchq.raise_schedule_not_found(p_name);
    END IF;
    IF s.next_run_at <> p_due THEN
        RETURN NULL;
    END IF;
    IF p_enqueue THEN
        BEGIN
            SELECT * INTO r
            FROM batchq.insert_jobs(s.queue, ARRAY[s.tenant], ARRAY[s.kind], ARRAY[s.cost],
                                    ARRAY[statement_timestamp() + s.ttl], ARRAY[s.max_attempts], ARRAY[s.payload],
                                    ARRAY['batchq:schedule:' || s.name || ':' || batchq.rfc3339(p_tick)], NULL);
        EXCEPTION WHEN lock_not_available THEN
            RETURN NULL;
        END;
        IF r.status NOT IN ('inserted', 'duplicate') THEN
            v_err := format('tick %s enqueued nothing: %s', batchq.rfc3339(p_tick), r.status)
                     || CASE WHEN r.status = 'queue_full'
                             THEN format(' (tenant %s has %s waiting %s, bound %s)', batchq.quote(r.tenant), r.queued,
                                         CASE WHEN r.queued = 1 THEN 'job' ELSE 'jobs' END, r.bound)
                             ELSE '' END;
        END IF;
    END IF;
    UPDATE batchq.schedules x
    SET next_run_at = p_next,
        last_run_at = CASE WHEN p_enqueue THEN p_tick ELSE x.last_run_at END,
        last_job_id = CASE WHEN r.status IN ('inserted', 'duplicate') THEN r.job_id ELSE x.last_job_id END,
        last_error = CASE WHEN p_enqueue THEN v_err ELSE x.last_error END
    WHERE x.name = p_name;
    RETURN CASE WHEN r.status IN ('inserted', 'duplicate') THEN r.job_id END;
END
$$;

-- schedule_error records in a due schedule's last_error why its tick p_due
-- was not handled: its expression or time zone does not parse where the
-- maintainer runs (written by hand, by a newer batchq, or in a zone this
-- one refuses). The tick stays due, so the schedule fires once it is fixed
-- (batchq schedules set), and `schedules list` says why it waits. Nothing
-- happens when its next tick is no longer p_due (another maintainer handled
-- it, or it was changed) or last_error already says so. Returns whether it
-- wrote. A NULL name, a NULL or empty p_error, or one over 4096 bytes, is
-- refused (BQ101); no such schedule is refused with BQ204, as fire_schedule
-- refuses it.
CREATE OR REPLACE FUNCTION batchq.schedule_error(p_name text, p_due timestamptz, p_error text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s batchq.schedules;
BEGIN
    IF p_name IS NULL THEN
        PERFORM batchq.raise_invalid_argument('schedule_error', 'name', 'must name a schedule (got null)');
    END IF;
    IF p_due IS NULL THEN
        PERFORM batchq.raise_invalid_argument('schedule_error', 'due',
            'must be the schedule''s next tick, as due_schedules gave it (got null)');
    END IF;
    IF coalesce(p_error, '') = '' THEN
        PERFORM batchq.raise_invalid_argument('schedule_error', 'error', 'must say why the tick waits (got none)');
    END IF;
    IF octet_length(p_error) > 4096 THEN
        PERFORM batchq.raise_invalid_argument('schedule_error', 'error',
            format('must be at most 4096 bytes (got %s)', octet_length(p_error)));
    END IF;
    SELECT * INTO s FROM batchq.schedules x WHERE x.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM batchq.raise_schedule_not_found(p_name);
    END IF;
    IF s.next_run_at <> p_due OR s.last_error IS NOT DISTINCT FROM p_error THEN
        RETURN false;
    END IF;
    UPDATE batchq.schedules x SET last_error = p_error WHERE x.name = p_name;
    RETURN true;
END
$$;
