package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
		// A number in every row, one type for JSON's readers.
		require.Equal(t, 2/row["processes"].(float64), row["claimers_per_process"], "%v", row)
	}
	require.Len(t, rep.Bars, 2*2+2) // processes × (fair, pool) vs FIFO, and processes × pool vs the batch claimer
}

// The text report: the machine, the server's settings, the table; and the
// command as a shell takes it back, a value with a space quoted.
func TestBenchEnqueueCLIText(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	res := runCLI(t, server, "bench", "enqueue", "--jobs", "20", "--bulk-jobs", "100", "--bulk-size", "50",
		"--concurrency", "2", "--systems", "fair, fifo", "--reps", "1", "--no-warmup")
	require.Equal(t, 0, res.code, res.stderr)
	requireDropped(t, server, res.stderr)
	for _, want := range []string{
		"batchq bench enqueue",
		"command:  batchq bench enqueue --jobs=20 --bulk-jobs=100 --bulk-size=50 --concurrency=2 --systems='fair, fifo' --reps=1 --no-warmup\n",
		"machine:  ", "cores",
		"shared_buffers=", "synchronous_commit=", "max_connections=", "1 repetitions, no warm-up",
		"SYSTEM  MODE", "fair    single", "fifo    bulk",
	} {
		require.Contains(t, res.stdout, want)
	}
}

