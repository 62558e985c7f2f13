package benchkit

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/queue"
)

// DrainConfig configures Drain. Zero fields take the defaults of
// DefaultDrainConfig.
type DrainConfig struct {
	Runs
	// Jobs, Tenants and MaxCost shape the backlog: Jobs no-op jobs spread
	// over Tenants tenants in random order, costs uniform in 1..MaxCost.
	Jobs    int
	Tenants int
	MaxCost int64
	// Processes lists the numbers of worker processes to measure.
	Processes []int
	// Batches lists the claim batch sizes to measure.
	Batches []int
	// Workers is the claimers of each measurement in all, at most
	// MaxDrainWorkers, split as evenly as possible over its processes (at
	// least one each), so rows with more processes do the same work with
	// the same concurrency.
	Workers int
	// Systems lists what to drain: SystemFair, SystemPool, SystemFIFO,
	// SystemLean, and the River systems (the Env must have a Peer that
	// serves them). River is measured at one batch size only, the bar's
	// (100 when it is measured, else the largest): its workers fetch as
	// many jobs as they have free slots, whatever the batch.
	Systems []string
	// Scheduled, when above 0, puts that many jobs scheduled a year ahead
	// (over Tenants tenants) in the fair queue's table beside each fair
	// backlog: jobs waiting for later must not slow the drain of the jobs
	// due now. Only the fair system is measured with them (the worker pool's
	// drain waits for scheduled jobs too).
	Scheduled int
	// Spawn starts the worker processes. Required.
	Spawn Spawner
}

// DefaultDrainConfig returns the defaults: 50,000 jobs of 100 tenants, costs
// 1..1000, 8 claimers in 1, 2 and 4 processes, batches of 10, 100 and 1000, for
// the fair queue, the worker pool and both baselines.
func DefaultDrainConfig() DrainConfig {
	return DrainConfig{
		Jobs: 50_000, Tenants: 100, MaxCost: 1000,
		Processes: []int{1, 2, 4}, Batches: []int{10, 100, 1000}, Workers: 8,
		Systems: []string{SystemFair, SystemPool, SystemFIFO, SystemLean},
	}
}

// Check returns the ConfigError Drain would return for c before it
// measures anything, without touching a database.
func (c DrainConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c DrainConfig) withDefaults() (DrainConfig, error) {
	d := DefaultDrainConfig()
	if c.Jobs == 0 {
		c.Jobs = d.Jobs
	}
	if c.Tenants == 0 {
		c.Tenants = d.Tenants
	}
	if c.MaxCost == 0 {
		c.MaxCost = d.MaxCost
	}
	if len(c.Processes) == 0 {
		c.Processes = d.Processes
	}
	if len(c.Batches) == 0 {
		c.Batches = d.Batches
	}
	if c.Workers == 0 {
		c.Workers = d.Workers
	}
	if len(c.Systems) == 0 {
		c.Systems = d.Systems
	}
	if c.Spawn == nil {
		return c, configErrorf("drain: Spawn is required")
	}
	if err := inRange("drain", setting{"jobs", int64(c.Jobs), 1, Unbounded}, setting{"tenants", int64(c.Tenants), 1, Unbounded},
		setting{"max-cost", c.MaxCost, 1, queue.MaxCost}, setting{"workers", int64(c.Workers), 1, MaxDrainWorkers},
		setting{"scheduled", int64(c.Scheduled), 0, Unbounded}); err != nil {
		return c, err
	}
	if c.Scheduled > 0 && slices.ContainsFunc(c.Systems, func(s string) bool { return s != SystemFair && s != SystemFIFO && s != SystemLean }) {
		return c, configErrorf("drain: scheduled jobs are measured with the fair system and the FIFO baselines only (a worker pool's drain waits for scheduled jobs)")
	}
	for _, p := range c.Processes {
		if p < 1 || p > MaxDrainProcesses {
			return c, configErrorf("drain: processes %d: must be in 1..%d", p, MaxDrainProcesses)
		}
		if p > c.Workers {
			// Every process claims: fewer claimers than processes would
			// quietly run more claimers than asked for.
			return c, configErrorf("drain: processes %d: must be at most workers (%d claimers in all)", p, c.Workers)
		}
	}
	for _, b := range c.Batches {
		if b < 1 || b > MaxDrainBatch {
			return c, configErrorf("drain: batch %d: must be in 1..%d", b, MaxDrainBatch)
		}
	}
	for _, s := range c.Systems {
		if !slices.Contains(append([]string{SystemFair, SystemPool, SystemFIFO, SystemLean}, RiverSystems...), s) {
			return c, configErrorf("drain: system %q: must be fair, pool, fifo, lean, river or river-default", s)
		}
	}
	return c, nil
}

