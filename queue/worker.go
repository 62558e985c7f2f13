package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// Handler runs one claimed job. It returns the job's result, or an error:
// the job is retried with backoff while attempts and deadline allow, unless
// the error is Permanent (then it is discarded). A handler that called a
// provider reports the response in Result.Response, so the pool's throttle
// learns what is left; a 429 (or an error wrapping ErrRateLimited) hands the
// job back without using an attempt, and pauses the fleet until the
// provider's reset.
//
// The context is cancelled when the job's lease is lost or a shutdown runs
// out of time; the handler should return promptly then.
type Handler func(ctx context.Context, j *Job) (Result, error)

// ErrRateLimited tells the pool that the provider refused the call with a
// 429: the job goes back to its tenant's queue without using an attempt.
var ErrRateLimited = errors.New("batchq: rate limited by the provider")

// Permanent marks err as one that retrying will not fix: the job is given up
// at once, whatever attempts it has left, with outcome 'discarded' (where
// 'failed' says its attempts or its deadline ran out).
func Permanent(err error) error { return &permanentError{err} }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// WorkerConfig configures a worker pool. Queue and Handler are required.
type WorkerConfig struct {
	Queue   string
	Handler Handler
	// Concurrency is how many handlers run at once. 0: 8.
	Concurrency int
	// BatchSize is the most jobs one claim takes; the pool also keeps up to
	// this many claimed ahead of its handlers (handed back, without using an
	// attempt, if it shuts down before starting them). 0: Concurrency.
	BatchSize int
	// Throttle, when set, paces the pool: it claims only what the
	// throttle's headroom at batch priority allows, asks the throttle for
	// each job as its handler is about to send it, feeds it every response,
	// and discards a job whose cost the quota can never grant. A job whose room
	// another pool took first waits for the refill, up to 5s, then goes back
	// to its tenant's queue. Use Client.Throttle for a state shared by the
	// whole fleet. nil: no pacing.
	Throttle *throttle.Throttle
	// Name identifies the worker in outcomes and logs. "": host:pid.
	Name string
	// PollInterval is how often the pool looks for work when no notification
	// says there is some. 0: 1s. Enqueues notify only for tenants that had
	// nothing queued (see batchq.enqueue), so a pool that went idle while an
	// enqueue for a tenant with a backlog was open may find its jobs by
	// polling.
	PollInterval time.Duration
	// MaintainInterval is how often the pool runs Maintain on its queue
	// (rescuing lost leases, expiring, requeueing retries, applying cost
	// corrections). 0: 1s. Negative: never.
	MaintainInterval time.Duration
	// HeartbeatInterval is how often running jobs' leases are extended.
	// 0: a third of the queue's lease, followed as the lease changes: each
	// heartbeat reads it again, and extends leases by the new length.
	HeartbeatInterval time.Duration
	// ShutdownTimeout bounds how long a graceful shutdown waits for running
	// handlers before cancelling them. 0: 30s.
	ShutdownTimeout time.Duration
	// Drain makes Work return once the queue has nothing queued, running or
	// waiting to retry: for scripts and tests.
	Drain bool
	// OnEvent, when set, is called for what the pool does: claims, finishes,
	// throttle waits, 429s. It runs on the pool's goroutines and must be quick
	// and safe for concurrent use.
	OnEvent func(Event)
	// Logger receives the pool's logs. nil: the client's.
	Logger *slog.Logger
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EventClaimed: Job was claimed and its handler is starting; Wait is how
	// long it waited from its enqueue to its claim. A claimed job handed back
	// before it started (its deadline passed, no room in the quota, a
	// shutdown) has none.
	EventClaimed EventKind = iota
	// EventFinished: Job finished with Outcome ("succeeded", "failed",
	// "discarded", "cancelled", "retrying", "released", "lease_lost"), its handler
	// running for Duration (0 for a job handed back before it started); or
	// its outcome could not be written ("unrecorded": the job's lease will
	// expire and it will be rescued and run again).
	EventFinished
	// EventExpired: Job was found past its deadline, by a claim or by the
	// pool's maintenance (waiting, or running when its lease ran out), and
	// recorded as expired. Job holds its id, queue, tenant and cost.
	EventExpired
	// EventThrottled: the pool waited Wait for quota before claiming.
	EventThrottled
	// EventRateLimited: the provider answered 429; the fleet pauses for Wait
	// (the provider's Retry-After, or the throttle's default pause).
	EventRateLimited
	// EventError: the database or a handler's bookkeeping failed; Err says why.
	EventError
)

// Event is one thing a worker pool did, for metrics and logs.
type Event struct {
	Kind       EventKind
	Queue      string
	Job        *Job
	Outcome    string
	ActualCost int64
	Wait       time.Duration
	Duration   time.Duration
	Err        error
}

