package queue_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/drr"
	"github.com/batchq/batchq/queue"
)

// TestClaimOrderMatchesDRR runs random workloads (tenants with random
// weights, random costs, bounds, enqueues interleaved with claims) through
// the Postgres queue with one claimer taking one job at a time, and through
// package drr, the reference model: the order of jobs out, and which
// enqueues were refused, must be identical.
func TestClaimOrderMatchesDRR(t *testing.T) {
	t.Parallel()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runDifferential(t, seed, 250, 1)
		})
	}
}

// The same with claims of up to five jobs at a time: a claim of k jobs takes
// the k jobs drr serves next, in its order.
func TestBatchClaimOrderMatchesDRR(t *testing.T) {
	t.Parallel()
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runDifferential(t, 100+seed, 250, 5)
		})
	}
}

// runDifferential runs ops random operations, each claim taking up to
// maxBatch jobs.
func runDifferential(t *testing.T, seed uint64, ops, maxBatch int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	quantum := []int64{1, 7, 100, 1000}[rng.IntN(4)]
	bound := 3 + rng.IntN(12)
	b := setup(t, queue.QueueConfig{Quantum: quantum, MaxPerTenant: bound})

	weights := map[string]float64{}
	tenants := make([]string, 2+rng.IntN(6))
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%d", i)
		w := []float64{0.25, 0.5, 1, 1, 1.5, 2, 3}[rng.IntN(7)]
		weights[tenants[i]] = w
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: tenants[i], Weight: w}))
	}
	model, err := drr.New[int64](drr.Config{
		Quantum: quantum, MaxPerTenant: bound, Weight: func(t string) float64 { return weights[t] },
	})
	require.NoError(t, err)

	now := time.Now()
	ids := map[int64]int64{} // model's job value (op index) -> database id
	var trace []string
	claim := func() {
		n := 1 + rng.IntN(maxBatch)
		var want []drr.Job[int64]
		for range n {
			w, ok := model.DequeueAt(now, nil)
			if !ok {
				break
			}
			want = append(want, w)
		}
		got, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: n})
		require.NoError(t, err)
		if len(want) == 0 {
			require.Empty(t, got, "trace: %v", trace)
			trace = append(trace, "none")
			return
		}
		require.Len(t, got, len(want), "model dequeued %+v; trace: %v", want, trace)
		for i, w := range want {
			require.Equal(t, ids[w.Value], got[i].ID,
				"job %d of %d: model dequeued %s cost %d, queue claimed %s cost %d; trace: %v",
				i+1, n, w.Tenant, w.Cost, got[i].Tenant, got[i].Cost, trace)
			require.NoError(t, b.client.Complete(b.ctx, got[i], queue.Result{}))
			trace = append(trace, "claim "+w.Tenant)
		}
	}
	for op := range int64(ops) {
		if rng.IntN(10) < 4 {
			claim()
			continue
		}
		tenant := tenants[rng.IntN(len(tenants))]
		cost := []int64{1, 1 + rng.Int64N(quantum*3), 1 + rng.Int64N(5000), quantum}[rng.IntN(4)]
		merr := model.EnqueueAt(now, drr.Job[int64]{Tenant: tenant, Cost: cost, Value: op})
		res, qerr := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: tenant, Cost: cost})
		require.Equal(t, errors.Is(merr, drr.ErrQueueFull), errors.Is(qerr, queue.ErrQueueFull),
			"enqueue %s cost %d: model %v, queue %v", tenant, cost, merr, qerr)
		if merr == nil {
			require.NoError(t, qerr)
			ids[op] = res.ID
		}
		trace = append(trace, fmt.Sprintf("enqueue %s %d", tenant, cost))
	}
	for model.Len() > 0 {
		claim()
	}
	claim()
}
