package sharechart_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/sharechart"
)

// One line per distinct share, highest first, naming its tenants in the
// order given, shortened past two; tenants without a share get none.
func TestFairShares(t *testing.T) {
	got := sharechart.FairShares([]sharechart.TenantShare{
		{"c", 0.1}, {"a", 0.5}, {"d", 0.1}, {"e", 0.1}, {"f", 0.1}, {"b", 0.1}, {"idle", 0},
	})
	require.Len(t, got, 2)
	require.Equal(t, sharechart.Ref{Label: "fair share of a: 50%", Y: 50}, got[0])
	require.Equal(t, "fair share of c, d and 3 more: 10%", got[1].Label)
	require.InDelta(t, 10, got[1].Y, 1e-9)

	two := sharechart.FairShares([]sharechart.TenantShare{{"x", 0.25}, {"y", 0.25}})
	require.Equal(t, []sharechart.Ref{{Label: "fair share of x and y: 25%", Y: 25}}, two)
	require.Empty(t, sharechart.FairShares(nil))
}