// Work runs a worker pool on a queue until ctx is done (or, with Drain, until
// the queue is empty), then shuts down gracefully: it stops claiming, hands
// back claimed jobs no handler started (without using an attempt), waits up
// to ShutdownTimeout for running handlers, and records every outcome before
// it returns. A handler still running then is cancelled, and its job is
// recorded as a failed attempt (retried while attempts remain): its call may
// have been made. It returns nil after a shutdown that ctx asked for.
func (c *Client) Work(ctx context.Context, cfg WorkerConfig) error {
	p, err := c.newPool(ctx, cfg)
	if err != nil {
		return err
	}
	return p.run(ctx)
}

type pool struct {
	c    *Client
	cfg  WorkerConfig
	log  *slog.Logger
	th   *throttle.Throttle
	jobs chan *dispatch // to handler goroutines

	wake chan struct{} // a notification or a freed slot: look for work now

	mu       sync.Mutex
	running  map[int64]*runningJob // claimed and not yet finished: their leases are kept
	inflight int                   // dispatched and not yet finished
	// Claimed jobs the throttle has not counted yet (their handlers have not
	// asked it): the headroom it reports does not know them, so a claim
	// takes them off.
	unadmittedCalls, unadmittedTokens int64

	learned atomic.Bool // a handler has finished: the throttle has heard from the provider
	// waitingRoom counts handlers whose claimed job waits for room in the
	// quota; while any does, the headroom is spoken for and the pool claims
	// no more.
	waitingRoom atomic.Int32
	admitMu     sync.Mutex // one throttle decision at a time (see canStart)

	stopping context.Context // done once a shutdown has begun

	followLease bool // HeartbeatInterval was not given: a third of the queue's lease, as it is now
	// beat is the heartbeats' interval now, and leaseCheck asks them to read
	// the queue's lease at once: a claim found a lease shorter than the
	// interval is made for (see dispatches).
	beat       atomic.Int64
	leaseCheck chan struct{}

	handlerCtx    context.Context // cancelled only when a shutdown runs out of time
	cancelHandler context.CancelFunc

	done *completer
}

type dispatch struct {
	job        *Job
	sentAt     time.Time // when the throttle counted it; zero: not asked yet
	claimed    time.Time
	unadmitted bool // counted in the pool's unadmitted calls and tokens
}

type runningJob struct {
	token    pgtype.UUID // the run's lease token: the same job may run again under another
	lease    *Job        // a copy holding the id and token, for heartbeats; nil once lost
	cancel   context.CancelFunc
	stopping bool // an operator cancelled the job, and its handler was told
}

