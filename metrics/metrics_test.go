package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// clock is a settable time for the collector's now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestCollector(t *testing.T, cfg Config) (*Collector, *clock) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ScrapeTimeout == 0 {
		// Long enough for a ranking on a busy machine: the tests want the
		// scrape to see it, and a ranking that ends sooner ends the wait.
		cfg.ScrapeTimeout = time.Minute
	}
	c, err := New(cfg)
	require.NoError(t, err)
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	c.now = clk.now
	return c, clk
}

func job(tenant string, cost int64) *queue.Job {
	return &queue.Job{Queue: "q", Tenant: tenant, Cost: cost}
}

func TestEventsBecomeSeries(t *testing.T) {
	t.Parallel()
	c, clk := newTestCollector(t, Config{TopTenants: 1})
	c.labels.refresh(map[string][]string{"q": {"big"}}, c.dropTenant) // as a scrape would
	on := c.OnEvent("sim/model")

	on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: job("big", 100), Wait: 2 * time.Second})
	on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: job("big", 50), Wait: 40 * time.Second})
	on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: job("small", 10), Wait: 700 * time.Millisecond})
	on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: job("tiny", 5), Wait: -time.Second}) // clock skew
	on(queue.Event{Kind: queue.EventFinished, Queue: "q", Job: job("big", 100), Outcome: "succeeded", ActualCost: 120, Duration: 1500 * time.Millisecond})
	on(queue.Event{Kind: queue.EventFinished, Queue: "q", Job: job("big", 50), Outcome: "retrying"})
	on(queue.Event{Kind: queue.EventFinished, Queue: "q", Job: job("small", 10), Outcome: "failed"})
	on(queue.Event{Kind: queue.EventFinished, Queue: "q", Job: job("tiny", 5), Outcome: "succeeded", ActualCost: 7, Duration: 20 * time.Second})
	on(queue.Event{Kind: queue.EventExpired, Queue: "q", Job: job("small", 30)})
	on(queue.Event{Kind: queue.EventError, Queue: "q", Err: errors.New("connection refused")})
	// Three pool waits: 2s, then 2s announced 1s later (1s new), then 1s after a gap.
	on(queue.Event{Kind: queue.EventThrottled, Queue: "q", Wait: 2 * time.Second})
	clk.advance(time.Second)
	on(queue.Event{Kind: queue.EventThrottled, Queue: "q", Wait: 2 * time.Second})
	clk.advance(4 * time.Second)
	on(queue.Event{Kind: queue.EventThrottled, Queue: "q", Wait: time.Second})
	// Four handlers hear of one 5s pause at once; a 0 Retry-After adds nothing.
	for range 4 {
		on(queue.Event{Kind: queue.EventRateLimited, Queue: "q", Job: job("big", 100), Wait: 5 * time.Second})
	}
	on(queue.Event{Kind: queue.EventRateLimited, Queue: "q", Job: job("big", 100)})
	// A Retry-After of an hour is a long pause; the 5s ones are not.
	clk.advance(10 * time.Second)
	on(queue.Event{Kind: queue.EventRateLimited, Queue: "q", Job: job("big", 100), Wait: time.Hour})
	c.ObserveEnqueueError(fmt.Errorf("enqueue: %w", &queue.QueueFullError{Queue: "q", Tenant: "big", Bound: 10, Queued: 9, Adding: 3}))
	c.ObserveEnqueueError(&queue.QueueFullError{Queue: "q", Tenant: "small", Bound: 10, Queued: 10, Adding: 1})
	c.ObserveEnqueueError(&queue.InvalidJobError{Field: "cost", Rule: "must be > 0"})
	c.ObserveEnqueueError(nil)

	s := collect(t, c)
	qt := func(tenant string) []string { return []string{"queue", "q", "tenant", tenant} }
	qto := func(tenant, outcome string) []string {
		return []string{"outcome", outcome, "queue", "q", "tenant", tenant}
	}
	for name, want := range map[string]float64{
		series("batchq_claimed_jobs_total", qt("big")...):                                      2,
		series("batchq_claimed_tokens_total", qt("big")...):                                    150,
		series("batchq_claimed_jobs_total", qt("other")...):                                    2, // small and tiny
		series("batchq_claimed_tokens_total", qt("other")...):                                  15,
		series("batchq_job_wait_seconds_count", qt("big")...):                                  2,
		series("batchq_job_wait_seconds_sum", qt("big")...):                                    42,
		series("batchq_job_wait_seconds_bucket", append(qt("big"), "le", "5")...):              1,
		series("batchq_job_wait_seconds_bucket", append(qt("big"), "le", "60")...):             2,
		series("batchq_job_wait_seconds_bucket", append(qt("other"), "le", "0.1")...):          1, // the skewed one, as 0
		series("batchq_job_wait_seconds_sum", qt("other")...):                                  0.7,
		series("batchq_finished_jobs_total", qto("big", "succeeded")...):                       1,
		series("batchq_finished_jobs_total", qto("big", "retrying")...):                        1,
		series("batchq_finished_jobs_total", qto("other", "failed")...):                        1,
		series("batchq_finished_jobs_total", qto("other", "succeeded")...):                     1,
		series("batchq_finished_estimated_tokens_total", qto("big", "succeeded")...):           100,
		series("batchq_finished_estimated_tokens_total", qto("big", "retrying")...):            50,
		series("batchq_finished_actual_tokens_total", qto("big", "succeeded")...):              120,
		series("batchq_finished_actual_tokens_total", qto("other", "succeeded")...):            7,
		series("batchq_job_duration_seconds_count", "outcome", "succeeded", "queue", "q"):      2,
		series("batchq_job_duration_seconds_sum", "outcome", "succeeded", "queue", "q"):        21.5,
		series("batchq_expired_jobs_total", qt("other")...):                                    1,
		series("batchq_expired_tokens_total", qt("other")...):                                  30,
		series("batchq_worker_errors_total", "queue", "q"):                                     1,
		series("batchq_batch_throttle_waits_total", "key", "sim/model", "queue", "q"):          3,
		series("batchq_batch_throttle_wait_seconds_total", "key", "sim/model", "queue", "q"):   4,
		series("batchq_rate_limited_responses_total", "key", "sim/model", "priority", "batch"): 6,
		series("batchq_quota_paused_seconds_total", "key", "sim/model"):                        5 + 3600,
		series("batchq_quota_long_pauses_total", "key", "sim/model"):                           1,
	} {
		require.Contains(t, s, name)
		require.InDelta(t, want, s[name], 1e-9, name)
	}
	// Only attempts that reported an actual cost have an actual-tokens series,
	// and only runs with a known duration are in the duration histogram.
	require.NotContains(t, s, series("batchq_finished_actual_tokens_total", qto("other", "failed")...))
	require.NotContains(t, s, series("batchq_job_duration_seconds_count", "outcome", "retrying", "queue", "q"))
	require.Equal(t, map[string]bool{"big": true, "other": true}, s.values("batchq_claimed_jobs_total", "tenant"))
	// Without a Client there are no database gauges, not even batchq_database_up.
	require.NotContains(t, s, "batchq_database_up")
}

