package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

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
	// BatchSize is the most jobs one claim takes. The pool claims ahead:
	// its next claim runs while the handlers work through the last one,
	// and up to BatchSize jobs wait for a handler, fewer when handlers run
	// so long that a job claimed ahead would wait more than about a second
	// for one, and none before any handler has run. A job that waits more
	// than a quarter of the queue's lease, or that a shutdown or a pause
	// finds waiting, goes back to its tenant's queue without using an
	// attempt. 0: Concurrency.
	BatchSize int
	// Throttle, when set, paces the pool: it claims only what the
	// throttle's headroom at batch priority allows, asks the throttle for
	// each job as its handler is about to send it, feeds it every response,
	// and discards a job whose cost the quota can never grant. A job whose room
	// another pool took first waits for the refill, up to 5s, then goes back
	// to its tenant's queue. Use Client.Throttle for a state shared by the
	// whole fleet. nil: no pacing.
	Throttle *throttle.Throttle
	// Name identifies the worker in outcomes and logs: 1-256 bytes of UTF-8
	// without control characters. "": host:pid.
	Name string
	// PollInterval is how often the pool looks for work when no notification
	// says there is some. 0: 1s. Enqueues notify only for tenants that had
	// nothing queued (see batchq.enqueue), so a pool that went idle while an
	// enqueue for a tenant with a backlog was open may find its jobs by
	// polling.
	PollInterval time.Duration
	// MaintainInterval is how often the pool runs Maintain on its queue
	// (rescuing lost leases, expiring, requeueing due retries and scheduled
	// jobs, firing the queue's schedules, applying cost corrections). 0: 1s.
	// Negative: never.
	MaintainInterval time.Duration
	// HeartbeatInterval is how often running jobs' leases are extended.
	// 0: a third of the queue's lease, followed as the lease changes: each
	// heartbeat reads it again, and extends leases by the new length.
	HeartbeatInterval time.Duration
	// ShutdownTimeout bounds how long a graceful shutdown waits for running
	// handlers before cancelling them. 0: 30s. Writes of what they did that
	// still fail or hang at twice this are given up (Work returns
	// ErrUnrecorded): their jobs wait for their leases to expire and the
	// rescue.
	ShutdownTimeout time.Duration
	// Drain makes Work return once the queue has nothing queued, running,
	// waiting to retry or scheduled: for scripts and tests.
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

// pool is one WorkerConfig at work: a fetcher claiming in the fair order
// (fetcher.go), Concurrency handlers (executor.go), asking the throttle
// through admission (admission.go), a lease keeper heartbeating what it
// holds (heartbeat.go), a completer writing outcomes in batches
// (completer.go), maintenance (maintainer.go) and a listener for
// notifications (notifier.go).
type pool struct {
	c   *Client
	cfg WorkerConfig
	log *slog.Logger

	waiting *waitingJobs  // claimed, for the handlers to take
	wake    chan struct{} // a notification or a freed slot: look for work now
	// pausedNow says the queue was just paused (a notification): hand back
	// the jobs waiting for a handler now, not at the next pause check.
	pausedNow chan struct{}
	// inflight counts claimed jobs no handler has finished with: waiting for
	// a handler, or running.
	inflight atomic.Int64
	// meanRun is how long handlers run, on average lately (ns); 0: none ran.
	meanRun atomic.Int64
	// heldBack: the fetcher claims nothing until the completer's write in
	// flight ends (see stalledWrites); the completer then wakes it.
	heldBack atomic.Bool

	admission *admission
	leases    *leaseKeeper
	done      *completer

	stopping context.Context // done once a shutdown has begun

	handlerCtx    context.Context // cancelled only when a shutdown runs out of time
	cancelHandler context.CancelFunc
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
	// Stored with each outcome: a name the database refuses would fail
	// every claim, for ever.
	if rule := NameRule(cfg.Name); rule != "" {
		return nil, fmt.Errorf("batchq: worker: Name %s", rule)
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
		c: c, cfg: cfg,
		log:           log.With("queue", cfg.Queue, "worker", cfg.Name),
		waiting:       newWaitingJobs(),
		wake:          make(chan struct{}, 1),
		pausedNow:     make(chan struct{}, 1),
		admission:     &admission{th: cfg.Throttle},
		handlerCtx:    hctx,
		cancelHandler: hcancel,
	}
	p.meanRun.Store(int64(c.assumedRun))
	p.leases = newLeaseKeeper(c, cfg.Queue, p.log, p.emit, qc.Lease, cfg.HeartbeatInterval, followLease)
	p.done = newCompleter(c, p.emit, p.log, p.leases.untrack)
	p.done.afterWrite = func() {
		if p.heldBack.Load() {
			p.poke()
		}
	}
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
	bgWG.Go(func() { p.leases.run(bg) })
	if p.cfg.MaintainInterval > 0 {
		bgWG.Go(func() { p.maintainEvery(bg) })
	}
	p.stopping = ctx
	var handlers sync.WaitGroup
	for range p.cfg.Concurrency {
		handlers.Go(p.handle)
	}

	// fetch closes p.waiting as it returns, handing back the jobs no
	// handler took, so handlers end with what they run.
	err := p.fetch(ctx)

	// Shutdown: no more claims; let running handlers finish, up to the timeout.
	// Writes still failing well after that (the database is gone) are left to
	// lease expiry and rescue.
	giveUp := time.AfterFunc(2*p.cfg.ShutdownTimeout, p.done.abandon)
	defer giveUp.Stop()
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

// dbCallTimeout bounds a pool's claims, drain checks and throttle writes: a
// connection that went away without a word (a failover, a NAT that forgot
// it) must cost a call, not hold it for as long as TCP retries.
const dbCallTimeout = 30 * time.Second
