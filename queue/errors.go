package queue

import (
	"errors"
	"fmt"
)

var (
	// ErrQueueFull is returned (wrapped in a *QueueFullError) by the Enqueue
	// functions when a tenant already holds as many queued jobs as its bound
	// allows. Nothing of the call was written.
	ErrQueueFull = errors.New("batchq: queue_full")

	// ErrInvalidJob is returned (wrapped in an *InvalidJobError) by the
	// Enqueue functions when a job breaks a rule. Nothing was written.
	ErrInvalidJob = errors.New("batchq: invalid job")

	// ErrInvalidSettings is returned by the settings functions when a queue or
	// tenant setting breaks a rule. Nothing was written.
	ErrInvalidSettings = errors.New("batchq: invalid settings")

	// ErrUnknownQueue is returned when a call names a queue that does not exist.
	ErrUnknownQueue = errors.New("batchq: unknown queue")

	// ErrQueueExists is returned by CreateQueue when the name is taken.
	ErrQueueExists = errors.New("batchq: queue already exists")

	// ErrLeaseLost is returned by Complete, Fail, Release and Heartbeat when
	// the job is no longer running under the caller's lease: the lease expired
	// and the job was rescued, or it was finished already. Nothing changed.
	ErrLeaseLost = errors.New("batchq: lease lost")

	// ErrNotFound is returned when a job id names no unfinished job.
	ErrNotFound = errors.New("batchq: job not found")
)

// QueueFullError says which tenant is full and how full.
type QueueFullError struct {
	Queue  string
	Tenant string
	Bound  int // the tenant's bound on queued jobs
	Queued int // how many it has queued now
	Adding int // how many this call tried to add
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("batchq: queue_full: tenant %q has %d queued jobs in queue %q (bound %d); %d more do not fit",
		e.Tenant, e.Queued, e.Queue, e.Bound, e.Adding)
}

// Unwrap returns ErrQueueFull.
func (e *QueueFullError) Unwrap() error { return ErrQueueFull }

// InvalidJobError names the job, field and rule a job broke.
type InvalidJobError struct {
	Index int    // position in an EnqueueMany call; 0 for a single job
	Field string // "tenant", "cost", ...
	Rule  string // what the field must be
}

func (e *InvalidJobError) Error() string {
	if e.Index > 0 {
		return fmt.Sprintf("batchq: invalid job %d: %s: %s", e.Index, e.Field, e.Rule)
	}
	return fmt.Sprintf("batchq: invalid job: %s: %s", e.Field, e.Rule)
}

// Unwrap returns ErrInvalidJob.
func (e *InvalidJobError) Unwrap() error { return ErrInvalidJob }

// SettingError names the setting that broke a rule.
type SettingError struct {
	Field string
	Rule  string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("batchq: invalid settings: %s: %s", e.Field, e.Rule)
}

// Unwrap returns ErrInvalidSettings.
func (e *SettingError) Unwrap() error { return ErrInvalidSettings }
