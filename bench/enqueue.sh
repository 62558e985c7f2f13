#!/usr/bin/env bash
# enqueue.sh: what one enqueue transaction costs, batchq (fair) beside the
# FIFO baseline's INSERT of the same rows (fifo), with pgbench on one
# connection. Four shapes:
#   one   one job per transaction, for a tenant with jobs queued
#   join  one job per transaction, for a tenant new to the ring
#   txn   100 jobs of one new tenant in one call, arrays as the Go client
#         sends them
#   bulk  1,000 jobs over 100 tenants in one call
# Every run starts from the same state (100 tenants with one job queued each,
# analyzed); fair and fifo alternate, so drift hits them alike. It prints the
# median milliseconds per transaction of each run, and with TRACK=1 what each
# of batchq's functions took per call (track_functions).
#
# usage: bench/enqueue.sh [transactions] [repetitions] [shapes]
#   defaults 400 3 "one join txn bulk" (bulk runs a tenth of the
#   transactions); run from the repository root after make build; needs psql
#   and pgbench. It works in a database of its own, batchq_enqueue_<pid>, on
#   the server of ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
#   and drops it afterwards.
#
# END=ROLLBACK ends each transaction with a rollback instead of a commit (no
# commit-time check, no flush), and PGOPTIONS reaches the sessions
# (PGOPTIONS='-c synchronous_commit=off' times the commit without its flush).
#
# To measure a change, set ENQUEUE_HOOK to a file of SQL run once after the
# schema is created (say, ALTER TABLE batchq.ring_commit_checks SET UNLOGGED,
# or a function file of db/functions as it was before).
set -euo pipefail
. "$(dirname "$0")/seed.sh"
txns=${1:-400} reps=${2:-3} shapes=${3:-one join txn bulk}

batchq_scratch_db batchq_enqueue
psql -q "$url" -f internal/fifo/schema.sql >/dev/null
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 100000000 q >/dev/null
if [ -n "${ENQUEUE_HOOK:-}" ]; then psql -q -v ON_ERROR_STOP=1 "$url" -f "$ENQUEUE_HOOK" >/dev/null; fi

tenants="ARRAY(SELECT 'tenant-' || lpad(i::text, 4, '0') FROM generate_series(0, 99) i)"
cat > "$tmp/reset.sql" <<SQL
TRUNCATE batchq.jobs, batchq.outcomes, batchq.ledger_adjustments, batchq.tenant_ring, batchq.ring_commit_checks,
         batchq_fifo.jobs;
UPDATE batchq.queue_cursors SET round = 0;
SELECT count(*) FROM batchq.enqueue('q', $tenants, NULL, array_fill(1::bigint, ARRAY[100]), NULL, NULL, NULL, NULL);
INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT 'q', t, 'default', 1, now() + interval '1 day', '{}', 5 FROM unnest($tenants) t;
VACUUM ANALYZE batchq.jobs, batchq.tenant_ring, batchq.ring_commit_checks, batchq_fifo.jobs;
CHECKPOINT;
SQL

# One file per shape and system. fifo writes the rows fair would, as
# internal/fifo does.
fifo_insert() { # tenants-expression costs-expression
    echo "INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT 'q', t, 'default', c, now() + interval '1 day', '{}'::jsonb, 5 FROM unnest($1, $2) AS x (t, c);"
}
fair_enqueue() { # tenants-expression costs-expression lines
    echo "SELECT count(*) FROM batchq.enqueue('q', $1, array_fill('default'::text, ARRAY[$3]), $2,
    array_fill('0001-01-01 00:00:00Z'::timestamptz, ARRAY[$3]), array_fill(0, ARRAY[$3]),
    array_fill('{}'::jsonb, ARRAY[$3]), array_fill(''::text, ARRAY[$3]));"
}
for shape in one join txn bulk; do
    case $shape in
    one)  t="ARRAY['tenant-' || lpad(:t::text, 4, '0')]" c="ARRAY[:c::bigint]" n=1 set='\set t random(0, 99)' ;;
    join) t="ARRAY['new-' || :t::text]" c="ARRAY[:c::bigint]" n=1 set='\set t random(1, 1000000000)' ;;
    txn)  t="array_fill('new-' || :t::text, ARRAY[100])" c="array_fill(:c::bigint, ARRAY[100])" n=100 set='\set t random(1, 1000000000)' ;;
    bulk) t="ARRAY(SELECT 'tenant-' || lpad((i % 100)::text, 4, '0') FROM generate_series(0, 999) i)"
          c="ARRAY(SELECT 1 + (i * 7919) % 1000 FROM generate_series(0, 999) i)::bigint[]" n=1000 set='\set t 0' ;;
    esac
    for sys in fair fifo; do
        {
            echo "$set"
            echo '\set c random(1, 1000)'
            echo 'BEGIN;'
            if [ $sys = fair ]; then fair_enqueue "$t" "$c" $n; else fifo_insert "$t" "$c"; fi
            echo "${END:-COMMIT};"
        } > "$tmp/$shape-$sys.sql"
    done
done

echo "shape  system  rep  ms/txn (median)   $(date -u +%FT%H:%MZ), $txns transactions a run"
for shape in $shapes; do
    n=$txns
    [ "$shape" = bulk ] && n=$(( (txns + 9) / 10 ))
    for rep in $(seq 1 "$reps"); do
        for sys in fair fifo; do
            psql -q "$url" -f "$tmp/reset.sql" >/dev/null
            psql -q "$url" -c "SELECT pg_stat_reset()" >/dev/null
            rm -f "$tmp"/log.*
            PGOPTIONS="${PGOPTIONS:-} -c track_functions=all" pgbench -n -M prepared -c 1 -t "$n" -l --log-prefix="$tmp/log" \
                -f "$tmp/$shape-$sys.sql" "$url" >/dev/null
            ms=$(cat "$tmp"/log.* | awk '{print $3 / 1000}' | sort -n | awk '{a[NR] = $1} END {printf "%.3f", a[int(NR / 2) + 1]}')
            printf '%-6s %-7s %-4s %s\n' "$shape" "$sys" "$rep" "$ms"
            if [ "${TRACK:-}" = 1 ] && [ $sys = fair ]; then
                psql -qAt -F ' ' "$url" -c "SELECT '    ' || funcname, calls, round((total_time / calls)::numeric * 1000, 1) || ' us total',
                    round((self_time / calls)::numeric * 1000, 1) || ' us self' FROM pg_stat_user_functions
                    WHERE calls > 0 ORDER BY total_time DESC LIMIT 8"
            fi
        done
    done
done
