package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/internal/benchkit"
	"github.com/batchq/batchq/queue"
)

// benchCommand runs the system benchmarks of internal/benchkit, each in a
// database of its own on the server of --database-url.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure batchq on this machine, beside a plain FIFO queue (see BENCHMARKS.md)",
		Description: `Each scenario creates a database batchq_bench_<random> on the server of
--database-url (the role needs CREATEDB), migrates it, runs a warm-up and then
--reps repetitions, prints a table (or JSON with --json) with the machine and
the server's settings, and drops the database, also on error or interrupt.
Progress goes to stderr.`,
		Subcommands: []*cli.Command{
			benchScenario("drain", "jobs/s draining a backlog with 1..P worker processes and each batch size, beside FIFO",
				runBenchDrain, drainFlags()...),
			benchScenario("flood", "small tenants' wait and share of the tokens behind one tenant's flood, beside FIFO",
				runBenchFlood, floodFlags()...),
			benchScenario("scale", "what one claim costs as the backlog and the active tenants grow",
				runBenchScale, scaleFlags()...),
			benchScenario("quota", "quota used, 429s and interactive wait against a simulated provider, beside a naive client",
				runBenchQuota, quotaFlags()...),
			benchScenario("enqueue", "jobs/s enqueued one per transaction and in bulk, beside FIFO",
				runBenchEnqueue, enqueueFlags()...),
		},
	}
}

// benchWorkerCommand is one drain worker process; `batchq bench drain`
// starts its own binary with it. It reads DATABASE_URL like every command.
func benchWorkerCommand() *cli.Command {
	return &cli.Command{
		Name:            "bench-worker",
		Usage:           "a drain worker process of `batchq bench drain` (internal)",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			return benchkit.WorkerMain(c.Context, c.String("database-url"), c.Args().Slice(), os.Stdin, c.App.Writer)
		},
	}
}

type benchRun func(c *cli.Context, env *benchkit.Env, runs benchkit.Runs) (*benchkit.Report, error)

func benchScenario(name, usage string, run benchRun, flags ...cli.Flag) *cli.Command {
	common := []cli.Flag{
		&cli.IntFlag{Name: "reps", Usage: "timed repetitions of each measurement", Value: 3, EnvVars: []string{"BATCHQ_BENCH_REPS"}},
		&cli.BoolFlag{Name: "no-warmup", Usage: "skip the untimed warm-up run", EnvVars: []string{"BATCHQ_BENCH_NO_WARMUP"}},
		&cli.BoolFlag{Name: "json", Usage: "print the results as JSON", EnvVars: []string{"BATCHQ_BENCH_JSON"}},
		&cli.Uint64Flag{Name: "seed", Usage: "seed of the backlogs' tenants and costs", EnvVars: []string{"BATCHQ_BENCH_SEED"}},
	}
	return &cli.Command{
		Name:   name,
		Usage:  usage,
		Flags:  append(flags, common...),
		Action: runBench(run),
	}
}

// runBench creates the scenario's database, runs it and prints the report;
// the database is dropped whatever happens.
func runBench(run benchRun) cli.ActionFunc {
	return func(c *cli.Context) (err error) {
		if c.Args().Present() {
			return usagef("batchq: %s: unexpected argument %q", c.Command.HelpName, c.Args().First())
		}
		if n := c.Int("reps"); n < 1 || n > 100 {
			return usagef("batchq: --reps %d: must be in 1..100", n)
		}
		runs := benchkit.Runs{Reps: c.Int("reps"), NoWarmUp: c.Bool("no-warmup"), Progress: c.App.ErrWriter, Seed: c.Uint64("seed")}
		db, err := benchkit.CreateDatabase(c.Context, c.String("database-url"))
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "batchq bench: working in database %s (dropped afterwards)\n", db.Name)
		defer func() {
			if dropErr := db.Drop(context.WithoutCancel(c.Context)); dropErr != nil {
				err = errors.Join(err, dropErr)
			}
		}()
		env, err := benchkit.OpenEnv(c.Context, db.URL, 48)
		if err != nil {
			return err
		}
		defer env.Close()
		rep, err := run(c, env, runs)
		var ce *benchkit.ConfigError
		if errors.As(err, &ce) {
			return usagef("batchq: bench %s", ce.Msg)
		}
		if err != nil {
			return err
		}
		rep.Command = commandLine(c)
		if c.Bool("json") {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetIndent("", "  ")
			return enc.Encode(rep)
		}
		return rep.WriteText(c.App.Writer)
	}
}

