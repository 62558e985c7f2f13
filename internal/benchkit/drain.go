package benchkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/queue"
)

// Backlog describes the jobs to pre-insert: Jobs jobs spread evenly over
// Tenants tenants in random order, costs uniform in 1..MaxCost.
type Backlog struct {
	Jobs    int
	Tenants int
	MaxCost int64
	Seed    uint64
}

// Each calls fn for every job of the backlog, in insertion order.
func (b Backlog) Each(fn func(tenant string, cost int64)) {
	rng := rand.New(rand.NewPCG(b.Seed, 0xbac))
	for i := range b.Jobs {
		fn(fmt.Sprintf("tenant-%04d", rng.IntN(b.Tenants)), 1+rng.Int64N(b.MaxCost))
		_ = i
	}
}

// SeedFair enqueues the backlog into a batchq queue in batches of 5,000.
func SeedFair(ctx context.Context, c *queue.Client, queueName string, b Backlog) error {
	var batch []queue.NewJob
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := c.EnqueueMany(ctx, batch)
		batch = batch[:0]
		return err
	}
	var err error
	b.Each(func(tenant string, cost int64) {
		if err != nil {
			return
		}
		batch = append(batch, queue.NewJob{Queue: queueName, Tenant: tenant, Cost: cost})
		if len(batch) == 5000 {
			err = flush()
		}
	})
	if err != nil {
		return err
	}
	return flush()
}

// SeedFIFO inserts the backlog into the FIFO baseline in batches of 5,000.
func SeedFIFO(ctx context.Context, f *fifo.Queue, b Backlog) error {
	return seedBatches(b, func(tenants []string, costs []int64) error { return f.Insert(ctx, tenants, costs) })
}

// SeedLean inserts the backlog into the lean FIFO baseline the same way.
func SeedLean(ctx context.Context, l *fifo.Lean, b Backlog) error {
	return seedBatches(b, func(tenants []string, costs []int64) error { return l.Insert(ctx, tenants, costs) })
}

// seedBatches calls insert for each 5,000 jobs of the backlog, in order.
func seedBatches(b Backlog, insert func(tenants []string, costs []int64) error) error {
	var tenants []string
	var costs []int64
	var err error
	b.Each(func(tenant string, cost int64) {
		if err != nil {
			return
		}
		tenants, costs = append(tenants, tenant), append(costs, cost)
		if len(tenants) == 5000 {
			err = insert(tenants, costs)
			tenants, costs = tenants[:0], costs[:0]
		}
	})
	if err != nil {
		return err
	}
	if len(tenants) > 0 {
		return insert(tenants, costs)
	}
	return nil
}

// Drained is what one drain did.
type Drained struct {
	Jobs    int
	Elapsed time.Duration
	// MaintainPass is what one maintenance pass took before the drain, when
	// it was measured.
	MaintainPass time.Duration
}

// JobsPerSecond is the drain's throughput.
func (d Drained) JobsPerSecond() float64 {
	if d.Elapsed <= 0 {
		return 0
	}
	return float64(d.Jobs) / d.Elapsed.Seconds()
}

// DrainFair runs workers claimers, each claiming up to batch jobs at a time
// and completing them together (outcome rows included), until the queue has
// nothing left to claim.
func DrainFair(ctx context.Context, c *queue.Client, queueName string, workers, batch int) (Drained, error) {
	return drain(workers, func() (int, error) {
		jobs, err := c.Claim(ctx, queueName, &queue.ClaimOpts{Limit: batch, Worker: "bench"})
		if err != nil || len(jobs) == 0 {
			return 0, err
		}
		done := make([]queue.Completion, len(jobs))
		for i, j := range jobs {
			done[i] = queue.Completion{Job: j}
		}
		lost, err := c.CompleteMany(ctx, done)
		if err == nil && len(lost) > 0 {
			err = fmt.Errorf("benchkit: %d completions lost their lease", len(lost))
		}
		return len(jobs), err
	})
}

// DrainFIFO drains the FIFO baseline the same way.
func DrainFIFO(ctx context.Context, f *fifo.Queue, workers, batch int) (Drained, error) {
	return drain(workers, func() (int, error) {
		jobs, err := f.Claim(ctx, batch, "bench")
		if err != nil || len(jobs) == 0 {
			return 0, err
		}
		n, err := f.Complete(ctx, jobs)
		if err == nil && n != len(jobs) {
			err = fmt.Errorf("benchkit: %d completions lost their lease", len(jobs)-n)
		}
		return len(jobs), err
	})
}

// DrainLean drains the lean FIFO baseline the same way.
func DrainLean(ctx context.Context, l *fifo.Lean, workers, batch int) (Drained, error) {
	return drain(workers, func() (int, error) {
		jobs, err := l.Claim(ctx, batch)
		if err != nil || len(jobs) == 0 {
			return 0, err
		}
		ids := make([]int64, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
		}
		return len(jobs), l.Complete(ctx, ids)
	})
}

// drain runs step on workers goroutines until each sees an empty queue.
func drain(workers int, step func() (int, error)) (Drained, error) {
	var mu sync.Mutex
	var total int
	var firstErr error
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				n, err := step()
				mu.Lock()
				total += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				stop := n == 0 || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	wg.Wait()
	return Drained{Jobs: total, Elapsed: time.Since(start)}, firstErr
}
