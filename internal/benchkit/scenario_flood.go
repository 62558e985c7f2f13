package benchkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/drr"
	"github.com/batchq/batchq/internal/fifo"
	"github.com/batchq/batchq/internal/fifo/fifodb"
	"github.com/batchq/batchq/queue"
)

// FloodConfig configures Flood. Zero fields take the defaults of
// DefaultFloodConfig.
type FloodConfig struct {
	Runs
	// Backlog is the jobs the flooding tenant has queued before anyone else
	// arrives.
	Backlog int
	// SmallTenants tenants (at most MaxFloodSmallTenants) of SmallJobs jobs
	// each arrive after it, once the workers have claimed ArriveAfter jobs
	// (0: Backlog/50): each tenant's jobs in a transaction of its own, all
	// committed together.
	SmallTenants int
	SmallJobs    int
	ArriveAfter  int
	// MaxCost: every job costs 1..MaxCost tokens, uniformly.
	MaxCost int64
	// Workers claimers (at most MaxFloodWorkers) take Batch jobs per claim
	// and complete them together.
	Workers int
	Batch   int
	// Quantum is the queue's quantum.
	Quantum int64
	// WindowRounds is the length of a fairness window, in rounds: the tokens
	// one round serves when every backlogged tenant gets its quantum.
	WindowRounds int
	// Processes, when more than 1, splits the Workers claimers of the fair
	// queue behind the backlog over that many worker processes, started by
	// Spawn, as a fleet runs; the claim order is then read back from the
	// outcomes (the claims' start, then the job). The other rows (no
	// backlog, FIFO) keep their claimers in this process: a worker process
	// drains until the queue is empty, so it cannot wait for a flood that
	// has not come yet.
	Processes int
	Spawn     Spawner
	// ShowWindows prints, with the progress lines, each window of the fair
	// queue's runs whose Jain's index is below the bar, with every tenant's
	// tokens in it: which tenant a low window starved or favoured.
	ShowWindows bool
}

// floodJainBar is the bar for Jain's index in every window while all
// tenants are backlogged.
const floodJainBar = 0.99

// DefaultFloodConfig returns the defaults: a backlog of 50,000 jobs, then 20
// tenants of 1,000 jobs each (enough to stay backlogged for hundreds of
// windows), costs 1..1000, 8 claimers taking 10 jobs each,
// quantum 1000, windows of 20 rounds. Windows are cut in the order claims
// return, and eight claims of ten in flight come back in any order: at 10
// rounds the exact fair order of the same jobs, returned so, has windows
// at 0.98, below the bar; at 20 it clears it (0.993-0.996), so a
// window below the bar is the queue's and not the measure's (the report's
// note gives the exact order's lowest window for each run).
func DefaultFloodConfig() FloodConfig {
	return FloodConfig{
		Backlog: 50_000, SmallTenants: 20, SmallJobs: 1000, MaxCost: 1000,
		Workers: 8, Batch: 10, Quantum: queue.DefaultQuantum, WindowRounds: 20,
	}
}

