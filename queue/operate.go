package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// PauseQueue stops a queue's claims: its workers find nothing to claim until
// ResumeQueue, while enqueues go on, running jobs finish and maintenance
// runs. It reports whether the queue was running (false when it was paused
// already) and returns ErrUnknownQueue for no such queue.
func (c *Client) PauseQueue(ctx context.Context, name string) (changed bool, err error) {
	return c.pauseOrResume(ctx, name, c.q.PauseQueue, "pause")
}

// ResumeQueue lets a paused queue's workers claim again, and wakes them. It
// reports whether the queue was paused.
func (c *Client) ResumeQueue(ctx context.Context, name string) (changed bool, err error) {
	return c.pauseOrResume(ctx, name, c.q.ResumeQueue, "resume")
}

func (c *Client) pauseOrResume(ctx context.Context, name string, fn func(context.Context, dbsqlc.DBTX, string) (bool, error), what string) (bool, error) {
	if !queueName.MatchString(name) {
		return false, unknownQueue(name)
	}
	changed, err := fn(ctx, c.pool, name)
	if r := refusal(err); r != nil {
		return false, r
	}
	if err != nil {
		return false, fmt.Errorf("batchq: %s queue %s: %w", what, quote(name), err)
	}
	return changed, nil
}

// QueueNotEmptyError is returned by DeleteQueue for a queue that still holds
// unfinished jobs. Schedules is how many schedules the queue has: they may
// enqueue more jobs, and would be deleted with it.
type QueueNotEmptyError struct {
	Queue                                string
	Queued, Running, Retrying, Scheduled int64
	Schedules                            int64
}

func (e *QueueNotEmptyError) Error() string {
	// batchq.delete_queue (db/functions/operate.sql) words it the same.
	n := e.Queued + e.Running + e.Retrying + e.Scheduled
	jobs, them := "unfinished jobs", "them"
	if n == 1 {
		jobs, them = "unfinished job", "it"
	}
	msg := fmt.Sprintf("batchq: queue %s holds %d %s (%d queued, %d running, %d retrying, %d scheduled): "+
		"cancel %s (batchq jobs cancel --queue %s) or let %s finish first",
		quote(e.Queue), n, jobs, e.Queued, e.Running, e.Retrying, e.Scheduled, them, e.Queue, them)
	if e.Schedules > 0 {
		schedules, are := "schedules", "are"
		if e.Schedules == 1 {
			schedules, are = "schedule", "is"
		}
		msg += fmt.Sprintf("; it also has %d %s, which may enqueue more and %s deleted with it (batchq schedules list --queue %s)",
			e.Schedules, schedules, are, e.Queue)
	}
	return msg
}

// DeletedQueue says what went with a queue DeleteQueue deleted.
type DeletedQueue struct {
	// Schedules is how many of the queue's schedules were deleted with it.
	Schedules int64
}

// DeleteQueue deletes a queue that holds no unfinished job, with its
// settings, its fair order's state and its schedules, and says how many
// schedules went; its outcomes stay, as history. It returns a
// *QueueNotEmptyError, which says how many jobs and schedules the queue
// holds, for one that holds any job, and ErrUnknownQueue for no such queue.
func (c *Client) DeleteQueue(ctx context.Context, name string) (DeletedQueue, error) {
	if !queueName.MatchString(name) {
		return DeletedQueue{}, unknownQueue(name)
	}
	n, err := c.q.DeleteQueue(ctx, c.pool, name)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "BQ203" {
		var d struct{ Queued, Running, Retrying, Scheduled, Schedules int64 }
		_ = json.Unmarshal([]byte(pe.Detail), &d)
		return DeletedQueue{}, &QueueNotEmptyError{Queue: name, Queued: d.Queued, Running: d.Running, Retrying: d.Retrying,
			Scheduled: d.Scheduled, Schedules: d.Schedules}
	}
	if r := refusal(err); r != nil {
		return DeletedQueue{}, r
	}
	if err != nil {
		return DeletedQueue{}, fmt.Errorf("batchq: delete queue %s: %w", quote(name), err)
	}
	return DeletedQueue{Schedules: n}, nil
}

// JobFilter picks the unfinished jobs of a queue by what they are. Empty
// fields match every job.
type JobFilter struct {
	Queue  string // required
	Tenant string
	Kind   string
	// EnqueuedBefore and EnqueuedAfter keep jobs enqueued in
	// [EnqueuedAfter, EnqueuedBefore). With both set, a window that holds
	// no time (EnqueuedAfter not before EnqueuedBefore) is refused with an
	// *InvalidJobError: no job could match it.
	EnqueuedBefore, EnqueuedAfter time.Time
}

func (f JobFilter) params() (tenant, kind *string, before, after *time.Time) {
	if f.Tenant != "" {
		tenant = &f.Tenant
	}
	if f.Kind != "" {
		kind = &f.Kind
	}
	if !f.EnqueuedBefore.IsZero() {
		before = &f.EnqueuedBefore
	}
	if !f.EnqueuedAfter.IsZero() {
		after = &f.EnqueuedAfter
	}
	return tenant, kind, before, after
}

