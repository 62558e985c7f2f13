package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// NewJob is a job to enqueue.
type NewJob struct {
	Queue  string // an existing queue
	Tenant string // 1-256 bytes of UTF-8, no control characters
	Kind   string // what the job does, for handlers and reports; "" is "default"
	Cost   int64  // estimated cost (e.g. tokens), 1..MaxCost
	// Deadline is when the job stops being worth running; it must be in the
	// future, and after RunAt. Zero: TTL after the job's run-at (now when it
	// has none), or the queue's default TTL when TTL is zero.
	Deadline time.Time
	TTL      time.Duration
	// RunAt, or Delay from now, is the earliest the job may run: until then
	// it waits 'scheduled', outside the fair order, and counts toward its
	// tenant's bound. At its time a worker's maintenance moves it to the end
	// of its tenant's queue, as if it were enqueued then. Zero (or a time
	// already passed) runs it now. Give one of them, not both.
	RunAt time.Time
	Delay time.Duration
	// MaxAttempts bounds how often the job runs. 0: the queue's setting.
	MaxAttempts int
	// Payload is the job's input, a JSON value. nil: {}.
	Payload json.RawMessage
	// UniqueKey, when set, makes the enqueue idempotent: while a job with the
	// same queue and key is unfinished (or finished within the queue's
	// UniqueFor), enqueueing returns that job's id instead of a new job.
	UniqueKey string
}

// Enqueued is what became of one NewJob.
type Enqueued struct {
	ID        int64
	Duplicate bool // a job with the same unique key existed; ID is that job's
}

// Enqueue inserts one job in its own transaction.
func (c *Client) Enqueue(ctx context.Context, j NewJob) (Enqueued, error) {
	res, err := c.enqueueInTx(ctx, []NewJob{j}, false)
	if err != nil {
		return Enqueued{}, err
	}
	return res[0], nil
}

// EnqueueTx inserts one job inside the caller's transaction: it exists when
// tx commits and never if it rolls back. A *QueueFullError or
// *InvalidJobError leaves tx usable. The job takes its place in the fair
// order as of the round current when tx commits, if tx is READ COMMITTED (the
// default); under REPEATABLE READ or SERIALIZABLE, as of the round tx's
// snapshot shows.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, j NewJob) (Enqueued, error) {
	res, err := c.enqueue(ctx, tx, []NewJob{j}, false)
	if err != nil {
		return Enqueued{}, err
	}
	return res[0], nil
}

// EnqueueMany inserts jobs in one transaction, all or nothing: one round trip
// per queue named. Results are in the order of jobs.
func (c *Client) EnqueueMany(ctx context.Context, jobs []NewJob) ([]Enqueued, error) {
	return c.enqueueInTx(ctx, jobs, true)
}

// enqueueInTx runs enqueue in a transaction of its own. An error beginning or
// committing it (the database unreachable) says so; the caller may retry,
// and nothing was committed.
func (c *Client) enqueueInTx(ctx context.Context, jobs []NewJob, many bool) ([]Enqueued, error) {
	var res []Enqueued
	var inner error
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		res, inner = c.enqueue(ctx, tx, jobs, many)
		return inner
	})
	if err != nil && inner == nil {
		return nil, fmt.Errorf("batchq: enqueue: %w", err)
	}
	return res, err
}

// EnqueueManyTx inserts jobs inside the caller's transaction, all or nothing.
// A *QueueFullError or *InvalidJobError leaves tx usable and writes nothing;
// when jobs span several queues and a later queue is full, the caller's
// transaction holds the earlier queues' jobs until it rolls back, so roll
// back on any error.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, jobs []NewJob) ([]Enqueued, error) {
	return c.enqueue(ctx, tx, jobs, true)
}