// Check returns the ConfigError Flood would return for c before it
// measures anything, without touching a database.
func (c FloodConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c FloodConfig) withDefaults() (FloodConfig, error) {
	d := DefaultFloodConfig()
	for _, f := range []struct{ v, def *int }{
		{&c.Backlog, &d.Backlog}, {&c.SmallTenants, &d.SmallTenants}, {&c.SmallJobs, &d.SmallJobs},
		{&c.Workers, &d.Workers}, {&c.Batch, &d.Batch}, {&c.WindowRounds, &d.WindowRounds},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if c.MaxCost == 0 {
		c.MaxCost = d.MaxCost
	}
	if c.Quantum == 0 {
		c.Quantum = d.Quantum
	}
	if c.ArriveAfter == 0 {
		c.ArriveAfter = max(c.Backlog/50, 1)
	}
	if c.Processes == 0 {
		c.Processes = 1
	}
	// The backlog is at least 2: the small tenants arrive after at least
	// one of its jobs is claimed, and before the last.
	if err := inRange("flood", setting{"backlog", int64(c.Backlog), 2, Unbounded},
		setting{"small-tenants", int64(c.SmallTenants), 1, MaxFloodSmallTenants}, setting{"small-jobs", int64(c.SmallJobs), 1, Unbounded},
		setting{"max-cost", c.MaxCost, 1, queue.MaxCost}, setting{"workers", int64(c.Workers), 1, MaxFloodWorkers},
		setting{"batch", int64(c.Batch), 1, queue.MaxClaim}, setting{"quantum", c.Quantum, 1, queue.MaxCost},
		setting{"window-rounds", int64(c.WindowRounds), 1, Unbounded}); err != nil {
		return c, err
	}
	if c.ArriveAfter < 0 || c.ArriveAfter >= c.Backlog {
		return c, configErrorf("flood: arrive-after %d: must be below the backlog (%d)", c.ArriveAfter, c.Backlog)
	}
	if c.Processes < 1 || c.Processes > c.Workers {
		return c, configErrorf("flood: processes %d: must be in 1..workers (%d)", c.Processes, c.Workers)
	}
	if c.Processes > 1 && c.Spawn == nil {
		return c, configErrorf("flood: Spawn is required with more than one process")
	}
	return c, nil
}

// floodResult is what one flood run measured.
type floodResult struct {
	enqueueP50       float64 // small tenants' enqueue calls, ms
	enqueueMax       float64
	waitP50, waitP99 float64 // small tenants' wait, enqueue to claim, ms
	posP50, posP99   float64 // jobs claimed between their arrival and their claim
	posMax           float64
	jainMin, jainMed float64 // over the windows in which every tenant was backlogged
	windows          int
	// The lowest window of the same jobs in the exact fair order, as claims
	// in flight return it and as one claimer does (see exactOrder).
	exactInFlight, exactAlone float64
	deadlocks                 int    // claims the database aborted as deadlocked, retried
	deadlock                  string // what the first one said
}

type floodKey struct {
	system  string
	backlog bool
}

// Flood measures what a flood does to everyone else: one tenant's backlog
// is queued, the workers start on it, then SmallTenants small tenants arrive
// at once, each enqueueing its jobs in its own transaction. It reports how
// long those enqueues took, the small tenants' wait from enqueue (the
// enqueue transaction's start, as the outcome rows record it) to claim, and
// their claim position (jobs claimed since they arrived), with the backlog
// and without it, for the fair queue and for FIFO; and each backlogged
// tenant's share of the tokens over sliding windows of WindowRounds rounds,
// taken while every tenant is backlogged, as Jain's fairness index (1: equal
// shares; 1/n: one tenant gets everything). Its bars: the fair queue's p99
// wait with the backlog at most 2× that without it, and Jain's index at
// least 0.99 in every window. A claim the database aborts as a deadlock is
// retried, as a worker pool would, and counted.
func Flood(ctx context.Context, env *Env, cfg FloodConfig) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rep, err := newReport(ctx, env, "flood", cfg.Runs)
	if err != nil {
		return nil, err
	}
	rep.param("backlog", cfg.Backlog)
	rep.param("small_tenants", cfg.SmallTenants)
	rep.param("small_jobs", cfg.SmallJobs)
	rep.param("arrive_after", cfg.ArriveAfter)
	rep.param("max_cost", cfg.MaxCost)
	rep.param("workers", cfg.Workers)
	rep.param("batch", cfg.Batch)
	rep.param("quantum", cfg.Quantum)
	rep.param("window_rounds", cfg.WindowRounds)
	rep.param("processes", cfg.Processes)

	keys := []floodKey{{SystemFair, true}, {SystemFair, false}, {SystemFIFO, true}, {SystemFIFO, false}}
	if !cfg.NoWarmUp {
		for _, k := range keys[:3:3] {
			if _, err := floodOnce(ctx, env, cfg, k, 0); err != nil {
				return nil, err
			}
			cfg.progress("flood warm-up %s backlog=%v", k.system, k.backlog)
		}
	}
	res := map[floodKey][]floodResult{}
	for r := range cfg.reps() {
		for _, k := range keys {
			got, err := floodOnce(ctx, env, cfg, k, r+1)
			if err != nil {
				return nil, err
			}
			res[k] = append(res[k], got)
			jain := "no window with every tenant backlogged"
			if got.windows > 0 {
				jain = fmt.Sprintf("Jain min %.4f over %d windows", got.jainMin, got.windows)
			}
			cfg.progress("flood rep %d/%d %s backlog=%v: small wait p99 %.1f ms, position p99 %.0f, %s",
				r+1, cfg.reps(), k.system, k.backlog, got.waitP99, got.posP99, jain)
		}
	}

	col := func(k floodKey, f func(floodResult) float64, prec int) Sample {
		var vs []float64
		for _, r := range res[k] {
			vs = append(vs, f(r))
		}
		return NewSample(prec, vs...)
	}
	procs := ""
	if cfg.Processes > 1 {
		procs = fmt.Sprintf(" (in %d processes for the fair queue behind the backlog)", cfg.Processes)
	}
	t := NewTable("flood", fmt.Sprintf("flood: one tenant's %d-job backlog, then %d tenants of %d jobs arrive; %d claimers%s, batches of %d",
		cfg.Backlog, cfg.SmallTenants, cfg.SmallJobs, cfg.Workers, procs, cfg.Batch),
		"system", "backlog", "small_enqueue_ms", "small_enqueue_max_ms", "small_wait_p50_ms", "small_wait_p99_ms", "position_p50", "position_p99", "position_max",
		"jain_min", "jain_median", "windows", "claim_deadlocks")
	for _, k := range keys {
		backlog := 0
		if k.backlog {
			backlog = cfg.Backlog
		}
		t.Add(k.system, backlog,
			col(k, func(r floodResult) float64 { return r.enqueueP50 }, -1),
			col(k, func(r floodResult) float64 { return r.enqueueMax }, -1),
			col(k, func(r floodResult) float64 { return r.waitP50 }, -1),
			col(k, func(r floodResult) float64 { return r.waitP99 }, -1),
			col(k, func(r floodResult) float64 { return r.posP50 }, 0),
			col(k, func(r floodResult) float64 { return r.posP99 }, 0),
			col(k, func(r floodResult) float64 { return r.posMax }, 0),
			col(k, func(r floodResult) float64 { return r.jainMin }, 4),
			col(k, func(r floodResult) float64 { return r.jainMed }, 4),
			col(k, func(r floodResult) float64 { return float64(r.windows) }, 0),
			col(k, func(r floodResult) float64 { return float64(r.deadlocks) }, 0))
	}
	rep.Tables = append(rep.Tables, t)
	for _, k := range keys {
		n, first := 0, ""
		for _, r := range res[k] {
			if n += r.deadlocks; first == "" {
				first = r.deadlock
			}
		}
		if n > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s (backlog %v): %d claims failed with a deadlock over %d repetitions and were retried; the first: %s",
				k.system, k.backlog, n, cfg.reps(), first))
		}
	}

	p99 := func(k floodKey) float64 { return col(k, func(r floodResult) float64 { return r.waitP99 }, 0).Median() }
	fair, quiet := p99(floodKey{SystemFair, true}), p99(floodKey{SystemFair, false})
	fifo, fifoQuiet := p99(floodKey{SystemFIFO, true}), p99(floodKey{SystemFIFO, false})
	rep.Bars = append(rep.Bars, newBar("flood: small tenants' p99 wait with the backlog / without it", ratio(fair, quiet), 2, true,
		fmt.Sprintf("fair %s ms / %s ms; FIFO %s ms / %s ms = %s", fmtFloat(fair, -1), fmtFloat(quiet, -1),
			fmtFloat(fifo, -1), fmtFloat(fifoQuiet, -1), fmtFloat(ratio(fifo, fifoQuiet), 1))))
	// The lowest of a measure over the repetitions that measured it (a
	// repetition without windows has NaN), and the windows they had.
	lowestOf := func(k floodKey, get func(floodResult) float64) (float64, int) {
		vals, n := make([]float64, 0, len(res[k])), 0
		for _, r := range res[k] {
			vals, n = append(vals, get(r)), n+r.windows
		}
		return lowest(vals), n
	}
	minJain := func(k floodKey) (float64, int) {
		return lowestOf(k, func(r floodResult) float64 { return r.jainMin })
	}
	fairJain, fairWindows := minJain(floodKey{SystemFair, true})
	fifoJain, fifoWindows := minJain(floodKey{SystemFIFO, true})
	rep.Bars = append(rep.Bars, newBar("flood: Jain's index in every window while all tenants are backlogged (the lowest)", fairJain, floodJainBar, false,
		fmt.Sprintf("fair: lowest of %d windows over %d repetitions; FIFO: %s over %d windows",
			fairWindows, cfg.reps(), fmtFloat(fifoJain, 4), fifoWindows)))
	exact := func(get func(floodResult) float64) float64 {
		m, _ := lowestOf(floodKey{SystemFair, true}, get)
		return m
	}
	if inFlight := exact(func(r floodResult) float64 { return r.exactInFlight }); !math.IsNaN(inFlight) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("flood: the same jobs in the exact fair order (package drr), windows cut as here, "+
			"score a lowest window of %s when %d claims of %d return in any order, as concurrent claims do, and %s from one claimer",
			fmtFloat(inFlight, 4), cfg.Workers, cfg.Batch, fmtFloat(exact(func(r floodResult) float64 { return r.exactAlone }), 4)))
	}
	return rep.finish(), nil
}

