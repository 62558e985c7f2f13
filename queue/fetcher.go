package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/batchq/batchq/throttle"
)

// The fetcher claims jobs in the fair order and hands them to the pool's
// handlers. It claims ahead: the next claim runs while the handlers work
// through the last one, so a handler that finishes finds a job waiting
// rather than a claim to wait for. At most one claim is in flight, sized by
// the free handler slots plus a prefetch, and never more than BatchSize.
//
// A prefetched job holds a lease while it waits. The prefetch is sized so
// that the handlers are expected to start each one within prefetchWait of
// its claim (see prefetch), and one still waiting after maxReadyWait is
// handed back to its tenant's queue, unstarted and without using an
// attempt, for the fleet to run.

// maxReadyWait is the longest a claimed job waits for a free handler before
// it is handed back: a quarter of the queue's lease.
func maxReadyWait(lease time.Duration) time.Duration { return lease / 4 }

// claimed is what one claim returned.
type claimed struct {
	got  []*dispatch
	wait time.Duration // took nothing: how long before claiming again
	err  error
}

// fetch claims work while ctx lasts and leaves it in p.waiting for the
// handlers. Jobs claimed that no handler took are handed back when it stops.
func (p *pool) fetch(ctx context.Context) error {
	var (
		inFlight    bool // a claim runs
		results     = make(chan claimed, 1)
		notBefore   time.Time // the last claim took nothing: none before this, unless woken
		refused     refusalWatch
		pausedSince time.Time // when the queue was paused, as last seen; zero: running
		cancelsSeen time.Time // when waiting jobs were last looked at for cancels
	)
	defer func() {
		// First, so no handler starts another job while a claim in flight
		// is waited for.
		p.handBackAll(p.waiting.close())
		if inFlight {
			r := <-results
			p.inflight.Add(int64(len(r.got)))
			p.handBackAll(r.got)
		}
	}()
	timer := time.NewTimer(p.cfg.PollInterval)
	defer timer.Stop()
	// While claimed jobs wait for a free handler, the pool looks once every
	// pauseCheckEvery whether the queue was paused: then it hands them back,
	// as they have not started, and runs only what already runs.
	pauseCheck := time.NewTicker(cmp.Or(p.c.pauseCheckEvery, pauseCheckEvery))
	defer pauseCheck.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		p.handBackStale(now)
		if !inFlight && !now.Before(notBefore) && !p.stalledWrites(now) {
			if n := p.claimSize(p.waiting.len()); n > 0 {
				inFlight = true
				go func() {
					got, wait, err := p.claim(ctx, n)
					results <- claimed{got, wait, err}
				}()
			}
		}
		timer.Reset(p.nextLook(now, notBefore, inFlight))
		select {
		case <-ctx.Done():
			return nil
		case r := <-results:
			inFlight = false
			if len(r.got) > 0 {
				p.inflight.Add(int64(len(r.got)))
				// Jobs from a queue last seen paused: claimed just before
				// the pause took (hand them back, before a handler can take
				// one), or it was resumed (say so now, not when the queue
				// next runs empty).
				if !pausedSince.IsZero() && p.paused(ctx, &pausedSince) {
					p.handBackAll(r.got)
				} else {
					p.waiting.add(r.got)
				}
			}
			if r.err != nil && ctx.Err() == nil {
				p.emit(Event{Kind: EventError, Err: r.err})
				p.log.Error("claim failed", "err", r.err)
				notBefore = time.Now().Add(p.cfg.PollInterval)
				if failing, stop := refused.since(r.err, time.Now()); failing > cmp.Or(p.c.refusedFor, refusedFor) {
					return fmt.Errorf("%w: claims have failed for %s (%w); stopping", stop, failing.Round(time.Second), r.err)
				}
				continue
			}
			refused = refusalWatch{}
			if len(r.got) > 0 || r.err != nil {
				continue
			}
			if p.paused(ctx, &pausedSince) && p.cfg.Drain && p.inflight.Load() == 0 {
				return fmt.Errorf("%w: %s was paused at %s, and claims take nothing until it is resumed (batchq queues resume %s)",
					ErrQueuePaused, quote(p.cfg.Queue), pausedSince.UTC().Format(time.RFC3339), p.cfg.Queue)
			}
			if p.cfg.Drain && p.drained(ctx) {
				return nil
			}
			notBefore = time.Now().Add(cmp.Or(r.wait, p.cfg.PollInterval))
		case <-p.wake:
			// A notification, a handler freed its slot, or took the last
			// job waiting: look now.
			notBefore = time.Time{}
		case <-timer.C:
		case <-pauseCheck.C:
			if p.waiting.len() > 0 && p.paused(ctx, &pausedSince) {
				p.handBackAll(p.waiting.takeAll())
			}
			p.handBackCancelled(ctx, &cancelsSeen)
		case <-p.pausedNow:
			// An operator paused the queue: the jobs claimed ahead go back
			// now, unstarted, not at the next pause check.
			if p.paused(ctx, &pausedSince) {
				p.handBackAll(p.waiting.takeAll())
			}
		}
	}
}

