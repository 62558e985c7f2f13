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

	dec "github.com/batchq/batchq/internal/decimal"
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
				checkBenchDrain, drainFlags()...),
			benchScenario("flood", "small tenants' wait and share of the tokens behind one tenant's flood, beside FIFO",
				checkBenchFlood, floodFlags()...),
			benchScenario("scale", "what one claim costs as the backlog and the active tenants grow",
				checkBenchScale, scaleFlags()...),
			benchScenario("quota", "quota used, 429s and interactive wait against a simulated provider, beside a naive client",
				checkBenchQuota, quotaFlags()...),
			benchScenario("enqueue", "jobs/s enqueued one per transaction and in bulk, beside FIFO",
				checkBenchEnqueue, enqueueFlags()...),
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
			url, err := databaseURL(c)
			if err != nil {
				return err
			}
			return benchkit.WorkerMain(c.Context, url, c.Args().Slice(), os.Stdin, c.App.Writer)
		},
	}
}

// benchCheck reads and checks a scenario's flags, touching no database, and
// returns the run they configure: a bad flag fails before a database is
// made.
type benchCheck func(c *cli.Context, runs benchkit.Runs) (benchRun, error)

// benchRun runs a scenario whose flags were checked, in env.
type benchRun func(ctx context.Context, env *benchkit.Env) (*benchkit.Report, error)

func benchScenario(name, usage string, check benchCheck, flags ...cli.Flag) *cli.Command {
	common := []cli.Flag{
		&cli.IntFlag{Name: "reps", Usage: "timed repetitions of each measurement, 1..100", Value: 3, EnvVars: []string{"BATCHQ_BENCH_REPS"}},
		&cli.BoolFlag{Name: "no-warmup", Usage: "skip the untimed warm-up run", EnvVars: []string{"BATCHQ_BENCH_NO_WARMUP"}},
		&cli.BoolFlag{Name: "json", Usage: "print the results as JSON", EnvVars: []string{"BATCHQ_BENCH_JSON"}},
		&cli.Uint64Flag{Name: "seed", Usage: "seed of the backlogs' tenants and costs", EnvVars: []string{"BATCHQ_BENCH_SEED"}},
	}
	return &cli.Command{
		Name:   name,
		Usage:  usage,
		Flags:  append(flags, common...),
		Action: runBench(check),
	}
}

// runBench checks the scenario's flags, then creates its database, runs it
// and prints the report; the database is dropped whatever happens.
func runBench(check benchCheck) cli.ActionFunc {
	return func(c *cli.Context) (err error) {
		if c.Args().Present() {
			return usagef("batchq: bench %s: unexpected argument %q", c.Command.Name, c.Args().First())
		}
		if err := textOnly(c, "bench "+c.Command.Name, "its report is text, or JSON with --json"); err != nil {
			return err
		}
		if err := checkInts(c, intRange{"reps", 1, 100}); err != nil {
			return err
		}
		runs := benchkit.Runs{Reps: c.Int("reps"), NoWarmUp: c.Bool("no-warmup"), Progress: c.App.ErrWriter, Seed: c.Uint64("seed")}
		run, err := check(c, runs)
		if err != nil {
			return benchError(err)
		}
		url, err := databaseURL(c)
		if err != nil {
			return err
		}
		db, err := benchkit.CreateDatabase(c.Context, url)
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
		rep, err := run(c.Context, env)
		if err != nil {
			return benchError(err)
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

// benchError is err, a usage error when it is a scenario's ConfigError.
func benchError(err error) error {
	var ce *benchkit.ConfigError
	if errors.As(err, &ce) {
		return usagef("batchq: bench %s", ce.Msg)
	}
	return err
}

// commandLine is the command as given, flags in the order the command
// defines them, without the database URL, quoted so that a shell takes it
// back as it was.
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
		parts = append(parts, "--"+name+"="+shellQuote(fmt.Sprint(c.Value(name))))
	}
	return strings.Join(parts, " ")
}

// shellQuote returns s as a POSIX shell word: as it is when it holds only
// characters a shell leaves alone, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,._+-:/=@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
		Usage: "the `PATH` of the batchq-river program that make bench-river builds, for the River systems of --systems, and refused without one (default: batchq-river beside this program, else on PATH)"}
}

