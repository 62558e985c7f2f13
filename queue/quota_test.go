package queue_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
	"github.com/batchq/batchq/throttle/throttletest"
)

// The Postgres store passes the same behaviour suite as the in-memory one.
func TestQuotaStoreSuite(t *testing.T) {
	t.Parallel()
	throttletest.RunStoreSuite(t, func(t *testing.T) throttle.Store {
		c, err := queue.NewClient(pgtest.New(t), queue.Config{})
		require.NoError(t, err)
		return c.QuotaStore()
	})
}

// Two throttles on separate connection pools, as two processes would be,
// pace from one row: what one admits, the other sees; a 429 seen by one
// pauses both; and the row spells the state out for operators.
func TestQuotaSharedAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	newThrottle := func() *throttle.Throttle {
		c, err := queue.NewClient(pgtest.Connect(t, url), queue.Config{})
		require.NoError(t, err)
		th, err := c.Throttle("openai/gpt-4o", throttle.Config{Reserve: 0.1})
		require.NoError(t, err)
		return th
	}
	a, b := newThrottle(), newThrottle()
	now := time.Now().Truncate(time.Microsecond)
	a.ObserveSnapshotAt(now, now, quotaheaders.Tokens, quotaheaders.Snapshot{Remaining: 1000, Limit: 1000, HasLimit: true, Reset: time.Minute, HasReset: true})

	require.True(t, a.CanStartAt(now.Add(time.Millisecond), 600, throttle.Batch).OK)
	d := b.CanStartAt(now.Add(2*time.Millisecond), 600, throttle.Batch)
	require.False(t, d.OK, "b must see what a admitted")
	require.True(t, b.CanStartAt(now.Add(2*time.Millisecond), 300, throttle.Batch).OK)

	b.TooManyRequestsAt(now.Add(3*time.Millisecond), 30*time.Second)
	d = a.CanStartAt(now.Add(4*time.Millisecond), 1, throttle.Interactive)
	require.False(t, d.OK)
	require.InDelta(t, 30*time.Second, d.Wait, float64(time.Second))

	pool := pgtest.Connect(t, url)
	var limit, remaining int64
	var paused time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT tokens_limit, tokens_remaining, paused_until FROM batchq.quota WHERE key = 'openai/gpt-4o'`).
		Scan(&limit, &remaining, &paused))
	require.Equal(t, int64(1000), limit)
	require.Equal(t, int64(1000), remaining, "what the provider said; admissions are in the state")
	require.WithinDuration(t, now.Add(30*time.Second), paused, time.Second)
}

// Workers whose clocks disagree pause and resume together: the shared row
// keeps its times on the database's clock, and each worker reads them on its
// own. Here one worker's clock runs 40 s fast and the other's is right; a
// 429 either one receives pauses the other for the Retry-After it gave, not
// 40 s less or more.
func TestQuotaPauseHoldsAcrossSkewedClocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	const skew = 40 * time.Second

	for _, tc := range []struct {
		name            string
		receiver, other time.Duration // their clocks' skew
	}{
		{"the right clock pauses the fast one", 0, skew},
		{"the fast clock pauses the right one", skew, 0},
	} {
		key := "skew/" + tc.name[4:9]
		got429, clockA := skewedWorker(t, url, key, tc.receiver)
		other, clockB := skewedWorker(t, url, key, tc.other)

		got429.TooManyRequestsAt(clockA(), 10*time.Second)
		d := other.CanStartAt(clockB(), 1, throttle.Interactive)
		require.False(t, d.OK, "%s: the other worker must be paused too", tc.name)
		require.InDelta(t, 10*time.Second, d.Wait, float64(time.Second), tc.name)

		// The row is on the database's clock, as operators read it.
		var left time.Duration
		require.NoError(t, pgtest.Connect(t, url).QueryRow(ctx,
			`SELECT extract(epoch FROM paused_until - clock_timestamp()) * 1e9 FROM batchq.quota WHERE key = $1`, key).
			Scan(&left))
		require.InDelta(t, 10*time.Second, left, float64(time.Second), tc.name)
	}
}

// A reset or a Retry-After given as a date is on the provider's clock: a
// worker whose clock runs fast measures it from the response's Date, so the
// rest of the fleet waits for it as long as the provider means.
func TestQuotaDatesAreMeasuredOnTheProvidersClock(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	provider := time.Now().UTC().Truncate(time.Second) // the provider's clock, right
	response := func(status int, kv ...string) *http.Response {
		h := http.Header{"Date": {provider.Format(http.TimeFormat)}}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h}
	}

	fast, fastNow := skewedWorker(t, url, "dates/reset", 40*time.Second)
	right, rightNow := skewedWorker(t, url, "dates/reset", 0)
	fast.ObserveResponseAt(fastNow(), fastNow(), response(http.StatusOK,
		"anthropic-ratelimit-tokens-limit", "10000", "anthropic-ratelimit-tokens-remaining", "0",
		"anthropic-ratelimit-tokens-reset", provider.Add(30*time.Second).Format(time.RFC3339)))
	d := right.CanStartAt(rightNow(), 100, throttle.Batch)
	require.False(t, d.OK, "the tokens are spent until the provider's reset")
	require.InDelta(t, 30*time.Second, d.Wait, float64(2*time.Second))

	fast, fastNow = skewedWorker(t, url, "dates/retry-after", 40*time.Second)
	right, rightNow = skewedWorker(t, url, "dates/retry-after", 0)
	fast.ObserveResponseAt(fastNow(), fastNow(), response(http.StatusTooManyRequests,
		"Retry-After", provider.Add(60*time.Second).Format(http.TimeFormat)))
	d = right.CanStartAt(rightNow(), 1, throttle.Interactive)
	require.False(t, d.OK)
	require.InDelta(t, 60*time.Second, d.Wait, float64(2*time.Second))
}

// skewedWorker is a worker process on a connection pool of its own whose
// clock runs skew ahead of the real one: its throttle for key, and its clock.
func skewedWorker(t *testing.T, url, key string, skew time.Duration) (*throttle.Throttle, func() time.Time) {
	t.Helper()
	c, err := queue.NewClient(pgtest.Connect(t, url), queue.Config{})
	require.NoError(t, err)
	now := func() time.Time { return time.Now().Add(skew) }
	queue.SetClock(c, now)
	th, err := c.Throttle(key, throttle.Config{})
	require.NoError(t, err)
	return th, now
}
