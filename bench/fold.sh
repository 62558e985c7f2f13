#!/usr/bin/env bash
# fold.sh: what one maintenance pass costs to fold cost corrections into a
# backlog. It enqueues TENANTS tenants of JOBS queued jobs each (costs
# 1..1000), then, REPS times, records one correction (as a completion whose
# actual cost differs from its estimate does) for half of the tenants and
# times batchq.apply_adjustments, the step of Maintain that folds them.
#
# usage: bench/fold.sh [tenants] [jobs-per-tenant] [reps]
#   defaults 100 5000 3; run from the repository root after make build; needs
#   psql. It works in a database of its own, batchq_fold_<pid>, on the server
#   of ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable),
#   and drops it afterwards. BATCHQ=path runs another build of batchq.
#   FOLD_DELTA (default -5) is each correction's delta and FOLD_CORRECTIONS
#   (default 1) how many a tenant gets per pass: a sum of a grant or more
#   upwards (FOLD_DELTA=1000) times a fold of every tenant's whole backlog.
set -euo pipefail
. "$(dirname "$0")/seed.sh"
tenants=${1:-100} per=${2:-5000} reps=${3:-3}
delta=${FOLD_DELTA:--5} corrections=${FOLD_CORRECTIONS:-1}
batchq=${BATCHQ:-bin/batchq}

batchq_scratch_db batchq_fold "$batchq"
DATABASE_URL=$url "$batchq" queues create --max-per-tenant $((per * 2)) q >/dev/null
jobs=$((tenants * per))
psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null <<SQL
DO \$\$
BEGIN
    FOR b IN 0..($jobs / 1000 - 1) LOOP
        PERFORM batchq.enqueue('q',
            array_agg('tenant-' || lpad((i % $tenants)::text, 5, '0') ORDER BY i), array_fill('k'::text, ARRAY[1000]),
            array_agg((1 + (i::bigint * 7919) % 1000) ORDER BY i), array_fill(now() + interval '1 day', ARRAY[1000]),
            array_fill(5, ARRAY[1000]), array_fill('{}'::jsonb, ARRAY[1000]), array_fill(NULL::text, ARRAY[1000]))
        FROM generate_series(b * 1000, b * 1000 + 999) i;
    END LOOP;
END
\$\$;
VACUUM ANALYZE batchq.jobs;
SQL
echo "$tenants tenants x $per queued jobs; $corrections correction(s) of $delta for every other tenant, then one pass:"
for rep in $(seq "$reps"); do
    psql -q "$url" -c "INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta)
        SELECT 'q', r.tenant, r.pos, 0, $delta FROM batchq.tenant_ring r, generate_series(1, $corrections)
        WHERE right(r.tenant, 1)::int % 2 = 0" >/dev/null
    psql -X "$url" -c '\timing on' -c "SELECT batchq.apply_adjustments('q')" |
        awk -v r="$rep" '/^Time/ { print "pass " r ": " $2 " ms" }'
done
