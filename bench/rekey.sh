#!/usr/bin/env bash
# rekey.sh: what the commit-time check costs a transaction that enqueued a
# new tenant's jobs when the cursor moved meanwhile, so that the check moves
# them all (BENCHMARKS.md, flood, "Commit-time rewrites in turn"), beside the
# same commit with nothing to move.
#
# usage: bench/rekey.sh [jobs] [repetitions]
#   defaults 1000 3; run from the repository root after make build; needs
#   psql. It works in a database of its own, batchq_rekey_<pid>, on the server
#   of ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable),
#   and drops it afterwards. Each repetition prints the two commits' times.
set -euo pipefail
. "$(dirname "$0")/seed.sh"
jobs=${1:-1000} reps=${2:-3}

batchq_scratch_db batchq_rekey
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 1000000 q >/dev/null

for rep in $(seq "$reps"); do
    psql -qAt -v ON_ERROR_STOP=1 "$url" <<SQL | awk -v rep="$rep" '
        /^Time:/ { t[++n] = $2 }
        END { printf "rep %d: commit moving %s jobs %s ms, commit with nothing to move %s ms\n", rep, '"$jobs"', t[4], t[7] }'
TRUNCATE batchq.jobs, batchq.tenant_ring, batchq.ledger_adjustments;
UPDATE batchq.queue_cursors SET round = 0;
SELECT count(*) FROM batchq.enqueue_jobs('q',
    (SELECT jsonb_agg(jsonb_build_object('tenant', 'backlog', 'cost', 500)) FROM generate_series(1, 5000))) \\g /dev/null
\\timing on
BEGIN;
SELECT count(*) FROM batchq.enqueue_jobs('q',
    (SELECT jsonb_agg(jsonb_build_object('tenant', 'moved-$rep', 'cost', 500)) FROM generate_series(1, $jobs))) \\g /dev/null
-- As claims would move it while the transaction is open.
UPDATE batchq.queue_cursors SET round = round + 100;
COMMIT;
BEGIN;
SELECT count(*) FROM batchq.enqueue_jobs('q',
    (SELECT jsonb_agg(jsonb_build_object('tenant', 'still-$rep', 'cost', 500)) FROM generate_series(1, $jobs))) \\g /dev/null
COMMIT;
SQL
done