// A bad flag is a usage error that names the flag and its rule, and it
// comes before anything touches the database: these run against a server
// that does not answer, so a check made only after the bench database was
// created would fail on the connection instead, with exit 1.
func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	const server = "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	notExecutable := filepath.Join(t.TempDir(), "batchq-river")
	require.NoError(t, os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad list", []string{"bench", "drain", "--processes", "1,x"}, `batchq: bench drain: --processes "1,x": must be a comma-separated list of positive integers`},
		{"bad reps", []string{"bench", "flood", "--reps", "0"}, "batchq: bench flood: --reps: must be in 1..100 (got 0)\n"},
		{"reps too many", []string{"bench", "drain", "--reps", "101"}, "batchq: bench drain: --reps: must be in 1..100 (got 101)\n"},
		{"argument", []string{"bench", "scale", "now"}, "batchq: bench scale: unexpected argument \"now\"\n"},
		// The global --format: the report is text, or JSON with --json.
		{"format json", []string{"--format", "json", "bench", "scale"},
			"batchq: bench scale: --format json: its report is text, or JSON with --json; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
		{"format csv", []string{"--format", "csv", "bench", "drain", "--json"},
			"batchq: bench drain: --format csv: its report is text, or JSON with --json; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
		{"quota duration", []string{"bench", "quota", "--duration", "1s", "--window", "1s"},
			"batchq: bench quota: --duration: must be at least 4 times --window (got 1s, --window 1s)\n"},
		{"unknown system", []string{"bench", "drain", "--systems", "fair,lifo"},
			`batchq: bench drain: --systems "fair,lifo": "lifo": must be fair, pool, fifo, lean, river or river-default` + "\n"},
		{"empty system", []string{"bench", "drain", "--systems", "fair,"}, `batchq: bench drain: --systems "fair,": "": must be fair, pool`},
		{"unknown enqueue system", []string{"bench", "enqueue", "--systems", "fair,lifo"},
			`batchq: bench enqueue: --systems "fair,lifo": "lifo": must be fair, fifo or river` + "\n"},
		{"river-default enqueue", []string{"bench", "enqueue", "--systems", "fair,river-default"},
			`batchq: bench enqueue: --systems "fair,river-default": "river-default": River inserts the same whatever its fetch settings; use river` + "\n"},
		{"scheduled beside the pool", []string{"bench", "drain", "--scheduled", "10"},
			"batchq: bench drain: --scheduled 10: --systems must name only fair, fifo and lean (got pool; a worker pool's drain waits for scheduled jobs)\n"},
		{"flood max-cost 0", []string{"bench", "flood", "--max-cost", "0"}, "batchq: bench flood: --max-cost: must be in 1..1000000000 (got 0)\n"},
		{"flood batch too large", []string{"bench", "flood", "--batch", "100001"}, "batchq: bench flood: --batch: must be in 1..100000 (got 100001)\n"},

		// scale: every count, and both lists.
		{"scale rows 0", []string{"bench", "scale", "--rows", "1000,0"}, `batchq: bench scale: --rows "1000,0": must be a comma-separated list of positive integers` + "\n"},
		{"scale tenants twice", []string{"bench", "scale", "--tenants", "10,10"}, `batchq: bench scale: --tenants "10,10": 10 is named twice` + "\n"},
		{"scale row-tenants 0", []string{"bench", "scale", "--row-tenants", "0"}, "batchq: bench scale: --row-tenants: must be at least 1 (got 0)\n"},
		{"scale tenant-rows negative", []string{"bench", "scale", "--tenant-rows", "-1"}, "batchq: bench scale: --tenant-rows: must be at least 1 (got -1)\n"},
		{"scale claims 0", []string{"bench", "scale", "--claims", "0"}, "batchq: bench scale: --claims: must be at least 1 (got 0)\n"},
		{"scale batch 0", []string{"bench", "scale", "--batch", "0"}, "batchq: bench scale: --batch: must be in 1..100000 (got 0)\n"},
		{"scale batch too large", []string{"bench", "scale", "--batch", "100001"}, "batchq: bench scale: --batch: must be in 1..100000 (got 100001)\n"},

		// quota: counts, durations, the reserve, and a call that cannot fit the quota.
		{"quota tokens 0", []string{"bench", "quota", "--tokens", "0"}, "batchq: bench quota: --tokens: must be at least 1 (got 0)\n"},
		{"quota requests negative", []string{"bench", "quota", "--requests", "-1"}, "batchq: bench quota: --requests: must be at least 1 (got -1)\n"},
		{"quota pools 0", []string{"bench", "quota", "--pools", "0"}, "batchq: bench quota: --pools: must be at least 1 (got 0)\n"},
		{"quota workers 0", []string{"bench", "quota", "--workers", "0"}, "batchq: bench quota: --workers: must be at least 1 (got 0)\n"},
		{"quota interactive 0", []string{"bench", "quota", "--interactive", "0"}, "batchq: bench quota: --interactive: must be at least 1 (got 0)\n"},
		{"quota max-cost above tokens", []string{"bench", "quota", "--max-cost", "60000"},
			"batchq: bench quota: --max-cost: must be at most --tokens (got 60000, --tokens 50000)\n"},
		{"quota interactive-cost above tokens", []string{"bench", "quota", "--tokens", "100", "--max-cost", "10"},
			"batchq: bench quota: --interactive-cost: must be at most --tokens (got 500, --tokens 100)\n"},
		{"quota window 0", []string{"bench", "quota", "--window", "0s"}, "batchq: bench quota: --window: must be at least 1ms (got 0s)\n"},
		{"quota window negative", []string{"bench", "quota", "--window", "-1s"}, "batchq: bench quota: --window: must be at least 1ms (got -1s)\n"},
		{"quota window too short", []string{"bench", "quota", "--window", "1ns", "--duration", "4ns"}, "batchq: bench quota: --window: must be at least 1ms (got 1ns)\n"},
		// A run queues 1.5 × what the quota lets through: 540,000,000 jobs
		// here, which would take hours to enqueue if memory held them.
		{"quota backlog too large", []string{"bench", "quota", "--window", "1ms", "--duration", "1h"},
			"batchq: bench quota: --tokens 50000 per --window 1ms over --duration 1h0m0s at costs 1..--max-cost 1000: " +
				"a run would queue 539460539 batch jobs (half as much again as the quota lets through); must be at most 1000000\n"},
		{"quota latency 0", []string{"bench", "quota", "--latency", "0s"}, "batchq: bench quota: --latency: must be more than 0 (got 0s)\n"},
		{"quota interactive-every negative", []string{"bench", "quota", "--interactive-every", "-1s"},
			"batchq: bench quota: --interactive-every: must be more than 0 (got -1s)\n"},
		{"quota jitter negative", []string{"bench", "quota", "--jitter", "-1ms"}, "batchq: bench quota: --jitter: must be at least 0 (got -1ms)\n"},
		{"quota reserve 1", []string{"bench", "quota", "--reserve", "1"}, "batchq: bench quota: --reserve: must be in [0, 1) (got 1)\n"},
		{"quota reserve NaN", []string{"bench", "quota", "--reserve", "NaN"}, `batchq: --reserve "NaN": not a decimal number` + "\n"},

		// 0 is refused, not taken for the scenario's default.
		{"drain jobs 0", []string{"bench", "drain", "--jobs", "0"}, "batchq: bench drain: --jobs: must be at least 1 (got 0)\n"},
		{"drain tenants 0", []string{"bench", "drain", "--tenants", "0"}, "batchq: bench drain: --tenants: must be at least 1 (got 0)\n"},
		{"drain max-cost 0", []string{"bench", "drain", "--max-cost", "0"}, "batchq: bench drain: --max-cost: must be in 1..1000000000 (got 0)\n"},
		{"drain workers 0", []string{"bench", "drain", "--workers", "0"}, "batchq: bench drain: --workers: must be in 1..64 (got 0)\n"},
		{"flood backlog 0", []string{"bench", "flood", "--backlog", "0"}, "batchq: bench flood: --backlog: must be at least 2 (got 0)\n"},
		{"flood small-jobs 0", []string{"bench", "flood", "--small-jobs", "0"}, "batchq: bench flood: --small-jobs: must be at least 1 (got 0)\n"},
		{"flood window-rounds 0", []string{"bench", "flood", "--window-rounds", "0"}, "batchq: bench flood: --window-rounds: must be at least 1 (got 0)\n"},
		{"enqueue bulk-jobs 0", []string{"bench", "enqueue", "--bulk-jobs", "0"}, "batchq: bench enqueue: --bulk-jobs: must be at least 1 (got 0)\n"},
		{"enqueue txn-size 0", []string{"bench", "enqueue", "--txn-size", "0"}, "batchq: bench enqueue: --txn-size: must be at least 1 (got 0)\n"},

		// Negative and too large values name their flag, up front.
		{"drain jobs negative", []string{"bench", "drain", "--jobs", "-5"}, "batchq: bench drain: --jobs: must be at least 1 (got -5)\n"},
		{"drain max-cost too large", []string{"bench", "drain", "--max-cost", "99999999999"}, "batchq: bench drain: --max-cost: must be in 1..1000000000 (got 99999999999)\n"},
		{"flood quantum too large", []string{"bench", "flood", "--quantum", "99999999999"}, "batchq: bench flood: --quantum: must be in 1..1000000000 (got 99999999999)\n"},
		{"flood workers negative", []string{"bench", "flood", "--workers", "-1"}, "batchq: bench flood: --workers: must be in 1..32 (got -1)\n"},
		{"flood processes above workers", []string{"bench", "flood", "--workers", "2", "--processes", "3"}, "batchq: bench flood: --processes: must be at most --workers (got 3, --workers 2)\n"},
		{"flood arrive-after", []string{"bench", "flood", "--backlog", "100", "--arrive-after", "100"}, "batchq: bench flood: --arrive-after: must be below --backlog (got 100, --backlog 100)\n"},
		{"enqueue tenants negative", []string{"bench", "enqueue", "--tenants", "-1"}, "batchq: bench enqueue: --tenants: must be at least 1 (got -1)\n"},

		// Claimers are bounded: each holds a connection.
		{"drain workers too many", []string{"bench", "drain", "--workers", "1000"}, "batchq: bench drain: --workers: must be in 1..64 (got 1000)\n"},
		{"drain processes above workers", []string{"bench", "drain", "--workers", "2", "--processes", "1,4"}, "batchq: bench drain: --processes: must be at most --workers (got 4, --workers 2)\n"},
		{"enqueue concurrency too many", []string{"bench", "enqueue", "--concurrency", "1,33"}, `batchq: bench enqueue: --concurrency "1,33": 33: must be in 1..32` + "\n"},

		// A value named twice would be measured twice.
		{"system twice", []string{"bench", "drain", "--systems", "fair,fifo,fair,river,river"}, `batchq: bench drain: --systems "fair,fifo,fair,river,river": fair is named twice` + "\n"},
		{"enqueue system twice", []string{"bench", "enqueue", "--systems", "fifo, fifo"}, `batchq: bench enqueue: --systems "fifo, fifo": fifo is named twice` + "\n"},
		{"processes twice", []string{"bench", "drain", "--processes", "1,2,1"}, `batchq: bench drain: --processes "1,2,1": 1 is named twice` + "\n"},
		{"batch twice", []string{"bench", "drain", "--batch", "100,100"}, `batchq: bench drain: --batch "100,100": 100 is named twice` + "\n"},
		{"concurrency twice", []string{"bench", "enqueue", "--concurrency", "8,8"}, `batchq: bench enqueue: --concurrency "8,8": 8 is named twice` + "\n"},

		// Each enqueuer of a row makes a call: a row of 32 enqueuers
		// sharing one call would report 31 that never inserted.
		{"concurrency above jobs", []string{"bench", "enqueue", "--jobs", "4", "--concurrency", "1,8"},
			`batchq: bench enqueue: --concurrency "1,8": 8: must be at most --jobs (got --jobs 4): each enqueuer makes a call` + "\n"},
		{"concurrency above bulk calls", []string{"bench", "enqueue", "--bulk-jobs", "2500", "--bulk-size", "1000", "--concurrency", "4"},
			`batchq: bench enqueue: --concurrency "4": 4: must be at most the bulk calls, --bulk-jobs / --bulk-size rounded up (got 3: --bulk-jobs 2500, --bulk-size 1000): each enqueuer makes a call` + "\n"},

		// A call larger than its measurement's jobs.
		{"bulk-size above bulk-jobs", []string{"bench", "enqueue", "--bulk-size", "100000", "--bulk-jobs", "1000"},
			"batchq: bench enqueue: --bulk-size: must be at most --bulk-jobs (got 100000, --bulk-jobs 1000)\n"},
		{"txn-size above txn-jobs", []string{"bench", "enqueue", "--txn-size", "500", "--txn-jobs", "200"},
			"batchq: bench enqueue: --txn-size: must be at most --txn-jobs (got 500, --txn-jobs 200)\n"},

		// The river program: what was looked for, and what is wrong with it.
		{"river without its program", []string{"bench", "enqueue", "--systems", "fair,river", "--river-bin", "/nonexistent/batchq-river"},
			"batchq: bench enqueue: --river-bin /nonexistent/batchq-river: no such file: build it with `make bench-river`"},
		{"river drain without its program", []string{"bench", "drain", "--systems", "pool,river", "--river-bin", "/nonexistent/batchq-river"},
			"batchq: bench drain: --river-bin /nonexistent/batchq-river: no such file"},
		{"river-bin not executable", []string{"bench", "enqueue", "--systems", "fair,river", "--river-bin", notExecutable},
			"batchq: bench enqueue: --river-bin " + notExecutable + ": not executable (mode -rw-r--r--)\n"},
		{"river-bin a directory", []string{"bench", "drain", "--systems", "river", "--river-bin", os.TempDir()},
			"batchq: bench drain: --river-bin " + os.TempDir() + ": a directory, not the batchq-river program\n"},
		// Without a River system nothing runs the program: a --river-bin
		// given then is a mistake, not something to pass over.
		{"river-bin without river", []string{"bench", "drain", "--river-bin", "/opt/batchq-river"},
			`batchq: bench drain: --river-bin "/opt/batchq-river": only used with --systems river or river-default (got --systems "fair,pool,fifo,lean")` + "\n"},
		{"river-bin without river, enqueue", []string{"bench", "enqueue", "--systems", "fair,fifo", "--river-bin", "/opt/batchq-river"},
			`batchq: bench enqueue: --river-bin "/opt/batchq-river": only used with --systems river (got --systems "fair,fifo")` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, server, tc.args...)
			require.Equal(t, 2, res.code, res.stderr)
			require.Contains(t, res.stderr, tc.want)
			require.Empty(t, res.stdout)
			require.NotContains(t, res.stderr, "working in database")
		})
	}
}

