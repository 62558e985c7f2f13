package benchkit_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// A tiny flood: the fair queue serves the small tenants long before FIFO
// does, shares the tokens far more evenly while everyone is backlogged, and
// reports both bars. One claimer taking one job at a time, whose claims
// follow the schedule: with several claimers on a loaded machine, a window
// right after the newcomers arrive can go to the import alone (BENCHMARKS.md,
// flood: the window bar is missed with eight claimers).
func TestBenchFlood(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{
		Runs: quiet(t), Backlog: 400, SmallTenants: 3, SmallJobs: 60, MaxCost: 100,
		Workers: 1, Batch: 1, Quantum: 100, WindowRounds: 4,
	})
	require.NoError(t, err)
	checkReport(t, r, "flood")

	got := rows(t, table(t, r, "flood"))
	require.Len(t, got, 4)
	by := map[[2]any]map[string]any{}
	for _, row := range got {
		by[[2]any{row["system"], row["backlog"].(float64) > 0}] = row
		for _, c := range []string{"small_wait_p50_ms", "small_wait_p99_ms"} {
			require.GreaterOrEqual(t, median(t, row, c), 0.0, "%s %v", c, row)
		}
		require.LessOrEqual(t, median(t, row, "small_wait_p50_ms"), median(t, row, "small_wait_p99_ms"), "%v", row)
		require.LessOrEqual(t, median(t, row, "position_p99"), median(t, row, "position_max"), "%v", row)
	}
	fair, fifo := by[[2]any{"fair", true}], by[[2]any{"fifo", true}]
	require.NotNil(t, fair)
	require.NotNil(t, fifo)
	// FIFO serves the small tenants only after the rest of the backlog.
	require.Greater(t, median(t, fifo, "position_p50"), 350.0)
	require.Less(t, median(t, fair, "position_p99"), median(t, fifo, "position_p50"))
	// While all are backlogged FIFO serves one tenant of four: Jain 1/4.
	require.InDelta(t, 0.25, median(t, fifo, "jain_median"), 0.05)
	require.Positive(t, median(t, fair, "windows"))
	require.Greater(t, median(t, fair, "jain_median"), median(t, fifo, "jain_median"))
	// Even the fair queue's worst window is fairer than FIFO's typical one.
	require.Greater(t, median(t, fair, "jain_min"), median(t, fifo, "jain_median"))

	require.Len(t, r.Bars, 2)
	require.Equal(t, 2.0, r.Bars[0].Target)
	require.True(t, r.Bars[0].AtMost)
	require.Positive(t, r.Bars[0].Value)
	require.Equal(t, 0.99, r.Bars[1].Target)
	// The bar is the lowest window of all repetitions, to the 4 decimals a
	// bar keeps (a median of one measured repetition is that window, unrounded).
	require.LessOrEqual(t, r.Bars[1].Value, math.Round(median(t, fair, "jain_min")*1e4)/1e4)
	require.Greater(t, r.Bars[1].Value, median(t, fifo, "jain_median"))
	// Beside the bar, what the same jobs in the exact order score by it.
	require.Len(t, r.Notes, 1)
	require.Regexp(t, `^flood: the same jobs in the exact fair order \(package drr\), windows cut as here, score a lowest window of `+
		`[01]\.\d+ when 1 claims of 1 return in any order, as concurrent claims do, and [01]\.\d+ from one claimer$`, r.Notes[0])
}