// floodClaim is one claimed job, in claim order.
type floodClaim struct {
	seq    int64
	tenant string
	cost   int64
}

// floodOnce runs one flood and measures it.
func floodOnce(ctx context.Context, env *Env, cfg FloodConfig, k floodKey, rep int) (floodResult, error) {
	if err := env.reset(ctx, queue.QueueConfig{Quantum: cfg.Quantum}); err != nil {
		return floodResult{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(rep)))
	enqueue := func(tenant string, n int) error {
		tenants, costs := make([]string, n), make([]int64, n)
		for i := range n {
			tenants[i], costs[i] = tenant, 1+rng.Int64N(cfg.MaxCost)
		}
		return insertJobs(ctx, env, k.system, tenants, costs)
	}
	if k.backlog {
		for done := 0; done < cfg.Backlog; done += 5000 {
			if err := enqueue(floodBig, min(5000, cfg.Backlog-done)); err != nil {
				return floodResult{}, err
			}
		}
	}
	table := "batchq.jobs"
	if k.system == SystemFIFO {
		table = "batchq_fifo.jobs"
	}
	if err := env.settle(ctx, table); err != nil {
		return floodResult{}, err
	}

	if cfg.Processes > 1 && k.system == SystemFair && k.backlog {
		return floodProcs(ctx, env, cfg, rng, rep)
	}

	var (
		mu        sync.Mutex
		claims    []floodClaim
		seq       atomic.Int64
		small     atomic.Int64
		stop      atomic.Bool
		firstErr  error
		deadlocks int
		deadlock  string
	)
	smallTotal := int64(cfg.SmallTenants * cfg.SmallJobs)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		stop.Store(true)
	}
	claim := claimer(env, k.system)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				got, complete, err := claim(ctx, cfg.Batch)
				if isDeadlock(err) {
					// A worker pool logs it and claims again; so does this.
					what := describePgError(ctx, env, err)
					mu.Lock()
					if deadlocks++; deadlock == "" {
						deadlock = what
					}
					mu.Unlock()
					continue
				}
				if err != nil {
					fail(err)
					return
				}
				if len(got) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				mu.Lock()
				n := int64(0)
				for _, c := range got {
					claims = append(claims, floodClaim{seq: seq.Add(1), tenant: c.tenant, cost: c.cost})
					if c.tenant != floodBig {
						n++
					}
				}
				mu.Unlock()
				if err := complete(); err != nil {
					fail(err)
					return
				}
				if small.Add(n) >= smallTotal {
					stop.Store(true)
				}
			}
		})
	}

	// The small tenants arrive once the workers are into the backlog (or,
	// without one, once they are polling).
	arrivedAt, allArrivedAt := int64(0), int64(0)
	if k.backlog {
		for seq.Load() < int64(cfg.ArriveAfter) && !stop.Load() {
			time.Sleep(time.Millisecond)
		}
	} else {
		time.Sleep(50 * time.Millisecond)
	}
	arrivedAt = seq.Load()
	enqueueMS, err := arrive(ctx, env, cfg, k.system, rng)
	if err != nil {
		fail(err)
	}
	allArrivedAt = seq.Load()
	wg.Wait()
	if firstErr != nil {
		return floodResult{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return floodResult{}, err
	}

	res, err := floodMeasure(ctx, env, cfg, k, rep, claims, arrivedAt, allArrivedAt, enqueueMS)
	res.deadlocks, res.deadlock = deadlocks, deadlock
	return res, err
}