// A --river-bin from its environment variable without a River system is
// refused as the flag is, naming the variable. Not parallel: it sets the
// environment.
func TestBenchRiverBinVariableWithoutRiver(t *testing.T) {
	for _, scenario := range []string{"drain", "enqueue"} {
		env := "BATCHQ_BENCH_" + strings.ToUpper(scenario) + "_RIVER_BIN"
		t.Run(scenario, func(t *testing.T) {
			t.Setenv(env, "/opt/batchq-river")
			res := runCLI(t, noServer, "bench", scenario, "--systems", "fair")
			require.Equal(t, 2, res.code, res.stderr)
			require.Regexp(t, `^batchq: bench `+scenario+`: `+env+` "/opt/batchq-river" \(for --river-bin\): only used with --systems river`, res.stderr)
			require.Empty(t, res.stdout)
		})
	}
}

// A role that may not create databases is told that it needs CREATEDB, and
// not sent to 'batchq migrate grants', whose grants do not give it.
func TestBenchRoleWithoutCreatedb(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	role := uniqueRole(t, "bench")
	dropRolesAtEnd(t, server, role)
	conn, err := pgx.Connect(context.Background(), server)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN NOCREATEDB")
	conn.Close(context.Background())
	require.NoError(t, err)

	res := runCLI(t, withUser(t, server, role, "unused"), "bench", "scale", "--rows", "10", "--tenants", "1", "--reps", "1")
	require.Equal(t, 1, res.code, res.stderr)
	require.Regexp(t, `^batchq: benchkit: create database batchq_bench_[0-9a-f]+ \(the role needs CREATEDB\): `+
		`ERROR: permission denied to create database \(SQLSTATE 42501\)\n$`, res.stderr)
}

