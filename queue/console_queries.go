package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/internal/together"
)

// The reads of the web console (package console), over the same views and
// outcome columns the reports read (db/queries/console.sql), so a console
// connected as the app role works as well as one connected as the owner.

// ExactCountLimit bounds how many queued jobs the console's reads count one
// by one, for a queue or for a tenant. Beyond it they give the span of the
// fair order's ledger instead (batchq.console_backlog), an upper bound that
// costs one index probe per tenant however many jobs wait.
const ExactCountLimit = 100_000

// QueueSummary is what one queue holds now.
type QueueSummary struct {
	Name     string
	PausedAt *time.Time // nil while the queue runs
	// QueuedJobs is counted when QueuedExact; otherwise (more than
	// ExactCountLimit) it is the ledger's span, which also counts the jobs
	// that expired or were cancelled from inside a tenant's backlog since it
	// joined the ring: an upper bound.
	QueuedJobs  int64
	QueuedExact bool
	// QueuedTokens is exact: the fair order's ledger.
	QueuedTokens int64
	RunningJobs  int64
	// ScheduledJobs wait for a time before they join the queue: a run-at
	// not reached yet, or a retry's backoff. They are scheduled, not queued.
	ScheduledJobs  int64
	OldestQueuedAt *time.Time // nil with no queued job
}

// QueueSummaries returns every queue with what it holds now, by name. It
// reads the fair order's ledger, one index probe per tenant with queued
// jobs, and counts, in one statement, the queued jobs of the queues that
// add up to at most ExactCountLimit.
func (c *Client) QueueSummaries(ctx context.Context) ([]QueueSummary, error) {
	rows, err := c.q.ConsoleQueues(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("batchq: queue summaries: %w", err)
	}
	out := make([]QueueSummary, len(rows))
	budget := int64(ExactCountLimit) // jobs counted one by one, over all queues
	var counted []string
	at := map[string]int{}
	for i, r := range rows {
		out[i] = QueueSummary{
			Name: r.Name, PausedAt: r.PausedAt, QueuedJobs: r.QueuedSpan, QueuedTokens: r.QueuedTokens,
			RunningJobs: r.RunningJobs, ScheduledJobs: r.ScheduledJobs, OldestQueuedAt: unlessEpoch(r.OldestQueuedAt),
		}
		if r.QueuedSpan == 0 {
			out[i].QueuedExact = true
			continue
		}
		if r.QueuedSpan > budget {
			continue
		}
		budget -= r.QueuedSpan
		counted, at[r.Name] = append(counted, r.Name), i
	}
	if len(counted) == 0 {
		return out, nil
	}
	// The queues within the budget, counted in one statement.
	n, err := c.q.ConsoleQueuedInQueues(ctx, c.pool, dbsqlc.ConsoleQueuedInQueuesParams{Queues: counted, MaxCount: ExactCountLimit + 1})
	if err != nil {
		return nil, fmt.Errorf("batchq: count the queued jobs: %w", err)
	}
	for _, r := range n {
		out[at[r.Queue]].QueuedJobs, out[at[r.Queue]].QueuedExact = r.QueuedJobs, true
	}
	return out, nil
}

// queuedJobs counts the queued jobs of some tenants of a queue, up to
// ExactCountLimit+1 each.
func (c *Client) queuedJobs(ctx context.Context, queue string, tenants []string) (map[string]int64, error) {
	rows, err := c.q.ConsoleQueued(ctx, c.pool, dbsqlc.ConsoleQueuedParams{Queue: queue, Tenants: tenants, MaxCount: ExactCountLimit + 1})
	if r := refusal(err); r != nil {
		return nil, r
	}
	if err != nil {
		return nil, fmt.Errorf("batchq: count the queued jobs of %s: %w", quote(queue), err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Tenant] = r.QueuedJobs
	}
	return out, nil
}

// OutcomeCount is how many jobs of a queue finished with one outcome.
type OutcomeCount struct {
	Queue, Outcome string
	Jobs           int64
}