// commandLine is the command as given, flags in the order the command
// defines them, without the database URL.
func commandLine(c *cli.Context) string {
	parts := []string{c.Command.HelpName}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		if _, ok := f.(*cli.BoolFlag); ok {
			if c.Bool(name) {
				parts = append(parts, "--"+name)
			}
			continue
		}
		parts = append(parts, fmt.Sprintf("--%s=%v", name, c.Value(name)))
	}
	return strings.Join(parts, " ")
}

// benchFlag names a scenario flag's environment variable after the scenario.
func benchEnv(scenario, flag string) []string {
	return []string{"BATCHQ_BENCH_" + strings.ToUpper(scenario+"_"+strings.ReplaceAll(flag, "-", "_"))}
}

func intFlag(scenario, name string, value int, usage string) *cli.IntFlag {
	return &cli.IntFlag{Name: name, Value: value, Usage: usage, EnvVars: benchEnv(scenario, name)}
}

func listFlag(scenario, name string, value []int, usage string) *cli.StringFlag {
	s := make([]string, len(value))
	for i, v := range value {
		s[i] = strconv.Itoa(v)
	}
	return &cli.StringFlag{Name: name, Value: strings.Join(s, ","), Usage: usage + " (comma-separated)", EnvVars: benchEnv(scenario, name)}
}

func durationFlag(scenario, name string, value time.Duration, usage string) *cli.DurationFlag {
	return &cli.DurationFlag{Name: name, Value: value, Usage: usage, EnvVars: benchEnv(scenario, name)}
}

// intList reads a comma-separated list of integers in lo..hi from flag
// name. A value named twice is refused: it would be measured twice, in rows
// of its own.
func intList(c *cli.Context, name string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(c.String(name), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		rule := benchkit.RangeRule(int64(n), int64(lo), int64(hi))
		switch {
		case err != nil || n < 1:
			return nil, usagef("batchq: bench %s: --%s %q: must be a comma-separated list of positive integers", c.Command.Name, name, c.String(name))
		case rule != "":
			return nil, usagef("batchq: bench %s: --%s %q: %d: %s", c.Command.Name, name, c.String(name), n, rule)
		case slices.Contains(out, n):
			return nil, usagef("batchq: bench %s: --%s %q: %d is named twice", c.Command.Name, name, c.String(name), n)
		}
		out = append(out, n)
	}
	return out, nil
}

// unbounded is the upper end of a flag with no limit of its own.
const unbounded = benchkit.Unbounded

// intRange is the values an integer flag of a scenario takes.
type intRange struct {
	name   string
	lo, hi int
}

// checkInts refuses the first flag outside its range, naming it. The
// scenarios take a zero setting for their default, so a 0 given on the
// command line must be refused here, not passed on.
func checkInts(c *cli.Context, ranges ...intRange) error {
	for _, r := range ranges {
		n := c.Int(r.name)
		if rule := benchkit.RangeRule(int64(n), int64(r.lo), int64(r.hi)); rule != "" {
			return usagef("batchq: bench %s: --%s: %s (got %d)", c.Command.Name, r.name, rule, n)
		}
	}
	return nil
}

// atMost refuses a value n of flag name above the value of flag limit.
func atMost(c *cli.Context, name string, n int, limit string) error {
	if m := c.Int(limit); n > m {
		return usagef("batchq: bench %s: --%s: must be at most --%s (got %d, --%s %d)", c.Command.Name, name, limit, n, limit, m)
	}
	return nil
}

func drainFlags() []cli.Flag {
	d := benchkit.DefaultDrainConfig()
	return []cli.Flag{
		intFlag("drain", "jobs", d.Jobs, "no-op jobs in the backlog"),
		intFlag("drain", "tenants", d.Tenants, "tenants the backlog is spread over"),
		intFlag("drain", "max-cost", int(d.MaxCost), fmt.Sprintf("jobs cost 1..max-cost tokens (max-cost at most %d)", queue.MaxCost)),
		listFlag("drain", "processes", d.Processes, fmt.Sprintf("numbers of worker processes to measure, each 1..%d and at most --workers", benchkit.MaxDrainProcesses)),
		listFlag("drain", "batch", d.Batches, fmt.Sprintf("claim batch sizes to measure, each 1..%d", benchkit.MaxDrainBatch)),
		intFlag("drain", "workers", d.Workers, fmt.Sprintf("claimers in all, split over the processes, 1..%d (each holds a connection, each process 4 more)", benchkit.MaxDrainWorkers)),
		intFlag("drain", "scheduled", 0, "jobs scheduled a year ahead kept beside the fair backlog (fair, fifo and lean only)"),
		&cli.StringFlag{Name: "systems", Value: strings.Join(d.Systems, ","), EnvVars: benchEnv("drain", "systems"),
			Usage: "what to drain: fair (claim and complete in batches), pool (the worker pool), fifo (the baseline: FIFO with batchq's rows), lean (FIFO with the narrowest rows), river and river-default (River's worker pool tuned and with its defaults; needs make bench-river)"},
		riverBinFlag("drain"),
	}
}

