package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/internal/dbsqlc"

	"github.com/batchq/batchq/internal/decimal"
)

// Defaults for a queue's settings; a zero field in QueueConfig takes these.
const (
	DefaultQuantum      int64         = 1000
	DefaultMaxPerTenant               = 10000
	DefaultTTL          time.Duration = 24 * time.Hour
	DefaultLease        time.Duration = 5 * time.Minute
	DefaultMaxAttempts                = 5
)

// Limits on what a job and a setting may hold: the same as the SQL
// functions' (db/functions/rules.sql), so a job is refused alike from Go and
// from SQL. Within them no key, ledger or round of the fair order can
// overflow (docs/design/fair-order.md, "Ranges").
const (
	// MaxCost is the largest estimated (or actual) cost a job may have, and
	// the largest quantum: a billion tokens.
	MaxCost int64 = 1_000_000_000
	// MinWeight and MaxWeight bound a tenant's weight.
	MinWeight = 0.001
	MaxWeight = 1_000_000
	// DefaultMaxPayloadBytes bounds a job's payload, as PostgreSQL prints it
	// (jsonb as text): the database's limit, which Config.MaxPayloadBytes may
	// lower.
	DefaultMaxPayloadBytes = 1 << 20
	// DefaultMaxResultBytes bounds the result stored with an outcome unless
	// Config.MaxResultBytes says otherwise; MaxResultBytes is the database's
	// limit.
	DefaultMaxResultBytes = 64 << 10
	MaxResultBytes        = 1 << 20
	// MaxReasonBytes bounds a cancel's reason, recorded as the outcome's
	// error: Cancel and CancelJobs cut a longer one, the SQL functions
	// refuse it.
	MaxReasonBytes = 4096
	// MaxNameBytes bounds a name: a tenant's, a kind's, a unique key's, a
	// worker's (WorkerConfig.Name) and a schedule's cron expression.
	MaxNameBytes = 256
	// MaxAttemptsLimit bounds a job's, a queue's and a schedule's
	// MaxAttempts.
	MaxAttemptsLimit = 1000
)

// Config configures a Client. The zero value is ready to use.
type Config struct {
	// MaxPayloadBytes bounds a job's payload, as jsonb text; at most
	// DefaultMaxPayloadBytes, the database's limit. 0: that limit.
	MaxPayloadBytes int
	// MaxResultBytes bounds a stored result, as jsonb text; a larger one is
	// kept as a truncated summary. At most MaxResultBytes, the database's
	// limit. 0: DefaultMaxResultBytes.
	MaxResultBytes int
	// Logger receives what maintenance and workers have to say.
	// nil: slog.Default().
	Logger *slog.Logger
}

// Client is batchq's handle on a database. It is safe for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	q    *dbsqlc.Queries
	cfg  Config
	log  *slog.Logger

	statsMu        sync.Mutex
	statsCheckedAt time.Time // the last check for stale statistics

	clock dbClock // the database's clock, which shared quota rows keep

	// finishGiveUp, when set (by tests only), is how long a worker pool's
	// completer retries a write the database refuses; 0 is a minute.
	finishGiveUp time.Duration
	// beforeFinishWrite, when set (by tests only), runs before a worker
	// pool's completer writes each batch.
	beforeFinishWrite func()
	// beforeHeartbeat, when set (by tests only), runs before a worker
	// pool's lease keeper sends each beat, its runs listed.
	beforeHeartbeat func()
	// refusedFor, when set (by tests only), stands for refusedFor.
	refusedFor time.Duration
	// pauseCheckEvery, when set (by tests only), stands for pauseCheckEvery.
	pauseCheckEvery time.Duration
	// shrunkAfter, when set (by tests only), stands for shrunkAnalyzeAfter.
	shrunkAfter time.Duration
	// assumedRun, when set (by tests only), is how long a worker pool takes
	// its handlers to run before any has: it then claims ahead at once.
	assumedRun time.Duration
	// testNow, when set (by tests only), is the time maintenance promotes
	// jobs and fires schedules as of, instead of the database's now.
	testNow func() time.Time
	// testPause, when set (by tests only), runs at the named points of a
	// transaction, where a test holds it to order it against another.
	testPause func(at string)
}

// pause runs the test's pause at point at, if one is set.
func (c *Client) pause(at string) {
	if c.testPause != nil {
		c.testPause(at)
	}
}