func (c *Client) newPool(ctx context.Context, cfg WorkerConfig) (*pool, error) {
	if cfg.Handler == nil {
		return nil, errors.New("batchq: worker: Handler is required")
	}
	qc, err := c.Queue(ctx, cfg.Queue)
	if err != nil {
		return nil, err
	}
	if cfg.Concurrency < 0 || cfg.BatchSize < 0 {
		return nil, errors.New("batchq: worker: Concurrency and BatchSize must be >= 0")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = cfg.Concurrency
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if len(cfg.Name) > maxNameBytes {
		return nil, fmt.Errorf("batchq: worker: Name must be at most %d bytes (got %d)", maxNameBytes, len(cfg.Name))
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.MaintainInterval == 0 {
		cfg.MaintainInterval = time.Second
	}
	followLease := cfg.HeartbeatInterval <= 0
	if followLease {
		cfg.HeartbeatInterval = max(qc.Lease/3, time.Millisecond)
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = c.log
	}
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pool{
		c: c, cfg: cfg, th: cfg.Throttle,
		log:           log.With("queue", cfg.Queue, "worker", cfg.Name),
		jobs:          make(chan *dispatch),
		wake:          make(chan struct{}, 1),
		running:       map[int64]*runningJob{},
		followLease:   followLease,
		leaseCheck:    make(chan struct{}, 1),
		handlerCtx:    hctx,
		cancelHandler: hcancel,
	}
	p.beat.Store(int64(cfg.HeartbeatInterval))
	p.done = newCompleter(c, p.emit, p.log, p.untrack)
	return p, nil
}

func (p *pool) emit(e Event) {
	e.Queue = p.cfg.Queue
	if p.cfg.OnEvent != nil {
		p.cfg.OnEvent(e)
	}
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pool) run(ctx context.Context) error {
	defer p.cancelHandler()
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var bgWG sync.WaitGroup
	bgWG.Go(func() { p.done.run() })
	bgWG.Go(func() { p.listen(bg) })
	bgWG.Go(func() { p.heartbeats(bg) })
	if p.cfg.MaintainInterval > 0 {
		bgWG.Go(func() { p.maintain(bg) })
	}
	p.stopping = ctx
	var handlers sync.WaitGroup
	for range p.cfg.Concurrency {
		handlers.Go(p.handle)
	}

	err := p.fetch(ctx)

	// Shutdown: no more claims; let running handlers finish, up to the timeout.
	// Writes still failing well after that (the database is gone) are left to
	// lease expiry and rescue.
	giveUp := time.AfterFunc(2*p.cfg.ShutdownTimeout, p.done.abandon)
	defer giveUp.Stop()
	close(p.jobs)
	finished := make(chan struct{})
	go func() { handlers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(p.cfg.ShutdownTimeout):
		p.log.Warn("shutdown timeout: cancelling running handlers")
		p.cancelHandler()
		<-finished
	}
	p.done.close()
	stopBG()
	bgWG.Wait()
	if n := p.done.unrecorded.Load(); n > 0 {
		err = errors.Join(err, fmt.Errorf("%w: %d runs ended without their outcome written; their jobs will be rescued "+
			"when their leases expire, and run again", ErrUnrecorded, n))
	}
	return err
}

// fetch claims work while ctx lasts and hands it to the handlers. Jobs it
// claimed but could not hand over are released when it stops.
func (p *pool) fetch(ctx context.Context) error {
	var ready []*dispatch
	var schemaGone schemaWatch
	var pausedSince time.Time // when the queue was paused, as last seen; zero: running
	defer func() {
		for _, d := range ready {
			p.handBack(d)
		}
	}()
	// While claimed jobs wait for a free handler, the pool looks now and
	// then whether the queue was paused: then it hands them back, as they
	// have not started, and runs only what already runs.
	pauseCheck := time.NewTicker(p.cfg.PollInterval)
	defer pauseCheck.Stop()
	for {
		// Hand out what is ready while handlers are free.
		for len(ready) > 0 {
			if ctx.Err() != nil {
				return nil
			}
			select {
			case p.jobs <- ready[0]:
				ready = ready[1:]
				continue
			case <-ctx.Done():
				return nil
			case <-pauseCheck.C:
				if p.paused(ctx, &pausedSince) {
					for _, d := range ready {
						p.handBack(d)
					}
					p.addInflight(-len(ready))
					ready = nil
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		// Keep up to one batch claimed ahead of the handlers, so a handler
		// that finishes finds its next job waiting.
		free := p.cfg.Concurrency + p.cfg.BatchSize - p.inflightCount()
		if free <= 0 || p.waitingRoom.Load() > 0 {
			if !p.sleep(ctx, p.cfg.PollInterval) {
				return nil
			}
			continue
		}
		got, wait, err := p.claim(ctx, min(free, p.cfg.BatchSize))
		if err != nil && ctx.Err() == nil {
			p.emit(Event{Kind: EventError, Err: err})
			p.log.Error("claim failed", "err", err)
			wait = p.cfg.PollInterval
			if gone := schemaGone.since(err, time.Now()); gone > cmp.Or(p.c.schemaGoneAfter, schemaGoneAfter) {
				return fmt.Errorf("%w: claims have failed for %s (%v); stopping", ErrSchemaGone, gone.Round(time.Second), err)
			}
		} else {
			schemaGone = schemaWatch{}
		}
		if len(got) > 0 {
			p.addInflight(len(got))
			ready = append(ready, got...)
			continue
		}
		if err == nil {
			if paused := p.paused(ctx, &pausedSince); paused && p.cfg.Drain && p.inflightCount() == 0 {
				return fmt.Errorf("%w: %s was paused at %s, and claims take nothing until it is resumed (batchq queues resume %s)",
					ErrQueuePaused, quote(p.cfg.Queue), pausedSince.UTC().Format(time.RFC3339), p.cfg.Queue)
			}
		}
		if p.cfg.Drain && p.drained(ctx) {
			return nil
		}
		if wait <= 0 {
			wait = p.cfg.PollInterval
		}
		if !p.sleep(ctx, wait) {
			return nil
		}
	}
}

// longPause is how long a quota pause must be for the pool to log it: a
// fleet that stops for longer is worth an operator's look.
const longPause = time.Minute

// paused reports whether the pool's queue is paused, and says so in the log
// when that changes (since holds the pause's start as last seen). A claim
// that took nothing asks: a paused queue's claims take nothing.
func (p *pool) paused(ctx context.Context, since *time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	q, err := p.c.q.GetQueue(ctx, p.c.pool, p.cfg.Queue)
	if err != nil {
		return !since.IsZero()
	}
	switch {
	case q.PausedAt != nil && since.IsZero():
		p.log.Warn("queue paused; claiming nothing until it is resumed", "paused_at", q.PausedAt.UTC().Format(time.RFC3339))
		*since = *q.PausedAt
	case q.PausedAt == nil && !since.IsZero():
		p.log.Info("queue resumed")
		*since = time.Time{}
	}
	return q.PausedAt != nil
}

// schemaGoneAfter is how long a pool keeps claiming while batchq's schema
// is missing (dropped, or the database restored without it) before it
// stops: long enough for a migration's down and up, not for ever.
const schemaGoneAfter = 30 * time.Second

// schemaWatch tracks claims that fail because batchq's schema is missing.
type schemaWatch struct{ first time.Time }

// since returns how long claims have failed for a missing schema, err
// being the latest claim's error (0 when it is another error).
func (w *schemaWatch) since(err error, now time.Time) time.Duration {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "42P01" && pe.Code != "42883" && pe.Code != "3F000") {
		w.first = time.Time{}
		return 0
	}
	if w.first.IsZero() {
		w.first = now
	}
	return now.Sub(w.first)
}

// sleep waits for d, a wake-up, or ctx; it reports whether to go on.
func (p *pool) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(min(d, p.cfg.PollInterval))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-p.wake:
	case <-t.C:
	}
	return true
}

// dbCallTimeout bounds a pool's claims, drain checks and throttle writes: a
// connection that went away without a word (a failover, a NAT that forgot
// it) must cost a call, not hold it for as long as TCP retries.
const dbCallTimeout = 30 * time.Second

func (p *pool) drained(ctx context.Context) bool {
	if p.inflightCount() > 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	has, err := p.c.q.QueueHasJobs(ctx, p.c.pool, p.cfg.Queue)
	return err == nil && has.Valid && !has.Bool
}

func (p *pool) inflightCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}

func (p *pool) addInflight(n int) {
	p.mu.Lock()
	p.inflight += n
	p.mu.Unlock()
}

// claim takes up to n jobs the throttle admits. It returns how long to wait
// before trying again when it took none.
func (p *pool) claim(ctx context.Context, n int) ([]*dispatch, time.Duration, error) {
	opts := &ClaimOpts{Limit: n, Worker: p.cfg.Name}
	// A claim cut off by the shutdown could commit on the server and still
	// report an error, leaving its jobs running under a lease nobody holds
	// until they are rescued; so the claim itself is not cancelled, only
	// bounded. Jobs it returns after the shutdown began are handed back.
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
	defer cancel()
	if p.th == nil {
		jobs, expired, err := p.c.claim(claimCtx, p.cfg.Queue, opts)
		p.expired(expired)
		return p.dispatches(jobs, time.Now()), 0, err
	}

	// The jobs claimed earlier whose handlers have not asked the throttle
	// yet, counted before the headroom is read: a handler admitted in
	// between is then in both (taken off twice, which only waits a little),
	// where counted after it would be in neither, and its room claimed again.
	pc, pt := p.unadmitted()
	// Reads, bounded as the claim is; a shutdown cancels them.
	readCtx, cancelRead := context.WithTimeout(ctx, dbCallTimeout)
	defer cancelRead()
	calls, tokens, err := p.th.Headroom(readCtx, throttle.Batch)
	if err != nil {
		return nil, 0, err
	}
	if calls == math.MaxInt64 && tokens == math.MaxInt64 && !p.learned.Load() {
		// Nothing is known of the quota yet: rather than a full batch that
		// could overrun it, send one call and learn from its response.
		if p.inflightCount() > 0 {
			return nil, 10 * time.Millisecond, nil
		}
		n = 1
	}
	// Jobs claimed earlier whose handlers have not asked the throttle yet
	// will take this much of the room: claim only beyond it, and rather than
	// probe, wait for them. (A limit not known is unlimited.)
	if pc > 0 {
		if calls != math.MaxInt64 {
			calls -= pc
		}
		if tokens != math.MaxInt64 {
			tokens -= pt
		}
		if calls <= 0 || tokens <= 0 {
			return nil, 10 * time.Millisecond, nil
		}
	}
	head, ok, err := p.c.NextCost(readCtx, p.cfg.Queue)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		if p.cfg.MaintainInterval < 0 {
			// No live job is queued, but expired ones may be, and with
			// maintenance off only a claim drops them (a drain would wait
			// for them forever). A live job it takes meanwhile waits for
			// the throttle in its handler.
			jobs, expired, err := p.c.claim(claimCtx, p.cfg.Queue, &ClaimOpts{Limit: n, Worker: p.cfg.Name})
			p.expired(expired)
			return p.dispatches(jobs, time.Time{}), 0, err
		}
		return nil, 0, nil
	}
	fits := calls > 0 && tokens >= head
	if !fits && pc > 0 {
		return nil, 10 * time.Millisecond, nil
	}
	if fits {
		opts.Limit, opts.Budget = int(min(int64(n), calls)), tokens
		jobs, expired, err := p.c.claim(claimCtx, p.cfg.Queue, opts)
		p.expired(expired)
		return p.dispatches(jobs, time.Time{}), 0, err
	}

	// The head job does not fit what is known to be free: ask the throttle
	// about it. It may let one call through to learn more (a probe), say how
	// long to wait, or say the cost can never fit.
	_, d, err := p.canStart(ctx, head)
	switch {
	case err != nil:
		return nil, 0, err
	case d.Never:
		// Claim it to discard it with the reason; admitted checks each job.
		jobs, expired, err := p.c.claim(claimCtx, p.cfg.Queue, &ClaimOpts{Limit: 1, Worker: p.cfg.Name})
		p.expired(expired)
		return p.dispatches(jobs, time.Time{}), 0, err
	case !d.OK:
		p.emit(Event{Kind: EventThrottled, Wait: d.Wait})
		return nil, d.Wait, nil
	}
	opts.Limit, opts.Budget = 1, head
	jobs, expired, err := p.c.claim(claimCtx, p.cfg.Queue, opts)
	p.expired(expired)
	if len(jobs) == 0 {
		// Another pool took the head: the call admitted for it is not made.
		p.notSent(ctx, d.At, head)
	}
	return p.dispatches(jobs, d.At), 0, err // admitted above, as head
}