// A river program that fails without a word says so, rather than ending
// its error with a colon.
func TestBenchRiverBinThatFailsSilently(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	river := filepath.Join(t.TempDir(), "batchq-river")
	require.NoError(t, os.WriteFile(river, []byte("#!/bin/sh\nexit 3\n"), 0o755))
	res := runCLI(t, server, "bench", "enqueue", "--systems", "fair,river", "--river-bin", river)
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "batchq: benchkit: "+river+" prepare: exit status 3 (nothing on stderr)\n")
	requireDropped(t, server, res.stderr)
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

	// River has no batch: its row shows none, and no ratio to FIFO at a
	// batch it did not use.
	rep = parse(runCLI(t, server, "bench", "drain", "--systems", "pool,fifo,river", "--river-bin", river, "--jobs", "300",
		"--tenants", "5", "--processes", "1", "--batch", "100", "--workers", "2", "--reps", "1", "--no-warmup", "--json"))
	systems := map[string]bool{}
	for _, row := range rep.Tables[0].Rows {
		systems[row["system"].(string)] = true
		require.Positive(t, row["jobs_per_s"].(map[string]any)["median"], "%v", row)
		if row["system"] == "river" {
			require.Nil(t, row["batch"], "%v", row)
			require.Nil(t, row["vs_fifo"], "%v", row)
			// Its MaxWorkers, a number like every other row's.
			require.Equal(t, 100.0, row["claimers_per_process"], "%v", row)
		} else {
			require.Equal(t, 100.0, row["batch"], "%v", row)
			require.Positive(t, row["vs_fifo"], "%v", row)
			require.Equal(t, 2.0, row["claimers_per_process"], "%v", row)
		}
	}
	require.Equal(t, map[string]bool{"pool": true, "fifo": true, "river": true}, systems)
	require.Positive(t, bars(rep)["drain pool vs River tuned, batch 100, 1 process(es)"])
}

// A report's command quotes what a shell would split or expand.
func TestShellQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"fair,fifo":       "fair,fifo",
		"/opt/bin/river":  "/opt/bin/river",
		"1h0m0s":          "1h0m0s",
		"fair, fifo":      "'fair, fifo'",
		"":                "''",
		"it's":            `'it'\''s'`,
		"$HOME/river":     "'$HOME/river'",
		"/tmp/river bin*": "'/tmp/river bin*'",
	} {
		require.Equal(t, want, shellQuote(in), in)
	}
}
