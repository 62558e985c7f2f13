#!/usr/bin/env bash
# cycle.sh: what one claim of 100 jobs and its completion cost the server, for
# batchq (fair) and the two FIFO baselines of internal/fifo (fifo, with
# batchq's rows; lean, with narrow ones), with pgbench: transactions are
# cycles (a claim, then a completion of what it took, outcome rows
# included), each statement's mean latency, and WAL bytes
# written per job. Every run starts from a fresh seed of the same jobs; the
# systems alternate, so drift hits them alike.
#
# usage: bench/cycle.sh [clients] [cycles-per-client] [repetitions]
#   defaults 1 480 3; run from the repository root after make build; needs
#   psql and pgbench. It works in a database of its own, batchq_cycle_<pid>,
#   on the server of ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable,
#   as batchq's own default: without it pgbench would encrypt, where the Go client does not),
#   and drops it afterwards.
#
# To measure a change to the schema or a function, edit the database between
# the seed and the runs: set CYCLE_HOOK to a file of SQL run once after the
# schema is created (say, DROP INDEX batchq.outcomes_tenant).
set -euo pipefail
. "$(dirname "$0")/seed.sh"
clients=${1:-1} cycles=${2:-480} reps=${3:-3}
jobs=$((clients * cycles * 100 + 1000))

batchq_scratch_db batchq_cycle
psql -q "$url" -f internal/fifo/schema.sql >/dev/null
DATABASE_URL=$url bin/batchq queues create --max-per-tenant 100000000 q >/dev/null
if [ -n "${CYCLE_HOOK:-}" ]; then psql -q -v ON_ERROR_STOP=1 "$url" -f "$CYCLE_HOOK" >/dev/null; fi

# The same jobs for every system: 100 tenants, costs 1..1000, enqueued by
# batchq in calls of 1,000 (so in claim order, as an import writes them).
{
    cat <<SQL
TRUNCATE batchq.jobs, batchq.outcomes, batchq.ledger_adjustments, batchq.tenant_ring,
         batchq_fifo.jobs, batchq_fifo.outcomes, batchq_fifo.lean_jobs, batchq_fifo.lean_outcomes;
UPDATE batchq.queue_cursors SET round = 0;
SQL
    batchq_seed_sql "$jobs"
    cat <<SQL
INSERT INTO batchq_fifo.jobs (queue, tenant, kind, cost, deadline, payload, max_attempts)
SELECT 'fifo', 'tenant-' || lpad((i % 100)::text, 3, '0'), 'k', 1 + (i * 7919) % 1000, now() + interval '1 day', '{}', 5
FROM generate_series(0, $jobs - 1) i;
INSERT INTO batchq_fifo.lean_jobs (tenant, cost, payload)
SELECT 'tenant-' || lpad((i % 100)::text, 3, '0'), 1 + (i * 7919) % 1000, '{}' FROM generate_series(0, $jobs - 1) i;
VACUUM ANALYZE batchq.jobs, batchq.outcomes, batchq.tenant_ring, batchq_fifo.jobs, batchq_fifo.outcomes,
    batchq_fifo.lean_jobs, batchq_fifo.lean_outcomes;
CHECKPOINT;
SQL
} > "$tmp/seed.sql"

# A completion passes its arrays as batchq's client does: cast once, into
# batchq.complete's parameters; no actual costs or results (NULL arrays).
complete="SELECT count(*) FROM batchq.complete('q', :ids::bigint[], :toks::uuid[], NULL, NULL);"
cat > "$tmp/fair.pgb" <<SQL
SELECT array_agg(id) AS ids, array_agg(lease_token) AS toks FROM batchq.claim('q', 100, 'w', 9223372036854775807) WHERE NOT expired \gset
$complete
SQL
# The baselines' statements, as internal/fifo/queries.sql has them.
cat > "$tmp/fifo.pgb" <<'SQL'
SELECT array_agg(id) AS ids, array_agg(lease_token) AS toks FROM batchq_fifo.claim('fifo', 100, 'w') \gset
SELECT batchq_fifo.complete(:ids::bigint[], :toks::uuid[]);
SQL
cat > "$tmp/lean.pgb" <<'SQL'
WITH c AS (
    UPDATE batchq_fifo.lean_jobs j
    SET state = 'running', attempt = j.attempt + 1, claimed_at = now(), lease_expires_at = now() + interval '5 minutes'
    WHERE j.id = ANY (ARRAY(SELECT f.id FROM batchq_fifo.lean_jobs f WHERE f.state = 'queued' ORDER BY f.id LIMIT 100
                            FOR UPDATE SKIP LOCKED))
    RETURNING j.id, j.tenant, j.cost, j.payload)
SELECT array_agg(id) AS ids FROM c \gset
WITH done AS (
    DELETE FROM batchq_fifo.lean_jobs j WHERE j.id = ANY (:ids::bigint[]) AND j.state = 'running' RETURNING j.*)
INSERT INTO batchq_fifo.lean_outcomes (job_id, tenant, cost, attempts, enqueued_at, claimed_at)
SELECT d.id, d.tenant, d.cost, d.attempt, d.enqueued_at, d.claimed_at FROM done d;
SQL

threads=$((clients < 2 ? 1 : 2))
printf '%-6s %-4s %10s %10s %12s %10s\n' system rep cycles/s claim_ms complete_ms wal_b/job
for rep in $(seq "$reps"); do
    for sys in fair fifo lean; do
        psql -q "$url" -f "$tmp/seed.sql" >/dev/null
        before=$(psql -XAtq "$url" -c "SELECT pg_current_wal_lsn()")
        out=$(pgbench -n -M prepared -c "$clients" -j "$threads" -t "$cycles" -r -f "$tmp/$sys.pgb" "$url" 2>&1) ||
            { echo "$out" >&2; exit 1; }
        wal=$(psql -XAtq "$url" -c "SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$before') / ($clients * $cycles * 100.0))")
        echo "$out" | awk -v s="$sys" -v r="$rep" -v w="$wal" '
            /^tps/ { tps = $3 }
            /^ +[0-9.]+ +[0-9]+ +[A-Z(]/ { lat[++n] = $1 }
            END { printf "%-6s %-4s %10.0f %10.3f %12.3f %10s\n", s, r, tps, lat[1], lat[2], w }'
    done
done
