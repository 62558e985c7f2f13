package decimal

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var decimalCases = []struct {
	in   string
	want float64
	ok   bool
}{
	{"2", 2, true},
	{"2.5", 2.5, true},
	{".5", 0.5, true},
	{"5.", 5, true},
	{"+3", 3, true},
	{"-1", -1, true}, // a number; the queue refuses it as out of range
	{"1e-3", 0.001, true},
	{"1.5E1", 15, true},
	{"007", 7, true},
	{"", 0, false},
	{".", 0, false},
	{"e3", 0, false},
	{"1e", 0, false},
	{"1e+", 0, false},
	{"0x1p1", 0, false},
	{"0X10", 0, false},
	{"1_000", 0, false},
	{"Inf", 0, false},
	{"-inf", 0, false},
	{"infinity", 0, false},
	{"NaN", 0, false},
	{"1e400", 0, false},
	{"1e-400", 0, false}, // not 0: so small a float64 reads it as 0
	{"-1e-400", 0, false},
	{"0e-400", 0, true},
	{"0.000e5", 0, true},
	{"4.9e-324", 5e-324, true}, // the smallest a float64 holds

	{" 2", 0, false},
	{"2 ", 0, false},
	{"٣", 0, false}, // a digit, but not an ASCII one
	{"1,5", 0, false},
}

func TestParseFloat(t *testing.T) {
	for _, tc := range decimalCases {
		got, ok := ParseFloat(tc.in)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		if tc.ok {
			require.Equal(t, tc.want, got, "%q", tc.in)
		}
	}
}

// What ParseFloat accepts, strconv.ParseFloat reads as the same finite
// number, and it is written with ASCII digits, a sign, a point and an e
// only.
func FuzzParseFloat(f *testing.F) {
	for _, tc := range decimalCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseFloat(s)
		if !ok {
			return
		}
		want, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "%q", s)
		require.Equal(t, want, got, "%q", s)
		require.False(t, math.IsInf(got, 0) || math.IsNaN(got), "%q", s)
		require.Equal(t, -1, strings.IndexFunc(s, func(r rune) bool {
			return !strings.ContainsRune("0123456789+-.eE", r)
		}), "%q", s)
	})
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{2, "2"},
		{1000001, "1000001"},
		{0.0015, "0.0015"},
		{-0.5, "-0.5"},
		{0.000001, "0.000001"},
		{1e-7, "1e-7"},
		{1e-300, "1e-300"},
		{2.5e21, "2.5e21"},
		{-1e22, "-1e22"},
		{math.MaxFloat64, "1.7976931348623157e308"},
	} {
		require.Equal(t, c.want, Format(c.in), "Format(%v)", c.in)
		back, ok := ParseFloat(Format(c.in))
		require.True(t, ok, "Format(%v) = %q reads back", c.in, Format(c.in))
		require.Equal(t, c.in, back, "Format(%v) = %q reads back as itself", c.in, Format(c.in))
	}
}
