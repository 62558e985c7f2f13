package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// JobInfo is what batchq knows about a job by its id: an unfinished job's
// state, or a finished job's outcome.
type JobInfo struct {
	ID        int64
	Queue     string
	Tenant    string
	Kind      string
	Cost      int64 // estimated
	Deadline  time.Time
	UniqueKey string
	// Payload is the job's input. Outcomes keep it for jobs that did not
	// succeed (so they can be resubmitted); a succeeded job's is nil.
	Payload json.RawMessage
	// Finished tells an outcome from an unfinished job. State is queued,
	// running, retrying or scheduled for an unfinished job, and the outcome (succeeded,
	// failed, expired, cancelled, discarded) for a finished one.
	Finished bool
	State    string
	// Attempt is how many runs started (the running one included).
	Attempt     int
	MaxAttempts int
	// RunAfter is when a retrying or scheduled job joins its tenant's queue;
	// of a job that finished while still scheduled, its run-at (which
	// Resubmit counts its time to live from).
	RunAfter *time.Time
	// LeaseExpiresAt is when a running job may be rescued; Worker runs it
	// (or, for an outcome, ran it last).
	LeaseExpiresAt *time.Time
	Worker         string
	EnqueuedAt     time.Time
	FirstClaimedAt *time.Time
	FinishedAt     *time.Time
	// ActualCost is what a succeeded job's completion reported, if it did.
	ActualCost *int64
	// Error is the last failed attempt's error, or why the job finished
	// without success.
	Error string
	// Result is what a succeeded job's handler returned, if anything.
	Result json.RawMessage
	// CancelRequestedAt is when an operator asked a running job to stop
	// (Cancel); its run ends as 'cancelled' unless it succeeds first.
	CancelRequestedAt *time.Time
}

// JobInfo looks a job up by id: unfinished, or its outcome once finished. It
// returns ErrNotFound when neither exists (never enqueued, or its outcome was
// pruned).
func (c *Client) JobInfo(ctx context.Context, id int64) (JobInfo, error) {
	j, err := c.q.GetJob(ctx, c.pool, id)
	if err == nil {
		return JobInfo{
			ID: j.ID, Queue: j.Queue, Tenant: j.Tenant, Kind: j.Kind, Cost: j.Cost, Deadline: j.Deadline,
			UniqueKey: deref(j.UniqueKey), Payload: j.Payload, State: j.State, Attempt: int(j.Attempt),
			MaxAttempts: int(j.MaxAttempts), RunAfter: j.RunAfter, LeaseExpiresAt: j.LeaseExpiresAt,
			Worker: deref(j.Worker), EnqueuedAt: j.EnqueuedAt, FirstClaimedAt: j.FirstClaimedAt,
			Error: deref(j.LastError), CancelRequestedAt: j.CancelRequestedAt,
		}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return JobInfo{}, fmt.Errorf("batchq: job %d: %w", id, err)
	}
	// Finishing removes the job and writes its outcome in one transaction,
	// so a job that finished since the lookup above has its outcome now.
	o, err := c.q.GetOutcome(ctx, c.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return JobInfo{}, fmt.Errorf("%w: no job or outcome %d", ErrNotFound, id)
	}
	if err != nil {
		return JobInfo{}, fmt.Errorf("batchq: job %d: %w", id, err)
	}
	return jobInfoOfOutcome(o), nil
}

func jobInfoOfOutcome(o dbsqlc.BatchqOutcome) JobInfo {
	finished := o.FinishedAt
	return JobInfo{
		ID: o.JobID, Queue: o.Queue, Tenant: o.Tenant, Kind: o.Kind, Cost: o.EstimatedCost, Deadline: o.Deadline,
		UniqueKey: deref(o.UniqueKey), Payload: o.Payload, Finished: true, State: string(o.Outcome),
		Attempt: int(o.Attempts), MaxAttempts: int(o.MaxAttempts), Worker: deref(o.Worker),
		EnqueuedAt: o.EnqueuedAt, FirstClaimedAt: o.FirstClaimedAt, FinishedAt: &finished,
		ActualCost: o.ActualCost, Error: deref(o.Error), Result: o.Result, RunAfter: o.RunAt,
	}
}

