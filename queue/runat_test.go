package queue_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/drr"
	"github.com/batchq/batchq/queue"
)

// maintainAt runs one maintenance pass as of t.
func (b *testBundle) maintainAt(t *testing.T, at time.Time) queue.MaintainStats {
	t.Helper()
	queue.SetMaintenanceClock(b.client, func() time.Time { return at })
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	return st
}

func (b *testBundle) state(t *testing.T, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT state::text FROM batchq.jobs WHERE id = $1`, id).Scan(&s))
	return s
}

// A job to run at T waits 'scheduled': a maintenance pass one millisecond
// before T leaves it there, and no claim sees it; the pass at T moves it to
// the end of its tenant's queue as a job enqueued then, and claims serve it
// in the order drr gives a job enqueued at that moment.
func TestRunAtJobIsNotClaimedEarlyAndJoinsTheFairOrderWhenDue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100, MaxPerTenant: 100})
	model, err := drr.New[int64](drr.Config{Quantum: 100, MaxPerTenant: 100})
	require.NoError(t, err)
	now := time.Now()
	runAt := now.Add(time.Hour).Truncate(time.Millisecond)

	ids := map[int64]int64{}
	next := int64(0)
	enqueueBoth := func(tenant string, cost int64) {
		res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: cost})
		require.NoError(t, err)
		require.NoError(t, model.EnqueueAt(now, drr.Job[int64]{Tenant: tenant, Cost: cost, Value: next}))
		ids[next] = res.ID
		next++
	}
	claimBoth := func(what string) {
		t.Helper()
		want, ok := model.DequeueAt(now, nil)
		got, err := b.client.Claim(b.ctx, b.queue, nil)
		require.NoError(t, err)
		if !ok {
			require.Empty(t, got, what)
			return
		}
		require.Len(t, got, 1, what)
		require.Equal(t, ids[want.Value], got[0].ID, "%s: model served %s cost %d, queue %s cost %d",
			what, want.Tenant, want.Cost, got[0].Tenant, got[0].Cost)
		require.NoError(t, b.client.Complete(b.ctx, got[0], queue.Result{}))
	}

	for i := range 6 {
		enqueueBoth("a", 40+int64(i)*10)
		enqueueBoth("b", 70)
	}
	// Scheduled before a's and b's backlog drains: c's job, a tenant with
	// nothing else, and one more of a's.
	late := make([]int64, 0, 2)
	for _, tenant := range []string{"c", "a"} {
		res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: 60, RunAt: runAt})
		require.NoError(t, err)
		require.Equal(t, "scheduled", b.state(t, res.ID))
		late = append(late, res.ID)
	}
	for i := range 4 {
		claimBoth(fmt.Sprint("claim ", i))
	}

	st := b.maintainAt(t, runAt.Add(-time.Millisecond))
	require.Zero(t, st.Requeued)
	for _, id := range late {
		require.Equal(t, "scheduled", b.state(t, id), "one millisecond early")
	}
	for i := range 3 {
		claimBoth(fmt.Sprint("claim before the run-at ", i))
	}

	st = b.maintainAt(t, runAt)
	require.Equal(t, 2, st.Requeued)
	for _, id := range late {
		got, err := b.client.JobInfo(b.ctx, id)
		require.NoError(t, err)
		require.True(t, got.EnqueuedAt.Equal(runAt), "counted as enqueued at its run-at: %s", got.EnqueuedAt)
	}
	// As drr would have them: enqueued now, in the order they were due (by
	// id at the same time).
	for i, tenant := range []string{"c", "a"} {
		require.NoError(t, model.EnqueueAt(now, drr.Job[int64]{Tenant: tenant, Cost: 60, Value: next}))
		ids[next] = late[i]
		next++
	}
	for model.Len() > 0 {
		claimBoth("drain")
	}
	claimBoth("empty")
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = ANY ($1)
	                                      AND outcome = 'succeeded'`, late))
}

