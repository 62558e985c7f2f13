package provider_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
)

// step is one request of a refill table and what its answer must say.
type step struct {
	at     time.Duration // after t0
	tokens int64
	status int

	reqRemaining, reqReset string
	tokRemaining, tokReset string
	retryAfter, retryMs    string // "" when absent
}

func runSteps(t *testing.T, cfg provider.Config, steps []step) {
	t.Helper()
	b := setup(t, cfg)
	for i, s := range steps {
		r := b.post(t, s.at, s.tokens)
		got := step{
			at: s.at, tokens: s.tokens, status: r.status,
			reqRemaining: r.header.Get("x-ratelimit-remaining-requests"),
			reqReset:     r.header.Get("x-ratelimit-reset-requests"),
			tokRemaining: r.header.Get("x-ratelimit-remaining-tokens"),
			tokReset:     r.header.Get("x-ratelimit-reset-tokens"),
			retryAfter:   r.header.Get("Retry-After"),
			retryMs:      r.header.Get("retry-after-ms"),
		}
		require.Equal(t, s, got, "step %d", i)
		require.Equal(t, "3", r.header.Get("x-ratelimit-limit-requests"), "step %d", i)
		require.Equal(t, "60", r.header.Get("x-ratelimit-limit-tokens"), "step %d", i)
	}
}

// 3 requests and 60 tokens a minute: a token bucket gives back a request
// every 20s and a token every second.
func TestTokenBucket(t *testing.T) {
	t.Parallel()
	const ok, tooMany = http.StatusOK, http.StatusTooManyRequests
	runSteps(t, provider.Config{RequestsPerWindow: 3, TokensPerWindow: 60, Refill: provider.TokenBucket}, []step{
		{0, 30, ok, "2", "20s", "30", "30s", "", ""},
		{0, 30, ok, "1", "40s", "0", "1m0s", "", ""},
		// Empty: a token comes back in a second.
		{0, 1, tooMany, "1", "40s", "0", "1m0s", "1", "1000"},
		{500 * time.Millisecond, 1, tooMany, "1", "39.5s", "0", "59.5s", "1", "500"},
		// Half a request's worth of refill counts toward the next reset.
		{time.Second, 1, ok, "0", "59s", "0", "1m0s", "", ""},
		// No request left: the next comes back at 20s.
		{time.Second, 0, tooMany, "0", "59s", "0", "1m0s", "19", "19000"},
		{20 * time.Second, 0, ok, "0", "1m0s", "19", "41s", "", ""},
		// Both short: the wait is the longer of the two (requests: 19.75s,
		// tokens: 0.75s), Retry-After rounded up to whole seconds.
		{20*time.Second + 250*time.Millisecond, 20, tooMany, "0", "59.75s", "19", "40.75s", "20", "19750"},
		// Long idle fills the bucket to its limit and no further.
		{3 * time.Minute, 61, tooMany, "3", "0s", "60", "0s", "", ""},
		{3 * time.Minute, 60, ok, "2", "20s", "0", "1m0s", "", ""},
		// A sub-millisecond wait is announced as a whole millisecond.
		{3*time.Minute + time.Second - 100*time.Microsecond, 1, tooMany, "2", "19.001s", "0", "59.001s", "1", "1"},
		{3*time.Minute + time.Second, 1, ok, "1", "39s", "0", "1m0s", "", ""},
	})
}

// 3 requests and 60 tokens a minute in fixed windows: nothing comes back
// until the minute turns.
func TestFixedWindow(t *testing.T) {
	t.Parallel()
	const ok, tooMany = http.StatusOK, http.StatusTooManyRequests
	runSteps(t, provider.Config{RequestsPerWindow: 3, TokensPerWindow: 60}, []step{
		{0, 30, ok, "2", "1m0s", "30", "1m0s", "", ""},
		{10 * time.Second, 30, ok, "1", "50s", "0", "50s", "", ""},
		{30 * time.Second, 1, tooMany, "1", "30s", "0", "30s", "30", "30000"},
		{59*time.Second + 999500*time.Microsecond, 0, ok, "0", "1ms", "0", "1ms", "", ""},
		{59*time.Second + 999600*time.Microsecond, 0, tooMany, "0", "1ms", "0", "1ms", "1", "1"},
		// A new window: everything is back.
		{time.Minute, 60, ok, "2", "1m0s", "0", "1m0s", "", ""},
		{time.Minute + 30*time.Second, 61, tooMany, "2", "30s", "0", "30s", "", ""},
		// Two windows on, still only one limit's worth.
		{3*time.Minute + 500*time.Millisecond, 1, ok, "2", "59.5s", "59", "59.5s", "", ""},
	})
}

func TestRefillString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "TokenBucket", provider.TokenBucket.String())
	require.Equal(t, "FixedWindow", provider.FixedWindow.String())
	require.Equal(t, "Refill(7)", provider.Refill(7).String())
}

// A bucket's refill is exact: many small refills add up to one large one,
// where rounding each would lose the fractions (7 a minute refills 0.004 in
// 37ms), and limit × window may not fit in an int64 (a billion a day).
func TestTokenBucketRefillIsExact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limit  int64
		window time.Duration
		steps  int
		step   time.Duration
		want   string // floor(limit × steps × step / window)
	}{
		{"SevenAMinute", 7, time.Minute, 1000, 37 * time.Millisecond, "4"},                            // 4.32
		{"HundredFiftyMillionAMinute", 150_000_000, time.Minute, 999, 37 * time.Microsecond, "92407"}, // 92407.5
		{"BillionADay", 1_000_000_000, 24 * time.Hour, 777, 3 * time.Second, "26979166"},              // 26979166.67
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, provider.Config{
				TokensPerWindow: tc.limit, Window: tc.window, RequestsPerWindow: 1_000_000, Refill: provider.TokenBucket,
			})
			require.Equal(t, http.StatusOK, b.post(t, 0, tc.limit).status)
			for i := 1; i < tc.steps; i++ {
				b.post(t, time.Duration(i)*tc.step, 0)
			}
			r := b.post(t, time.Duration(tc.steps)*tc.step, 0)
			require.Equal(t, tc.want, r.header.Get("x-ratelimit-remaining-tokens"))
		})
	}
}
