package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// drrInvariants are what must hold of the queue's tables in every committed
// state, whatever ran concurrently; each query counts the rows that break
// its rule. They follow from db/functions: every writer of a
// tenant's queued keys (enqueue, requeue, apply_adjustments, rekey) holds
// the tenant's ring row, and writes the jobs and the ring row in one
// transaction; claims only take jobs off the head.
// effectiveCum is each queued job with its cum as if the pending ledger
// adjustments about jobs before it were folded.
const effectiveCum = `SELECT j.queue, j.tenant, j.seq, j.cost,
	j.cum + coalesce((SELECT sum(a.delta) FROM batchq.ledger_adjustments a
	                  WHERE a.queue = j.queue AND a.tenant = j.tenant AND a.pos = j.pos AND a.after_seq < j.seq), 0) AS cum
	FROM batchq.jobs j WHERE j.state = 'queued'`

var drrInvariants = []struct{ rule, sql string }{
	{"no job is both unfinished and finished",
		`SELECT count(*) FROM batchq.jobs j JOIN batchq.outcomes o ON o.job_id = j.id`},
	{"a queued job is keyed in its tenant's current membership: the ring's position, and the round its cumulative cost falls in",
		`SELECT count(*) FROM batchq.jobs j
		 LEFT JOIN batchq.tenant_ring r ON r.queue = j.queue AND r.tenant = j.tenant
		 WHERE j.state = 'queued'
		   AND (r.tenant IS NULL OR j.pos <> r.pos OR j.round <> batchq.drr_round(r.join_round, j.cum, r.share))`},
	// The ledger as if every pending adjustment were folded (a fold may leave
	// the part about jobs deep in a backlog pending): a job's cum plus the
	// adjustments about jobs before it, the ring's plus all of them.
	{"the ring's counters cover its queued jobs: enq_seq >= every seq, cum >= every cum, and cum is that of the newest job while it is queued",
		`SELECT count(*) FROM (SELECT r.queue, r.tenant, r.enq_seq,
		         r.cum + coalesce((SELECT sum(a.delta) FROM batchq.ledger_adjustments a
		                           WHERE a.queue = r.queue AND a.tenant = r.tenant AND a.pos = r.pos), 0) AS cum
		       FROM batchq.tenant_ring r) r
		 JOIN (SELECT queue, tenant, max(seq) AS seq, max(cum) AS cum FROM (` + effectiveCum + `) e
		       GROUP BY queue, tenant) m ON m.queue = r.queue AND m.tenant = r.tenant
		 WHERE r.enq_seq < m.seq OR r.cum < m.cum OR (r.enq_seq = m.seq AND r.cum <> m.cum)`},
	{"a tenant's queued jobs have distinct seqs, and each one's cumulative cost exceeds the one before by at least its cost",
		`SELECT count(*) FROM (
		   SELECT j.cost, j.cum - lag(j.cum) OVER w AS step, j.seq = lag(j.seq) OVER w AS same
		   FROM (` + effectiveCum + `) j
		   WINDOW w AS (PARTITION BY j.queue, j.tenant ORDER BY j.seq)) s
		 WHERE s.step < s.cost OR s.same`},
	{"tenants with queued jobs hold distinct ring positions, in all queues together, none of them 0",
		`SELECT count(*) FROM (
		   SELECT r.pos FROM batchq.tenant_ring r
		   WHERE EXISTS (SELECT 1 FROM batchq.jobs j WHERE j.queue = r.queue AND j.tenant = r.tenant AND j.state = 'queued')
		   GROUP BY r.pos HAVING count(*) > 1 OR r.pos = 0) d`},
	{"a job's lease fields match its state, and its attempts stay within its maximum",
		`SELECT count(*) FROM batchq.jobs j
		 WHERE NOT CASE j.state
		   WHEN 'queued'   THEN j.lease_token IS NULL AND j.run_after IS NULL
		   WHEN 'running'  THEN j.lease_token IS NOT NULL AND j.lease_expires_at IS NOT NULL AND j.worker IS NOT NULL
		   WHEN 'retrying' THEN j.lease_token IS NULL AND j.run_after IS NOT NULL END
		   OR j.attempt < 0 OR j.attempt > j.max_attempts`},
	{"an outcome's attempts stay within its maximum, and a succeeded job was claimed",
		`SELECT count(*) FROM batchq.outcomes o
		 WHERE o.attempts > o.max_attempts
		    OR (o.outcome = 'succeeded' AND (o.attempts < 1 OR o.first_claimed_at IS NULL))`},
}