type drainKey struct {
	system     string
	procs, bat int
}

// Drain measures how fast pre-inserted no-op jobs drain, in jobs per second,
// for each system, number of worker processes and claim batch size: the
// fair queue with outcome rows beside the FIFO baseline doing the same work
// with the same rows, in the same run. Its bar: the fair queue drains at
// least 0.8× as fast as FIFO at batches of 100 (each at its best batch size
// when 100 is not measured), for each number of processes. With the lean baseline measured too, a note gives the
// fair queue against it and splits that gap in two: the fair queue against
// FIFO is what fairness costs, FIFO against lean what batchq's rows cost.
func Drain(ctx context.Context, env *Env, cfg DrainConfig) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rep, err := newReport(ctx, env, "drain", cfg.Runs)
	if err != nil {
		return nil, err
	}
	rep.param("jobs", cfg.Jobs)
	rep.param("tenants", cfg.Tenants)
	rep.param("max_cost", cfg.MaxCost)
	rep.param("workers", cfg.Workers)
	rep.param("processes", joinInts(cfg.Processes))
	rep.param("batches", joinInts(cfg.Batches))
	rep.param("systems", strings.Join(cfg.Systems, ","))
	if cfg.Scheduled > 0 {
		rep.param("scheduled", cfg.Scheduled)
	}
	for _, s := range cfg.Systems {
		if slices.Contains(RiverSystems, s) && !env.Peer.Serves(s) {
			return nil, configErrorf("drain: system %s: the river systems need the batchq-river program (make bench-river)", s)
		}
	}
	// The pool's bars, and River's one row, are at batch 100 (or the
	// largest batch measured).
	poolBatch := slices.Max(cfg.Batches)
	if slices.Contains(cfg.Batches, 100) {
		poolBatch = 100
	}
	// measured says whether a cell is measured: River's at one batch size.
	measured := func(s string, b int) bool { return !slices.Contains(RiverSystems, s) || b == poolBatch }

	backlog := Backlog{Jobs: cfg.Jobs, Tenants: cfg.Tenants, MaxCost: cfg.MaxCost, Seed: cfg.Seed}
	run := func(k drainKey) (Drained, error) {
		return drainOnce(ctx, env, cfg, backlog, k)
	}
	if !cfg.NoWarmUp {
		for _, s := range cfg.Systems {
			k := drainKey{s, cfg.Processes[0], slices.Max(cfg.Batches)}
			if !measured(s, k.bat) {
				k.bat = poolBatch
			}
			d, err := run(k)
			if err != nil {
				return nil, err
			}
			cfg.progress("drain warm-up %s processes=%d batch=%d: %.0f jobs/s", s, k.procs, k.bat, d.JobsPerSecond())
		}
	}
	results := map[drainKey][]float64{}
	secs := map[drainKey][]float64{}
	var passes []float64 // maintenance passes beside the scheduled jobs, ms
	for r := range cfg.reps() {
		for _, p := range cfg.Processes {
			for _, b := range cfg.Batches {
				// Systems interleaved: drift hits them alike.
				for _, s := range cfg.Systems {
					if !measured(s, b) {
						continue
					}
					k := drainKey{s, p, b}
					d, err := run(k)
					if err != nil {
						return nil, err
					}
					results[k] = append(results[k], d.JobsPerSecond())
					if d.MaintainPass > 0 {
						passes = append(passes, float64(d.MaintainPass)/float64(time.Millisecond))
					}
					secs[k] = append(secs[k], d.Elapsed.Seconds())
					cfg.progress("drain rep %d/%d %s processes=%d batch=%d: %.0f jobs/s", r+1, cfg.reps(), s, p, b, d.JobsPerSecond())
				}
			}
		}
	}

	title := fmt.Sprintf("drain: %d no-op jobs, %d tenants, costs 1..%d, outcome rows written; %d claimers in all",
		cfg.Jobs, cfg.Tenants, cfg.MaxCost, cfg.Workers)
	if cfg.Scheduled > 0 {
		title += fmt.Sprintf("; fair beside %d jobs scheduled a year ahead", cfg.Scheduled)
	}
	t := NewTable("drain", title,
		"system", "processes", "claimers_per_process", "batch", "jobs_per_s", "seconds", "vs_fifo")
	for _, p := range cfg.Processes {
		for _, b := range cfg.Batches {
			for _, s := range cfg.Systems {
				if !measured(s, b) {
					continue
				}
				k := drainKey{s, p, b}
				batch, claimers := any(b), claimersLabel(cfg.Workers, p)
				vs := ratioCell(median(results[k]), median(results[drainKey{SystemFIFO, p, b}]))
				if slices.Contains(RiverSystems, s) {
					// River fetches as many jobs as it has free slots: it
					// has no batch, and no FIFO row ran as it did.
					batch, claimers, vs = nil, Labeled{RiverMaxWorkers, fmt.Sprintf("%d (MaxWorkers)", RiverMaxWorkers)}, nil
				}
				t.Add(s, p, claimers, batch, NewSample(0, results[k]...), NewSample(2, secs[k]...), vs)
			}
		}
	}
	rep.Tables = append(rep.Tables, t)

	if slices.Contains(cfg.Systems, SystemFIFO) {
		for _, p := range cfg.Processes {
			fifoRate, fifoBatch, at := barBatch(results, SystemFIFO, p, cfg.Batches)
			for _, s := range []string{SystemFair, SystemPool} {
				if !slices.Contains(cfg.Systems, s) {
					continue
				}
				rate, batch, _ := barBatch(results, s, p, cfg.Batches)
				rep.Bars = append(rep.Bars, newBar(
					fmt.Sprintf("drain %s vs FIFO, %s, %d process(es)", s, at, p),
					ratio(rate, fifoRate), 0.8, false,
					fmt.Sprintf("%s %s jobs/s at batch %d / fifo %s jobs/s at batch %d", s, fmtFloat(rate, 0), batch, fmtFloat(fifoRate, 0), fifoBatch)))
			}
		}
	}
	// The worker pool against the batch claimer it is built on: what
	// claiming through a pool costs.
	if slices.Contains(cfg.Systems, SystemPool) && slices.Contains(cfg.Systems, SystemFair) {
		for _, p := range cfg.Processes {
			pool, fair := median(results[drainKey{SystemPool, p, poolBatch}]), median(results[drainKey{SystemFair, p, poolBatch}])
			rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("drain pool vs the batch claimer, batch %d, %d process(es)", poolBatch, p),
				ratio(pool, fair), 0.95, false,
				fmt.Sprintf("pool %s jobs/s / fair %s jobs/s", fmtFloat(pool, 0), fmtFloat(fair, 0))))
		}
	}
	// batchq's worker pool against River's tuned pool, both as an
	// application runs them, at the batch River was measured at.
	if slices.Contains(cfg.Systems, SystemPool) && slices.Contains(cfg.Systems, SystemRiver) {
		for _, p := range cfg.Processes {
			pool, river := median(results[drainKey{SystemPool, p, poolBatch}]), median(results[drainKey{SystemRiver, p, poolBatch}])
			rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("drain pool vs River tuned, batch %d, %d process(es)", poolBatch, p),
				ratio(pool, river), 3, false,
				fmt.Sprintf("pool %s jobs/s / river %s jobs/s", fmtFloat(pool, 0), fmtFloat(river, 0))))
		}
	}
	if len(passes) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("a maintenance pass over the fair queue beside %d scheduled jobs, none due: median %s ms (%d passes)",
			cfg.Scheduled, fmtFloat(median(passes), 1), len(passes)))
	}
	if slices.Contains(cfg.Systems, SystemFair) && slices.Contains(cfg.Systems, SystemLean) {
		for _, p := range cfg.Processes {
			fair, fairBatch := bestBatch(results, SystemFair, p, cfg.Batches)
			lean, leanBatch := bestBatch(results, SystemLean, p, cfg.Batches)
			note := fmt.Sprintf("%d process(es), each at its best batch: fair vs lean FIFO %s (fair %s jobs/s at batch %d, lean %s at batch %d)",
				p, fmtFloat(ratio(fair, lean), 2), fmtFloat(fair, 0), fairBatch, fmtFloat(lean, 0), leanBatch)
			if slices.Contains(cfg.Systems, SystemFIFO) {
				fifoBest, _ := bestBatch(results, SystemFIFO, p, cfg.Batches)
				note += fmt.Sprintf(" = fair vs FIFO %s (what fairness costs) × FIFO vs lean %s (what batchq's rows cost)",
					fmtFloat(ratio(fair, fifoBest), 2), fmtFloat(ratio(fifoBest, lean), 2))
			}
			rep.Notes = append(rep.Notes, note)
		}
	}
	return rep.finish(), nil
}

