package benchkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/internal/fifo/fifodb"
	"github.com/batchq/batchq/queue"
)

// The ways Enqueue inserts jobs.
const (
	// ModeSingle inserts one job per transaction, inside a transaction the
	// caller opened (EnqueueTx), as an application does with its own change.
	ModeSingle = "single"
	// ModeBulk inserts BulkSize jobs per call and transaction (EnqueueMany),
	// every call over the same tenants: concurrent calls take the same
	// tenants' ring rows and wait for each other.
	ModeBulk = "bulk"
	// ModeBulkApart is ModeBulk with each goroutine enqueueing for tenants
	// of its own, as separate imports do. It is measured only with more
	// than one goroutine; with one it is ModeBulk.
	ModeBulkApart = "bulk-apart"
)

// EnqueueConfig configures Enqueue. Zero fields take the defaults of
// DefaultEnqueueConfig.
type EnqueueConfig struct {
	Runs
	// Jobs is the jobs each single-row measurement inserts.
	Jobs int
	// BulkJobs is the jobs each bulk measurement inserts, BulkSize per call.
	BulkJobs int
	BulkSize int
	// Concurrency lists the numbers of goroutines inserting at once.
	Concurrency []int
	// Tenants the jobs are spread over, round robin (in ModeBulkApart, each
	// goroutine's own Tenants); costs are 1..1000.
	Tenants int
}

// DefaultEnqueueConfig returns the defaults: 5,000 single-row and 100,000
// bulk jobs (1,000 per call) per measurement, with 1 and 8 goroutines, over
// 100 tenants.
func DefaultEnqueueConfig() EnqueueConfig {
	return EnqueueConfig{Jobs: 5000, BulkJobs: 100_000, BulkSize: 1000, Concurrency: []int{1, 8}, Tenants: 100}
}

func (c EnqueueConfig) withDefaults() (EnqueueConfig, error) {
	d := DefaultEnqueueConfig()
	for _, f := range []struct{ v, def *int }{
		{&c.Jobs, &d.Jobs}, {&c.BulkJobs, &d.BulkJobs}, {&c.BulkSize, &d.BulkSize}, {&c.Tenants, &d.Tenants},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.Jobs < 1 || c.BulkJobs < 1 || c.BulkSize < 1 || c.Tenants < 1 {
		return c, configErrorf("enqueue: sizes must be positive")
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 32 {
			return c, configErrorf("enqueue: concurrency %d: must be in 1..32", n)
		}
	}
	return c, nil
}

type enqueueKey struct {
	system, mode string
	conc         int
}

// Enqueue measures how fast jobs go in: one per transaction inside the
// caller's transaction, and in bulk, with each level of concurrency (in bulk,
// enqueuers sharing tenants and enqueuers apart), for the fair queue (which
// keeps each tenant's bound and DRR keys as it inserts) and for the FIFO
// baseline's plain INSERT. Its bar is bulk jobs/s at the best of those.
func Enqueue(ctx context.Context, env *Env, cfg EnqueueConfig) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rep, err := newReport(ctx, env, "enqueue", cfg.Runs)
	if err != nil {
		return nil, err
	}
	rep.param("jobs", cfg.Jobs)
	rep.param("bulk_jobs", cfg.BulkJobs)
	rep.param("bulk_size", cfg.BulkSize)
	rep.param("concurrency", joinInts(cfg.Concurrency))
	rep.param("tenants", cfg.Tenants)

	var keys []enqueueKey
	for _, mode := range []string{ModeSingle, ModeBulk, ModeBulkApart} {
		for _, n := range cfg.Concurrency {
			if mode == ModeBulkApart && n == 1 {
				continue
			}
			for _, s := range []string{SystemFair, SystemFIFO} {
				keys = append(keys, enqueueKey{s, mode, n})
			}
		}
	}
	if !cfg.NoWarmUp {
		for _, k := range keys[:2] {
			if _, err := enqueueOnce(ctx, env, cfg, k); err != nil {
				return nil, err
			}
		}
		cfg.progress("enqueue warm-up done")
	}
	res := map[enqueueKey][]float64{}
	for r := range cfg.reps() {
		for _, k := range keys {
			d, err := enqueueOnce(ctx, env, cfg, k)
			if err != nil {
				return nil, err
			}
			res[k] = append(res[k], d.JobsPerSecond())
			cfg.progress("enqueue rep %d/%d %s %s concurrency=%d: %.0f jobs/s", r+1, cfg.reps(), k.system, k.mode, k.conc, d.JobsPerSecond())
		}
	}
	t := NewTable("enqueue", fmt.Sprintf("enqueue: %s jobs one per transaction, %s in calls of %s, over %d tenants (bulk-apart: %[4]d per enqueuer)",
		group(fmt.Sprint(cfg.Jobs)), group(fmt.Sprint(cfg.BulkJobs)), group(fmt.Sprint(cfg.BulkSize)), cfg.Tenants),
		"system", "mode", "concurrency", "jobs_per_s", "vs_fifo")
	for _, k := range keys {
		f := median(res[enqueueKey{SystemFIFO, k.mode, k.conc}])
		t.Add(k.system, k.mode, k.conc, NewSample(0, res[k]...), ratioCell(median(res[k]), f))
	}
	rep.Tables = append(rep.Tables, t)

	// The one absolute bar: it holds on a machine like the one in
	// BENCHMARKS.md, not on every machine. The detail names the cell that
	// set it and what one enqueuer did.
	var best enqueueKey
	bestRate, fifoBest := 0.0, 0.0
	for _, k := range keys {
		m := median(res[k])
		switch {
		case k.mode == ModeSingle:
		case k.system == SystemFIFO:
			fifoBest = max(fifoBest, m)
		case m > bestRate:
			best, bestRate = k, m
		}
	}
	one := ""
	if r, ok := res[enqueueKey{SystemFair, ModeBulk, 1}]; ok && best.conc != 1 {
		one = fmt.Sprintf(" (one enqueuer: %s)", group(fmt.Sprintf("%.0f", median(r))))
	}
	rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("enqueue: bulk jobs/s in calls of %s, at the best concurrency (absolute)", group(fmt.Sprint(cfg.BulkSize))),
		bestRate, 50_000, false,
		fmt.Sprintf("fair %s jobs/s, %s with %d enqueuer(s)%s; fifo %s jobs/s",
			group(fmt.Sprintf("%.0f", bestRate)), best.mode, best.conc, one, group(fmt.Sprintf("%.0f", fifoBest)))))
	return rep.finish(), nil
}

