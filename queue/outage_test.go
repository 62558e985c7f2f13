package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/metrics"
	"github.com/batchq/batchq/queue"
)

// TestDatabaseOutage puts two worker pools and four enqueuers behind a proxy
// and drops every connection through it for three seconds mid-run, as a
// database restart or a network partition would. The pools report the
// outage in their logs and events, reconnect and finish; enqueues made
// during the outage fail with an error the caller retries (with the same
// unique key, so a retry never duplicates a job whose commit went through
// unacknowledged); no enqueue that reported success lacks its row, and every
// job ends with exactly one outcome. The shared test server is never
// restarted, so other tests run on undisturbed.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: 3 * time.Second, UniqueFor: time.Hour})
	proxy, viaProxy := pgtest.NewProxy(t, b.pool.Config().ConnString())
	runOutage(t, b, viaProxy, func(during func()) {
		proxy.Cut()
		cut := time.Now()
		during()
		time.Sleep(time.Until(cut.Add(3 * time.Second)))
		proxy.Restore()
	})
}

// TestPostgresRestart is TestDatabaseOutage with a real restart of the
// PostgreSQL server (pg_ctlcluster … restart), which drops every connection
// of every client of that server. It runs only when BATCHQ_TEST_PG_RESTART=1,
// never in CI, and should run alone against a server no one else uses:
//
//	BATCHQ_TEST_PG_RESTART=1 TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5499/postgres \
//	  go test -race -run '^TestPostgresRestart$' ./queue/
//
// The server is found by its port among pg_lsclusters' clusters; set
// BATCHQ_TEST_PG_RESTART_CMD to restart it some other way (run with sh -c).
func TestPostgresRestart(t *testing.T) {
	if os.Getenv("BATCHQ_TEST_PG_RESTART") != "1" {
		t.Skip("restarts the PostgreSQL server: set BATCHQ_TEST_PG_RESTART=1 to run (alone, on a server of its own)")
	}
	restart := restartCommand(t, pgtest.ServerURL(t))
	b := setup(t, queue.QueueConfig{Lease: 3 * time.Second, UniqueFor: time.Hour})
	runOutage(t, b, b.pool.Config().ConnString(), func(func()) {
		out, err := exec.Command("sh", "-c", restart).CombinedOutput()
		require.NoError(t, err, "%s: %s", restart, out)
		t.Logf("restarted the server: %s", restart)
	})
}

// restartCommand is BATCHQ_TEST_PG_RESTART_CMD, or pg_ctlcluster's restart
// of the Debian cluster that listens on the server's port.
func restartCommand(t *testing.T, server string) string {
	t.Helper()
	if cmd := os.Getenv("BATCHQ_TEST_PG_RESTART_CMD"); cmd != "" {
		return cmd
	}
	u, err := url.Parse(server)
	require.NoError(t, err)
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	out, err := exec.Command("pg_lsclusters", "-h").Output()
	require.NoError(t, err, "pg_lsclusters: set BATCHQ_TEST_PG_RESTART_CMD instead")
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == port {
			return fmt.Sprintf("pg_ctlcluster --skip-systemctl-redirect %s %s restart", f[0], f[1])
		}
	}
	t.Fatalf("no cluster of pg_lsclusters listens on port %s: set BATCHQ_TEST_PG_RESTART_CMD", port)
	return ""
}

