package benchkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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
	// ModeTxn inserts TxnSize jobs of one tenant per call, in one
	// transaction, as a tenant arriving with a small batch does (flood's
	// small tenants). It is measured with one goroutine.
	ModeTxn = "txn"
)

// EnqueueConfig configures Enqueue. Zero fields take the defaults of
// DefaultEnqueueConfig.
type EnqueueConfig struct {
	Runs
	// Jobs is the jobs each single-row measurement inserts.
	Jobs int
	// BulkJobs is the jobs each bulk measurement inserts, BulkSize (at most
	// BulkJobs) per call.
	BulkJobs int
	BulkSize int
	// Concurrency lists the numbers of goroutines inserting at once, each
	// at most MaxEnqueueConcurrency. ModeTxn and the bars against the other
	// systems are measured with 1 only; without it a note says so.
	Concurrency []int
	// TxnJobs is the jobs ModeTxn inserts, TxnSize (at most TxnJobs) per
	// transaction.
	TxnJobs int
	TxnSize int
	// Tenants the jobs are spread over, round robin (in ModeBulkApart, each
	// goroutine's own Tenants); costs are 1..1000.
	Tenants int
	// Systems lists what to measure: SystemFair, SystemFIFO and SystemRiver
	// (the Env must then have a Peer that serves it).
	Systems []string
}

// DefaultEnqueueConfig returns the defaults: 5,000 single-row, 100,000
// bulk (1,000 per call) and 10,000 transaction (100 per call) jobs per
// measurement, with 1 and 8 goroutines, over 100 tenants, for the fair
// queue and FIFO.
func DefaultEnqueueConfig() EnqueueConfig {
	return EnqueueConfig{Jobs: 5000, BulkJobs: 100_000, BulkSize: 1000, TxnJobs: 10_000, TxnSize: 100,
		Concurrency: []int{1, 8}, Tenants: 100, Systems: []string{SystemFair, SystemFIFO}}
}

