package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// The reports read the views and the function of migrations/00004_reports.sql,
// the same ones analysts query in plain SQL (see README.md, "Reports in SQL").

// BacklogRow is what one tenant has waiting and running in one queue.
type BacklogRow struct {
	Queue        string
	Tenant       string
	QueuedJobs   int64
	QueuedTokens int64 // estimated cost of the queued jobs
	// OldestQueuedAt is when the oldest queued job was enqueued, and
	// OldestQueuedAge how long ago that was; nil with no queued job.
	OldestQueuedAt  *time.Time
	OldestQueuedAge *time.Duration
	RunningJobs     int64
	RetryingJobs    int64 // waiting for their backoff before they rejoin the queue
	// NearestDeadline is the earliest deadline of the waiting (queued,
	// retrying and scheduled) jobs; nil when none waits.
	NearestDeadline *time.Time
	// Paused reports whether the queue is paused (PauseQueue): its workers
	// claim nothing until it is resumed.
	Paused bool
	// ScheduledJobs wait for their run-at, outside the fair order, and
	// NextRunAt is the earliest run-at among them (nil with none).
	ScheduledJobs int64
	NextRunAt     *time.Time
}

// Backlog returns what each tenant has waiting and running, by queue and
// tenant: of one queue, or of all when queue is "". It reads every
// unfinished job of the queues it reports on.
func (c *Client) Backlog(ctx context.Context, queue string) ([]BacklogRow, error) {
	rows, err := c.q.Backlog(ctx, c.pool, optional(queue))
	if err != nil {
		return nil, fmt.Errorf("batchq: backlog report: %w", err)
	}
	out := make([]BacklogRow, len(rows))
	for i, r := range rows {
		out[i] = BacklogRow(r)
	}
	return out, nil
}

// TenantUsageRow is one tenant's use of one queue in a time window: the jobs
// that finished in it.
type TenantUsageRow struct {
	Queue  string
	Tenant string
	// Jobs counts every outcome; the five after it count each kind.
	Jobs, Succeeded, Failed, Expired, Cancelled, Discarded int64
	// Tokens by outcome: succeeded jobs at their actual cost (the estimate
	// when none was reported), the others at their estimate.
	SucceededTokens, FailedTokens, ExpiredTokens, CancelledTokens, DiscardedTokens int64
	// ActualTokens sums the actual costs completions reported.
	ActualTokens int64
	// ServedTokens is what the scheduler charged the tenant: every attempt
	// of a job at its estimate, the last attempt of a succeeded job at its
	// actual cost where reported (a job that went while queued is refunded).
	ServedTokens int64
	// WaitP50 and WaitP95 are percentiles of the wait from enqueue to first
	// claim of the jobs that were claimed; nil when none was.
	WaitP50, WaitP95 *time.Duration
	// Weight is the tenant's weight now (1 when it has no settings).
	Weight float64
	// TokenShare is the tenant's part of the queue's served tokens in the
	// window (0 when the queue served none); WeightShare its weight's part of
	// the weights of the tenants with outcomes in the queue in the window. A
	// fair queue under contention keeps them close.
	TokenShare, WeightShare float64
}

// TenantUsage returns, per queue and tenant, the use made of each queue by
// the jobs that finished in [since, until): of one queue, or of all when
// queue is "". A since not before until is refused with an
// *InvalidJobError (field "since").
func (c *Client) TenantUsage(ctx context.Context, since, until time.Time, queue string) ([]TenantUsageRow, error) {
	rows, err := c.q.TenantUsage(ctx, c.pool, dbsqlc.TenantUsageParams{Since: since, Until: until, Queue: optional(queue)})
	if r := refusal(err); r != nil {
		return nil, r
	}
	if err != nil {
		return nil, fmt.Errorf("batchq: tenant usage report: %w", err)
	}
	out := make([]TenantUsageRow, len(rows))
	for i, r := range rows {
		out[i] = TenantUsageRow{
			Queue: deref(r.Queue), Tenant: deref(r.Tenant),
			Jobs: deref(r.Jobs), Succeeded: deref(r.Succeeded), Failed: deref(r.Failed),
			Expired: deref(r.Expired), Cancelled: deref(r.Cancelled), Discarded: deref(r.Discarded),
			SucceededTokens: deref(r.SucceededTokens), FailedTokens: deref(r.FailedTokens),
			ExpiredTokens: deref(r.ExpiredTokens), CancelledTokens: deref(r.CancelledTokens),
			DiscardedTokens: deref(r.DiscardedTokens),
			ActualTokens:    deref(r.ActualTokens), ServedTokens: deref(r.ServedTokens),
			WaitP50: r.WaitP50, WaitP95: r.WaitP95,
			Weight: r.Weight.Float64, TokenShare: r.TokenShare.Float64, WeightShare: r.WeightShare.Float64,
		}
	}
	return out, nil
}

// AuditRow is one finished job: its outcome row with durations.
type AuditRow struct {
	JobID          int64
	Queue          string
	Tenant         string
	Kind           string
	Outcome        string // succeeded, failed, expired, cancelled or discarded
	Attempts       int
	MaxAttempts    int
	EstimatedCost  int64
	ActualCost     *int64 // as the completion reported it; nil when it did not
	EnqueuedAt     time.Time
	FirstClaimedAt *time.Time // nil for a job never claimed
	FinishedAt     time.Time
	Deadline       time.Time
	// Wait is from enqueue to first claim, Run from first claim to finish
	// (every attempt, and the backoffs between them): nil for a job never
	// claimed. Total is from enqueue to finish.
	Wait, Run *time.Duration
	Total     time.Duration
	Worker    string
	Error     string
	UniqueKey string
	// RunAt is the run-at of a job that finished while still scheduled
	// (cancelled, or expired, before it came due): nil for every other.
	RunAt *time.Time
}