// enqueue validates every job, then inserts them queue by queue.
func (c *Client) enqueue(ctx context.Context, tx pgx.Tx, jobs []NewJob, many bool) ([]Enqueued, error) {
	now := time.Now()
	type batch struct {
		idx []int
		p   dbsqlc.EnqueueParams
	}
	var order []string
	batches := map[string]*batch{}
	for i := range jobs {
		j := jobs[i]
		b := batches[j.Queue]
		// A queue with a batch has a valid name.
		if err := c.validate(&j, now, b != nil); err != nil {
			if many {
				err.Index = i + 1
			}
			return nil, err
		}
		if b == nil {
			b = &batch{p: dbsqlc.EnqueueParams{Queue: j.Queue}}
			if len(order) == 0 {
				// Room for every job: a call names one queue, as a rule.
				n := len(jobs)
				b.idx = make([]int, 0, n)
				b.p.Tenants, b.p.Kinds, b.p.UniqueKeys = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
				b.p.Costs, b.p.Deadlines = make([]int64, 0, n), make([]time.Time, 0, n)
				b.p.MaxAttempts, b.p.Payloads = make([]int32, 0, n), make([][]byte, 0, n)
				b.p.RunAts = make([]time.Time, 0, n)
			}
			batches[j.Queue] = b
			order = append(order, j.Queue)
		}
		b.idx = append(b.idx, i)
		b.p.Tenants = append(b.p.Tenants, j.Tenant)
		b.p.Kinds = append(b.p.Kinds, j.Kind)
		b.p.Costs = append(b.p.Costs, j.Cost)
		b.p.Deadlines = append(b.p.Deadlines, j.Deadline)
		b.p.MaxAttempts = append(b.p.MaxAttempts, int32(j.MaxAttempts))
		b.p.Payloads = append(b.p.Payloads, j.Payload)
		b.p.UniqueKeys = append(b.p.UniqueKeys, j.UniqueKey)
		b.p.RunAts = append(b.p.RunAts, j.RunAt)
	}
	// A call with no job for later sends no run-at times: the statement
	// then skips its run-at step.
	for _, b := range batches {
		if !slices.ContainsFunc(b.p.RunAts, func(t time.Time) bool { return !t.IsZero() }) {
			b.p.RunAts = nil
		}
	}
	// Queue by queue in name order: each statement locks its tenants' ring
	// rows, and rekey locks (queue, tenant) pairs in that order too, so two
	// calls naming the same queues in different orders cannot deadlock.
	slices.Sort(order)
	out := make([]Enqueued, len(jobs))
	for _, name := range order {
		b := batches[name]
		rows, err := c.q.Enqueue(ctx, tx, b.p)
		if err != nil {
			// The client checks every rule the database does, so the
			// database refuses only what changed between the two: the
			// clock, or a limit of a newer schema.
			if r := refusal(err); r != nil {
				if ij, ok := r.(*InvalidJobError); ok {
					// The database counts the jobs of this queue's batch.
					at := ij.Index
					ij.Index = 0
					if many && at >= 1 && at <= len(b.idx) {
						ij.Index = b.idx[at-1] + 1
					}
				}
				return nil, r
			}
			return nil, fmt.Errorf("batchq: enqueue into %q: %w", name, err)
		}
		for _, r := range rows {
			switch deref(r.Status) {
			case "unknown_queue":
				return nil, unknownQueue(name)
			case "ledger_full":
				return nil, ledgerFull(name, deref(r.Tenant))
			case "queue_full":
				return nil, &QueueFullError{
					Queue: name, Tenant: deref(r.Tenant), Bound: int(deref(r.Bound)), Queued: int(deref(r.Queued)),
					Adding: int(deref(r.Adding)),
				}
			case "inserted", "duplicate":
				out[b.idx[deref(r.Ord)-1]] = Enqueued{ID: deref(r.JobID), Duplicate: deref(r.Status) == "duplicate"}
			default:
				return nil, fmt.Errorf("batchq: enqueue into %q: unexpected status %q", name, deref(r.Status))
			}
		}
	}
	return out, nil
}

