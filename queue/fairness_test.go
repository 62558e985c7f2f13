package queue_test

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/drr"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// The article's properties, on Postgres.

func TestSmallTenantInterleavesWithBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	b.enqueueN(t, "import", 500, 10)
	b.enqueueN(t, "small", 3, 10)

	order := tenantsOf(b.drainOrder(t, 6))
	require.Equal(t, []string{"import", "small", "import", "small", "import", "small"}, order)
}

// One claim of many jobs returns them in the order one-job claims would
// have taken them, not in the order they were inserted (the two differ
// here: the import's jobs were all inserted first).
func TestABatchComesInClaimOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	b.enqueueN(t, "import", 5, 10)
	b.enqueueN(t, "small", 3, 10)

	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 8})
	require.NoError(t, err)
	require.Equal(t, []string{"import", "small", "import", "small", "import", "small", "import", "import"},
		tenantsOf(jobs))
}

func TestCostFairness(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1000})
	b.enqueueN(t, "big", 60, 1000)
	b.enqueueN(t, "little", 600, 100)

	tokens := map[string]int64{}
	for _, j := range b.drainOrder(t, 440) { // both stay backlogged throughout
		tokens[j.Tenant] += j.Cost
	}
	require.InDelta(t, tokens["big"], tokens["little"], 1000, "tokens: %v", tokens)
	require.Greater(t, tokens["big"], int64(0))
}

func TestWeightThreeGetsThreeTimesTheTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "plus", Weight: 3}))
	b.enqueueN(t, "plus", 400, 100)
	b.enqueueN(t, "basic", 400, 100)

	tokens := map[string]int64{}
	for _, j := range b.drainOrder(t, 400) {
		tokens[j.Tenant] += j.Cost
	}
	require.Equal(t, int64(30000), tokens["plus"])
	require.Equal(t, int64(10000), tokens["basic"])
}

func TestWeightChangeTakesEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "a", 200, 100)
	b.enqueueN(t, "b", 200, 100)
	first := tenantsOf(b.drainOrder(t, 20))
	require.Equal(t, 10, countOf(first, "a"))

	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: 4}))
	next := tenantsOf(b.drainOrder(t, 100))
	require.InDelta(t, 80, countOf(next, "a"), 2, "after weight 4: %v", next)
}

// Two changes of a tenant's share before the next claim, after a visit that
// left it part of its grant: the second must not grant the round again. Each
// case against drr with the same weights and quantum; the control changes
// nothing that the first change's re-base hid.
func TestSecondShareChangeBeforeAClaimGrantsNoRoundAgain(t *testing.T) {
	t.Parallel()
	one, quarter, half := 1.0, 0.25, 0.5
	for _, tc := range []struct {
		name          string
		first, second float64
		quantum       int64 // the second change is the quantum's, when set
	}{
		{"weight 0.25 then 5", quarter, 5, 0},
		{"weight 0.25 then back to 1", quarter, one, 0},
		{"weight 0.25 then quantum 2000", quarter, 0, 2000},
		{"control: weight 0.5 then 0.75", half, 0.75, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Quantum: 1000})
			weights := map[string]float64{"a": 1, "b": 1}
			// drr's quantum is fixed; a quantum twice as large grants what
			// twice the weights would.
			model, err := drr.New[int64](drr.Config{
				Quantum: 1000, MaxPerTenant: 100, Weight: func(t string) float64 { return weights[t] },
			})
			require.NoError(t, err)
			now := time.Now()
			for _, job := range []struct {
				tenant string
				cost   int64
			}{{"a", 600}, {"a", 600}, {"a", 600}, {"b", 1000}, {"b", 1000}, {"b", 1000}} {
				id := b.enqueue(t, job.tenant, job.cost)
				require.NoError(t, model.EnqueueAt(now, drr.Job[int64]{Tenant: job.tenant, Cost: job.cost, Value: id}))
			}
			want := func(n int) []string {
				var out []string
				for range n {
					w, ok := model.DequeueAt(now, nil)
					require.True(t, ok)
					out = append(out, w.Tenant)
				}
				return out
			}
			require.Equal(t, want(1), tenantsOf(b.drainOrder(t, 1))) // a: 400 of its grant left

			weights["a"] = tc.first
			require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: tc.first}))
			if tc.quantum != 0 {
				for tn := range weights {
					weights[tn] *= float64(tc.quantum) / 1000
				}
				_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: &tc.quantum})
				require.NoError(t, err)
			} else {
				weights["a"] = tc.second
				require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: tc.second}))
			}
			require.Equal(t, want(5), tenantsOf(b.drainOrder(t, 5)))
		})
	}
}

func TestHugeCostClaimsWithoutFutileRounds(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1})
	huge := b.enqueue(t, "whale", queue.MaxCost)
	small := b.enqueue(t, "minnow", 1)

	order := b.drainOrder(t, 3)
	require.Len(t, order, 2)
	// The minnow joined in the same round and needs one visit; the whale needs
	// 10^12 of them, all skipped by the sort key.
	require.Equal(t, small, order[0].ID)
	require.Equal(t, huge, order[1].ID)
}

func TestIdleTenantBanksNoCredit(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "busy", 50, 100)
	b.enqueue(t, "idle", 100)
	// idle runs once, leaves the ring, and many rounds pass without it.
	b.drainOrder(t, 30)
	b.enqueueN(t, "idle", 10, 100)
	order := tenantsOf(b.drainOrder(t, 10))
	// On return it alternates with busy instead of bursting through ten jobs.
	require.LessOrEqual(t, countOf(order, "idle"), 5, "%v", order)
}

// A chain of jobs, each enqueueing the next while it runs (page after page
// of an import), puts its tenant back in the ring whenever its last job is
// claimed. It gets a turn a round, as the tenant with a backlog does.
func TestChainOfJobsGetsOneTurnARound(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "backlog", 10, 100)
	b.enqueue(t, "chain", 100)
	order := claimsWithAChain(t, b, func() { b.enqueue(t, "chain", 100) })
	require.Equal(t, slices.Repeat([]string{"backlog", "chain"}, 6), order)
}