// floodMeasure computes a flood's result from its claims in claim order,
// the claims made before the small tenants arrived and before the last of
// them had, and how long their enqueues took. rep is the repetition (0 for
// the warm-up, whose windows ShowWindows leaves out).
func floodMeasure(ctx context.Context, env *Env, cfg FloodConfig, k floodKey, rep int, claims []floodClaim, arrivedAt, allArrivedAt int64,
	enqueueMS []float64) (floodResult, error) {
	smallTotal := int64(cfg.SmallTenants * cfg.SmallJobs)
	waits, err := smallWaits(ctx, env, k.system)
	if err != nil {
		return floodResult{}, err
	}
	if int64(len(waits)) != smallTotal {
		return floodResult{}, fmt.Errorf("benchkit: flood %s: %d small jobs finished of %d", k.system, len(waits), smallTotal)
	}
	var pos []float64
	for _, c := range claims {
		if c.tenant != floodBig {
			pos = append(pos, float64(c.seq-arrivedAt))
		}
	}
	res := floodResult{
		waitP50: quantile(waits, 0.5), waitP99: quantile(waits, 0.99),
		posP50: quantile(pos, 0.5), posP99: quantile(pos, 0.99), posMax: slices.Max(pos),
		enqueueP50: quantile(enqueueMS, 0.5), enqueueMax: slices.Max(enqueueMS),
	}
	names := tenantNames(k.backlog, cfg.SmallTenants)
	windows := windowJain(claims, allArrivedAt, len(names), cfg.Quantum, cfg.WindowRounds)
	jains := make([]float64, len(windows))
	for i, w := range windows {
		jains[i] = w.jain
		if cfg.ShowWindows && rep > 0 && k.system == SystemFair && w.jain < floodJainBar {
			cfg.progress("flood rep %d/%d %s backlog=%v: %s", rep, cfg.reps(), k.system, k.backlog, w.describe(i+1, len(windows), names))
		}
	}
	res.windows = len(jains)
	res.jainMin, res.jainMed = math.NaN(), math.NaN()
	res.exactInFlight, res.exactAlone = math.NaN(), math.NaN()
	if len(jains) > 0 {
		res.jainMin, res.jainMed = slices.Min(jains), median(jains)
		lowestWindow := func(claims []floodClaim) float64 {
			var vals []float64
			for _, w := range windowJain(claims, allArrivedAt, len(names), cfg.Quantum, cfg.WindowRounds) {
				vals = append(vals, w.jain)
			}
			return lowest(vals)
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(rep)))
		res.exactInFlight = lowestWindow(exactOrder(claims, allArrivedAt, cfg.Quantum, cfg.Workers, cfg.Batch, rng))
		res.exactAlone = lowestWindow(exactOrder(claims, allArrivedAt, cfg.Quantum, 1, cfg.Batch, rng))
	}
	return res, nil
}