func TestMetricNamesFollowConventions(t *testing.T) {
	t.Parallel()
	c, _ := newTestCollector(t, Config{})
	on := c.OnEvent("k")
	for _, k := range []queue.EventKind{queue.EventClaimed, queue.EventFinished, queue.EventExpired,
		queue.EventThrottled, queue.EventRateLimited, queue.EventError} {
		on(queue.Event{Kind: k, Queue: "q", Job: job("a", 1), Outcome: "succeeded", ActualCost: 1,
			Duration: time.Second, Wait: time.Second})
	}
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems)
	for _, d := range descs(c) {
		require.Regexp(t, `^batchq_[a-z_]+$`, descName.FindStringSubmatch(d.String())[1])
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{TopTenants: -1})
	require.ErrorContains(t, err, "TopTenants")
	_, err = New(Config{ScrapeTimeout: -time.Second})
	require.ErrorContains(t, err, "ScrapeTimeout")
}

// A million tenants must not make a million series: with the top three
// changing at every scrape, the event-fed series name at most six tenants
// plus "other", the latest leaders always among them, and a dropped
// tenant's series are gone, not frozen.
func TestEventSeriesStayBoundedAsLeadersChange(t *testing.T) {
	t.Parallel()
	const n, tenants = 3, 1000
	c, _ := newTestCollector(t, Config{TopTenants: n})
	on := c.OnEvent("")
	name := func(i int) string { return fmt.Sprintf("t%04d", i%tenants) }
	for round := range 40 {
		top := []string{name(3 * round), name(3*round + 1), name(3*round + 2)}
		c.labels.refresh(map[string][]string{"q": top}, c.dropTenant) // as a scrape would
		before := collect(t, c)
		for i := range tenants {
			on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: job(name(i), 1)})
		}
		s := collect(t, c)
		got := s.values("batchq_claimed_jobs_total", "tenant")
		require.LessOrEqual(t, len(got), 2*n+1, "round %d: %v", round, got)
		for _, tn := range top {
			require.True(t, got[tn], "round %d: leader %s has no series of its own", round, tn)
		}
		require.True(t, got[other])
		// Every event is counted once, under its name or under "other".
		require.Equal(t, float64(tenants), s.sum("batchq_claimed_jobs_total")-before.sum("batchq_claimed_jobs_total"), "round %d", round)
		if round >= 2 {
			// Leaders of two rounds ago were pushed out by more recent ones,
			// and their series deleted.
			require.False(t, got[name(3*(round-2))], "round %d: %v", round, got)
		}
	}
}