// claimsWithAChain claims and completes twelve jobs one at a time and
// returns their tenants in claim order. When it claims the chain's job it
// calls next before completing it, as the job's handler enqueueing the next
// step would.
func claimsWithAChain(t *testing.T, b *testBundle, next func()) []string {
	t.Helper()
	var order []string
	for range 12 {
		jobs, err := b.client.Claim(b.ctx, b.queue, nil)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		if jobs[0].Tenant == "chain" {
			next()
		}
		require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))
		order = append(order, jobs[0].Tenant)
	}
	return order
}

// Nor when it makes an enqueue that adds nothing before it queues its next
// step: a duplicate of the running job's key, or one refused as full, in a
// transaction that then commits.
func TestChainOfJobsThatEnqueuesNothingFirstStillGetsOneTurnARound(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"duplicate", "queue full"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Quantum: 100})
			require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "chain", Weight: 1, MaxQueued: 1}))
			b.enqueueN(t, "backlog", 10, 100)
			step := 0
			next := func(key int) queue.NewJob {
				return queue.NewJob{Queue: b.queue, Tenant: "chain", Cost: 100, UniqueKey: fmt.Sprint("step-", key)}
			}
			_, err := b.client.Enqueue(b.ctx, next(step))
			require.NoError(t, err)

			order := claimsWithAChain(t, b, func() {
				require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
					if variant == "duplicate" {
						res, err := b.client.EnqueueTx(b.ctx, tx, next(step)) // the running job's own key
						require.NoError(t, err)
						require.True(t, res.Duplicate)
					} else {
						_, err := b.client.EnqueueManyTx(b.ctx, tx, []queue.NewJob{next(100 + step), next(200 + step)})
						require.ErrorIs(t, err, queue.ErrQueueFull)
					}
					step++
					_, err := b.client.EnqueueTx(b.ctx, tx, next(step))
					return err
				}))
			})
			require.Equal(t, slices.Repeat([]string{"backlog", "chain"}, 6), order)
		})
	}
}

// Whether a returning tenant waits a round depends on the rounds its jobs
// were keyed in, not on corrections folded after its queue emptied: here
// its one job cost a hundred times its estimate, which does not make it
// wait when it comes back rounds later, folded or not.
func TestRejoiningIgnoresCorrectionsFoldedAfterTheQueueEmptied(t *testing.T) {
	t.Parallel()
	for _, fold := range []bool{false, true} {
		t.Run(fmt.Sprint("folded=", fold), func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Quantum: 100})
			b.enqueue(t, "a", 100)
			b.enqueueN(t, "b", 10, 100)
			jobs, err := b.client.Claim(b.ctx, b.queue, nil)
			require.NoError(t, err)
			require.Equal(t, "a", jobs[0].Tenant)
			require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{ActualCost: 10_000}))
			order := tenantsOf(b.drainOrder(t, 3)) // b's rounds 0, 1 and 2
			if fold {
				_, err := b.client.Maintain(b.ctx, b.queue)
				require.NoError(t, err)
			}
			b.enqueue(t, "a", 100)
			order = append(order, tenantsOf(b.drainOrder(t, 3))...)
			// a left in round 0 and comes back in round 2, after b's turn.
			require.Equal(t, []string{"b", "b", "b", "a", "b", "b"}, order)
		})
	}
}

func countOf(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// Jobs that expire or are cancelled deep in a tenant's backlog hand their cost
// back to the jobs behind them only: the tenant's head keeps its place, so it
// does not jump ahead of the other tenants and take every claim.
func TestDeepRefundsMoveOnlyTheJobsBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "a", 20, 100)
	b.enqueueN(t, "b", 20, 100)
	b.exec(t, `UPDATE batchq.jobs SET deadline = now() - interval '1 second' WHERE tenant = 'a' AND seq BETWEEN 10 AND 17`)
	cancelled := b.scalar(t, `SELECT id FROM batchq.jobs WHERE tenant = 'a' AND seq = 5`)
	require.NoError(t, b.client.Cancel(b.ctx, cancelled, "not needed"))
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 8, st.Expired)
	require.Equal(t, 1, st.Adjusted)

	order := tenantsOf(b.drainOrder(t, 8))
	require.Equal(t, []string{"a", "b", "a", "b", "a", "b", "a", "b"}, order)
	// Behind the gaps, a's jobs moved up: its last jobs run nine rounds
	// earlier than they were keyed, while b's stay put.
	var aLast, bLast int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT max(round) FILTER (WHERE tenant = 'a'), max(round) FILTER (WHERE tenant = 'b') FROM batchq.jobs`).Scan(&aLast, &bLast))
	require.Equal(t, bLast-9, aLast)
}

// Retries rejoin the ring the same way: a requeue whose transaction stays
// open while rounds are served puts them in the round current at its commit.
func TestLateRequeueTakesTheRoundCurrentAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	b.enqueueN(t, "late", 5, 10)
	b.enqueueN(t, "import", 200, 10)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10})
	require.NoError(t, err)
	for _, j := range jobs {
		if j.Tenant == "late" {
			_, err = b.client.Fail(b.ctx, j, errors.New("try again"), &queue.FailOpts{RetryIn: time.Millisecond})
		} else {
			err = b.client.Complete(b.ctx, j, queue.Result{})
		}
		require.NoError(t, err)
	}
	time.Sleep(10 * time.Millisecond)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	var requeued int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT batchq.requeue($1, 10)`, b.queue).Scan(&requeued))
	require.Equal(t, 5, requeued)
	require.Equal(t, slices.Repeat([]string{"import"}, 50), tenantsOf(b.drainOrder(t, 50)))
	require.NoError(t, tx.Commit(b.ctx))

	requireInvariants(t, b.ctx, b.pool)
	require.Equal(t, slices.Repeat([]string{"late", "import"}, 5), tenantsOf(b.drainOrder(t, 10)))
}

