-- +goose Up

-- The audit trail shows outcomes.run_at (00013): the run-at of a job that
-- finished while still scheduled, NULL for every other. It keeps the table's
-- name, as the view's other columns do. CREATE OR REPLACE adds it last and
-- keeps the view's grants; the comment is the one it had, said again for
-- sqlc, which forgets it on a replace.
CREATE OR REPLACE VIEW batchq.audit AS
SELECT o.job_id,
       o.queue,
       o.tenant,
       o.kind,
       o.outcome,
       o.attempts,
       o.max_attempts,
       o.estimated_cost,
       o.actual_cost,
       o.enqueued_at,
       o.first_claimed_at,
       o.finished_at,
       o.deadline,
       o.first_claimed_at - o.enqueued_at AS wait,
       o.finished_at - o.first_claimed_at AS run,
       o.finished_at - o.enqueued_at      AS total,
       o.worker,
       o.error,
       o.unique_key,
       o.run_at
FROM batchq.outcomes o;
COMMENT ON VIEW batchq.audit IS 'The audit trail: finished jobs with wait, run and total durations.';

-- +goose Down

-- A view loses a column only by being made anew, which drops its grants and
-- makes whoever runs this its owner: its owner is given it back, then the
-- grants it had, on the view and on its columns (its owner has its rights
-- on the new one).
-- +goose StatementBegin
DO $$
DECLARE
    grants text[] := ARRAY(
        SELECT format('GRANT %s ON batchq.audit TO %s%s', a.privilege_type,
                      CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
                      CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
        FROM pg_catalog.pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'batchq.audit'::regclass AND a.grantee <> c.relowner
        UNION ALL
        -- Grants on columns, but for run_at's, which goes.
        SELECT format('GRANT %s (%I) ON batchq.audit TO %s%s', a.privilege_type, t.attname,
                      CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
                      CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_attribute t ON t.attrelid = c.oid AND t.attnum > 0 AND NOT t.attisdropped
        CROSS JOIN LATERAL aclexplode(t.attacl) a
        WHERE c.oid = 'batchq.audit'::regclass AND a.grantee <> c.relowner AND t.attname <> 'run_at');
    owner text := (SELECT c.relowner::regrole::text FROM pg_catalog.pg_class c WHERE c.oid = 'batchq.audit'::regclass);
    s text;
BEGIN
    DROP VIEW batchq.audit;
    CREATE VIEW batchq.audit AS
    SELECT o.job_id,
           o.queue,
           o.tenant,
           o.kind,
           o.outcome,
           o.attempts,
           o.max_attempts,
           o.estimated_cost,
           o.actual_cost,
           o.enqueued_at,
           o.first_claimed_at,
           o.finished_at,
           o.deadline,
           o.first_claimed_at - o.enqueued_at AS wait,
           o.finished_at - o.first_claimed_at AS run,
           o.finished_at - o.enqueued_at      AS total,
           o.worker,
           o.error,
           o.unique_key
    FROM batchq.outcomes o;
    COMMENT ON VIEW batchq.audit IS 'The audit trail: finished jobs with wait, run and total durations.';
    EXECUTE format('ALTER VIEW batchq.audit OWNER TO %s', owner);
    FOREACH s IN ARRAY grants LOOP
        EXECUTE s;
    END LOOP;
END
$$;
-- +goose StatementEnd