// OutcomeCounts counts the jobs that finished in [since, until) by queue and
// outcome; of one tenant when tenant is not "".
func (c *Client) OutcomeCounts(ctx context.Context, since, until time.Time, tenant string) ([]OutcomeCount, error) {
	var out []OutcomeCount
	if tenant == "" {
		rows, err := c.q.ConsoleOutcomeCounts(ctx, c.pool, dbsqlc.ConsoleOutcomeCountsParams{Since: since, Until: until})
		if err != nil {
			return nil, fmt.Errorf("batchq: outcome counts: %w", err)
		}
		for _, r := range rows {
			out = append(out, OutcomeCount{Queue: r.Queue, Outcome: r.Outcome, Jobs: r.Jobs})
		}
		return out, nil
	}
	rows, err := c.q.ConsoleTenantOutcomeCounts(ctx, c.pool, dbsqlc.ConsoleTenantOutcomeCountsParams{Tenant: tenant, Since: since, Until: until})
	if err != nil {
		return nil, fmt.Errorf("batchq: outcome counts of %s: %w", quote(tenant), err)
	}
	for _, r := range rows {
		out = append(out, OutcomeCount{Queue: r.Queue, Outcome: r.Outcome, Jobs: r.Jobs})
	}
	return out, nil
}

// TenantShareRow is one tenant's backlog in a queue now and its use of the
// queue in a window, or, with Tenant "", the sum of the tenants beyond the
// top ones (Tenants of them).
type TenantShareRow struct {
	Tenant  string // "": the others, summed
	Tenants int64  // how many tenants the row sums: 1 for a named tenant
	// QueuedJobs is counted when QueuedExact, else the ledger's upper bound
	// (see QueueSummary); QueuedTokens is exact.
	QueuedJobs                               int64
	QueuedExact                              bool
	QueuedTokens, RunningJobs, ScheduledJobs int64
	OldestQueuedAt                           *time.Time
	// FinishedJobs and ServedTokens are of the jobs that finished in the
	// window, counted as TenantUsage counts them.
	FinishedJobs, ServedTokens int64
	// TokenShare and WeightShare are as TenantUsage's: the tenant's part of
	// the queue's served tokens in the window, and its weight's part of the
	// weights of the tenants with outcomes in the window (0 for a tenant
	// without); summed for the others.
	TokenShare, WeightShare float64
	// WaitP50 and WaitP95 are of a named tenant's jobs claimed in the window;
	// nil for none, and for the others.
	WaitP50, WaitP95 *time.Duration
	// Weight is a named tenant's weight in the queue now; 0 for the others.
	Weight float64
}

