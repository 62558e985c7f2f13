package queue_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// keyCeiling is batchq.key_ceiling(): no tenant's ledger, and no round,
// goes past it.
const keyCeiling = int64(1) << 62

// TestExtremesOfTheRangesNeverOverflow runs random enqueues, claims,
// completions with actual costs, failures, releases, weight and quantum
// changes and maintenance passes over the extremes of the documented ranges:
// weights MinWeight and MaxWeight, costs of 1 and MaxCost, quanta of 1 and
// MaxCost, and queues whose cursor has moved up to the key ceiling, as a
// long life would move it. No call fails but with a refusal that names its
// reason (a full tenant, a full ledger), and the fair order's state stays
// consistent after every step.
func TestExtremesOfTheRangesNeverOverflow(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: queue.MaxCost, MaxPerTenant: 200})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "min", Quantum: 1, MaxPerTenant: 200}))
	queues := []string{b.queue, "min"}
	weights := []float64{queue.MinWeight, queue.MaxWeight, 1}
	tenants := []string{"light", "heavy", "plain"}
	for i, name := range tenants {
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: name, Weight: weights[i]}))
	}
	costs := []int64{1, queue.MaxCost, queue.MaxCost - 1, 999}
	// One queue starts old.
	b.exec(t, `UPDATE batchq.queue_cursors SET round = $1 WHERE queue = 'min'`, keyCeiling-2*queue.MaxCost)
	rng := rand.New(rand.NewPCG(27, 62))
	refused := map[string]int{}
	refusal := func(err error) {
		t.Helper()
		var full *queue.QueueFullError
		switch {
		case err == nil:
		case errors.As(err, &full):
			refused["queue_full"]++
		case errors.Is(err, queue.ErrLedgerFull):
			refused["ledger_full"]++
		default:
			require.NoError(t, err)
		}
	}
	for step := range 400 {
		q := queues[rng.IntN(len(queues))]
		switch op := rng.IntN(10); {
		case op < 4:
			jobs := make([]queue.NewJob, 1+rng.IntN(30))
			for i := range jobs {
				jobs[i] = queue.NewJob{Queue: q, Tenant: tenants[rng.IntN(len(tenants))], Cost: costs[rng.IntN(len(costs))]}
			}
			_, err := b.client.EnqueueMany(b.ctx, jobs)
			refusal(err)
		case op < 7:
			jobs, err := b.client.Claim(b.ctx, q, &queue.ClaimOpts{Limit: 1 + rng.IntN(20)})
			require.NoError(t, err)
			for _, j := range jobs {
				switch rng.IntN(4) {
				case 0:
					_, err = b.client.Fail(b.ctx, j, errors.New("flaky"), &queue.FailOpts{RetryIn: 1})
				case 1:
					err = b.client.Release(b.ctx, j, 0)
				default:
					err = b.client.Complete(b.ctx, j, queue.Result{ActualCost: costs[rng.IntN(len(costs))]})
				}
				require.NoError(t, err)
			}
		case op == 7:
			name := tenants[rng.IntN(len(tenants))]
			require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: name, Weight: weights[rng.IntN(len(weights))]}))
		case op == 8:
			quantum := []int64{1, queue.MaxCost}[rng.IntN(2)]
			_, err := b.client.UpdateQueue(b.ctx, q, queue.QueueUpdate{Quantum: &quantum})
			require.NoError(t, err)
		default:
			_, err := b.client.Maintain(b.ctx, q)
			require.NoError(t, err)
			// The queue ages: its cursor moves up to within a few costs of
			// the ceiling, as years of claims would move it.
			if rng.IntN(3) == 0 {
				b.exec(t, `UPDATE batchq.queue_cursors SET round = $2 WHERE queue = $1 AND round < $2`,
					q, keyCeiling-rng.Int64N(3*queue.MaxCost))
			}
		}
		requireInvariants(t, b.ctx, b.pool, "after step %d", step)
	}
	t.Logf("refusals: %v; highest round %d", refused,
		b.scalar(t, `SELECT coalesce(max(round), 0) FROM batchq.queue_cursors`))
	require.NotZero(t, refused["ledger_full"], "the ceiling was reached, and refused by name")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.tenant_ring WHERE cum > $1`, keyCeiling+queue.MaxCost))
}

// A tenant whose jobs would take its rounds past the ceiling is refused
// alone: the others go on enqueueing, and claims go on. (Rounds come near
// the ceiling only after billions of jobs; the test puts the cursor there.)
func TestLedgerFullRefusesOnlyThatTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Quantum: 1})
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "light", Weight: queue.MinWeight}))
	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "heavy", Weight: queue.MaxWeight}))
	b.exec(t, `UPDATE batchq.queue_cursors SET round = $1`, keyCeiling-2000)

	// light's grant is 1 a round: a job of MaxCost would end a billion
	// rounds past the ceiling.
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "light", Cost: queue.MaxCost})
	require.ErrorIs(t, err, queue.ErrLedgerFull)
	require.Equal(t, `batchq: ledger_full: tenant "light" in queue "q" has no room left in its ledger; its queued jobs must drain before it takes more`, err.Error())
	// Through SQL as well, with its SQLSTATE.
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM batchq.enqueue_job(queue => 'q', tenant => 'light', cost => 1000000000)`)
	require.ErrorContains(t, err, "SQLSTATE BQ202")

	// heavy's grant is a million a round; plain's cost 1 fits its round.
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "heavy", Cost: queue.MaxCost})
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "plain", Cost: 1})
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "light", Cost: 1})
	require.NoError(t, err, "light's job that fits")
	// light has a job queued now, so a one-job enqueue for it takes the
	// short path; past the ceiling it is refused by name all the same.
	_, err = b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "light", Cost: queue.MaxCost})
	require.ErrorIs(t, err, queue.ErrLedgerFull)
	got := b.drainOrder(t, 10)
	require.Len(t, got, 3)
	require.LessOrEqual(t, b.scalar(t, `SELECT round FROM batchq.queue_cursors`), keyCeiling)
	requireInvariants(t, b.ctx, b.pool)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`), fmt.Sprint(tenantsOf(got)))
}