// RetryNow makes a job that waits to retry, or waits for its run-at, due
// now: the next maintenance pass (Maintain, which workers run) moves it to
// its tenant's queue. It returns ErrNotFound when id names no retrying or
// scheduled job.
func (c *Client) RetryNow(ctx context.Context, id int64) error {
	_, err := c.q.RetryNow(ctx, c.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: no retrying or scheduled job %d", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("batchq: retry job %d now: %w", id, err)
	}
	return nil
}

// ResubmitKeyPrefix starts the unique key of a job Resubmit enqueues; the
// original job's id follows it.
const ResubmitKeyPrefix = "batchq:resubmit-of:"

// Resubmit enqueues a copy of a job that failed, was discarded, expired or
// was cancelled, from its outcome: same queue, tenant, kind, estimated cost,
// max attempts and payload, with the time to live it had (its deadline less
// its enqueue time, or less its run-at for a job that finished still
// scheduled) counted from now. The copy's unique key is ResubmitKeyPrefix and the
// original id, so resubmitting twice while the copy is unfinished (or within
// the queue's UniqueFor after it finished) returns the copy as a Duplicate
// instead of making another; the original's own unique key is not carried
// over. It returns ErrNotFound when id names no outcome, and an error for an
// outcome of another kind.
func (c *Client) Resubmit(ctx context.Context, id int64) (Enqueued, error) {
	o, err := c.q.GetOutcome(ctx, c.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Enqueued{}, fmt.Errorf("%w: no outcome of job %d (unfinished, never enqueued, or pruned)", ErrNotFound, id)
	}
	if err != nil {
		return Enqueued{}, fmt.Errorf("batchq: resubmit job %d: %w", id, err)
	}
	switch o.Outcome {
	case dbsqlc.BatchqJobOutcomeFailed, dbsqlc.BatchqJobOutcomeDiscarded, dbsqlc.BatchqJobOutcomeExpired,
		dbsqlc.BatchqJobOutcomeCancelled:
	default:
		return Enqueued{}, fmt.Errorf("batchq: resubmit job %d: it %s; only failed, discarded, expired or cancelled jobs are resubmitted", id, o.Outcome)
	}
	return c.Enqueue(ctx, NewJob{
		Queue:       o.Queue,
		Tenant:      o.Tenant,
		Kind:        o.Kind,
		Cost:        o.EstimatedCost,
		TTL:         resubmitTTL(o),
		MaxAttempts: int(o.MaxAttempts),
		Payload:     o.Payload,
		UniqueKey:   ResubmitKeyPrefix + strconv.FormatInt(id, 10),
	})
}

// resubmitTTL is the time to live a finished job had: from its run-at, for
// one that finished still scheduled (its wait was not part of it), else
// from when it was enqueued.
func resubmitTTL(o dbsqlc.BatchqOutcome) time.Duration {
	from := o.EnqueuedAt
	if o.RunAt != nil {
		from = *o.RunAt
	}
	return max(o.Deadline.Sub(from), 0)
}

// TenantSettings returns a tenant's settings, and whether it has any stored:
// a tenant never set has weight 1 and the queues' bounds.
func (c *Client) TenantSettings(ctx context.Context, name string) (Tenant, bool, error) {
	r, err := c.q.GetTenant(ctx, c.pool, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{Name: name, Weight: 1}, false, nil
	}
	if err != nil {
		return Tenant{}, false, fmt.Errorf("batchq: tenant %q: %w", name, err)
	}
	t := Tenant{Name: r.Name, Weight: r.Weight}
	if r.MaxQueued != nil {
		t.MaxQueued = int(*r.MaxQueued)
	}
	return t, true, nil
}