// TenantShares returns one queue's tenants with their backlog now and their
// use of the queue by the jobs that finished in [since, until): the top
// tenants by queued tokens (then by served tokens, then by name) one row
// each, the rest summed in a last row with Tenant "". Its queries read the
// fair order's ledger (one index probe per tenant with queued jobs), the
// window's outcomes once, and the top tenants' queued jobs, so their time
// grows with the tenants and the window, not with the backlog. It returns
// ErrUnknownQueue for no such queue.
func (c *Client) TenantShares(ctx context.Context, queue string, since, until time.Time, top int) ([]TenantShareRow, error) {
	if top < 1 {
		return nil, &SettingError{"top", fmt.Sprintf("must be at least 1 (got %d)", top)}
	}
	if !queueName.MatchString(queue) {
		return nil, unknownQueue(queue)
	}
	// The backlog and the window's usage are independent: read them at once.
	var (
		backlog []dbsqlc.ConsoleBacklogRow
		usage   []WindowUsageRow
	)
	err := together.All(
		func() (err error) {
			backlog, err = c.q.ConsoleBacklog(ctx, c.pool, dbsqlc.ConsoleBacklogParams{Queue: queue})
			if r := refusal(err); r != nil {
				return r
			}
			if err != nil {
				err = fmt.Errorf("batchq: backlog of %s: %w", quote(queue), err)
			}
			return err
		},
		func() (err error) { usage, err = c.WindowUsage(ctx, queue, since, until); return err },
	)
	if err != nil {
		return nil, err
	}

	rows := map[string]*TenantShareRow{}
	spans := map[string]int64{}
	row := func(t string) *TenantShareRow {
		r, ok := rows[t]
		if !ok {
			r = &TenantShareRow{Tenant: t, Tenants: 1}
			rows[t] = r
		}
		return r
	}
	for _, b := range backlog {
		r := row(b.Tenant)
		r.QueuedJobs, r.QueuedTokens, r.RunningJobs, r.ScheduledJobs = b.QueuedSpan, b.QueuedTokens, b.RunningJobs, b.ScheduledJobs
		r.OldestQueuedAt = unlessEpoch(b.OldestQueuedAt)
		spans[b.Tenant] = b.QueuedSpan
	}
	for _, u := range usage {
		r := row(u.Tenant)
		r.FinishedJobs, r.ServedTokens, r.Weight, r.TokenShare, r.WeightShare = u.Jobs, u.ServedTokens, u.Weight, u.TokenShare, u.WeightShare
	}

	all := make([]*TenantShareRow, 0, len(rows))
	for _, r := range rows {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *TenantShareRow) int {
		return cmp.Or(cmp.Compare(b.QueuedTokens, a.QueuedTokens), cmp.Compare(b.ServedTokens, a.ServedTokens),
			strings.Compare(a.Tenant, b.Tenant))
	})
	named, rest := all[:min(top, len(all))], all[min(top, len(all)):]
	names := make([]string, len(named))
	for i, r := range named {
		names[i] = r.Tenant
	}

	// The named tenants' queued jobs, counted; their waits; the weights of
	// those without outcomes in the window: three reads at once.
	var (
		counts  map[string]int64
		waits   []dbsqlc.ConsoleWaitsRow
		weights []dbsqlc.ConsoleWeightsRow
	)
	err = together.All(
		func() (err error) { counts, err = c.queuedJobs(ctx, queue, names); return err },
		func() (err error) {
			waits, err = c.q.ConsoleWaits(ctx, c.pool, dbsqlc.ConsoleWaitsParams{Tenants: names, Queue: queue, Since: since, Until: until})
			if err != nil {
				err = fmt.Errorf("batchq: waits in %s: %w", quote(queue), err)
			}
			return err
		},
		func() (err error) {
			weights, err = c.q.ConsoleWeights(ctx, c.pool, dbsqlc.ConsoleWeightsParams{Tenants: names, Queue: queue})
			if err != nil {
				err = fmt.Errorf("batchq: weights in %s: %w", quote(queue), err)
			}
			return err
		},
	)
	if err != nil {
		return nil, err
	}
	for _, r := range named {
		if n, ok := counts[r.Tenant]; ok && n <= ExactCountLimit {
			r.QueuedJobs, r.QueuedExact = n, true
		} else if !ok {
			r.QueuedJobs, r.QueuedExact = 0, true
		}
	}
	for _, w := range waits {
		rows[w.Tenant].WaitP50, rows[w.Tenant].WaitP95 = unlessNegative(w.WaitP50), unlessNegative(w.WaitP95)
	}
	for _, w := range weights {
		rows[w.Tenant].Weight = w.Weight
	}

	out := make([]TenantShareRow, 0, len(named)+1)
	for _, r := range named {
		out = append(out, *r)
	}
	if len(rest) == 0 {
		return out, nil
	}
	others := TenantShareRow{Tenants: int64(len(rest)), QueuedExact: true}
	var span int64
	var restNames []string
	for _, r := range rest {
		others.QueuedJobs += r.QueuedJobs
		others.QueuedTokens += r.QueuedTokens
		others.RunningJobs += r.RunningJobs
		others.ScheduledJobs += r.ScheduledJobs
		others.FinishedJobs += r.FinishedJobs
		others.ServedTokens += r.ServedTokens
		others.TokenShare += r.TokenShare
		others.WeightShare += r.WeightShare
		if r.OldestQueuedAt != nil && (others.OldestQueuedAt == nil || r.OldestQueuedAt.Before(*others.OldestQueuedAt)) {
			others.OldestQueuedAt = r.OldestQueuedAt
		}
		if spans[r.Tenant] > 0 {
			span += spans[r.Tenant]
			restNames = append(restNames, r.Tenant)
		}
	}
	if span > ExactCountLimit {
		others.QueuedExact = false
	} else if span > 0 {
		n, err := c.queuedJobs(ctx, queue, restNames)
		if err != nil {
			return nil, err
		}
		others.QueuedJobs = 0
		for _, k := range n {
			others.QueuedJobs += k
		}
	}
	return append(out, others), nil
}