// drainOnce seeds the backlog for k's system and drains it with k's
// processes, checking that every job was drained and has its outcome row
// (for River, is recorded completed).
func drainOnce(ctx context.Context, env *Env, cfg DrainConfig, b Backlog, k drainKey) (Drained, error) {
	if err := env.reset(ctx, queue.QueueConfig{}); err != nil {
		return Drained{}, err
	}
	spawn := cfg.Spawn
	finished := func(query string) func() (int, error) {
		return func() (n int, err error) { return n, env.Pool.QueryRow(ctx, query).Scan(&n) }
	}
	table, done := "batchq.jobs", finished(`SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded'`)
	var err error
	switch k.system {
	case SystemRiver, SystemRiverDefault:
		// The peer settles its own table.
		table, spawn = "", env.Peer.Spawner()
		done = func() (int, error) { return env.Peer.Completed(ctx, env.URL) }
		err = env.Peer.Seed(ctx, env.URL, b)
	case SystemFIFO:
		table, done = "batchq_fifo.jobs", finished(`SELECT count(*) FROM batchq_fifo.outcomes WHERE outcome = 'succeeded'`)
		err = SeedFIFO(ctx, env.FIFO, b)
	case SystemLean:
		table, done = "batchq_fifo.lean_jobs", finished(`SELECT count(*) FROM batchq_fifo.lean_outcomes`)
		err = SeedLean(ctx, fifo.NewLean(env.Pool), b)
	default:
		err = SeedFair(ctx, env.Client, benchQueue, b)
		if err == nil && cfg.Scheduled > 0 {
			err = seedScheduled(ctx, env, cfg.Scheduled, b)
		}
	}
	if err != nil {
		return Drained{}, err
	}
	if table != "" {
		if err := env.settle(ctx, table); err != nil {
			return Drained{}, err
		}
	}
	var pass time.Duration
	if k.system == SystemFair && cfg.Scheduled > 0 {
		// What a worker's maintenance pass costs with them, none due: the
		// promotion reads the due jobs' index from its head.
		t0 := time.Now()
		st, err := env.Client.Maintain(ctx, benchQueue)
		pass = time.Since(t0)
		if err != nil {
			return Drained{}, err
		}
		if st.Requeued != 0 {
			return Drained{}, fmt.Errorf("benchkit: drain: a maintenance pass promoted %d jobs scheduled a year ahead", st.Requeued)
		}
	}
	var args [][]string
	for _, n := range splitWorkers(cfg.Workers, k.procs) {
		args = append(args, workerArgs(k.system, n, k.bat))
	}
	d, err := runProcs(ctx, spawn, env.URL, args)
	d.MaintainPass = pass
	if err != nil {
		return d, err
	}
	if d.Jobs != b.Jobs {
		return d, fmt.Errorf("benchkit: drain %s: drained %d jobs of %d", k.system, d.Jobs, b.Jobs)
	}
	n, err := done()
	if err != nil {
		return d, err
	}
	if n != b.Jobs {
		return d, fmt.Errorf("benchkit: drain %s: %d outcome rows for %d jobs", k.system, n, b.Jobs)
	}
	return d, nil
}

