package queue

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// Job is a claimed job, running under a lease until it is finished.
type Job struct {
	ID          int64
	Queue       string
	Tenant      string
	Kind        string
	Cost        int64 // estimated
	Deadline    time.Time
	Payload     json.RawMessage
	Attempt     int // 1 on the first run
	MaxAttempts int
	EnqueuedAt  time.Time
	// LeaseExpiresAt is when the job may be rescued unless Heartbeat extends it.
	LeaseExpiresAt time.Time

	token pgtype.UUID
}

// MaxClaim is the most jobs one claim takes; a larger ClaimOpts.Limit
// takes this many.
const MaxClaim = 100_000

// ClaimOpts shapes a claim. nil means defaults.
type ClaimOpts struct {
	// Limit is the most jobs to claim, at most MaxClaim. 0: 1.
	Limit int
	// Budget, when > 0, stops the claim before the first job that would take
	// the claimed cost past it: what the throttle can grant now.
	Budget int64
	// Worker names the claimer in outcomes and reports, in at most 256
	// bytes. "": unnamed.
	Worker string
}

// Claim claims up to opts.Limit queued jobs of a queue in fair order.
// It returns no jobs, and no error, when none is ready (or the queue is
// paused), and ErrUnknownQueue for no such queue. A claim that drops
// expired jobs claims again for their places; if a later statement fails,
// the jobs already claimed come back with the error, each holding its
// lease: finish or release them, or they wait for their lease to expire and
// the rescue, which costs each an attempt.
//
// A claim commits without waiting for the flush to disk: a server crash can
// undo the claims of its last moments, which queues their jobs again with
// the attempt given back and refuses their finishes (ErrLeaseLost), as a
// worker's crash would after its lease. Finishes wait for the flush.
func (c *Client) Claim(ctx context.Context, queue string, opts *ClaimOpts) ([]*Job, error) {
	jobs, _, err := c.claim(ctx, queue, opts)
	return jobs, err
}

// claim is Claim that also returns the expired jobs the claim removed.
func (c *Client) claim(ctx context.Context, queue string, opts *ClaimOpts) (jobs, expired []*Job, err error) {
	var o ClaimOpts
	if opts != nil {
		o = *opts
	}
	if o.Limit <= 0 {
		o.Limit = 1
	}
	if o.Budget <= 0 {
		o.Budget = math.MaxInt64
	}
	for {
		rows, err := c.q.Claim(ctx, c.pool, dbsqlc.ClaimParams{
			Queue: queue, MaxJobs: int32(min(o.Limit, MaxClaim)), Worker: o.Worker, Budget: o.Budget,
		})
		if err != nil {
			if r := refusal(err); r != nil {
				return jobs, expired, r
			}
			return jobs, expired, fmt.Errorf("batchq: claim from %q: %w", queue, err)
		}
		n := len(expired)
		// The claim's order: batchq.claim returns its rows unsorted, each
		// with its key. Sorting their indexes moves 8 bytes a swap, not a
		// whole row.
		order := make([]int, len(rows))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int {
			ra, rb := &rows[a], &rows[b]
			return cmp.Or(cmp.Compare(ra.Round, rb.Round), cmp.Compare(ra.Pos, rb.Pos), cmp.Compare(ra.Seq, rb.Seq))
		})
		for _, i := range order {
			r := &rows[i]
			j := &Job{
				ID: r.ID, Queue: r.Queue, Tenant: r.Tenant, Kind: r.Kind, Cost: r.Cost, Deadline: r.Deadline,
				Payload: r.Payload, Attempt: int(r.Attempt), MaxAttempts: int(r.MaxAttempts), EnqueuedAt: r.EnqueuedAt,
				LeaseExpiresAt: r.LeaseExpiresAt, token: r.LeaseToken,
			}
			if r.Expired {
				expired = append(expired, j)
				continue
			}
			jobs = append(jobs, j)
			o.Limit--
			o.Budget -= r.Cost
		}
		// Expired jobs took places in the scan: claim again for them. Each
		// round removes at least one expired job, so this ends.
		if len(expired) == n || o.Limit <= 0 || o.Budget <= 0 {
			return jobs, expired, nil
		}
	}
}

// NextCost returns the estimated cost of the job a claim would start with,
// and false when nothing is queued: what a worker must wait for quota for.
func (c *Client) NextCost(ctx context.Context, queue string) (int64, bool, error) {
	cost, err := c.q.NextCost(ctx, c.pool, queue)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("batchq: next cost in %q: %w", queue, err)
	}
	return cost, true, nil
}