// NewClient returns a Client over pool. The pool's database must be migrated
// (batchq migrate up, or migrations.FS).
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("batchq: NewClient: pool is nil")
	}
	if cfg.MaxPayloadBytes < 0 || cfg.MaxPayloadBytes > DefaultMaxPayloadBytes {
		return nil, fmt.Errorf("batchq: NewClient: MaxPayloadBytes must be in 0..%d, the database's limit (got %d)",
			DefaultMaxPayloadBytes, cfg.MaxPayloadBytes)
	}
	if cfg.MaxResultBytes < 0 || cfg.MaxResultBytes > MaxResultBytes {
		return nil, fmt.Errorf("batchq: NewClient: MaxResultBytes must be in 0..%d, the database's limit (got %d)",
			MaxResultBytes, cfg.MaxResultBytes)
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Client{pool: pool, q: dbsqlc.New(), cfg: cfg, log: log, clock: dbClock{now: time.Now}}, nil
}

// QueueConfig holds a queue's shared settings. Every process of a fleet reads
// them from the database, so all schedule with the same numbers.
type QueueConfig struct {
	Name string // 1-128 of [A-Za-z0-9_.:-], starting with a letter or digit
	// Quantum is the cost a tenant of weight 1 is granted per round,
	// 1..MaxCost. 0: DefaultQuantum.
	Quantum int64
	// MaxPerTenant bounds each tenant's queued jobs, unless the tenant has a
	// bound of its own. 0: DefaultMaxPerTenant.
	MaxPerTenant int
	// DefaultTTL is the deadline of a job enqueued without one. 0: DefaultTTL.
	DefaultTTL time.Duration
	// Lease is how long a claim holds a job before it may be rescued; workers
	// heartbeat long jobs. 0: DefaultLease.
	Lease time.Duration
	// MaxAttempts is the attempts of a job enqueued without its own.
	// 0: DefaultMaxAttempts.
	MaxAttempts int
	// UniqueFor is how long after a job finished its unique key still
	// deduplicates enqueues. 0: only while the job is unfinished.
	UniqueFor time.Duration
	// PausedAt is when PauseQueue paused the queue, nil while it runs. Read
	// only: CreateQueue and UpdateQueue leave it as it is.
	PausedAt *time.Time
}

var queueName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// queueNameRule is what queueName accepts, in words.
const queueNameRule = "1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit"

// ValidQueueName reports whether name may name a queue: 1-128 characters of
// A-Z a-z 0-9 _ . : - starting with a letter or digit, as CreateQueue and
// the SQL API require. A call naming a queue that breaks the rule returns
// ErrUnknownQueue with the rule in its text.
func ValidQueueName(name string) bool { return queueName.MatchString(name) }

func (qc *QueueConfig) withDefaults() {
	if qc.Quantum == 0 {
		qc.Quantum = DefaultQuantum
	}
	if qc.MaxPerTenant == 0 {
		qc.MaxPerTenant = DefaultMaxPerTenant
	}
	if qc.DefaultTTL == 0 {
		qc.DefaultTTL = DefaultTTL
	}
	if qc.Lease == 0 {
		qc.Lease = DefaultLease
	}
	if qc.MaxAttempts == 0 {
		qc.MaxAttempts = DefaultMaxAttempts
	}
}

func (qc QueueConfig) validate() error {
	switch {
	case !queueName.MatchString(qc.Name):
		return &SettingError{"name", fmt.Sprintf("must be %s (got %s)", queueNameRule, quote(qc.Name))}
	case qc.Quantum <= 0 || qc.Quantum > MaxCost:
		return &SettingError{"quantum", fmt.Sprintf("must be in 1..%d (got %d)", MaxCost, qc.Quantum)}
	case qc.MaxPerTenant <= 0 || qc.MaxPerTenant > math.MaxInt32:
		return &SettingError{"max_per_tenant", fmt.Sprintf("must be in 1..%d (got %d)", math.MaxInt32, qc.MaxPerTenant)}
	case qc.DefaultTTL <= 0:
		return &SettingError{"default_ttl", fmt.Sprintf("must be > 0 (got %s)", qc.DefaultTTL)}
	case qc.Lease < time.Second:
		return &SettingError{"lease", fmt.Sprintf("must be at least 1s (got %s)", qc.Lease)}
	case qc.MaxAttempts <= 0 || qc.MaxAttempts > MaxAttemptsLimit:
		return &SettingError{"max_attempts", fmt.Sprintf("must be in 1..%d (got %d)", MaxAttemptsLimit, qc.MaxAttempts)}
	case qc.UniqueFor < 0:
		return &SettingError{"unique_for", fmt.Sprintf("must be >= 0 (got %s)", qc.UniqueFor)}
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"default_ttl", qc.DefaultTTL}, {"lease", qc.Lease}, {"unique_for", qc.UniqueFor}} {
		if err := wholeMicroseconds(d.field, d.v); err != nil {
			return err
		}
	}
	return nil
}

