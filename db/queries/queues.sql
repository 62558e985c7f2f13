-- name: CreateQueue :exec
WITH q AS (
    INSERT INTO batchq.queues (name, quantum, max_per_tenant, default_ttl, lease, max_attempts, unique_for)
    VALUES (@name, @quantum, @max_per_tenant, @default_ttl, @lease, @max_attempts, @unique_for)
    RETURNING name
)
INSERT INTO batchq.queue_cursors (queue) SELECT q.name FROM q;

-- name: UpdateQueue :one
UPDATE batchq.queues
SET quantum        = coalesce(sqlc.narg(quantum), quantum),
    max_per_tenant = coalesce(sqlc.narg(max_per_tenant), max_per_tenant),
    default_ttl    = coalesce(sqlc.narg(default_ttl), default_ttl),
    lease          = coalesce(sqlc.narg(lease), lease),
    max_attempts   = coalesce(sqlc.narg(max_attempts), max_attempts),
    unique_for     = coalesce(sqlc.narg(unique_for), unique_for),
    updated_at     = now()
WHERE name = @name
RETURNING *;

-- name: GetQueue :one
SELECT * FROM batchq.queues WHERE name = @name;

-- name: LockQueue :one
-- A queue's settings, held until the transaction ends: a change reads what it
-- changes under this lock, so concurrent changes apply one after the other.
SELECT * FROM batchq.queues WHERE name = @name FOR NO KEY UPDATE;

-- name: ListQueues :many
SELECT * FROM batchq.queues ORDER BY name;

-- name: UpsertTenant :one
INSERT INTO batchq.tenants (name, weight, max_queued)
VALUES (@name, @weight, sqlc.narg(max_queued))
ON CONFLICT (name) DO UPDATE
SET weight = excluded.weight, max_queued = excluded.max_queued, updated_at = now()
RETURNING *;

-- name: CreateTenant :exec
-- A tenant's settings with the defaults, unless it has some (LockTenant
-- then locks them). Nothing is written for a tenant that has settings: a
-- new version of its row would have to keep the rules added since it was
-- written, which a weight an older release accepted may not.
INSERT INTO batchq.tenants (name) VALUES (@name)
ON CONFLICT (name) DO NOTHING;

-- name: LockTenant :one
-- A tenant's settings (CreateTenant first), held until the transaction
-- ends: a change reads what it changes under this lock, so concurrent
-- changes apply one after the other.
SELECT * FROM batchq.tenants WHERE name = @name FOR UPDATE;

-- name: ListTenants :many
SELECT * FROM batchq.tenants ORDER BY name;

-- name: LockQueueTenant :one
-- A tenant's settings in one queue, created empty (the tenant's settings
-- for every queue apply) if it has none, held until the transaction ends;
-- no row for no such queue. The queue's row is taken FOR KEY SHARE first,
-- as an enqueue takes it: a later update of the settings row checks its
-- foreign key, and taken then, it could close a cycle with a queue's
-- delete holding the queue's row and waiting for this one.
WITH q AS (SELECT name FROM batchq.queues WHERE name = @queue FOR KEY SHARE)
INSERT INTO batchq.queue_tenants (queue, tenant) SELECT q.name, @tenant FROM q
ON CONFLICT (queue, tenant) DO UPDATE SET tenant = excluded.tenant
RETURNING *;

-- name: UpdateQueueTenant :exec
UPDATE batchq.queue_tenants
SET weight = sqlc.narg(weight), max_queued = sqlc.narg(max_queued), updated_at = now()
WHERE queue = @queue AND tenant = @tenant;

-- name: DeleteQueueTenant :execrows
-- Removes a tenant's settings for one queue: its settings for every queue
-- apply there again. The queue's row is taken FOR KEY SHARE first, as
-- LockQueueTenant takes it, before the re-key that follows takes ring rows.
DELETE FROM batchq.queue_tenants t
WHERE t.queue = (SELECT q.name FROM batchq.queues q WHERE q.name = @queue FOR KEY SHARE) AND t.tenant = @tenant;

-- name: ListQueueTenants :many
SELECT * FROM batchq.queue_tenants ORDER BY queue, tenant;

-- name: RingTenants :many
-- The tenants of a queue's ring that have queued jobs, for re-keying.
SELECT r.tenant FROM batchq.tenant_ring r
WHERE r.queue = @queue
  AND EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.queue = r.queue AND j.pos = r.pos AND j.state = 'queued')
ORDER BY r.tenant;

-- name: LockTenantQueues :many
-- The rows of the queues in whose ring a tenant has a row, FOR KEY SHARE, in
-- name order: taken before the ring rows (TenantQueues, of these queues
-- only), as batchq.rekey and a queue's delete take them.
SELECT q.name FROM batchq.queues q
WHERE q.name IN (SELECT r.queue FROM batchq.tenant_ring r WHERE r.tenant = @tenant)
ORDER BY q.name
FOR KEY SHARE;

-- name: TenantQueues :many
-- Of the queues listed (whose rows the caller holds: LockTenantQueues), those
-- in whose ring a tenant has queued jobs, their ring rows locked in queue
-- order: a weight change waits here for an enqueue open in any of them
-- before batchq.rekey locks any of the tenant's jobs, which claims then pass
-- over. A queue the tenant joined since the list was taken is left to the
-- second pass after the change (Client.settingsChanged): locking its ring
-- row without its queue's could close a cycle with a delete.
SELECT r.queue FROM batchq.tenant_ring r
WHERE r.tenant = @tenant AND r.queue = ANY (@queues::text[])
  AND EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.queue = r.queue AND j.pos = r.pos AND j.state = 'queued')
ORDER BY r.queue
FOR UPDATE OF r;

-- name: Rekey :exec
-- Re-keys the queued jobs of the tenants of one queue whose share changed;
-- see batchq.rekey in db/functions/rekey.sql. A change that touches several
-- queues re-keys them in name order.
SELECT batchq.rekey(@queue::text, @tenants::text[]);

-- name: BumpSettingsVersion :exec
-- Drawn after a weight or quantum change commits: enqueue transactions open
-- meanwhile re-key their new jobs at commit (see batchq.ring_commit_checks).
SELECT nextval('batchq.settings_version');
