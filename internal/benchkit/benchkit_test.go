package benchkit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
	"github.com/batchq/batchq/internal/pgtest"
)

// workerEnv makes the test binary run benchkit.WorkerMain instead of the
// tests, so Drain's worker processes are this binary started again.
const workerEnv = "BENCHKIT_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		if err := benchkit.WorkerMain(context.Background(), os.Getenv("DATABASE_URL"), os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testSpawner(t *testing.T) benchkit.Spawner {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	spawn := benchkit.ExecSpawner(exe)
	return func(ctx context.Context, dbURL string, args []string) *exec.Cmd {
		cmd := spawn(ctx, dbURL, args)
		cmd.Env = append(cmd.Env, workerEnv+"=1")
		return cmd
	}
}

// setup returns an Env on a fresh migrated database.
func setup(t *testing.T) *benchkit.Env {
	t.Helper()
	env, err := benchkit.OpenEnv(context.Background(), pgtest.URL(t), 24)
	require.NoError(t, err)
	t.Cleanup(env.Close)
	return env
}

// quiet is the Runs of a tiny test run: two repetitions after a warm-up,
// progress to the test log.
func quiet(t *testing.T) benchkit.Runs {
	return benchkit.Runs{Reps: 2, Progress: testLog{t}, Seed: 7}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// table returns the report's table named name.
func table(t *testing.T, r *benchkit.Report, name string) *benchkit.Table {
	t.Helper()
	for _, tb := range r.Tables {
		if tb.Name == name {
			return tb
		}
	}
	t.Fatalf("no table %q in the %s report", name, r.Scenario)
	return nil
}

// rows returns the table's rows as maps by column, the way JSON shows them.
func rows(t *testing.T, tb *benchkit.Table) []map[string]any {
	t.Helper()
	b, err := json.Marshal(tb)
	require.NoError(t, err)
	var got struct {
		Rows []map[string]any `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Len(t, got.Rows, len(tb.Rows))
	return got.Rows
}

// median reads a sample cell of a row as JSON shows it.
func median(t *testing.T, row map[string]any, col string) float64 {
	t.Helper()
	s, ok := row[col].(map[string]any)
	require.True(t, ok, "column %s is not a sample: %v", col, row[col])
	v, ok := s["median"].(float64)
	require.True(t, ok, "column %s has no median: %v", col, s)
	return v
}

// checkReport checks what every report carries and that it prints.
func checkReport(t *testing.T, r *benchkit.Report, scenario string) string {
	t.Helper()
	require.Equal(t, scenario, r.Scenario)
	require.Positive(t, r.Machine.Cores)
	require.Contains(t, r.Machine.Postgres, "PostgreSQL")
	names := map[string]string{}
	for _, s := range r.Machine.PostgresSetting {
		names[s.Name] = s.Value
	}
	for _, want := range []string{"shared_buffers", "synchronous_commit", "max_connections"} {
		require.NotEmpty(t, names[want], want)
	}
	require.Equal(t, 2, r.Reps)
	require.True(t, r.WarmUp)
	var text strings.Builder
	require.NoError(t, r.WriteText(&text))
	out := text.String()
	require.Contains(t, out, "batchq bench "+scenario)
	require.Contains(t, out, "shared_buffers=")
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, scenario, back["scenario"])
	for _, tb := range r.Tables {
		requireOneTypePerColumn(t, tb)
	}
	t.Log("\n" + out)
	return out
}

// requireOneTypePerColumn checks that each column of the table holds one
// JSON type, null aside, so that a reader of --json can rely on it.
func requireOneTypePerColumn(t *testing.T, tb *benchkit.Table) {
	t.Helper()
	types := map[string]map[string]bool{}
	for _, row := range rows(t, tb) {
		for col, v := range row {
			if v == nil {
				continue
			}
			if types[col] == nil {
				types[col] = map[string]bool{}
			}
			types[col][fmt.Sprintf("%T", v)] = true
		}
	}
	for col, ts := range types {
		require.Len(t, ts, 1, "table %s, column %s holds %v", tb.Name, col, ts)
	}
}

// Settings out of range are refused before anything runs, naming the
// setting: a negative one, one above the queue's limits, a call larger than
// its measurement's jobs.
func TestBenchConfigErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	env := &benchkit.Env{}
	spawn := func(context.Context, string, []string) *exec.Cmd { return nil }
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"drain max cost", func() error {
			_, err := benchkit.Drain(context.Background(), env, benchkit.DrainConfig{MaxCost: 99_999_999_999, Spawn: spawn})
			return err
		}, "drain: max-cost 99999999999: must be in 1..1000000000"},
		{"drain workers", func() error {
			_, err := benchkit.Drain(context.Background(), env, benchkit.DrainConfig{Workers: 1000, Spawn: spawn})
			return err
		}, "drain: workers 1000: must be in 1..64"},
		{"drain tenants", func() error {
			_, err := benchkit.Drain(context.Background(), env, benchkit.DrainConfig{Tenants: -1, Spawn: spawn})
			return err
		}, "drain: tenants -1: must be at least 1"},
		{"flood workers", func() error {
			_, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{Workers: -1})
			return err
		}, "flood: workers -1: must be in 1..32"},
		{"flood quantum", func() error {
			_, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{Quantum: 99_999_999_999})
			return err
		}, "flood: quantum 99999999999: must be in 1..1000000000"},
		{"flood arrive-after", func() error {
			_, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{Backlog: 100, ArriveAfter: 100})
			return err
		}, "flood: arrive-after 100: must be below the backlog (100)"},
		{"enqueue bulk size", func() error {
			_, err := benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{BulkJobs: 1000, BulkSize: 100_000})
			return err
		}, "enqueue: bulk-size 100000: must be in 1..1000"},
		{"enqueue txn size", func() error {
			_, err := benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{TxnJobs: 200, TxnSize: 500})
			return err
		}, "enqueue: txn-size 500: must be in 1..200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.run()
			var ce *benchkit.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.want, ce.Msg)
		})
	}
}

// Check refuses what its scenario would refuse, as a ConfigError, before
// any database is at hand; a zero config takes the defaults.
func TestConfigCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, benchkit.FloodConfig{}.Check())
	require.NoError(t, benchkit.ScaleConfig{}.Check())
	require.NoError(t, benchkit.QuotaConfig{}.Check())
	require.NoError(t, benchkit.EnqueueConfig{}.Check())
	for name, err := range map[string]error{
		"drain without a spawner": benchkit.DrainConfig{}.Check(),
		"flood backlog 1":         benchkit.FloodConfig{Backlog: 1}.Check(),
		"scale batch too large":   benchkit.ScaleConfig{Batch: 100_001}.Check(),
		"quota reserve NaN":       benchkit.QuotaConfig{Reserve: math.NaN()}.Check(),
		"quota window negative":   benchkit.QuotaConfig{Window: -time.Second}.Check(),
		"quota window too short":  benchkit.QuotaConfig{Window: time.Nanosecond, Duration: time.Microsecond}.Check(),
		"quota too many jobs":     benchkit.QuotaConfig{Window: time.Millisecond, Duration: time.Hour}.Check(),
		"quota interval negative": benchkit.QuotaConfig{InteractiveEvery: -time.Second}.Check(),
		"enqueue system":          benchkit.EnqueueConfig{Systems: []string{"lifo"}}.Check(),
		"enqueuers above jobs":    benchkit.EnqueueConfig{Jobs: 4, Concurrency: []int{8}}.Check(),
	} {
		var ce *benchkit.ConfigError
		require.ErrorAs(t, err, &ce, name)
	}
}
