package benchkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// A short quota run on a small, fast window: both kinds of quota and both
// clients have a row; shares are fractions that add up; batchq's
// interactive calls got through; the four bars are there.
func TestBenchQuota(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs against a simulated provider for several seconds")
	}
	env := setup(t)
	runs := quiet(t)
	runs.Reps = 1
	r, err := benchkit.Quota(context.Background(), env, benchkit.QuotaConfig{
		Runs: runs, Duration: 2 * time.Second, Window: 250 * time.Millisecond, Tokens: 2000, Requests: 1000,
		Latency: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, Reserve: 0.2, Pools: 2, Workers: 4,
		MaxCost: 200, Tenants: 3, Interactive: 1, InteractiveEvery: 100 * time.Millisecond, InteractiveCost: 100,
	})
	require.NoError(t, err)
	require.Equal(t, "quota", r.Scenario)
	got := rows(t, table(t, r, "quota"))
	require.Len(t, got, 4)
	naiveFixed := 0
	for _, row := range got {
		u := median(t, row, "utilization")
		require.Greater(t, u, 0.0, "%v", row)
		require.LessOrEqual(t, u, 1.5, "%v", row)
		require.InDelta(t, u, median(t, row, "batch_share")+median(t, row, "interactive_share"), 0.01, "%v", row)
		require.InDelta(t, median(t, row, "batch_share")/0.8, median(t, row, "batch_of_limit_less_reserve"), 0.01, "%v", row)
		if row["quota"] == "fixed window" && row["client"] == "naive" {
			// Eight workers sending at will overrun 2,000 tokens a quarter second,
			// even on a loaded machine under the race detector.
			require.Positive(t, median(t, row, "http_429"), "%v", row)
			naiveFixed++
		}
		require.Positive(t, median(t, row, "batch_calls"), "%v", row)
		if row["client"] == "batchq" {
			require.Positive(t, median(t, row, "interactive_calls"), "%v", row)
		}
	}
	require.Equal(t, 1, naiveFixed, "one naive client against the fixed window")
	require.Len(t, r.Bars, 4)
	require.NotEmpty(t, r.Notes)
}
