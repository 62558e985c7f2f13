package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConfigError is returned by a scenario whose configuration is invalid,
// before it measures anything. Msg names the scenario and the setting.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return "benchkit: " + e.Msg }

func configErrorf(format string, args ...any) error {
	return &ConfigError{Msg: fmt.Sprintf(format, args...)}
}

// Limits of the scenarios' settings beyond the queue package's (a cost and
// a quantum are at most queue.MaxCost, a claim at most queue.MaxClaim).
const (
	// MaxDrainWorkers bounds a drain's claimers in all. Each holds a
	// connection, and each worker process 4 more: a drain the server cannot
	// connect fails partway with "too many clients".
	MaxDrainWorkers   = 64
	MaxDrainProcesses = 64
	MaxDrainBatch     = 10_000
	// MaxFloodWorkers and MaxEnqueueConcurrency bound the goroutines that
	// claim or insert in this process. They share the Env's pool (48
	// connections in batchq bench): more would wait for a connection
	// rather than run at once.
	MaxFloodWorkers       = 32
	MaxEnqueueConcurrency = 32
	// MaxFloodSmallTenants bounds a flood's arriving tenants: each arrives
	// on a connection of its own, beside the Env's pool.
	MaxFloodSmallTenants = 50
)

// Unbounded is the upper end of a setting with no limit of its own.
const Unbounded = math.MaxInt64

// RangeRule is the rule v breaks when it is outside lo..hi ("must be at
// least lo", or "must be in lo..hi"), "" when it keeps it: one wording for
// the scenarios' settings and batchq bench's flags.
func RangeRule(v, lo, hi int64) string {
	switch {
	case v >= lo && v <= hi:
		return ""
	case hi == Unbounded:
		return fmt.Sprintf("must be at least %d", lo)
	default:
		return fmt.Sprintf("must be in %d..%d", lo, hi)
	}
}

// setting is an integer setting of a scenario, for inRange.
type setting struct {
	name      string
	v, lo, hi int64
}

// inRange returns a ConfigError naming the first setting outside its range.
func inRange(scenario string, settings ...setting) error {
	for _, s := range settings {
		if rule := RangeRule(s.v, s.lo, s.hi); rule != "" {
			return configErrorf("%s: %s %d: %s", scenario, s.name, s.v, rule)
		}
	}
	return nil
}

// Runs holds what every scenario shares.
type Runs struct {
	// Reps is how many timed repetitions each measurement gets. 0: 3.
	Reps int
	// NoWarmUp skips the untimed warm-up run.
	NoWarmUp bool
	// Progress receives a line per run, for a person watching. nil: none.
	Progress io.Writer
	// Seed seeds the backlogs' tenants and costs. 0 is a fixed seed too.
	Seed uint64
}

func (r Runs) reps() int {
	if r.Reps <= 0 {
		return 3
	}
	return r.Reps
}

func (r Runs) progress(format string, args ...any) {
	if r.Progress != nil {
		fmt.Fprintf(r.Progress, format+"\n", args...)
	}
}

// newReport starts a report for a scenario run in env.
func newReport(ctx context.Context, env *Env, scenario string, r Runs) (*Report, error) {
	m, err := DescribeMachine(ctx, env.Pool)
	if err != nil {
		return nil, err
	}
	var schema int64
	// The version table is goose's; a database not migrated by goose has none.
	_ = env.Pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM batchq_goose_db_version WHERE is_applied`).Scan(&schema)
	return &Report{
		Scenario: scenario,
		Started:  time.Now(),
		Machine:  m,
		Reps:     r.reps(),
		WarmUp:   !r.NoWarmUp,
		Params:   []Param{{"schema_version", schema}},
		Bars:     []Bar{}, // JSON [], not null, when a run has none
	}, nil
}

func (r *Report) param(name string, v any) { r.Params = append(r.Params, Param{name, v}) }

func (r *Report) finish() *Report {
	r.Seconds = round(time.Since(r.Started).Seconds(), 1)
	return r
}

// ratio is a/b, NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// ratioCell is a ratio for a table: a float64, or nil (JSON null, "-" in
// text) when undefined.
func ratioCell(a, b float64) any {
	r := ratio(a, b)
	if math.IsNaN(r) {
		return nil
	}
	return round(r, 3)
}

// isDeadlock reports whether the database aborted a statement as one of a
// deadlock.
func isDeadlock(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "40P01"
}

var relationOID = regexp.MustCompile(`relation (\d+) of database`)

// describePgError spells out a database error with its detail, naming the
// relations its detail gives only by number.
func describePgError(ctx context.Context, env *Env, err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	detail := pe.Detail
	for _, m := range relationOID.FindAllStringSubmatch(detail, -1) {
		var name string
		if env.Pool.QueryRow(ctx, `SELECT $1::oid::regclass::text`, m[1]).Scan(&name) == nil {
			detail = strings.ReplaceAll(detail, "relation "+m[1]+" ", "relation "+name+" ")
		}
	}
	return strings.Join(strings.Fields(pe.Message+": "+detail), " ")
}
