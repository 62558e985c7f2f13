package benchkit

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bar with nothing to compare is neither met nor missed: the text says
// not measured, and JSON carries null for its value and verdict. A measured
// bar keeps its verdict.
func TestBarNotMeasured(t *testing.T) {
	t.Parallel()
	for _, v := range []float64{math.NaN(), math.Inf(1)} {
		bar := newBar("flood: Jain", v, 0.99, false, "fair: lowest of 0 windows")
		require.False(t, bar.Measured())
		require.False(t, bar.Met)

		var text strings.Builder
		require.NoError(t, (&Report{Bars: []Bar{bar, newBar("drain", 0.5, 0.8, false, "d")}}).WriteText(&text))
		require.Contains(t, text.String(), "  -      flood: Jain: not measured (bar ≥ 0.99); fair: lowest of 0 windows\n")
		require.Contains(t, text.String(), "  MISSED drain: 0.500 (bar ≥ 0.80); d\n")

		b, err := json.Marshal(bar)
		require.NoError(t, err)
		require.JSONEq(t, `{"name":"flood: Jain","value":null,"target":0.99,"at_most":false,"met":null,"detail":"fair: lowest of 0 windows"}`, string(b))
	}
	b, err := json.Marshal(newBar("drain", 0.5, 0.8, false, "d"))
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"drain","value":0.5,"target":0.8,"at_most":false,"met":false,"detail":"d"}`, string(b))
}

// A sample with no values (a "-" cell) is null in JSON, not 0; an undefined
// ratio is a null cell, not the string "-".
func TestNothingMeasuredIsNull(t *testing.T) {
	t.Parallel()
	tb := NewTable("t", "t", "jain_min", "vs_fifo")
	tb.Add(NewSample(4, math.NaN()), ratioCell(1, 0))
	b, err := json.Marshal(tb)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"t","title":"t","columns":["jain_min","vs_fifo"],
		"rows":[{"jain_min":{"median":null,"min":null,"max":null,"spread":null,"values":[]},"vs_fifo":null}]}`, string(b))
	require.Equal(t, []any{"-", "-"}, []any{textCell(tb.Rows[0][0]), textCell(tb.Rows[0][1])})
}

// A Labeled cell is its number in JSON and its label in text, so a column
// holds one JSON type whatever the text says: River's claimers per process
// are 100, shown as its MaxWorkers, and claimers that do not split evenly
// are their mean, shown as the range.
func TestLabeledCellIsANumberInJSON(t *testing.T) {
	t.Parallel()
	tb := NewTable("t", "t", "claimers_per_process")
	tb.Add(claimersLabel(8, 2))
	tb.Add(claimersLabel(3, 2))
	tb.Add(Labeled{RiverMaxWorkers, "100 (MaxWorkers)"})
	b, err := json.Marshal(tb)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"t","title":"t","columns":["claimers_per_process"],
		"rows":[{"claimers_per_process":4},{"claimers_per_process":1.5},{"claimers_per_process":100}]}`, string(b))
	require.Equal(t, []string{"4", "1-2", "100 (MaxWorkers)"},
		[]string{textCell(tb.Rows[0][0]), textCell(tb.Rows[1][0]), textCell(tb.Rows[2][0])})
}
