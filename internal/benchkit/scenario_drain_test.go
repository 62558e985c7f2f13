package benchkit_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// A tiny drain in real worker processes: every system and process count has
// a row with a positive rate, each row's ratio to FIFO is its rate over
// FIFO's, there is one bar per batchq system (not lean) and process count,
// and one note per process count giving the fair queue against lean and
// splitting that gap at FIFO.
func TestBenchDrain(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Drain(context.Background(), env, benchkit.DrainConfig{
		Runs: quiet(t), Jobs: 200, Tenants: 10, MaxCost: 100,
		Processes: []int{1, 2}, Batches: []int{10, 100}, Workers: 3,
		Spawn: testSpawner(t),
	})
	require.NoError(t, err)
	out := checkReport(t, r, "drain")
	require.Contains(t, out, "vs FIFO")

	got := rows(t, table(t, r, "drain"))
	require.Len(t, got, 2*2*4)
	systems := map[string]bool{}
	fifo := map[[2]float64]float64{}
	for _, row := range got {
		if row["system"] == benchkit.SystemFIFO {
			fifo[[2]float64{row["processes"].(float64), row["batch"].(float64)}] = median(t, row, "jobs_per_s")
		}
	}
	for _, row := range got {
		systems[row["system"].(string)] = true
		rate := median(t, row, "jobs_per_s")
		require.Positive(t, rate, "%v", row)
		require.Positive(t, median(t, row, "seconds"), "%v", row)
		vs := row["vs_fifo"].(float64)
		want := rate / fifo[[2]float64{row["processes"].(float64), row["batch"].(float64)}]
		require.InEpsilon(t, want, vs, 0.01, "%v", row)
	}
	// Claimers per process are a number in every row, 3 over 2 processes
	// their mean; the text table shows the range.
	for _, row := range got {
		want := map[float64]float64{1: 3, 2: 1.5}[row["processes"].(float64)]
		require.Equal(t, want, row["claimers_per_process"], "%v", row)
	}
	require.Regexp(t, `\nfair +2 +1-2 +10 `, out)

	require.Equal(t, map[string]bool{"fair": true, "pool": true, "fifo": true, "lean": true}, systems)

	// The bars compare batches of 100, as the bar is set.
	at100 := map[string]float64{}
	for _, row := range got {
		if row["batch"].(float64) == 100 {
			at100[fmt.Sprint(row["system"], "/", row["processes"])] = median(t, row, "jobs_per_s")
		}
	}
	require.Len(t, r.Bars, 2*2+2)
	for _, b := range r.Bars {
		var system string
		var procs int
		if _, err := fmt.Sscanf(b.Name, "drain pool vs the batch claimer, batch 100, %d process(es)", &procs); err == nil {
			want := at100[fmt.Sprint("pool/", procs)] / at100[fmt.Sprint("fair/", procs)]
			require.InEpsilon(t, want, b.Value, 0.01, b.Name)
			require.Equal(t, 0.95, b.Target)
			require.Equal(t, b.Value >= 0.95, b.Met, b.Name)
			continue
		}
		_, err := fmt.Sscanf(b.Name, "drain %s vs FIFO, at batch 100, %d process(es)", &system, &procs)
		require.NoError(t, err, b.Name)
		want := at100[fmt.Sprint(system, "/", procs)] / at100[fmt.Sprint("fifo/", procs)]
		require.InEpsilon(t, want, b.Value, 0.01, b.Name)
		require.Equal(t, 0.8, b.Target)
		require.Equal(t, b.Value >= 0.8, b.Met, b.Name)
	}
	require.Len(t, r.Notes, 2)
	for i, n := range r.Notes {
		require.Regexp(t, fmt.Sprintf(`^%d process\(es\), each at its best batch: fair vs lean FIFO \d+\.\d\d .* = fair vs FIFO \d+\.\d\d .* × FIFO vs lean \d+\.\d\d `, i+1), n)
	}
}

func TestBenchDrainNeedsASpawner(t *testing.T) {
	t.Parallel()
	_, err := benchkit.Drain(context.Background(), &benchkit.Env{}, benchkit.DrainConfig{})
	require.ErrorContains(t, err, "Spawn is required")
}