// A weight change re-keys a tenant's queue while the refunds of jobs
// cancelled from its head, its middle and its tail are still waiting to be
// folded in. Each is taken out once: every job, and the next one enqueued,
// still costs its own tokens on the ledger. No claim has served the tenant
// yet, so, as in drr, the new weight applies from its first visit: the
// ledger is re-based one round and one new share (200) earlier, and the
// jobs' costs keep their steps.
func TestWeightChangeCountsPendingRefundsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "a", 6, 100)
	for _, seq := range []int{1, 3, 6} {
		require.NoError(t, b.client.Cancel(b.ctx, b.scalar(t, `SELECT id FROM batchq.jobs WHERE tenant = 'a' AND seq = $1`, seq), "not needed"))
	}
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "a", Weight: 2}))
	b.enqueue(t, "a", 100)
	_, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))

	requireInvariants(t, b.ctx, b.pool)
	rows, err := b.pool.Query(b.ctx, `SELECT cum FROM batchq.jobs WHERE tenant = 'a' ORDER BY seq`)
	require.NoError(t, err)
	cums, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{300, 400, 500, 600}, cums)
	// As drr serves them: two a round at the new weight.
	rows, err = b.pool.Query(b.ctx, `SELECT round FROM batchq.jobs WHERE tenant = 'a' ORDER BY seq`)
	require.NoError(t, err)
	rounds, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0, 1, 1}, rounds)
}

// TestAdjustmentsThatCancelOutStillMoveTheJobsBetween: a correction of +100
// after one job and a refund of 100 after a later one add up to nothing for
// the jobs behind both, but the jobs between them owe 100 more.
func TestAdjustmentsThatCancelOutStillMoveTheJobsBetween(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "a", 12, 100)
	round := func(seq int) int64 {
		return b.scalar(t, `SELECT round FROM batchq.jobs WHERE tenant = 'a' AND seq = $1`, seq)
	}
	between, behind := round(6), round(12)

	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 3})
	require.NoError(t, err)
	require.Len(t, jobs, 3)
	for _, j := range jobs[:2] {
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{}))
	}
	require.NoError(t, b.client.Complete(b.ctx, jobs[2], queue.Result{ActualCost: 200}))
	require.NoError(t, b.client.Cancel(b.ctx, b.scalar(t, `SELECT id FROM batchq.jobs WHERE tenant = 'a' AND seq = 10`), "not needed"))
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Adjusted)

	require.Equal(t, between+1, round(6), "a job between the two owes the correction")
	require.Equal(t, behind, round(12), "a job behind both owes nothing")
}

// A claim skips rows another transaction holds: maintenance re-keying a
// tenant's backlog locks its head (FOR NO KEY UPDATE, as batchq.rekey and
// batchq.apply_adjustments do) while the claim takes rows far behind. Such
// a claim must not move the round that joining tenants join: a tenant
// arriving meanwhile is served within the round at the head, not after the
// whole backlog in front of the rows the claim took.
func TestJoinerIsServedInTheHeadRoundAfterAClaimSkippedLockedRows(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "import", 5000, 10) // ten jobs a round

	// Another transaction holds the first 100 rounds of the backlog.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE tenant = 'import' ORDER BY id LIMIT 1000 FOR NO KEY UPDATE`)
	require.NoError(t, err)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 5})
	require.NoError(t, err)
	require.Len(t, jobs, 5)
	locked := b.scalar(t, `SELECT max(id) FROM (SELECT id FROM batchq.jobs WHERE tenant = 'import' ORDER BY id LIMIT 1000) l`)
	require.Greater(t, jobs[0].ID, locked, "the claim took rows behind the locked ones")
	for _, j := range jobs {
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{}))
	}
	require.NoError(t, tx.Rollback(b.ctx))

	b.enqueue(t, "newcomer", 10)
	order := tenantsOf(b.drainOrder(t, 20))
	require.Equal(t, 10, slices.Index(order, "newcomer"),
		"after the ten jobs of the head round, not after a hundred rounds: %v", order)
}

// Rows another claim holds are claimed, as the rows a claim behind them
// takes are: that claim moves the cursor to the round it ended in, so a
// tenant joining while the first claim is still open gets one turn a round
// from there, not a burst of the rounds both claims went through.
func TestRowsAnotherClaimHoldsDoNotHoldTheCursorBack(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "import", 200, 10) // ten jobs a round, rounds 0..19

	// A claim of round 0 stays open (it leaves the cursor at 0, so it does
	// not hold the cursor's row) while another takes rounds 1..5.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	require.Equal(t, 10, b.claimInTx(t, tx, 10, "first"))
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 50})
	require.NoError(t, err)
	require.Len(t, jobs, 50)
	require.Equal(t, int64(1), b.scalar(t, `SELECT round FROM batchq.jobs WHERE id = $1`, jobs[0].ID))
	require.Equal(t, int64(5), b.cursor(t), "the round the second claim ended in")
	for _, j := range jobs {
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{}))
	}

	b.enqueueN(t, "newcomer", 5, 100) // one job a round
	require.NoError(t, tx.Commit(b.ctx))
	var want []string
	for i := range 3 {
		if i > 0 {
			want = append(want, slices.Repeat([]string{"import"}, 10)...)
		}
		want = append(want, "newcomer") // rounds 5, 6, 7: after import's turn
	}
	require.Equal(t, want, tenantsOf(b.drainOrder(t, len(want))))
}

// A row another transaction holds in a round the cursor has passed is behind
// the ring already: claims that skip it still move the cursor on, so a
// tenant joining meanwhile joins the round the claims reached, not the round
// of the straggler. (Probing from the index head for such rows was also a
// tenth of a fleet's claim throughput.)
func TestRowHeldBehindTheCursorDoesNotHoldItBack(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	b.enqueueN(t, "a", 6, 10) // rounds 0..5
	b.enqueueN(t, "b", 6, 10)
	claim := func(n int) []*queue.Job {
		jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: n})
		require.NoError(t, err)
		require.Len(t, jobs, n)
		for _, j := range jobs {
			require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{}))
		}
		return jobs
	}

	// Another transaction holds a's round-1 job; a claim around it takes
	// rounds 0..2 and moves the cursor to 2, past the held row.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	var held int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT id FROM batchq.jobs WHERE tenant = 'a' AND round = 1 FOR UPDATE`).Scan(&held))
	for _, j := range claim(5) {
		require.NotEqual(t, held, j.ID)
	}
	require.EqualValues(t, 2, b.cursor(t))

	// The next claim, while the row is still held, takes rounds 3..4.
	claim(3)
	require.EqualValues(t, 4, b.cursor(t), "the held round-1 row does not keep the cursor at 2")
	require.NoError(t, tx.Rollback(b.ctx))
}