// WindowUsageRow is one tenant's use of a queue by the jobs that finished
// in a window, with its shares as TenantUsage computes them.
type WindowUsageRow struct {
	Tenant                  string
	Jobs, ServedTokens      int64
	Weight                  float64 // in the queue, now
	TokenShare, WeightShare float64
}

// WindowUsage returns each tenant's use of one queue by the jobs that
// finished in [since, until): how many, the tokens served (as TenantUsage
// counts them), its weight in the queue now, its part of the tokens served
// and its weight's part of the weights of the tenants with outcomes. One
// pass over the window's outcomes, without TenantUsage's percentiles.
func (c *Client) WindowUsage(ctx context.Context, queue string, since, until time.Time) ([]WindowUsageRow, error) {
	rows, err := c.q.ConsoleUsage(ctx, c.pool, dbsqlc.ConsoleUsageParams{Queue: queue, Since: since, Until: until})
	if err != nil {
		return nil, fmt.Errorf("batchq: usage of %s: %w", quote(queue), err)
	}
	// Weights relative to the largest, so they add up without overflow, as
	// batchq.tenant_usage does.
	var served int64
	var maxWeight, rel float64
	for _, u := range rows {
		served += u.ServedTokens
		maxWeight = max(maxWeight, u.Weight)
	}
	for _, u := range rows {
		rel += u.Weight / maxWeight
	}
	out := make([]WindowUsageRow, len(rows))
	for i, u := range rows {
		out[i] = WindowUsageRow{Tenant: u.Tenant, Jobs: u.Jobs, ServedTokens: u.ServedTokens, Weight: u.Weight,
			WeightShare: u.Weight / maxWeight / rel}
		if served > 0 {
			out[i].TokenShare = float64(u.ServedTokens) / float64(served)
		}
	}
	return out, nil
}

// ShareSample is the tokens a queue served a tenant in one step of a window.
type ShareSample struct {
	Step   int    // 0 starts at the window's start
	Tenant string // "": the tenants beyond the top ones, summed
	Tokens int64
}

// ServedTokens returns the tokens one queue served in [since, until), by
// step (counted at the jobs' finish, as TenantUsage counts served tokens):
// for each of tenants, and for the rest summed under Tenant "". Steps that
// served nothing are left out.
func (c *Client) ServedTokens(ctx context.Context, queue string, since, until time.Time, step time.Duration, tenants []string) ([]ShareSample, error) {
	if step <= 0 {
		return nil, &SettingError{"step", fmt.Sprintf("must be positive (got %s)", step)}
	}
	// Distinct names: the query joins them to the outcomes, once each.
	lines, seen := make([]string, 0, len(tenants)), make(map[string]bool, len(tenants))
	for _, t := range tenants {
		if !seen[t] {
			lines, seen[t] = append(lines, t), true
		}
	}
	rows, err := c.q.ConsoleShares(ctx, c.pool, dbsqlc.ConsoleSharesParams{
		Queue: queue, Since: since, Until: until, StepSeconds: step.Seconds(), Tenants: lines,
	})
	if err != nil {
		return nil, fmt.Errorf("batchq: served tokens of %s: %w", quote(queue), err)
	}
	out := make([]ShareSample, len(rows))
	for i, r := range rows {
		out[i] = ShareSample{Step: int(r.Step), Tenant: r.Tenant, Tokens: r.Tokens}
	}
	return out, nil
}

