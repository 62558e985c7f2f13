#!/usr/bin/env bash
# claim_variants.sh: what the parts of batchq.claim that keep the ring's
# cursor cost a claim of 100. It loads, beside batchq.claim as migrated,
# variants of it made from migrations/00002_queue.sql:
#
#   base      the claim as it is
#   nocursor  without the cursor's upkeep (first_taken .. advanced)
#   noupdate  without only the cursor's UPDATE (advanced)
#   advisory  the cursor taken by pg_try_advisory_xact_lock, not a row lock
#
# seeds one backlog, and runs them in turn, ROUNDS times, CYCLES claims of
# 100 and their completions each (pgbench -M prepared, one client), so the
# host's drift and the index's growing dead entries hit them alike. It
# prints each run's mean claim latency and each variant's mean over all.
#
# usage: bench/claim_variants.sh [rounds] [cycles]
#   defaults 10 20; run from the repository root after make build; needs
#   psql and pgbench. It works in a database of its own,
#   batchq_cycle_variants_<pid>, on the server of ADMIN_URL (default as in
#   bench/cycle.sh), and drops it afterwards.
set -euo pipefail
rounds=${1:-10} cycles=${2:-20}
admin=${ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
db=batchq_cycle_variants_$$
url=${admin%/*}/$db
case $admin in *\?*) url=${admin%%\?*}; url=${url%/*}/$db?${admin#*\?} ;; esac
variants="base nocursor noupdate advisory"
jobs=$(( (4 * rounds * cycles * 100 / 1000 + 2) * 1000 ))
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; psql -q "$admin" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; }
trap cleanup EXIT

psql -q "$admin" -c "CREATE DATABASE $db" >/dev/null
DATABASE_URL=$url bin/batchq migrate up >/dev/null
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 100000000 q >/dev/null

# The function as migrated, renamed; each variant cuts or swaps lines of it
# by their text, and fails if that text is gone.
awk '/^CREATE FUNCTION batchq.claim\(/ {on = 1} on {print} on && /^\$\$;/ {exit}' \
    migrations/00002_queue.sql > "$tmp/claim.sql"
grep -q '), first_taken AS (' "$tmp/claim.sql" && grep -q '), advanced AS (' "$tmp/claim.sql" &&
    grep -q 'FOR NO KEY UPDATE SKIP LOCKED)' "$tmp/claim.sql" ||
    { echo "claim_variants.sh: batchq.claim no longer has the parts this cuts" >&2; exit 1; }
variant() { sed "s/^CREATE FUNCTION batchq.claim(/CREATE FUNCTION batchq.claim_$1(/" "$tmp/claim.sql"; }
{
    variant base
    # Everything from the first cursor CTE to the final SELECT goes.
    variant nocursor | awk '/^    \), first_taken AS \(/ {skip = 1; print "    )"} /^    SELECT c.id, false AS expired/ {skip = 0} !skip'
    variant noupdate | awk '/^    \), advanced AS \(/ {skip = 1; print "    )"} /^    SELECT c.id, false AS expired/ {skip = 0} !skip'
    variant advisory | awk '
        /AND cur.queue = \(SELECT l.queue FROM batchq.queue_cursors l/ {
            print "          AND pg_try_advisory_xact_lock(1650811249, hashtext(p_queue))"; skip = 2; next }
        skip > 0 {skip--; next} {print}'
} > "$tmp/variants.sql"
psql -q -v ON_ERROR_STOP=1 "$url" -f "$tmp/variants.sql" >/dev/null

psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null <<SQL
DO \$\$
BEGIN
    FOR b IN 0..($jobs / 1000 - 1) LOOP
        PERFORM batchq.enqueue('q',
            array_agg('tenant-' || lpad((i % 100)::text, 3, '0') ORDER BY i), array_fill('k'::text, ARRAY[1000]),
            array_agg((1 + (i * 7919) % 1000)::bigint ORDER BY i), array_fill(now() + interval '1 day', ARRAY[1000]),
            array_fill(5, ARRAY[1000]), array_fill('{}'::jsonb, ARRAY[1000]), array_fill(NULL::text, ARRAY[1000]))
        FROM generate_series(b * 1000, b * 1000 + 999) i;
    END LOOP;
END
\$\$;
VACUUM ANALYZE batchq.jobs, batchq.outcomes, batchq.tenant_ring, batchq.queue_cursors;
CHECKPOINT;
SQL

for v in $variants; do
    cat > "$tmp/$v.pgb" <<SQL
SELECT array_agg(id) AS ids, array_agg(lease_token) AS toks FROM batchq.claim_$v('q', 100, 'w', 9223372036854775807) WHERE NOT expired \gset
SELECT count(*) FROM batchq.complete(:ids::bigint[], :toks::uuid[],
    array_fill(-1::bigint, ARRAY[cardinality(:ids::bigint[])]), array_fill(''::text, ARRAY[cardinality(:ids::bigint[])]));
SQL
done

printf '%-5s %-9s %10s\n' round variant claim_ms
for r in $(seq "$rounds"); do
    for v in $variants; do
        out=$(pgbench -n -M prepared -c 1 -t "$cycles" -r -f "$tmp/$v.pgb" "$url" 2>&1) || { echo "$out" >&2; exit 1; }
        echo "$out" | awk -v r="$r" -v v="$v" '/^ +[0-9.]+ +[0-9]+ +SELECT/ {printf "%-5s %-9s %10.3f\n", r, v, $1; exit}'
    done
done | tee "$tmp/runs.txt"
echo
awk '{ if ($1 != "round") { s[$2] += $3; n[$2]++ } } END { for (v in s) printf "mean %-9s %10.3f ms\n", v, s[v] / n[v] }' "$tmp/runs.txt" | sort
