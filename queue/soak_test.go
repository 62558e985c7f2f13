package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// TestSoak runs the whole system under mixed load for BATCHQ_SOAK (a Go
// duration; default 2m): enqueuers, a bounded hot tenant refused when full,
// two worker pools on one rate-limited provider (one paced by the fleet
// throttle, one not, so it meets 429s), injected 5xx faults that are
// retried, jobs that fail for good, deadlines that pass in the backlog, and
// claims abandoned by a "crashed" worker that maintenance rescues. It
// samples the process's goroutines, live heap and RSS, and after a warm-up
// requires the last third of the samples to stay within a generous bound of
// the first third; the DRR invariants hold at every sample; and when the
// load stops and the queue drains, the outcomes account for every job.
//
// It does not run in parallel with other tests, so the samples are its own.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: runs for minutes (BATCHQ_SOAK, default 2m)")
	}
	d := 2 * time.Minute
	if s := os.Getenv("BATCHQ_SOAK"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err, "BATCHQ_SOAK must be a duration like 3m")
		require.GreaterOrEqual(t, d, 10*time.Second, "BATCHQ_SOAK")
	}
	const tenants = 20
	b := setup(t, queue.QueueConfig{Quantum: 500, Lease: 2 * time.Second, MaxAttempts: 4, MaxPerTenant: 500})
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "hot", Weight: 0.05, MaxQueued: 20}))
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "tenant-00", Weight: 3}))
	url := b.pool.Config().ConnString()
	sim := newRotatingProvider(t, provider.Config{RequestsPerWindow: 100, TokensPerWindow: 100_000, Window: time.Second,
		Latency: 20 * time.Millisecond, Jitter: 30 * time.Millisecond, FailRate: 0.05, FailStatus: 503, Seed: 7})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	post, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL})
	require.NoError(t, err)
	// Jobs whose payload says so fail for good without a call.
	handler := func(ctx context.Context, j *queue.Job) (queue.Result, error) {
		var p struct{ Bad bool }
		if json.Unmarshal(j.Payload, &p) == nil && p.Bad {
			return queue.Result{}, queue.Permanent(errors.New("soak: a job that can never succeed"))
		}
		return post(ctx, j)
	}

	var events struct {
		succeeded, failed, discarded, retrying, released, rateLimited, expired, lost atomic.Int64
		mu                                                                           sync.Mutex
		discardedJobs                                                                map[int64]bool // to say, should the counts differ, which job the events missed
	}
	events.discardedJobs = map[int64]bool{}
	onEvent := func(e queue.Event) {
		switch e.Kind {
		case queue.EventRateLimited:
			events.rateLimited.Add(1)
		case queue.EventExpired:
			events.expired.Add(1)
		case queue.EventFinished:
			switch e.Outcome {
			case "succeeded":
				events.succeeded.Add(1)
			case "failed":
				events.failed.Add(1)
			case "discarded":
				events.discarded.Add(1)
				events.mu.Lock()
				events.discardedJobs[e.Job.ID] = true
				events.mu.Unlock()
			case "retrying":
				events.retrying.Add(1)
			case "released":
				events.released.Add(1)
			case "lease_lost":
				events.lost.Add(1)
			}
		}
	}
	workCtx, stopWork := context.WithCancel(b.ctx)
	defer stopWork()
	var workers sync.WaitGroup
	paced := fleetClient(t, url)
	th, err := paced.Throttle("soak/model", throttle.Config{Reserve: 0.1})
	require.NoError(t, err)
	for i, w := range []queue.WorkerConfig{
		{Name: "paced", Throttle: th, Concurrency: 8},
		{Name: "eager", Concurrency: 4},
	} {
		c := paced
		if i > 0 {
			c = fleetClient(t, url)
		}
		w.Queue, w.Handler, w.OnEvent = b.queue, handler, onEvent
		w.PollInterval, w.MaintainInterval, w.ShutdownTimeout = 100*time.Millisecond, 250*time.Millisecond, 5*time.Second
		workers.Go(func() {
			if err := c.Work(workCtx, w); err != nil {
				t.Errorf("%s: %v", w.Name, err)
			}
		})
	}

	// The load: enqueuers (holding back while the backlog is long), and a
	// worker that claims a job now and then and dies with it.
	var enqueued, refused, abandoned atomic.Int64
	var backlog atomic.Int64
	loadCtx, stopLoad := context.WithCancel(b.ctx)
	var load sync.WaitGroup
	for e := range 2 {
		c := fleetClient(t, url)
		rng := rand.New(rand.NewPCG(uint64(e), 3))
		load.Go(func() {
			// About 150 jobs a second, half again what the provider takes:
			// the backlog grows to its cap and stays there.
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for loadCtx.Err() == nil {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				if backlog.Load() > 1500 {
					continue
				}
				var jobs []queue.NewJob
				for range 1 + rng.IntN(5) {
					cost := 10 + rng.Int64N(490)
					j := queue.NewJob{Queue: b.queue, Tenant: fmt.Sprintf("tenant-%02d", rng.IntN(tenants)), Cost: cost,
						Payload: []byte(fmt.Sprintf(`{"tokens":%d}`, cost))}
					switch r := rng.IntN(100); {
					case r < 3:
						j.Payload = []byte(`{"bad":true}`)
					case r < 8:
						j.TTL = time.Duration(500+rng.IntN(2500)) * time.Millisecond
					case r < 20:
						j.Tenant = "hot"
					}
					jobs = append(jobs, j)
				}
				// Not cancelled mid-call: an enqueue cut off by the stop
				// could commit and still report an error, and the count must
				// know every job that exists.
				res, err := c.EnqueueMany(context.WithoutCancel(loadCtx), jobs)
				switch {
				case errors.Is(err, queue.ErrQueueFull):
					refused.Add(1)
				case err != nil:
					if loadCtx.Err() == nil {
						t.Errorf("enqueue: %v", err)
					}
				default:
					enqueued.Add(int64(len(res)))
				}
			}
		})
	}
	crasher := fleetClient(t, url)
	load.Go(func() {
		for loadCtx.Err() == nil {
			jobs, err := crasher.Claim(loadCtx, b.queue, &queue.ClaimOpts{Worker: "crashes"})
			if err == nil {
				abandoned.Add(int64(len(jobs)))
			}
			select {
			case <-loadCtx.Done():
			case <-time.After(700 * time.Millisecond):
			}
		}
	})

	// Samples, every two seconds.
	type sample struct {
		goroutines int
		heap, rss  uint64
	}
	var samples []sample
	start := time.Now()
	for i := 1; time.Since(start) < d; i++ {
		time.Sleep(2 * time.Second)
		if i%10 == 0 {
			sim.rotate(t)
		}
		var queued int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`).Scan(&queued))
		backlog.Store(queued)
		requireInvariants(t, b.ctx, b.pool, "after %s", time.Since(start).Round(time.Second))
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{runtime.NumGoroutine(), ms.HeapAlloc, rssBytes(t)})
	}
	stopLoad()
	load.Wait()

	// Drain: the pools finish the backlog, the retries and the rescues.
	waitUntil(t, 2*time.Minute, "the queue to drain", func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs`) == 0
	})
	stopWork()
	workers.Wait()

	// Every job has exactly one outcome, and what the pools reported matches.
	total := enqueued.Load()
	require.Equal(t, total, b.scalar(t, `SELECT count(*) FROM batchq.outcomes`))
	count := func(outcome string) int64 {
		return b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = $1`, outcome)
	}
	succeeded, failed, discarded, expired := count("succeeded"), count("failed"), count("discarded"), count("expired")
	require.Equal(t, total, succeeded+failed+discarded+expired)
	require.Equal(t, events.succeeded.Load(), succeeded)
	if events.discarded.Load() != discarded {
		// Which: their outcome rows, to tell how each came to be discarded.
		rows, err := b.pool.Query(b.ctx, `SELECT job_id, attempts, coalesce(worker, ''), coalesce(error, '') FROM batchq.outcomes
			WHERE outcome = 'discarded' ORDER BY job_id`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id int64
			var attempts int
			var worker, reason string
			require.NoError(t, rows.Scan(&id, &attempts, &worker, &reason))
			if !events.discardedJobs[id] {
				t.Logf("discarded without a pool's event: job %d, attempts %d, worker %q: %s", id, attempts, worker, reason)
			}
		}
		require.NoError(t, rows.Err())
	}
	require.Equal(t, events.discarded.Load(), discarded)
	require.Equal(t, failed, events.failed.Load()+b.scalar(t, `SELECT count(*) FROM batchq.outcomes
		WHERE outcome = 'failed' AND error LIKE 'lease expired before its worker finished it%'`))
	requireInvariants(t, b.ctx, b.pool)
	// The load was as mixed as intended.
	st := sim.stats()
	require.Positive(t, succeeded)
	require.Positive(t, discarded)
	require.Positive(t, expired)
	require.Positive(t, refused.Load(), "the hot tenant was never refused")
	require.Positive(t, st.TooManyRequests, "no 429s")
	require.Positive(t, events.retrying.Load(), "no retries")
	require.Positive(t, abandoned.Load(), "no abandoned claims")

	// Flat after the warm-up: the last third against the first third.
	warm := samples[len(samples)/5:]
	require.GreaterOrEqual(t, len(warm), 3)
	third := len(warm) / 3
	first, last := warm[:third], warm[len(warm)-third:]
	mean := func(s []sample, f func(sample) float64) float64 {
		var sum float64
		for _, x := range s {
			sum += f(x)
		}
		return sum / float64(len(s))
	}
	const mib = 1 << 20
	g0, g1 := mean(first, func(s sample) float64 { return float64(s.goroutines) }), mean(last, func(s sample) float64 { return float64(s.goroutines) })
	h0, h1 := mean(first, func(s sample) float64 { return float64(s.heap) / mib }), mean(last, func(s sample) float64 { return float64(s.heap) / mib })
	r0, r1 := mean(first, func(s sample) float64 { return float64(s.rss) / mib }), mean(last, func(s sample) float64 { return float64(s.rss) / mib })
	t.Logf("soak: %s, %d samples; %d jobs: %d succeeded, %d failed, %d discarded, %d expired; %d enqueues refused as full; "+
		"%d provider calls, %d answered 429, %d 5xx; %d retries, %d releases, %d claims abandoned and rescued; "+
		"goroutines %.0f -> %.0f, heap %.1f -> %.1f MiB, RSS %.1f -> %.1f MiB (first third -> last third after warm-up)",
		d, len(samples), total, succeeded, failed, discarded, expired, refused.Load(), st.Requests, st.TooManyRequests, st.ServerErrors,
		events.retrying.Load(), events.released.Load(), abandoned.Load(), g0, g1, h0, h1, r0, r1)
	require.LessOrEqual(t, g1, 1.5*g0+20, "goroutines grow")
	require.LessOrEqual(t, h1, 2*h0+16, "the heap grows (MiB)")
	require.LessOrEqual(t, r1, 1.5*r0+64, "RSS grows (MiB)")
}

// rotatingProvider is a simulated provider that a test replaces with a
// fresh one now and then: a Provider logs every request for its whole life,
// which would look like a leak in a long soak.
type rotatingProvider struct {
	cfg  provider.Config
	cur  atomic.Pointer[provider.Provider]
	prev *provider.Provider // replaced a rotation ago: quiet now
	sum  provider.Stats
}

func newRotatingProvider(t *testing.T, cfg provider.Config) *rotatingProvider {
	r := &rotatingProvider{cfg: cfg}
	r.rotate(t)
	return r
}

func (r *rotatingProvider) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.cur.Load().ServeHTTP(w, req)
}

// rotate starts a fresh provider and forgets the one before the current.
func (r *rotatingProvider) rotate(t *testing.T) {
	t.Helper()
	p, err := provider.New(r.cfg)
	require.NoError(t, err)
	r.add(r.prev)
	r.prev = r.cur.Swap(p)
}

func (r *rotatingProvider) add(p *provider.Provider) {
	if p == nil {
		return
	}
	st := p.Stats()
	r.sum.Requests += st.Requests
	r.sum.OK += st.OK
	r.sum.TooManyRequests += st.TooManyRequests
	r.sum.ServerErrors += st.ServerErrors
	r.sum.ClientErrors += st.ClientErrors
}

// stats sums what every provider saw; call it once, at the end.
func (r *rotatingProvider) stats() provider.Stats {
	r.add(r.prev)
	r.add(r.cur.Load())
	r.prev = nil
	return r.sum
}

// rssBytes reads the process's resident set size from /proc/self/status.
func rssBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0 // not Linux: only the heap and goroutines are checked
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err, line)
			return kb << 10
		}
	}
	return 0
}
