package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
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

	// ErrUnknownQueue is returned when a call names a queue that does not
	// exist. For a name no queue could have, the error says the naming rule.
	ErrUnknownQueue = errors.New("batchq: unknown queue")

	// ErrUnknownTenant is returned by TenantInQueueSettings when the queue
	// knows nothing of the tenant: no job of it was ever enqueued there (its
	// ring row), it has no settings there or for every queue, and no outcome
	// there of the last day (batchq.console_tenant_known).
	ErrUnknownTenant = errors.New("batchq: unknown tenant")

	// ErrQueueExists is returned by CreateQueue when the name is taken.
	ErrQueueExists = errors.New("batchq: queue already exists")

	// ErrLeaseLost is returned by Complete, Fail, Release and Heartbeat when
	// the job is no longer running under the caller's lease: the lease expired
	// and the job was rescued, or it was finished already. Nothing changed.
	ErrLeaseLost = errors.New("batchq: lease lost")

	// ErrNotFound is returned when a job id names no unfinished job.
	ErrNotFound = errors.New("batchq: job not found")

	// ErrQueuePaused is returned by Work with Drain when the queue is paused
	// (PauseQueue) and its running jobs have finished: a paused queue hands
	// out nothing, so it cannot be drained until it is resumed.
	ErrQueuePaused = errors.New("batchq: queue paused")

	// ErrUnrecorded is returned by Work when some outcomes could not be
	// written (the database was away for longer than the pool retries): the
	// jobs stay running until their leases expire, and are then rescued and
	// run again.
	ErrUnrecorded = errors.New("batchq: outcomes not recorded")

	// ErrSchemaGone is returned by Work when batchq's schema has been missing
	// from the database for longer than the pool waits for it.
	ErrSchemaGone = errors.New("batchq: schema missing")

	// ErrNotPermitted is returned by Work when the database has refused the
	// pool's claims for lack of a right (SQLSTATE 42501) for longer than the
	// pool waits: it connects as a role batchq migrate grants did not make a
	// worker, or whose grants were taken back.
	ErrNotPermitted = errors.New("batchq: permission denied")

	// ErrCancelRequested is returned by Heartbeat when an operator asked for
	// a job to stop (Cancel, CancelJobs): stop its work and Fail it, and its
	// outcome is 'cancelled'. The worker pool does this itself.
	ErrCancelRequested = errors.New("batchq: cancel requested")

	// ErrLedgerFull is returned by the Enqueue functions when a tenant's
	// ledger in the fair order has no room for the jobs: its cumulative cost,
	// or the round of its last job, would pass 2^62. Only a tenant that kept
	// jobs queued without a break for billions of tokens gets it; it clears
	// once the tenant's queued jobs drain. Nothing of the call was written.
	ErrLedgerFull = errors.New("batchq: ledger_full")
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
	// batchq.raise_refused (db/functions/enqueue.sql) words it the same.
	jobs, fit := "jobs", "do not fit"
	if e.Queued == 1 {
		jobs = "job"
	}
	if e.Adding == 1 {
		fit = "does not fit"
	}
	return fmt.Sprintf("batchq: queue_full: tenant %s has %d queued %s in queue %s (bound %d); %d more %s",
		quote(e.Tenant), e.Queued, jobs, quote(e.Queue), e.Bound, e.Adding, fit)
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

func unknownQueue(name string) error {
	if !queueName.MatchString(name) {
		// The SQL API refuses such a name with the rule (BQ100); say it too.
		return fmt.Errorf("%w: %s is not a queue name: %s", ErrUnknownQueue, quote(name), queueNameRule)
	}
	return fmt.Errorf("%w: %s", ErrUnknownQueue, quote(name))
}

// unknownQueueRefusal returns ErrUnknownQueue for the SQL API's refusal of
// a queue that does not exist (BQ201), nil for any other error: for the
// calls that keep their other errors as the database wrote them.
func unknownQueueRefusal(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "BQ201" {
		return refusal(err)
	}
	return nil
}

func ledgerFull(queue, tenant string) error {
	return fmt.Errorf("%w: tenant %s in queue %s has no room left in its ledger; its queued jobs must drain before it takes more",
		ErrLedgerFull, quote(tenant), quote(queue))
}

// quote writes s as a JSON string, as the SQL functions' errors do
// (batchq.quote), so an error reads the same from Go and from SQL. The C1
// controls and the bidirectional controls are written as \uNNNN, as
// encoding/json writes U+2028 and U+2029: raw, one could break the line or
// show the rest of the error in another order than it holds. Text that is
// not UTF-8, which never reaches SQL, is quoted as Go quotes it, so its
// bytes still show.
func quote(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	q := strings.TrimSuffix(b.String(), "\n")
	if !strings.ContainsFunc(q, hiddenControl) {
		return q
	}
	var out strings.Builder
	for _, r := range q {
		if hiddenControl(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.WriteRune(r)
		}
	}
	return out.String()
}

// hiddenControl reports the characters quote escapes beyond what
// encoding/json does: the C1 controls (U+0080-U+009F) and the bidirectional
// controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069).
func hiddenControl(r rune) bool {
	return (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Bidi_Control, r)
}

// refusal turns an enqueue refused by batchq's SQL functions (SQLSTATE class
// BQ; docs/sql-api.md) into the error package queue returns for it:
// *InvalidJobError for a broken rule (class BQ1), *QueueFullError,
// ErrUnknownQueue and ErrLedgerFull. It returns nil for any other error.
func refusal(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "BQ") {
		return nil
	}
	var d struct {
		Index  int    `json:"index"`
		Field  string `json:"field"`
		Rule   string `json:"rule"`
		Queue  string `json:"queue"`
		Tenant string `json:"tenant"`
		Bound  int    `json:"bound"`
		Queued int    `json:"queued"`
		Adding int    `json:"adding"`
	}
	if json.Unmarshal([]byte(pe.Detail), &d) != nil {
		return nil
	}
	switch {
	case strings.HasPrefix(pe.Code, "BQ1"):
		return &InvalidJobError{Index: d.Index, Field: d.Field, Rule: d.Rule}
	case pe.Code == "BQ200":
		return &QueueFullError{Queue: d.Queue, Tenant: d.Tenant, Bound: d.Bound, Queued: d.Queued, Adding: d.Adding}
	case pe.Code == "BQ201":
		return unknownQueue(d.Queue)
	case pe.Code == "BQ202":
		return ledgerFull(d.Queue, d.Tenant)
	}
	return nil
}