// floodBig is the flooding tenant; smallTenant names the i-th small one.
const floodBig = "big"

func smallTenant(i int) string { return fmt.Sprintf("small-%02d", i) }

// tenantNames is the flood's tenants: the flooding one (with a backlog),
// then the small ones.
func tenantNames(backlog bool, small int) []string {
	var names []string
	if backlog {
		names = append(names, floodBig)
	}
	for i := range small {
		names = append(names, smallTenant(i))
	}
	return names
}

// floodProcs runs the fair queue's flood behind the backlog with its
// claimers in cfg.Processes worker processes, each draining the queue (the
// drain's worker, DrainFair) until it is empty. The small tenants arrive
// once the outcomes count cfg.ArriveAfter claimed jobs; the claim order is
// read back from the outcomes afterwards: by the claim's start (its
// transaction's, which every job of a claim shares), then by job, the
// order the claims of one process hand their jobs out in. Claims of two
// processes that start in the same microsecond are ordered by their jobs.
func floodProcs(ctx context.Context, env *Env, cfg FloodConfig, rng *rand.Rand, rep int) (floodResult, error) {
	args := make([][]string, cfg.Processes)
	for i := range args {
		claimers := cfg.Workers / cfg.Processes
		if i < cfg.Workers%cfg.Processes {
			claimers++
		}
		args[i] = []string{"-system", SystemFair, "-claimers", fmt.Sprint(claimers), "-batch", fmt.Sprint(cfg.Batch)}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	drained := make(chan error, 1)
	go func() {
		_, err := runProcs(ctx, cfg.Spawn, env.URL, args)
		drained <- err
	}()
	now := func() (time.Time, error) {
		var t time.Time
		err := env.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
		return t, err
	}
	for {
		var n int64
		if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM batchq.outcomes`).Scan(&n); err != nil {
			return floodResult{}, err
		}
		if n >= int64(cfg.ArriveAfter) {
			break
		}
		select {
		case err := <-drained:
			return floodResult{}, fmt.Errorf("benchkit: flood: the worker processes stopped before the small tenants arrived: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	arrived, err := now()
	if err != nil {
		return floodResult{}, err
	}
	enqueueMS, err := arrive(ctx, env, cfg, SystemFair, rng)
	if err != nil {
		return floodResult{}, err
	}
	allArrived, err := now()
	if err != nil {
		return floodResult{}, err
	}
	if err := <-drained; err != nil {
		return floodResult{}, err
	}

	rows, err := env.Pool.Query(ctx, `SELECT tenant, estimated_cost, first_claimed_at < $1, first_claimed_at < $2
		FROM batchq.outcomes ORDER BY first_claimed_at, job_id`, arrived, allArrived)
	if err != nil {
		return floodResult{}, err
	}
	defer rows.Close()
	var claims []floodClaim
	var arrivedAt, allArrivedAt int64
	for rows.Next() {
		var c floodClaim
		var before, beforeAll bool
		if err := rows.Scan(&c.tenant, &c.cost, &before, &beforeAll); err != nil {
			return floodResult{}, err
		}
		c.seq = int64(len(claims)) + 1
		if before {
			arrivedAt = c.seq
		}
		if beforeAll {
			allArrivedAt = c.seq
		}
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return floodResult{}, err
	}
	small := 0
	for _, c := range claims {
		if c.tenant != floodBig {
			small++
		}
	}
	if smallTotal := cfg.SmallTenants * cfg.SmallJobs; small < smallTotal {
		// A worker process stops at an empty queue: these came too late.
		return floodResult{}, fmt.Errorf("benchkit: flood: the worker processes found the queue empty and stopped with %d of the small tenants' %d jobs claimed: "+
			"with --processes above 1 the backlog must last until the small tenants have arrived; raise --backlog or lower --arrive-after", small, smallTotal)
	}
	return floodMeasure(ctx, env, cfg, floodKey{SystemFair, true}, rep, claims, arrivedAt, allArrivedAt, enqueueMS)
}

// arrive enqueues the small tenants' jobs: each tenant's in a transaction of
// its own, on a connection of its own (env.arrivals), and all of them commit
// together, once every one has inserted its jobs, so that the tenants arrive
// at one moment however long each insert took. It returns how long each enqueue took in
// ms, its insert and its commit (not the wait for the others between them),
// and the first error. An error in an insert leaves every tenant's jobs
// uncommitted; the commits themselves are one per tenant, so one that fails
// may leave the others committed.
func arrive(ctx context.Context, env *Env, cfg FloodConfig, system string, rng *rand.Rand) ([]float64, error) {
	var (
		mu        sync.Mutex
		enqueueMS []float64
		firstErr  error
		failed    atomic.Bool
		inserted  sync.WaitGroup
		arrivals  sync.WaitGroup
	)
	inserted.Add(cfg.SmallTenants)
	for i := range cfg.SmallTenants {
		tenants, costs := make([]string, cfg.SmallJobs), make([]int64, cfg.SmallJobs)
		for j := range tenants {
			tenants[j], costs[j] = smallTenant(i), 1+rng.Int64N(cfg.MaxCost)
		}
		arrivals.Go(func() {
			took, err := arriveTogether(ctx, env, system, tenants, costs, &inserted, &failed)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				// Another tenant's error is the one to report.
				if firstErr == nil || errors.Is(firstErr, errArrivalAbandoned) {
					firstErr = err
				}
				return
			}
			enqueueMS = append(enqueueMS, float64(took)/float64(time.Millisecond))
		})
	}
	arrivals.Wait()
	return enqueueMS, firstErr
}

// errArrivalAbandoned is a tenant's arrival rolled back because another's
// failed.
var errArrivalAbandoned = errors.New("benchkit: flood: arrival rolled back: another tenant's enqueue failed")

// arriveTogether inserts one tenant's jobs in a transaction on a connection
// of env.arrivals, marks inserted done, waits for the other tenants' inserts and
// commits, unless one of them failed. It returns the time its insert and its
// commit took.
func arriveTogether(ctx context.Context, env *Env, system string, tenants []string, costs []int64,
	inserted *sync.WaitGroup, failed *atomic.Bool) (time.Duration, error) {
	ready := sync.OnceFunc(inserted.Done)
	defer ready()
	conn, err := env.arrivals.Acquire(ctx)
	if err != nil {
		failed.Store(true)
		return 0, fmt.Errorf("benchkit: flood: connect for %s: %w", tenants[0], err)
	}
	defer conn.Release()
	t0 := time.Now()
	tx, err := conn.Begin(ctx)
	if err == nil {
		err = insertJobsTx(ctx, env, system, tx, tenants, costs)
	}
	if err != nil {
		failed.Store(true)
		return 0, fmt.Errorf("benchkit: flood: enqueue %s: %w", tenants[0], err)
	}
	took := time.Since(t0)
	ready()
	inserted.Wait()
	if failed.Load() {
		return 0, errors.Join(errArrivalAbandoned, tx.Rollback(ctx))
	}
	t1 := time.Now()
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("benchkit: flood: commit %s: %w", tenants[0], err)
	}
	return took + time.Since(t1), nil
}

// insertJobs enqueues jobs into the system's queue in one transaction.
func insertJobs(ctx context.Context, env *Env, system string, tenants []string, costs []int64) error {
	if system == SystemFIFO {
		return env.FIFO.Insert(ctx, tenants, costs)
	}
	_, err := env.Client.EnqueueMany(ctx, benchJobs(tenants, costs))
	return err
}

// insertJobsTx enqueues jobs into the system's queue in tx.
func insertJobsTx(ctx context.Context, env *Env, system string, tx pgx.Tx, tenants []string, costs []int64) error {
	if system == SystemFIFO {
		return fifodb.New().Insert(ctx, tx, fifo.InsertParams(tenants, costs))
	}
	_, err := env.Client.EnqueueManyTx(ctx, tx, benchJobs(tenants, costs))
	return err
}

// benchJobs is the bench queue's jobs, one per tenant and cost.
func benchJobs(tenants []string, costs []int64) []queue.NewJob {
	jobs := make([]queue.NewJob, len(tenants))
	for i := range jobs {
		jobs[i] = queue.NewJob{Queue: benchQueue, Tenant: tenants[i], Cost: costs[i]}
	}
	return jobs
}

// claimedJob is a claimed job of either system.
type claimedJob struct {
	tenant string
	cost   int64
}

// claimer returns a function that claims up to n jobs of the system and a
// function that completes them (outcome rows included).
func claimer(env *Env, system string) func(ctx context.Context, n int) ([]claimedJob, func() error, error) {
	if system == SystemFIFO {
		return func(ctx context.Context, n int) ([]claimedJob, func() error, error) {
			jobs, err := env.FIFO.Claim(ctx, n, "bench")
			if err != nil || len(jobs) == 0 {
				return nil, nil, err
			}
			out := make([]claimedJob, len(jobs))
			for i, j := range jobs {
				out[i] = claimedJob{j.Tenant, j.Cost}
			}
			return out, func() error {
				done, err := env.FIFO.Complete(ctx, jobs)
				if err == nil && done != len(jobs) {
					err = fmt.Errorf("benchkit: %d completions lost their lease", len(jobs)-done)
				}
				return err
			}, nil
		}
	}
	return func(ctx context.Context, n int) ([]claimedJob, func() error, error) {
		jobs, err := env.Client.Claim(ctx, benchQueue, &queue.ClaimOpts{Limit: n, Worker: "bench"})
		if err != nil || len(jobs) == 0 {
			return nil, nil, err
		}
		out, done := make([]claimedJob, len(jobs)), make([]queue.Completion, len(jobs))
		for i, j := range jobs {
			out[i], done[i] = claimedJob{j.Tenant, j.Cost}, queue.Completion{Job: j}
		}
		return out, func() error {
			lost, err := env.Client.CompleteMany(ctx, done)
			if err == nil && len(lost) > 0 {
				err = fmt.Errorf("benchkit: %d completions lost their lease", len(lost))
			}
			return err
		}, nil
	}
}

// smallWaits returns, in milliseconds, how long each finished job of a
// tenant other than the flooding one waited from enqueue to claim, by the
// database's clock.
func smallWaits(ctx context.Context, env *Env, system string) ([]float64, error) {
	table := "batchq.outcomes"
	if system == SystemFIFO {
		table = "batchq_fifo.outcomes"
	}
	rows, err := env.Pool.Query(ctx,
		`SELECT extract(epoch FROM first_claimed_at - enqueued_at)::float8 * 1000 FROM `+table+` WHERE tenant <> $1`, floodBig)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []float64
	for rows.Next() {
		var v float64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// floodWindow is one window of windowJain: Jain's index of the tenants'
// tokens, the tokens, and the claims it spans (indexes into the claim
// order).
type floodWindow struct {
	jain        float64
	tokens      map[string]int64
	first, last int
}

// describe says where window n of all lies in the claim order and what each
// tenant got in it, tenants in the order names gives (a tenant that got
// nothing shows 0).
func (w floodWindow) describe(n, all int, names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "window %d of %d (claims %d..%d): Jain %.4f; tokens", n, all, w.first, w.last, w.jain)
	for _, name := range names {
		fmt.Fprintf(&b, " %s=%d", name, w.tokens[name])
	}
	return b.String()
}

// windowJain slides a window over the claims made after seq from (when
// every tenant had arrived) for as long as every tenant stayed backlogged:
// until the claim of the first tenant's last job. A window spans the tokens
// of rounds rounds (rounds × quantum × tenants) and moves one round at a
// time. It returns each window with Jain's fairness index of the tenants'
// tokens in it: (Σx)² / (n·Σx²).
func windowJain(claims []floodClaim, from int64, tenants int, quantum int64, rounds int) []floodWindow {
	last := map[string]int{}
	for i, c := range claims {
		last[c.tenant] = i
	}
	if len(last) < tenants {
		return nil
	}
	end := len(claims) - 1
	for _, i := range last {
		end = min(end, i)
	}
	start := 0
	for start < len(claims) && claims[start].seq <= from {
		start++
	}
	size, step := int64(rounds)*quantum*int64(tenants), quantum*int64(tenants)
	var out []floodWindow
	for i := start; i <= end; {
		tokens := map[string]int64{}
		var sum int64
		j := i
		for ; j <= end && sum < size; j++ {
			tokens[claims[j].tenant] += claims[j].cost
			sum += claims[j].cost
		}
		if sum < size {
			break
		}
		out = append(out, floodWindow{jain: jain(tokens, tenants), tokens: tokens, first: i, last: j - 1})
		for moved := int64(0); i <= end && moved < step; i++ {
			moved += claims[i].cost
		}
	}
	return out
}

// exactOrder is what the windows are read against: the claims made up to
// seq from as they were, then the same jobs in the exact fair order of
// package drr (each tenant's jobs in the order they were claimed, the
// tenants in the ring in the order of their first claim after from), as
// inFlight claimers taking batch jobs at a time return them. Claim i of
// the exact order ends at a time drawn from [i, i+inFlight) claims, so the
// claims in flight together come back in any order, as concurrent claims
// do. With one claimer the order is exact; with more, Jain's index over
// its windows is what a fair order scores by this measure, windows cut in
// the order claims return, when that many claims run at once.
func exactOrder(claims []floodClaim, from int64, quantum int64, inFlight, batch int, rng *rand.Rand) []floodClaim {
	q, err := drr.New[struct{}](drr.Config{Quantum: quantum, MaxPerTenant: math.MaxInt})
	if err != nil {
		panic(err) // a quantum the scenario checked
	}
	out := make([]floodClaim, 0, len(claims))
	for _, c := range claims {
		if c.seq <= from {
			out = append(out, c)
			continue
		}
		if err := q.Enqueue(drr.Job[struct{}]{Tenant: c.tenant, Cost: c.cost}); err != nil {
			panic(err) // costs of claimed jobs are valid
		}
	}
	type claim struct {
		ends float64
		jobs []floodClaim
	}
	var ordered []claim
	for i := 0; q.Len() > 0; i++ {
		c := claim{ends: float64(i)}
		if inFlight > 1 {
			c.ends += rng.Float64() * float64(inFlight)
		}
		for len(c.jobs) < batch {
			j, ok := q.Dequeue(nil)
			if !ok {
				break
			}
			c.jobs = append(c.jobs, floodClaim{tenant: j.Tenant, cost: j.Cost})
		}
		ordered = append(ordered, c)
	}
	slices.SortStableFunc(ordered, func(a, b claim) int { return cmp.Compare(a.ends, b.ends) })
	for _, c := range ordered {
		for _, j := range c.jobs {
			j.seq = int64(len(out)) + 1
			out = append(out, j)
		}
	}
	return out
}

// lowest is the least of vals that are not NaN, NaN when none is.
func lowest(vals []float64) float64 {
	m := math.NaN()
	for _, v := range vals {
		if !math.IsNaN(v) && !(v >= m) {
			m = v
		}
	}
	return m
}

// jain is Jain's fairness index of the shares, n of them (those missing
// from the map had none).
func jain(shares map[string]int64, n int) float64 {
	var sum, sq float64
	for _, v := range shares {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	if sq == 0 {
		return math.NaN()
	}
	return sum * sum / (float64(n) * sq)
}