// Result is what a finished job reports.
type Result struct {
	// ActualCost is what the job really cost (e.g. the provider's
	// usage.total_tokens); the tenant's ledger is corrected by the difference
	// from the estimate. 0: unknown, the estimate stands.
	ActualCost int64
	// Output is stored with the outcome. It should be JSON; anything else is
	// stored as a JSON string, and anything larger than the client's
	// MaxResultBytes as a truncated summary.
	Output []byte
	// Response is the provider's response, if the job called one: its status
	// and headers feed the worker pool's throttle. Its body is not read.
	Response *http.Response
}

// Completion pairs a job with its result, for CompleteMany.
type Completion struct {
	Job    *Job
	Result Result
}

// Complete finishes a job as succeeded and records its outcome.
func (c *Client) Complete(ctx context.Context, j *Job, r Result) error {
	lost, err := c.CompleteMany(ctx, []Completion{{Job: j, Result: r}})
	if err != nil {
		return err
	}
	if len(lost) > 0 {
		return fmt.Errorf("%w: job %d", ErrLeaseLost, j.ID)
	}
	return nil
}

// CompleteMany finishes jobs as succeeded in one statement and one
// transaction. It returns the ids of listed jobs it did not finish because
// their lease was lost, each once; it left those alone. A job listed more
// than once under the same lease is completed with its first result; listed
// under an old lease and the current one, it is completed by the current one.
func (c *Client) CompleteMany(ctx context.Context, done []Completion) (lost []int64, err error) {
	lostRuns, err := c.completeRuns(ctx, done)
	if err != nil {
		return nil, err
	}
	return unfinished(len(done), func(i int) *Job { return done[i].Job }, lostRuns), nil
}

// completeRuns is CompleteMany that returns the listed runs it did not
// finish, nil for none. Jobs of several queues are completed queue by queue,
// in one transaction.
func (c *Client) completeRuns(ctx context.Context, done []Completion) (map[run]bool, error) {
	if len(done) == 0 {
		return nil, nil
	}
	order := distinctRuns(len(done), func(i int) *Job { return done[i].Job })
	var lost map[run]bool
	err := c.byQueue(ctx, order, func(i int) string { return done[i].Job.Queue }, func(tx dbsqlc.DBTX, queue string, idx []int) error {
		p := dbsqlc.CompleteParams{
			Queue:  queue,
			Ids:    make([]int64, len(idx)),
			Tokens: make([]pgtype.UUID, len(idx)),
		}
		// Actual costs and results go only when some job has one: a nil
		// slice is a NULL array, whose every element reads as "none".
		for i, k := range idx {
			d := done[k]
			p.Ids[i], p.Tokens[i] = d.Job.ID, d.Job.token
			if d.Result.ActualCost > 0 {
				if p.ActualCosts == nil {
					p.ActualCosts = slices.Repeat([]int64{-1}, len(idx))
				}
				p.ActualCosts[i] = min(d.Result.ActualCost, MaxCost)
			}
			if r := c.boundResult(d.Result.Output); r != "" {
				if p.Results == nil {
					p.Results = make([]string, len(idx))
				}
				p.Results[i] = r
			}
		}
		rows, err := c.q.Complete(ctx, tx, p)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if lost == nil {
				lost = make(map[run]bool, len(rows))
			}
			lost[run{r.ID, r.LeaseToken}] = true
		}
		return nil
	})
	if u := unknownQueueRefusal(err); u != nil {
		return nil, u
	}
	if err != nil {
		return nil, fmt.Errorf("batchq: complete %d jobs: %w", len(done), err)
	}
	return lost, nil
}

// byQueue runs fn once per queue named among the listed items (the indexes
// in order, queue(i) naming each one's queue), with that queue's indexes in
// their order: on the pool when they name one queue, as they nearly always
// do, else queue by queue in name order in one transaction.
func (c *Client) byQueue(ctx context.Context, order []int, queue func(int) string, fn func(tx dbsqlc.DBTX, queue string, idx []int) error) error {
	if len(order) == 0 {
		return nil
	}
	first := queue(order[0])
	one := true
	for _, i := range order[1:] {
		if queue(i) != first {
			one = false
			break
		}
	}
	if one {
		return fn(c.pool, first, order)
	}
	groups := map[string][]int{}
	var names []string
	for _, i := range order {
		q := queue(i)
		if _, ok := groups[q]; !ok {
			names = append(names, q)
		}
		groups[q] = append(groups[q], i)
	}
	slices.Sort(names)
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		for _, q := range names {
			if err := fn(tx, q, groups[q]); err != nil {
				return err
			}
		}
		return nil
	})
}

