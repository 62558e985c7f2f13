package metrics

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

type testBundle struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *queue.Client
}

func setup(t *testing.T, queues ...string) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	for _, q := range queues {
		require.NoError(t, client.CreateQueue(ctx, queue.QueueConfig{Name: q}))
	}
	return &testBundle{ctx: ctx, pool: pool, client: client}
}

// enqueue inserts n jobs of cost each for tenant.
func (b *testBundle) enqueue(t *testing.T, queueName, tenant string, n int, cost int64) {
	t.Helper()
	jobs := make([]queue.NewJob, n)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: queueName, Tenant: tenant, Cost: cost}
	}
	_, err := b.client.EnqueueMany(b.ctx, jobs)
	require.NoError(t, err)
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) float64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return float64(n)
}

func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	b := setup(t, "q", "empty", "elsewhere")
	// Tenant tNN has NN+1 jobs of 10 tokens: the leaders are t49, t48, ...
	for i := range 50 {
		b.enqueue(t, "q", fmt.Sprintf("t%02d", i), i+1, 10)
	}
	b.enqueue(t, "elsewhere", "t00", 1, 10)
	claimed, err := b.client.Claim(b.ctx, "q", &queue.ClaimOpts{Limit: 4})
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	retrying, err := b.client.Fail(b.ctx, claimed[0], fmt.Errorf("boom"), nil)
	require.NoError(t, err)
	require.True(t, retrying)
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "q", Tenant: "t49", Cost: 1, Delay: time.Hour})
	require.NoError(t, err)

	_, err = b.client.PauseQueue(b.ctx, "empty")
	require.NoError(t, err)

	c, clk := newTestCollector(t, Config{Client: b.client, TopTenants: 5, Queues: []string{"q", "empty"}})
	s := collect(t, c)

	require.Equal(t, 1.0, s["batchq_database_up"])
	require.Equal(t, 1.0, s[series("batchq_queue_paused", "queue", "empty")])
	require.Contains(t, s, series("batchq_queue_paused", "queue", "q"))
	require.Equal(t, 0.0, s[series("batchq_queue_paused", "queue", "q")])
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems, "Prometheus naming conventions")
	want := map[string]bool{"t45": true, "t46": true, "t47": true, "t48": true, "t49": true, other: true}
	require.Equal(t, want, s.values("batchq_queued_jobs", "tenant"))
	require.Equal(t, want, s.values("batchq_running_jobs", "tenant"))
	require.Equal(t, 50.0, s.sum("batchq_queued_jobs", "queue", "q", "tenant", "t49")+
		s.sum("batchq_running_jobs", "queue", "q", "tenant", "t49")+s.sum("batchq_retrying_jobs", "queue", "q", "tenant", "t49"))
	require.Equal(t, 10*s[series("batchq_queued_jobs", "queue", "q", "tenant", "t47")], s[series("batchq_queued_tokens", "queue", "q", "tenant", "t47")])
	// The named and "other" add up to the whole queue.
	for _, g := range []struct{ name, state string }{
		{"batchq_queued_jobs", "queued"}, {"batchq_running_jobs", "running"}, {"batchq_retrying_jobs", "retrying"},
		{"batchq_scheduled_jobs", "scheduled"},
	} {
		require.Equal(t, b.count(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'q' AND state = $1::batchq.job_state`, g.state),
			s.sum(g.name, "queue", "q"), g.name)
	}
	require.Equal(t, 3.0, s.sum("batchq_running_jobs", "queue", "q"))
	require.Equal(t, 1.0, s.sum("batchq_retrying_jobs", "queue", "q"))
	require.Equal(t, 1.0, s[series("batchq_scheduled_jobs", "queue", "q", "tenant", "t49")])
	require.Equal(t, b.count(t, `SELECT sum(cost) FROM batchq.jobs WHERE queue = 'q' AND state = 'queued'`), s.sum("batchq_queued_tokens", "queue", "q"))
	require.Equal(t, 50.0, s[series("batchq_backlog_tenants", "queue", "q")])
	age := s[series("batchq_oldest_queued_job_age_seconds", "queue", "q", "tenant", other)]
	require.GreaterOrEqual(t, age, 0.0)
	require.Less(t, age, 3600.0)

	// A queue with nothing in it has zeros, not nothing; an unlisted queue is absent.
	require.Contains(t, s, series("batchq_queued_jobs", "queue", "empty", "tenant", other))
	require.Equal(t, 0.0, s[series("batchq_queued_jobs", "queue", "empty", "tenant", other)])
	require.Equal(t, 0.0, s[series("batchq_backlog_tenants", "queue", "empty")])
	require.NotContains(t, s, series("batchq_oldest_queued_job_age_seconds", "queue", "empty", "tenant", other))
	require.Empty(t, s.values("batchq_queued_jobs", "queue")["elsewhere"])
	require.Equal(t, map[string]bool{"q": true, "empty": true}, s.values("batchq_queued_jobs", "queue"))

	// The scrape named the leaders: their events now have series of their own.
	on := c.OnEvent("")
	on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: &queue.Job{Tenant: "t49", Cost: 10}})
	on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: &queue.Job{Tenant: "t00", Cost: 10}})
	s = collect(t, c)
	require.Equal(t, 1.0, s[series("batchq_claimed_jobs_total", "queue", "q", "tenant", "t49")])
	require.Equal(t, 1.0, s[series("batchq_claimed_jobs_total", "queue", "q", "tenant", other)])

	// t49's backlog goes; t00 gains the most. t49 keeps its name, with zeros,
	// and t00 gets one.
	_, err = b.pool.Exec(b.ctx, `DELETE FROM batchq.jobs WHERE tenant = 't49'`)
	require.NoError(t, err)
	b.enqueue(t, "q", "t00", 100, 10)
	s = collect(t, c)
	require.Equal(t, 0.0, s[series("batchq_queued_jobs", "queue", "q", "tenant", "t49")], "gauges follow the jobs at once")
	require.NotContains(t, s, series("batchq_queued_jobs", "queue", "q", "tenant", "t00"), "names wait for the next ranking")
	clk.advance(time.Minute)
	s = collect(t, c)
	require.Contains(t, s, series("batchq_queued_jobs", "queue", "q", "tenant", "t49"))
	require.Equal(t, 0.0, s[series("batchq_queued_jobs", "queue", "q", "tenant", "t49")])
	require.Equal(t, 101.0, s.sum("batchq_queued_jobs", "queue", "q", "tenant", "t00")+
		s.sum("batchq_running_jobs", "queue", "q", "tenant", "t00")+s.sum("batchq_retrying_jobs", "queue", "q", "tenant", "t00"))
	require.Len(t, s.values("batchq_queued_jobs", "tenant"), 7, "five leaders, one recent leader, other")
	require.Equal(t, b.count(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'q' AND state = 'queued'`), s.sum("batchq_queued_jobs", "queue", "q"))
}