// TenantBacklog returns what one tenant has waiting and running in one
// queue now, as a BacklogRow (without Paused and NearestDeadline), and
// whether QueuedJobs was counted (up to ExactCountLimit) rather than taken
// from the ledger's span, an upper bound. QueuedTokens is exact. It
// returns ErrUnknownQueue for no such queue.
func (c *Client) TenantBacklog(ctx context.Context, queue, tenant string) (BacklogRow, bool, error) {
	if !queueName.MatchString(queue) {
		return BacklogRow{}, false, unknownQueue(queue)
	}
	rows, err := c.q.ConsoleBacklog(ctx, c.pool, dbsqlc.ConsoleBacklogParams{Queue: queue, Tenant: &tenant})
	if r := refusal(err); r != nil {
		return BacklogRow{}, false, r
	}
	if err != nil {
		return BacklogRow{}, false, fmt.Errorf("batchq: backlog of %s in %s: %w", quote(tenant), quote(queue), err)
	}
	out := BacklogRow{Queue: queue, Tenant: tenant}
	if len(rows) == 0 {
		return out, true, nil
	}
	r := rows[0]
	out.QueuedJobs, out.QueuedTokens, out.RunningJobs, out.ScheduledJobs = r.QueuedSpan, r.QueuedTokens, r.RunningJobs, r.ScheduledJobs
	out.OldestQueuedAt = unlessEpoch(r.OldestQueuedAt)
	if out.QueuedJobs == 0 {
		return out, true, nil
	}
	n, err := c.queuedJobs(ctx, queue, []string{tenant})
	if err != nil {
		return BacklogRow{}, false, err
	}
	if n[tenant] > ExactCountLimit {
		return out, false, nil
	}
	out.QueuedJobs = n[tenant]
	return out, true, nil
}

// TenantInQueue is a tenant's settings as they apply in one queue.
type TenantInQueue struct {
	// QueueWeight and QueueMaxQueued are its own for the queue
	// (UpdateQueueTenant); 0 where it has none.
	QueueWeight    float64
	QueueMaxQueued int
	// Weight and MaxQueued are its own for every queue (UpdateTenant);
	// Weight is 1 and MaxQueued 0 when it has none.
	Weight    float64
	MaxQueued int
	// QueueBound is the queue's MaxPerTenant.
	QueueBound int
}

// EffectiveWeight is the weight the queue schedules the tenant with.
func (t TenantInQueue) EffectiveWeight() float64 {
	if t.QueueWeight != 0 {
		return t.QueueWeight
	}
	return t.Weight
}

// EffectiveBound is the most queued jobs the queue takes from the tenant.
func (t TenantInQueue) EffectiveBound() int {
	switch {
	case t.QueueMaxQueued != 0:
		return t.QueueMaxQueued
	case t.MaxQueued != 0:
		return t.MaxQueued
	}
	return t.QueueBound
}