// A tenant's scheduled jobs count toward its bound, so promoting them never
// takes it past the bound.
func TestScheduledJobsCountTowardTheTenantsBound(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 3})
	runAt := time.Now().Add(time.Hour)
	b.enqueue(t, "a", 10)
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 10, RunAt: runAt})
	require.NoError(t, err)
	_, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{
		{Queue: b.queue, Tenant: "a", Cost: 10, Delay: 2 * time.Hour},
		{Queue: b.queue, Tenant: "b", Cost: 10, Delay: 2 * time.Hour},
	})
	require.NoError(t, err)

	for _, j := range []queue.NewJob{
		{Queue: b.queue, Tenant: "a", Cost: 10},
		{Queue: b.queue, Tenant: "a", Cost: 10, RunAt: runAt},
	} {
		_, err = b.client.Enqueue(b.ctx, j)
		var full *queue.QueueFullError
		require.ErrorAs(t, err, &full)
		require.Equal(t, 3, full.Queued, "queued and scheduled")
		require.Equal(t, 3, full.Bound)
	}
	// The SQL API counts them alike.
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job(queue => 'q', tenant => 'a', cost => 1)`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "BQ200", pe.Code)

	b.maintainAt(t, runAt.Add(3*time.Hour))
	require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'a' AND state = 'queued'`))
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 10})
	require.ErrorIs(t, err, queue.ErrQueueFull)
	b.drainOrder(t, 10)
	b.enqueue(t, "a", 10)

	// The queued span overstates a tenant whose middle job went: counted
	// exactly, one scheduled job and two queued leave room for one more.
	c := setup(t, queue.QueueConfig{MaxPerTenant: 4})
	ids := []int64{c.enqueue(t, "a", 1), c.enqueue(t, "a", 1), c.enqueue(t, "a", 1)}
	require.NoError(t, c.client.Cancel(c.ctx, ids[1], ""))
	_, err = c.client.Enqueue(c.ctx, queue.NewJob{Queue: c.queue, Tenant: "a", Cost: 1, Delay: time.Hour})
	require.NoError(t, err)
	c.enqueue(t, "a", 1)
	_, err = c.client.Enqueue(c.ctx, queue.NewJob{Queue: c.queue, Tenant: "a", Cost: 1, Delay: time.Hour})
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, 4, full.Queued)

	// Cancelled and expired scheduled jobs free their room: the count the
	// ring keeps stays high until an enqueue finds the tenant looking full,
	// counts, and mends it.
	d := setup(t, queue.QueueConfig{MaxPerTenant: 3})
	var sched []int64
	for range 3 {
		res, err := d.client.Enqueue(d.ctx, queue.NewJob{Queue: d.queue, Tenant: "a", Cost: 1, Delay: time.Hour})
		require.NoError(t, err)
		sched = append(sched, res.ID)
	}
	_, err = d.client.Enqueue(d.ctx, queue.NewJob{Queue: d.queue, Tenant: "a", Cost: 1})
	require.ErrorIs(t, err, queue.ErrQueueFull)
	require.NoError(t, d.client.Cancel(d.ctx, sched[0], ""))
	d.exec(t, `UPDATE batchq.jobs SET deadline = now() - interval '1 second' WHERE id = $1`, sched[1])
	_, err = d.client.Maintain(d.ctx, d.queue)
	require.NoError(t, err)
	require.Equal(t, int64(3), d.scalar(t, `SELECT scheduled FROM batchq.tenant_ring WHERE tenant = 'a'`), "left high")
	d.enqueue(t, "a", 1)
	require.Equal(t, int64(1), d.scalar(t, `SELECT scheduled FROM batchq.tenant_ring WHERE tenant = 'a'`), "mended")
	d.enqueue(t, "a", 1)
	_, err = d.client.Enqueue(d.ctx, queue.NewJob{Queue: d.queue, Tenant: "a", Cost: 1, Delay: time.Hour})
	require.ErrorIs(t, err, queue.ErrQueueFull)
}

