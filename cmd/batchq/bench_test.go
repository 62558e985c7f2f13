package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
	require.Len(t, rep.Bars, 2*2+2) // processes × (fair, pool) vs FIFO, and processes × pool vs the batch claimer
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
		{"unknown enqueue system", []string{"bench", "enqueue", "--systems", "fair,lifo"}, `bench enqueue: system "lifo": must be fair, fifo or river`},
		{"river-default enqueue", []string{"bench", "enqueue", "--systems", "fair,river-default"}, `bench enqueue: system "river-default": River inserts the same whatever its fetch settings; use river`},
		{"river without its program", []string{"bench", "enqueue", "--systems", "fair,river", "--river-bin", "/nonexistent/batchq-river"},
			"the river systems need the batchq-river program: build it with `make bench-river`"},
		{"river drain without its program", []string{"bench", "drain", "--systems", "pool,river", "--river-bin", "/nonexistent/batchq-river"},
			"the river systems need the batchq-river program"},
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

// River side by side, through the CLI: batchq-river is built from its own
// module as `make bench-river` builds it, and a tiny enqueue and drain each
// have River's rows and the bars against it.
func TestBenchBesideRiver(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds bench/river")
	}
	river := filepath.Join(t.TempDir(), "batchq-river")
	build := exec.Command("go", "build", "-o", river, ".")
	build.Dir = filepath.Join("..", "..", "bench", "river")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	server := pgtest.ServerURL(t)

	type report struct {
		Tables []struct {
			Columns []string
			Rows    []map[string]any
		}
		Bars []struct {
			Name  string
			Value float64
		}
	}
	parse := func(res cliResult) report {
		t.Helper()
		require.Equal(t, 0, res.code, res.stderr)
		requireDropped(t, server, res.stderr)
		var rep report
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), res.stdout)
		require.Len(t, rep.Tables, 1)
		return rep
	}
	bars := func(rep report) map[string]float64 {
		m := map[string]float64{}
		for _, b := range rep.Bars {
			m[b.Name] = b.Value
		}
		return m
	}

	rep := parse(runCLI(t, server, "bench", "enqueue", "--systems", "fair,river", "--river-bin", river, "--jobs", "20",
		"--bulk-jobs", "300", "--bulk-size", "100", "--txn-jobs", "30", "--txn-size", "10", "--concurrency", "1",
		"--reps", "1", "--no-warmup", "--json"))
	modes := map[string]bool{}
	for _, row := range rep.Tables[0].Rows {
		require.Positive(t, row["jobs_per_s"].(map[string]any)["median"], "%v", row)
		if row["system"] == "river" {
			modes[row["mode"].(string)] = true
			require.Equal(t, 1.0, row["vs_river"])
		}
	}
	require.Equal(t, map[string]bool{"single": true, "bulk": true, "txn": true}, modes)
	b := bars(rep)
	require.Contains(t, b, "enqueue: bulk in calls of 100, one enqueuer, fair vs river")
	require.Contains(t, b, "enqueue: one job per transaction, one enqueuer, fair vs river")
	require.Positive(t, b["enqueue: bulk in calls of 100, one enqueuer, fair vs river"])

	rep = parse(runCLI(t, server, "bench", "drain", "--systems", "pool,river", "--river-bin", river, "--jobs", "300",
		"--tenants", "5", "--processes", "1", "--batch", "100", "--workers", "2", "--reps", "1", "--no-warmup", "--json"))
	systems := map[string]bool{}
	for _, row := range rep.Tables[0].Rows {
		systems[row["system"].(string)] = true
		require.Positive(t, row["jobs_per_s"].(map[string]any)["median"], "%v", row)
	}
	require.Equal(t, map[string]bool{"pool": true, "river": true}, systems)
	require.Positive(t, bars(rep)["drain pool vs River tuned, batch 100, 1 process(es)"])
}