// A claim of a batch serves several rounds at once; a tenant that joins after
// it joins the round the batch ended in, as drr, having served those jobs one
// by one, would have it: one turn a round from there, not a burst of the
// rounds the batch went through.
func TestJoinerAfterABatchClaimJoinsTheRoundItEndedIn(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	model, err := drr.New[int64](drr.Config{Quantum: 10, MaxPerTenant: 1000})
	require.NoError(t, err)
	now := time.Now()
	add := func(tenant string, n int) {
		for range n {
			id := b.enqueue(t, tenant, 10)
			require.NoError(t, model.EnqueueAt(now, drr.Job[int64]{Tenant: tenant, Cost: 10, Value: id}))
		}
	}
	add("a", 20)
	add("b", 20)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10}) // rounds 0..4
	require.NoError(t, err)
	require.Len(t, jobs, 10)
	for _, j := range jobs {
		want, ok := model.DequeueAt(now, nil)
		require.True(t, ok)
		require.Equal(t, want.Value, j.ID)
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{}))
	}
	add("c", 3)
	var want []string
	for range 9 {
		w, ok := model.DequeueAt(now, nil)
		require.True(t, ok)
		want = append(want, w.Tenant)
	}
	require.Equal(t, []string{"c", "a", "b", "c", "a", "b", "c", "a", "b"}, want)
	require.Equal(t, want, tenantsOf(b.drainOrder(t, 9)))
}

// A claim stopped by its budget before the first live job, which dropped an
// expired job behind it, took nothing of round 0: a tenant joining after it
// joins round 0, behind the two tenants still waiting in it, as in drr.
func TestClaimStoppedByItsBudgetLeavesTheCursorAtTheRowsItLeft(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	b.enqueue(t, "a", 10)
	expired := b.enqueue(t, "a", 10) // round 1
	b.enqueue(t, "a", 10)
	b.enqueueN(t, "b", 3, 10)
	b.expire(t, expired)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 3, Budget: 5})
	require.NoError(t, err)
	require.Empty(t, jobs)
	require.Equal(t, "expired", b.outcome(t, expired))
	require.Zero(t, b.cursor(t))

	b.enqueue(t, "c", 10)
	_, err = b.client.Maintain(b.ctx, b.queue) // a's refund: its last job moves to round 1
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "a", "b", "b"}, tenantsOf(b.drainOrder(t, 10)))
}

// Expired jobs a claim drops are no sign of where the ring is: drr drops them
// at their tenant's visit, rounds before their keys. A claim of one job's
// budget that takes b's first job and drops a's three expired ones (keyed in
// rounds 0..2) leaves the ring in round 0, and a tenant joining then is
// served next, as in drr.
func TestDroppedExpiredJobsDoNotMoveTheCursor(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10})
	for range 3 {
		b.expire(t, b.enqueue(t, "a", 10))
	}
	b.enqueueN(t, "b", 4, 10)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10, Budget: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, tenantsOf(jobs))
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'a'`))
	require.Zero(t, b.cursor(t))

	b.enqueueN(t, "c", 2, 10)
	require.Equal(t, []string{"c", "b", "c", "b", "b"}, tenantsOf(b.drainOrder(t, 10)))
}

// New jobs take their place in the ring as of the round current when their
// enqueue commits. They were keyed when they were inserted; had they kept
// those keys, the fifty rounds served while the transaction stayed open would
// let all of them out at once, ahead of the tenant already waiting. That
// holds for a tenant that joins the ring, for one whose queued job ran while
// the transaction was open, and for one whose queued job was cancelled
// meanwhile (its refund, folded in later, must not pull the new jobs back);
// and whether the jobs come in one call or one call each (a tenant with jobs
// queued takes enqueue's short path for one job).
func TestLateCommitJoinsTheRoundCurrentAtCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		before string
		each   bool
	}{
		{"nothing", false}, {"a job that runs", false}, {"a job that is cancelled", false},
		{"nothing", true}, {"a job that runs", true}, {"a job that is cancelled", true},
	} {
		before := tc.before
		t.Run(fmt.Sprintf("queued before: %s, a call each: %v", before, tc.each), func(t *testing.T) {
			t.Parallel()
			b := setup(t, queue.QueueConfig{Quantum: 10})
			b.enqueueN(t, "import", 200, 10) // one job a round
			var old int64
			if before != "nothing" {
				old = b.enqueue(t, "late", 10)
			}

			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer tx.Rollback(b.ctx)
			late := make([]queue.NewJob, 20)
			for i := range late {
				late[i] = queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 10}
			}
			if tc.each {
				for _, j := range late {
					_, err = b.client.EnqueueTx(b.ctx, tx, j)
					require.NoError(t, err)
				}
			} else {
				_, err = b.client.EnqueueManyTx(b.ctx, tx, late)
				require.NoError(t, err)
			}
			if before == "a job that is cancelled" {
				require.NoError(t, b.client.Cancel(b.ctx, old, "not needed"))
			}
			served := tenantsOf(b.drainOrder(t, 50))
			want := 0
			if before == "a job that runs" {
				want = 1
			}
			require.Equal(t, want, countOf(served, "late"), "the tenant's old job meanwhile: %v", served)
			require.NoError(t, tx.Commit(b.ctx))
			_, err = b.client.Maintain(b.ctx, b.queue)
			require.NoError(t, err)

			requireInvariants(t, b.ctx, b.pool, "the moved jobs are keyed in the tenant's membership")

			order := tenantsOf(b.drainOrder(t, 20))
			require.Equal(t, slices.Repeat([]string{"late", "import"}, 10), order)
			require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ring_commit_checks`), "each check is removed at commit")
		})
	}
}

