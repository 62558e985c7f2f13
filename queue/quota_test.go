package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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
	// The two processes' clocks agree; the test moves them on.
	now := time.Now().Truncate(time.Microsecond)
	clock := throttletest.NewClock(now)
	newThrottle := func() *throttle.Throttle {
		c, err := queue.NewClient(pgtest.Connect(t, url), queue.Config{})
		require.NoError(t, err)
		th, err := c.Throttle("openai/gpt-4o", throttle.Config{Reserve: 0.1, Now: clock.Now})
		require.NoError(t, err)
		return th
	}
	a, b := newThrottle(), newThrottle()
	require.NoError(t, a.ObserveSnapshot(ctx, now, now, quotaheaders.Tokens,
		quotaheaders.Snapshot{Remaining: 1000, Limit: 1000, HasLimit: true, Reset: time.Minute, HasReset: true}))

	clock.Advance(time.Millisecond)
	d, err := a.CanStart(ctx, 600, throttle.Batch)
	require.NoError(t, err)
	require.True(t, d.OK)
	clock.Advance(time.Millisecond)
	d, err = b.CanStart(ctx, 600, throttle.Batch)
	require.NoError(t, err)
	require.False(t, d.OK, "b must see what a admitted")
	d, err = b.CanStart(ctx, 300, throttle.Batch)
	require.NoError(t, err)
	require.True(t, d.OK)

	clock.Advance(time.Millisecond)
	require.NoError(t, b.TooManyRequests(ctx, clock.Now(), clock.Now(), 30*time.Second))
	clock.Advance(time.Millisecond)
	d, err = a.CanStart(ctx, 1, throttle.Interactive)
	require.NoError(t, err)
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
		other, _ := skewedWorker(t, url, key, tc.other)

		received := clockA()
		require.NoError(t, got429.TooManyRequests(ctx, received, received, 10*time.Second))
		d, err := other.CanStart(ctx, 1, throttle.Interactive)
		require.NoError(t, err)
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

	ctx := context.Background()
	fast, fastNow := skewedWorker(t, url, "dates/reset", 40*time.Second)
	right, _ := skewedWorker(t, url, "dates/reset", 0)
	at := fastNow()
	require.NoError(t, fast.ObserveResponse(ctx, at, at, response(http.StatusOK,
		"anthropic-ratelimit-tokens-limit", "10000", "anthropic-ratelimit-tokens-remaining", "0",
		"anthropic-ratelimit-tokens-reset", provider.Add(30*time.Second).Format(time.RFC3339))))
	d, err := right.CanStart(ctx, 100, throttle.Batch)
	require.NoError(t, err)
	require.False(t, d.OK, "the tokens are spent until the provider's reset")
	require.InDelta(t, 30*time.Second, d.Wait, float64(2*time.Second))

	fast, fastNow = skewedWorker(t, url, "dates/retry-after", 40*time.Second)
	right, _ = skewedWorker(t, url, "dates/retry-after", 0)
	at = fastNow()
	require.NoError(t, fast.ObserveResponse(ctx, at, at, response(http.StatusTooManyRequests,
		"Retry-After", provider.Add(60*time.Second).Format(http.TimeFormat))))
	d, err = right.CanStart(ctx, 1, throttle.Interactive)
	require.NoError(t, err)
	require.False(t, d.OK)
	require.InDelta(t, 60*time.Second, d.Wait, float64(2*time.Second))
}

// skewedWorker is a worker process on a connection pool of its own whose
// clock runs skew ahead of the real one: its throttle for key, and its clock,
// which the throttle and the client's quota store both read.
func skewedWorker(t *testing.T, url, key string, skew time.Duration) (*throttle.Throttle, func() time.Time) {
	t.Helper()
	c, err := queue.NewClient(pgtest.Connect(t, url), queue.Config{})
	require.NoError(t, err)
	now := func() time.Time { return time.Now().Add(skew) }
	queue.SetClock(c, now)
	th, err := c.Throttle(key, throttle.Config{Now: now})
	require.NoError(t, err)
	return th, now
}

