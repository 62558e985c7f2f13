package queue_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/drr"
	"github.com/batchq/batchq/queue"
)

// Weights and quanta: what a change of either does to the order, and that
// the database computes a tenant's grant as drr does.

// drrOrder returns the tenants of the jobs drr dequeues, in order.
func drrOrder(t *testing.T, quantum int64, weights map[string]float64, jobs []drr.Job[int]) []string {
	t.Helper()
	m, err := drr.New[int](drr.Config{Quantum: quantum, MaxPerTenant: 1000, Weight: func(n string) float64 {
		if w, ok := weights[n]; ok {
			return w
		}
		return 1
	}})
	require.NoError(t, err)
	for _, j := range jobs {
		require.NoError(t, m.Enqueue(j))
	}
	var out []string
	for {
		j, ok := m.Dequeue(nil)
		if !ok {
			return out
		}
		out = append(out, j.Tenant)
	}
}

// Re-saving a tenant with the weight it already has (say, to raise its
// bound) leaves its jobs where they are, whatever it spent of the current
// round and however much more than a share its head costs: a tenant that a
// configuration sync saves again and again is not pushed back each time.
func TestResavingATenantKeepsTheOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		jobs   []drr.Job[int]
		claims int // jobs claimed before the re-save
	}{
		{"head costs more than a share", append([]drr.Job[int]{{Tenant: "t", Cost: 3000}, {Tenant: "t", Cost: 3000}},
			slices.Repeat([]drr.Job[int]{{Tenant: "u", Cost: 1000}}, 8)...), 0},
		{"part of the head's round spent", append(slices.Repeat([]drr.Job[int]{{Tenant: "t", Cost: 500}}, 4),
			slices.Repeat([]drr.Job[int]{{Tenant: "u", Cost: 1000}}, 4)...), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Quantum: 1000})
			for _, j := range tc.jobs {
				b.enqueue(t, j.Tenant, j.Cost)
			}
			want := drrOrder(t, 1000, nil, tc.jobs)
			got := tenantsOf(b.drainOrder(t, tc.claims))
			keys := func() string {
				var s string
				require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT string_agg(round::text, ',' ORDER BY seq)
					FROM batchq.jobs WHERE tenant = 't' AND state = 'queued'`).Scan(&s))
				return s
			}
			before := keys()
			// Same weight; only the bound changes.
			require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "t", Weight: 1, MaxQueued: 50}))
			require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "t", Weight: 1, MaxQueued: 60}))
			after := keys()
			got = append(got, tenantsOf(b.drainOrder(t, 100))...)
			require.Equal(t, want, got, "rounds of t's queued jobs before the re-saves %s, after %s", before, after)
		})
	}
}

// A tenant joins a queue's ring in an application transaction (EnqueueTx),
// and its weight (or the queue's quantum) changes while that transaction is
// open. The change cannot see the uncommitted jobs; the check at commit
// re-keys them, so the membership, and every job the tenant enqueues while it
// lasts, takes the new share.
func TestSettingsChangeDuringAnOpenJoinReachesItsJobs(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"weight", "quantum"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Quantum: 1000})
			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer tx.Rollback(b.ctx)
			_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 1000})
			require.NoError(t, err)

			var wantShare int64
			switch what {
			case "weight":
				require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "late", Weight: 4}))
				wantShare = 4000
			case "quantum":
				q := int64(3000)
				_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: &q})
				require.NoError(t, err)
				wantShare = 3000
			}
			require.NoError(t, tx.Commit(b.ctx))
			// Long after the change, the tenant goes on enqueueing.
			b.enqueueN(t, "late", 5, 1000)
			share := b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE tenant = 'late'`)
			rounds := b.scalar(t, `SELECT max(round) - min(round) FROM batchq.jobs WHERE tenant = 'late'`)
			require.Equal(t, wantShare, share,
				"the %s changed before these jobs were enqueued (6 jobs of 1000 span %d rounds)", what, rounds+1)
		})
	}
}