// Commit-time checks that rewrite many jobs take turns (batchq.rewrite_turn),
// and each reads the cursor when its turn comes: claims that run while a
// check waits are rounds its jobs do not land behind. Here another
// transaction holds the turn while the claims go ten rounds on; the late
// tenant's jobs then alternate with the import's, as they would had its
// enqueue committed when the turn came. A check of a few jobs takes no turn,
// and a turn held past the wait's bound holds no commit back for good.
func TestLateCommitsRewriteInTurnAtTheCursorTheirTurnFinds(t *testing.T) {
	t.Parallel()
	// waiting reports whether a backend waits for the turn.
	waiting := func(b *testBundle, t *testing.T) bool {
		return b.scalar(t, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 1650553969 AND objid = 1 AND NOT granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) > 0
	}
	// holdTurn takes the turn in a transaction of its own, released by
	// rolling it back.
	holdTurn := func(b *testBundle, t *testing.T) pgx.Tx {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(b.ctx) })
		_, err = tx.Exec(b.ctx, `SELECT pg_advisory_xact_lock(1650553969, 1)`)
		require.NoError(t, err)
		return tx
	}
	// jobsOf is n jobs of tenant, of cost 10 each (one grant).
	jobsOf := func(b *testBundle, tenant string, n int) []queue.NewJob {
		return slices.Repeat([]queue.NewJob{{Queue: b.queue, Tenant: tenant, Cost: 10}}, n)
	}
	// openLate enqueues n jobs of a tenant new to the ring in a transaction
	// left open, and lets the claims go five rounds on, so that its commit
	// has jobs to move.
	openLate := func(b *testBundle, t *testing.T, tenant string, n int) pgx.Tx {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(b.ctx) })
		_, err = b.client.EnqueueManyTx(b.ctx, tx, jobsOf(b, tenant, n))
		require.NoError(t, err)
		require.Equal(t, slices.Repeat([]string{"import"}, 5), tenantsOf(b.drainOrder(t, 5)))
		return tx
	}

	t.Run("a rewrite waits for its turn, then reads the cursor", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 200, 10) // one job a round
		tx := openLate(b, t, "late", 40)
		turn := holdTurn(b, t)
		committed := make(chan error, 1)
		go func() { committed <- tx.Commit(b.ctx) }()
		require.Eventually(t, func() bool { return waiting(b, t) }, 10*time.Second, time.Millisecond,
			"the commit waits for the turn")
		// Claims go on meanwhile.
		require.Equal(t, slices.Repeat([]string{"import"}, 10), tenantsOf(b.drainOrder(t, 10)))
		require.NoError(t, turn.Rollback(b.ctx))
		require.NoError(t, <-committed)

		requireInvariants(t, b.ctx, b.pool, "the moved jobs are keyed in the tenant's membership")
		require.Equal(t, slices.Repeat([]string{"late", "import"}, 10), tenantsOf(b.drainOrder(t, 20)))
	})

	t.Run("a few jobs take no turn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 200, 10)
		tx := openLate(b, t, "late", 3)
		holdTurn(b, t)
		committed := make(chan error, 1)
		go func() { committed <- tx.Commit(b.ctx) }()
		for {
			select {
			case err := <-committed:
				require.NoError(t, err)
				require.Equal(t, slices.Repeat([]string{"late", "import"}, 3), tenantsOf(b.drainOrder(t, 6)))
				return
			default:
				require.False(t, waiting(b, t), "a commit of three jobs waits for the turn")
				time.Sleep(time.Millisecond)
			}
		}
	})

	t.Run("a turn held to a transaction's end holds no commit back for good", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 200, 10)
		// A transaction that runs its checks early, and keeps its own
		// lock_timeout, holds the turn until it ends.
		early := openLate(b, t, "early", 40)
		_, err := early.Exec(b.ctx, `SET LOCAL lock_timeout = '7s'`)
		require.NoError(t, err)
		_, err = early.Exec(b.ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
		require.NoError(t, err)
		var lockTimeout string
		require.NoError(t, early.QueryRow(b.ctx, `SHOW lock_timeout`).Scan(&lockTimeout))
		require.Equal(t, "7s", lockTimeout)
		require.EqualValues(t, 1, b.scalar(t, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 1650553969 AND objid = 1 AND granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`), "the early check holds the turn")

		late := openLate(b, t, "late", 40)
		cursor := b.cursor(t)
		require.NoError(t, late.Commit(b.ctx), "the wait runs out and the check goes on without the turn")
		require.Equal(t, cursor, b.scalar(t, `SELECT min(round) FROM batchq.jobs WHERE tenant = 'late' AND state = 'queued'`),
			"the late tenant joins the cursor's round")
		require.NoError(t, early.Commit(b.ctx))
		requireInvariants(t, b.ctx, b.pool)
	})

	t.Run("a commit of many checks waits for the turn once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 200, 10)
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(b.ctx) }()
		for _, tenant := range []string{"late-a", "late-b", "late-c"} { // a statement, and a check, each
			_, err = b.client.EnqueueManyTx(b.ctx, tx, jobsOf(b, tenant, 40))
			require.NoError(t, err)
		}
		require.Equal(t, slices.Repeat([]string{"import"}, 5), tenantsOf(b.drainOrder(t, 5)))
		holdTurn(b, t)
		start := time.Now()
		require.NoError(t, tx.Commit(b.ctx))
		took := time.Since(start)
		// A second's wait, once: three checks waited three seconds.
		require.GreaterOrEqual(t, took, 900*time.Millisecond, "the first check waits for the turn")
		require.Less(t, took, 2500*time.Millisecond, "the other checks go on at once")
		cursor := b.cursor(t)
		require.Equal(t, int64(3), b.scalar(t, `SELECT count(DISTINCT tenant) FROM batchq.jobs
			WHERE tenant LIKE 'late-%' AND state = 'queued' AND round >= $1`, cursor), "each late tenant moved to the cursor")
		requireInvariants(t, b.ctx, b.pool)
	})

	t.Run("a deadlock while a commit waits for the turn does not fail it", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 200, 10)
		// early holds the turn to its end, as above.
		early := openLate(b, t, "early", 40)
		_, err := early.Exec(b.ctx, `SET CONSTRAINTS ALL IMMEDIATE`)
		require.NoError(t, err)
		// x's enqueue, on a connection that may shorten its deadlock_timeout
		// (only a superuser may), so that its wait for the turn is the one
		// that finds the deadlock, deterministically.
		su, err := url.Parse(pgtest.ServerURL(t))
		require.NoError(t, err)
		su.Path = "/" + b.pool.Config().ConnConfig.Database
		suPool := pgtest.Connect(t, su.String())
		suClient, err := queue.NewClient(suPool, queue.Config{})
		require.NoError(t, err)
		x, err := suPool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = x.Rollback(b.ctx) }()
		_, err = x.Exec(b.ctx, `SET LOCAL deadlock_timeout = '100ms'`)
		require.NoError(t, err)
		_, err = suClient.EnqueueManyTx(b.ctx, x, jobsOf(b, "x", 40))
		require.NoError(t, err)
		require.Equal(t, slices.Repeat([]string{"import"}, 5), tenantsOf(b.drainOrder(t, 5)))

		// early waits for x's ring row; x's commit then waits for early's turn.
		enqueued := make(chan error, 1)
		go func() {
			_, err := b.client.EnqueueTx(b.ctx, early, queue.NewJob{Queue: b.queue, Tenant: "x", Cost: 10})
			enqueued <- err
		}()
		require.Eventually(t, func() bool {
			return b.scalar(t, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
		}, 10*time.Second, time.Millisecond, "early waits for x's ring row")
		require.NoError(t, x.Commit(b.ctx), "the deadlock ends the wait for the turn, not the commit")
		require.NoError(t, <-enqueued)
		require.NoError(t, early.Commit(b.ctx))
		require.Equal(t, int64(41), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'x'`))
		requireInvariants(t, b.ctx, b.pool)
	})
}