// enqueueOnce empties the tables and inserts one measurement's jobs.
func enqueueOnce(ctx context.Context, env *Env, cfg EnqueueConfig, k enqueueKey) (Drained, error) {
	if err := env.reset(ctx, queue.QueueConfig{}); err != nil {
		return Drained{}, err
	}
	table := "batchq.jobs"
	if k.system == SystemFIFO {
		table = "batchq_fifo.jobs"
	}
	if err := env.settle(ctx, table); err != nil {
		return Drained{}, err
	}
	total, per := cfg.Jobs, 1
	if k.mode != ModeSingle {
		total, per = cfg.BulkJobs, cfg.BulkSize
	}
	calls := (total + per - 1) / per
	apart := k.mode == ModeBulkApart
	insert := enqueuer(env, k)
	var mu sync.Mutex
	var firstErr error
	next := 0
	// Calls go to whichever goroutine is free, except apart, where goroutine
	// w makes calls w, w+conc, w+2conc, … for its own tenants.
	take := func(w, mine int) int {
		if apart {
			return w + mine*k.conc
		}
		mu.Lock()
		defer mu.Unlock()
		next++
		return next - 1
	}
	lines := make([]int, k.conc) // each goroutine's
	start := time.Now()
	var wg sync.WaitGroup
	for w := range k.conc {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
		wg.Go(func() {
			for mine := 0; ; mine++ {
				i := take(w, mine)
				mu.Lock()
				stop := i >= calls || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				n := min(per, total-i*per)
				tenants, costs := make([]string, n), make([]int64, n)
				for j := range n {
					if apart {
						tenants[j] = fmt.Sprintf("tenant-%02d-%04d", w, (lines[w]+j)%cfg.Tenants)
					} else {
						tenants[j] = fmt.Sprintf("tenant-%04d", (i*per+j)%cfg.Tenants)
					}
					costs[j] = 1 + rng.Int64N(1000)
				}
				lines[w] += n
				if err := insert(ctx, tenants, costs); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	d := Drained{Jobs: total, Elapsed: time.Since(start)}
	if firstErr != nil {
		return d, firstErr
	}
	// Every job arrived, spread over the tenants the mode names.
	spread := min(cfg.Tenants, total)
	if apart {
		spread = 0
		for _, l := range lines {
			spread += min(cfg.Tenants, l)
		}
	}
	var n, distinct int
	if err := env.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT tenant) FROM "+table).Scan(&n, &distinct); err != nil {
		return d, err
	}
	if n != total || distinct != spread {
		return d, fmt.Errorf("benchkit: enqueue %s %s: %d rows of %d tenants for %d jobs of %d", k.system, k.mode, n, distinct, total, spread)
	}
	return d, nil
}

// enqueuer returns the insert a measurement makes per call.
func enqueuer(env *Env, k enqueueKey) func(ctx context.Context, tenants []string, costs []int64) error {
	fifoQ := fifodb.New()
	switch {
	case k.system == SystemFIFO && k.mode == ModeSingle:
		// The application's transaction, holding the one INSERT.
		return func(ctx context.Context, tenants []string, costs []int64) error {
			return pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
				return fifoQ.Insert(ctx, tx, fifo.InsertParams(tenants, costs))
			})
		}
	case k.system == SystemFIFO:
		return env.FIFO.Insert
	case k.mode == ModeSingle:
		return func(ctx context.Context, tenants []string, costs []int64) error {
			return pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
				_, err := env.Client.EnqueueTx(ctx, tx, queue.NewJob{Queue: benchQueue, Tenant: tenants[0], Cost: costs[0]})
				return err
			})
		}
	}
	return func(ctx context.Context, tenants []string, costs []int64) error {
		return insertJobs(ctx, env, SystemFair, tenants, costs)
	}
}