// stalledWrites reports whether the completer's write in flight has taken
// longer than writeStall: then the pool claims nothing until it ends. The
// jobs it writes keep their leases only while they can be heartbeaten, and
// the handlers, free again, would otherwise go on claiming and calling the
// provider for jobs whose outcomes cannot be written either: an operator's
// open transaction holding a row the write needs, a schema migrated down
// under the worker, a database refusing writes. Those runs would then lose
// their leases and be sent again.
func (p *pool) stalledWrites(now time.Time) bool {
	limit := writeStall(p.leases.Lease())
	if p.done.writingFor(now) > limit {
		held := p.heldBack.Swap(true)
		// Looked at again once heldBack is set: a write that ended in
		// between woke nobody.
		if took := p.done.writingFor(time.Now()); took > limit {
			if !held {
				p.log.Warn("outcomes have waited to be written; claiming nothing until they are",
					"waited", took.Round(time.Millisecond))
			}
			return true
		}
	}
	if p.heldBack.Swap(false) {
		p.log.Info("outcomes are written again; claiming again")
	}
	return false
}

// writeStall is how long a write of outcomes may take before the pool stops
// claiming: a second, far longer than a write takes, or a quarter of the
// queue's lease if that is shorter.
func writeStall(lease time.Duration) time.Duration { return min(time.Second, lease/4) }

// claimSize is how many jobs the next claim asks for, 0 for none yet. The
// pool holds up to Concurrency + prefetch jobs, running or waiting for a
// handler. The next claim starts once a whole batch fits, while the
// handlers still work on what they have, and asks for the batch: claims of
// part of a batch cost more statements per job, for the same jobs. When no
// job waits, it takes whatever fits. It claims nothing while a handler
// waits for room in the quota: the headroom is spoken for.
func (p *pool) claimSize(ready int) int {
	if p.admission.busy() {
		return 0
	}
	hold := p.cfg.Concurrency + p.prefetch()
	room := hold - int(p.inflight.Load())
	if room <= 0 || (ready > 0 && room < min(p.cfg.BatchSize, hold)) {
		return 0
	}
	return min(room, p.cfg.BatchSize)
}

// prefetch is how many jobs the pool holds beyond its handlers (see
// claimSize): BatchSize, or fewer when handlers run so long that the last
// job waiting would wait more than prefetchWait for one; none for handlers
// that run longer than that, nor before a handler has run. A job held ahead waits in this pool
// while another worker of the fleet may be idle: ahead of handlers that run
// for milliseconds, a batch keeps them busy between claims; ahead of calls
// that take seconds, it would only keep jobs from the rest of the fleet.
func (p *pool) prefetch() int {
	took := time.Duration(p.meanRun.Load())
	if took <= 0 {
		return 0
	}
	// prefetch jobs wait, Concurrency handlers take them: the last starts
	// after about prefetch/Concurrency runs.
	n := float64(p.cfg.Concurrency) * float64(prefetchWait(p.leases.Lease())) / float64(took)
	return int(min(n, float64(p.cfg.BatchSize)))
}

// prefetchWait is about the longest a job claimed ahead is meant to wait
// for a handler: a second, far longer than a claim takes and far shorter
// than the calls whose jobs another worker should take instead, or
// maxReadyWait if that is shorter.
func prefetchWait(lease time.Duration) time.Duration { return min(time.Second, maxReadyWait(lease)) }

// noteRun folds how long a handler ran into the mean the prefetch is sized
// by (an exponential moving average over about the last eight runs).
func (p *pool) noteRun(took time.Duration) {
	for {
		old := p.meanRun.Load()
		mean := int64(took)
		if old > 0 {
			mean = old + (int64(took)-old)/8
		}
		if p.meanRun.CompareAndSwap(old, max(mean, 1)) {
			return
		}
	}
}

// nextLook is how long the fetcher may sleep when nothing wakes it: until
// the next claim is due, the oldest waiting job must be handed back, or a
// poll interval, whichever comes first.
func (p *pool) nextLook(now, notBefore time.Time, inFlight bool) time.Duration {
	d := p.cfg.PollInterval
	if !inFlight && notBefore.After(now) {
		d = min(d, notBefore.Sub(now))
	}
	if claimed, ok := p.waiting.oldest(); ok {
		d = min(d, claimed.Add(maxReadyWait(p.leases.Lease())).Sub(now))
	}
	return max(d, time.Millisecond)
}