// riverBinFlag names the batchq-river program, for the river systems.
func riverBinFlag(scenario string) cli.Flag {
	return &cli.StringFlag{Name: "river-bin", EnvVars: benchEnv(scenario, "river-bin"),
		Usage: "the `PATH` of the batchq-river program that make bench-river builds (default: batchq-river beside this program, else on PATH)"}
}

// systemsList reads --systems, refusing a system named twice, and when it
// names one of the River systems the scenario measures, finds batchq-river
// and prepares River's schema in the scenario's database. Other names are
// left to the scenario to check.
func systemsList(c *cli.Context, env *benchkit.Env, river ...string) ([]string, error) {
	var systems []string
	for _, s := range strings.Split(c.String("systems"), ",") {
		s = strings.TrimSpace(s)
		if slices.Contains(systems, s) {
			return nil, usagef("batchq: bench %s: --systems %q: %s is named twice", c.Command.Name, c.String("systems"), s)
		}
		systems = append(systems, s)
	}
	for _, s := range systems {
		if !slices.Contains(river, s) {
			continue
		}
		p, err := benchkit.FindRiver(c.String("river-bin"))
		var ce *benchkit.ConfigError
		if errors.As(err, &ce) {
			return nil, usagef("batchq: bench %s: %s", c.Command.Name, ce.Msg)
		}
		if err != nil {
			return nil, err
		}
		return systems, env.UsePeer(c.Context, p)
	}
	return systems, nil
}

func runBenchDrain(c *cli.Context, env *benchkit.Env, runs benchkit.Runs) (*benchkit.Report, error) {
	err := checkInts(c, intRange{"jobs", 1, unbounded}, intRange{"tenants", 1, unbounded},
		intRange{"max-cost", 1, int(queue.MaxCost)}, intRange{"workers", 1, benchkit.MaxDrainWorkers},
		intRange{"scheduled", 0, unbounded})
	if err != nil {
		return nil, err
	}
	procs, err := intList(c, "processes", 1, benchkit.MaxDrainProcesses)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		// Every process claims: more processes than claimers would run
		// more claimers than asked for.
		if err := atMost(c, "processes", p, "workers"); err != nil {
			return nil, err
		}
	}
	batches, err := intList(c, "batch", 1, benchkit.MaxDrainBatch)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("batchq: bench drain: finding this program to start worker processes: %w", err)
	}
	systems, err := systemsList(c, env, benchkit.RiverSystems...)
	if err != nil {
		return nil, err
	}
	return benchkit.Drain(c.Context, env, benchkit.DrainConfig{
		Runs: runs, Jobs: c.Int("jobs"), Tenants: c.Int("tenants"), MaxCost: int64(c.Int("max-cost")),
		Processes: procs, Batches: batches, Workers: c.Int("workers"), Scheduled: c.Int("scheduled"),
		Systems: systems,
		Spawn:   benchkit.ExecSpawner(exe, "bench-worker"),
	})
}

func floodFlags() []cli.Flag {
	d := benchkit.DefaultFloodConfig()
	return []cli.Flag{
		intFlag("flood", "backlog", d.Backlog, "jobs the flooding tenant has queued (at least 2)"),
		intFlag("flood", "small-tenants", d.SmallTenants, "tenants that arrive after the flood"),
		intFlag("flood", "small-jobs", d.SmallJobs, "jobs of each small tenant"),
		intFlag("flood", "arrive-after", 0, "jobs claimed before the small tenants arrive, below --backlog (0: backlog/50)"),
		intFlag("flood", "max-cost", int(d.MaxCost), fmt.Sprintf("jobs cost 1..max-cost tokens (max-cost at most %d)", queue.MaxCost)),
		intFlag("flood", "workers", d.Workers, fmt.Sprintf("claimers, 1..%d", benchkit.MaxFloodWorkers)),
		intFlag("flood", "batch", d.Batch, fmt.Sprintf("jobs per claim, 1..%d", queue.MaxClaim)),
		intFlag("flood", "quantum", int(d.Quantum), fmt.Sprintf("the queue's quantum, 1..%d", queue.MaxCost)),
		intFlag("flood", "window-rounds", d.WindowRounds, "length of a fairness window, in rounds"),
		intFlag("flood", "processes", 1, "worker processes the fair queue's claimers behind the backlog are split over, at most --workers"),
		&cli.BoolFlag{Name: "show-windows", EnvVars: benchEnv("flood", "show-windows"),
			Usage: "print each window of the fair queue whose Jain's index is below the bar, with every tenant's tokens in it"},
	}
}