func (f JobFilter) check() error {
	if !queueName.MatchString(f.Queue) {
		return unknownQueue(f.Queue)
	}
	for _, n := range []struct{ field, s string }{{"tenant", f.Tenant}, {"kind", f.Kind}} {
		if n.s == "" {
			continue
		}
		if err := checkName(n.field, n.s); err != nil {
			return err
		}
	}
	return nil
}

// JobCount is how many unfinished jobs a filter matches, by state, and
// their estimated cost.
type JobCount struct {
	Queued, Running, Retrying, Scheduled int64
	Tokens                               int64
}

// Total is every job counted.
func (n JobCount) Total() int64 { return n.Queued + n.Running + n.Retrying + n.Scheduled }

// CountJobs counts the unfinished jobs f matches: what CancelJobs with f
// would cancel (queued, retrying and scheduled) or ask to stop (running),
// now.
func (c *Client) CountJobs(ctx context.Context, f JobFilter) (JobCount, error) {
	if err := f.check(); err != nil {
		return JobCount{}, err
	}
	tenant, kind, before, after := f.params()
	rows, err := c.q.MatchingJobs(ctx, c.pool, dbsqlc.MatchingJobsParams{
		Queue: f.Queue, Tenant: tenant, Kind: kind, EnqueuedBefore: before, EnqueuedAfter: after,
	})
	if r := refusal(err); r != nil {
		return JobCount{}, r
	}
	if err != nil {
		return JobCount{}, fmt.Errorf("batchq: count jobs of %s: %w", quote(f.Queue), err)
	}
	var n JobCount
	for _, r := range rows {
		switch r.State {
		case "queued":
			n.Queued = r.Jobs
		case "running":
			n.Running = r.Jobs
		case "retrying":
			n.Retrying = r.Jobs
		case "scheduled":
			n.Scheduled = r.Jobs
		}
		n.Tokens += r.Tokens
	}
	return n, nil
}

// CancelStats says what CancelJobs did.
type CancelStats struct {
	Cancelled int64 // waiting jobs finished as 'cancelled'
	// Stopping counts the running jobs this call asked to stop (see Cancel).
	// One asked already is not counted again, and keeps its first reason.
	Stopping int64
}

// cancelBatch is how many jobs one transaction of CancelJobs takes.
const cancelBatch = 1000

// CancelJobs cancels the unfinished jobs f matches, as Cancel cancels one:
// waiting jobs are finished as 'cancelled' (their cost leaves their
// tenant's ledger, and the fair order is re-keyed as for any removal),
// running ones are asked to stop, unless they were asked already: those keep
// the first request's time and reason. It walks the queue once, in id order, a
// transaction per thousand jobs, so a large import is cancelled without one
// long transaction; jobs enqueued while it walks may be left. What it did
// before an error stays done.
func (c *Client) CancelJobs(ctx context.Context, f JobFilter, reason string) (CancelStats, error) {
	var st CancelStats
	if err := f.check(); err != nil {
		return st, err
	}
	if reason == "" {
		reason = "cancelled"
	}
	tenant, kind, before, after := f.params()
	p := dbsqlc.CancelJobsParams{
		Queue: f.Queue, Tenant: tenant, Kind: kind, EnqueuedBefore: before, EnqueuedAfter: after,
		MaxJobs: cancelBatch, Reason: cleanText(reason, MaxReasonBytes),
	}
	for {
		r, err := c.q.CancelJobs(ctx, c.pool, p)
		if rf := refusal(err); rf != nil {
			return st, rf
		}
		if err != nil {
			return st, fmt.Errorf("batchq: cancel jobs of %s: %w", quote(f.Queue), err)
		}
		st.Cancelled += int64(r.Cancelled)
		st.Stopping += int64(r.Stopping)
		if r.LastID == 0 {
			break
		}
		p.AfterID = r.LastID
	}
	return st, nil
}

// QueueTenant is a tenant's settings in one queue, over its settings for
// every queue (Tenant).
type QueueTenant struct {
	Queue, Tenant string
	// Weight is the tenant's weight in the queue; 0: its weight for every
	// queue.
	Weight float64
	// MaxQueued bounds the tenant's queued jobs in the queue; 0: its bound
	// for every queue, else the queue's.
	MaxQueued int
}