// systemsList reads --systems, refusing a system named twice and one that
// rule refuses (rule returns the rule a name breaks, "" when it keeps it).
func systemsList(c *cli.Context, rule func(system string) string) ([]string, error) {
	var systems []string
	for _, s := range strings.Split(c.String("systems"), ",") {
		s = strings.TrimSpace(s)
		if slices.Contains(systems, s) {
			return nil, usagef("batchq: bench %s: --systems %q: %s is named twice", c.Command.Name, c.String("systems"), s)
		}
		if r := rule(s); r != "" {
			return nil, usagef("batchq: bench %s: --systems %q: %q: %s", c.Command.Name, c.String("systems"), s, r)
		}
		systems = append(systems, s)
	}
	return systems, nil
}

// oneOf is the rule of a name that must be one of names ("" when it is).
func oneOf(name string, names ...string) string {
	if slices.Contains(names, name) {
		return ""
	}
	return "must be " + strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// riverProgram finds the batchq-river program when systems names one of
// rivers, the River systems the scenario takes, else returns nil. Without
// one, a --river-bin is refused: nothing would run the program it names.
func riverProgram(c *cli.Context, systems, rivers []string) (*benchkit.PeerProgram, error) {
	if !slices.ContainsFunc(systems, func(s string) bool { return slices.Contains(rivers, s) }) {
		if c.IsSet("river-bin") {
			return nil, usagef("batchq: bench %s: %s: only used with --systems %s (got --systems %q)",
				c.Command.Name, givenFlag(c, "river-bin"), strings.Join(rivers, " or "), c.String("systems"))
		}
		return nil, nil
	}
	p, err := benchkit.FindRiver(c.String("river-bin"))
	var ce *benchkit.ConfigError
	if errors.As(err, &ce) {
		return nil, usagef("batchq: bench %s: %s", c.Command.Name, ce.Msg)
	}
	return p, err
}

// usePeer prepares River's schema in env when the scenario measures it.
func usePeer(ctx context.Context, env *benchkit.Env, river *benchkit.PeerProgram) error {
	if river == nil {
		return nil
	}
	return env.UsePeer(ctx, river)
}

func checkBenchDrain(c *cli.Context, runs benchkit.Runs) (benchRun, error) {
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
	systems, err := systemsList(c, func(s string) string {
		return oneOf(s, append([]string{benchkit.SystemFair, benchkit.SystemPool, benchkit.SystemFIFO, benchkit.SystemLean}, benchkit.RiverSystems...)...)
	})
	if err != nil {
		return nil, err
	}
	if n := c.Int("scheduled"); n > 0 {
		for _, s := range systems {
			// A worker pool's drain waits for the scheduled jobs too.
			if r := oneOf(s, benchkit.SystemFair, benchkit.SystemFIFO, benchkit.SystemLean); r != "" {
				return nil, usagef("batchq: bench drain: --scheduled %d: --systems must name only fair, fifo and lean (got %s; a worker pool's drain waits for scheduled jobs)", n, s)
			}
		}
	}
	river, err := riverProgram(c, systems, benchkit.RiverSystems)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("batchq: bench drain: finding this program to start worker processes: %w", err)
	}
	cfg := benchkit.DrainConfig{
		Runs: runs, Jobs: c.Int("jobs"), Tenants: c.Int("tenants"), MaxCost: int64(c.Int("max-cost")),
		Processes: procs, Batches: batches, Workers: c.Int("workers"), Scheduled: c.Int("scheduled"),
		Systems: systems,
		Spawn:   benchkit.ExecSpawner(exe, "bench-worker"),
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, env *benchkit.Env) (*benchkit.Report, error) {
		if err := usePeer(ctx, env, river); err != nil {
			return nil, err
		}
		return benchkit.Drain(ctx, env, cfg)
	}, nil
}

