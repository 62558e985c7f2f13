package benchkit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
)

// A tiny scale run: a row per backlog size for both systems and per tenant
// count, positive claim costs, ratios to the smallest size, and the bar.
func TestBenchScale(t *testing.T) {
	t.Parallel()
	env := setup(t)
	r, err := benchkit.Scale(context.Background(), env, benchkit.ScaleConfig{
		Runs: quiet(t), Rows: []int{200, 1000}, RowTenants: 20,
		Tenants: []int{2, 300}, TenantRows: 200, Claims: 5, Batch: 20,
	})
	require.NoError(t, err)
	out := checkReport(t, r, "scale")

	byRows := rows(t, table(t, r, "scale_rows"))
	require.Len(t, byRows, 4)
	for i, row := range byRows {
		require.Equal(t, []string{"fair", "fair", "fifo", "fifo"}[i], row["system"])
		require.Equal(t, []float64{200, 1000, 200, 1000}[i], row["queued_rows"])
		require.Positive(t, median(t, row, "claim_ms"))
		require.LessOrEqual(t, median(t, row, "claim_ms"), median(t, row, "p90_ms"))
	}
	require.Equal(t, 1.0, byRows[0]["vs_smallest"])
	// FIFO has no tenants to count: null in JSON, where the column is
	// numbers, and "-" in the text.
	require.Equal(t, []any{20.0, 20.0, nil, nil},
		[]any{byRows[0]["tenants"], byRows[1]["tenants"], byRows[2]["tenants"], byRows[3]["tenants"]})
	require.Regexp(t, `\nfifo +200 +- `, out)
	byTenants := rows(t, table(t, r, "scale_tenants"))
	require.Len(t, byTenants, 2)
	require.Equal(t, 300.0, byTenants[1]["active_tenants"])
	require.Equal(t, 300.0, byTenants[1]["queued_rows"], "at least one row per tenant")

	require.Len(t, r.Bars, 1)
	require.Equal(t, 1.5, r.Bars[0].Target)
	require.InEpsilon(t, median(t, byRows[1], "claim_ms")/median(t, byRows[0], "claim_ms"), r.Bars[0].Value, 0.01)
}
