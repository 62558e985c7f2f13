-- batchq's least-privilege roles: an application role that can enqueue and
-- read reports, a worker role that can claim and finish jobs, and an
-- operator role that can pause, resume and delete queues, cancel jobs and
-- read them.
--
-- Run it after `batchq migrate up`, in the database that holds the batchq
-- schema, as the role that owns the schema (the one migrations ran as) if it
-- may create roles, or as a superuser:
--
--   batchq migrate grants --app-role batchq_app --worker-role batchq_worker \
--     --operator-role batchq_operator --apply
--   psql -v app_role=batchq_app -v worker_role=batchq_worker \
--     -v operator_role=batchq_operator -f grants.sql
--
-- operator_role is optional with psql: without it the script makes only the
-- app and worker roles. It creates the roles that do not exist yet (LOGIN,
-- no password: set one with psql's \password, or with --app-password-env,
-- --worker-password-env and --operator-password-env of `batchq migrate
-- grants --apply`) and grants each what it needs and nothing more. The roles
-- must differ, and none may own the schema or be a superuser. Running it
-- again changes nothing. No role may create, alter
-- or drop anything: migrations are the only step that needs DDL. Re-run it
-- after migrating: a later batchq version may need more grants.

BEGIN;

SELECT set_config('batchq.app_role', :'app_role', true),
       set_config('batchq.worker_role', :'worker_role', true),
       set_config('batchq.operator_role', '', true);
\if :{?operator_role}
SELECT set_config('batchq.operator_role', :'operator_role', true);
\endif

DO $$
DECLARE
    roles text[] := array_remove(ARRAY[current_setting('batchq.app_role'), current_setting('batchq.worker_role'),
                                       nullif(current_setting('batchq.operator_role'), '')], NULL);
    r text;
BEGIN
    -- One role with two roles' grants would keep the rights of both, and
    -- the revokes below would take back what the other was just granted.
    IF cardinality(roles) <> (SELECT count(DISTINCT x) FROM unnest(roles) x) THEN
        RAISE EXCEPTION 'batchq: grants: the app, worker and operator roles must differ (got %)', array_to_string(roles, ', ');
    END IF;
    -- The revokes below would take the schema owner's own rights, which
    -- migrations and SECURITY DEFINER functions run with, and a superuser
    -- keeps every right whatever is granted: neither is a least-privilege
    -- role.
    FOREACH r IN ARRAY roles LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles o ON o.oid = n.nspowner
                   WHERE n.nspname = 'batchq' AND o.rolname = r) THEN
            RAISE EXCEPTION 'batchq: grants: % owns the batchq schema (migrations ran as it): name roles of their own', r;
        END IF;
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles o WHERE o.rolname = r AND o.rolsuper) THEN
            RAISE EXCEPTION 'batchq: grants: % is a superuser, which no grant limits: name roles of their own', r;
        END IF;
    END LOOP;
    FOREACH r IN ARRAY roles LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I LOGIN', r);
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA batchq TO :"app_role", :"worker_role";

-- Neither role writes a table: each calls the functions below, which check
-- their arguments and run as the schema's owner (SECURITY DEFINER), so a role
-- can do only what they allow. Take back what an earlier release granted
-- (0.1.0's worker read and moved the cursors itself), reads included: the
-- grants below give back the reads each role has.
REVOKE ALL ON ALL TABLES IN SCHEMA batchq FROM :"app_role", :"worker_role";
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA batchq FROM :"app_role", :"worker_role";

-- The application enqueues (docs/sql-api.md): it cannot skip the bounds or
-- the fair order, read other jobs' payloads, or change or delete anything.
GRANT EXECUTE ON FUNCTION
    batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[], timestamptz[]),
    batchq.enqueue_job(text, text, bigint, jsonb, text, timestamptz, interval, integer, text, timestamptz, interval),
    batchq.enqueue_jobs(text, jsonb)
TO :"app_role";

-- Reports: the backlog and audit views, the unfinished jobs by queue (their
-- queue, tenant, state, cost and times; no payload), the console's backlog
-- by tenant (batchq.console_backlog and console_queued: counts and
-- tokens, no job) and whether a queue knows a tenant
-- (console_tenant_known), usage by tenant
-- (batchq.tenant_usage reads the outcomes' columns below, never their
-- payloads or results), the settings, the quota and its 429s.
GRANT SELECT ON batchq.backlog, batchq.unfinished, batchq.audit, batchq.queues, batchq.tenants,
    batchq.queue_tenants, batchq.quota, batchq.quota_pauses