// Run-at rules, alike from Go and from SQL: the deadline must come after the
// run-at; run_at and delay are alternatives; a delay is not negative. A TTL
// counts from the run-at, and a job without a deadline gets the queue's TTL
// after its run-at.
func TestRunAtRules(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{DefaultTTL: time.Hour})
	runAt := time.Now().Add(24 * time.Hour).Truncate(time.Microsecond)
	for _, c := range []struct {
		name  string
		job   queue.NewJob
		sql   string
		field string
		rule  string
	}{
		{"deadline before run_at", queue.NewJob{RunAt: runAt, Deadline: runAt.Add(-time.Minute)},
			`deadline => now() + interval '1 hour', run_at => now() + interval '2 hours'`, "deadline", "must be after run_at"},
		{"deadline at run_at", queue.NewJob{RunAt: runAt, Deadline: runAt},
			`deadline => now() + interval '1 hour', delay => '1 hour'`, "deadline", "must be after run_at"},
		{"both", queue.NewJob{RunAt: runAt, Delay: time.Minute},
			`run_at => now() + interval '1 hour', delay => '1 hour'`, "run_at", "give a run_at or a delay, not both"},
		{"negative delay", queue.NewJob{Delay: -time.Second},
			`delay => '-1 second'`, "delay", "must be >= 0 (got -1s)"},
		{"run_at past year 9999", queue.NewJob{RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
			`run_at => '10000-01-01T00:00:00Z'`, "run_at", "must be before year 10000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := c.job
			j.Queue, j.Tenant, j.Cost = b.queue, "a", 1
			_, err := b.client.Enqueue(b.ctx, j)
			var inv *queue.InvalidJobError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, c.field, inv.Field)
			require.Contains(t, inv.Rule, c.rule)

			_, err = b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job(queue => 'q', tenant => 'a', cost => 1, `+c.sql+`)`)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "BQ103", pe.Code)
			require.Equal(t, c.field, pe.ColumnName)
			require.Contains(t, pe.Message, c.rule)
		})
	}
	// Intervals of parts with different signs compare as positive but may
	// land before the time they are added to; Go's durations cannot mix.
	for _, c := range []struct{ job, json, field, got string }{
		{`ttl => '-10 mon 300 days 1 second'`, `{"ttl": "-10 mon 300 days 1 second"}`, "ttl", "-10 mons +300 days 00:00:01"},
		{`ttl => '1 day -86399 seconds', delay => '1 day'`, `{"ttl": "1 day -86399 seconds", "delay": "1 day"}`, "ttl", "1 day -23:59:59"},
		{`delay => '-1 mon 31 days'`, `{"delay": "-1 mon 31 days"}`, "delay", "-1 mons +31 days"},
	} {
		for _, call := range []string{
			`SELECT * FROM batchq.enqueue_job(queue => 'q', tenant => 'a', cost => 1, ` + c.job + `)`,
			`SELECT * FROM batchq.enqueue_jobs('q', jsonb_build_array('{"tenant": "a", "cost": 1}'::jsonb || '` + c.json + `'))`,
		} {
			_, err := b.pool.Exec(b.ctx, call)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe, call)
			require.Equal(t, "BQ103", pe.Code, call)
			require.Equal(t, c.field, pe.ColumnName, call)
			require.Contains(t, pe.Message, "must not mix positive and negative parts", call)
			require.Contains(t, pe.Message, "(got "+c.got+")", call)
		}
	}
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "nothing written")

	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 1, RunAt: runAt, TTL: 2 * time.Hour})
	require.NoError(t, err)
	got, err := b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "scheduled", got.State)
	require.True(t, got.Deadline.Equal(runAt.Add(2*time.Hour)), "ttl from the run-at: %s", got.Deadline)
	require.True(t, got.RunAfter.Equal(runAt))
	res, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 1, RunAt: runAt})
	require.NoError(t, err)
	got, err = b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.True(t, got.Deadline.Equal(runAt.Add(time.Hour)), "the queue's TTL from the run-at: %s", got.Deadline)
	// A run-at at the end of year 9999: the queue's TTL would take its
	// deadline past the last instant a deadline may have, which it keeps.
	last := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	res, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 1, RunAt: last})
	require.NoError(t, err)
	got, err = b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.True(t, got.Deadline.After(last) && got.Deadline.Year() == 9999, "deadline %s", got.Deadline)
	_, err = b.client.CancelJob(b.ctx, res.ID, "test")
	require.NoError(t, err)
	// A run-at already passed runs now.
	res, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 1, RunAt: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, "queued", b.state(t, res.ID))
	// And from SQL, the same fields in JSON.
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM batchq.enqueue_jobs('q',
		'[{"tenant":"b","cost":1,"delay":"1 hour"},{"tenant":"b","cost":1,"run_at":"2099-01-01T00:00:00Z"},
		  {"tenant":"b","cost":1,"delay":0}]')`).Scan(&n))
	require.Equal(t, int64(3), n)
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'b' AND state = 'scheduled'`))
	// A run_at of Go's zero time is none, as in the Go client: beside a
	// delay, the delay says when.
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM batchq.enqueue_jobs('q',
		'[{"tenant":"z","cost":1,"run_at":"0001-01-01T00:00:00Z","delay":"1 hour"}]')`).Scan(&n))
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job(queue => 'q', tenant => 'z', cost => 1,
		run_at => '0001-01-01T00:00:00Z', delay => '1 hour')`)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'z' AND state = 'scheduled'
		AND run_after BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'`))
}

// A retry waits out its backoff the way a scheduled job waits for its
// run-at: in run_after, promoted by the same maintenance step.
func TestRetryBackoffWaitsAsARunAtDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "a", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	retrying, err := b.client.Fail(b.ctx, jobs[0], errors.New("boom"), &queue.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.True(t, retrying)
	got, err := b.client.JobInfo(b.ctx, id)
	require.NoError(t, err)
	due := *got.RunAfter

	require.Zero(t, b.maintainAt(t, due.Add(-time.Millisecond)).Requeued)
	require.Equal(t, "retrying", b.state(t, id))
	require.Equal(t, 1, b.maintainAt(t, due).Requeued)
	require.Equal(t, "queued", b.state(t, id))
}