// TenantInQueueSettings returns a tenant's settings as they apply in one
// queue. It returns ErrUnknownQueue for no such queue, a *SettingError for a
// name no tenant could have (as UpdateQueueTenant does), and
// ErrUnknownTenant for a tenant the queue knows nothing of.
func (c *Client) TenantInQueueSettings(ctx context.Context, queue, tenant string) (TenantInQueue, error) {
	if !queueName.MatchString(queue) {
		return TenantInQueue{}, unknownQueue(queue)
	}
	if err := checkName("tenant", tenant); err != nil {
		return TenantInQueue{}, &SettingError{err.Field, err.Rule}
	}
	r, err := c.q.ConsoleTenantSettings(ctx, c.pool, dbsqlc.ConsoleTenantSettingsParams{Queue: queue, Tenant: tenant})
	if errors.Is(err, pgx.ErrNoRows) {
		return TenantInQueue{}, unknownQueue(queue)
	}
	if err != nil {
		return TenantInQueue{}, fmt.Errorf("batchq: settings of %s in %s: %w", quote(tenant), quote(queue), err)
	}
	if !r.Known {
		return TenantInQueue{}, fmt.Errorf("%w: %s in queue %s", ErrUnknownTenant, quote(tenant), quote(queue))
	}
	t := TenantInQueue{Weight: 1, QueueBound: int(r.MaxPerTenant)}
	if r.QueueWeight.Valid {
		t.QueueWeight = r.QueueWeight.Float64
	}
	if r.QueueMaxQueued != nil {
		t.QueueMaxQueued = int(*r.QueueMaxQueued)
	}
	if r.TenantWeight.Valid {
		t.Weight = r.TenantWeight.Float64
	}
	if r.TenantMaxQueued != nil {
		t.MaxQueued = int(*r.TenantMaxQueued)
	}
	return t, nil
}

// ReadPrivileges says what the client's database role may read beyond the
// reports, and which operator controls it may call (docs/sql-api.md#roles).
// The controls' fields ask for what each call needs; a privilege taken
// away in a way they do not look at (a column's, a lock's) still refuses
// the call.
type ReadPrivileges struct {
	Jobs     bool // the unfinished jobs whole (JobInfo of an unfinished job)
	Payloads bool // the outcomes' payloads
	Results  bool // the outcomes' results
	Cancel   bool // CountJobs and CancelJobs
	Pause    bool // PauseQueue and ResumeQueue
	Settings bool // UpdateQueueTenant and UpdateTenant
	Retry    bool // RetryNow and Resubmit
}

// Privileges returns what the client's database role may read.
func (c *Client) Privileges(ctx context.Context) (ReadPrivileges, error) {
	r, err := c.q.ConsolePrivileges(ctx, c.pool)
	if err != nil {
		return ReadPrivileges{}, fmt.Errorf("batchq: privileges: %w", err)
	}
	return ReadPrivileges{Jobs: r.Jobs, Payloads: r.Payloads, Results: r.Results, Cancel: r.Cancel,
		Pause: r.Pause, Settings: r.Settings, Retry: r.Retry}, nil
}

// Outcome returns one finished job's outcome without its payload or result,
// which a role that may read only the reports can read too. It returns
// ErrNotFound when id names no outcome.
func (c *Client) Outcome(ctx context.Context, id int64) (AuditRow, error) {
	r, err := c.q.ConsoleAuditJob(ctx, c.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return AuditRow{}, fmt.Errorf("%w: no outcome of job %d", ErrNotFound, id)
	}
	if err != nil {
		return AuditRow{}, fmt.Errorf("batchq: outcome of job %d: %w", id, err)
	}
	return auditRow(r), nil
}

// RateLimitedCounts returns how many 429s each quota key received since
// since, by key: the pauses they set (save_quota records each). Keys
// without any are left out.
func (c *Client) RateLimitedCounts(ctx context.Context, since time.Time) (map[string]int64, error) {
	rows, err := c.q.ConsoleRateLimited(ctx, c.pool, since)
	if err != nil {
		return nil, fmt.Errorf("batchq: 429 counts: %w", err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Key] = r.Limited
	}
	return out, nil
}

// unlessEpoch is nil for the epoch, which db/queries/console.sql returns
// for a time that is missing, and t otherwise.
func unlessEpoch(t time.Time) *time.Time {
	if t.Unix() == 0 {
		return nil
	}
	return &t
}

// unlessNegative is nil for a negative duration, which
// db/queries/console.sql returns for a wait that is missing.
func unlessNegative(d time.Duration) *time.Duration {
	if d < 0 {
		return nil
	}
	return &d
}
