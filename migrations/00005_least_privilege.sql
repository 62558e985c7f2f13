-- +goose Up

-- Least privilege. An application role enqueues through batchq.enqueue and
-- a worker role requeues retries and folds ledger adjustments through
-- batchq.requeue and batchq.apply_adjustments; neither is granted the
-- tables those functions write (the tenant ring, the jobs' keys), so the
-- functions run as their owner, the role that ran these migrations
-- (SECURITY DEFINER). That keeps the DRR keys and the per-tenant bounds in
-- the database's hands: a role that may enqueue cannot insert a job at the
-- head of the ring or past its tenant's bound. Each runs with a fixed
-- search_path (their bodies name every object with its schema), so no
-- caller can slip its own objects in. Nobody but the owner may call them,
-- or the functions they call, until granted: migrations/grants/grants.sql
-- (`batchq migrate grants`) grants each role what it needs.
--
-- Run migrations as a dedicated owner role rather than a superuser: a
-- SECURITY DEFINER function runs with all of its owner's rights.
ALTER FUNCTION batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION batchq.requeue(text, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION batchq.apply_adjustments(text)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- The check at commit of what enqueue and requeue added runs in the caller's
-- transaction, after those functions returned.
ALTER FUNCTION batchq.ring_check_at_commit()
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

REVOKE EXECUTE ON FUNCTION
    batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[]),
    batchq.requeue(text, integer),
    batchq.apply_adjustments(text),
    batchq.ring_join(text, text[], boolean),
    batchq.rekey(text[], text[]),
    batchq.fold_adjustments(text, text, bigint, bigint, bigint, bigint, bigint[]),
    batchq.ring_check_at_commit()
FROM PUBLIC;

-- +goose Down
GRANT EXECUTE ON FUNCTION
    batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[]),
    batchq.requeue(text, integer),
    batchq.apply_adjustments(text),
    batchq.ring_join(text, text[], boolean),
    batchq.rekey(text[], text[]),
    batchq.fold_adjustments(text, text, bigint, bigint, bigint, bigint, bigint[]),
    batchq.ring_check_at_commit()
TO PUBLIC;
ALTER FUNCTION batchq.ring_check_at_commit() SECURITY INVOKER RESET search_path;
ALTER FUNCTION batchq.apply_adjustments(text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION batchq.requeue(text, integer) SECURITY INVOKER RESET search_path;
ALTER FUNCTION batchq.enqueue(text, text[], text[], bigint[], timestamptz[], integer[], jsonb[], text[])
    SECURITY INVOKER RESET search_path;
