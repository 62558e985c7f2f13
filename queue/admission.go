package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchq/batchq/throttle"
)

// admission is a pool's bookkeeping with its throttle (WorkerConfig.Throttle).
// Jobs are claimed as the throttle's headroom allows, and each is asked for
// again, one at a time, as its handler is about to send it. In between, the
// claimed jobs the throttle has not counted yet are known here, so that the
// next claim takes them off the headroom it reads. Without a throttle every
// job is admitted and nothing is counted.
type admission struct {
	th *throttle.Throttle

	mu sync.Mutex
	// Claimed jobs the throttle has not counted yet (their handlers have not
	// asked it): the headroom it reports does not know them.
	calls, tokens int64

	// learned: a handler has finished, so the throttle has heard from the
	// provider.
	learned atomic.Bool
	// waiting counts handlers whose claimed job waits for room in the quota;
	// while any does, the headroom is spoken for and the pool claims no more.
	waiting atomic.Int32
	// decide serializes the pool's throttle decisions (see canStart).
	decide sync.Mutex
}

// recheck is how long a claim that found the headroom spoken for by jobs
// claimed earlier waits before it looks again.
const recheck = 10 * time.Millisecond

// admitWait bounds how long a claimed job waits for room in the quota that
// another pool took first.
const admitWait = 5 * time.Second

// count notes a claimed job the throttle has not counted yet.
func (a *admission) count(d *dispatch) {
	if a.th == nil || !d.sentAt.IsZero() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	d.unadmitted = true
	a.calls++
	a.tokens += d.job.Cost
}

// settle takes d off the jobs the throttle has not counted, once it has
// decided about it or it will not be asked.
func (a *admission) settle(d *dispatch) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d.unadmitted {
		d.unadmitted = false
		a.calls--
		a.tokens -= d.job.Cost
	}
}

// unadmitted returns the calls and tokens of claimed jobs the throttle has
// not counted yet.
func (a *admission) unadmitted() (calls, tokens int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls, a.tokens
}

// busy reports whether a handler waits for room in the quota.
func (a *admission) busy() bool { return a.waiting.Load() > 0 }

// canStart asks the throttle about one batch call. A pool's handlers ask one
// at a time: the shared state is one row, and every handler of every pool
// racing to save it would make interactive calls, which ask the same row,
// wait behind the retries.
func (a *admission) canStart(ctx context.Context, cost int64) (time.Time, throttle.Decision, error) {
	a.decide.Lock()
	defer a.decide.Unlock()
	// Bounded as every throttle write is: a connection that went away
	// without a word would hold every handler of the pool behind this one.
	ctx, cancel := context.WithTimeout(ctx, dbCallTimeout)
	defer cancel()
	now := time.Now()
	dec, err := a.th.CanStart(ctx, cost, throttle.Batch)
	return now, dec, err
}

// waitForRoom sleeps for d while the pool holds off claiming more; it
// reports false if ctx ended or stopping began first.
func (a *admission) waitForRoom(ctx, stopping context.Context, d time.Duration) bool {
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-stopping.Done():
		return false
	case <-t.C:
		return true
	}
}

// notSent takes back the throttle's admission at at of a call that was not
// made after all.
func (a *admission) notSent(ctx context.Context, at time.Time, cost int64) error {
	if a.th == nil || at.IsZero() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
	defer cancel()
	return a.th.NotSent(ctx, at, cost)
}

// notSent takes back the throttle's admission of a call the pool did not
// make after all, reporting a failure as an event.
func (p *pool) notSent(ctx context.Context, at time.Time, cost int64) {
	if err := p.admission.notSent(ctx, at, cost); err != nil {
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
	a := p.admission
	if a.th == nil || !d.sentAt.IsZero() {
		return true
	}
	defer a.settle(d)
	j := d.job
	if p.stopping.Err() != nil {
		// Shutting down: a job not started yet goes back.
		p.done.release(j, 0, 0)
		return false
	}
	giveUp := time.Now().Add(admitWait)
	for {
		now, dec, err := a.canStart(ctx, j.Cost)
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
		case now.Add(dec.Wait).After(giveUp) || !a.waitForRoom(ctx, p.stopping, dec.Wait):
			p.done.release(j, dec.Wait, 0)
			return false
		}
	}
}
