# seed.sh: sourced by the scripts of bench/. batchq_seed_sql N prints the SQL
# that enqueues N jobs (a multiple of 1,000) into queue q: 100 tenants in turn,
# costs 1..1000, in calls of 1,000 to batchq.enqueue, so in claim order, as an
# import writes them.
batchq_seed_sql() {
    cat <<SQL
DO \$\$
BEGIN
    FOR b IN 0..($1 / 1000 - 1) LOOP
        PERFORM batchq.enqueue('q',
            array_agg('tenant-' || lpad((i % 100)::text, 3, '0') ORDER BY i), array_fill('k'::text, ARRAY[1000]),
            array_agg((1 + (i * 7919) % 1000)::bigint ORDER BY i), array_fill(now() + interval '1 day', ARRAY[1000]),
            array_fill(5, ARRAY[1000]), array_fill('{}'::jsonb, ARRAY[1000]), array_fill(NULL::text, ARRAY[1000]))
        FROM generate_series(b::bigint * 1000, b::bigint * 1000 + 999) i;
    END LOOP;
END
\$\$;
SQL
}