// OutcomesOpts selects outcomes. nil means defaults.
type OutcomesOpts struct {
	// Queue, Tenant and Outcome, when set, keep only the outcomes that match.
	Queue, Tenant, Outcome string
	// Since and Until bound the finishing time: [Since, Until). Zero Since:
	// from the beginning; zero Until: up to now and beyond. A window lets the
	// query read only its part of the outcomes, which matters at millions.
	Since, Until time.Time
	// Limit is the most rows to return, newest first. 0: 100.
	Limit int
}

// Outcomes returns finished jobs, newest first: the audit trail.
func (c *Client) Outcomes(ctx context.Context, opts *OutcomesOpts) ([]AuditRow, error) {
	var o OutcomesOpts
	if opts != nil {
		o = *opts
	}
	if o.Limit <= 0 {
		o.Limit = 100
	}
	if o.Until.IsZero() {
		o.Until = endOfTime
	}
	rows, err := c.q.Audit(ctx, c.pool, dbsqlc.AuditParams{
		Since: o.Since, Until: o.Until, Queue: optional(o.Queue), Tenant: optional(o.Tenant),
		Outcome: optional(o.Outcome), MaxRows: int32(min(o.Limit, 1<<31-1)),
	})
	if err != nil {
		return nil, fmt.Errorf("batchq: outcomes report: %w", err)
	}
	out := make([]AuditRow, len(rows))
	for i, r := range rows {
		out[i] = auditRow(r)
	}
	return out, nil
}

// auditRow is one row of batchq.audit as the reports return it.
func auditRow(r dbsqlc.BatchqAudit) AuditRow {
	return AuditRow{
		JobID: r.JobID, Queue: r.Queue, Tenant: r.Tenant, Kind: r.Kind, Outcome: string(r.Outcome),
		Attempts: int(r.Attempts), MaxAttempts: int(r.MaxAttempts), EstimatedCost: r.EstimatedCost,
		ActualCost: r.ActualCost, EnqueuedAt: r.EnqueuedAt, FirstClaimedAt: r.FirstClaimedAt,
		FinishedAt: r.FinishedAt, Deadline: r.Deadline, Wait: r.Wait, Run: r.Run, Total: r.Total,
		Worker: deref(r.Worker), Error: deref(r.Error), UniqueKey: deref(r.UniqueKey), RunAt: r.RunAt,
	}
}

// endOfTime is later than any outcome: the open end of a window.
var endOfTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// QuotaRow is the fleet's shared throttle state for one quota key, as the
// last response from the provider left it. Nil fields are not known.
type QuotaRow struct {
	Key                              string
	RequestsLimit, RequestsRemaining *int64
	RequestsResetAt                  *time.Time
	TokensLimit, TokensRemaining     *int64
	TokensResetAt                    *time.Time
	PausedUntil                      *time.Time // after a 429: nothing is sent before it
	ObservedAt                       *time.Time // when the provider's headers were read
	UpdatedAt                        time.Time
}

// Quota returns the shared quota state of every quota key, by key.
func (c *Client) Quota(ctx context.Context) ([]QuotaRow, error) {
	rows, err := c.q.QuotaReport(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("batchq: quota report: %w", err)
	}
	out := make([]QuotaRow, len(rows))
	for i, r := range rows {
		out[i] = QuotaRow(r)
	}
	return out, nil
}

// pruneBatch bounds the outcomes one prune statement deletes, so pruning
// never holds many row locks or bloats one transaction.
const pruneBatch = 10000

// Prune deletes the outcomes that finished more than olderThan ago and
// returns how many it deleted. It is PruneBefore(ctx, time.Now().Add(-olderThan)).
func (c *Client) Prune(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, &SettingError{"older_than", fmt.Sprintf("must be >= 0 (got %s)", olderThan)}
	}
	return c.PruneBefore(ctx, time.Now().Add(-olderThan))
}

// PruneBefore deletes the outcomes that finished before t, in batches of
// their own transactions, and returns how many it deleted. On an error it
// returns how many it had deleted by then; the batches before stay deleted.
// It keeps an outcome whose unique key still deduplicates enqueues (it
// finished within its queue's UniqueFor), whatever t is.
func (c *Client) PruneBefore(ctx context.Context, t time.Time) (int64, error) {
	last, err := c.q.PruneBound(ctx, c.pool, t)
	if err != nil {
		return 0, fmt.Errorf("batchq: prune: %w", err)
	}
	var deleted int64
	var after int64
	// One statement at least, which deletes nothing when nothing is old
	// enough: a role that may not delete outcomes (a prune run by cron as
	// the operator) is refused now, not once something is.
	for first := true; first || after < last; first = false {
		r, err := c.q.PruneOutcomes(ctx, c.pool, dbsqlc.PruneOutcomesParams{
			After: after, Last: last, Before: t, MaxRows: pruneBatch,
		})
		if err != nil {
			return deleted, fmt.Errorf("batchq: prune: %w", err)
		}
		deleted += r.Deleted
		// The time index's summaries of the pages emptied start afresh, so
		// outcomes written there later do not make them span all the time
		// between (see ResetOutcomeRanges).
		if len(r.Blocks) > 0 {
			if err := c.q.ResetOutcomeRanges(ctx, c.pool, r.Blocks); err != nil {
				return deleted, fmt.Errorf("batchq: prune: reset the time index: %w", err)
			}
		}
		if r.Found < pruneBatch {
			break
		}
		after = r.LastID
	}
	return deleted, nil
}

// optional turns "" into NULL for a query's optional filter.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