// A late commit gains no rounds when the tenant's first job costs more than
// one grant either: such a job is served rounds after its grants begin to
// pay for it, and what the check moves by is the rounds the cursor passed
// since that beginning, not since the round it would be served in. Here the
// late job costs ten grants and the claims go 5 rounds on while its enqueue
// is open; the order after the commit is the order of the same enqueue
// committed at that moment (which the differential test holds to drr's).
func TestLateCommitOfAJobCostingManyGrantsGainsNoRounds(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, open bool) []string {
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 100, 10) // one job a round
		late := queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 100}
		if open {
			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer tx.Rollback(b.ctx)
			_, err = b.client.EnqueueTx(b.ctx, tx, late)
			require.NoError(t, err)
			require.Equal(t, slices.Repeat([]string{"import"}, 5), tenantsOf(b.drainOrder(t, 5)))
			require.NoError(t, tx.Commit(b.ctx))
		} else {
			require.Equal(t, slices.Repeat([]string{"import"}, 5), tenantsOf(b.drainOrder(t, 5)))
			_, err := b.client.Enqueue(b.ctx, late)
			require.NoError(t, err)
		}
		requireInvariants(t, b.ctx, b.pool)
		return tenantsOf(b.drainOrder(t, 12))
	}
	want := run(t, false)
	// late joins in round 4, the last claim's, behind import, and its tenth
	// visit is in round 13: import's jobs of rounds 5 to 13 go first.
	require.Equal(t, append(slices.Repeat([]string{"import"}, 9), "late", "import", "import"), want)
	require.Equal(t, want, run(t, true), "the enqueue held open while 5 rounds were served")
}