// notSent takes back the throttle's admission at at of a call the pool did
// not make after all.
func (p *pool) notSent(ctx context.Context, at time.Time, cost int64) {
	if p.th == nil || at.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
	defer cancel()
	if err := p.th.NotSentContext(ctx, at, cost); err != nil {
		p.emit(Event{Kind: EventError, Err: err})
	}
}

// admitted asks the throttle about a job its handler is about to send,
// unless the claim already counted it. Counting next to the send keeps calls
// reaching the provider in about the order the throttle counted them, which
// is what lets a response be read as counting the calls counted before it.
//
// The claim was sized by the throttle's headroom, so this nearly always
// admits. When another pool took the room first, the job waits for it, up
// to admitWait, keeping its place in the fair order; past that it goes back
// to its tenant's queue. One that can never fit is discarded with the
// reason (outcome 'discarded': no attempt could succeed).
func (p *pool) admitted(ctx context.Context, d *dispatch) bool {
	if p.th == nil || !d.sentAt.IsZero() {
		return true
	}
	defer p.settle(d)
	j := d.job
	if p.stopping.Err() != nil {
		// Shutting down: a job not started yet goes back.
		p.done.release(j, 0, 0)
		return false
	}
	giveUp := time.Now().Add(admitWait)
	for {
		now, dec, err := p.canStart(ctx, j.Cost)
		if err != nil {
			// The shared quota cannot be read or saved. The job waits, as for
			// room, holding its handler (and so the pool's claims), rather
			// than going back at once to be claimed again in a loop.
			p.emit(Event{Kind: EventError, Job: j, Err: err})
			p.log.Warn("throttle unavailable; the job waits", "job", j.ID, "err", err)
			dec = throttle.Decision{Wait: p.cfg.PollInterval}
		}
		switch {
		case err == nil && dec.OK:
			d.sentAt = dec.At
			return true
		case err == nil && dec.Never:
			p.done.fail(j, Permanent(fmt.Errorf("batchq: job %d can never start: its cost of %d tokens does not fit the quota at batch priority: %w",
				j.ID, j.Cost, dec.Why)), 0)
			return false
		case now.Add(dec.Wait).After(giveUp) || !p.waitForRoom(ctx, dec.Wait):
			p.done.release(j, dec.Wait, 0)
			return false
		}
	}
}