// handBackStale hands back the waiting jobs claimed more than maxReadyWait
// ago: their handlers are busy for longer than the prefetch was sized for,
// and other workers may run them now.
func (p *pool) handBackStale(now time.Time) {
	limit := maxReadyWait(p.leases.Lease())
	stale := p.waiting.claimedBy(now.Add(-limit))
	if len(stale) == 0 {
		return
	}
	p.log.Info("claimed jobs waited too long for a handler; handing them back", "jobs", len(stale), "waited", limit)
	p.handBackAll(stale)
	// The handlers run longer than the prefetch was sized for (before any
	// finished, nothing said how long they run): claim only for free slots
	// until runs that end say otherwise.
	slow := int64(p.cfg.Concurrency)*int64(prefetchWait(p.leases.Lease())) + 1
	for old := p.meanRun.Load(); old < slow && !p.meanRun.CompareAndSwap(old, slow); old = p.meanRun.Load() {
	}
}

// pauseCheckEvery is how often the fetcher asks whether the queue was
// paused while claimed jobs wait for a handler. Not the poll interval: a
// pool polling every 10 ms held jobs waiting almost all the time, and asked
// a hundred times a second.
const pauseCheckEvery = time.Second

// cancelCheckEvery is how often the jobs that have waited that long for a
// handler are looked at for an operator's cancel. The lease keeper's
// heartbeat finds cancels only every third of a lease, and a job that
// starts between beats would run in full.
const cancelCheckEvery = time.Second

// handBackCancelled hands back, unstarted, the waiting jobs an operator has
// cancelled: they are recorded 'cancelled' and never sent. It looks only at
// jobs that have waited cancelCheckEvery, at most once every
// cancelCheckEvery (seen: when it last looked), so a pool whose jobs start
// at once makes no extra call. The look is a heartbeat of those jobs, which
// wait out of the handlers' reach meanwhile: one a handler took during the
// call would start before its answer said it was cancelled.
func (p *pool) handBackCancelled(ctx context.Context, seen *time.Time) {
	now := time.Now()
	oldest, ok := p.waiting.oldest()
	if !ok || now.Sub(*seen) < cancelCheckEvery || now.Sub(oldest) < cancelCheckEvery {
		return
	}
	*seen = now
	looked := p.waiting.claimedBy(now.Add(-cancelCheckEvery))
	// Copies, as the lease keeper's beats use: the call writes each job's
	// new lease end into what it is given.
	leases := make([]*Job, len(looked))
	for i, d := range looked {
		leases[i] = &Job{ID: d.job.ID, Queue: d.job.Queue, token: d.job.token}
	}
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	_, stop, err := p.c.heartbeat(ctx, leases)
	if err != nil || len(stop) == 0 {
		p.waiting.putBack(looked) // the lease keeper's next beat looks again
		return
	}
	p.leases.stopping(stop)
	stopped := make(map[run]bool, len(stop))
	for _, r := range stop {
		stopped[r] = true
	}
	var kept, gone []*dispatch
	for _, d := range looked {
		if stopped[d.job.run()] {
			p.log.Info("an operator cancelled a job before it started; handing it back unstarted", "job", d.job.ID)
			gone = append(gone, d)
			continue
		}
		kept = append(kept, d)
	}
	p.waiting.putBack(kept)
	p.handBackAll(gone)
}

// handBackAll hands back claimed jobs no handler took.
func (p *pool) handBackAll(ready []*dispatch) {
	for _, d := range ready {
		p.handBack(d)
	}
	p.inflight.Add(-int64(len(ready)))
}

