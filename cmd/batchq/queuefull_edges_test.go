package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// queue_full says "1 more does not fit" and "3 more do not fit", in the
// client's words and in the SQL functions' alike.
func TestQueueFullSaysHowManyMoreFit(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "imports", "--max-per-tenant", "2")
	require.Equal(t, 0, r.code, r.stderr)
	for range 2 {
		r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "t", "--cost", "1")
		require.Equal(t, 0, r.code, r.stderr)
	}
	one := `batchq: queue_full: tenant "t" has 2 queued jobs in queue "imports" (bound 2); 1 more does not fit`
	three := `batchq: queue_full: tenant "t" has 2 queued jobs in queue "imports" (bound 2); 3 more do not fit`

	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "t", "--cost", "1")
	require.Equal(t, 1, r.code)
	require.Equal(t, one+"\n", r.stderr)
	r = runCLIInput(t, db.url, strings.Repeat(`{"queue":"imports","tenant":"t","cost":1}`+"\n", 3), "enqueue", "--file", "-")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "lines 1-3: "+strings.TrimPrefix(three, "batchq: ")+"; nothing was enqueued")

	ctx := context.Background()
	var pe *pgconn.PgError
	_, err := db.pool.Exec(ctx, `SELECT batchq.enqueue_job('imports', 't', 1)`)
	require.ErrorAs(t, err, &pe)
	require.Equal(t, one, pe.Message)
	_, err = db.pool.Exec(ctx, `SELECT batchq.enqueue_jobs('imports', $1::jsonb)`,
		`[{"tenant":"t","cost":1},{"tenant":"t","cost":1},{"tenant":"t","cost":1}]`)
	require.ErrorAs(t, err, &pe)
	require.Equal(t, three, pe.Message)
}