// canStart asks the throttle about one batch call. A pool's handlers ask one
// at a time: the shared state is one row, and every handler of every pool
// racing to save it would make interactive calls, which ask the same row,
// wait behind the retries.
func (p *pool) canStart(ctx context.Context, cost int64) (time.Time, throttle.Decision, error) {
	p.admitMu.Lock()
	defer p.admitMu.Unlock()
	// Bounded as every throttle write is: a connection that went away
	// without a word would hold every handler of the pool behind this one.
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	now := time.Now()
	dec, err := p.th.CanStartContext(ctx, now, cost, throttle.Batch)
	return now, dec, err
}

// admitWait bounds how long a claimed job waits for room in the quota that
// another pool took first.
const admitWait = 5 * time.Second

// waitForRoom sleeps for d while the claim loop holds off claiming more; it
// reports false if ctx ended or a shutdown began first.
func (p *pool) waitForRoom(ctx context.Context, d time.Duration) bool {
	p.waitingRoom.Add(1)
	defer p.waitingRoom.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-p.stopping.Done():
		return false
	case <-t.C:
		return true
	}
}

// dispatches wraps claimed jobs for the handlers. From here their leases are
// kept by the heartbeat, also while they wait for a free handler, and the
// ones the throttle has not counted yet are taken off its headroom.
func (p *pool) dispatches(jobs []*Job, sentAt time.Time) []*dispatch {
	out := make([]*dispatch, len(jobs))
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.followLease {
		// A lease shorter than the beats were spaced for: the queue's lease
		// was shortened since the heartbeats last read it, and these jobs'
		// leases would run out before the next beat. (A database clock far
		// behind this one looks the same; then the read finds nothing new.)
		beat := time.Duration(p.beat.Load())
		for _, j := range jobs {
			if j.LeaseExpiresAt.Sub(now) < 3*beat-beat/2 {
				select {
				case p.leaseCheck <- struct{}{}:
				default:
				}
				break
			}
		}
	}
	for i, j := range jobs {
		d := &dispatch{job: j, sentAt: sentAt, claimed: now}
		if p.th != nil && sentAt.IsZero() {
			d.unadmitted = true
			p.unadmittedCalls++
			p.unadmittedTokens += j.Cost
		}
		p.trackLocked(j, func() {})
		out[i] = d
	}
	return out
}

