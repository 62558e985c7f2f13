package queue

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/batchq/batchq/quotaheaders"
)

// The executor runs handlers: Concurrency goroutines, each taking the next
// claimed job from the fetcher, asking admission to send it, running the
// handler, telling the throttle what the provider answered, and handing the
// outcome to the completer.

// dispatch is a claimed job on its way to a handler.
type dispatch struct {
	job        *Job
	sentAt     time.Time // when the throttle counted it; zero: not asked yet
	claimed    time.Time
	unadmitted bool // counted in admission's calls and tokens
}

// handle runs handlers for the jobs the fetcher claims until the pool
// closes p.waiting.
func (p *pool) handle() {
	for {
		d, emptied := p.waiting.take()
		if d == nil {
			return
		}
		if emptied {
			// The fetcher may claim for the slots it kept for these.
			p.poke()
		}
		if took, ran := p.runJob(d); ran {
			p.noteRun(took)
		}
		// The fetcher claims again only once no more than Concurrency jobs
		// are held (see claimSize), so only then is it woken: a wake-up for
		// each job of a batch cost a pass of its loop per job.
		if p.inflight.Add(-1) <= int64(p.cfg.Concurrency) {
			p.poke()
		}
	}
}

// runJob runs d's handler, unless the job cannot start, and hands what
// became of it to the completer. It reports how long the handler ran, and
// whether it ran at all.
func (p *pool) runJob(d *dispatch) (time.Duration, bool) {
	j := d.job
	ctx, cancel := context.WithCancel(p.handlerCtx)
	defer cancel()
	// The run stays tracked, its lease kept, until the completer has written
	// what became of it (every path below hands the job to p.done, which
	// untracks it then), except where no finish is written: its lease was
	// lost.
	switch p.leases.start(j, cancel) {
	case startCancelled:
		// An operator cancelled it while it waited: recorded 'cancelled',
		// never sent.
		p.handBack(d)
		return 0, false
	case startLost:
		p.leases.untrack(j)
		p.admission.settle(d)
		p.notSent(ctx, d.sentAt, j.Cost)
		p.emit(Event{Kind: EventFinished, Job: j, Outcome: "lease_lost"})
		return 0, false
	}

	if p.pastDeadline(d) || !p.admitted(ctx, d) || p.pastDeadline(d) {
		return 0, false
	}
	p.emit(Event{Kind: EventClaimed, Job: j, Wait: d.claimed.Sub(j.EnqueuedAt)})
	start := time.Now()
	res, err := p.call(ctx, j)
	received := time.Now()
	defer p.admission.learned.Store(true)
	took := received.Sub(start)

	status := 0
	if res.Response != nil {
		status = res.Response.StatusCode
	}
	// A handler may say ErrRateLimited about a response that is not a 429
	// (a 503 "overloaded" with Retry-After, say): the fleet pauses all the
	// same, and the response is not taken for a success.
	limitedOther := errors.Is(err, ErrRateLimited) && status != http.StatusTooManyRequests
	th := p.admission.th
	if res.Response != nil && th != nil && !limitedOther {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
		if oerr := th.ObserveResponse(octx, d.sentAt, received, res.Response); oerr != nil {
			p.emit(Event{Kind: EventError, Job: j, Err: oerr})
		}
		cancel()
	}

	switch {
	case status == http.StatusTooManyRequests || errors.Is(err, ErrRateLimited):
		p.rateLimited(ctx, d, res.Response, status, limitedOther, received, took)
	case err == nil:
		p.done.complete(j, res, took)
	case p.handlerCtx.Err() != nil:
		// The shutdown ran out of time and cancelled the handler. The call
		// may have reached the provider, and been billed: it is an attempt,
		// and the tenant pays for it. The job is retried as after a failure,
		// with the next attempt's number, so a provider that deduplicates by
		// it never takes the next run for this one.
		p.done.fail(j, fmt.Errorf("batchq: the worker shut down and cancelled the call after ShutdownTimeout: %w", err), took)
	case ctx.Err() != nil && p.leases.lost(j):
		p.leases.untrack(j)
		p.emit(Event{Kind: EventFinished, Job: j, Outcome: "lease_lost", Duration: took})
	default:
		p.done.fail(j, err, took)
	}
	return took, true
}

// rateLimited handles a call the provider refused with a 429 (or that the
// handler said was rate limited): the fleet pauses, and the job goes back
// to its tenant's queue without using an attempt, for as long as the pause.
func (p *pool) rateLimited(ctx context.Context, d *dispatch, resp *http.Response, status int, limitedOther bool, received time.Time, took time.Duration) {
	j, th := d.job, p.admission.th
	wait := retryAfter(resp, received)
	if th != nil && limitedOther {
		// Sent when the throttle admitted it: the calls in flight with it
		// are one episode, not a doubling of the pause each.
		sent := d.sentAt
		if sent.IsZero() {
			sent = received
		}
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
		if terr := th.TooManyRequests(tctx, sent, received, wait); terr != nil {
			p.emit(Event{Kind: EventError, Job: j, Err: terr})
		}
		cancel()
	}
	asked := wait
	if th != nil {
		// The pause the throttle keeps: its default (doubling) without a
		// Retry-After, a Retry-After capped at MaxRetryAfter. Unreadable,
		// the job waits out the Retry-After it was given.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
		if pause, perr := th.Pause(pctx); perr == nil {
			wait = pause
		} else {
			p.emit(Event{Kind: EventError, Job: j, Err: perr})
		}
		cancel()
	}
	if th != nil && wait > longPause {
		reason := fmt.Sprintf("HTTP %d without Retry-After", status)
		if asked > 0 {
			reason = fmt.Sprintf("HTTP %d with Retry-After %s", status, asked.Round(time.Second))
		}
		p.log.Warn("quota paused", "key", th.Key(), "reason", reason,
			"until", received.Add(wait).UTC().Format(time.RFC3339), "for", wait.Round(time.Second))
	}
	p.emit(Event{Kind: EventRateLimited, Job: j, Wait: wait})
	p.done.release(j, wait, took)
}

// longPause is how long a quota pause must be for the pool to log it: a
// fleet that stops for longer is worth an operator's look.
const longPause = time.Minute

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
	p.admission.settle(d)
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