// With its claimers in worker processes, the fair queue behind the backlog
// is measured from the outcomes: every run of that row starts the
// processes, its windows are measured, and it is still far fairer than
// FIFO.
func TestBenchFloodAcrossProcesses(t *testing.T) {
	t.Parallel()
	env := setup(t)
	spawn := testSpawner(t)
	var started atomic.Int64
	counting := func(ctx context.Context, dbURL string, args []string) *exec.Cmd {
		started.Add(1)
		return spawn(ctx, dbURL, args)
	}
	// The processes stop at an empty queue, so the backlog must outlast the
	// small tenants' arrival: 400 jobs did not, once, under make test's load.
	cfg := benchkit.FloodConfig{
		Runs: quiet(t), Backlog: 1600, SmallTenants: 3, SmallJobs: 60, MaxCost: 100,
		Workers: 2, Batch: 5, Quantum: 100, WindowRounds: 4, Processes: 2, Spawn: counting,
	}
	r, err := benchkit.Flood(context.Background(), env, cfg)
	require.NoError(t, err)
	checkReport(t, r, "flood")
	require.EqualValues(t, 2*3, started.Load(), "two processes for the warm-up and each of two repetitions")

	by := map[[2]any]map[string]any{}
	for _, row := range rows(t, table(t, r, "flood")) {
		by[[2]any{row["system"], row["backlog"].(float64) > 0}] = row
	}
	fair, fifo := by[[2]any{"fair", true}], by[[2]any{"fifo", true}]
	require.Positive(t, median(t, fair, "windows"))
	require.Greater(t, median(t, fair, "jain_min"), median(t, fifo, "jain_median"))
	require.Less(t, median(t, fair, "position_p99"), median(t, fifo, "position_p50"))
	require.LessOrEqual(t, median(t, fair, "small_wait_p50_ms"), median(t, fair, "small_wait_p99_ms"))

	for _, bad := range []struct {
		procs int
		spawn benchkit.Spawner
		want  string
	}{{3, counting, "processes 3: must be in 1..workers (2)"}, {2, nil, "Spawn is required"}} {
		cfg.Processes, cfg.Spawn = bad.procs, bad.spawn
		_, err := benchkit.Flood(context.Background(), env, cfg)
		require.ErrorContains(t, err, bad.want)
	}
}

// A worker process stops at an empty queue, so a backlog its processes
// empty before the small tenants' jobs are in leaves those unclaimed (here
// two jobs, against transactions of 2,000 jobs each): the run says so, and
// what to change, rather than that it lost jobs.
func TestBenchFloodAcrossProcessesNeedsABacklogThatLasts(t *testing.T) {
	t.Parallel()
	env := setup(t)
	_, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{
		Runs: benchkit.Runs{Reps: 1, NoWarmUp: true}, Backlog: 2, SmallTenants: 2, SmallJobs: 2000,
		Workers: 2, Processes: 2, Spawn: testSpawner(t),
	})
	require.ErrorContains(t, err, "benchkit: flood: the worker processes found the queue empty and stopped with ")
	require.ErrorContains(t, err, " of the small tenants' 4000 jobs claimed: with --processes above 1 the backlog must last "+
		"until the small tenants have arrived; raise --backlog or lower --arrive-after")
}