// settle takes d off the unadmitted count, once the throttle has decided
// about it or it will not be asked.
func (p *pool) settle(d *dispatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.unadmitted {
		d.unadmitted = false
		p.unadmittedCalls--
		p.unadmittedTokens -= d.job.Cost
	}
}

// unadmitted returns the calls and tokens of claimed jobs the throttle has
// not counted yet.
func (p *pool) unadmitted() (calls, tokens int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unadmittedCalls, p.unadmittedTokens
}

// trackLocked makes j's run the one whose lease the heartbeat keeps, and
// whose handler cancel stops when that lease is lost. p.mu is held. A run of
// the same job under another token has lost its lease: the job was claimed
// again, which only a lost lease allows (say, rescued while this process
// stalled, before the heartbeat noticed). That run's handler is cancelled
// now, rather than left running beside the new one.
func (p *pool) trackLocked(j *Job, cancel context.CancelFunc) {
	if r, ok := p.running[j.ID]; ok && r.token != j.token && r.lease != nil {
		p.log.Warn("job claimed again while a run of it under an earlier lease is still going; cancelling that run", "job", j.ID)
		r.lease = nil
		r.cancel()
	}
	p.running[j.ID] = &runningJob{token: j.token, lease: &Job{ID: j.ID, Queue: j.Queue, token: j.token}, cancel: cancel}
}

// untrack stops keeping the lease of j's run, unless the job already runs
// again under another token (a stale run outlived its lease).
func (p *pool) untrack(j *Job) {
	p.mu.Lock()
	if r, ok := p.running[j.ID]; ok && r.token == j.token {
		delete(p.running, j.ID)
	}
	p.mu.Unlock()
}

func (p *pool) expired(jobs []*Job) {
	for _, j := range jobs {
		p.emit(Event{Kind: EventExpired, Job: j})
	}
}

// handle runs handlers for dispatched jobs until the pool closes p.jobs.
func (p *pool) handle() {
	for d := range p.jobs {
		p.runJob(d)
		p.mu.Lock()
		p.inflight--
		p.mu.Unlock()
		p.poke()
	}
}

func (p *pool) runJob(d *dispatch) {
	j := d.job
	ctx, cancel := context.WithCancel(p.handlerCtx)
	defer cancel()
	// The run stays tracked, its lease kept, until the completer has written
	// what became of it (every path below hands the job to p.done, which
	// untracks it then), except where no finish is written: its lease was
	// lost.
	p.mu.Lock()
	lostWaiting := p.leaseLostLocked(j)
	if !lostWaiting {
		p.trackLocked(j, cancel)
	}
	p.mu.Unlock()
	if lostWaiting {
		// The lease was lost while the job waited for a handler: the
		// heartbeat found it so, or this pool claimed the job again under
		// another token. Another run holds it now.
		p.untrack(j)
		p.settle(d)
		p.notSent(ctx, d.sentAt, j.Cost)
		p.emit(Event{Kind: EventFinished, Job: j, Outcome: "lease_lost"})
		return
	}

	if p.pastDeadline(d) || !p.admitted(ctx, d) || p.pastDeadline(d) {
		return
	}
	p.emit(Event{Kind: EventClaimed, Job: j, Wait: d.claimed.Sub(j.EnqueuedAt)})
	start := time.Now()
	res, err := p.call(ctx, j)
	received := time.Now()
	defer p.learned.Store(true)
	took := received.Sub(start)

	status := 0
	if res.Response != nil {
		status = res.Response.StatusCode
	}
	// A handler may say ErrRateLimited about a response that is not a 429
	// (a 503 "overloaded" with Retry-After, say): the fleet pauses all the
	// same, and the response is not taken for a success.
	limitedOther := errors.Is(err, ErrRateLimited) && status != http.StatusTooManyRequests
	if res.Response != nil && p.th != nil && !limitedOther {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
		if oerr := p.th.ObserveResponseContext(octx, d.sentAt, received, res.Response); oerr != nil {
			p.emit(Event{Kind: EventError, Job: j, Err: oerr})
		}
		cancel()
	}

	switch {
	case status == http.StatusTooManyRequests || errors.Is(err, ErrRateLimited):
		wait := retryAfter(res.Response, received)
		if p.th != nil && limitedOther {
			// Sent when the throttle admitted it: the calls in flight with it
			// are one episode, not a doubling of the pause each.
			sent := d.sentAt
			if sent.IsZero() {
				sent = received
			}
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
			if terr := p.th.TooManyRequestsSentContext(tctx, sent, received, wait); terr != nil {
				p.emit(Event{Kind: EventError, Job: j, Err: terr})
			}
			cancel()
		}
		asked := wait
		if p.th != nil {
			// The pause the throttle keeps: its default (doubling) without a
			// Retry-After, a Retry-After capped at MaxRetryAfter.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
			if pause, perr := p.th.PauseAt(pctx, received); perr == nil {
				wait = pause
			}
			cancel()
		}
		if p.th != nil && wait > longPause {
			reason := fmt.Sprintf("HTTP %d without Retry-After", status)
			if asked > 0 {
				reason = fmt.Sprintf("HTTP %d with Retry-After %s", status, asked.Round(time.Second))
			}
			p.log.Warn("quota paused", "key", p.th.Key(), "reason", reason,
				"until", received.Add(wait).UTC().Format(time.RFC3339), "for", wait.Round(time.Second))
		}
		p.emit(Event{Kind: EventRateLimited, Job: j, Wait: wait})
		p.done.release(j, wait, took)
	case err == nil:
		p.done.complete(j, res, took)
	case p.handlerCtx.Err() != nil:
		// The shutdown ran out of time and cancelled the handler. The call
		// may have reached the provider, and been billed: it is an attempt,
		// and the tenant pays for it. The job is retried as after a failure,
		// with the next attempt's number, so a provider that deduplicates by
		// it never takes the next run for this one.
		p.done.fail(j, fmt.Errorf("batchq: the worker shut down and cancelled the call after ShutdownTimeout: %w", err), took)
	case ctx.Err() != nil && p.leaseLost(j):
		p.untrack(j)
		p.emit(Event{Kind: EventFinished, Job: j, Outcome: "lease_lost", Duration: took})
	default:
		p.done.fail(j, err, took)
	}
}