// A correction downwards (a job cost less than estimated) is folded into the
// keys of the first hundred queued jobs of its tenant per maintenance pass,
// not into the whole backlog; the rest stays pending and is folded as the
// head comes near. The order claims see is the order of a fold into
// everything, as long as maintenance runs before claims take a hundred of the
// tenant's jobs. A correction upwards is folded into every queued job of its
// tenant: folded into the first hundred alone, it would leave the rest ahead
// of them.
func TestCorrectionIsFoldedNearTheHeadOfABacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10, MaxPerTenant: 10000})
	b.enqueueN(t, "big", 500, 20)   // a job every other round, in rounds 1, 3, 5, ...
	b.enqueueN(t, "small", 500, 10) // a job a round, from round 0
	require.Equal(t, "small", b.claimOne(t).Tenant)
	claimed, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Equal(t, "big", claimed[0].Tenant)
	// It cost one round less than estimated: big's next jobs come a round
	// earlier, in rounds 2, 4, 6, ...
	require.NoError(t, b.client.Complete(b.ctx, claimed[0], queue.Result{ActualCost: 10}))

	require.Equal(t, int64(100), rewrittenByAPass(t, b, "big"), "big's jobs rewritten by one pass")

	var got []string
	for len(got) < 600 {
		got = append(got, tenantsOf(b.drainOrder(t, 50))...)
		_, err := b.client.Maintain(b.ctx, b.queue)
		require.NoError(t, err)
		requireInvariants(t, b.ctx, b.pool, "after %d claims", len(got))
	}
	// Round 1: small; then each two rounds: big, small, small.
	want := []string{"small"}
	for len(want) < len(got) {
		want = append(want, "big", "small", "small")
	}
	require.Equal(t, want[:len(got)], got)

	// A correction upwards reaches every queued job of its tenant at once.
	claimed, err = b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 3})
	require.NoError(t, err)
	for _, j := range claimed {
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{ActualCost: 2 * j.Cost}))
	}
	require.Equal(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'big'`), rewrittenByAPass(t, b, "big"))
}

// Refunds give a tenant no credit past the round the claims are in. Claims
// that run ahead of the folds (many claimers, a backlog alone) charge its
// jobs at their estimates; folded whole, refunds of ninety per cent would
// key its head eighteen rounds behind the cursor, and a tenant joining now
// would wait while it took all of them. Its head comes to the cursor's
// round instead, and the newcomer takes its turn at once.
func TestRefundsGiveNoCreditPastTheCurrentRound(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "big", 40, 100) // a job a round
	claimed, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 20})
	require.NoError(t, err)
	require.Len(t, claimed, 20)
	for _, j := range claimed {
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{ActualCost: 10}))
	}
	cursor := b.cursor(t)
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, cursor, b.scalar(t, `SELECT min(round) FROM batchq.jobs WHERE tenant = 'big'`),
		"big's head is keyed in the cursor's round")
	requireInvariants(t, b.ctx, b.pool)

	b.enqueueN(t, "new", 3, 100)
	require.Equal(t, []string{"big", "new", "big", "new", "big", "new"}, tenantsOf(b.drainOrder(t, 6)))

	// A refund that leaves the head in or past the cursor's round is folded
	// whole, as before.
	claimed, err = b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, "big", claimed[0].Tenant)
	before := b.scalar(t, `SELECT max(cum) FROM batchq.jobs WHERE tenant = 'big' AND state = 'queued'`)
	require.NoError(t, b.client.Complete(b.ctx, claimed[0], queue.Result{ActualCost: 50}))
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, before-50, b.scalar(t, `SELECT max(cum) FROM batchq.jobs WHERE tenant = 'big' AND state = 'queued'`))
}

// Corrections upwards that add up to less than one grant wait, when the
// tenant has more queued jobs than a window: folded, they would move no job
// by more than a round, and folding them rewrites its backlog. Once they add
// up to a grant they are folded into every queued job.
func TestSmallCorrectionUpwardsWaitsForAGrant(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10, MaxPerTenant: 10000})
	b.enqueueN(t, "big", 300, 20)
	complete := func(actual int64) {
		t.Helper()
		claimed, err := b.client.Claim(b.ctx, b.queue, nil)
		require.NoError(t, err)
		require.NoError(t, b.client.Complete(b.ctx, claimed[0], queue.Result{ActualCost: actual}))
	}
	complete(25) // 5 over, half a grant
	require.Zero(t, rewrittenByAPass(t, b, "big"), "half a grant upwards waits")
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))
	complete(25) // a grant in all
	require.Equal(t, int64(298), rewrittenByAPass(t, b, "big"), "a grant upwards reaches every queued job")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))
}

// Corrections of both signs about jobs that already ran move every queued
// job by their sum, however their running sum swings on the way: estimates
// close to actual costs, some over and some under, are the usual case, and
// they must not cost a pass the tenant's whole backlog. Summing to a little
// upwards they wait, as one small correction upwards does; summing to
// downwards they are folded into a window.
func TestCorrectionsOfBothSignsMoveTheBacklogByTheirSum(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10, MaxPerTenant: 10000})
	b.enqueueN(t, "big", 300, 5)
	complete := func(actuals ...int64) {
		t.Helper()
		claimed, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: len(actuals)})
		require.NoError(t, err)
		require.Len(t, claimed, len(actuals))
		for i, c := range claimed {
			require.NoError(t, b.client.Complete(b.ctx, c, queue.Result{ActualCost: actuals[i]}))
		}
	}
	complete(3, 8, 3, 7) // -2, +3, -2, +2: the running sum swings from -2 to +1, and ends at +1
	require.Zero(t, rewrittenByAPass(t, b, "big"), "a tenth of a grant upwards waits")
	require.Equal(t, int64(4), b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))
	complete(9, 1) // +4, -4: the sum is still +1
	require.Zero(t, rewrittenByAPass(t, b, "big"))
	complete(2) // -3: the sum is -2, downwards
	require.Equal(t, int64(100), rewrittenByAPass(t, b, "big"), "folded into a window")
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`),
		"the rest of the backlog keeps the sum pending")
	require.Equal(t, int64(-2), b.scalar(t, `SELECT delta FROM batchq.ledger_adjustments`))
}

// A tenant moved at commit starts afresh, as if it had enqueued then: what
// its jobs that ran meanwhile paid leaves with them, left-over grant
// included. Here late's old job (15) leaves half a grant in its round; the
// order after the commit is that of the same enqueue committed at that
// moment, when late had nothing queued.
func TestLateCommitAfterTheTenantsJobsRanStartsAfresh(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, open bool) []string {
		b := setup(t, queue.QueueConfig{Quantum: 10})
		b.enqueueN(t, "import", 100, 10) // one job a round
		b.enqueue(t, "late", 15)
		late := queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 10}
		if open {
			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer tx.Rollback(b.ctx)
			_, err = b.client.EnqueueTx(b.ctx, tx, late)
			require.NoError(t, err)
			require.Equal(t, []string{"import", "import", "late", "import", "import", "import", "import"}, tenantsOf(b.drainOrder(t, 7)))
			require.NoError(t, tx.Commit(b.ctx))
		} else {
			require.Equal(t, []string{"import", "import", "late", "import", "import", "import", "import"}, tenantsOf(b.drainOrder(t, 7)))
			_, err := b.client.Enqueue(b.ctx, late)
			require.NoError(t, err)
		}
		requireInvariants(t, b.ctx, b.pool)
		return tenantsOf(b.drainOrder(t, 4))
	}
	want := run(t, false)
	require.Equal(t, want, run(t, true), "the enqueue held open while its tenant's old job ran")
}

// A tenant moved at commit starts a new membership: a refund or a correction
// that arrives later about a job of its old one, still running at the
// commit, is not the new membership's, and must not move its jobs ahead.
// Here late's old job (50, five grants) runs while the enqueue is open, and
// is handed back after the commit; the order is that of the same enqueue
// committed at that moment.
func TestLateCommitIgnoresCorrectionsAboutTheOldMembership(t *testing.T) {
	t.Parallel()
	for _, refund := range []string{"release", "cheaper"} {
		run := func(t *testing.T, open bool) []string {
			b := setup(t, queue.QueueConfig{Quantum: 10})
			b.enqueueN(t, "import", 100, 10) // one job a round
			b.enqueue(t, "late", 50)
			late := make([]queue.NewJob, 6)
			for i := range late {
				late[i] = queue.NewJob{Queue: b.queue, Tenant: "late", Cost: 10}
			}
			var tx pgx.Tx
			if open {
				var err error
				tx, err = b.pool.Begin(b.ctx)
				require.NoError(t, err)
				defer tx.Rollback(b.ctx)
				_, err = b.client.EnqueueManyTx(b.ctx, tx, late)
				require.NoError(t, err)
			}
			// Ten claims: late's old job among them, kept running.
			var held *queue.Job
			for range 10 {
				jobs, err := b.client.Claim(b.ctx, b.queue, nil)
				require.NoError(t, err)
				require.Len(t, jobs, 1)
				if jobs[0].Tenant == "late" {
					held = jobs[0]
					continue
				}
				require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{}))
			}
			require.NotNil(t, held)
			if open {
				require.NoError(t, tx.Commit(b.ctx))
			} else {
				_, err := b.client.EnqueueMany(b.ctx, late)
				require.NoError(t, err)
			}
			if refund == "release" {
				require.NoError(t, b.client.Release(b.ctx, held, time.Hour))
			} else {
				require.NoError(t, b.client.Complete(b.ctx, held, queue.Result{ActualCost: 1}))
			}
			_, err := b.client.Maintain(b.ctx, b.queue)
			require.NoError(t, err)
			return tenantsOf(b.drainOrder(t, 10))
		}
		want := run(t, false)
		require.Equal(t, want, run(t, true), "%s: the enqueue held open while its tenant's old job ran", refund)
	}
}

