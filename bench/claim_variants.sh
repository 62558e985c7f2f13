#!/usr/bin/env bash
# claim_variants.sh: what the parts of batchq.claim cost a claim of 100. It
# loads, beside batchq.claim as migrated, variants of it:
#
#   base      the claim as it is
#   nocursor  without the cursor's upkeep (its read, the probe, the UPDATE)
#   noupdate  without only the cursor's UPDATE
#   floor     the least a claim of batchq's rows can be: one UPDATE of the
#             rows a SKIP LOCKED scan of the claim index locked, as the FIFO
#             baseline claims, with no budget, no expiry and no cursor
#
# All four are made from db/functions/claim.sql, the function's one text,
# by cutting or swapping statements found by their code (never by a
# comment), and the script fails if that code is gone. It seeds one
# backlog and runs the variants in turn, ROUNDS times, CYCLES claims of 100
# and their completions per client each (pgbench -M prepared), so the
# host's drift and the index's growing dead entries hit them alike. It
# prints each run's cycles a second and mean claim latency, and each
# variant's means over all.
#
# usage: bench/claim_variants.sh [rounds] [cycles] [clients]
#   defaults 10 20 1; run from the repository root after make build; needs
#   psql and pgbench. It works in a database of its own,
#   batchq_cycle_variants_<pid>, on the server of ADMIN_URL (default as in
#   bench/cycle.sh), and drops it afterwards.
set -euo pipefail
. "$(dirname "$0")/seed.sh"
rounds=${1:-10} cycles=${2:-20} clients=${3:-1}
variants="base nocursor noupdate floor"
jobs=$(( (4 * rounds * cycles * clients * 100 / 1000 + 2) * 1000 ))
threads=$((clients < 2 ? 1 : 2))

batchq_scratch_db batchq_cycle_variants
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 100000000 q >/dev/null

# The function as the function file has it, renamed.
awk '/^CREATE OR REPLACE FUNCTION batchq.claim\(/ {on = 1} on {print} on && /^\$\$;/ {exit}' \
    db/functions/claim.sql > "$tmp/claim.sql"
cursor_read='^    SELECT c.round INTO v_cursor FROM batchq.queue_cursors c WHERE c.queue = p_queue;$'
grep -q "$cursor_read" "$tmp/claim.sql" &&
    grep -q '^    IF v_reached > v_cursor THEN$' "$tmp/claim.sql" &&
    grep -q '^    WHERE j.queue = p_queue AND j.id = ANY (v_take)$' "$tmp/claim.sql" ||
    { echo "claim_variants.sh: batchq.claim no longer has the parts this cuts" >&2; exit 1; }
variant() { sed "s/^CREATE OR REPLACE FUNCTION batchq.claim(/CREATE FUNCTION batchq.claim_$1(/" "$tmp/claim.sql"; }
{
    variant base
    # From the cursor's read to the function's end.
    variant nocursor | awk -v from="$cursor_read" '$0 ~ from {skip = 1} /^END$/ {skip = 0} !skip'
    # The UPDATE's IF block.
    variant noupdate | awk '/^    IF v_reached > v_cursor THEN$/ {skip = 1} !skip {print} skip && /^    END IF;$/ {skip = 0}'
    # The claim's heading and its own UPDATE, fed by the scan instead of the
    # first statement's arrays.
    variant floor | awk '{print} /^AS \$\$$/ {print "BEGIN"; exit}'
    awk -v q="'" '/^    RETURN QUERY$/ {held = $0; next}
         held != "" && /^    UPDATE batchq.jobs j$/ {on = 1; print held}
         {held = ""}
         on && /^    WHERE j.queue = p_queue AND j.id = ANY \(v_take\)$/ {
             print "    WHERE j.queue = p_queue AND j.id = ANY (ARRAY("
             print "        SELECT c.id FROM batchq.jobs c"
             print "        WHERE c.queue = p_queue AND c.state = " q "queued" q
             print "        ORDER BY c.round, c.pos, c.seq"
             print "        LIMIT p_max_jobs"
             print "        FOR UPDATE SKIP LOCKED))"
             next }
         on {print}
         on && /;$/ {exit}' "$tmp/claim.sql"
    printf 'END\n$$;\n'
} > "$tmp/variants.sql"
psql -q -v ON_ERROR_STOP=1 "$url" -f "$tmp/variants.sql" >/dev/null

{
    batchq_seed_sql "$jobs"
    cat <<SQL
VACUUM ANALYZE batchq.jobs, batchq.outcomes, batchq.tenant_ring, batchq.queue_cursors;
CHECKPOINT;
SQL
} | psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null

for v in $variants; do
    cat > "$tmp/$v.pgb" <<SQL
SELECT array_agg(id) AS ids, array_agg(lease_token) AS toks FROM batchq.claim_$v('q', 100, 'w', 9223372036854775807) WHERE NOT expired \gset
SELECT count(*) FROM batchq.complete('q', :ids::bigint[], :toks::uuid[], NULL, NULL);
SQL
done

printf '%-5s %-9s %10s %10s\n' round variant cycles/s claim_ms
for r in $(seq "$rounds"); do
    for v in $variants; do
        out=$(pgbench -n -M prepared -c "$clients" -j "$threads" -t "$cycles" -r -f "$tmp/$v.pgb" "$url" 2>&1) ||
            { echo "$out" >&2; exit 1; }
        echo "$out" | awk -v r="$r" -v v="$v" '
            /^tps = / {tps = $3}
            /^ +[0-9.]+ +[0-9]+ +SELECT/ && !claim {claim = $1}
            END {printf "%-5s %-9s %10.1f %10.3f\n", r, v, tps, claim}'
    done
done | tee "$tmp/runs.txt"
echo
awk '$1 != "round" { t[$2] += $3; c[$2] += $4; n[$2]++ }
     END { for (v in t) printf "mean %-9s %10.1f cycles/s %10.3f ms a claim\n", v, t[v] / n[v], c[v] / n[v] }' \
    "$tmp/runs.txt" | sort
