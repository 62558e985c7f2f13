package benchkit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/batchq/batchq/queue"
)

// ScaleConfig configures Scale. Zero fields take the defaults of
// DefaultScaleConfig.
type ScaleConfig struct {
	Runs
	// Rows lists the backlog sizes (queued rows) to measure, over
	// RowTenants tenants.
	Rows       []int
	RowTenants int
	// Tenants lists the numbers of active tenants to measure, sharing
	// TenantRows queued rows (at least one each).
	Tenants    []int
	TenantRows int
	// Claims is the timed claims per repetition, each of Batch jobs.
	Claims int
	Batch  int
	// MaxCost: every job costs 1..MaxCost tokens, uniformly.
	MaxCost int64
	// NoFIFO leaves out the FIFO baseline's row series.
	NoFIFO bool
}

// DefaultScaleConfig returns the defaults: backlogs of 10k, 100k and 1M rows
// over 10,000 tenants; 10, 1k, 10k and 100k active tenants over 100,000
// rows; 50 timed claims of 100 per repetition; costs 1..1000.
func DefaultScaleConfig() ScaleConfig {
	return ScaleConfig{
		Rows: []int{10_000, 100_000, 1_000_000}, RowTenants: 10_000,
		Tenants: []int{10, 1_000, 10_000, 100_000}, TenantRows: 100_000,
		Claims: 50, Batch: 100, MaxCost: 1000,
	}
}

// Check returns the ConfigError Scale would return for c before it
// measures anything, without touching a database.
func (c ScaleConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c ScaleConfig) withDefaults() (ScaleConfig, error) {
	d := DefaultScaleConfig()
	if len(c.Rows) == 0 {
		c.Rows = d.Rows
	}
	if len(c.Tenants) == 0 {
		c.Tenants = d.Tenants
	}
	for _, f := range []struct{ v, def *int }{
		{&c.RowTenants, &d.RowTenants}, {&c.TenantRows, &d.TenantRows}, {&c.Claims, &d.Claims}, {&c.Batch, &d.Batch},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	if c.MaxCost == 0 {
		c.MaxCost = d.MaxCost
	}
	for _, v := range append(slices.Clone(c.Rows), c.Tenants...) {
		if v < 1 {
			return c, configErrorf("scale: sizes must be positive")
		}
	}
	if c.RowTenants < 1 || c.TenantRows < 1 || c.Claims < 1 || c.Batch < 1 || c.MaxCost < 1 {
		return c, configErrorf("scale: sizes must be positive")
	}
	if err := inRange("scale", setting{"batch", int64(c.Batch), 1, queue.MaxClaim}); err != nil {
		return c, err
	}
	return c, nil
}

// scaleResult is the claim latencies of one repetition, in ms.
type scaleResult struct{ median, p90 float64 }

// Scale measures what one claim of Batch jobs costs as the backlog grows and
// as the number of active tenants grows: the claimed jobs are completed and
// enqueued again outside the timing, so the backlog keeps its size. FIFO's
// claim is measured over the same backlog sizes. Its bar: the fair claim at
// the largest backlog costs at most 1.5× what it costs at the smallest.
func Scale(ctx context.Context, env *Env, cfg ScaleConfig) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rep, err := newReport(ctx, env, "scale", cfg.Runs)
	if err != nil {
		return nil, err
	}
	rep.param("rows", joinInts(cfg.Rows))
	rep.param("row_tenants", cfg.RowTenants)
	rep.param("tenants", joinInts(cfg.Tenants))
	rep.param("tenant_rows", cfg.TenantRows)
	rep.param("claims", cfg.Claims)
	rep.param("batch", cfg.Batch)
	rep.param("max_cost", cfg.MaxCost)

	rowsT := NewTable("scale_rows", fmt.Sprintf("scale: one claim of %d as the backlog grows (%d tenants; %d timed claims per repetition)",
		cfg.Batch, cfg.RowTenants, cfg.Claims),
		"system", "queued_rows", "tenants", "claim_ms", "p90_ms", "vs_smallest")
	systems := []string{SystemFair}
	if !cfg.NoFIFO {
		systems = append(systems, SystemFIFO)
	}
	fairByRows := map[int]float64{}
	// Smallest first: vs_smallest divides by the first row of each system.
	cfg.Rows, cfg.Tenants = sortedCopy(cfg.Rows), sortedCopy(cfg.Tenants)
	for _, s := range systems {
		var first float64
		for i, rows := range cfg.Rows {
			got, err := scaleOnce(ctx, env, cfg, s, rows, cfg.RowTenants)
			if err != nil {
				return nil, err
			}
			med, p90 := scaleSamples(got)
			if i == 0 {
				first = med.Median()
			}
			if s == SystemFair {
				fairByRows[rows] = med.Median()
			}
			// FIFO has no tenants to count: null in JSON, "-" in text.
			tenants := any(min(cfg.RowTenants, rows))
			if s == SystemFIFO {
				tenants = nil
			}
			rowsT.Add(s, rows, tenants, med, p90, ratioCell(med.Median(), first))
		}
	}
	rep.Tables = append(rep.Tables, rowsT)

	tenantsT := NewTable("scale_tenants", fmt.Sprintf("scale: one claim of %d as active tenants grow (%d queued rows, at least one per tenant)",
		cfg.Batch, cfg.TenantRows),
		"system", "active_tenants", "queued_rows", "claim_ms", "p90_ms", "vs_smallest")
	var first float64
	for i, tenants := range cfg.Tenants {
		rows := max(cfg.TenantRows, tenants)
		got, err := scaleOnce(ctx, env, cfg, SystemFair, rows, tenants)
		if err != nil {
			return nil, err
		}
		med, p90 := scaleSamples(got)
		if i == 0 {
			first = med.Median()
		}
		tenantsT.Add(SystemFair, tenants, rows, med, p90, ratioCell(med.Median(), first))
	}
	rep.Tables = append(rep.Tables, tenantsT)

	lo, hi := slices.Min(cfg.Rows), slices.Max(cfg.Rows)
	growth := ratio(fairByRows[hi], fairByRows[lo])
	if lo == hi {
		growth = math.NaN() // one backlog size: nothing to compare it with
	}
	rep.Bars = append(rep.Bars, newBar(fmt.Sprintf("scale: fair claim cost at %s rows / at %s rows", group(fmt.Sprint(hi)), group(fmt.Sprint(lo))),
		growth, 1.5, true,
		fmt.Sprintf("median claim of %d: %s ms / %s ms", cfg.Batch, fmtFloat(fairByRows[hi], 3), fmtFloat(fairByRows[lo], 3))))
	return rep.finish(), nil
}

