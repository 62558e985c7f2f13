-- Queues and their jobs.

-- queues_keep_jobs keeps jobs.queue naming a queue, as a foreign key would,
-- without a key check per inserted job: a queue that still has jobs can be
-- neither deleted nor renamed. (Enqueue holds its queue's row FOR KEY SHARE,
-- as that check would.)
CREATE OR REPLACE FUNCTION batchq.queues_keep_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.name = OLD.name THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.queue = OLD.name) THEN
        RAISE foreign_key_violation USING
            MESSAGE = format('queue %L still has jobs', OLD.name),
            HINT = 'Cancel or finish its jobs first.';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