// run is one claim of a job: its id and the lease token that claim drew. A
// job rescued and claimed again has two runs, of which only the newer may
// finish it.
type run struct {
	id    int64
	token pgtype.UUID
}

func (j *Job) run() run { return run{j.ID, j.token} }

// distinctRuns returns the index of the first listing of each run among n
// listed jobs, ordered by job id: the finishing statements want one line per
// run (a second outcome row for a job would fail the statement).
func distinctRuns(n int, job func(int) *Job) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	byRun := func(a, b int) int {
		ja, jb := job(a), job(b)
		if d := cmp.Compare(ja.ID, jb.ID); d != 0 {
			return d
		}
		return bytes.Compare(ja.token.Bytes[:], jb.token.Bytes[:])
	}
	slices.SortStableFunc(order, byRun)
	return slices.CompactFunc(order, func(a, b int) bool { return byRun(a, b) == 0 })
}

// unfinished returns, once each and in the order listed, the ids of the n
// listed jobs none of whose runs finished: every run of theirs listed is in
// lost.
func unfinished(n int, job func(int) *Job, lost map[run]bool) []int64 {
	if len(lost) == 0 {
		return nil
	}
	doneIDs := make(map[int64]bool, n)
	for i := range n {
		if r := job(i).run(); !lost[r] {
			doneIDs[r.id] = true
		}
	}
	var out []int64
	for i := range n {
		id := job(i).ID
		if !doneIDs[id] {
			doneIDs[id] = true // named once
			out = append(out, id)
		}
	}
	return out
}

// boundResult turns a handler's output into the JSON text stored with the
// outcome ("" for none), within MaxResultBytes.
func (c *Client) boundResult(out []byte) string {
	if len(out) == 0 {
		return ""
	}
	// json.Valid accepts bytes that are not UTF-8 inside strings, which the
	// server refuses: such a result would fail the completion, and the job,
	// which did its work, would run again.
	if json.Valid(out) && utf8.Valid(out) && jsonbRejects(out) == "" && jsonbTextLen(out) <= c.cfg.MaxResultBytes {
		return string(out)
	}
	// A summary of what it was: its size and its head, cut until the
	// summary, as jsonb prints it, fits.
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	keep := min(len(text), c.cfg.MaxResultBytes/2)
	for {
		for keep > 0 && keep < len(text) && !utf8.RuneStart(text[keep]) {
			keep--
		}
		// The wrapper is JSON text the server stores: no NUL (jsonb refuses
		// the escaped NUL json.Marshal writes).
		b, _ := json.Marshal(struct {
			Truncated bool   `json:"truncated"`
			Bytes     int    `json:"bytes"`
			Head      string `json:"head"`
		}{keep < len(text), len(out), strings.ReplaceAll(text[:keep], "\x00", "\uFFFD")})
		n := jsonbTextLen(b)
		if n <= c.cfg.MaxResultBytes || keep == 0 {
			return string(b)
		}
		// Escapes make the head longer than its bytes: cut it in
		// proportion, and a little more.
		keep = keep * c.cfg.MaxResultBytes / n * 9 / 10
	}
}

// FailOpts shapes a failure. nil means defaults.
type FailOpts struct {
	// RetryIn is how long to wait before the next attempt.
	// 0: exponential backoff, 1s × 2^(attempt-1) up to 10m, with jitter.
	RetryIn time.Duration
	// Final gives the job up at once, whatever attempts are left: retrying
	// would not help (a request the provider refuses as malformed, say). Its
	// outcome is 'discarded'.
	Final bool
}

// Fail records a failed attempt. The job is retried after a backoff while it
// has attempts left and the retry falls before its deadline; otherwise it is
// finished with outcome 'failed', or 'discarded' if opts.Final says retrying
// would not help. It reports whether the job will be retried.
func (c *Client) Fail(ctx context.Context, j *Job, cause error, opts *FailOpts) (retrying bool, err error) {
	var o FailOpts
	if opts != nil {
		o = *opts
	}
	res, err := c.failMany(ctx, []failure{{job: j, cause: cause, opts: o}})
	if err != nil {
		return false, err
	}
	outcome, ok := res[j.run()]
	if !ok {
		return false, fmt.Errorf("%w: job %d", ErrLeaseLost, j.ID)
	}
	return outcome == "retrying", nil
}

// failure is one failed attempt to record.
type failure struct {
	job   *Job
	cause error
	opts  FailOpts
}

