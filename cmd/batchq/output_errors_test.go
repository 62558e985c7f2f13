package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bad --format given after the arguments is a usage error (exit 2) found
// before the command acts: the job is not cancelled, the queue not created.
func TestTrailingBadFormatFailsBeforeTheCommandActs(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "enqueue", "--queue", "q", "--tenant", "acme", "--cost", "5")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "jobs", "cancel", "1", "--format", "xml")
	require.Equal(t, 2, r.code)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = 1`),
		"a usage error must leave the job alone, but it was cancelled")
}

func TestTrailingBadFormatCreatesNothing(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "imports", "--format", "yaml")
	require.Equal(t, 2, r.code)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.queues WHERE name = 'imports'`),
		"a usage error must create nothing, but the queue exists")
}

// An error with line breaks (a provider's error body) stays on its row of
// the table, written with escapes.
func TestTableKeepsAMultiLineErrorOnItsRow(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at, error)
		VALUES (1, 'q', 't', 'k', 'failed', 1, 1, 1, now(), now(), now(),
		        E'batchq: provider answered 400 Bad Request: {\n  "error": "bad"\n}')`)
	r := runCLI(t, db.url, "report", "outcomes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "\n"), "a header and one row")
	require.Contains(t, r.stdout, `Bad Request: {\n  "error": "bad"\n}`)
}

// A weight too small for three decimals is not listed as 0, which batchq
// would refuse.
func TestTableShowsASmallWeight(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "tenants", "set", "tiny", "--weight", "0.0004")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^tiny\s+0\.0004\s`, r.stdout)
}