// wholeMicroseconds refuses a duration the database cannot keep as it is:
// it keeps intervals in whole microseconds, so 500ns would be stored as 0
// (a unique window switched off) or break a rule there.
func wholeMicroseconds(field string, d time.Duration) error {
	if d%time.Microsecond != 0 {
		return &SettingError{field, fmt.Sprintf("must be a whole number of microseconds (got %s)", d)}
	}
	return nil
}

// CreateQueue creates a queue; zero fields take the defaults. It returns
// ErrQueueExists if the name is taken.
func (c *Client) CreateQueue(ctx context.Context, qc QueueConfig) error {
	qc.withDefaults()
	if err := qc.validate(); err != nil {
		return err
	}
	err := c.q.CreateQueue(ctx, c.pool, dbsqlc.CreateQueueParams{
		Name:         qc.Name,
		Quantum:      qc.Quantum,
		MaxPerTenant: int32(qc.MaxPerTenant),
		DefaultTtl:   qc.DefaultTTL,
		Lease:        qc.Lease,
		MaxAttempts:  int32(qc.MaxAttempts),
		UniqueFor:    qc.UniqueFor,
	})
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: %s", ErrQueueExists, quote(qc.Name))
	}
	if err != nil {
		return fmt.Errorf("batchq: create queue %q: %w", qc.Name, err)
	}
	return nil
}

// QueueUpdate changes some settings of a queue; nil fields stay as they are.
type QueueUpdate struct {
	Quantum      *int64
	MaxPerTenant *int
	DefaultTTL   *time.Duration
	Lease        *time.Duration
	MaxAttempts  *int
	UniqueFor    *time.Duration
}

// UpdateQueue changes a queue's settings and returns them. A new quantum
// re-schedules every queued job of the queue from its tenant's next round.
func (c *Client) UpdateQueue(ctx context.Context, name string, u QueueUpdate) (QueueConfig, error) {
	var next QueueConfig
	rekeyed := false
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		// Read under the row's lock: a change that read the settings before
		// a concurrent one committed would write the old values back.
		row, err := c.q.LockQueue(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return unknownQueue(name)
		}
		if err != nil {
			return err
		}
		cur := queueConfigOf(row)
		next = cur
		if u.Quantum != nil {
			next.Quantum = *u.Quantum
		}
		if u.MaxPerTenant != nil {
			next.MaxPerTenant = *u.MaxPerTenant
		}
		if u.DefaultTTL != nil {
			next.DefaultTTL = *u.DefaultTTL
		}
		if u.Lease != nil {
			next.Lease = *u.Lease
		}
		if u.MaxAttempts != nil {
			next.MaxAttempts = *u.MaxAttempts
		}
		if u.UniqueFor != nil {
			next.UniqueFor = *u.UniqueFor
		}
		if err := next.validate(); err != nil {
			return err
		}
		maxPer, maxAtt := int32(next.MaxPerTenant), int32(next.MaxAttempts)
		if _, err := c.q.UpdateQueue(ctx, tx, dbsqlc.UpdateQueueParams{
			Name:         name,
			Quantum:      &next.Quantum,
			MaxPerTenant: &maxPer,
			DefaultTtl:   &next.DefaultTTL,
			Lease:        &next.Lease,
			MaxAttempts:  &maxAtt,
			UniqueFor:    &next.UniqueFor,
		}); err != nil {
			return err
		}
		if next.Quantum == cur.Quantum {
			return nil
		}
		rekeyed = true
		return c.rekeyQueue(ctx, tx, name)
	})
	if err != nil {
		var se *SettingError
		if errors.As(err, &se) || errors.Is(err, ErrUnknownQueue) {
			return QueueConfig{}, err
		}
		return QueueConfig{}, fmt.Errorf("batchq: update queue %q: %w", name, err)
	}
	if rekeyed {
		c.settingsChanged(ctx, func(tx pgx.Tx) error { return c.rekeyQueue(ctx, tx, name) })
	}
	return next, nil
}