// A tenant literally named "other" is summed with the rest rather than
// making a second series with the same labels (which would fail the scrape).
func TestTenantNamedOther(t *testing.T) {
	t.Parallel()
	b := setup(t, "q")
	b.enqueue(t, "q", other, 5, 10)
	b.enqueue(t, "q", "a", 1, 10)
	b.enqueue(t, "q", "b", 1, 10)
	c, _ := newTestCollector(t, Config{Client: b.client, TopTenants: 1})
	s := collect(t, c) // a pedantic registry: a duplicate series fails it
	require.Equal(t, 7.0, s.sum("batchq_queued_jobs"))
	require.Equal(t, 7.0, s[series("batchq_queued_jobs", "queue", "q", "tenant", other)])
}

// With a Client, a queue with fewer tenants than TopTenants names each of them
// from its first event, before any ranking has seen it; a queue the
// Collector does not cover counts them under "other".
func TestEventsNameTenantsBeforeTheFirstRanking(t *testing.T) {
	t.Parallel()
	b := setup(t, "q", "r")
	c, _ := newTestCollector(t, Config{Client: b.client, Queues: []string{"q"}, TopTenants: 3})
	on := c.OnEvent("")
	for _, tn := range []string{"alpha", "beta", "gamma", "delta"} {
		on(queue.Event{Kind: queue.EventClaimed, Queue: "q", Job: &queue.Job{Queue: "q", Tenant: tn, Cost: 1}})
		on(queue.Event{Kind: queue.EventClaimed, Queue: "r", Job: &queue.Job{Queue: "r", Tenant: tn, Cost: 1}})
	}
	s := collect(t, c)
	require.Equal(t, map[string]bool{"alpha": true, "beta": true, "gamma": true, "other": true},
		s.values("batchq_claimed_jobs_total", "tenant"))
	require.Equal(t, 1.0, s[series("batchq_claimed_jobs_total", "queue", "q", "tenant", "other")], "delta: no room")
	require.Equal(t, 4.0, s[series("batchq_claimed_jobs_total", "queue", "r", "tenant", "other")])
}

