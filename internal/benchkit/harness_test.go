package benchkit_test

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// quickRuns is one repetition, no warm-up: the smallest run that still
// reaches the code under test.
func quickRuns(t *testing.T) benchkit.Runs {
	return benchkit.Runs{Reps: 1, NoWarmUp: true, Progress: testLog{t}, Seed: 7}
}

func findRow(t *testing.T, r *benchkit.Report, tbl string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	for _, row := range rows(t, table(t, r, tbl)) {
		if match(row) {
			return row
		}
	}
	t.Fatalf("no matching row in table %s", tbl)
	return nil
}

// The quota bar is what batch work used of what it may use, the limit less
// the reserve; interactive calls are not counted, or they could carry it.
// Here the batch fleet is almost idle (one worker, jobs of 1 token) beside
// busy interactive callers and a 90% reserve: the bar is missed.
func TestQuotaBarCountsBatchWorkOnly(t *testing.T) {
	t.Parallel()
	env := setup(t)
	const reserve = 0.9
	r, err := benchkit.Quota(context.Background(), env, benchkit.QuotaConfig{
		Runs: quickRuns(t), Duration: 1500 * time.Millisecond, Window: 250 * time.Millisecond,
		Tokens: 1000, Requests: 1000, Latency: 20 * time.Millisecond, Jitter: time.Millisecond,
		Reserve: reserve, Pools: 1, Workers: 1, MaxCost: 1, Tenants: 1,
		Interactive: 2, InteractiveEvery: 50 * time.Millisecond, InteractiveCost: 50,
	})
	require.NoError(t, err)
	row := findRow(t, r, "quota", func(m map[string]any) bool {
		return m["quota"] == "token bucket" && m["client"] == benchkit.ClientBatchq
	})
	batchOfAllowance := median(t, row, "batch_share") / (1 - reserve)
	var bar benchkit.Bar
	for _, b := range r.Bars {
		if b.Name == "quota (token bucket): batch utilization / (limit less reserve)" {
			bar = b
		}
	}
	t.Logf("bar %q = %.3f met=%v; batch share %.4f = %.3f of the limit less reserve; interactive share %.3f",
		bar.Name, bar.Value, bar.Met, median(t, row, "batch_share"), batchOfAllowance, median(t, row, "interactive_share"))
	require.Equal(t, batchOfAllowance >= 0.95, bar.Met,
		"bar verdict met=%v (value %.3f), but batch work used %.3f of the limit less the reserve",
		bar.Met, bar.Value, batchOfAllowance)
	require.InDelta(t, batchOfAllowance, bar.Value, 0.01, "the bar's value is not batch work's share of the limit less reserve")
}

// A scale bar over one backlog size has nothing to compare: not measured,
// so not met.
func TestScaleBarWithOneSizeIsNotMeasured(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Scale(context.Background(), env, benchkit.ScaleConfig{
		Runs: quickRuns(t), Rows: []int{200}, RowTenants: 20,
		Tenants: []int{2}, TenantRows: 20, Claims: 3, Batch: 10, NoFIFO: true,
	})
	require.NoError(t, err)
	require.Len(t, r.Bars, 1)
	t.Logf("bar: %+v", r.Bars[0])
	require.False(t, r.Bars[0].Met, "a bar on one backlog size (%s) measured no growth at all, yet says met at %.2f",
		r.Bars[0].Name, r.Bars[0].Value)
}

// vs_smallest is against the smallest size, in whatever order the sizes
// were given.
func TestScaleVsSmallestIsAgainstTheSmallest(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Scale(context.Background(), env, benchkit.ScaleConfig{
		Runs: quickRuns(t), Rows: []int{400, 200}, RowTenants: 20,
		Tenants: []int{20, 2}, TenantRows: 40, Claims: 3, Batch: 10, NoFIFO: true,
	})
	require.NoError(t, err)
	smallest := findRow(t, r, "scale_rows", func(m map[string]any) bool { return m["queued_rows"] == 200.0 })
	fewest := findRow(t, r, "scale_tenants", func(m map[string]any) bool { return m["active_tenants"] == 2.0 })
	t.Logf("rows 200: vs_smallest %v; tenants 2: vs_smallest %v", smallest["vs_smallest"], fewest["vs_smallest"])
	require.Equal(t, 1.0, smallest["vs_smallest"], "the smallest backlog is not 1.00 against itself")
	require.Equal(t, 1.0, fewest["vs_smallest"], "the fewest tenants are not 1.00 against themselves")
}

// --workers counts the claimers in all, split over the processes, and every
// process claims: fewer workers than processes is a configuration error, not
// a run with more claimers than its title says.
func TestDrainRefusesFewerWorkersThanProcesses(t *testing.T) {
	t.Parallel()
	env := setup(t)
	spawn := testSpawner(t)
	var mu sync.Mutex
	claimers := 0
	counting := func(ctx context.Context, dbURL string, args []string) *exec.Cmd {
		if i := slices.Index(args, "-claimers"); i >= 0 {
			n, _ := strconv.Atoi(args[i+1])
			mu.Lock()
			claimers += n
			mu.Unlock()
		}
		return spawn(ctx, dbURL, args)
	}
	_, err := benchkit.Drain(context.Background(), env, benchkit.DrainConfig{
		Runs: quickRuns(t), Jobs: 30, Tenants: 3, MaxCost: 10,
		Processes: []int{3}, Batches: []int{10}, Workers: 1,
		Systems: []string{benchkit.SystemFIFO}, Spawn: counting,
	})
	var cfgErr *benchkit.ConfigError
	require.ErrorAs(t, err, &cfgErr)
	require.ErrorContains(t, err, "processes 3: must be at most workers (1 claimers in all)")
	require.Zero(t, claimers, "nothing ran")
}
