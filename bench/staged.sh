#!/usr/bin/env bash
# staged.sh: what enqueue would cost with each job's fair-order key set after
# its commit instead of inside it (bench/staged.sql: a lean row counted
# against its tenant's bound, and a mover that keys staged rows into
# batchq.jobs), beside batchq's enqueue (fair), batchq's enqueue of jobs
# scheduled a year ahead (later: no key, but the ring rows, the bound and
# the rest of the call as fair's) and the FIFO baseline's INSERT (fifo),
# with pgbench on one connection, as bench/enqueue.sh times them. Two shapes:
#   one   one job per transaction, for a tenant with jobs queued
#   bulk  1,000 jobs over 100 tenants in one call
# Then the mover: the rows the staged bulk runs wrote, keyed 1,000 a call,
# beside fair's own bulk call (the same work done inside the enqueue).
# It prints the median milliseconds per transaction of each run.
#
# usage: bench/staged.sh [transactions] [repetitions]
#   defaults 400 3 (bulk and the mover run a tenth of the transactions);
#   run from the repository root after make build; needs psql and pgbench.
#   It works in a database of its own on the server of ADMIN_URL and drops
#   it afterwards.
set -euo pipefail
. "$(dirname "$0")/seed.sh"
txns=${1:-400} reps=${2:-3}
batchq_scratch_db batchq_staged
psql -q "$url" -f internal/fifo/schema.sql >/dev/null
psql -q -v ON_ERROR_STOP=1 "$url" -f bench/staged.sql >/dev/null
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 100000000 q >/dev/null
tenants="ARRAY(SELECT 'tenant-' || lpad(i::text, 4, '0') FROM generate_series(0, 99) i)"
cat > "$tmp/reset.sql" <<SQL
TRUNCATE batchq.jobs, batchq.outcomes, batchq.ledger_adjustments, batchq.tenant_ring, batchq.ring_commit_checks,
         batchq_fifo.jobs, batchq.staged, batchq.staged_counts;
UPDATE batchq.queue_cursors SET round = 0;
SELECT count(*) FROM batchq.enqueue('q', $tenants, NULL, array_fill(1::bigint, ARRAY[100]), NULL, NULL, NULL, NULL);
SELECT batchq.stage('q', $tenants, NULL, array_fill(1::bigint, ARRAY[100]), NULL, NULL, NULL);
INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT 'q', t, 'default', 1, now() + interval '1 day', '{}', 5 FROM unnest($tenants) t;
VACUUM ANALYZE batchq.jobs, batchq.tenant_ring, batchq.ring_commit_checks, batchq_fifo.jobs, batchq.staged,
               batchq.staged_counts;
CHECKPOINT;
SQL
args() { # tenants-expression costs-expression lines
    echo "$1, array_fill('default'::text, ARRAY[$3]), $2, array_fill('0001-01-01 00:00:00Z'::timestamptz, ARRAY[$3]),
    array_fill(0, ARRAY[$3]), array_fill('{}'::jsonb, ARRAY[$3])"
}
for shape in one bulk; do
    case $shape in
    one)  t="ARRAY['tenant-' || lpad(:t::text, 4, '0')]" c="ARRAY[:c::bigint]" n=1 set='\set t random(0, 99)' ;;
    bulk) t="ARRAY(SELECT 'tenant-' || lpad((i % 100)::text, 4, '0') FROM generate_series(0, 999) i)"
          c="ARRAY(SELECT 1 + (i * 7919) % 1000 FROM generate_series(0, 999) i)::bigint[]" n=1000 set='\set t 0' ;;
    esac
    for sys in fair later staged fifo; do
        {
            echo "$set"
            echo '\set c random(1, 1000)'
            echo 'BEGIN;'
            case $sys in
            fair)   echo "SELECT count(*) FROM batchq.enqueue('q', $(args "$t" "$c" $n), array_fill(''::text, ARRAY[$n]));" ;;
            later)  echo "SELECT count(*) FROM batchq.enqueue('q', $(args "$t" "$c" $n), array_fill(''::text, ARRAY[$n]),
    array_fill(now() + interval '1 year', ARRAY[$n]));" ;;
            staged) echo "SELECT batchq.stage('q', $(args "$t" "$c" $n));" ;;
            fifo)   echo "INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT 'q', t, 'default', c, now() + interval '1 day', '{}'::jsonb, 5 FROM unnest($t, $c) AS x (t, c);" ;;
            esac
            echo 'COMMIT;'
        } > "$tmp/$shape-$sys.sql"
    done
done
printf 'BEGIN;\nSELECT batchq.move_staged('"'"'q'"'"', 1000);\nCOMMIT;\n' > "$tmp/move.sql"
median() { cat "$tmp"/log.* | awk '{print $3 / 1000}' | sort -n | awk '{a[NR] = $1} END {printf "%.3f", a[int(NR / 2) + 1]}'; }
echo "shape  system  rep  ms/txn (median)   $(date -u +%FT%H:%MZ), $txns transactions a run"
for shape in one bulk; do
    n=$txns
    [ "$shape" = bulk ] && n=$(( (txns + 9) / 10 ))
    for rep in $(seq 1 "$reps"); do
        for sys in fair later staged fifo; do
            psql -q "$url" -f "$tmp/reset.sql" >/dev/null
            rm -f "$tmp"/log.*
            pgbench -n -M prepared -c 1 -t "$n" -l --log-prefix="$tmp/log" -f "$tmp/$shape-$sys.sql" "$url" >/dev/null
            printf '%-6s %-7s %-4s %s\n' "$shape" "$sys" "$rep" "$(median)"
            if [ "$shape" = bulk ] && [ "$sys" = staged ]; then
                # Key what the run staged, 1,000 rows a call: the work the
                # enqueue left for later.
                psql -q "$url" -c "VACUUM ANALYZE batchq.staged" >/dev/null
                rm -f "$tmp"/log.*
                pgbench -n -M prepared -c 1 -t "$n" -l --log-prefix="$tmp/log" -f "$tmp/move.sql" "$url" >/dev/null
                printf '%-6s %-7s %-4s %s\n' move staged "$rep" "$(median)"
                # All but the 100 the reset staged, which the run's calls
                # came after.
                left=$(psql -qAt "$url" -c "SELECT count(*) FROM batchq.staged")
                [ "$left" = 100 ] || { echo "the mover left $left staged rows, not 100"; exit 1; }
            fi
        done
    done
done
