package queue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/benchkit"
	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// benchPool returns a pool on a fresh database, large enough for 32 workers.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	return pgtest.Connect(b, pgtest.URL(b)+"&pool_max_conns=40")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	b.Run("single", func(b *testing.B) {
		c := benchClient(b, queue.QueueConfig{Name: "q", MaxPerTenant: 1 << 30})
		b.ResetTimer()
		for i := range b.N {
			if _, err := c.Enqueue(ctx, queue.NewJob{Queue: "q", Tenant: fmt.Sprint("t", i%100), Cost: 100}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
	b.Run("bulk-1000", func(b *testing.B) {
		c := benchClient(b, queue.QueueConfig{Name: "q", MaxPerTenant: 1 << 30})
		batch := make([]queue.NewJob, 1000)
		for i := range batch {
			batch[i] = queue.NewJob{Queue: "q", Tenant: fmt.Sprint("t", i%100), Cost: int64(1 + i%1000)}
		}
		b.ResetTimer()
		for range b.N {
			if _, err := c.EnqueueMany(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "jobs/s")
	})
}

func benchClient(b *testing.B, qc queue.QueueConfig) *queue.Client {
	b.Helper()
	c, err := queue.NewClient(benchPool(b), queue.Config{})
	require.NoError(b, err)
	require.NoError(b, c.CreateQueue(context.Background(), qc))
	return c
}

// BenchmarkDrain drains BATCHQ_BENCH_JOBS (default 50,000) pre-inserted no-op
// jobs of 100 tenants, costs 1..1000, claim + complete + outcome rows, with
// the fair queue and with the FIFO baseline in the same run. Run it with
// -benchtime 1x: each iteration is one whole drain, and jobs/s is the number
// to compare.
func BenchmarkDrain(b *testing.B) {
	ctx := context.Background()
	backlog := benchkit.Backlog{Jobs: envInt("BATCHQ_BENCH_JOBS", 50000), Tenants: 100, MaxCost: 1000, Seed: 1}
	for _, workers := range []int{1, 8, 32} {
		for _, batch := range []int{1, 100} {
			name := fmt.Sprintf("workers=%d/batch=%d", workers, batch)
			b.Run("fair/"+name, func(b *testing.B) {
				c := benchClient(b, queue.QueueConfig{Name: "q", MaxPerTenant: 1 << 30})
				var jobs, secs float64
				for range b.N {
					b.StopTimer()
					// Each drain starts from empty tables with fresh
					// statistics, as the baseline's does.
					_, err := queue.PoolOf(c).Exec(ctx, `TRUNCATE batchq.jobs, batchq.outcomes, batchq.ledger_adjustments, batchq.tenant_ring;
						UPDATE batchq.queue_cursors SET round = 0`)
					require.NoError(b, err)
					require.NoError(b, benchkit.SeedFair(ctx, c, "q", backlog))
					_, err = queue.PoolOf(c).Exec(ctx, `VACUUM ANALYZE batchq.jobs`)
					require.NoError(b, err)
					b.StartTimer()
					d, err := benchkit.DrainFair(ctx, c, "q", workers, batch)
					require.NoError(b, err)
					require.Equal(b, backlog.Jobs, d.Jobs)
					jobs, secs = jobs+float64(d.Jobs), secs+d.Elapsed.Seconds()
				}
				b.ReportMetric(jobs/secs, "jobs/s")
			})
			b.Run("pool/"+name, func(b *testing.B) {
				c := benchClient(b, queue.QueueConfig{Name: "q", MaxPerTenant: 1 << 30})
				var jobs, secs float64
				for range b.N {
					b.StopTimer()
					_, err := queue.PoolOf(c).Exec(ctx, `TRUNCATE batchq.jobs, batchq.outcomes, batchq.ledger_adjustments, batchq.tenant_ring;
						UPDATE batchq.queue_cursors SET round = 0`)
					require.NoError(b, err)
					require.NoError(b, benchkit.SeedFair(ctx, c, "q", backlog))
					_, err = queue.PoolOf(c).Exec(ctx, `VACUUM ANALYZE batchq.jobs`)
					require.NoError(b, err)
					b.StartTimer()
					d, err := benchkit.DrainPool(ctx, c, "q", workers, batch)
					require.NoError(b, err)
					require.Equal(b, backlog.Jobs, d.Jobs)
					jobs, secs = jobs+float64(d.Jobs), secs+d.Elapsed.Seconds()
				}
				b.ReportMetric(jobs/secs, "jobs/s")
			})
			b.Run("fifo/"+name, func(b *testing.B) {
				pool := benchPool(b)
				f, err := fifo.Open(ctx, pool)
				require.NoError(b, err)
				var jobs, secs float64
				for range b.N {
					b.StopTimer()
					require.NoError(b, f.Reset(ctx))
					require.NoError(b, benchkit.SeedFIFO(ctx, f, backlog))
					_, err := pool.Exec(ctx, `VACUUM ANALYZE batchq_fifo.jobs`)
					require.NoError(b, err)
					b.StartTimer()
					d, err := benchkit.DrainFIFO(ctx, f, workers, batch)
					require.NoError(b, err)
					require.Equal(b, backlog.Jobs, d.Jobs)
					jobs, secs = jobs+float64(d.Jobs), secs+d.Elapsed.Seconds()
				}
				b.ReportMetric(jobs/secs, "jobs/s")
			})
		}
	}
}

// BenchmarkClaim measures one claim of 100 jobs against a backlog of 10,000
// and of 1,000,000 queued rows spread over 10,000 tenants (set
// BATCHQ_BENCH_BIG to change the larger size). The claimed jobs are completed
// and replaced outside the timer, so the backlog stays the same size.
func BenchmarkClaim(b *testing.B) {
	ctx := context.Background()
	for _, rows := range []int{10_000, envInt("BATCHQ_BENCH_BIG", 1_000_000)} {
		b.Run(fmt.Sprintf("rows=%d/tenants=10000", rows), func(b *testing.B) {
			c := benchClient(b, queue.QueueConfig{Name: "q", MaxPerTenant: 1 << 30})
			require.NoError(b, benchkit.SeedFair(ctx, c, "q", benchkit.Backlog{Jobs: rows, Tenants: 10000, MaxCost: 1000, Seed: 2}))
			_, err := queue.PoolOf(c).Exec(ctx, `VACUUM ANALYZE batchq.jobs`)
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				jobs, err := c.Claim(ctx, "q", &queue.ClaimOpts{Limit: 100})
				if err != nil || len(jobs) != 100 {
					b.Fatal(err, len(jobs))
				}
				b.StopTimer()
				done := make([]queue.Completion, len(jobs))
				again := make([]queue.NewJob, len(jobs))
				for i, j := range jobs {
					done[i] = queue.Completion{Job: j}
					again[i] = queue.NewJob{Queue: "q", Tenant: j.Tenant, Cost: j.Cost}
				}
				_, err = c.CompleteMany(ctx, done)
				require.NoError(b, err)
				_, err = c.EnqueueMany(ctx, again)
				require.NoError(b, err)
				b.StartTimer()
			}
		})
	}
}