// Check returns the ConfigError Enqueue would return for c before it
// measures anything, without touching a database.
func (c EnqueueConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c EnqueueConfig) withDefaults() (EnqueueConfig, error) {
	d := DefaultEnqueueConfig()
	for _, f := range []struct{ v, def *int }{
		{&c.Jobs, &d.Jobs}, {&c.BulkJobs, &d.BulkJobs}, {&c.BulkSize, &d.BulkSize}, {&c.Tenants, &d.Tenants},
		{&c.TxnJobs, &d.TxnJobs}, {&c.TxnSize, &d.TxnSize},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = d.Concurrency
	}
	if len(c.Systems) == 0 {
		c.Systems = d.Systems
	}
	for _, s := range c.Systems {
		switch s {
		case SystemFair, SystemFIFO, SystemRiver:
		case SystemRiverDefault:
			// Its fetch settings change how River drains, not how it inserts.
			return c, configErrorf("enqueue: system %q: River inserts the same whatever its fetch settings; use river", s)
		default:
			return c, configErrorf("enqueue: system %q: must be fair, fifo or river", s)
		}
	}
	// A call larger than its measurement's jobs would make one call of
	// fewer jobs than the report says.
	if err := inRange("enqueue", setting{"jobs", int64(c.Jobs), 1, Unbounded},
		setting{"bulk-jobs", int64(c.BulkJobs), 1, Unbounded}, setting{"bulk-size", int64(c.BulkSize), 1, int64(c.BulkJobs)},
		setting{"txn-jobs", int64(c.TxnJobs), 1, Unbounded}, setting{"txn-size", int64(c.TxnSize), 1, int64(c.TxnJobs)},
		setting{"tenants", int64(c.Tenants), 1, Unbounded}); err != nil {
		return c, err
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > MaxEnqueueConcurrency {
			return c, configErrorf("enqueue: concurrency %d: must be in 1..%d", n, MaxEnqueueConcurrency)
		}
		// Each enqueuer makes a call, or a row would count enqueuers that
		// never inserted.
		if calls := (c.BulkJobs + c.BulkSize - 1) / c.BulkSize; n > c.Jobs || n > calls {
			return c, configErrorf("enqueue: concurrency %d: must be at most jobs (%d) and the bulk calls (%d)", n, c.Jobs, calls)
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

	rep.param("txn_jobs", cfg.TxnJobs)
	rep.param("txn_size", cfg.TxnSize)
	rep.param("systems", strings.Join(cfg.Systems, ","))
	for _, s := range cfg.Systems {
		if slices.Contains(RiverSystems, s) && !env.Peer.Serves(s) {
			return nil, configErrorf("enqueue: system %s: the river systems need the batchq-river program (make bench-river)", s)
		}
	}

	// River has no tenants, so bulk-apart is bulk for it.
	systems := cfg.Systems
	var keys []enqueueKey
	for _, mode := range []string{ModeSingle, ModeBulk, ModeBulkApart, ModeTxn} {
		for _, n := range cfg.Concurrency {
			if mode == ModeBulkApart && n == 1 || mode == ModeTxn && n != 1 {
				continue
			}
			for _, s := range systems {
				if mode == ModeBulkApart && s == SystemRiver {
					continue
				}
				keys = append(keys, enqueueKey{s, mode, n})
			}
		}
	}
	if !cfg.NoWarmUp {
		for _, k := range keys[:min(len(keys), len(systems))] {
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
	rate := func(system, mode string, conc int) float64 { return median(res[enqueueKey{system, mode, conc}]) }
	withRiver := slices.Contains(systems, SystemRiver)
	cols := []string{"system", "mode", "concurrency", "jobs_per_s", "ms_per_call", "vs_fifo"}
	if withRiver {
		cols = append(cols, "vs_river")
	}
	oneEnqueuer := slices.Contains(cfg.Concurrency, 1)
	txn := ""
	if oneEnqueuer {
		txn = fmt.Sprintf(", %s in transactions of %s jobs of one tenant", group(fmt.Sprint(cfg.TxnJobs)), group(fmt.Sprint(cfg.TxnSize)))
	}
	t := NewTable("enqueue", fmt.Sprintf("enqueue: %s jobs one per transaction, %s in calls of %s%s; over %d tenants (bulk-apart: %[5]d per enqueuer)",
		group(fmt.Sprint(cfg.Jobs)), group(fmt.Sprint(cfg.BulkJobs)), group(fmt.Sprint(cfg.BulkSize)), txn, cfg.Tenants), cols...)
	for _, k := range keys {
		per := 1.0
		switch k.mode {
		case ModeBulk, ModeBulkApart:
			per = float64(cfg.BulkSize)
		case ModeTxn:
			per = float64(cfg.TxnSize)
		}
		// A call's time, as a caller waits for it: its goroutine's share.
		ms := make([]float64, len(res[k]))
		for i, v := range res[k] {
			ms[i] = 1000 * per * float64(k.conc) / v
		}
		row := []any{k.system, k.mode, k.conc, NewSample(0, res[k]...), NewSample(2, ms...), ratioCell(median(res[k]), rate(SystemFIFO, k.mode, k.conc))}
		if withRiver {
			row = append(row, ratioCell(median(res[k]), rate(SystemRiver, k.mode, k.conc)))
		}
		t.Add(row...)
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
		case k.mode == ModeSingle || k.mode == ModeTxn:
		case k.system == SystemFIFO:
			fifoBest = max(fifoBest, m)
		case k.system == SystemFair && m > bestRate:
			best, bestRate = k, m
		}
	}
	if slices.Contains(systems, SystemFair) {
		one := ""
		if r, ok := res[enqueueKey{SystemFair, ModeBulk, 1}]; ok && best.conc != 1 {
			one = fmt.Sprintf(" (one enqueuer: %s)", group(fmt.Sprintf("%.0f", median(r))))
		}
		rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("enqueue: bulk jobs/s in calls of %s, at the best concurrency (absolute)", group(fmt.Sprint(cfg.BulkSize))),
			bestRate, 50_000, false,
			fmt.Sprintf("fair %s jobs/s, %s with %d enqueuer(s)%s; fifo %s jobs/s",
				group(fmt.Sprintf("%.0f", bestRate)), best.mode, best.conc, one, group(fmt.Sprintf("%.0f", fifoBest)))))
	}
	if !oneEnqueuer {
		rep.Notes = append(rep.Notes, "concurrency has no 1: transactions of one tenant (txn) and the bars against the other systems are measured with one enqueuer only, so they were not measured")
	}
	// The bars against the peers, with one enqueuer.
	if slices.Contains(systems, SystemFair) && oneEnqueuer {
		vs := func(mode, other string, target float64, label string) {
			if !slices.Contains(systems, other) {
				return
			}
			f, o := rate(SystemFair, mode, 1), rate(other, mode, 1)
			rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("enqueue: %s, one enqueuer, fair vs %s", label, other), ratio(f, o), target, false,
				fmt.Sprintf("fair %s jobs/s / %s %s jobs/s", group(fmt.Sprintf("%.0f", f)), other, group(fmt.Sprintf("%.0f", o)))))
		}
		bulk := fmt.Sprintf("bulk in calls of %s", group(fmt.Sprint(cfg.BulkSize)))
		vs(ModeBulk, SystemRiver, 1.5, bulk)
		vs(ModeBulk, SystemFIFO, 0.5, bulk)
		vs(ModeSingle, SystemRiver, 1.0, "one job per transaction")
		vs(ModeSingle, SystemFIFO, 0.9, "one job per transaction")
		if slices.Contains(systems, SystemFIFO) {
			f, o := rate(SystemFair, ModeTxn, 1), rate(SystemFIFO, ModeTxn, 1)
			rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("enqueue: a transaction of %d jobs of one tenant, fair's time vs FIFO's", cfg.TxnSize),
				ratio(o, f), 2, true,
				fmt.Sprintf("fair %s ms / fifo %s ms a transaction", fmtFloat(1000*float64(cfg.TxnSize)/f, 2), fmtFloat(1000*float64(cfg.TxnSize)/o, 2))))
		}
	}
	return rep.finish(), nil
}

