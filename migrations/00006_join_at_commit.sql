-- +goose Up

-- A tenant joins the ring in the round that is current when its enqueue
-- commits, not when its jobs were inserted.
--
-- enqueue keys a joining tenant's jobs from the queue's cursor as it inserts
-- them, but claims cannot see them until the transaction commits. Claims go
-- on meanwhile, and each round they serve moves the cursor past the rounds
-- those jobs were keyed in. At commit, every job keyed in a round the cursor
-- has passed sorts ahead of the whole ring: the tenant's first jobs ran as one
-- burst, before every other tenant, however long its transaction stayed open
-- (with one tenant backlogged a round is a single quantum, so a few
-- milliseconds were enough for tens of rounds).
--
-- This trigger runs at commit, once per tenant that started a new membership
-- in the transaction (ring_join gave it a new position), and moves the
-- tenant's queued jobs and its join round forward by as many rounds as the
-- cursor moved. Their relative order, the tenant's ring position and its
-- ledger are unchanged, so with one claimer and nothing running concurrently
-- (the cursor cannot move during the enqueue) the order is still exactly
-- drr's. The jobs are this transaction's own inserts and the ring row is
-- already locked by it, so the trigger waits on nobody. It moves nothing when
-- the cursor did not move; when it did, it rewrites the tenant's queued jobs
-- once (on a 2-core VM about 10 µs a job: 100 ms for a new tenant's import of
-- 10,000, whose insert took about twice that).
--
-- What is left: the cursor is read when the trigger starts, so claims that run
-- during the rest of the commit (the rewrite below, other deferred work, the
-- flush to disk) can still put the tenant's first jobs that many rounds
-- early. And the cursor is read with the transaction's snapshot: under
-- REPEATABLE READ or SERIALIZABLE that is the round current when the
-- transaction started, so such a transaction gains nothing here.
--
-- It runs as the schema's owner: the application role that commits the
-- enqueue has no right on the jobs or the ring (00005_least_privilege.sql).
-- +goose StatementBegin
CREATE FUNCTION batchq.join_at_commit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off -- as enqueue: plans cached on an empty queue must still use the index
AS $$
DECLARE
    v_shift bigint;
BEGIN
    SELECT c.round - r.join_round INTO v_shift
    FROM batchq.tenant_ring r JOIN batchq.queue_cursors c ON c.queue = r.queue
    WHERE r.queue = NEW.queue AND r.tenant = NEW.tenant AND r.pos = NEW.pos AND r.cum > 0;
    IF v_shift > 0 THEN
        UPDATE batchq.jobs j SET round = j.round + v_shift
        WHERE j.pos = NEW.pos AND j.state = 'queued';
        UPDATE batchq.tenant_ring r SET join_round = r.join_round + v_shift
        WHERE r.queue = NEW.queue AND r.tenant = NEW.tenant;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- A trigger function cannot be called directly; revoked all the same, as
-- 00005 does for every function that runs as the owner.
REVOKE EXECUTE ON FUNCTION batchq.join_at_commit() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER tenant_ring_join_at_commit
    AFTER UPDATE OF pos ON batchq.tenant_ring
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.pos IS DISTINCT FROM NEW.pos)
    EXECUTE FUNCTION batchq.join_at_commit();

-- +goose Down
DROP TRIGGER tenant_ring_join_at_commit ON batchq.tenant_ring;
DROP FUNCTION batchq.join_at_commit();