// With thousands of tenants a scrape still has TopTenants + 1 series per
// gauge, and their sum is the whole backlog.
func TestManyTenantsScrapeIsBounded(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("enqueues 5,000 tenants")
	}
	b := setup(t, "q")
	var jobs []queue.NewJob
	for i := range 5000 {
		jobs = append(jobs, queue.NewJob{Queue: "q", Tenant: fmt.Sprintf("tenant-%05d", i), Cost: int64(1 + i%7)})
	}
	for i := 0; i < len(jobs); i += 1000 {
		_, err := b.client.EnqueueMany(b.ctx, jobs[i:i+1000])
		require.NoError(t, err)
	}
	c, _ := newTestCollector(t, Config{Client: b.client})
	s := collect(t, c)
	require.Len(t, s.values("batchq_queued_jobs", "tenant"), DefaultTopTenants+1)
	require.Equal(t, 5000.0, s.sum("batchq_queued_jobs"))
	require.Equal(t, b.count(t, `SELECT sum(cost) FROM batchq.jobs`), s.sum("batchq_queued_tokens"))
	require.Equal(t, 5000.0, s[series("batchq_backlog_tenants", "queue", "q")])
	for tn := range s.values("batchq_queued_jobs", "tenant") {
		if tn != other {
			require.Equal(t, 7.0, s[series("batchq_queued_tokens", "queue", "q", "tenant", tn)], "%s is not a leader", tn)
		}
	}
}

func TestQuotaGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	th, err := b.client.Throttle("sim/model", throttle.Config{Reserve: 0.2})
	require.NoError(t, err)
	now := time.Now()
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{
		"X-Ratelimit-Limit-Requests":     {"100"},
		"X-Ratelimit-Remaining-Requests": {"30"},
		"X-Ratelimit-Reset-Requests":     {"1h"},
		"X-Ratelimit-Limit-Tokens":       {"1000"},
		"X-Ratelimit-Remaining-Tokens":   {"900"},
		"X-Ratelimit-Reset-Tokens":       {"1h"},
	}}
	require.NoError(t, th.ObserveResponse(b.ctx, now, now, resp))
	c, _ := newTestCollector(t, Config{Client: b.client, Throttles: map[string]*throttle.Throttle{"sim/model": th}})

	s := collect(t, c)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	require.Empty(t, problems, "Prometheus naming conventions")
	k := func(rest ...string) []string { return append([]string{"key", "sim/model"}, rest...) }
	for name, want := range map[string]float64{
		series("batchq_quota_limit", k("unit", "requests")...):                               100,
		series("batchq_quota_remaining", k("unit", "requests")...):                           30,
		series("batchq_quota_limit", k("unit", "tokens")...):                                 1000,
		series("batchq_quota_remaining", k("unit", "tokens")...):                             900,
		series("batchq_quota_pause_remaining_seconds", k()...):                               0,
		series("batchq_quota_headroom", k("priority", "batch", "unit", "requests")...):       10, // 30 less the reserve of 20
		series("batchq_quota_headroom", k("priority", "interactive", "unit", "requests")...): 30,
		series("batchq_quota_headroom", k("priority", "batch", "unit", "tokens")...):         700,
		series("batchq_quota_headroom", k("priority", "interactive", "unit", "tokens")...):   900,
	} {
		require.Contains(t, s, name)
		require.Equal(t, want, s[name], name)
	}

	// A 429 pauses everything: the pause shows, and no priority has headroom.
	now = time.Now()
	require.NoError(t, th.TooManyRequests(b.ctx, now, now, time.Minute))
	s = collect(t, c)
	require.InDelta(t, 60, s[series("batchq_quota_pause_remaining_seconds", k()...)], 5)
	require.Zero(t, s.sum("batchq_quota_headroom"))
	require.Len(t, s.values("batchq_quota_headroom", "priority"), 2)
}

func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	b := setup(t, "q")
	c, _ := newTestCollector(t, Config{Client: b.client})
	c.OnEvent("")(queue.Event{Kind: queue.EventError, Queue: "q"})
	b.pool.Close()
	s := collect(t, c)
	require.Equal(t, 0.0, s["batchq_database_up"])
	require.Equal(t, 1.0, s[series("batchq_worker_errors_total", "queue", "q")], "the event-fed series are still exported")
	require.Empty(t, s.values("batchq_queued_jobs", "queue"))
}

// batchq_database_up is 1 again at the first scrape after the database came
// back, though the tenants are ranked only once an hour here: a ranking that
// failed during the outage is tried again at the next scrape.
func TestDatabaseUpAgainAtTheNextScrape(t *testing.T) {
	t.Parallel()
	b := setup(t, "q")
	proxy, viaProxy := pgtest.NewProxy(t, b.pool.Config().ConnString())
	pool, err := pgxpool.New(b.ctx, viaProxy)
	require.NoError(t, err)
	defer pool.Close()
	client, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	b.enqueue(t, "q", "a", 3, 10)
	c, _ := newTestCollector(t, Config{Client: client, Queues: []string{"q"}, RankInterval: time.Hour, ScrapeTimeout: 5 * time.Second})

	proxy.Cut() // the first ranking fails
	require.Equal(t, 0.0, collect(t, c)["batchq_database_up"])
	proxy.Restore()
	s := collect(t, c)
	require.Equal(t, 1.0, s["batchq_database_up"])
	require.Equal(t, 3.0, s[series("batchq_queued_jobs", "queue", "q", "tenant", "a")], "a is ranked and named")
}