// drr rounds quantum × weight on the float64 itself, and so does the
// database: 100 × 0.285 is 28.499999999999996, a grant of 28 (rounding a
// 15-digit numeric would give 29), and the claim order is drr's.
func TestShareIsRoundedAsDRRRoundsIt(t *testing.T) {
	t.Parallel()
	const quantum = 100
	weights := map[string]float64{"a": 0.285, "b": 1}
	b := setup(t, queue.QueueConfig{Quantum: quantum})
	for n, w := range weights {
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: n, Weight: w}))
	}
	var jobs []drr.Job[int]
	for range 20 {
		for _, n := range []string{"a", "b"} {
			cost := int64(29)
			if n == "b" {
				cost = 100
			}
			b.enqueue(t, n, cost)
			jobs = append(jobs, drr.Job[int]{Tenant: n, Cost: cost})
		}
	}
	cfg := drr.Config{Quantum: quantum, MaxPerTenant: 1000, Weight: func(n string) float64 { return weights[n] }}
	assert.Equal(t, cfg.Grant("a"), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE tenant = 'a'`),
		"per-visit grant of weight 0.285 at quantum 100")
	require.Equal(t, drrOrder(t, quantum, weights, jobs), tenantsOf(b.drainOrder(t, 100)))
}

// A weight is accepted in MinWeight..MaxWeight and refused outside, before
// anything is written: past the range, a share would leave no room in a
// tenant's ledger (1e306 once made every enqueue of the tenant fail).
func TestWeightRange(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: queue.MaxCost})
	for _, w := range []float64{queue.MinWeight, queue.MaxWeight} {
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "t", Weight: w}))
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: queue.MaxCost})
		require.NoError(t, err, "weight %v", w)
	}
	for _, w := range []float64{math.Nextafter(queue.MinWeight, 0), math.Nextafter(queue.MaxWeight, math.Inf(1)), 1e306} {
		err := b.client.SetTenant(b.ctx, queue.Tenant{Name: "t", Weight: w})
		requireSettingError(t, err, "weight", "must be in 0.001..1000000")
	}
	require.Equal(t, float64(queue.MaxWeight), b.scalarFloat(t, `SELECT weight FROM batchq.tenants WHERE name = 't'`))
	// The database keeps the range too, for anyone who writes the table.
	_, err := b.pool.Exec(b.ctx, `UPDATE batchq.tenants SET weight = 1e306`)
	require.ErrorContains(t, err, "tenants_weight_range")
}

// A tenant whose weight an older release accepted outside the range (the
// range's check is NOT VALID, so such rows stay) can be set again: a weight
// within the range is taken, and a change of its bound alone is refused by
// the weight's rule, not by the database's check.
func TestATenantWithAWeightFromBeforeTheRangeCanBeSetAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.exec(t, `ALTER TABLE batchq.tenants DROP CONSTRAINT tenants_weight_range`)
	b.exec(t, `INSERT INTO batchq.tenants (name, weight) VALUES ('huge', 1e8), ('tiny', 1e-7)`)
	b.exec(t, `ALTER TABLE batchq.tenants ADD CONSTRAINT tenants_weight_range CHECK (weight BETWEEN 0.001 AND 1000000) NOT VALID`)

	bound := 5
	_, err := b.client.UpdateTenant(b.ctx, "huge", queue.TenantUpdate{MaxQueued: &bound})
	requireSettingError(t, err, "weight", "must be in 0.001..1000000")
	for name, w := range map[string]float64{"huge": 5, "tiny": 0.5} {
		got, err := b.client.UpdateTenant(b.ctx, name, queue.TenantUpdate{Weight: &w, MaxQueued: &bound})
		require.NoError(t, err, name)
		require.Equal(t, queue.Tenant{Name: name, Weight: w, MaxQueued: bound}, got)
		require.Equal(t, w, b.scalarFloat(t, `SELECT weight FROM batchq.tenants WHERE name = $1`, name))
	}
}

// Two queue updates that change different settings at once both apply:
// each reads what it changes under the queue row's lock, so the bound change
// does not write the old quantum back over the new one, and the backlog stays
// keyed at the quantum the queue shows.
func TestConcurrentQueueUpdatesBothApply(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1000})
	b.enqueueN(t, "a", 3, 100)

	// Something (an open enqueue of a's) holds a's ring row for a moment, so
	// the quantum change waits in its re-key with the queue's row updated.
	hold, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer hold.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, hold, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 100})
	require.NoError(t, err)

	errs := make(chan error, 2)
	go func() {
		q := int64(2000)
		_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: &q})
		errs <- err
	}()
	waitForLockWaiters(t, b, 1)
	go func() {
		n := 500
		_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{MaxPerTenant: &n})
		errs <- err
	}()
	waitForLockWaiters(t, b, 2)
	require.NoError(t, hold.Commit(b.ctx))
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)

	cfg, err := b.client.Queue(b.ctx, b.queue)
	require.NoError(t, err)
	share := b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE tenant = 'a'`)
	require.Equal(t, 500, cfg.MaxPerTenant)
	require.Equal(t, cfg.Quantum, share, "queue's quantum %d, a's backlog keyed at a share of %d", cfg.Quantum, share)
}

