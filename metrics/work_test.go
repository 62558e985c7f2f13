package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// A worker pool drains a queue through the simulated provider while the
// metrics endpoint is scraped over HTTP: before the run, halfway (the
// provider holds every request after the first 100 until the test has
// looked), and at the end. The backlog gauges fall by exactly what the
// finished counters count, and at the end the finished jobs are all the
// jobs there were.
func TestScrapeDuringWork(t *testing.T) {
	t.Parallel()
	const key, first = "sim/model", 100
	b := setup(t, "summaries")
	perTenant := map[string]int{"t0": 30, "t1": 40, "t2": 50, "t3": 60, "t4": 70, "t5": 80}
	total := 0
	for tenant, n := range perTenant {
		jobs := make([]queue.NewJob, n)
		for i := range jobs {
			jobs[i] = queue.NewJob{Queue: "summaries", Tenant: tenant, Cost: 20, Payload: []byte(`{"tokens":20}`)}
		}
		_, err := b.client.EnqueueMany(b.ctx, jobs)
		require.NoError(t, err)
		total += n
	}

	sim, err := provider.New(provider.Config{RequestsPerWindow: 1000, TokensPerWindow: 20_000, Window: time.Second, Latency: time.Millisecond})
	require.NoError(t, err)
	// The first 100 requests pass; the rest wait until the test has scraped.
	var arrived atomic.Int64
	var passed sync.WaitGroup
	passed.Add(first)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) <= first {
			defer passed.Done()
		} else {
			<-release
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(target.Close)
	handler, err := queue.HTTPHandler(queue.HTTPConfig{Target: target.URL})
	require.NoError(t, err)
	th, err := b.client.Throttle(key, throttle.Config{Reserve: 0.2})
	require.NoError(t, err)

	col, err := New(Config{Client: b.client, TopTenants: 3, Throttles: map[string]*throttle.Throttle{key: th},
		RankInterval: time.Nanosecond, ScrapeTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)}) // rank at every scrape
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	endpoint := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(endpoint.Close)
	url := endpoint.URL + "/metrics"
	unfinished := func(s samples) float64 {
		return s.sum("batchq_queued_jobs") + s.sum("batchq_running_jobs") + s.sum("batchq_retrying_jobs")
	}

	// Before: the whole backlog, the three biggest tenants named.
	s := scrape(t, url)
	t.Logf("before: queued %v, tenants %v", s.sum("batchq_queued_jobs"), s.values("batchq_queued_jobs", "tenant"))
	require.Equal(t, float64(total), s.sum("batchq_queued_jobs"))
	require.Equal(t, map[string]bool{"t3": true, "t4": true, "t5": true, other: true}, s.values("batchq_queued_jobs", "tenant"))
	require.Equal(t, 80.0*20, s[series("batchq_queued_tokens", "queue", "summaries", "tenant", "t5")])

	ctx, cancel := context.WithCancel(b.ctx)
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		done <- b.client.Work(ctx, queue.WorkerConfig{
			Queue: "summaries", Handler: handler, Throttle: th, Concurrency: 4, Drain: true,
			PollInterval: 20 * time.Millisecond, OnEvent: col.OnEvent(key),
			Logger: slog.New(slog.DiscardHandler),
		})
	}()

	// Halfway: the first 100 calls are answered and nothing else gets through.
	passed.Wait()
	ok := float64(sim.Stats().OK)
	require.Eventually(t, func() bool {
		return scrape(t, url).sum("batchq_finished_jobs_total", "outcome", "succeeded") == ok
	}, 30*time.Second, 20*time.Millisecond, "the finished counter never reached the %v calls answered 200", ok)
	s = scrape(t, url)
	t.Logf("halfway: provider answered %v OK; succeeded %v, unfinished %v, claimed %v, throttle waits %v",
		ok, s.sum("batchq_finished_jobs_total", "outcome", "succeeded"), unfinished(s),
		s.sum("batchq_claimed_jobs_total"), s.sum("batchq_batch_throttle_waits_total"))
	require.Greater(t, ok, 0.0)
	require.Equal(t, float64(total)-ok, unfinished(s), "the backlog fell by what finished")
	require.GreaterOrEqual(t, s.sum("batchq_claimed_jobs_total"), float64(first))
	require.Equal(t, s.sum("batchq_claimed_jobs_total"), s.sum("batchq_job_wait_seconds_count"))
	require.Equal(t, 20_000.0, s[series("batchq_quota_limit", "key", key, "unit", "tokens")], "learned from the provider's headers")
	require.Contains(t, s, series("batchq_quota_headroom", "key", key, "priority", "batch", "unit", "tokens"))
	require.Equal(t, 1.0, s["batchq_database_up"])
	require.LessOrEqual(t, len(s.values("batchq_claimed_jobs_total", "tenant")), 2*3+1)

	releaseOnce()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the pool did not drain the queue")
	}

	// After: everything finished, and the counters say so.
	s = scrape(t, url)
	var outcomes int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`).Scan(&outcomes))
	t.Logf("after: outcomes %d, succeeded %v, unfinished %v, 429s %v, tenants %v", outcomes,
		s.sum("batchq_finished_jobs_total", "outcome", "succeeded"), unfinished(s),
		s.sum("batchq_rate_limited_responses_total"), s.values("batchq_finished_jobs_total", "tenant"))
	require.Equal(t, int64(total), outcomes)
	require.Equal(t, float64(total), s.sum("batchq_finished_jobs_total", "outcome", "succeeded"))
	require.Equal(t, float64(total*20), s.sum("batchq_finished_estimated_tokens_total", "outcome", "succeeded"))
	require.Equal(t, float64(total*20), s.sum("batchq_finished_actual_tokens_total", "outcome", "succeeded"), "usage.total_tokens")
	require.Zero(t, unfinished(s))
	// t5 was named from the first scrape on, and six tenants never push a
	// name out at TopTenants 3: every one of its jobs is under its name.
	require.Equal(t, 80.0, s[series("batchq_finished_jobs_total", "outcome", "succeeded", "queue", "summaries", "tenant", "t5")])
	require.Equal(t, 0.0, s[series("batchq_queued_jobs", "queue", "summaries", "tenant", "t5")], "a drained tenant's gauge falls to 0")
	require.Equal(t, 0.0, s[series("batchq_backlog_tenants", "queue", "summaries")])
}