// rekeyQueue re-keys every tenant with queued jobs in a queue.
func (c *Client) rekeyQueue(ctx context.Context, tx pgx.Tx, name string) error {
	tenants, err := c.q.RingTenants(ctx, tx, name)
	if err != nil {
		return err
	}
	return c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: name, Tenants: tenants})
}

// rekeyTenant re-keys a tenant in every queue where it has queued jobs, in
// queue name order (bytewise, as EnqueueMany takes queues), so that
// concurrent changes and enqueues lock ring rows in one order.
func (c *Client) rekeyTenant(ctx context.Context, tx pgx.Tx, name string) error {
	held, err := c.q.LockTenantQueues(ctx, tx, name)
	if err != nil {
		return err
	}
	c.pause("tenant's queues held")
	queues, err := c.q.TenantQueues(ctx, tx, dbsqlc.TenantQueuesParams{Tenant: name, Queues: held})
	if err != nil {
		return err
	}
	c.pause("tenant's ring rows held")
	slices.Sort(queues)
	for _, q := range queues {
		if err := c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: q, Tenants: []string{name}}); err != nil {
			return err
		}
	}
	return nil
}

// settingsChanged tells enqueues still open that a weight or quantum change
// has committed, so that their check at commit re-keys the jobs the change
// could not see (batchq.ring_commit_checks), then runs rekey once more, in a
// transaction of its own. That second pass is for enqueues that committed
// after the change listed what to re-key and before this announcement:
// tenants that joined a queue meanwhile, keyed with the old share, which
// neither the change nor their own check saw. Enqueues that commit later see
// the announcement. The change itself stands whatever happens here; if the
// database cannot be reached, such a tenant may keep the old share until its
// queue empties.
func (c *Client) settingsChanged(ctx context.Context, rekey func(pgx.Tx) error) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.q.BumpSettingsVersion(bctx, c.pool); err != nil {
		c.log.Warn("a settings change is not announced to open enqueues", "err", err)
	}
	if err := pgx.BeginFunc(ctx, c.pool, rekey); err != nil {
		c.log.Warn("a settings change may not reach tenants that joined a queue while it ran", "err", err)
	}
}

// Queue returns a queue's settings, or ErrUnknownQueue.
func (c *Client) Queue(ctx context.Context, name string) (QueueConfig, error) {
	if !queueName.MatchString(name) {
		// No queue can have it; the database would refuse one that is not
		// UTF-8 with an error of its own.
		return QueueConfig{}, unknownQueue(name)
	}
	row, err := c.q.GetQueue(ctx, c.pool, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return QueueConfig{}, unknownQueue(name)
	}
	if err != nil {
		return QueueConfig{}, fmt.Errorf("batchq: queue %q: %w", name, err)
	}
	return queueConfigOf(row), nil
}

// Queues returns every queue's settings, by name.
func (c *Client) Queues(ctx context.Context) ([]QueueConfig, error) {
	rows, err := c.q.ListQueues(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("batchq: list queues: %w", err)
	}
	out := make([]QueueConfig, len(rows))
	for i, r := range rows {
		out[i] = queueConfigOf(r)
	}
	return out, nil
}

func queueConfigOf(r dbsqlc.BatchqQueue) QueueConfig {
	return QueueConfig{
		Name:         r.Name,
		Quantum:      r.Quantum,
		MaxPerTenant: int(r.MaxPerTenant),
		DefaultTTL:   r.DefaultTtl,
		Lease:        r.Lease,
		MaxAttempts:  int(r.MaxAttempts),
		UniqueFor:    r.UniqueFor,
		PausedAt:     r.PausedAt,
	}
}

// Tenant holds a tenant's settings, shared by all queues.
type Tenant struct {
	Name string
	// Weight scales the tenant's share of each round: a tenant of weight 3
	// gets three times the cost per round of a tenant of weight 1. It must be
	// in MinWeight..MaxWeight; fractions are allowed. Tenants never set
	// weigh 1.
	Weight float64
	// MaxQueued bounds the tenant's queued jobs in each queue, instead of the
	// queue's MaxPerTenant. 0: the queue's bound.
	MaxQueued int
}