func workerArgs(system string, claimers, batch int) []string {
	return []string{"-system", system, "-claimers", strconv.Itoa(claimers), "-batch", strconv.Itoa(batch)}
}

// splitWorkers spreads workers over procs processes, at least one each.
func splitWorkers(workers, procs int) []int {
	out := make([]int, procs)
	for i := range out {
		out[i] = workers / procs
		if i < workers%procs {
			out[i]++
		}
	}
	return out
}

// claimersLabel is a row's claimers per process: a number, their mean when
// workers do not split evenly over procs (so that processes × claimers per
// process is the claimers in all), shown in the text table as the range,
// like 1-2.
func claimersLabel(workers, procs int) Labeled {
	per := splitWorkers(workers, procs)
	l := Labeled{Value: round(float64(workers)/float64(procs), 3), Label: strconv.Itoa(per[0])}
	if slices.Min(per) != slices.Max(per) {
		l.Label = fmt.Sprintf("%d-%d", slices.Min(per), slices.Max(per))
	}
	return l
}

// barBatch returns the median jobs/s of system at procs processes that the
// bar compares, at which batch size, and a label saying so: at batches of
// 100, as the bar is set, when they were measured; else each system at its
// best batch size.
func barBatch(results map[drainKey][]float64, system string, procs int, batches []int) (float64, int, string) {
	if slices.Contains(batches, 100) {
		return median(results[drainKey{system, procs, 100}]), 100, "at batch 100"
	}
	rate, batch := bestBatch(results, system, procs, batches)
	return rate, batch, "each at its best batch"
}

