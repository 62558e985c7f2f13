package queue

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// leaseKeeper keeps the leases of the jobs a pool holds, from their claim
// until their outcome is written: it heartbeats them, follows the queue's
// lease as an operator changes it, and cancels the handler of a run whose
// lease was lost or that an operator cancelled.
type leaseKeeper struct {
	c     *Client
	queue string
	log   *slog.Logger
	emit  func(Event)

	mu      sync.Mutex
	running map[int64]*runningJob // claimed and not yet finished

	// follow: HeartbeatInterval was not given, so beats come a third of the
	// queue's lease apart, as it is now.
	follow bool
	// beat is the heartbeats' interval now, lease the queue's lease as last
	// read; check asks the heartbeats to read the lease at once (a claim
	// found one shorter than the beats were spaced for).
	beat  atomic.Int64
	lease atomic.Int64
	check chan struct{}
}

type runningJob struct {
	token    pgtype.UUID // the run's lease token: the same job may run again under another
	lost     bool        // its lease was lost: no more heartbeats
	cancel   context.CancelFunc
	stopping bool // an operator cancelled the job, and its handler was told
}

func newLeaseKeeper(c *Client, queue string, log *slog.Logger, emit func(Event), lease, interval time.Duration, follow bool) *leaseKeeper {
	k := &leaseKeeper{c: c, queue: queue, log: log, emit: emit, running: map[int64]*runningJob{},
		follow: follow, check: make(chan struct{}, 1)}
	k.beat.Store(int64(interval))
	k.lease.Store(int64(lease))
	return k
}

// Lease is the queue's lease as last read.
func (k *leaseKeeper) Lease() time.Duration { return time.Duration(k.lease.Load()) }

// claimed starts keeping the leases of jobs a claim took: also while they
// wait for a free handler.
func (k *leaseKeeper) claimed(jobs []*Job, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.follow {
		// A lease shorter than the beats were spaced for: the queue's lease
		// was shortened since the heartbeats last read it, and these jobs'
		// leases would run out before the next beat. (A database clock far
		// behind this one looks the same; then the read finds nothing new.)
		beat := time.Duration(k.beat.Load())
		for _, j := range jobs {
			if j.LeaseExpiresAt.Sub(now) < 3*beat-beat/2 {
				select {
				case k.check <- struct{}{}:
				default:
				}
				break
			}
		}
	}
	for _, j := range jobs {
		k.trackLocked(j, func() {})
	}
}

// startState is what start found of a run about to start.
type startState int

const (
	startOK        startState = iota
	startLost                 // its lease was lost while it waited: another run holds the job
	startCancelled            // an operator cancelled it while it waited: it must not start
)

// start makes cancel the one a lost lease or an operator's cancel calls for
// j's run, as its handler is about to start, unless the run must not start:
// its lease was lost while the job waited (the heartbeat found it so, or the
// pool claimed the job again under another token), or an operator cancelled
// it meanwhile.
func (k *leaseKeeper) start(j *Job, cancel context.CancelFunc) startState {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostLocked(j) {
		return startLost
	}
	r := k.running[j.ID]
	if r.stopping {
		return startCancelled
	}
	r.cancel = cancel
	return startOK
}

// trackLocked makes j's run the one whose lease the heartbeat keeps, and
// whose handler cancel stops when that lease is lost. k.mu is held. A run of
// the same job under another token has lost its lease: the job was claimed
// again, which only a lost lease allows (say, rescued while this process
// stalled, before the heartbeat noticed). That run's handler is cancelled
// now, rather than left running beside the new one.
func (k *leaseKeeper) trackLocked(j *Job, cancel context.CancelFunc) {
	if r, ok := k.running[j.ID]; ok && r.token != j.token && !r.lost {
		k.log.Warn("job claimed again while a run of it under an earlier lease is still going; cancelling that run", "job", j.ID)
		r.lost = true
		r.cancel()
	}
	k.running[j.ID] = &runningJob{token: j.token, cancel: cancel}
}

// untrack stops keeping the lease of j's run, unless the job already runs
// again under another token (a stale run outlived its lease).
func (k *leaseKeeper) untrack(j *Job) {
	k.mu.Lock()
	if r, ok := k.running[j.ID]; ok && r.token == j.token {
		delete(k.running, j.ID)
	}
	k.mu.Unlock()
}

// lost reports whether the lease of j's run is known to be lost: the
// heartbeat found it so, or the job runs again under another token.
func (k *leaseKeeper) lost(j *Job) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lostLocked(j)
}