// Two updates of one tenant, each of one setting, both apply: each reads
// what it changes under the tenant's lock.
func TestConcurrentTenantUpdatesBothApply(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for i := range 20 {
		name := fmt.Sprint("t", i)
		errs := make(chan error, 2)
		go func() {
			w := 2.0
			_, err := b.client.UpdateTenant(b.ctx, name, queue.TenantUpdate{Weight: &w})
			errs <- err
		}()
		go func() {
			n := 7
			_, err := b.client.UpdateTenant(b.ctx, name, queue.TenantUpdate{MaxQueued: &n})
			errs <- err
		}()
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		got, ok, err := b.client.TenantSettings(b.ctx, name)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, queue.Tenant{Name: name, Weight: 2, MaxQueued: 7}, got)
	}
}

// An update that breaks a rule writes nothing, not even the defaults of a
// tenant that had no settings.
func TestRefusedTenantUpdateWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	w := math.Inf(1)
	_, err := b.client.UpdateTenant(b.ctx, "new", queue.TenantUpdate{Weight: &w})
	var se *queue.SettingError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "weight", se.Field)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.tenants`))
}

// A weight change takes effect on the tenant's next visit, as in drr, where
// each visit adds the grant of the weight at that moment. One job is claimed,
// then a's weight changes:
//   - a first in the ring: the claim was a's, half-way through its round,
//     which keeps its old grant; its later rounds grant the new share;
//   - b first: the claim was b's, and a, still to come in the round, gets
//     that round at the new share.
func TestWeightChangeTakesEffectOnTheNextVisitAsInDRR(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"a", "b"} {
		for _, w := range []float64{3, 0.5} {
			t.Run(fmt.Sprintf("%s first, weight %v", first, w), func(t *testing.T) {
				t.Parallel()
				b := setup(t, queue.QueueConfig{Quantum: 1000})
				weights := map[string]float64{}
				m, err := drr.New[int](drr.Config{Quantum: 1000, MaxPerTenant: 1000,
					Weight: func(n string) float64 { return cmp.Or(weights[n], 1) }})
				require.NoError(t, err)
				pair := []drr.Job[int]{{Tenant: "a", Cost: 500}, {Tenant: "b", Cost: 1000}}
				if first == "b" {
					pair[0], pair[1] = pair[1], pair[0]
				}
				for range 12 {
					for _, j := range pair {
						b.enqueue(t, j.Tenant, j.Cost)
						require.NoError(t, m.Enqueue(j))
					}
				}
				var want []string
				dequeue := func(n int) {
					for range n {
						j, ok := m.Dequeue(nil)
						require.True(t, ok)
						want = append(want, j.Tenant)
					}
				}
				dequeue(1)
				got := tenantsOf(b.drainOrder(t, 1))
				weights["a"] = w
				require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: w}))
				dequeue(23)
				got = append(got, tenantsOf(b.drainOrder(t, 100))...)
				require.Equal(t, want, got)
			})
		}
	}
}

// blockingTracer holds the statement that draws settings_version until
// released, as a slow network or a busy pool would.
type blockingTracer struct {
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func (b *blockingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "nextval('batchq.settings_version')") {
		b.once.Do(func() { close(b.reached) })
		<-b.release
	}
	return ctx
}

func (b *blockingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A change announces itself (draws settings_version) in a statement of its
// own after it committed. A tenant's first enqueue that commits in between
// sees no new version, but it joined the ring, and a joiner's share is
// checked at commit anyway: it takes the new weight.
func TestJoinCommittedBeforeTheChangeIsAnnouncedTakesTheNewShare(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1000})
	cfg, err := pgxpool.ParseConfig(b.pool.Config().ConnString())
	require.NoError(t, err)
	tr := &blockingTracer{reached: make(chan struct{}), release: make(chan struct{})}
	cfg.ConnConfig.Tracer = tr
	admin, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	defer admin.Close()
	adminClient, err := queue.NewClient(admin, queue.Config{})
	require.NoError(t, err)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 1000})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- adminClient.SetTenant(b.ctx, queue.Tenant{Name: "late", Weight: 4}) }()
	<-tr.reached // the change has committed; its version is not drawn yet
	require.NoError(t, tx.Commit(b.ctx))
	close(tr.release)
	require.NoError(t, <-done)

	b.enqueueN(t, "late", 5, 1000)
	require.Equal(t, int64(4000), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE tenant = 'late'`),
		"weight 4 committed before the enqueue did")
}