// enqueueOnce empties the tables and inserts one measurement's jobs.
func enqueueOnce(ctx context.Context, env *Env, cfg EnqueueConfig, k enqueueKey) (Drained, error) {
	if err := env.reset(ctx, queue.QueueConfig{}); err != nil {
		return Drained{}, err
	}
	total, per := cfg.Jobs, 1
	switch k.mode {
	case ModeBulk, ModeBulkApart:
		total, per = cfg.BulkJobs, cfg.BulkSize
	case ModeTxn:
		total, per = cfg.TxnJobs, cfg.TxnSize
	}
	if env.Peer.Serves(k.system) {
		return env.Peer.Enqueue(ctx, env.URL, k, total, per, cfg.Tenants, cfg.Seed)
	}
	table := "batchq.jobs"
	if k.system == SystemFIFO {
		table = "batchq_fifo.jobs"
	}
	if err := env.settle(ctx, table); err != nil {
		return Drained{}, err
	}
	d, lines, err := runInserts(ctx, k, total, per, cfg.Tenants, cfg.Seed, enqueuer(env, k))
	if err != nil {
		return d, err
	}
	// Every job arrived, spread over the tenants the mode names.
	spread := spreadOf(k, cfg.Tenants, total, per, lines)
	var n, distinct int
	if err := env.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT tenant) FROM "+table).Scan(&n, &distinct); err != nil {
		return d, err
	}
	if n != total || distinct != spread {
		return d, fmt.Errorf("benchkit: enqueue %s %s: %d rows of %d tenants for %d jobs of %d", k.system, k.mode, n, distinct, total, spread)
	}
	return d, nil
}

// spreadOf is how many distinct tenants runInserts gives the jobs of k.
func spreadOf(k enqueueKey, tenants, total, per int, lines []int) int {
	switch k.mode {
	case ModeBulkApart:
		spread := 0
		for _, l := range lines {
			spread += min(tenants, l)
		}
		return spread
	case ModeTxn:
		return min(tenants, (total+per-1)/per)
	}
	return min(tenants, total)
}

// runInserts makes total/per calls of insert with per jobs each (the last
// one the rest) from k.conc goroutines, and returns how long they took and
// how many jobs each goroutine inserted. The jobs' tenants and costs depend
// only on k, the sizes and seed, so every system gets the same ones.
func runInserts(ctx context.Context, k enqueueKey, total, per, tenants int, seed uint64,
	insert func(ctx context.Context, tenants []string, costs []int64) error) (Drained, []int, error) {
	calls := (total + per - 1) / per
	apart := k.mode == ModeBulkApart
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
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
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
				ts, costs := make([]string, n), make([]int64, n)
				for j := range n {
					switch {
					case apart:
						ts[j] = fmt.Sprintf("tenant-%02d-%04d", w, (lines[w]+j)%tenants)
					case k.mode == ModeTxn:
						ts[j] = fmt.Sprintf("tenant-%04d", i%tenants)
					default:
						ts[j] = fmt.Sprintf("tenant-%04d", (i*per+j)%tenants)
					}
					costs[j] = 1 + rng.Int64N(1000)
				}
				lines[w] += n
				if err := insert(ctx, ts, costs); err != nil {
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
	return Drained{Jobs: total, Elapsed: time.Since(start)}, lines, firstErr
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