// A scheduled job can be cancelled, and one past its deadline expires.
func TestScheduledJobsCancelAndExpire(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 1, Delay: time.Hour})
	require.NoError(t, err)
	err = b.client.Cancel(b.ctx, res.ID, "not needed")
	require.NoError(t, err)
	require.Equal(t, "cancelled", b.outcome(t, res.ID))

	res, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 1, Delay: time.Hour})
	require.NoError(t, err)
	b.exec(t, `UPDATE batchq.jobs SET deadline = now() - interval '1 second' WHERE id = $1`, res.ID)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Expired)
	require.Equal(t, "expired", b.outcome(t, res.ID))
}

// One call of jobs to run now and later, for the same tenants, with unique
// keys: the ones for now are keyed in the fair order as if the others were
// not there, the others wait, and a key named by both kinds goes to the
// first line that names it.
func TestMixedEnqueueOfNowAndLater(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	later := time.Now().Add(time.Hour)
	res, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{
		{Queue: b.queue, Tenant: "a", Cost: 10},
		{Queue: b.queue, Tenant: "a", Cost: 10, RunAt: later, UniqueKey: "k1"},
		{Queue: b.queue, Tenant: "b", Cost: 10, UniqueKey: "k2"},
		{Queue: b.queue, Tenant: "a", Cost: 10, UniqueKey: "k1"},
		{Queue: b.queue, Tenant: "b", Cost: 10, RunAt: later, UniqueKey: "k2"},
		{Queue: b.queue, Tenant: "a", Cost: 10},
		{Queue: b.queue, Tenant: "b", Cost: 10, Delay: time.Hour},
	})
	require.NoError(t, err)
	require.True(t, res[3].Duplicate)
	require.Equal(t, res[1].ID, res[3].ID)
	require.True(t, res[4].Duplicate)
	require.Equal(t, res[2].ID, res[4].ID)
	require.Equal(t, "scheduled", b.state(t, res[1].ID))
	require.Equal(t, "scheduled", b.state(t, res[6].ID))
	require.Equal(t, int64(1), b.scalar(t, `SELECT scheduled FROM batchq.tenant_ring WHERE tenant = 'a'`))
	require.Equal(t, int64(1), b.scalar(t, `SELECT scheduled FROM batchq.tenant_ring WHERE tenant = 'b'`))
	// a's two jobs for now are its first and second grants; b's one its first.
	got := b.drainOrder(t, 10)
	require.Equal(t, []int64{res[0].ID, res[2].ID, res[5].ID}, []int64{got[0].ID, got[1].ID, got[2].ID})
	require.Len(t, got, 3)
	require.Equal(t, 2, b.maintainAt(t, later.Add(time.Hour)).Requeued)
	require.Len(t, b.drainOrder(t, 10), 2)
	require.Zero(t, b.scalar(t, `SELECT coalesce(sum(scheduled), 0) FROM batchq.tenant_ring`))
}