// A tenant that joins another queue while a change of its weight waits to
// re-key it (here behind an open enqueue that holds its ring row in the
// first queue) commits after the change listed the queues to re-key, and
// before the change committed: the change still reaches it, by the second
// pass it runs once it has committed.
func TestTenantJoiningAnotherQueueDuringAWeightChangeTakesTheNewShare(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1000})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "other", Quantum: 1000}))
	b.enqueue(t, "t", 1000)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1000})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- b.client.SetTenant(b.ctx, queue.Tenant{Name: "t", Weight: 4}) }()
	// It waits for t's ring rows, all of them before any job.
	waitForLockWait(t, b, "%name: TenantQueues%")
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: "other", Tenant: "t", Cost: 1000})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)

	for _, q := range []string{b.queue, "other"} {
		require.Equal(t, int64(4000), b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE queue = $1 AND tenant = 't'`, q),
			"t's share in queue %s", q)
	}
	requireInvariants(t, b.ctx, b.pool)
}

// The same for a quantum change: a tenant that joins the queue while the
// change waits to re-key the ring takes the new quantum.
func TestTenantJoiningDuringAQuantumChangeTakesTheNewShare(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1000})
	b.enqueue(t, "a", 1000)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "a", Cost: 1000})
	require.NoError(t, err)

	done := make(chan error, 1)
	quantum := int64(4000)
	go func() {
		_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: &quantum})
		done <- err
	}()
	waitForLockWait(t, b, "%name: Rekey%")
	b.enqueue(t, "b", 1000)
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)

	for _, tenant := range []string{"a", "b"} {
		require.Equal(t, quantum, b.scalar(t, `SELECT share FROM batchq.tenant_ring WHERE tenant = $1`, tenant),
			"%s's share", tenant)
	}
	requireInvariants(t, b.ctx, b.pool)
}

// A weight change for a tenant in two queues, waiting for an enqueue open
// in the second, holds none of the tenant's jobs in the first meanwhile:
// claims there go on serving it. (It locked the first queue's jobs, then
// waited, and claims passed over the tenant for as long as the
// application's transaction stayed open.)
func TestWeightChangeWaitingInOneQueueHoldsNoJobsInAnother(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Name: "pa", Quantum: 10})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "pb", Quantum: 10}))
	b.enqueueN(t, "pt", 50, 10)
	for range 5 {
		_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: "pb", Tenant: "pt", Cost: 10})
		require.NoError(t, err)
	}
	open := openEnqueue(t, b, "pb", "pt")

	changed := make(chan error, 1)
	go func() { changed <- b.client.SetTenant(b.ctx, queue.Tenant{Name: "pt", Weight: 2}) }()
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	}, 10*time.Second, time.Millisecond, "the change waits for the open enqueue")
	jobs, err := b.client.Claim(b.ctx, "pa", &queue.ClaimOpts{Limit: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 10, "claims in pa serve pt while the change waits in pb")
	require.NoError(t, open.Commit(b.ctx))
	require.NoError(t, <-changed)
	requireInvariants(t, b.ctx, b.pool)
}

// A quantum change waiting for an enqueue still open for one tenant holds
// no other tenant's enqueues back meanwhile. (It locked the ring rows in
// tenant order and waited at the open one holding those before it: an
// application's transaction left open stopped the enqueues of every tenant
// named before its own, for as long as it stayed open.)
func TestQuantumChangeWaitingForAnOpenEnqueueHoldsNoOtherTenantBack(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	for _, tenant := range []string{"a", "m", "z"} {
		b.enqueueN(t, tenant, 5, 10)
	}
	open := openEnqueue(t, b, b.queue, "m")

	quantum := int64(20)
	changed := doneOrWaiting(t, b, async(func() error {
		_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: &quantum})
		return err
	}), "%batchq.rekey(%")
	for _, tenant := range []string{"a", "z"} {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		_, err := b.client.Enqueue(ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: 10})
		cancel()
		require.NoError(t, err, "tenant %s enqueues while the change waits for m", tenant)
	}
	require.NoError(t, open.Commit(b.ctx))
	require.NoError(t, changed())

	require.Equal(t, int64(3), b.scalar(t, `SELECT count(*) FROM batchq.tenant_ring WHERE share = 20`),
		"every tenant re-keyed to the new quantum")
	require.Equal(t, int64(18), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))
	requireInvariants(t, b.ctx, b.pool)
}

// A caller that set its own lock_timeout keeps it: a re-key waiting for an
// open enqueue's ring row fails with the caller's timeout, as before, rather
// than letting go and waiting on.
func TestRekeyKeepsTheCallersLockTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	for _, tenant := range []string{"a", "m"} {
		b.enqueueN(t, tenant, 2, 10)
	}
	openEnqueue(t, b, b.queue, "m") // holds m's ring row

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SET LOCAL lock_timeout = '300ms'`)
	require.NoError(t, err)
	start := time.Now()
	_, err = tx.Exec(b.ctx, `SELECT batchq.rekey($1, ARRAY['a', 'm'])`, b.queue)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "55P03", pe.Code, "lock_not_available")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the caller's timeout, not the re-key's own")
}