// pastDeadline hands back, unstarted, a job whose deadline passed after its
// claim, while it waited for a handler or for room in the quota: no quota is
// spent on it. Released, it waits in 'retrying' until maintenance (or a
// claim, once it is queued again) records it as expired, its cost refunded
// to its tenant, as for any job that expires before it runs.
func (p *pool) pastDeadline(d *dispatch) bool {
	if time.Now().Before(d.job.Deadline) {
		return false
	}
	p.log.Info("deadline passed before the job started; handing it back to expire", "job", d.job.ID)
	p.handBack(d)
	return true
}

// handBack returns a claimed job that was not started to its tenant's
// queue, without using an attempt. If the throttle counted its call (a
// probe's claim, or its handler was admitted), the admission is taken back:
// the call was not made, and a probe's answer must not be waited for.
func (p *pool) handBack(d *dispatch) {
	p.settle(d)
	p.notSent(p.handlerCtx, d.sentAt, d.job.Cost)
	p.done.release(d.job, 0, 0)
}

// call runs the handler, turning a panic into a permanent failure.
func (p *pool) call(ctx context.Context, j *Job) (res Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("batchq: handler panicked: %v", r))
		}
	}()
	return p.cfg.Handler(ctx, j)
}

func retryAfter(resp *http.Response, received time.Time) time.Duration {
	if resp == nil {
		return 0
	}
	d, _ := quotaheaders.RetryAfter(resp.Header, quotaheaders.ProviderClock(resp.Header, received))
	return d
}

// leaseLost reports whether the lease of j's run is known to be lost: the
// heartbeat found it so, or the job runs again under another token.
func (p *pool) leaseLost(j *Job) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leaseLostLocked(j)
}

// leaseLostLocked is leaseLost with p.mu held. A run is tracked from its
// claim until its handler returns, so a run that is not, or is tracked under
// another token, was displaced by a later claim of the job.
func (p *pool) leaseLostLocked(j *Job) bool {
	r, ok := p.running[j.ID]
	return !ok || r.token != j.token || r.lease == nil
}

// heartbeats extends the leases of running jobs and cancels the handlers of
// jobs whose lease was lost.
func (p *pool) heartbeats(ctx context.Context) {
	interval := p.cfg.HeartbeatInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	var checked time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.leaseCheck:
			// At most once a second: a clock far off would ask at every claim.
			if time.Since(checked) < time.Second {
				continue
			}
			checked = time.Now()
			if !p.followQueueLease(ctx, &interval, t) {
				continue
			}
		}
		p.heartbeat(ctx, &interval, t)
	}
}

// followQueueLease reads the queue's lease and, if it changed, spaces the
// beats a third of it apart, since heartbeats extend leases by its new
// length; it reports whether it changed.
func (p *pool) followQueueLease(bg context.Context, interval *time.Duration, t *time.Ticker) bool {
	ctx, cancel := context.WithTimeout(bg, heartbeatTry(*interval))
	qc, err := p.c.Queue(ctx, p.cfg.Queue)
	cancel()
	if err != nil || max(qc.Lease/3, time.Millisecond) == *interval {
		return false
	}
	*interval = max(qc.Lease/3, time.Millisecond)
	p.beat.Store(int64(*interval))
	p.log.Info("queue lease changed; heartbeats follow it", "lease", qc.Lease, "interval", *interval)
	t.Reset(*interval)
	return true
}

// heartbeatTry bounds one try of a beat: a quarter of the interval, from 1 s
// to 10 s.
func heartbeatTry(interval time.Duration) time.Duration {
	return min(max(interval/4, time.Second), 10*time.Second)
}