// UpdateQueueTenant changes some of a tenant's settings for one queue only
// (nil fields stay as they are; a zero one goes back to the setting for
// every queue), creating them if it has none, and returns them. Settings
// left both zero are removed, as ClearQueueTenant removes them: the
// tenant's settings for every queue apply there, and no empty row is
// kept. A new weight takes effect from the tenant's next round in that
// queue.
func (c *Client) UpdateQueueTenant(ctx context.Context, queue, tenant string, u TenantUpdate) (QueueTenant, error) {
	if !queueName.MatchString(queue) {
		return QueueTenant{}, unknownQueue(queue)
	}
	if err := checkName("name", tenant); err != nil {
		return QueueTenant{}, &SettingError{err.Field, err.Rule}
	}
	next := QueueTenant{Queue: queue, Tenant: tenant}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		row, err := c.q.LockQueueTenant(ctx, tx, dbsqlc.LockQueueTenantParams{Queue: queue, Tenant: tenant})
		if errors.Is(err, pgx.ErrNoRows) {
			return unknownQueue(queue)
		}
		if err != nil {
			return err
		}
		c.pause("queue tenant held")
		if row.Weight.Valid {
			next.Weight = row.Weight.Float64
		}
		if row.MaxQueued != nil {
			next.MaxQueued = int(*row.MaxQueued)
		}
		if u.Weight != nil {
			next.Weight = *u.Weight
		}
		if u.MaxQueued != nil {
			next.MaxQueued = *u.MaxQueued
		}
		if next.Weight != 0 {
			if err := (Tenant{Name: tenant, Weight: next.Weight}).validate(); err != nil {
				return err
			}
		}
		if next.MaxQueued < 0 || next.MaxQueued > math.MaxInt32 {
			return &SettingError{"max_queued", fmt.Sprintf("must be in 0..%d, 0 meaning the tenant's bound for every queue (got %d)", math.MaxInt32, next.MaxQueued)}
		}
		if next.Weight == 0 && next.MaxQueued == 0 {
			if _, err := c.q.DeleteQueueTenant(ctx, tx, dbsqlc.DeleteQueueTenantParams{Queue: queue, Tenant: tenant}); err != nil {
				return err
			}
			return c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: queue, Tenants: []string{tenant}})
		}
		p := dbsqlc.UpdateQueueTenantParams{Queue: queue, Tenant: tenant}
		if next.Weight != 0 {
			p.Weight = pgtype.Float8{Float64: next.Weight, Valid: true}
		}
		if next.MaxQueued != 0 {
			b := int32(next.MaxQueued)
			p.MaxQueued = &b
		}
		if err := c.q.UpdateQueueTenant(ctx, tx, p); err != nil {
			return err
		}
		return c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: queue, Tenants: []string{tenant}})
	})
	if err != nil {
		var se *SettingError
		// No such queue is ErrUnknownQueue already: LockQueueTenant holds
		// the queue's row, so no insert meets its foreign key.
		if errors.As(err, &se) || errors.Is(err, ErrUnknownQueue) {
			return QueueTenant{}, err
		}
		return QueueTenant{}, fmt.Errorf("batchq: set tenant %s in queue %s: %w", quote(tenant), quote(queue), err)
	}
	c.settingsChanged(ctx, func(tx pgx.Tx) error {
		return c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: queue, Tenants: []string{tenant}})
	})
	return next, nil
}

// ClearQueueTenant removes a tenant's settings for one queue: its settings
// for every queue apply there again, from its next round. It reports
// whether there were any, and returns ErrUnknownQueue for no such queue and
// a *SettingError for a tenant name no tenant could have, as
// UpdateQueueTenant does.
func (c *Client) ClearQueueTenant(ctx context.Context, queue, tenant string) (bool, error) {
	if !queueName.MatchString(queue) {
		return false, unknownQueue(queue)
	}
	if err := checkName("name", tenant); err != nil {
		return false, &SettingError{err.Field, err.Rule}
	}
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var err error
		if n, err = c.q.DeleteQueueTenant(ctx, tx, dbsqlc.DeleteQueueTenantParams{Queue: queue, Tenant: tenant}); err != nil {
			return err
		}
		if n == 0 {
			// Nothing to clear: say so only of a queue that exists.
			if _, err := c.q.GetQueue(ctx, tx, queue); errors.Is(err, pgx.ErrNoRows) {
				return unknownQueue(queue)
			} else if err != nil {
				return err
			}
			return nil
		}
		return c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: queue, Tenants: []string{tenant}})
	})
	if errors.Is(err, ErrUnknownQueue) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("batchq: clear tenant %s in queue %s: %w", quote(tenant), quote(queue), err)
	}
	if n > 0 {
		c.settingsChanged(ctx, func(tx pgx.Tx) error {
			return c.q.Rekey(ctx, tx, dbsqlc.RekeyParams{Queue: queue, Tenants: []string{tenant}})
		})
	}
	return n > 0, nil
}

// QueueTenants returns every tenant's settings for one queue, by queue and
// tenant.
func (c *Client) QueueTenants(ctx context.Context) ([]QueueTenant, error) {
	rows, err := c.q.ListQueueTenants(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("batchq: list tenants' settings by queue: %w", err)
	}
	out := make([]QueueTenant, len(rows))
	for i, r := range rows {
		out[i] = QueueTenant{Queue: r.Queue, Tenant: r.Tenant}
		if r.Weight.Valid {
			out[i].Weight = r.Weight.Float64
		}
		if r.MaxQueued != nil {
			out[i].MaxQueued = int(*r.MaxQueued)
		}
	}
	return out, nil
}

func isForeignKeyViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}