// failMany records failed attempts, one statement per queue named. The
// result maps each run it recorded to what became of its job: "retrying",
// "failed", "discarded", or "cancelled" (an operator had asked it to stop);
// runs missing from it lost their lease. A run listed twice is recorded
// once, with its first failure.
func (c *Client) failMany(ctx context.Context, fs []failure) (map[run]string, error) {
	now := time.Now()
	out := make(map[run]string, len(fs))
	order := distinctRuns(len(fs), func(i int) *Job { return fs[i].job })
	err := c.byQueue(ctx, order, func(i int) string { return fs[i].job.Queue }, func(tx dbsqlc.DBTX, queue string, idx []int) error {
		p := dbsqlc.FailParams{Queue: queue}
		for _, k := range idx {
			f := fs[k]
			msg := "failed"
			if f.cause != nil {
				msg = f.cause.Error()
			}
			in := f.opts.RetryIn
			if in <= 0 {
				in = Backoff(f.job.Attempt)
			}
			p.Ids = append(p.Ids, f.job.ID)
			p.Tokens = append(p.Tokens, f.job.token)
			p.Errors = append(p.Errors, cleanText(msg, 4096))
			p.RetryAt = append(p.RetryAt, now.Add(in))
			p.Final = append(p.Final, f.opts.Final)
		}
		rows, err := c.q.Fail(ctx, tx, p)
		if err != nil {
			return err
		}
		for _, r := range rows {
			out[run{r.ID, r.LeaseToken}] = r.Outcome
		}
		return nil
	})
	if u := unknownQueueRefusal(err); u != nil {
		return nil, u
	}
	if err != nil {
		return nil, fmt.Errorf("batchq: fail %d jobs: %w", len(fs), err)
	}
	return out, nil
}