func scaleSamples(rs []scaleResult) (med, p90 Sample) {
	var m, p []float64
	for _, r := range rs {
		m, p = append(m, r.median), append(p, r.p90)
	}
	return NewSample(3, m...), NewSample(3, p...)
}

// scaleOnce seeds rows jobs over tenants tenants (round robin, so every
// tenant is active) and times claims of cfg.Batch, a repetition at a time.
func scaleOnce(ctx context.Context, env *Env, cfg ScaleConfig, system string, rows, tenants int) ([]scaleResult, error) {
	if err := env.reset(ctx, queue.QueueConfig{}); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(rows)^uint64(tenants)<<32))
	start := time.Now()
	for done := 0; done < rows; done += 5000 {
		n := min(5000, rows-done)
		ts, cs := make([]string, n), make([]int64, n)
		for i := range n {
			ts[i], cs[i] = fmt.Sprintf("tenant-%06d", (done+i)%tenants), 1+rng.Int64N(cfg.MaxCost)
		}
		if err := insertJobs(ctx, env, system, ts, cs); err != nil {
			return nil, err
		}
	}
	table := "batchq.jobs"
	if system == SystemFIFO {
		table = "batchq_fifo.jobs"
	}
	if err := env.settle(ctx, table); err != nil {
		return nil, err
	}
	cfg.progress("scale %s: seeded %d rows of %d tenants in %s", system, rows, tenants, time.Since(start).Round(time.Second))

	claim := claimer(env, system)
	// Claim, time it, then complete and enqueue the same work again, so the
	// backlog keeps its size.
	once := func() (time.Duration, error) {
		t0 := time.Now()
		got, complete, err := claim(ctx, cfg.Batch)
		took := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if len(got) != min(cfg.Batch, rows) {
			return 0, fmt.Errorf("benchkit: scale %s: claimed %d jobs of %d", system, len(got), cfg.Batch)
		}
		if err := complete(); err != nil {
			return 0, err
		}
		ts, cs := make([]string, len(got)), make([]int64, len(got))
		for i, j := range got {
			ts[i], cs[i] = j.tenant, j.cost
		}
		return took, insertJobs(ctx, env, system, ts, cs)
	}
	if !cfg.NoWarmUp {
		for range 5 {
			if _, err := once(); err != nil {
				return nil, err
			}
		}
	}
	var out []scaleResult
	for r := range cfg.reps() {
		var ms []float64
		for range cfg.Claims {
			d, err := once()
			if err != nil {
				return nil, err
			}
			ms = append(ms, float64(d)/float64(time.Millisecond))
		}
		res := scaleResult{median: median(ms), p90: quantile(ms, 0.9)}
		out = append(out, res)
		cfg.progress("scale rep %d/%d %s rows=%d tenants=%d: claim of %d median %.3f ms, p90 %.3f ms",
			r+1, cfg.reps(), system, rows, tenants, cfg.Batch, res.median, res.p90)
	}
	return out, nil
}

func sortedCopy(xs []int) []int {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}