TO :"app_role";
GRANT SELECT (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost, attempts, max_attempts,
              deadline, enqueued_at, first_claimed_at, finished_at, worker, error, unique_key, run_at)
    ON batchq.outcomes TO :"app_role";
GRANT EXECUTE ON FUNCTION batchq.tenant_usage(timestamptz, timestamptz),
    batchq.console_backlog(text, text), batchq.console_queued(text, text[], bigint),
    batchq.console_tenant_known(text, text)
TO :"app_role";

-- Workers claim, heartbeat, complete, fail and release jobs, and maintain
-- their queue (rescue, expiry, requeue, folding cost corrections, firing
-- the recurring schedules' ticks), taking turns at it. They
-- cannot enqueue, cancel, change settings, or change or delete an outcome.
-- The cost corrections they report move a tenant in the fair order, as they
-- are meant to: the role is for batchq's worker code, not ad hoc sessions.
GRANT EXECUTE ON FUNCTION
    batchq.claim(text, integer, text, bigint),
    batchq.complete(text, bigint[], uuid[], bigint[], text[]),
    batchq.fail(text, bigint[], uuid[], text[], timestamptz[], boolean[]),
    batchq.release(text, bigint[], uuid[], bigint[]),
    batchq.heartbeat(text, bigint[], uuid[]),
    batchq.rescue(text, integer),
    batchq.expire(text, integer),
    batchq.requeue(text, integer, timestamptz),
    batchq.apply_adjustments(text),
    batchq.due_schedules(text, timestamptz, integer),
    batchq.fire_schedule(text, timestamptz, timestamptz, boolean, timestamptz),
    batchq.schedule_error(text, timestamptz, text),
    batchq.maintenance_turn(text, bigint)
TO :"worker_role";
-- What workers read: the jobs (the next cost a claim starts with, whether a
-- queue is drained), the queues' settings, and the unfinished jobs for the
-- metrics' backlog gauges.
GRANT SELECT ON batchq.jobs, batchq.queues, batchq.unfinished TO :"worker_role";

-- Both pace from the fleet's shared throttle state, which only
-- batchq.save_quota writes: it refuses a state that does not parse or a
-- pause past the throttle's limit.
GRANT SELECT ON batchq.quota TO :"app_role", :"worker_role";
GRANT EXECUTE ON FUNCTION batchq.save_quota(text, bigint, jsonb) TO :"app_role", :"worker_role";

\if :{?operator_role}
-- The operator runs `batchq queues pause|resume|delete|list`, `batchq jobs
-- show|cancel`, `batchq tenants list` and `batchq report` (docs/sql-api.md).
-- Like the others it writes no table, so the commands that write settings
-- or jobs directly (queues create|set, tenants set|unset, jobs retry) stay
-- with the schema's owner; it cannot enqueue, claim or finish a job either.
GRANT USAGE ON SCHEMA batchq TO :"operator_role";
REVOKE ALL ON ALL TABLES IN SCHEMA batchq FROM :"operator_role";
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA batchq FROM :"operator_role";
-- Pause and resume a queue, delete an empty one, count and cancel jobs one
-- at a time or in bulk.
GRANT EXECUTE ON FUNCTION
    batchq.pause_queue(text),
    batchq.resume_queue(text),
    batchq.delete_queue(text),
    batchq.matching_jobs(text, text, text, timestamptz, timestamptz),
    batchq.cancel_jobs(text, text, text, timestamptz, timestamptz, bigint, integer, text),
    batchq.cancel(bigint, text)
TO :"operator_role";
-- What the app reads, and the jobs and outcomes whole: an operator inspects
-- payloads, results and errors (`batchq jobs show`).
GRANT SELECT ON batchq.backlog, batchq.unfinished, batchq.audit, batchq.queues, batchq.tenants,
    batchq.queue_tenants, batchq.quota, batchq.quota_pauses, batchq.jobs, batchq.outcomes, batchq.schedules
TO :"operator_role";
GRANT EXECUTE ON FUNCTION batchq.tenant_usage(timestamptz, timestamptz),
    batchq.console_backlog(text, text), batchq.console_queued(text, text[], bigint),
    batchq.console_tenant_known(text, text)
TO :"operator_role";
\endif

COMMIT;