func (t Tenant) validate() error {
	if err := checkName("name", t.Name); err != nil {
		return &SettingError{err.Field, err.Rule}
	}
	if math.IsNaN(t.Weight) || t.Weight < MinWeight || t.Weight > MaxWeight {
		return &SettingError{"weight", fmt.Sprintf("must be in %s..%s (got %s)",
			decimal.Format(MinWeight), decimal.Format(MaxWeight), decimal.Format(t.Weight))}
	}
	if t.MaxQueued < 0 || t.MaxQueued > math.MaxInt32 {
		return &SettingError{"max_queued", fmt.Sprintf("must be in 0..%d, 0 meaning the queue's bound (got %d)", math.MaxInt32, t.MaxQueued)}
	}
	return nil
}

// SetTenant creates or changes a tenant's settings, all of them. A new weight
// takes effect from the tenant's next round in every queue where it has
// queued jobs.
func (c *Client) SetTenant(ctx context.Context, t Tenant) error {
	_, err := c.UpdateTenant(ctx, t.Name, TenantUpdate{Weight: &t.Weight, MaxQueued: &t.MaxQueued})
	return err
}

// TenantUpdate changes some settings of a tenant; nil fields stay as they
// are (for a tenant without settings: weight 1, the queues' bounds).
type TenantUpdate struct {
	Weight    *float64
	MaxQueued *int
}

// UpdateTenant changes a tenant's settings, creating them if it has none,
// and returns them. Concurrent updates of one tenant apply one after the
// other, each to what the last left. A new weight takes effect as with
// SetTenant.
func (c *Client) UpdateTenant(ctx context.Context, name string, u TenantUpdate) (Tenant, error) {
	if err := checkName("name", name); err != nil {
		return Tenant{}, &SettingError{err.Field, err.Rule}
	}
	var next Tenant
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := c.q.CreateTenant(ctx, tx, name); err != nil {
			return err
		}
		row, err := c.q.LockTenant(ctx, tx, name)
		if err != nil {
			return err
		}
		next = Tenant{Name: name, Weight: row.Weight}
		if row.MaxQueued != nil {
			next.MaxQueued = int(*row.MaxQueued)
		}
		if u.Weight != nil {
			next.Weight = *u.Weight
		}
		if u.MaxQueued != nil {
			next.MaxQueued = *u.MaxQueued
		}
		if err := next.validate(); err != nil {
			return err
		}
		var bound *int32
		if next.MaxQueued > 0 {
			b := int32(next.MaxQueued)
			bound = &b
		}
		if _, err := c.q.UpsertTenant(ctx, tx, dbsqlc.UpsertTenantParams{Name: name, Weight: next.Weight, MaxQueued: bound}); err != nil {
			return err
		}
		return c.rekeyTenant(ctx, tx, name)
	})
	if err != nil {
		if se := (*SettingError)(nil); errors.As(err, &se) {
			return Tenant{}, err
		}
		return Tenant{}, fmt.Errorf("batchq: set tenant %q: %w", name, err)
	}
	c.settingsChanged(ctx, func(tx pgx.Tx) error { return c.rekeyTenant(ctx, tx, name) })
	return next, nil
}

// Tenants returns every tenant with settings, by name.
func (c *Client) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := c.q.ListTenants(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("batchq: list tenants: %w", err)
	}
	out := make([]Tenant, len(rows))
	for i, r := range rows {
		out[i] = Tenant{Name: r.Name, Weight: r.Weight}
		if r.MaxQueued != nil {
			out[i].MaxQueued = int(*r.MaxQueued)
		}
	}
	return out, nil
}

// NameRule is the rule name breaks as a tenant's, kind's, unique key's or
// worker's name (1-256 bytes of UTF-8, no control characters), "" for none.
func NameRule(name string) string {
	if err := checkName("name", name); err != nil {
		return err.Rule
	}
	return ""
}

// checkName applies the rules every tenant, kind and key follows.
func checkName(field, s string) *InvalidJobError {
	switch {
	case s == "":
		return &InvalidJobError{Field: field, Rule: "must not be empty"}
	case len(s) > MaxNameBytes:
		return &InvalidJobError{Field: field, Rule: fmt.Sprintf("must be at most %d bytes (got %d)", MaxNameBytes, len(s))}
	case !utf8.ValidString(s):
		return &InvalidJobError{Field: field, Rule: "must be valid UTF-8"}
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return &InvalidJobError{Field: field, Rule: "must not contain control characters (got " + quote(s) + ")"}
		}
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