// A tenant whose enqueues queue up for its ring row, each transaction
// longer than the re-key's first limit on a wait, does not keep a quantum
// change from finishing: each pass waits longer, the last as long as it
// takes. (With one limit for every pass, each of them handed the row back
// to the next enqueue in line, and the change never finished.)
func TestQuantumChangeFinishesWhileATenantsEnqueuesQueueUp(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10, MaxPerTenant: 100000})
	// Tenants before m, so that each pass takes a while to reach its row.
	lead := make([]queue.NewJob, 2000)
	for i := range lead {
		lead[i] = queue.NewJob{Queue: b.queue, Tenant: fmt.Sprintf("a%04d", i), Cost: 10}
	}
	_, err := b.client.EnqueueMany(b.ctx, lead)
	require.NoError(t, err)
	for _, tenant := range []string{"m", "z"} {
		b.enqueueN(t, tenant, 5, 10)
	}
	stop := make(chan struct{})
	var holders sync.WaitGroup
	for range 8 {
		c := fleetClient(t, b.pool.Config().ConnString())
		holders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := queue.PoolOf(c).Begin(b.ctx)
				if !assert.NoError(t, err) {
					return
				}
				_, err = c.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "m", Cost: 10})
				assert.NoError(t, err)
				time.Sleep(150 * time.Millisecond)
				assert.NoError(t, tx.Commit(b.ctx))
			}
		})
	}
	defer func() {
		close(stop)
		holders.Wait()
	}()
	time.Sleep(300 * time.Millisecond) // the holders in line for m's row

	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	quantum := int64(20)
	_, err = b.client.UpdateQueue(ctx, b.queue, queue.QueueUpdate{Quantum: &quantum})
	require.NoError(t, err, "the change finishes while m's enqueues queue up")
	require.Equal(t, int64(2002), b.scalar(t, `SELECT count(*) FROM batchq.tenant_ring WHERE share = 20`))
}

// openEnqueue enqueues a job of cost 10 for tenant into queueName in a
// transaction it leaves open, as an application's still running, and
// returns the transaction (rolled back at the test's end unless committed).
func openEnqueue(t *testing.T, b *testBundle, queueName, tenant string) pgx.Tx {
	t.Helper()
	open, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = open.Rollback(context.Background()) })
	_, err = b.client.EnqueueTx(b.ctx, open, queue.NewJob{Queue: queueName, Tenant: tenant, Cost: 10})
	require.NoError(t, err)
	return open
}