// staleKeys counts a tenant's queued jobs whose key is not the round their
// cum would have with every pending adjustment folded in.
func staleKeys(t *testing.T, b *testBundle, tenant string) int64 {
	t.Helper()
	return b.scalar(t, `SELECT count(*) FROM (`+effectiveCum+`) e
		JOIN batchq.jobs j ON j.queue = e.queue AND j.tenant = e.tenant AND j.seq = e.seq AND j.state = 'queued'
		JOIN batchq.tenant_ring r ON r.queue = j.queue AND r.tenant = j.tenant
		WHERE e.tenant = $1 AND j.round <> batchq.drr_round(r.join_round, e.cum::bigint, r.share)`, tenant)
}

// Corrections of both signs whose sum is small still move some jobs far: a
// job that cost 50 more, then nine jobs cancelled deeper in the queue (45
// less) move the jobs between by five rounds. A pass folds them into every
// queued job, rather than waiting for them to add up to a grant.
func TestMixedCorrectionsAreFoldedWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10, MaxPerTenant: 10000})
	b.enqueueN(t, "a", 150, 5)
	claimed, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Complete(b.ctx, claimed[0], queue.Result{ActualCost: 55}))
	for seq := 40; seq <= 48; seq++ {
		require.NoError(t, b.client.Cancel(b.ctx, b.scalar(t, `SELECT id FROM batchq.jobs WHERE tenant = 'a' AND seq = $1`, seq), "not needed"))
	}
	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, staleKeys(t, b, "a"), "keys left off by the corrections")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))
}

// A correction recorded while a pass runs waits for the next pass: the pass
// folds only the corrections it decided about. Here the pass decides to fold
// a correction downwards into a window, then waits for a row lock; meanwhile
// a correction upwards comes. Folded into the window with the first, it would
// leave the window behind the rest of the backlog.
func TestCorrectionDuringAPassWaitsForTheNext(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 10, MaxPerTenant: 10000})
	b.enqueueN(t, "a", 150, 5)
	claimed, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 2})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.NoError(t, b.client.Complete(b.ctx, claimed[0], queue.Result{ActualCost: 1})) // 4 less

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE tenant = 'a' AND seq = 3 FOR UPDATE`)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.client.Maintain(b.ctx, b.queue)
		done <- err
	}()
	waitForLockWait(t, b, "%apply_adjustments%")
	require.NoError(t, b.client.Complete(b.ctx, claimed[1], queue.Result{ActualCost: 55})) // 50 more
	require.NoError(t, tx.Rollback(b.ctx))
	require.NoError(t, <-done)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments WHERE delta = 50`),
		"the correction that came during the pass is left for the next")
	requireInvariants(t, b.ctx, b.pool)

	_, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, staleKeys(t, b, "a"))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`))
}

// rewrittenByAPass runs one maintenance pass and returns how many of
// tenant's jobs it rewrote (an update moves a row), checking the DRR
// invariants after it.
func rewrittenByAPass(t *testing.T, b *testBundle, tenant string) int64 {
	t.Helper()
	b.exec(t, `DROP TABLE IF EXISTS before`)
	b.exec(t, `CREATE TABLE before AS SELECT id, ctid AS at FROM batchq.jobs WHERE tenant = $1`, tenant)
	_, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	requireInvariants(t, b.ctx, b.pool)
	return b.scalar(t, `SELECT count(*) FROM batchq.jobs j JOIN before b ON b.id = j.id WHERE j.ctid <> b.at`)
}

// batchq.claim may run in a transaction of the caller's (docs/sql-api.md):
// a worker in another language claims, runs the job and finishes it before
// it commits. The probe for rows holding the cursor back must not keep a
// lock on a row the claim did not take: other claims would pass over the
// head of the queue, and a cancel of that job would wait, for as long as
// the caller's transaction stays open.
func TestClaimInACallersTransactionHoldsNoRowItDidNotTake(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 100})
	b.enqueueN(t, "import", 30, 10) // ten jobs a round, rounds 0..2
	head := b.scalar(t, `SELECT min(id) FROM batchq.jobs WHERE tenant = 'import'`)

	// A re-key holds round 0 while the caller's claim takes from round 1.
	rekey, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer rekey.Rollback(b.ctx)
	_, err = rekey.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE tenant = 'import' ORDER BY id LIMIT 10 FOR NO KEY UPDATE`)
	require.NoError(t, err)
	caller, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer caller.Rollback(b.ctx)
	require.Equal(t, 5, b.claimInTx(t, caller, 5, "caller"))
	require.NoError(t, rekey.Rollback(b.ctx))

	// The caller's transaction is still open: the head is free to claim.
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, head, jobs[0].ID, "the head of the queue, not a job behind it")

	// And a cancel of the next job in round 0 does not wait for the caller.
	next := b.scalar(t, `SELECT min(id) FROM batchq.jobs WHERE tenant = 'import' AND state = 'queued'`)
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, `SET lock_timeout = '200ms'`)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, `SELECT batchq.cancel($1, 'test')`, next)
	_, _ = conn.Exec(b.ctx, `RESET lock_timeout`)
	require.NoError(t, err)
}
