package quotaheaders_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	qh "github.com/batchq/batchq/quotaheaders"
)

// durationCases are exact: the want column is what the decimal says, to the
// nanosecond, with a fraction of a nanosecond rounded up.
var durationCases = []struct {
	in   string
	want time.Duration
	ok   bool
}{
	{"0", 0, true},
	{"0s", 0, true},
	{"1s", time.Second, true},
	{"6m0s", 6 * time.Minute, true},
	{"2m59.56s", 179560 * time.Millisecond, true},
	{"1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
	{"1h15m36.48s", 4536480 * time.Millisecond, true},
	{"5.289s", 5289 * time.Millisecond, true},
	{"7.66s", 7660 * time.Millisecond, true},
	{"500µs", 500 * time.Microsecond, true}, // U+00B5
	{"500μs", 500 * time.Microsecond, true}, // U+03BC
	{"500us", 500 * time.Microsecond, true},
	{"250ms", 250 * time.Millisecond, true},
	{"12ns", 12, true},
	{"1.5ns", 2, true},
	{"1.0000000001s", time.Second + 1, true},
	{".1ns.1ns", 2, true}, // each number rounds up on its own
	{"0.1h", 6 * time.Minute, true},
	{"0.0000000000001h", 1, true}, // 0.36 ns
	{".5s", 500 * time.Millisecond, true},
	{"5.s", 5 * time.Second, true},
	{"1s1s", 2 * time.Second, true},
	{"1m61s", 121 * time.Second, true},
	{"1.99999999999999999999s", 2 * time.Second, true},
	{"0.33333333333333333333333333333333333s", 333333334, true},
	{"9223372036854775807ns", math.MaxInt64, true},
	{"2562047h47m16.854775807s", math.MaxInt64, true},
	{"9223372036854775808ns", 0, false},
	{"2562047h47m16.854775808s", 0, false},
	{"2562048h", 0, false},
	{"9223372036854775807.1ns", 0, false}, // rounds up past the maximum
	{"99999999999999999999h", 0, false},
	{"", 0, false},
	{"1", 0, false},
	{"00", 0, false},
	{"s", 0, false},
	{".s", 0, false},
	{"1.", 0, false},
	{"1x", 0, false},
	{"1S", 0, false},
	{"1 s", 0, false},
	{" 1s", 0, false},
	{"1.2.3s", 0, false},
	{"-1s", 0, false},
	{"+1s", 0, false},
	{"-0s", 0, false},
	{"1e3s", 0, false},
	{"Infinity", 0, false},
}

func TestParseDuration(t *testing.T) {
	t.Parallel()

	for _, tc := range durationCases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, ok := qh.ParseDuration(tc.in)
			require.Equal(t, tc.ok, ok, "got %v", got)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseDurationIsExactWhereFloatsAreNot(t *testing.T) {
	t.Parallel()

	// Every hundredth of a second up to three minutes: "2m59.56s" must be
	// 179,560 ms, never 179,559 or 179,561.
	for cs := int64(0); cs < 18000; cs++ {
		s := time.Duration(cs) * 10 * time.Millisecond
		got, ok := qh.ParseDuration(s.String())
		require.True(t, ok, s.String())
		require.Equal(t, s, got, s.String())
	}
}