// TestClaimOrderWithRunAtMatchesDRR runs random workloads of jobs for now
// and for later, passes of maintenance at random times and claims, with one
// claimer taking one job at a time: each job for later is served as drr
// serves a job enqueued when the pass that found it due ran (due jobs in
// run-at order, then id). The bound is out of reach, so no enqueue is
// refused.
func TestClaimOrderWithRunAtMatchesDRR(t *testing.T) {
	t.Parallel()
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 0x7a7e))
			quantum := []int64{1, 7, 100, 1000}[rng.IntN(4)]
			b := setup(t, queue.QueueConfig{Quantum: quantum, MaxPerTenant: 10_000})
			model, err := drr.New[int64](drr.Config{Quantum: quantum, MaxPerTenant: 10_000})
			require.NoError(t, err)
			tenants := []string{"a", "b", "c", "d", "e"}[:2+rng.IntN(4)]
			now := time.Now()
			clock := now.Add(time.Hour).Truncate(time.Millisecond)

			type later struct {
				id  int64
				at  time.Time
				job drr.Job[int64]
				op  int64
			}
			var pending []later
			ids := map[int64]int64{}
			var trace []string
			claim := func() {
				want, ok := model.DequeueAt(now, nil)
				got, err := b.client.Claim(b.ctx, b.queue, nil)
				require.NoError(t, err)
				if !ok {
					require.Empty(t, got, "trace: %v", trace)
					return
				}
				require.Len(t, got, 1, "model served %s; trace: %v", want.Tenant, trace)
				require.Equal(t, ids[want.Value], got[0].ID, "model served %s cost %d, queue %s cost %d; trace: %v",
					want.Tenant, want.Cost, got[0].Tenant, got[0].Cost, trace)
				require.NoError(t, b.client.Complete(b.ctx, got[0], queue.Result{}))
				trace = append(trace, "claim "+want.Tenant)
			}
			pass := func() {
				clock = clock.Add(time.Duration(rng.IntN(5)) * time.Minute)
				st := b.maintainAt(t, clock)
				slices.SortFunc(pending, func(x, y later) int {
					if c := x.at.Compare(y.at); c != 0 {
						return c
					}
					return cmp.Compare(x.id, y.id)
				})
				n := 0
				for len(pending) > 0 && !pending[0].at.After(clock) {
					require.NoError(t, model.EnqueueAt(now, pending[0].job))
					ids[pending[0].op] = pending[0].id
					pending = pending[1:]
					n++
				}
				require.Equal(t, n, st.Requeued, "trace: %v", trace)
				trace = append(trace, fmt.Sprintf("pass at +%s: %d due", clock.Sub(now).Round(time.Minute), n))
			}
			for op := range int64(200) {
				switch r := rng.IntN(10); {
				case r < 4:
					claim()
				case r < 5:
					pass()
				default:
					tenant := tenants[rng.IntN(len(tenants))]
					cost := []int64{1, 1 + rng.Int64N(quantum*3), quantum}[rng.IntN(3)]
					j := drr.Job[int64]{Tenant: tenant, Cost: cost, Value: op}
					if rng.IntN(3) == 0 {
						at := clock.Add(time.Duration(1+rng.IntN(10)) * time.Minute)
						res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: cost, RunAt: at})
						require.NoError(t, err)
						pending = append(pending, later{id: res.ID, at: at, job: j, op: op})
						trace = append(trace, fmt.Sprintf("enqueue %s %d at +%s", tenant, cost, at.Sub(now).Round(time.Minute)))
						continue
					}
					require.NoError(t, model.EnqueueAt(now, j))
					res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: cost})
					require.NoError(t, err)
					ids[op] = res.ID
					trace = append(trace, fmt.Sprintf("enqueue %s %d", tenant, cost))
				}
			}
			for len(pending) > 0 {
				pass()
			}
			for model.Len() > 0 {
				claim()
			}
			claim()
		})
	}
}

// Three maintainers promote the same due jobs at once: each job is promoted
// once, every tenant's queue is numbered without gaps or repeats, and every
// job is claimed once.
func TestRacingMaintainersPromoteEachJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 10_000})
	runAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	jobs := make([]queue.NewJob, 3000)
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: b.queue, Tenant: fmt.Sprintf("t%d", i%7), Cost: 1 + int64(i%13),
			RunAt: runAt.Add(time.Duration(i%50) * time.Millisecond)}
	}
	_, err := b.client.EnqueueMany(b.ctx, jobs)
	require.NoError(t, err)
	clients := make([]*queue.Client, 3)
	for i := range clients {
		c, err := queue.NewClient(b.pool, queue.Config{})
		require.NoError(t, err)
		queue.SetMaintenanceClock(c, func() time.Time { return runAt.Add(time.Second) })
		clients[i] = c
	}
	promoted := make([]int, len(clients))
	var wg sync.WaitGroup
	// Each goes on until no job waits: a pass can promote nothing while
	// another maintainer holds the turn or the rows, and that is no sign
	// the others are done.
	deadline := time.Now().Add(time.Minute)
	for i, c := range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				st, err := c.Maintain(b.ctx, b.queue)
				require.NoError(t, err)
				promoted[i] += st.Requeued
				if st.Requeued == 0 && b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'scheduled'`) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, len(jobs), promoted[0]+promoted[1]+promoted[2], "promoted by %v", promoted)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state <> 'queued'`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM (SELECT pos, seq FROM batchq.jobs GROUP BY pos, seq HAVING count(*) > 1) d`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM (SELECT tenant FROM batchq.jobs GROUP BY tenant
	                                                  HAVING max(seq) - min(seq) + 1 <> count(*) OR count(DISTINCT pos) <> 1) d`))
	require.Zero(t, b.scalar(t, `SELECT coalesce(sum(scheduled), 0) FROM batchq.tenant_ring`))
	require.Len(t, b.drainOrder(t, 2*len(jobs)), len(jobs))
}