// runOutage runs pools and enqueuers on dbURL, calls outage once both are
// busy, and checks that nothing was lost or duplicated. An outage that can
// calls during while the database is out of reach.
func runOutage(t *testing.T, b *testBundle, dbURL string, outage func(during func())) {
	t.Helper()
	sim, target := simulated(t, provider.Config{RequestsPerWindow: 1 << 30, TokensPerWindow: 1 << 40, Latency: 20 * time.Millisecond})
	handler, err := queue.HTTPHandler(queue.HTTPConfig{Target: target})
	require.NoError(t, err)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	newClient := func() *queue.Client {
		c, err := queue.NewClient(pgtest.Connect(t, dbURL), queue.Config{Logger: logger})
		require.NoError(t, err)
		return c
	}

	// The workers run until every job is done; they are not told to drain,
	// as the queue may look empty while the enqueuers are cut off.
	// The first pool exports metrics, as `batchq work --metrics-addr` does.
	var dbErrors atomic.Int64
	workCtx, stopWork := context.WithCancel(b.ctx)
	defer stopWork()
	var workers sync.WaitGroup
	var col *metrics.Collector
	reg := prometheus.NewRegistry()
	for w := range 2 {
		c := newClient()
		onEvent := func(e queue.Event) {
			if e.Kind == queue.EventError {
				dbErrors.Add(1)
			}
		}
		if w == 0 {
			col, err = metrics.New(metrics.Config{Client: c, Queues: []string{b.queue}, ScrapeTimeout: time.Second, Logger: logger})
			require.NoError(t, err)
			require.NoError(t, reg.Register(col))
			hook := col.OnEvent("")
			onEvent = func(e queue.Event) {
				hook(e)
				if e.Kind == queue.EventError {
					dbErrors.Add(1)
				}
			}
		}
		workers.Go(func() {
			err := c.Work(workCtx, queue.WorkerConfig{
				Queue: b.queue, Handler: handler, Concurrency: 4, Name: fmt.Sprint("pool-", w),
				PollInterval: 50 * time.Millisecond, MaintainInterval: 200 * time.Millisecond,
				OnEvent: onEvent,
			})
			if err != nil {
				t.Errorf("pool-%d: %v", w, err)
			}
		})
	}

	// Each enqueuer retries a job until it is accepted, with the same unique
	// key: an attempt whose commit went through unacknowledged makes the
	// retry a duplicate that names the job, never a second job. (The queue
	// keeps keys for an hour after their job finished, as a retry may come
	// after the job ran.)
	type accepted struct {
		key string
		id  int64
		dup bool
	}
	var (
		mu          sync.Mutex
		ok          []accepted
		failures    []error
		enqueueDone = make(chan struct{})
		enqueuers   sync.WaitGroup
	)
	successes := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ok)
	}
	for e := range 4 {
		c := newClient()
		enqueuers.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-enqueueDone:
					return
				default:
				}
				job := queue.NewJob{Queue: b.queue, Tenant: fmt.Sprint("tenant-", k%5), Cost: 10,
					Payload: []byte(`{"tokens":10}`), UniqueKey: fmt.Sprintf("e%d-%d", e, k)}
				backoff := 20 * time.Millisecond
				for {
					ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
					res, err := c.Enqueue(ctx, job)
					cancel()
					if err == nil {
						mu.Lock()
						ok = append(ok, accepted{job.UniqueKey, res.ID, res.Duplicate})
						mu.Unlock()
						break
					}
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					time.Sleep(backoff)
					backoff = min(2*backoff, 500*time.Millisecond)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}

	waitUntil(t, 60*time.Second, "100 enqueues before the outage", func() bool { return successes() >= 100 })
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.outcomes`) >= 50
	}, 60*time.Second, 20*time.Millisecond, "the workers finish jobs before the outage")
	require.Equal(t, 1.0, metricValue(t, reg, "batchq_database_up"))
	before := successes()
	upDuring := -1.0
	outage(func() {
		// A scrape while the database is out of reach says so.
		upDuring = metricValue(t, reg, "batchq_database_up")
	})
	after := successes()
	waitUntil(t, 60*time.Second, "100 more enqueues after the outage", func() bool { return successes() >= after+100 })
	close(enqueueDone)
	enqueuers.Wait()

	mu.Lock()
	keys := map[string]int64{}
	for _, a := range ok {
		_, seen := keys[a.key]
		require.False(t, seen, "key %s accepted twice", a.key)
		keys[a.key] = a.id
	}
	nFailures := len(failures)
	var sample error
	for _, err := range failures {
		require.False(t, errors.Is(err, queue.ErrInvalidJob) || errors.Is(err, queue.ErrQueueFull) || errors.Is(err, queue.ErrUnknownQueue),
			"an outage is not the caller's fault: %v", err)
		sample = err
	}
	mu.Unlock()
	require.NotZero(t, nFailures, "no enqueue met the outage")

	// The workers finish everything that was accepted.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var jobs, outcomes int64
		var states string
		err := b.pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM batchq.jobs), (SELECT count(*) FROM batchq.outcomes),
			(SELECT coalesce(string_agg(state::text || ':' || n, ' '), '') FROM (SELECT state, count(*) n FROM batchq.jobs GROUP BY state) s)`).Scan(&jobs, &outcomes, &states)
		if err == nil && jobs == 0 && outcomes == int64(len(keys)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("accepted jobs not finished after 2 minutes: %d jobs left (%s), %d outcomes of %d accepted (err %v); logs:\n%s",
				jobs, states, outcomes, len(keys), err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopWork()
	workers.Wait()

	// Every success names a job that committed, with its key, and each key
	// ended with exactly one outcome.
	ids := make([]int64, 0, len(keys))
	names := make([]string, 0, len(keys))
	dupOf := map[string]bool{}
	for _, a := range ok {
		dupOf[a.key] = a.dup
	}
	asDup := make([]bool, 0, len(keys))
	for k, id := range keys {
		ids = append(ids, id)
		names = append(names, k)
		asDup = append(asDup, dupOf[k])
	}
	var mismatched []string
	rows, err := b.pool.Query(b.ctx, `SELECT format('%s: accepted as job %s (as a duplicate: %s); outcomes with this key: %s', a.key, a.id, a.dup,
			coalesce((SELECT string_agg(format('job %s %s (%s attempts, error %L)', o.job_id, o.outcome, o.attempts, o.error), ', ')
			          FROM batchq.outcomes o WHERE o.unique_key = a.key), 'none'))
		FROM unnest($1::bigint[], $2::text[], $3::boolean[]) AS a (id, key, dup)
		WHERE NOT EXISTS (SELECT 1 FROM batchq.outcomes o
		                  WHERE o.job_id = a.id AND o.unique_key = a.key AND o.outcome = 'succeeded')`, ids, names, asDup)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		mismatched = append(mismatched, line)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, mismatched, "accepted jobs without their succeeded outcome; logs:\n%s", logs.String())
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM (SELECT unique_key FROM batchq.outcomes GROUP BY unique_key HAVING count(*) > 1) d`))

	// The outage was reported.
	require.NotZero(t, dbErrors.Load(), "no worker event reported the outage")
	require.Contains(t, logs.String(), "notifications interrupted", "the pools' logs say nothing of the outage")
	require.Positive(t, metricValue(t, reg, "batchq_worker_errors_total"), "the metrics say nothing of the outage")
	require.Equal(t, 1.0, metricValue(t, reg, "batchq_database_up"))
	if upDuring >= 0 {
		require.Zero(t, upDuring, "batchq_database_up while the database was out of reach")
	}
	dups := 0
	for _, a := range ok {
		if a.dup {
			dups++
		}
	}
	t.Logf("outage: %d jobs accepted (%d before it, %d as duplicates of a commit that was not acknowledged), %d enqueue attempts failed and were retried (e.g. %v); "+
		"%d worker errors reported; %d provider calls, most requests of one job at once: %d",
		len(keys), before, dups, nFailures, sample, dbErrors.Load(), sim.Stats().Requests, sim.MaxConcurrentPerJob())
}

// metricValue gathers reg and returns the value of the first series of the
// metric name (a gauge or a counter), or -1 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}

// waitUntil polls cond until it holds, failing the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A finish written while the database is out of reach waits for it, however
// long the outage: given up, the job would run a second time once its lease
// expired, though it did its work. The pool's retry window for a database
// that answers with an error is cut to 100 ms here, and the outage lasts ten
// of them.
func TestFinishesOutlastAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Hour})
	proxy, viaProxy := pgtest.NewProxy(t, b.pool.Config().ConnString())
	c, err := queue.NewClient(pgtest.Connect(t, viaProxy), queue.Config{})
	require.NoError(t, err)
	queue.SetFinishGiveUp(c, 100*time.Millisecond)
	b.enqueueN(t, "t", 4, 1)

	release := make(chan struct{})
	var started atomic.Int64
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	worked := make(chan error, 1)
	go func() {
		worked <- c.Work(ctx, queue.WorkerConfig{
			Queue: b.queue, Concurrency: 4, PollInterval: 50 * time.Millisecond, MaintainInterval: 200 * time.Millisecond,
			Handler: func(context.Context, *queue.Job) (queue.Result, error) {
				started.Add(1)
				<-release
				return queue.Result{}, nil
			},
		})
	}()
	waitUntil(t, 10*time.Second, "the four jobs running", func() bool { return started.Load() == 4 })
	proxy.Cut()
	close(release)
	time.Sleep(time.Second)
	proxy.Restore()
	waitUntil(t, 20*time.Second, "the four finishes written", func() bool {
		var n int64
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`).Scan(&n))
		return n == 4
	})
	var runs int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT sum(attempts) FROM batchq.outcomes`).Scan(&runs))
	require.Equal(t, int64(4), runs, "each job ran once")
	require.Equal(t, int64(4), started.Load())
	stop()
	require.NoError(t, <-worked)
}