// bestBatch returns the highest median jobs/s of system at procs processes
// over the batch sizes, and that batch size.
func bestBatch(results map[drainKey][]float64, system string, procs int, batches []int) (float64, int) {
	best, at := 0.0, 0
	for _, b := range batches {
		if m := median(results[drainKey{system, procs, b}]); m > best {
			best, at = m, b
		}
	}
	return best, at
}

func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// seedScheduled enqueues n jobs scheduled a year ahead, a millisecond
// apart, over b's tenants, in calls of 5,000.
func seedScheduled(ctx context.Context, env *Env, n int, b Backlog) error {
	at := time.Now().Add(365 * 24 * time.Hour)
	for done := 0; done < n; done += 5000 {
		jobs := make([]queue.NewJob, min(5000, n-done))
		for i := range jobs {
			g := done + i
			jobs[i] = queue.NewJob{Queue: benchQueue, Tenant: fmt.Sprintf("tenant-%04d", g%b.Tenants), Cost: 1 + int64(g)%b.MaxCost,
				RunAt: at.Add(time.Duration(g) * time.Millisecond)}
		}
		if _, err := env.Client.EnqueueMany(ctx, jobs); err != nil {
			return fmt.Errorf("benchkit: seed scheduled jobs: %w", err)
		}
	}
	return nil
}