func TestTenantLabelsKeepRecentLeavers(t *testing.T) {
	t.Parallel()
	l := newTenantLabels(2, nil)
	var dropped []string
	drop := func(q, t string) { dropped = append(dropped, q+"/"+t) }
	l.refresh(map[string][]string{"q": {"a", "b"}, "r": {"x"}}, drop)
	l.refresh(map[string][]string{"q": {"c", "d"}}, drop) // a and b leave: kept, 4 = 2n
	require.Equal(t, []string{"a", "b", "c", "d"}, l.namedIn("q"))
	require.Empty(t, dropped)
	l.refresh(map[string][]string{"q": {"e", "a"}}, drop) // a is back; b is the least recent leaver
	require.Equal(t, []string{"a", "c", "d", "e"}, l.namedIn("q"))
	require.Equal(t, []string{"q/b"}, dropped)
	require.Equal(t, []string{"x"}, l.namedIn("r"), "a queue absent from a refresh keeps its names")
	l.refresh(map[string][]string{"q": {other, ""}}, drop)
	require.NotContains(t, l.namedIn("q"), other, `"other" is never a name`)
	l.mu.RLock()
	require.Equal(t, other, l.labelLocked("q", "b"))
	require.Equal(t, "a", l.labelLocked("q", "a"))
	require.Equal(t, other, l.labelLocked("nope", "a"))
	l.mu.RUnlock()
}

// Between rankings, a tenant's first event names it while its queue has room
// (fewer than n names), only in the queues the ranking covers; past that,
// and for "other" or no name, events count under "other".
func TestTenantLabelsNameNewTenantsWhileThereIsRoom(t *testing.T) {
	t.Parallel()
	l := newTenantLabels(2, func(q string) bool { return q == "q" })
	label := func(q, tenant string) string {
		var got string
		l.record(q, tenant, func(label string) { got = label })
		return got
	}
	require.Equal(t, other, label("q", other))
	require.Equal(t, other, label("q", ""))
	require.Equal(t, "a", label("q", "a"))
	require.Equal(t, "b", label("q", "b"))
	require.Equal(t, "a", label("q", "a"))
	require.Equal(t, other, label("q", "c"), "two names: no room")
	require.Equal(t, other, label("r", "a"), "a queue the ranking does not cover")
	require.Equal(t, []string{"a", "b"}, l.namedIn("q"))

	// A ranking keeps them as recent names; its leader takes the room.
	l.refresh(map[string][]string{"q": {"c"}}, func(string, string) {})
	require.Equal(t, []string{"a", "b", "c"}, l.namedIn("q"))
	require.Equal(t, "c", label("q", "c"))
	require.Equal(t, other, label("q", "d"))

	none := newTenantLabels(2, nil)
	none.record("q", "a", func(label string) { require.Equal(t, other, label) })
	require.Empty(t, none.namedIn("q"))
}

// CallInteractive records the wait and tokens of admitted calls, the 429s
// and the pause they announce, and the wait of a call that gave up.
func TestCallInteractive(t *testing.T) {
	t.Parallel()
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer provider.Close()
	c, err := New(Config{})
	require.NoError(t, err)
	th, err := throttle.New(throttle.Config{})
	require.NoError(t, err)
	call := func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, nil)
		if err != nil {
			return nil, err
		}
		return http.DefaultClient.Do(req)
	}

	resp, err := c.CallInteractive(context.Background(), "k", th, 40, call)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)

	// The 429 paused the throttle for 30s: the next call gives up waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.CallInteractive(ctx, "k", th, 40, call)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	s := collect(t, c)
	require.Equal(t, 2.0, s[series("batchq_interactive_wait_seconds_count", "key", "k")], "both calls' waits")
	require.Equal(t, 40.0, s[series("batchq_interactive_tokens_total", "key", "k")], "only the admitted call's tokens")
	require.Equal(t, 1.0, s[series("batchq_rate_limited_responses_total", "key", "k", "priority", "interactive")])
	require.InDelta(t, 30.0, s[series("batchq_quota_paused_seconds_total", "key", "k")], 1)
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// descs returns what c describes.
func descs(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}