func runBenchFlood(c *cli.Context, env *benchkit.Env, runs benchkit.Runs) (*benchkit.Report, error) {
	// The backlog is at least 2: the small tenants arrive after at least
	// one of its jobs is claimed, and before the last.
	err := checkInts(c, intRange{"backlog", 2, unbounded}, intRange{"small-tenants", 1, unbounded},
		intRange{"small-jobs", 1, unbounded}, intRange{"arrive-after", 0, unbounded},
		intRange{"max-cost", 1, int(queue.MaxCost)}, intRange{"workers", 1, benchkit.MaxFloodWorkers},
		intRange{"batch", 1, queue.MaxClaim}, intRange{"quantum", 1, int(queue.MaxCost)},
		intRange{"window-rounds", 1, unbounded}, intRange{"processes", 1, unbounded})
	if err != nil {
		return nil, err
	}
	if a, b := c.Int("arrive-after"), c.Int("backlog"); a >= b {
		return nil, usagef("batchq: bench flood: --arrive-after: must be below --backlog (got %d, --backlog %d)", a, b)
	}
	if err := atMost(c, "processes", c.Int("processes"), "workers"); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("batchq: bench flood: finding this program to start worker processes: %w", err)
	}
	return benchkit.Flood(c.Context, env, benchkit.FloodConfig{
		Runs: runs, Backlog: c.Int("backlog"), SmallTenants: c.Int("small-tenants"), SmallJobs: c.Int("small-jobs"),
		ArriveAfter: c.Int("arrive-after"), MaxCost: int64(c.Int("max-cost")), Workers: c.Int("workers"),
		Batch: c.Int("batch"), Quantum: int64(c.Int("quantum")), WindowRounds: c.Int("window-rounds"),
		Processes: c.Int("processes"), Spawn: benchkit.ExecSpawner(exe, "bench-worker"), ShowWindows: c.Bool("show-windows"),
	})
}

func scaleFlags() []cli.Flag {
	d := benchkit.DefaultScaleConfig()
	return []cli.Flag{
		listFlag("scale", "rows", d.Rows, "backlog sizes (queued rows) to measure"),
		intFlag("scale", "row-tenants", d.RowTenants, "tenants of the backlog-size series"),
		listFlag("scale", "tenants", d.Tenants, "numbers of active tenants to measure"),
		intFlag("scale", "tenant-rows", d.TenantRows, "queued rows of the tenant series"),
		intFlag("scale", "claims", d.Claims, "timed claims per repetition"),
		intFlag("scale", "batch", d.Batch, "jobs per claim"),
	}
}

func runBenchScale(c *cli.Context, env *benchkit.Env, runs benchkit.Runs) (*benchkit.Report, error) {
	rows, err := intList(c, "rows", 1, unbounded)
	if err != nil {
		return nil, err
	}
	tenants, err := intList(c, "tenants", 1, unbounded)
	if err != nil {
		return nil, err
	}
	return benchkit.Scale(c.Context, env, benchkit.ScaleConfig{
		Runs: runs, Rows: rows, RowTenants: c.Int("row-tenants"), Tenants: tenants, TenantRows: c.Int("tenant-rows"),
		Claims: c.Int("claims"), Batch: c.Int("batch"),
	})
}