// validate checks j (its queue's name too, unless queueChecked) by the rules
// the database checks (batchq.job_error), in the same order and with the
// same words, and fills in what the database cannot: the default kind and
// payload, and a deadline from a TTL. It leaves the queue's defaults to the
// database (zero deadline, zero attempts), so every process applies the same
// settings.
func (c *Client) validate(j *NewJob, now time.Time, queueChecked bool) *InvalidJobError {
	if !queueChecked && !queueName.MatchString(j.Queue) {
		return &InvalidJobError{Field: "queue", Rule: "must name a queue: " + queueNameRule + " (got " + quote(j.Queue) + ")"}
	}
	if err := checkName("tenant", j.Tenant); err != nil {
		return err
	}
	if j.Kind == "" {
		j.Kind = "default"
	}
	if err := checkName("kind", j.Kind); err != nil {
		return err
	}
	if j.Cost <= 0 || j.Cost > MaxCost {
		return &InvalidJobError{Field: "cost", Rule: fmt.Sprintf("must be in 1..%d (got %d)", MaxCost, j.Cost)}
	}
	switch {
	case j.TTL < 0:
		return &InvalidJobError{Field: "ttl", Rule: fmt.Sprintf("must be > 0 (got %s)", j.TTL)}
	case j.TTL > 0 && !j.Deadline.IsZero():
		return &InvalidJobError{Field: "deadline", Rule: "give a deadline or a ttl, not both"}
	case j.TTL > 0:
		// The deadline is filled in by checkRunAt, from the run-at.
	case !j.Deadline.IsZero() && !j.Deadline.After(now):
		return &InvalidJobError{Field: "deadline", Rule: fmt.Sprintf("must be in the future (got %s, now %s)",
			j.Deadline.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))}
	case !j.Deadline.IsZero() && !j.Deadline.Before(year10000):
		return &InvalidJobError{Field: "deadline", Rule: "must be before year 10000"}
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > MaxAttemptsLimit {
		return &InvalidJobError{Field: "max_attempts", Rule: fmt.Sprintf("must be in 1..%d, or 0 for the queue's setting (got %d)", MaxAttemptsLimit, j.MaxAttempts)}
	}
	if err := c.checkPayload(j); err != nil {
		return err
	}
	if j.UniqueKey != "" {
		if err := checkName("unique_key", j.UniqueKey); err != nil {
			return err
		}
	}
	return checkRunAt(j, now)
}

// checkRunAt checks a job's run-at by the rules batchq.run_at_error checks,
// in the same order and with the same words, and turns a Delay into a RunAt
// and a TTL into a deadline counted from the run-at.
func checkRunAt(j *NewJob, now time.Time) *InvalidJobError {
	switch {
	case j.Delay < 0:
		return &InvalidJobError{Field: "delay", Rule: fmt.Sprintf("must be >= 0 (got %s)", j.Delay)}
	case j.Delay > 0 && !j.RunAt.IsZero():
		return &InvalidJobError{Field: "run_at", Rule: "give a run_at or a delay, not both"}
	case !j.RunAt.IsZero() && !j.RunAt.Before(year10000):
		return &InvalidJobError{Field: "run_at", Rule: "must be before year 10000"}
	case j.Delay > 0 && !now.Add(j.Delay).Before(year10000):
		return &InvalidJobError{Field: "delay", Rule: "must end before year 10000"}
	}
	if j.Delay > 0 {
		j.RunAt = now.Add(j.Delay)
		j.Delay = 0
	}
	if !j.Deadline.IsZero() && !j.RunAt.IsZero() && !j.Deadline.After(j.RunAt) {
		return &InvalidJobError{Field: "deadline", Rule: fmt.Sprintf("must be after run_at (got %s, run_at %s)",
			j.Deadline.UTC().Format(time.RFC3339Nano), j.RunAt.UTC().Format(time.RFC3339Nano))}
	}
	if j.TTL > 0 {
		from := now
		if j.RunAt.After(now) {
			from = j.RunAt
		}
		if !from.Add(j.TTL).Before(year10000) {
			return &InvalidJobError{Field: "deadline", Rule: "must be before year 10000"}
		}
		j.Deadline = from.Add(j.TTL)
		j.TTL = 0
	}
	return nil
}

// year10000 is the first instant no deadline may reach.
var year10000 = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)

// checkPayload checks a job's payload: JSON that jsonb can store, at most
// MaxPayloadBytes as PostgreSQL prints it (jsonb as text), which is what the
// database measures. An empty one is {}.
func (c *Client) checkPayload(j *NewJob) *InvalidJobError {
	if len(bytes.TrimSpace(j.Payload)) == 0 {
		j.Payload = json.RawMessage(`{}`)
		return nil
	}
	if !utf8.Valid(j.Payload) {
		return &InvalidJobError{Field: "payload", Rule: "must be valid UTF-8"}
	}
	if !json.Valid(j.Payload) {
		return &InvalidJobError{Field: "payload", Rule: "must be valid JSON"}
	}
	// Say what jsonb cannot store instead of failing in SQL.
	switch jsonbRejects(j.Payload) {
	case escapedNUL:
		return &InvalidJobError{Field: "payload", Rule: `must not contain \u0000 (PostgreSQL's jsonb cannot store it)`}
	case loneSurrogate:
		return &InvalidJobError{Field: "payload", Rule: `must not contain an unpaired UTF-16 surrogate escape such as \ud800 (PostgreSQL's jsonb cannot store it)`}
	case hugeNumber:
		return &InvalidJobError{Field: "payload", Rule: "must not contain a number beyond PostgreSQL's numeric range (131,072 digits before the point, 16,383 after)"}
	}
	if n := jsonbTextLen(j.Payload); n > c.cfg.MaxPayloadBytes {
		return &InvalidJobError{Field: "payload", Rule: fmt.Sprintf("must be at most %d bytes as jsonb text (got %d)", c.cfg.MaxPayloadBytes, n)}
	}
	return nil
}

