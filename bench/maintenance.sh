#!/usr/bin/env bash
# maintenance.sh: what a fleet's maintenance costs the server. It starts
# PROCESSES `batchq work` processes on one idle queue for SECONDS, stops
# them, and prints, per maintenance function, how often it ran and the time
# the server spent in it (pg_stat_user_functions): the pass's functions
# (rescue, expire, requeue, due_schedules, apply_adjustments) and the turns
# asked (maintenance_turn). The workers' --target is a closed port; the
# queue stays empty, so nothing is sent.
#
# usage: bench/maintenance.sh [processes] [seconds]
#   defaults 8 10; run from the repository root after make build; needs psql.
#   BATCHQ=path measures another build (say, one of a commit before; its
#   migrations make the database). It works in a database of its own,
#   batchq_maint_<pid>, on the server of ADMIN_URL (default
#   postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), and drops it
#   afterwards. Counting function calls (track_functions) takes a superuser.
set -euo pipefail
. "$(dirname "$0")/seed.sh"
procs=${1:-8} secs=${2:-10} batchq=${BATCHQ:-bin/batchq}

batchq_scratch_db batchq_maint "$batchq"
psql -q "$admin" -c "ALTER DATABASE $db SET track_functions = 'pl'" >/dev/null
DATABASE_URL=$url "$batchq" queues create q >/dev/null

pids=()
for _ in $(seq 1 "$procs"); do
    DATABASE_URL=$url "$batchq" work --queue q --target http://127.0.0.1:9/ >/dev/null 2>&1 &
    pids+=($!)
done
sleep "$secs"
kill -INT "${pids[@]}"
wait "${pids[@]}" || true
sleep 1.5 # the backends' counters reach the statistics when they end

echo "$procs worker processes of $batchq, ${secs}s"
psql -q "$url" -c "SELECT funcname AS function, calls, round(total_time::numeric, 1) AS ms
    FROM pg_stat_user_functions
    WHERE schemaname = 'batchq'
      AND funcname IN ('rescue', 'expire', 'requeue', 'due_schedules', 'apply_adjustments', 'maintenance_turn')
    ORDER BY funcname"
