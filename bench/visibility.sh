#!/usr/bin/env bash
# visibility.sh: where the queue's cursor is while a fleet claims one
# tenant's backlog, and how far it has gone on by the time newcomers that
# arrived in one transaction become visible (BENCHMARKS.md, flood).
#
# usage: bench/visibility.sh [clients] [newcomers] [jobs-per-newcomer]
#   defaults 8 20 1000; run from the repository root after make build; needs
#   psql and pgbench. It works in a database of its own, batchq_visibility_<pid>,
#   on the server of ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
#   and drops it afterwards.
#
# It seeds 50,000 jobs of one tenant (costs 1..1000, quantum 1000: about two
# jobs a round), then runs clients pgbench sessions that each claim 10 jobs at
# a time (leaving them running). While they claim it prints, a few times, the
# committed cursor beside the round of the last claimed row. Then one
# transaction enqueues newcomers tenants of jobs-per-newcomer jobs each, and
# right after its commit returns it prints the round of the newcomers' first
# jobs, the cursor and the last round claimed: the newcomers are served the
# rounds between their first and the last claimed as a burst, the rounds the
# claims went through before their rows became visible.
#
# To measure a change to a function, set VISIBILITY_HOOK to a file of SQL run
# once after the schema is created (say, an earlier db/functions/claim.sql).
set -euo pipefail
. "$(dirname "$0")/seed.sh"
clients=${1:-8} newcomers=${2:-20} per=${3:-1000}

batchq_scratch_db batchq_visibility
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 100000 q >/dev/null
if [ -n "${VISIBILITY_HOOK:-}" ]; then psql -q -v ON_ERROR_STOP=1 "$url" -f "$VISIBILITY_HOOK" >/dev/null; fi
psql -qAt "$url" -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
SELECT count(*) FROM batchq.enqueue('q', array_fill('big'::text, ARRAY[50000]), NULL,
    (SELECT array_agg(1 + (i * 7919) % 1000) FROM generate_series(0, 49999) i), NULL, NULL, NULL, NULL);
VACUUM ANALYZE batchq.jobs;
SQL
echo "SELECT count(*) FROM batchq.claim('q', 10, 'w', 1000000000);" > "$tmp/claim.pgb"

pgbench -n -c "$clients" -j 2 -T 3 -f "$tmp/claim.pgb" "$url" > "$tmp/pgbench.out" 2>&1 &
bench=$!
sleep 0.5
echo "cursor  last claimed round (committed)"
for _ in 1 2 3; do
    psql -qAt -F '  ' "$url" -c "SELECT (SELECT round FROM batchq.queue_cursors WHERE queue = 'q'),
        (SELECT max(round) FROM batchq.jobs WHERE queue = 'q' AND state = 'running')"
    sleep 0.3
done
psql -qAt "$url" >/dev/null -c "SELECT count(*) FROM batchq.enqueue('q',
    (SELECT array_agg('new-' || (i % $newcomers)) FROM generate_series(0, $newcomers * $per - 1) i), NULL,
    (SELECT array_agg(1 + (i * 7919) % 1000) FROM generate_series(0, $newcomers * $per - 1) i), NULL, NULL, NULL, NULL)"
psql -qAt -F '  ' "$url" -c "SELECT 'newcomers first round', min(round) FROM batchq.jobs WHERE queue = 'q' AND tenant LIKE 'new-%'
    UNION ALL SELECT 'cursor after the commit', round FROM batchq.queue_cursors WHERE queue = 'q'
    UNION ALL SELECT 'last claimed round after the commit', max(round) FROM batchq.jobs WHERE queue = 'q' AND tenant = 'big' AND state = 'running'"
wait "$bench"