func floodFlags() []cli.Flag {
	d := benchkit.DefaultFloodConfig()
	return []cli.Flag{
		intFlag("flood", "backlog", d.Backlog, "jobs the flooding tenant has queued (at least 2)"),
		intFlag("flood", "small-tenants", d.SmallTenants, fmt.Sprintf("tenants that arrive after the flood, 1..%d, each in a transaction of its own, committed together", benchkit.MaxFloodSmallTenants)),
		intFlag("flood", "small-jobs", d.SmallJobs, "jobs of each small tenant"),
		intFlag("flood", "arrive-after", 0, "jobs claimed before the small tenants arrive, below --backlog (0: backlog/50)"),
		intFlag("flood", "max-cost", int(d.MaxCost), fmt.Sprintf("jobs cost 1..max-cost tokens (max-cost at most %d)", queue.MaxCost)),
		intFlag("flood", "workers", d.Workers, fmt.Sprintf("claimers, 1..%d", benchkit.MaxFloodWorkers)),
		intFlag("flood", "batch", d.Batch, fmt.Sprintf("jobs per claim, 1..%d", queue.MaxClaim)),
		intFlag("flood", "quantum", int(d.Quantum), fmt.Sprintf("the queue's quantum, 1..%d", queue.MaxCost)),
		intFlag("flood", "window-rounds", d.WindowRounds, "length of a fairness window, in rounds"),
		intFlag("flood", "processes", 1, "worker processes the fair queue's claimers behind the backlog are split over, at most --workers (a process stops at an empty queue: above 1, the backlog must last until the small tenants arrive)"),
		&cli.BoolFlag{Name: "show-windows", EnvVars: benchEnv("flood", "show-windows"),
			Usage: "print each window of the fair queue whose Jain's index is below the bar, with every tenant's tokens in it"},
	}
}