// With ShowWindows, the progress lines name every window of the fair queue
// below the bar with each tenant's tokens: the lowest of them is the run's
// Jain min, and no window at or above the bar is shown.
func TestBenchFloodShowsItsLowWindows(t *testing.T) {
	t.Parallel()
	env := setup(t)
	var out strings.Builder
	runs := benchkit.Runs{Reps: 1, NoWarmUp: true, Progress: io.MultiWriter(&out, testLog{t}), Seed: 7}
	// Small tenants and a backlog that outlast the small tenants' arrival on
	// a loaded machine: their commits move their jobs in turn, one after
	// another, and with 150 jobs each the first ones drained before the
	// last showed (with a backlog of 1,000, the import did too), leaving no
	// window with every tenant backlogged to show.
	r, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{
		Runs: runs, Backlog: 4000, SmallTenants: 3, SmallJobs: 600, MaxCost: 100,
		Workers: 4, Batch: 5, Quantum: 100, WindowRounds: 2, ShowWindows: true,
	})
	require.NoError(t, err)
	minOf, windows := map[bool]float64{}, map[bool]float64{}
	for _, row := range rows(t, table(t, r, "flood")) {
		if row["system"] == "fair" {
			backlog := row["backlog"].(float64) > 0
			if windows[backlog] = median(t, row, "windows"); windows[backlog] > 0 {
				minOf[backlog] = median(t, row, "jain_min")
			}
		}
	}
	require.Positive(t, windows[true], "the run behind the backlog has windows to show")
	line := regexp.MustCompile(`^flood rep 1/1 fair backlog=(true|false): window (\d+) of (\d+) \(claims \d+\.\.\d+\): Jain ([0-9.]+); tokens (.*)$`)
	shown := map[bool][]float64{}
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.Contains(l, ": window ") {
			continue
		}
		m := line.FindStringSubmatch(l)
		require.NotNil(t, m, "%q", l)
		backlog := m[1] == "true"
		j, err := strconv.ParseFloat(m[4], 64)
		require.NoError(t, err)
		require.LessOrEqual(t, j, 0.99, "%q", l) // below the bar, printed to 4 decimals
		want := "small-00=\\d+ small-01=\\d+ small-02=\\d+"
		if backlog {
			want = "big=\\d+ " + want
		}
		require.Regexp(t, "^"+want+"$", m[5])
		shown[backlog] = append(shown[backlog], j)
	}
	for _, backlog := range []bool{true, false} {
		if windows[backlog] == 0 || minOf[backlog] >= 0.99 {
			require.Empty(t, shown[backlog], "backlog=%v", backlog)
			continue
		}
		require.NotEmpty(t, shown[backlog], "backlog=%v: Jain min %v", backlog, minOf[backlog])
		require.InDelta(t, minOf[backlog], slices.Min(shown[backlog]), 1e-4, "backlog=%v", backlog)
	}
	require.NotContains(t, out.String(), "fifo backlog=true: window", "FIFO's windows are not shown")
}

// A flood with no window in which every tenant is backlogged cannot measure
// Jain's index: its bar is not measured (not missed), the Jain cells are
// null in JSON, and the progress says there was no window (not "NaN").
func TestBenchFloodWithoutAWindowIsNotMeasured(t *testing.T) {
	t.Parallel()
	env := setup(t)
	var progress strings.Builder
	r, err := benchkit.Flood(context.Background(), env, benchkit.FloodConfig{
		Runs:    benchkit.Runs{Reps: 1, NoWarmUp: true, Progress: io.MultiWriter(&progress, testLog{t})},
		Backlog: 100, SmallTenants: 2, SmallJobs: 2, MaxCost: 10, Workers: 1, Batch: 5, Quantum: 100, WindowRounds: 100,
	})
	require.NoError(t, err)
	require.NotContains(t, progress.String(), "NaN")
	require.Contains(t, progress.String(), "fair backlog=true: small wait p99")
	require.Contains(t, progress.String(), "no window with every tenant backlogged")

	var jainBar benchkit.Bar
	for _, b := range r.Bars {
		if strings.HasPrefix(b.Name, "flood: Jain's index") {
			jainBar = b
		}
	}
	require.False(t, jainBar.Measured(), "%+v", jainBar)
	var text strings.Builder
	require.NoError(t, r.WriteText(&text))
	require.Contains(t, text.String(), "  -      flood: Jain's index in every window while all tenants are backlogged (the lowest): not measured (bar ≥ 0.99)")
	require.NotContains(t, text.String(), "MISSED flood: Jain")

	for _, row := range rows(t, table(t, r, "flood")) {
		require.Equal(t, 0.0, median(t, row, "windows"), "%v", row)
		for _, col := range []string{"jain_min", "jain_median"} {
			require.Nil(t, row[col].(map[string]any)["median"], "%s %v", col, row)
		}
	}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var back struct{ Bars []map[string]any }
	require.NoError(t, json.Unmarshal(b, &back))
	require.Len(t, back.Bars, 2)
	require.Nil(t, back.Bars[1]["value"])
	require.Nil(t, back.Bars[1]["met"])
}
