package pgtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
)

func TestNewGivesAMigratedDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	var n int
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'batchq' AND table_name IN ('jobs', 'outcomes', 'queues')`).Scan(&n)
	require.NoError(t, err)
	require.Equal(t, 3, n)
}

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.New(t), pgtest.New(t)
	_, err := a.Exec(ctx, `INSERT INTO batchq.queues (name) VALUES ('only-in-a')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM batchq.queues`).Scan(&n))
	require.Zero(t, n)
	var nameA, nameB string
	require.NoError(t, a.QueryRow(ctx, `SELECT current_database()`).Scan(&nameA))
	require.NoError(t, b.QueryRow(ctx, `SELECT current_database()`).Scan(&nameB))
	require.NotEqual(t, nameA, nameB)
}

func TestEmptyURLHasNoSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Connect(t, pgtest.EmptyURL(t))
	var exists bool
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'batchq')`).Scan(&exists))
	require.False(t, exists)
}

// TestNoServerFails runs a database test in a child process pointed at a port
// where nothing listens: it must fail, not skip, and say how to get a server.
func TestNoServerFails(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		pgtest.New(t)
		return
	}
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a database test in a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoServerFails$", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=1",
		"TEST_DATABASE_URL=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the child test passed without a database:\n%s", out)
	s := string(out)
	require.Contains(t, s, "--- FAIL: TestNoServerFails")
	require.NotContains(t, s, "--- SKIP")
	require.Contains(t, s, "TEST_DATABASE_URL is set but does not answer")
	require.True(t, strings.Contains(s, "Set TEST_DATABASE_URL"), "no advice in:\n%s", s)
}