func quotaFlags() []cli.Flag {
	d := benchkit.DefaultQuotaConfig()
	return []cli.Flag{
		durationFlag("quota", "duration", d.Duration, "how long each run sends calls"),
		durationFlag("quota", "window", d.Window, "the provider's quota window"),
		intFlag("quota", "tokens", int(d.Tokens), "the provider's tokens per window"),
		intFlag("quota", "requests", int(d.Requests), "the provider's requests per window"),
		durationFlag("quota", "latency", d.Latency, "how long an admitted call takes"),
		durationFlag("quota", "jitter", d.Jitter, "up to this much more, at random"),
		&cli.Float64Flag{Name: "reserve", Value: d.Reserve, EnvVars: benchEnv("quota", "reserve"),
			Usage: "fraction of the quota batch work leaves to interactive calls"},
		intFlag("quota", "pools", d.Pools, "worker pools, each on its own connection pool"),
		intFlag("quota", "workers", d.Workers, "handlers per pool"),
		intFlag("quota", "max-cost", int(d.MaxCost), "batch jobs cost 1..max-cost tokens"),
		intFlag("quota", "interactive", d.Interactive, "interactive callers"),
		durationFlag("quota", "interactive-every", d.InteractiveEvery, "how often each interactive caller calls"),
		intFlag("quota", "interactive-cost", int(d.InteractiveCost), "tokens of an interactive call"),
	}
}

func runBenchQuota(c *cli.Context, env *benchkit.Env, runs benchkit.Runs) (*benchkit.Report, error) {
	return benchkit.Quota(c.Context, env, benchkit.QuotaConfig{
		Runs: runs, Duration: c.Duration("duration"), Window: c.Duration("window"),
		Tokens: int64(c.Int("tokens")), Requests: int64(c.Int("requests")),
		Latency: c.Duration("latency"), Jitter: c.Duration("jitter"), Reserve: c.Float64("reserve"),
		Pools: c.Int("pools"), Workers: c.Int("workers"), MaxCost: int64(c.Int("max-cost")),
		Interactive: c.Int("interactive"), InteractiveEvery: c.Duration("interactive-every"),
		InteractiveCost: int64(c.Int("interactive-cost")),
	})
}

func enqueueFlags() []cli.Flag {
	d := benchkit.DefaultEnqueueConfig()
	return []cli.Flag{
		intFlag("enqueue", "jobs", d.Jobs, "jobs per single-row measurement"),
		intFlag("enqueue", "bulk-jobs", d.BulkJobs, "jobs per bulk measurement"),
		intFlag("enqueue", "bulk-size", d.BulkSize, "jobs per bulk call, at most --bulk-jobs"),
		intFlag("enqueue", "txn-jobs", d.TxnJobs, "jobs per transaction measurement"),
		intFlag("enqueue", "txn-size", d.TxnSize, "jobs of one tenant per transaction, at most --txn-jobs"),
		listFlag("enqueue", "concurrency", d.Concurrency, fmt.Sprintf("goroutines inserting at once, each 1..%d; txn and the bars against fifo and river are measured with 1 only", benchkit.MaxEnqueueConcurrency)),
		intFlag("enqueue", "tenants", d.Tenants, "tenants the jobs are spread over (bulk-apart: each enqueuer's own)"),
		&cli.StringFlag{Name: "systems", Value: strings.Join(d.Systems, ","), EnvVars: benchEnv("enqueue", "systems"),
			Usage: "what to enqueue into: fair, fifo (the baseline: INSERT of batchq's rows), river (River's Insert and InsertManyFast; needs make bench-river)"},
		riverBinFlag("enqueue"),
	}
}

func runBenchEnqueue(c *cli.Context, env *benchkit.Env, runs benchkit.Runs) (*benchkit.Report, error) {
	err := checkInts(c, intRange{"jobs", 1, unbounded}, intRange{"bulk-jobs", 1, unbounded}, intRange{"bulk-size", 1, unbounded},
		intRange{"txn-jobs", 1, unbounded}, intRange{"txn-size", 1, unbounded}, intRange{"tenants", 1, unbounded})
	if err != nil {
		return nil, err
	}
	// A call larger than its measurement's jobs would make one call of
	// fewer jobs than the report says.
	if err := atMost(c, "bulk-size", c.Int("bulk-size"), "bulk-jobs"); err != nil {
		return nil, err
	}
	if err := atMost(c, "txn-size", c.Int("txn-size"), "txn-jobs"); err != nil {
		return nil, err
	}
	conc, err := intList(c, "concurrency", 1, benchkit.MaxEnqueueConcurrency)
	if err != nil {
		return nil, err
	}
	systems, err := systemsList(c, env, benchkit.SystemRiver)
	if err != nil {
		return nil, err
	}
	return benchkit.Enqueue(c.Context, env, benchkit.EnqueueConfig{
		Runs: runs, Jobs: c.Int("jobs"), BulkJobs: c.Int("bulk-jobs"), BulkSize: c.Int("bulk-size"),
		TxnJobs: c.Int("txn-jobs"), TxnSize: c.Int("txn-size"),
		Concurrency: conc, Tenants: c.Int("tenants"), Systems: systems,
	})
}
