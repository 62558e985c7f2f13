-- name: Enqueue :many
SELECT * FROM batchq.enqueue(
    @queue::text,
    @tenants::text[],
    @kinds::text[],
    @costs::bigint[],
    @deadlines::timestamptz[],
    @max_attempts::integer[],
    @payloads::jsonb[],
    @unique_keys::text[],
    @run_ats::timestamptz[]
);
