-- batchq's least-privilege roles: an application role that can enqueue and
-- read reports, and a worker role that can claim and finish jobs.
--
-- Run it after `batchq migrate up`, in the database that holds the batchq
-- schema, as the role that owns the schema (the one migrations ran as) if it
-- may create roles, or as a superuser:
--
--   batchq migrate grants --app-role batchq_app --worker-role batchq_worker --apply
--   psql -v app_role=batchq_app -v worker_role=batchq_worker -f grants.sql
--
-- It creates the roles that do not exist yet (LOGIN, no password: set one
-- with psql's \password, or with --app-password-env and --worker-password-env
-- of `batchq migrate grants --apply`) and grants each what it needs and
-- nothing more. Running it again changes nothing. Neither role may create,
-- alter or drop anything: migrations are the only step that needs DDL.
-- Re-run it after migrating: a later batchq version may need more grants.

BEGIN;

SELECT set_config('batchq.app_role', :'app_role', true),
       set_config('batchq.worker_role', :'worker_role', true);

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY[current_setting('batchq.app_role'), current_setting('batchq.worker_role')] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I LOGIN', r);
        END IF;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA batchq TO :"app_role", :"worker_role";

-- The application enqueues through batchq.enqueue, which runs as the
-- schema's owner (migrations/00005_least_privilege.sql): the role has no
-- right on the jobs or the tenant ring, so it cannot skip the bounds or the
-- fair order, read other jobs' payloads, or change or delete anything.
GRANT EXECUTE ON FUNCTION
    batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[])
TO :"app_role";

-- Reports: the backlog and audit views, the unfinished jobs by queue (their
-- queue, tenant, state, cost and times; no payload), usage by tenant
-- (batchq.tenant_usage reads the outcomes' columns below, never their
-- payloads or results), the settings and the quota.
GRANT SELECT ON batchq.backlog, batchq.unfinished, batchq.audit, batchq.queues, batchq.tenants, batchq.quota
TO :"app_role";
GRANT SELECT (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost, attempts, max_attempts,
              deadline, enqueued_at, first_claimed_at, finished_at, worker, error, unique_key)
    ON batchq.outcomes TO :"app_role";
GRANT EXECUTE ON FUNCTION batchq.tenant_usage(timestamptz, timestamptz) TO :"app_role";

-- Interactive calls pace from the fleet's shared throttle state.
GRANT INSERT, UPDATE ON batchq.quota TO :"app_role";

-- Workers claim, heartbeat, complete, fail and release jobs, and maintain
-- their queue: they change a job's state and lease, never its tenant, cost,
-- keys or payload; they write outcomes but never change or delete one; they
-- read the queue's settings and advance its cursor. The cost corrections
-- they record in ledger_adjustments move a tenant in the fair order, as
-- they are meant to: the role is for batchq's worker code, not for ad hoc
-- sessions.
GRANT SELECT, DELETE ON batchq.jobs TO :"worker_role";
GRANT UPDATE (state, attempt, lease_token, lease_expires_at, worker, claimed_at, first_claimed_at, run_after, last_error)
    ON batchq.jobs TO :"worker_role";
GRANT INSERT ON batchq.outcomes, batchq.ledger_adjustments TO :"worker_role";
GRANT SELECT ON batchq.queues TO :"worker_role";
-- The metrics' backlog gauges.
GRANT SELECT ON batchq.unfinished TO :"worker_role";
GRANT SELECT, UPDATE (round) ON batchq.queue_cursors TO :"worker_role";
-- Requeueing retries and folding cost corrections into the fair order run
-- as the schema's owner, as enqueueing does.
GRANT EXECUTE ON FUNCTION batchq.requeue(text, integer), batchq.apply_adjustments(text) TO :"worker_role";
-- The fleet's shared throttle state.
GRANT SELECT, INSERT, UPDATE ON batchq.quota TO :"worker_role";

COMMIT;
