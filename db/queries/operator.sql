-- name: GetTenant :one
-- One tenant's settings, for commands that change some of them.
SELECT * FROM batchq.tenants t WHERE t.name = @name;
