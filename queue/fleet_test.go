package queue_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// TestFleetDrainsFairlyAndOnce drains 20,000 jobs of 50 tenants with 8
// claimers on separate connection pools: every job ends with exactly one
// outcome, none is claimed twice, and while every tenant is backlogged the
// token shares follow the weights.
func TestFleetDrainsFairlyAndOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("drains 20,000 jobs")
	}
	const tenants, claimers = 50, 8
	b := setup(t, queue.QueueConfig{Quantum: 1000, MaxPerTenant: 100000})
	rng := rand.New(rand.NewPCG(1, 2))

	weight := map[string]float64{}
	var jobs []queue.NewJob
	for i := range tenants {
		name := fmt.Sprintf("tenant-%02d", i)
		w := float64(1 + i%3) // plans of weight 1, 2 and 3
		weight[name] = w
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: name, Weight: w}))
		// Backlogs in proportion to weight, so all tenants stay backlogged
		// for most of the run.
		n := int(w) * 200
		if i == 0 {
			n += 200 // 19,800 by weight, plus 200: 20,000 in all
		}
		for range n {
			jobs = append(jobs, queue.NewJob{Queue: b.queue, Tenant: name, Cost: 1 + rng.Int64N(1000)})
		}
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for chunk := range slicesChunk(jobs, 2000) {
		_, err := b.client.EnqueueMany(b.ctx, chunk)
		require.NoError(t, err)
	}
	total := len(jobs)
	require.Equal(t, 20000, total)

	var mu sync.Mutex
	var log []*queue.Job // in the order claims returned
	claimed := map[int64]int{}
	var wg sync.WaitGroup
	for w := range claimers {
		client, err := queue.NewClient(pgtest.Connect(t, b.pool.Config().ConnString()), queue.Config{})
		require.NoError(t, err)
		wg.Go(func() {
			for {
				got, err := client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10, Worker: fmt.Sprint("w", w)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				log = append(log, got...)
				for _, j := range got {
					claimed[j.ID]++
				}
				mu.Unlock()
				done := make([]queue.Completion, len(got))
				for i, j := range got {
					done[i] = queue.Completion{Job: j}
				}
				lost, err := client.CompleteMany(b.ctx, done)
				if err != nil || len(lost) > 0 {
					t.Error(err, lost)
					return
				}
			}
		})
	}
	wg.Wait()

	require.Len(t, claimed, total)
	for id, n := range claimed {
		require.Equal(t, 1, n, "job %d claimed %d times", id, n)
	}
	require.Equal(t, int64(total), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))

	// The prefix of the claim log in which every tenant still had work.
	left := map[string]int{}
	for _, j := range jobs {
		left[j.Tenant]++
	}
	prefix := len(log)
	for i, j := range log {
		left[j.Tenant]--
		if left[j.Tenant] == 0 {
			prefix = i
			break
		}
	}
	require.Greater(t, prefix, total/2, "a tenant ran out early")
	tokens := map[string]float64{}
	var sum, wsum float64
	for _, j := range log[:prefix] {
		tokens[j.Tenant] += float64(j.Cost)
		sum += float64(j.Cost)
	}
	for _, w := range weight {
		wsum += w
	}
	for name, w := range weight {
		share, want := tokens[name]/sum, w/wsum
		require.InEpsilon(t, want, share, 0.05, "%s: token share %.4f, weight share %.4f", name, share, want)
	}
}

func slicesChunk[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}
