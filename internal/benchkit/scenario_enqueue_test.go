package benchkit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// A tiny enqueue run: every system, mode and concurrency has a positive rate
// (the scenario itself checks every job arrived, over the tenants its mode
// names: 7 when calls share them, 3 × 7 when each of 3 enqueuers has its
// own), FIFO's ratio is 1. Enqueuers apart are measured only when there are
// several.
func TestBenchEnqueue(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{
		Runs: quiet(t), Jobs: 60, BulkJobs: 250, BulkSize: 100, Concurrency: []int{1, 3}, Tenants: 7,
	})
	require.NoError(t, err)
	checkReport(t, r, "enqueue")
	got := rows(t, table(t, r, "enqueue"))
	require.Len(t, got, 2*(2+2+1))
	for _, row := range got {
		if row["mode"] == "bulk-apart" {
			require.Equal(t, 3.0, row["concurrency"], "%v", row)
		}
		require.Positive(t, median(t, row, "jobs_per_s"), "%v", row)
		if row["system"] == "fifo" {
			require.Equal(t, 1.0, row["vs_fifo"])
		} else {
			require.Positive(t, row["vs_fifo"])
		}
	}
	// The bulk bar is the best fair bulk median, enqueuers sharing tenants
	// or apart, whatever it says of this machine.
	require.Len(t, r.Bars, 1)
	require.Equal(t, 50_000.0, r.Bars[0].Target)
	best := 0.0
	for _, row := range got {
		if row["system"] == "fair" && row["mode"] != "single" {
			best = max(best, median(t, row, "jobs_per_s"))
		}
	}
	require.InDelta(t, best, r.Bars[0].Value, 1)
	require.Equal(t, best >= 50_000, r.Bars[0].Met)
}