// heartbeat is one beat of heartbeats. A try that gets no answer gives up
// after a quarter of the interval (from 1 s to 10 s) and closes its
// connection, and the beat tries again at once, on another: a connection
// that went away without a word (a failover, a NAT that forgot it) would
// otherwise hold the beat for as long as TCP retries, while every running
// job's lease ran out and other workers ran the jobs again. Tries go through
// the pool's dead connections, one each, to a live one. Any other error
// waits for the next beat.
func (p *pool) heartbeat(bg context.Context, interval *time.Duration, t *time.Ticker) {
	if p.followLease {
		// The queue's lease may have changed (UpdateQueue): heartbeats
		// extend leases by its new length, so they must come a third of
		// it apart, or a shortened lease would run out between them.
		p.followQueueLease(bg, interval, t)
	}
	try := heartbeatTry(*interval)
	p.mu.Lock()
	leases := make([]*Job, 0, len(p.running))
	for _, r := range p.running {
		if r.lease != nil {
			leases = append(leases, &Job{ID: r.lease.ID, Queue: r.lease.Queue, token: r.lease.token})
		}
	}
	p.mu.Unlock()
	var lost, stop []run
	for {
		ctx, cancel := context.WithTimeout(bg, try)
		var err error
		lost, stop, err = p.c.heartbeat(ctx, leases)
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			break
		}
		if bg.Err() != nil {
			return
		}
		p.emit(Event{Kind: EventError, Err: err})
		p.log.Warn("heartbeat failed", "err", err)
		if !timedOut {
			return // the next beat tries again
		}
	}
	p.mu.Lock()
	for _, l := range lost {
		// Only the run the heartbeat was about: the job may have been
		// handed back and claimed again, under a new token, meanwhile.
		if r, ok := p.running[l.id]; ok && r.lease != nil && r.lease.token == l.token {
			p.log.Warn("lease lost; cancelling the handler", "job", l.id)
			r.lease = nil
			r.cancel()
		}
	}
	for _, s := range stop {
		// The run keeps its lease: its end is recorded, as 'cancelled'.
		if r, ok := p.running[s.id]; ok && r.lease != nil && r.lease.token == s.token && !r.stopping {
			p.log.Info("an operator cancelled the job; cancelling the handler", "job", s.id)
			r.stopping = true
			r.cancel()
		}
	}
	p.mu.Unlock()
}

// maintain runs Maintain on the pool's queue every MaintainInterval, at once
// again while a pass hits its bounds.
func (p *pool) maintain(ctx context.Context) {
	t := time.NewTicker(p.cfg.MaintainInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil {
			// Bounded, as every call the pool makes: a pass on a connection
			// that went away silently must not stop maintenance for good. A
			// whole fold of a ten-million-job backlog fits.
			mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			st, done, err := p.c.maintain(mctx, p.cfg.Queue)
			cancel()
			// What the pass finished is reported as what claims finish is,
			// so expiries and rescued jobs that failed reach the metrics:
			// the sweep, not a claim, expires most jobs that expire.
			for _, s := range done {
				j := &Job{ID: s.id, Queue: p.cfg.Queue, Tenant: s.tenant, Cost: s.cost}
				if s.outcome == "expired" {
					p.emit(Event{Kind: EventExpired, Job: j})
				} else {
					p.emit(Event{Kind: EventFinished, Job: j, Outcome: s.outcome})
				}
			}
			if err != nil {
				if ctx.Err() == nil {
					p.emit(Event{Kind: EventError, Err: err})
					p.log.Warn("maintenance failed", "err", err)
				}
				break
			}
			if st.Requeued > 0 {
				p.poke()
			}
			if len(st.Analyzed) > 0 {
				p.log.Info("refreshed stale planner statistics", "tables", st.Analyzed)
			}
			if !st.More() {
				break
			}
		}
	}
}

// listen wakes the fetcher when an enqueue or requeue in this queue commits.
// Polling covers the gaps while it reconnects.
func (p *pool) listen(ctx context.Context) {
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for ctx.Err() == nil {
		listened, err := p.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = firstBackoff // it was connected: a new interruption starts over
		}
		p.emit(Event{Kind: EventError, Err: fmt.Errorf("batchq: listen for notifications: %w", err)})
		p.log.Warn("notifications interrupted; polling until reconnected", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// listenOnce listens until the connection fails; it reports whether LISTEN
// took effect first.
func (p *pool) listenOnce(ctx context.Context) (bool, error) {
	conn, err := p.c.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer releaseListener(conn)
	if _, err := conn.Exec(ctx, "LISTEN batchq_jobs"); err != nil {
		return false, err
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Payload == p.cfg.Queue {
			p.poke()
		}
	}
}

// releaseListener returns a listening connection to the pool only after
// UNLISTEN; a connection that cannot be cleaned is closed instead.
func releaseListener(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "UNLISTEN *"); err != nil {
		conn.Conn().Close(ctx)
	}
	conn.Release()
}