func checkBenchFlood(c *cli.Context, runs benchkit.Runs) (benchRun, error) {
	// The backlog is at least 2: the small tenants arrive after at least
	// one of its jobs is claimed, and before the last.
	err := checkInts(c, intRange{"backlog", 2, unbounded}, intRange{"small-tenants", 1, benchkit.MaxFloodSmallTenants},
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
	cfg := benchkit.FloodConfig{
		Runs: runs, Backlog: c.Int("backlog"), SmallTenants: c.Int("small-tenants"), SmallJobs: c.Int("small-jobs"),
		ArriveAfter: c.Int("arrive-after"), MaxCost: int64(c.Int("max-cost")), Workers: c.Int("workers"),
		Batch: c.Int("batch"), Quantum: int64(c.Int("quantum")), WindowRounds: c.Int("window-rounds"),
		Processes: c.Int("processes"), Spawn: benchkit.ExecSpawner(exe, "bench-worker"), ShowWindows: c.Bool("show-windows"),
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, env *benchkit.Env) (*benchkit.Report, error) {
		return benchkit.Flood(ctx, env, cfg)
	}, nil
}

func scaleFlags() []cli.Flag {
	d := benchkit.DefaultScaleConfig()
	return []cli.Flag{
		listFlag("scale", "rows", d.Rows, "backlog sizes (queued rows) to measure"),
		intFlag("scale", "row-tenants", d.RowTenants, "tenants of the backlog-size series"),
		listFlag("scale", "tenants", d.Tenants, "numbers of active tenants to measure"),
		intFlag("scale", "tenant-rows", d.TenantRows, "queued rows of the tenant series"),
		intFlag("scale", "claims", d.Claims, "timed claims per repetition"),
		intFlag("scale", "batch", d.Batch, fmt.Sprintf("jobs per claim, 1..%d", queue.MaxClaim)),
	}
}

func checkBenchScale(c *cli.Context, runs benchkit.Runs) (benchRun, error) {
	err := checkInts(c, intRange{"row-tenants", 1, unbounded}, intRange{"tenant-rows", 1, unbounded},
		intRange{"claims", 1, unbounded}, intRange{"batch", 1, queue.MaxClaim})
	if err != nil {
		return nil, err
	}
	rows, err := intList(c, "rows", 1, unbounded)
	if err != nil {
		return nil, err
	}
	tenants, err := intList(c, "tenants", 1, unbounded)
	if err != nil {
		return nil, err
	}
	cfg := benchkit.ScaleConfig{
		Runs: runs, Rows: rows, RowTenants: c.Int("row-tenants"), Tenants: tenants, TenantRows: c.Int("tenant-rows"),
		Claims: c.Int("claims"), Batch: c.Int("batch"),
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, env *benchkit.Env) (*benchkit.Report, error) {
		return benchkit.Scale(ctx, env, cfg)
	}, nil
}

func quotaFlags() []cli.Flag {
	d := benchkit.DefaultQuotaConfig()
	return []cli.Flag{
		durationFlag("quota", "duration", d.Duration, "how long each run sends calls, at least 4 windows"),
		durationFlag("quota", "window", d.Window, fmt.Sprintf("the provider's quota window, at least %s", benchkit.MinQuotaWindow)),
		intFlag("quota", "tokens", int(d.Tokens), "the provider's tokens per window"),
		intFlag("quota", "requests", int(d.Requests), "the provider's requests per window"),
		durationFlag("quota", "latency", d.Latency, "how long an admitted call takes"),
		durationFlag("quota", "jitter", d.Jitter, "up to this much more, at random (0: none)"),
		&cli.Float64Flag{Name: "reserve", Value: d.Reserve, EnvVars: benchEnv("quota", "reserve"),
			Usage: "fraction of the quota batch work leaves to interactive calls, in [0, 1)"},
		intFlag("quota", "pools", d.Pools, "worker pools, each on its own connection pool"),
		intFlag("quota", "workers", d.Workers, "handlers per pool"),
		intFlag("quota", "max-cost", int(d.MaxCost), "batch jobs cost 1..max-cost tokens (max-cost at most --tokens)"),
		intFlag("quota", "interactive", d.Interactive, "interactive callers"),
		durationFlag("quota", "interactive-every", d.InteractiveEvery, "how often each interactive caller calls"),
		intFlag("quota", "interactive-cost", int(d.InteractiveCost), "tokens of an interactive call, at most --tokens"),
	}
}

func checkBenchQuota(c *cli.Context, runs benchkit.Runs) (benchRun, error) {
	err := checkInts(c, intRange{"tokens", 1, unbounded}, intRange{"requests", 1, unbounded},
		intRange{"pools", 1, unbounded}, intRange{"workers", 1, unbounded}, intRange{"max-cost", 1, int(queue.MaxCost)},
		intRange{"interactive", 1, unbounded}, intRange{"interactive-cost", 1, int(queue.MaxCost)})
	if err != nil {
		return nil, err
	}
	// Every call must fit the quota, or it would never be admitted.
	if err := atMost(c, "max-cost", c.Int("max-cost"), "tokens"); err != nil {
		return nil, err
	}
	if err := atMost(c, "interactive-cost", c.Int("interactive-cost"), "tokens"); err != nil {
		return nil, err
	}
	if w := c.Duration("window"); w < benchkit.MinQuotaWindow {
		return nil, usagef("batchq: bench quota: --window: must be at least %s (got %s)", benchkit.MinQuotaWindow, w)
	}
	for _, name := range []string{"duration", "latency", "interactive-every"} {
		if d := c.Duration(name); d <= 0 {
			return nil, usagef("batchq: bench quota: --%s: must be more than 0 (got %s)", name, d)
		}
	}
	if d := c.Duration("jitter"); d < 0 {
		return nil, usagef("batchq: bench quota: --jitter: must be at least 0 (got %s)", d)
	}
	// The first two windows of a run are not counted: at least two remain.
	if d, w := c.Duration("duration"), c.Duration("window"); d < 4*w {
		return nil, usagef("batchq: bench quota: --duration: must be at least 4 times --window (got %s, --window %s)", d, w)
	}
	if r := c.Float64("reserve"); !(r >= 0 && r < 1) {
		return nil, usagef("batchq: bench quota: --reserve: must be in [0, 1) (got %s)", dec.Format(r))
	}
	cfg := benchkit.QuotaConfig{
		Runs: runs, Duration: c.Duration("duration"), Window: c.Duration("window"),
		Tokens: int64(c.Int("tokens")), Requests: int64(c.Int("requests")),
		Latency: c.Duration("latency"), Jitter: c.Duration("jitter"), Reserve: c.Float64("reserve"),
		Pools: c.Int("pools"), Workers: c.Int("workers"), MaxCost: int64(c.Int("max-cost")),
		Interactive: c.Int("interactive"), InteractiveEvery: c.Duration("interactive-every"),
		InteractiveCost: int64(c.Int("interactive-cost")),
	}
	if n := cfg.BatchJobs(); !(n <= benchkit.MaxQuotaJobs) {
		return nil, usagef("batchq: bench quota: --tokens %d per --window %s over --duration %s at costs 1..--max-cost %d: "+
			"a run would queue %.0f batch jobs (half as much again as the quota lets through); must be at most %d",
			cfg.Tokens, cfg.Window, cfg.Duration, cfg.MaxCost, n, benchkit.MaxQuotaJobs)
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, env *benchkit.Env) (*benchkit.Report, error) {
		return benchkit.Quota(ctx, env, cfg)
	}, nil
}

func enqueueFlags() []cli.Flag {
	d := benchkit.DefaultEnqueueConfig()
	return []cli.Flag{
		intFlag("enqueue", "jobs", d.Jobs, "jobs per single-row measurement"),
		intFlag("enqueue", "bulk-jobs", d.BulkJobs, "jobs per bulk measurement"),
		intFlag("enqueue", "bulk-size", d.BulkSize, "jobs per bulk call, at most --bulk-jobs"),
		intFlag("enqueue", "txn-jobs", d.TxnJobs, "jobs per transaction measurement"),
		intFlag("enqueue", "txn-size", d.TxnSize, "jobs of one tenant per transaction, at most --txn-jobs"),
		listFlag("enqueue", "concurrency", d.Concurrency, fmt.Sprintf("goroutines inserting at once, each 1..%d and at most --jobs and the bulk calls (--bulk-jobs / --bulk-size); txn and the bars against fifo and river are measured with 1 only", benchkit.MaxEnqueueConcurrency)),
		intFlag("enqueue", "tenants", d.Tenants, "tenants the jobs are spread over (bulk-apart: each enqueuer's own)"),
		&cli.StringFlag{Name: "systems", Value: strings.Join(d.Systems, ","), EnvVars: benchEnv("enqueue", "systems"),
			Usage: "what to enqueue into: fair, fifo (the baseline: INSERT of batchq's rows), river (River's Insert and InsertManyFast; needs make bench-river)"},
		riverBinFlag("enqueue"),
	}
}

func checkBenchEnqueue(c *cli.Context, runs benchkit.Runs) (benchRun, error) {
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
	// Each enqueuer of a row makes a call, or the row would count
	// enqueuers that never inserted, and its time per call with them.
	top := slices.Max(conc)
	if jobs := c.Int("jobs"); top > jobs {
		return nil, usagef("batchq: bench enqueue: --concurrency %q: %d: must be at most --jobs (got --jobs %d): each enqueuer makes a call",
			c.String("concurrency"), top, jobs)
	}
	bulkJobs, bulkSize := c.Int("bulk-jobs"), c.Int("bulk-size")
	if calls := (bulkJobs + bulkSize - 1) / bulkSize; top > calls {
		return nil, usagef("batchq: bench enqueue: --concurrency %q: %d: must be at most the bulk calls, --bulk-jobs / --bulk-size rounded up (got %d: --bulk-jobs %d, --bulk-size %d): each enqueuer makes a call",
			c.String("concurrency"), top, calls, bulkJobs, bulkSize)
	}
	systems, err := systemsList(c, func(s string) string {
		if s == benchkit.SystemRiverDefault {
			// Its fetch settings change how River drains, not how it inserts.
			return "River inserts the same whatever its fetch settings; use river"
		}
		return oneOf(s, benchkit.SystemFair, benchkit.SystemFIFO, benchkit.SystemRiver)
	})
	if err != nil {
		return nil, err
	}
	river, err := riverProgram(c, systems, []string{benchkit.SystemRiver})
	if err != nil {
		return nil, err
	}
	cfg := benchkit.EnqueueConfig{
		Runs: runs, Jobs: c.Int("jobs"), BulkJobs: c.Int("bulk-jobs"), BulkSize: c.Int("bulk-size"),
		TxnJobs: c.Int("txn-jobs"), TxnSize: c.Int("txn-size"),
		Concurrency: conc, Tenants: c.Int("tenants"), Systems: systems,
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return func(ctx context.Context, env *benchkit.Env) (*benchkit.Report, error) {
		if err := usePeer(ctx, env, river); err != nil {
			return nil, err
		}
		return benchkit.Enqueue(ctx, env, cfg)
	}, nil
}