// The quota row is written only through batchq.save_quota, which refuses a
// state the throttle could not read and a pause longer than the throttle's
// limit, and writes nothing then.
func TestSaveQuotaRefusesWhatTheThrottleCannotUse(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	save := func(state string) error {
		_, err := b.pool.Exec(b.ctx, `SELECT batchq.save_quota('k', NULL, $1::jsonb)`, state)
		return err
	}
	for _, tc := range []struct{ state, code, says string }{
		{`"garbage"`, "BQ300", `batchq: save quota "k": state: must be a JSON object (got string)`},
		{`null`, "BQ300", `batchq: save quota "k": state: must be a JSON object (got null)`},
		{`[]`, "BQ300", `batchq: save quota "k": state: must be a JSON object (got array)`},
		{`{"requests": 5}`, "BQ300", "state.requests: must be a JSON object (got number)"},
		{`{"tokens": {"remaining": "many"}}`, "BQ300", `state.tokens.remaining: must be a whole number`},
		{`{"paused_until": "soon"}`, "BQ300", `state.paused_until: must be an RFC 3339 time (got "soon")`},
		{`{"paused_until": "9999-01-01T00:00:00Z"}`, "BQ301", "state.paused_until: must be at most 24:05:00 from now"},
		{`{"backoff": 1e30}`, "BQ300", "state.backoff: must be a whole number"},
		{`{"admitted": [{"at": "2026-01-01T00:00:00Z", "calls": 1, "tokens": 1, "extra": 1}]}`, "BQ300", `"extra" is not a field of it`},
		{`{"mood": "sunny"}`, "BQ300", `"mood" is not a field of it`},
		{`{"requests": {"observed": false, "reset_at": "garbage"}}`, "BQ300", `state.requests.reset_at: must be an RFC 3339 time`},
		{`{"tokens": {"observed": false, "received_at": 12}}`, "BQ300", `state.tokens.received_at: must be an RFC 3339 time`},
	} {
		err := save(tc.state)
		require.ErrorContains(t, err, tc.says, tc.state)
		require.ErrorContains(t, err, "SQLSTATE "+tc.code, tc.state)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, tc.state)
		require.Equal(t, "state", pe.ColumnName, "the argument it is about: %s", tc.state)
	}
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.quota`))

	// What the throttle writes is taken, and spelled out in the columns.
	now := time.Now().UTC().Truncate(time.Microsecond)
	st := throttle.State{Tokens: throttle.Quota{Observed: true, Limit: 100, HasLimit: true, Remaining: 7, SentAt: now, ReceivedAt: now},
		PausedUntil: now.Add(time.Hour)}
	raw, err := json.Marshal(&st)
	require.NoError(t, err)
	require.NoError(t, save(string(raw)))
	require.Equal(t, int64(7), b.scalar(t, `SELECT tokens_remaining FROM batchq.quota WHERE key = 'k' AND tokens_limit = 100
		AND requests_limit IS NULL AND paused_until = $1 AND observed_at = $2`, now.Add(time.Hour), now))
}

// A Retry-After longer than the throttle's MaxRetryAfter pauses the fleet
// for MaxRetryAfter: a provider that says "come back tomorrow" is asked
// again in an hour, and the shared row takes it.
func TestRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	th, err := b.client.Throttle("k", throttle.Config{})
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, th.TooManyRequests(b.ctx, now, now, 24*time.Hour))
	pause, err := th.Pause(b.ctx)
	require.NoError(t, err)
	require.InDelta(t, time.Hour, pause, float64(time.Second))
	_, err = b.client.Throttle("k", throttle.Config{MaxRetryAfter: 25 * time.Hour})
	require.ErrorContains(t, err, "must be at most 24h0m0s")
}

// A state that does not read (written around save_quota, by hand or by a
// tool) does not stop the fleet: the next decision logs it, resets the key
// and carries on, as with a key seen for the first time.
func TestUnreadableQuotaStateIsResetAndLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	var logs bytes.Buffer
	c, err := queue.NewClient(pool, queue.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO batchq.quota (key, state) VALUES ('k', '{"requests": "broken"}')`)
	require.NoError(t, err)
	th, err := c.Throttle("k", throttle.Config{})
	require.NoError(t, err)
	d, err := th.CanStart(ctx, 10, throttle.Batch)
	require.NoError(t, err)
	require.True(t, d.OK, "paced as a fresh key")
	require.Contains(t, logs.String(), "a quota key's shared state cannot be read; resetting it")
	require.Contains(t, logs.String(), "key=k")
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state::text FROM batchq.quota WHERE key = 'k'`).Scan(&state))
	var st throttle.State
	require.NoError(t, json.Unmarshal([]byte(state), &st), "the row reads again: %s", state)
}

// A 429 asking for a day pauses the fleet for MaxRetryAfter, and the pool
// logs the pause with its key, reason and end; the fleet's shared row
// holds the capped pause.
func TestPoolLogsALongPause(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	var logs syncBuffer
	th, err := b.client.Throttle("openai/gpt", throttle.Config{})
	require.NoError(t, err)
	answered := make(chan struct{}, 1)
	handler := queue.Handler(func(ctx context.Context, j *queue.Job) (queue.Result, error) {
		resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"86400"}}}
		select {
		case answered <- struct{}{}:
		default:
		}
		return queue.Result{Response: resp}, queue.ErrRateLimited
	})
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	start := time.Now()
	wait := b.work(ctx, queue.WorkerConfig{Queue: b.queue, Handler: handler, Throttle: th, Concurrency: 1,
		PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	<-answered
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "quota paused") }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, wait())
	line := logs.String()
	require.Contains(t, line, "key=openai/gpt")
	require.Contains(t, line, `reason="HTTP 429 with Retry-After 24h0m0s"`)
	require.Contains(t, line, "for=1h0m0s")
	m := regexp.MustCompile(`until=(\S+)`).FindStringSubmatch(line)
	require.NotNil(t, m, line)
	until, err := time.Parse(time.RFC3339, m[1])
	require.NoError(t, err)
	require.WithinDuration(t, start.Add(time.Hour), until, time.Minute)
	var paused time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT paused_until FROM batchq.quota WHERE key = 'openai/gpt'`).Scan(&paused))
	require.WithinDuration(t, start.Add(time.Hour), paused, time.Minute, "the shared pause is capped too")
}
