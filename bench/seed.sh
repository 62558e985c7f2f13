# seed.sh: sourced by the scripts of bench/.
#
# batchq_scratch_db PREFIX [BATCHQ] makes the database PREFIX_<pid> on the
# server of ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable,
# as batchq's own default: without it pgbench would encrypt, where the Go
# client does not), migrates it with BATCHQ (default bin/batchq), and drops it
# when the script exits. It sets admin, db, url (the database's URL, with
# ADMIN_URL's parameters) and tmp (a directory removed on exit too).
batchq_scratch_db() {
    admin=${ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
    db=$1_$$
    url=${admin%/*}/$db
    case $admin in *\?*) url=${admin%%\?*}; url=${url%/*}/$db?${admin#*\?} ;; esac
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"; psql -q "$admin" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true' EXIT
    psql -q "$admin" -c "CREATE DATABASE $db" >/dev/null
    DATABASE_URL=$url "${2:-bin/batchq}" migrate up >/dev/null
}

# batchq_seed_sql N prints the SQL
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