// checkInvariants returns the rules the database breaks now.
func checkInvariants(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var broken []string
	for _, inv := range drrInvariants {
		var n int64
		if err := pool.QueryRow(ctx, inv.sql).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s: %w", inv.rule, err)
		}
		if n > 0 {
			broken = append(broken, fmt.Sprintf("%s: %d rows break it", inv.rule, n))
		}
	}
	return broken, nil
}

// requireInvariants fails t unless the DRR state keeps every rule of
// drrInvariants.
func requireInvariants(t testing.TB, ctx context.Context, pool *pgxpool.Pool, msgAndArgs ...any) {
	t.Helper()
	broken, err := checkInvariants(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, broken, msgAndArgs...)
}

// TestConcurrentEnqueueClaimAndMaintenance runs eight enqueuers, eight
// claimers, maintenance, cancellations, weight and quantum changes at once.
// Claimers complete jobs (with actual costs unlike their estimates), fail
// them (to retry), release them and let short deadlines pass. While it runs
// and after: no job is claimed twice at once, no lease is lost, a bounded
// tenant never has more queued jobs than its bound and is refused only when
// the jobs would not fit, the DRR state is consistent (drrInvariants), and
// every job ends with exactly one outcome that matches what was done to it.
func TestConcurrentEnqueueClaimAndMaintenance(t *testing.T) {
	t.Parallel()
	const (
		bound     = 8
		enqueuers = 8
		claimers  = 8
		batches   = 120 // per enqueuer
	)
	b := setup(t, queue.QueueConfig{Quantum: 100, Lease: 5 * time.Minute, MaxAttempts: 3})
	bounded := []string{"bounded-0", "bounded-1", "bounded-2"}
	mixed := make([]string, 9)
	for i := range mixed {
		mixed[i] = fmt.Sprint("mixed-", i)
	}
	for _, name := range bounded {
		// A small weight makes them wait, so their backlogs reach the bound.
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: name, Weight: 0.2, MaxQueued: bound}))
	}
	var prefill []queue.NewJob
	for _, name := range bounded {
		for range bound {
			prefill = append(prefill, queue.NewJob{Queue: b.queue, Tenant: name, Cost: 100})
		}
	}
	res, err := b.client.EnqueueMany(b.ctx, prefill)
	require.NoError(t, err)
	url := b.pool.Config().ConnString()

	var (
		mu        sync.Mutex
		enqueued  = map[int64]bool{}
		live      sync.Map // job id -> claimer: a second claim while held is a double claim
		succeeded atomic.Int64
		failed    atomic.Int64
		cancelled atomic.Int64
		retried   atomic.Int64
		released  atomic.Int64
		refused   atomic.Int64
		// told: job id -> the outcome its finisher or canceller was told it
		// has; stopping: jobs a cancel found running, which end as told or
		// as 'cancelled'.
		told, stopping sync.Map
		// Claimers start once a bounded tenant was refused (they start full,
		// and nothing drains them before), so the bound is exercised under
		// load whatever the machine's speed; or once enqueuing ends.
		firstRefusal = make(chan struct{})
		refusedOnce  sync.Once
	)
	for _, r := range res {
		enqueued[r.ID] = true
	}
	var enqueuing sync.WaitGroup
	enqueueDone := make(chan struct{})
	for e := range enqueuers {
		c := fleetClient(t, url)
		rng := rand.New(rand.NewPCG(uint64(e), 1))
		enqueuing.Go(func() {
			n := batches
			if e < 2 {
				n *= 3
			}
			for range n {
				var jobs []queue.NewJob
				if e < 2 {
					// Two enqueuers push the bounded tenants past their bound.
					tenant := bounded[rng.IntN(len(bounded))]
					for range 1 + rng.IntN(3) {
						jobs = append(jobs, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: 1 + rng.Int64N(300)})
					}
				} else {
					for range 1 + rng.IntN(5) {
						j := queue.NewJob{Queue: b.queue, Tenant: mixed[rng.IntN(len(mixed))], Cost: 1 + rng.Int64N(500)}
						if rng.IntN(10) == 0 {
							j.TTL = time.Duration(100+rng.IntN(900)) * time.Millisecond // may expire while queued
						}
						jobs = append(jobs, j)
					}
				}
				res, err := c.EnqueueMany(b.ctx, jobs)
				var full *queue.QueueFullError
				switch {
				case errors.As(err, &full):
					refused.Add(1)
					refusedOnce.Do(func() { close(firstRefusal) })
					if full.Queued > full.Bound || full.Queued+full.Adding <= full.Bound {
						t.Errorf("refused %d jobs with %d of %d queued: they fit", full.Adding, full.Queued, full.Bound)
					}
				case err != nil:
					t.Error(err)
					return
				default:
					mu.Lock()
					for _, r := range res {
						enqueued[r.ID] = true
					}
					mu.Unlock()
				}
			}
		})
	}
	go func() { enqueuing.Wait(); close(enqueueDone) }()

	// Background churn: maintenance, cancellations, weight and quantum
	// changes, and a watch over the bounds and invariants. Each call runs
	// under the test's context, not churnCtx, which only ends the loops: a
	// call cancelled midway can fail in the client while its statement
	// still runs on the server, holding locks past churn.Wait() (the quiet
	// pass below then passed over their tenants), or after it committed (a
	// cancel that took effect, read as failed).
	churnCtx, stopChurn := context.WithCancel(b.ctx)
	var churn sync.WaitGroup
	every := func(d time.Duration, f func()) {
		churn.Go(func() {
			for churnCtx.Err() == nil {
				f()
				select {
				case <-churnCtx.Done():
				case <-time.After(d):
				}
			}
		})
	}
	maint := fleetClient(t, url)
	every(20*time.Millisecond, func() {
		if _, err := maint.Maintain(b.ctx, b.queue); err != nil {
			t.Error(err)
		}
	})
	every(10*time.Millisecond, func() {
		var id int64
		err := b.pool.QueryRow(b.ctx, `SELECT id FROM batchq.jobs WHERE state <> 'running' AND tenant LIKE 'mixed-%'
			ORDER BY random() LIMIT 1`).Scan(&id)
		if err != nil {
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Error(err)
			}
			return
		}
		switch st, err := b.client.CancelJob(b.ctx, id, "concurrency test"); {
		case err == nil && st.Stopping == 1: // claimed meanwhile: asked to stop
			stopping.Store(id, true)
		case err == nil:
			cancelled.Add(1)
			told.Store(id, "cancelled")
		case errors.Is(err, queue.ErrNotFound): // claimed, expired or finished meanwhile
		default:
			t.Error(err)
		}
	})
	weights := []float64{0.5, 1, 2, 3}
	rngW := rand.New(rand.NewPCG(99, 1))
	every(30*time.Millisecond, func() {
		err := b.client.SetTenant(b.ctx, queue.Tenant{Name: mixed[rngW.IntN(len(mixed))], Weight: weights[rngW.IntN(len(weights))]})
		if err != nil {
			t.Error(err)
		}
	})
	checks, maxQueued := atomic.Int64{}, atomic.Int64{}
	every(100*time.Millisecond, func() {
		var worst int64
		if err := b.pool.QueryRow(b.ctx, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM batchq.jobs
			WHERE state = 'queued' AND tenant = ANY ($1) GROUP BY tenant) c`, bounded).Scan(&worst); err != nil {
			t.Error(err)
			return
		}
		if worst > bound {
			t.Errorf("a bounded tenant has %d queued jobs (bound %d)", worst, bound)
		}
		maxQueued.Store(max(maxQueued.Load(), worst))
		broken, err := checkInvariants(b.ctx, b.pool)
		if err != nil {
			t.Error(err)
			return
		}
		for _, s := range broken {
			t.Errorf("while running: %s", s)
		}
		checks.Add(1)
	})

	// Claimers: bounded tenants' jobs are completed (so nothing requeues them
	// past their bound); the others are completed, failed or released.
	var claiming sync.WaitGroup
	for w := range claimers {
		c := fleetClient(t, url)
		rng := rand.New(rand.NewPCG(uint64(w), 2))
		name := fmt.Sprint("claimer-", w)
		claiming.Go(func() {
			select {
			case <-firstRefusal:
			case <-enqueueDone:
			}
			for {
				jobs, err := c.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1 + rng.IntN(4), Worker: name})
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					select {
					case <-enqueueDone:
						var left int64
						if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM batchq.jobs`).Scan(&left); err != nil {
							t.Error(err)
							return
						}
						if left == 0 {
							return
						}
					default:
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				for _, j := range jobs {
					if other, held := live.LoadOrStore(j.ID, name); held {
						t.Errorf("job %d claimed by %s while %s held it", j.ID, name, other)
					}
				}
				for _, j := range jobs {
					// Forget the claim before finishing: until this commits
					// nobody else can hold the job, and afterwards anybody may.
					live.Delete(j.ID)
					action := rng.IntN(10)
					if j.Tenant[0] == 'b' {
						action = 0
					}
					switch {
					case action < 6:
						err = c.Complete(b.ctx, j, queue.Result{ActualCost: max(1, j.Cost+rng.Int64N(200)-100)})
						if err == nil {
							succeeded.Add(1)
							told.Store(j.ID, "succeeded")
						}
					case action < 9:
						var retrying bool
						retrying, err = c.Fail(b.ctx, j, errors.New("concurrency test"), &queue.FailOpts{RetryIn: time.Millisecond})
						if err == nil && retrying {
							retried.Add(1)
						} else if err == nil {
							failed.Add(1)
							told.Store(j.ID, "failed")
						}
					default:
						err = c.Release(b.ctx, j, 0)
						if err == nil {
							released.Add(1)
						}
					}
					if err != nil {
						t.Errorf("finishing job %d: %v", j.ID, err) // ErrLeaseLost would mean a double claim
					}
				}
			}
		})
	}

	done := make(chan struct{})
	go func() { claiming.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the claimers did not drain the queue in 5 minutes")
	}
	stopChurn()
	churn.Wait()
	require.False(t, t.Failed())

	// Quiet now: one more pass folds every pending ledger adjustment.
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	requireInvariants(t, b.ctx, b.pool)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`), "adjustments left unapplied")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))

	// Every job enqueued ended with one outcome, and the outcomes match what
	// the claimers and cancellers were told.
	ids := make([]int64, 0, len(enqueued))
	for id := range enqueued {
		ids = append(ids, id)
	}
	require.Equal(t, int64(len(ids)), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = ANY ($1)`, ids))
	require.Equal(t, int64(len(ids)), b.scalar(t, `SELECT count(*) FROM batchq.outcomes`))
	count := func(outcome string) int64 {
		return b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = $1`, outcome)
	}
	// A job a cancel asked to stop while it ran ends as 'cancelled' when its
	// run fails or is handed back, or as its finisher was told.
	type outcome struct {
		id                   int64
		outcome, worker, err string
		attempts             int
	}
	rows, err := b.pool.Query(b.ctx, `SELECT job_id, outcome::text, coalesce(worker, ''), coalesce(error, ''), attempts
		FROM batchq.outcomes ORDER BY job_id`)
	require.NoError(t, err)
	outcomes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (o outcome, err error) {
		return o, r.Scan(&o.id, &o.outcome, &o.worker, &o.err, &o.attempts)
	})
	require.NoError(t, err)
	for _, o := range outcomes {
		want := "expired"
		if w, ok := told.Load(o.id); ok {
			want = w.(string)
		}
		_, asked := stopping.Load(o.id)
		if asked && o.outcome == "cancelled" || o.outcome == want {
			continue
		}
		t.Errorf("job %d ended %s, told %s (asked to stop while running: %t; attempts %d, worker %q, error %q)",
			o.id, o.outcome, want, asked, o.attempts, o.worker, o.err)
	}
	require.False(t, t.Failed())
	require.LessOrEqual(t, cancelled.Load(), count("cancelled"))
	require.NotZero(t, refused.Load(), "the bounded tenants were never refused")
	require.Positive(t, checks.Load())
	t.Logf("concurrency: %d jobs: %d succeeded, %d failed (%d retries), %d cancelled, %d expired, %d released; "+
		"%d enqueues refused as full (most queued by a bounded tenant: %d of %d); invariants held at %d checks while running",
		len(ids), succeeded.Load(), failed.Load(), retried.Load(), cancelled.Load(), count("expired"), released.Load(),
		refused.Load(), maxQueued.Load(), bound, checks.Load())
}

// Two bulk enqueues for tenants of their own that share unique keys, listed
// in opposite orders, never deadlock: keyed jobs go in in key order.
func TestEnqueuesSharingKeysInOppositeOrdersNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	const n = 200
	for round := range 10 {
		jobs := func(tenant string, reversed bool) []queue.NewJob {
			out := make([]queue.NewJob, n)
			for i := range out {
				k := i
				if reversed {
					k = n - 1 - i
				}
				out[i] = queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: 1, UniqueKey: fmt.Sprintf("r%d-k%d", round, k)}
			}
			return out
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, tenant := range []string{"x", "y"} {
			wg.Go(func() {
				<-start
				_, errs[i] = b.client.EnqueueMany(b.ctx, jobs(tenant, i == 1))
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err, "round %d", round)
		}
		require.Equal(t, int64(n*(round+1)), b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "each key once")
	}
}

// Keys of lines to run later are taken in the same order as the others':
// two calls for tenants of their own share keys, one key runs now in one
// call and later in the other, and neither deadlocks. The first call is
// held between its keys by a third transaction, so the second call takes
// its turn exactly there.
func TestEnqueuesSharingKeysOfScheduledLinesNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	line := func(tenant, key string, later bool) queue.NewJob {
		j := queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: 1, UniqueKey: key}
		if later {
			j.Delay = time.Hour
		}
		return j
	}
	// The holder has k2, which the first call waits for after taking k1.
	holder, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(b.ctx) }()
	_, err = b.client.EnqueueTx(b.ctx, holder, line("z0", "k2", false))
	require.NoError(t, err)

	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, errs[0] = b.client.EnqueueMany(b.ctx, []queue.NewJob{
			line("z1", "k1", false), line("z1", "k2", true), line("z1", "k3", true)})
	})
	waitForLockWaiters(t, b, 1)
	// k3 runs now here and later in the first call; k1 the other way round.
	wg.Go(func() {
		_, errs[1] = b.client.EnqueueMany(b.ctx, []queue.NewJob{line("z2", "k3", false), line("z2", "k1", true)})
	})
	waitForLockWaiters(t, b, 2)
	require.NoError(t, holder.Rollback(b.ctx))
	wg.Wait()
	require.NoError(t, errs[0], "first call")
	require.NoError(t, errs[1], "second call")
	require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'z1'`),
		"the first call holds every key")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'z2'`), "the second call's are duplicates")
	require.Equal(t, int64(2), b.scalar(t, `SELECT scheduled FROM batchq.tenant_ring WHERE tenant = 'z1'`))
}

// waitForLockWaiters waits until n sessions of the test's database wait on a
// lock.
func waitForLockWaiters(t *testing.T, b *testBundle, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var got int
		err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		return err == nil && got >= n
	}, 10*time.Second, 5*time.Millisecond)
}

func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

// EnqueueMany locks ring rows queue by queue in name order, whatever order
// its jobs name the queues in, as a weight change's re-key does: two calls
// naming the same tenant's queues in different orders, or one call and a
// weight change, never deadlock.
func TestEnqueueManyAcrossQueuesLocksInOneOrder(t *testing.T) {
	t.Parallel()
	for _, other := range []string{"SetTenant", "EnqueueMany"} {
		t.Run(other, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Name: "qa"})
			require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "qb"}))
			// Queued jobs of T in both queues, so SetTenant re-keys both.
			_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{
				{Queue: "qa", Tenant: "T", Cost: 10}, {Queue: "qb", Tenant: "T", Cost: 10}})
			require.NoError(t, err)

			// Another transaction (an enqueue, a requeue, a re-key) holds T's
			// ring row in qb for a moment; a plain row lock stands in for it
			// so that the waiters queue up on the row in a known order.
			hold, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer hold.Rollback(b.ctx)
			_, err = hold.Exec(b.ctx, `SELECT 1 FROM batchq.tenant_ring WHERE queue = 'qb' AND tenant = 'T' FOR UPDATE`)
			require.NoError(t, err)

			errs := make(chan error, 2)
			go func() { // names qb first, then qa
				_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{
					{Queue: "qb", Tenant: "T", Cost: 10}, {Queue: "qa", Tenant: "T", Cost: 10}})
				errs <- err
			}()
			waitForLockWaiters(t, b, 1)
			go func() {
				if other == "SetTenant" { // locks (qa,T) then (qb,T)
					errs <- b.client.SetTenant(b.ctx, queue.Tenant{Name: "T", Weight: 2})
					return
				}
				_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{ // names qa first
					{Queue: "qa", Tenant: "T", Cost: 10}, {Queue: "qb", Tenant: "T", Cost: 10}})
				errs <- err
			}()
			waitForLockWaiters(t, b, 2)
			require.NoError(t, hold.Commit(b.ctx))
			for range 2 {
				err := <-errs
				require.False(t, isDeadlock(err), "deadlock: %v", err)
				require.NoError(t, err)
			}
		})
	}
}

// Requeue passes over a tenant whose ring row an open enqueue holds, without
// waiting, so maintenance (which every worker runs) never hangs on an
// application transaction.
func TestOpenEnqueueNeverBlocksRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueueN(t, "busy", 2, 10)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Release(b.ctx, jobs[0], 0)) // due at once

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "busy", Cost: 10})
	require.NoError(t, err)

	// As TestOpenEnqueueTransactionNeverBlocksClaims: a client that fails
	// instead of waiting for a lock.
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "500ms"
	impatient, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	defer impatient.Close()
	other, err := queue.NewClient(impatient, queue.Config{})
	require.NoError(t, err)
	st, err := other.Maintain(b.ctx, b.queue)
	require.NoError(t, err, "maintenance waited for the open enqueue transaction")
	require.Zero(t, st.Requeued)
}

// A line whose unique key another transaction takes while this enqueue runs
// is a duplicate, and its cost is not charged: the tenant's later lines, and
// its ledger, count only the jobs it has.
func TestConcurrentDuplicateKeyIsNotCharged(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 10, UniqueKey: "K"})
	require.NoError(t, err)

	done := make(chan error, 1)
	var res []queue.Enqueued
	go func() {
		var err error
		res, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{
			{Queue: b.queue, Tenant: "b", Cost: 5000, UniqueKey: "K"},
			{Queue: b.queue, Tenant: "b", Cost: 100},
		})
		done <- err
	}()
	waitForLockWaiters(t, b, 1)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	require.True(t, res[0].Duplicate)
	require.False(t, res[1].Duplicate)
	cum := b.scalar(t, `SELECT cum FROM batchq.jobs WHERE id = $1`, res[1].ID)
	ring := b.scalar(t, `SELECT cum FROM batchq.tenant_ring WHERE tenant = 'b'`)
	round := b.scalar(t, `SELECT round FROM batchq.jobs WHERE id = $1`, res[1].ID)
	require.Equal(t, int64(100), cum, "b's only job; ring ledger %d; keyed in round %d", ring, round)
}

// An open enqueue holds up the retries of its own tenant only: when the due
// retries maintenance takes first (a full batch of them) all belong to that
// tenant, it looks past them and requeues the other tenants' retries.
func TestOpenEnqueueHoldsUpOnlyItsOwnTenantsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 5000})
	b.enqueueN(t, "busy", 1000, 1)
	b.enqueue(t, "other", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1001})
	require.NoError(t, err)
	require.Len(t, jobs, 1001)
	// Every lease lost; busy's retries fall due first.
	b.exec(t, `UPDATE batchq.jobs SET state = 'retrying', lease_token = NULL, lease_expires_at = NULL, worker = NULL,
		run_after = now() - CASE WHEN tenant = 'busy' THEN interval '1 minute' ELSE interval '1 second' END`)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "busy", Cost: 1})
	require.NoError(t, err)

	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Requeued, "other's retry")
	require.Equal(t, "other", tenantsOf(b.drainOrder(t, 5))[0])
	require.NoError(t, tx.Commit(b.ctx))
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1000, st.Requeued, "busy's retries, once its enqueue committed")
}
