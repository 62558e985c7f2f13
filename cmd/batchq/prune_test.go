package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPrune(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	// Three outcomes finished 40 days ago, two an hour ago.
	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at)
		SELECT g, 'q', 't', 'k', 'succeeded', 1, 1, 1, now(), now(),
		       now() - CASE WHEN g <= 3 THEN interval '40 days' ELSE interval '1 hour' END
		FROM generate_series(1, 5) g`)

	r := runCLI(t, db.url, "prune", "--older-than", "30d")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^pruned 3 outcomes that finished before \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n$`, r.stdout)
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.outcomes`))
	require.Equal(t, int64(4), db.count(t, `SELECT min(job_id) FROM batchq.outcomes`))

	r = runCLI(t, db.url, "--format", "csv", "prune", "--older-than", "720h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^pruned,finished_before\n0,\S+Z\n$`, r.stdout)

	r = runCLI(t, db.url, "prune", "--older-than", "1m", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `"pruned": 2,`, r.stdout)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.outcomes`))
}

func TestPruneErrors(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "prune")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "batchq: prune: --older-than is required")

	r = runCLI(t, db.url, "prune", "--older-than", "a month")
	require.Equal(t, 2, r.code)
	require.Equal(t, "batchq: --older-than \"a month\": not a duration like 720h or 30d\n", r.stderr)

	r = runCLI(t, db.url, "prune", "--older-than", "-1h")
	require.Equal(t, 2, r.code)
	require.Equal(t, "batchq: --older-than \"-1h\": must not be negative\n", r.stderr)

	r = runCLI(t, db.url, "prune", "--older-than", "9999999h")
	require.Equal(t, 2, r.code)
	require.Equal(t, "batchq: --older-than \"9999999h\": must be at most 36500d (876000h)\n", r.stderr)
}