// What jsonbRejects finds.
const (
	escapedNUL    = "\\u0000"
	loneSurrogate = "unpaired surrogate"
	hugeNumber    = "number out of range"
)

// PostgreSQL's numeric, which jsonb stores numbers in, holds at most this
// many decimal digits before the point (a most significant digit at 10^131071)
// and after it (counting trailing zeros), and an exponent below 2^30 - 1
// either way.
const (
	numericMaxWeight = 131071
	numericMaxScale  = 16383
	numericMaxExp    = 1<<30 - 2
)

// jsonbRejects returns why PostgreSQL's jsonb would refuse valid JSON text b
// (an escaped NUL, a \u escape of a UTF-16 surrogate that is not part of a
// high-low pair, or a number numeric cannot hold), or "" if it stores it.
func jsonbRejects(b []byte) string {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			end, why := stringRejects(b, i+1)
			if why != "" {
				return why
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end, ok, _ := numberFits(b, i)
			if !ok {
				return hugeNumber
			}
			i = end - 1
		}
	}
	return ""
}

// HasUnpairedSurrogate reports whether valid JSON text b holds, in one of
// its strings, a \u escape of a UTF-16 surrogate that is not half of a
// high-low pair. encoding/json decodes such an escape as U+FFFD, so a name
// read from JSON would be stored as something the text never said (and two
// distinct keys could become one); jsonb refuses one in a payload.
func HasUnpairedSurrogate(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] == '"' {
			end, why := stringRejects(b, i+1)
			if why == loneSurrogate {
				return true
			}
			i = end
		}
	}
	return false
}

// stringRejects scans the JSON string whose text starts at b[i] and returns
// the index of its closing quote, and why jsonb would refuse it ("" if not).
func stringRejects(b []byte, i int) (int, string) {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, ""
		case '\\':
		default:
			continue
		}
		i++ // the escaped character; a backslash here is an escaped backslash
		if i >= len(b) || b[i] != 'u' || i+4 >= len(b) {
			continue
		}
		r := hex4(b[i+1 : i+5])
		switch {
		case r == 0:
			return i, escapedNUL
		case r >= 0xDC00 && r <= 0xDFFF:
			return i, loneSurrogate
		case r >= 0xD800 && r <= 0xDBFF:
			next := b[i+5:]
			if len(next) < 6 || next[0] != '\\' || next[1] != 'u' {
				return i, loneSurrogate
			}
			if lo := hex4(next[2:6]); lo < 0xDC00 || lo > 0xDFFF {
				return i, loneSurrogate
			}
			i += 10
		default:
			i += 4
		}
	}
	return i, ""
}

// numberFits scans the JSON number at b[i] and returns the index after it,
// whether numeric can hold it, and how long it prints: its sign, the digits
// before the point (at least one), and the point and the digits after it
// when its scale is above zero. (The length is only meaningful when it fits.)
func numberFits(b []byte, i int) (int, bool, int) {
	start := i
	digits := func() (start, end int) {
		start = i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return start, i
	}
	if b[i] == '-' {
		i++
	}
	is, ie := digits()
	var fs, fe int
	if i < len(b) && b[i] == '.' {
		i++
		fs, fe = digits()
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		es, ee := digits()
		for _, c := range b[es:ee] {
			if exp = exp*10 + int(c-'0'); exp > numericMaxExp {
				return i, false, 0
			}
		}
		if neg {
			exp = -exp
		}
	}
	scale := max(0, fe-fs-exp)
	if scale > numericMaxScale {
		return i, false, 0
	}
	printed := func(weight int) int {
		n := max(weight+1, 1) // at least "0" before the point
		if b[start] == '-' {
			n++
		}
		if scale > 0 {
			n += 1 + scale
		}
		return n
	}
	// The weight of the most significant non-zero digit; none for zero.
	for k := is; k < ie; k++ {
		if b[k] != '0' {
			w := ie - k - 1 + exp
			return i, w <= numericMaxWeight, printed(w)
		}
	}
	for k := fs; k < fe; k++ {
		if b[k] != '0' {
			w := -(k - fs + 1) + exp
			return i, w <= numericMaxWeight, printed(w)
		}
	}
	return i, true, printed(0)
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