// lostLocked is lost with k.mu held. A run is tracked from its claim until
// its outcome is written, so a run that is not, or is tracked under another
// token, was displaced by a later claim of the job.
func (k *leaseKeeper) lostLocked(j *Job) bool {
	r, ok := k.running[j.ID]
	return !ok || r.token != j.token || r.lost
}

// run extends the leases of held jobs every beat until ctx is done.
func (k *leaseKeeper) run(ctx context.Context) {
	interval := time.Duration(k.beat.Load())
	t := time.NewTicker(interval)
	defer t.Stop()
	var checked time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-k.check:
			// At most once a second: a clock far off would ask at every claim.
			if time.Since(checked) < time.Second {
				continue
			}
			checked = time.Now()
			if !k.followQueueLease(ctx, &interval, t) {
				continue
			}
		}
		k.heartbeat(ctx, &interval, t)
	}
}

// followQueueLease reads the queue's lease and, if it changed, spaces the
// beats a third of it apart, since heartbeats extend leases by its new
// length; it reports whether it changed.
func (k *leaseKeeper) followQueueLease(bg context.Context, interval *time.Duration, t *time.Ticker) bool {
	ctx, cancel := context.WithTimeout(bg, heartbeatTry(*interval))
	qc, err := k.c.Queue(ctx, k.queue)
	cancel()
	if err != nil {
		return false
	}
	k.lease.Store(int64(qc.Lease))
	if max(qc.Lease/3, time.Millisecond) == *interval {
		return false
	}
	*interval = max(qc.Lease/3, time.Millisecond)
	k.beat.Store(int64(*interval))
	k.log.Info("queue lease changed; heartbeats follow it", "lease", qc.Lease, "interval", *interval)
	t.Reset(*interval)
	return true
}

// heartbeatTry bounds one try of a beat: a quarter of the interval, from 1 s
// to 10 s.
func heartbeatTry(interval time.Duration) time.Duration {
	return min(max(interval/4, time.Second), 10*time.Second)
}

// heartbeat is one beat. A try that gets no answer gives up after a quarter
// of the interval (from 1 s to 10 s) and closes its connection, and the beat
// tries again at once, on another: a connection that went away without a
// word (a failover, a NAT that forgot it) would otherwise hold the beat for
// as long as TCP retries, while every running job's lease ran out and other
// workers ran the jobs again. Tries go through the pool's dead connections,
// one each, to a live one. Any other error waits for the next beat.
func (k *leaseKeeper) heartbeat(bg context.Context, interval *time.Duration, t *time.Ticker) {
	if k.follow {
		// The queue's lease may have changed (UpdateQueue): heartbeats
		// extend leases by its new length, so they must come a third of
		// it apart, or a shortened lease would run out between them.
		k.followQueueLease(bg, interval, t)
	}
	try := heartbeatTry(*interval)
	k.mu.Lock()
	leases := make([]*Job, 0, len(k.running))
	for id, r := range k.running {
		if !r.lost {
			leases = append(leases, &Job{ID: id, Queue: k.queue, token: r.token})
		}
	}
	k.mu.Unlock()
	if h := k.c.beforeHeartbeat; h != nil {
		h()
	}
	var lost, stop []run
	for {
		ctx, cancel := context.WithTimeout(bg, try)
		var err error
		lost, stop, err = k.c.heartbeat(ctx, leases)
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			break
		}
		if bg.Err() != nil {
			return
		}
		k.emit(Event{Kind: EventError, Err: err})
		k.log.Warn("heartbeat failed", "err", err)
		if !timedOut {
			return // the next beat tries again
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range lost {
		// Only the run the heartbeat was about: the job may have been
		// handed back and claimed again, under a new token, meanwhile.
		if r, ok := k.running[l.id]; ok && !r.lost && r.token == l.token {
			k.log.Warn("lease lost; cancelling the handler", "job", l.id)
			r.lost = true
			r.cancel()
		}
	}
	k.stoppingLocked(stop)
}

// stopping marks the runs an operator cancelled, and cancels the handlers
// of those that started: a run not started yet must not start.
func (k *leaseKeeper) stopping(stop []run) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stoppingLocked(stop)
}

// stoppingLocked is stopping with k.mu held.
func (k *leaseKeeper) stoppingLocked(stop []run) {
	for _, s := range stop {
		// The run keeps its lease: its end is recorded, as 'cancelled'.
		if r, ok := k.running[s.id]; ok && !r.lost && r.token == s.token && !r.stopping {
			k.log.Info("an operator cancelled the job; cancelling the handler", "job", s.id)
			r.stopping = true
			r.cancel()
		}
	}
}