// cleanText makes s storable as text: no NUL, valid UTF-8, at most n bytes.
func cleanText(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if len(s) <= n {
		return s
	}
	// Cut at a character's start, so what is kept is still UTF-8.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Backoff is the wait before retrying after the given attempt failed:
// 1s × 2^(attempt-1), at most 10 minutes, less up to 20% jitter so a burst of
// failures does not come back at once.
func Backoff(attempt int) time.Duration {
	d := 10 * time.Minute
	if attempt >= 1 && attempt <= 10 {
		d = min(d, time.Second<<(attempt-1))
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// MaxReleaseDelay is the longest a released job may wait before it rejoins
// its tenant's queue.
const MaxReleaseDelay = 24 * time.Hour

// Release hands a claimed job back without using an attempt, for when the
// provider refused to start it (a 429) or the worker cannot run it now: it
// rejoins its tenant's queue at the tail after delay, at most
// MaxReleaseDelay. It never ran, so its tenant is charged for it once, not
// twice.
func (c *Client) Release(ctx context.Context, j *Job, delay time.Duration) error {
	if delay > MaxReleaseDelay {
		return fmt.Errorf("batchq: release: delay: must be in 0s..%s (got %s)", MaxReleaseDelay, delay)
	}
	released, err := c.releaseMany(ctx, []*Job{j}, []time.Duration{delay})
	if err != nil {
		return err
	}
	if released[j.run()] == "" {
		return fmt.Errorf("%w: job %d", ErrLeaseLost, j.ID)
	}
	return nil
}

// releaseMany releases jobs, each after its delay, in one statement, and
// returns the runs it released ("released"), or finished because an
// operator had asked them to stop ("cancelled"); the rest lost their lease.
// (By run, not by id: a stale run listed beside the current run of the same
// job lost its lease though the job was released.)
func (c *Client) releaseMany(ctx context.Context, jobs []*Job, delays []time.Duration) (released map[run]string, err error) {
	released = make(map[run]string, len(jobs))
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	err = c.byQueue(ctx, order, func(i int) string { return jobs[i].Queue }, func(tx dbsqlc.DBTX, queue string, idx []int) error {
		p := dbsqlc.ReleaseParams{Queue: queue}
		for _, i := range idx {
			p.Ids = append(p.Ids, jobs[i].ID)
			p.Tokens = append(p.Tokens, jobs[i].token)
			p.DelaysUs = append(p.DelaysUs, min(max(delays[i], 0), MaxReleaseDelay).Microseconds())
		}
		rows, err := c.q.Release(ctx, tx, p)
		if err != nil {
			return err
		}
		for _, r := range rows {
			released[run{r.ID, r.LeaseToken}] = r.Outcome
		}
		return nil
	})
	if u := unknownQueueRefusal(err); u != nil {
		return nil, u
	}
	if err != nil {
		return nil, fmt.Errorf("batchq: release %d jobs: %w", len(jobs), err)
	}
	return released, nil
}

// Heartbeat extends the leases of running jobs by their queue's lease length.
// It updates each job's LeaseExpiresAt and returns ErrLeaseLost naming the
// jobs whose lease was already lost, or else ErrCancelRequested naming the
// jobs an operator asked to stop (their leases were extended).
func (c *Client) Heartbeat(ctx context.Context, jobs ...*Job) error {
	lost, stop, err := c.heartbeat(ctx, jobs)
	if err != nil {
		return err
	}
	ids := func(runs []run) []int64 {
		out := make([]int64, len(runs))
		for i, r := range runs {
			out[i] = r.id
		}
		return out
	}
	if len(lost) > 0 {
		return fmt.Errorf("%w: jobs %v", ErrLeaseLost, ids(lost))
	}
	if len(stop) > 0 {
		return fmt.Errorf("%w: jobs %v", ErrCancelRequested, ids(stop))
	}
	return nil
}

// heartbeat extends the leases of jobs' runs and returns, once each, the
// runs whose lease was lost and those an operator asked to stop. By run,
// not by id: a stale run listed beside the current run of the same job lost
// its lease though the job's was extended.
func (c *Client) heartbeat(ctx context.Context, jobs []*Job) (lost, stop []run, err error) {
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	type extension struct {
		at   time.Time
		stop bool
	}
	extended := make(map[run]extension, len(jobs))
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	err = c.byQueue(ctx, order, func(i int) string { return jobs[i].Queue }, func(tx dbsqlc.DBTX, queue string, idx []int) error {
		p := dbsqlc.HeartbeatParams{Queue: queue, Ids: make([]int64, len(idx)), Tokens: make([]pgtype.UUID, len(idx))}
		for n, i := range idx {
			p.Ids[n], p.Tokens[n] = jobs[i].ID, jobs[i].token
		}
		rows, err := c.q.Heartbeat(ctx, tx, p)
		if err != nil {
			return err
		}
		for _, r := range rows {
			extended[run{r.ID, r.LeaseToken}] = extension{r.LeaseExpiresAt, r.CancelRequested}
		}
		return nil
	})
	if u := unknownQueueRefusal(err); u != nil {
		return nil, nil, u
	}
	if err != nil {
		return nil, nil, fmt.Errorf("batchq: heartbeat: %w", err)
	}
	seen := make(map[run]bool, len(jobs))
	for _, j := range jobs {
		if seen[j.run()] {
			continue
		}
		seen[j.run()] = true
		e, ok := extended[j.run()]
		switch {
		case !ok:
			lost = append(lost, j.run())
		case e.stop:
			stop = append(stop, j.run())
		}
		if ok {
			j.LeaseExpiresAt = e.at
		}
	}
	return lost, stop, nil
}

// Cancel cancels a job. One that has not started (queued, or waiting to
// retry) is finished at once with outcome 'cancelled', and its cost leaves
// its tenant's ledger. A running one is asked to stop: its worker pool
// cancels the handler's context at its next heartbeat (Heartbeat returns
// ErrCancelRequested to others), and the run ends as 'cancelled' unless it
// succeeds first; asked again, it keeps the first request's reason. It
// returns ErrNotFound for an id of no unfinished job.
func (c *Client) Cancel(ctx context.Context, id int64, reason string) error {
	_, err := c.CancelJob(ctx, id, reason)
	return err
}

// CancelJob is Cancel that also says what it did: Cancelled 1 for a job
// that had not started, Stopping 1 for a running one asked to stop, and
// neither for a running one asked to stop already, which keeps that
// request's time and reason (as CancelJobs counts it).
func (c *Client) CancelJob(ctx context.Context, id int64, reason string) (CancelStats, error) {
	if reason == "" {
		reason = "cancelled"
	}
	r, err := c.q.Cancel(ctx, c.pool, dbsqlc.CancelParams{ID: id, Reason: cleanText(reason, MaxReasonBytes)})
	if errors.Is(err, pgx.ErrNoRows) {
		return CancelStats{}, fmt.Errorf("%w: no unfinished job %d", ErrNotFound, id)
	}
	if err != nil {
		return CancelStats{}, fmt.Errorf("batchq: cancel job %d: %w", id, err)
	}
	switch {
	case r.AskedAlready:
		return CancelStats{}, nil
	case r.Stopping:
		return CancelStats{Stopping: 1}, nil
	}
	return CancelStats{Cancelled: 1}, nil
}
