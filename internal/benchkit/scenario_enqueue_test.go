package benchkit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// A tiny enqueue run: every system, mode and concurrency has a positive rate
// (the scenario itself checks every job arrived, over the tenants its mode
// names: 7 when calls share them, 3 × 7 when each of 3 enqueuers has its
// own, one a transaction in txn mode), FIFO's ratio is 1. Enqueuers apart
// are measured only when there are several, transactions of one tenant only
// with one enqueuer.
func TestBenchEnqueue(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{
		Runs: quiet(t), Jobs: 60, BulkJobs: 250, BulkSize: 100, TxnJobs: 50, TxnSize: 10, Concurrency: []int{1, 3}, Tenants: 7,
	})
	require.NoError(t, err)
	checkReport(t, r, "enqueue")
	got := rows(t, table(t, r, "enqueue"))
	require.Len(t, got, 2*(2+2+1+1))
	rate := map[string]float64{}
	for _, row := range got {
		switch row["mode"] {
		case "bulk-apart":
			require.Equal(t, 3.0, row["concurrency"], "%v", row)
		case "txn":
			require.Equal(t, 1.0, row["concurrency"], "%v", row)
		}
		require.Positive(t, median(t, row, "jobs_per_s"), "%v", row)
		if row["system"] == "fifo" {
			require.Equal(t, 1.0, row["vs_fifo"])
		} else {
			require.Positive(t, row["vs_fifo"])
		}
		if row["concurrency"] == 1.0 {
			rate[row["system"].(string)+" "+row["mode"].(string)] = median(t, row, "jobs_per_s")
		}
	}
	bars := map[string]benchkit.Bar{}
	for _, b := range r.Bars {
		bars[b.Name] = b
	}
	require.Len(t, bars, 4, "%v", r.Bars)
	// The bulk bar is the best fair bulk median, enqueuers sharing tenants
	// or apart, whatever it says of this machine.
	abs := bars["enqueue: bulk jobs/s in calls of 100, at the best concurrency (absolute)"]
	require.Equal(t, 50_000.0, abs.Target)
	best := 0.0
	for _, row := range got {
		if row["system"] == "fair" && (row["mode"] == "bulk" || row["mode"] == "bulk-apart") {
			best = max(best, median(t, row, "jobs_per_s"))
		}
	}
	require.InDelta(t, best, abs.Value, 1)
	require.Equal(t, best >= 50_000, abs.Met)
	// The bars against FIFO, with one enqueuer: rates for bulk and single
	// jobs, the time of a transaction for txn.
	for name, want := range map[string]float64{
		"enqueue: bulk in calls of 100, one enqueuer, fair vs fifo":              rate["fair bulk"] / rate["fifo bulk"],
		"enqueue: one job per transaction, one enqueuer, fair vs fifo":           rate["fair single"] / rate["fifo single"],
		"enqueue: a transaction of 10 jobs of one tenant, fair's time vs FIFO's": rate["fifo txn"] / rate["fair txn"],
	} {
		require.Contains(t, bars, name)
		require.InDelta(t, want, bars[name].Value, 0.001, name)
	}
	require.True(t, bars["enqueue: a transaction of 10 jobs of one tenant, fair's time vs FIFO's"].AtMost)

	// River needs its program.
	_, err = benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{Runs: quiet(t), Systems: []string{"fair", "river"}})
	var ce *benchkit.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, ce.Msg, "make bench-river")
}

// Without one enqueuer, the txn mode and the bars with one enqueuer are not
// measured: the title does not announce txn and a note says why they are
// missing. With no FIFO measured, vs_fifo is null, not "-".
func TestBenchEnqueueWithoutOneEnqueuer(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{
		Runs: quiet(t), Jobs: 20, BulkJobs: 40, BulkSize: 10, TxnJobs: 20, TxnSize: 10, Concurrency: []int{2}, Tenants: 3,
		Systems: []string{benchkit.SystemFair},
	})
	require.NoError(t, err)
	tb := table(t, r, "enqueue")
	require.NotContains(t, tb.Title, "transactions of")
	for _, row := range rows(t, tb) {
		require.NotEqual(t, "txn", row["mode"], "%v", row)
		require.Contains(t, row, "vs_fifo")
		require.Nil(t, row["vs_fifo"], "%v", row)
	}
	require.Len(t, r.Bars, 1, "only the absolute bar: %v", r.Bars)
	require.Len(t, r.Notes, 1)
	require.Contains(t, r.Notes[0], "concurrency has no 1: transactions of one tenant (txn) and the bars against the other systems")
	var text strings.Builder
	require.NoError(t, r.WriteText(&text))
	require.Contains(t, text.String(), "note: concurrency has no 1")
}

// A run with no bars has an empty list of them in JSON, not null.
func TestBenchReportWithoutBars(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Enqueue(context.Background(), env, benchkit.EnqueueConfig{
		Runs: benchkit.Runs{Reps: 1, NoWarmUp: true}, Jobs: 5, BulkJobs: 10, BulkSize: 5, TxnJobs: 5, TxnSize: 5,
		Concurrency: []int{1}, Tenants: 2, Systems: []string{benchkit.SystemFIFO},
	})
	require.NoError(t, err)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, []any{}, got["bars"])
}