// claim takes up to n jobs the throttle admits. It returns how long to wait
// before trying again when it took none.
func (p *pool) claim(ctx context.Context, n int) ([]*dispatch, time.Duration, error) {
	a := p.admission
	if a.th == nil {
		return p.take(ctx, ClaimOpts{Limit: n}, time.Time{})
	}
	// The jobs claimed earlier whose handlers have not asked the throttle
	// yet, counted before the headroom is read: a handler admitted in
	// between is then in both (taken off twice, which only waits a little),
	// where counted after it would be in neither, and its room claimed again.
	pc, pt := a.unadmitted()
	// Reads, bounded as the claim is; a shutdown cancels them.
	readCtx, cancelRead := context.WithTimeout(ctx, dbCallTimeout)
	defer cancelRead()
	calls, tokens, err := a.th.Headroom(readCtx, throttle.Batch)
	if err != nil {
		return nil, 0, err
	}
	if calls == math.MaxInt64 && tokens == math.MaxInt64 && !a.learned.Load() {
		// Nothing is known of the quota yet: rather than a full batch that
		// could overrun it, send one call and learn from its response.
		if p.inflight.Load() > 0 {
			return nil, recheck, nil
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
			return nil, recheck, nil
		}
	}
	head, ok, err := p.c.NextCost(readCtx, p.cfg.Queue)
	switch {
	case err != nil:
		return nil, 0, err
	case !ok && p.cfg.MaintainInterval < 0:
		// No live job is queued, but expired ones may be, and with
		// maintenance off only a claim drops them (a drain would wait for
		// them forever). A live job it takes meanwhile waits for the
		// throttle in its handler.
		return p.take(ctx, ClaimOpts{Limit: n}, time.Time{})
	case !ok:
		return nil, 0, nil
	case calls > 0 && tokens >= head:
		return p.take(ctx, ClaimOpts{Limit: int(min(int64(n), calls)), Budget: tokens}, time.Time{})
	case pc > 0:
		return nil, recheck, nil
	}

	// The head job does not fit what is known to be free: ask the throttle
	// about it. It may let one call through to learn more (a probe), say how
	// long to wait, or say the cost can never fit.
	_, d, err := a.canStart(ctx, head)
	switch {
	case err != nil:
		return nil, 0, err
	case d.Never:
		// Claim it to discard it with the reason; admitted checks each job.
		return p.take(ctx, ClaimOpts{Limit: 1}, time.Time{})
	case !d.OK:
		p.emit(Event{Kind: EventThrottled, Wait: d.Wait})
		return nil, d.Wait, nil
	}
	got, _, err := p.take(ctx, ClaimOpts{Limit: 1, Budget: head}, d.At) // admitted above, as head
	if len(got) == 0 {
		// Another pool took the head: the call admitted for it is not made.
		p.notSent(ctx, d.At, head)
	}
	return got, 0, err
}

// take runs one claim, reports the jobs it found expired, and wraps the
// others for the handlers; sentAt is when the throttle counted them (zero:
// not yet).
//
// A claim cut off by the shutdown could commit on the server and still
// report an error, leaving its jobs running under a lease nobody holds until
// they are rescued; so the claim itself is not cancelled, only bounded. Jobs
// it returns after the shutdown began are handed back.
func (p *pool) take(ctx context.Context, opts ClaimOpts, sentAt time.Time) ([]*dispatch, time.Duration, error) {
	opts.Worker = p.cfg.Name
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
	defer cancel()
	jobs, expired, err := p.c.claim(ctx, p.cfg.Queue, &opts)
	for _, j := range expired {
		p.emit(Event{Kind: EventExpired, Job: j})
	}
	now := time.Now()
	// From here their leases are kept, also while they wait for a free
	// handler, and the ones the throttle has not counted yet are taken off
	// its headroom.
	p.leases.claimed(jobs, now)
	out := make([]*dispatch, len(jobs))
	for i, j := range jobs {
		out[i] = &dispatch{job: j, sentAt: sentAt, claimed: now}
		p.admission.count(out[i])
	}
	return out, 0, err
}

// paused reports whether the pool's queue is paused, and says so in the log
// when that changes (since holds the pause's start as last seen). A claim
// that took nothing asks: a paused queue's claims take nothing.
func (p *pool) paused(ctx context.Context, since *time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	q, err := p.c.q.GetQueue(ctx, p.c.pool, p.cfg.Queue)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("could not look whether the queue is paused; going by the last look", "paused", !since.IsZero(), "err", err)
		}
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

// drained reports whether the pool holds no job and the queue has nothing
// queued, running or waiting to retry.
func (p *pool) drained(ctx context.Context) bool {
	if p.inflight.Load() > 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	has, err := p.c.q.QueueHasJobs(ctx, p.c.pool, p.cfg.Queue)
	return err == nil && has.Valid && !has.Bool
}

// refusedFor is how long a pool keeps claiming while the database
// refuses its claims for good (batchq's schema dropped, or the database
// restored without it; the pool's role without its rights; its queue
// deleted) before it stops: long enough for a migration's down and up, a
// grant, or a queue made again, not for ever.
const refusedFor = 30 * time.Second

// refusalWatch tracks claims that fail because batchq's schema is missing,
// the pool's role may not claim, or its queue was deleted.
type refusalWatch struct {
	first time.Time
	stop  error
}

// since returns, for err, the latest claim's error, how long claims have
// failed that way and the error Work stops with then (ErrSchemaGone,
// ErrNotPermitted, ErrUnknownQueue); 0 when err is another error.
func (w *refusalWatch) since(err error, now time.Time) (time.Duration, error) {
	var pe *pgconn.PgError
	var stop error
	if errors.As(err, &pe) {
		switch pe.Code {
		case "42P01", "42883", "3F000":
			stop = ErrSchemaGone
		case "42501":
			stop = ErrNotPermitted
		}
	} else if errors.Is(err, ErrUnknownQueue) {
		stop = ErrUnknownQueue
	}
	if stop == nil {
		*w = refusalWatch{}
		return 0, nil
	}
	if w.stop != stop {
		*w = refusalWatch{first: now, stop: stop}
	}
	return now.Sub(w.first), stop
}
