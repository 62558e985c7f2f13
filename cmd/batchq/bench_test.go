package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
)

// `batchq bench drain` starts its own binary again as `batchq bench-worker`;
// under `go test` that binary is the test binary, which must then be the
// worker, not the tests.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "bench-worker" {
		os.Exit(exitCode(newApp(os.Stdout, os.Stderr).Run(append([]string{"batchq"}, os.Args[1:]...)), os.Stderr))
	}
}

var benchDatabase = regexp.MustCompile(`working in database (batchq_bench_[0-9a-f]+)`)

// requireDropped checks that the database the run announced is gone.
func requireDropped(t *testing.T, server, stderr string) {
	t.Helper()
	m := benchDatabase.FindStringSubmatch(stderr)
	require.NotNil(t, m, "no database announced: %s", stderr)
	conn, err := pgx.Connect(context.Background(), server)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, m[1]).Scan(&n))
	require.Zero(t, n, "database %s was not dropped", m[1])
}

// A tiny drain through the CLI, with worker processes that are this binary
// started again: JSON with a row per system, process count and batch size,
// the bars, the machine, the command, and the database gone afterwards.
func TestBenchDrainCLI(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	res := runCLI(t, server, "bench", "drain", "--jobs", "200", "--tenants", "5", "--processes", "1,2",
		"--batch", "20", "--workers", "2", "--reps", "1", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	requireDropped(t, server, res.stderr)

	var rep struct {
		Scenario string
		Command  string
		Machine  struct {
			Cores            int
			Postgres         string
			PostgresSettings []struct{ Name, Value string } `json:"postgres_settings"`
		}
		Tables []struct {
			Name string
			Rows []map[string]any
		}
		Bars []struct {
			Name  string
			Value float64
			Met   bool
		}
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), res.stdout)
	require.Equal(t, "drain", rep.Scenario)
	require.Equal(t, "batchq bench drain --jobs=200 --tenants=5 --processes=1,2 --batch=20 --workers=2 --reps=1 --json", rep.Command)
	require.Positive(t, rep.Machine.Cores)
	require.Contains(t, rep.Machine.Postgres, "PostgreSQL")
	require.NotEmpty(t, rep.Machine.PostgresSettings)
	require.Len(t, rep.Tables, 1)
	require.Len(t, rep.Tables[0].Rows, 2*4) // processes × systems
	for _, row := range rep.Tables[0].Rows {
		rate := row["jobs_per_s"].(map[string]any)
		require.Positive(t, rate["median"], "%v", row)
	}
	require.Len(t, rep.Bars, 2*2) // processes × (fair, pool)
}

// The text report: the machine, the server's settings, the table and the
// bars' section (enqueue has no bars, so the table is the point).
func TestBenchEnqueueCLIText(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	res := runCLI(t, server, "bench", "enqueue", "--jobs", "20", "--bulk-jobs", "100", "--bulk-size", "50",
		"--concurrency", "2", "--reps", "1", "--no-warmup")
	require.Equal(t, 0, res.code, res.stderr)
	requireDropped(t, server, res.stderr)
	for _, want := range []string{
		"batchq bench enqueue", "command:  batchq bench enqueue --jobs=20", "machine:  ", "cores",
		"shared_buffers=", "synchronous_commit=", "max_connections=", "1 repetitions, no warm-up",
		"SYSTEM  MODE", "fair    single", "fifo    bulk",
	} {
		require.Contains(t, res.stdout, want)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad list", []string{"bench", "drain", "--processes", "1,x"}, `--processes "1,x": must be a comma-separated list of positive integers`},
		{"bad reps", []string{"bench", "flood", "--reps", "0"}, "--reps 0: must be in 1..100"},
		{"argument", []string{"bench", "scale", "now"}, `unexpected argument "now"`},
		{"invalid setting", []string{"bench", "quota", "--duration", "1s", "--window", "1s"}, "bench quota: the duration (1s) must be at least 4 windows"},
		{"unknown system", []string{"bench", "drain", "--systems", "fair,lifo"}, `bench drain: system "lifo"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, server, tc.args...)
			require.Equal(t, 2, res.code, res.stderr)
			require.Contains(t, res.stderr, tc.want)
			require.Empty(t, res.stdout)
			if m := benchDatabase.FindStringSubmatch(res.stderr); m != nil {
				requireDropped(t, server, res.stderr)
			}
		})
	}
}
