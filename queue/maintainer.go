package queue

import (
	"context"
	"time"
)

// maintainEvery runs Maintain on the pool's queue every MaintainInterval:
// rescuing lost leases, expiring jobs past their deadline, requeueing
// retries whose backoff ended and folding cost corrections. A pass that hit
// its bounds is followed at once by another.
func (p *pool) maintainEvery(ctx context.Context) {
	t := time.NewTicker(p.cfg.MaintainInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for ctx.Err() == nil && p.maintainOnce(ctx) {
		}
	}
}

// maintainPass bounds one pass: a pass on a connection that went away
// silently must not stop maintenance for good. A whole fold of a
// ten-million-job backlog fits.
const maintainPass = 2 * time.Minute

// maintainOnce runs one pass and reports whether another should follow at
// once.
func (p *pool) maintainOnce(ctx context.Context) bool {
	mctx, cancel := context.WithTimeout(ctx, maintainPass)
	st, done, err := p.c.maintain(mctx, p.cfg.Queue)
	cancel()
	// What the pass finished is reported as what claims finish is, so
	// expiries and rescued jobs that failed reach the metrics: the sweep,
	// not a claim, expires most jobs that expire.
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
		return false
	}
	if st.Requeued > 0 {
		p.poke()
	}
	if len(st.Analyzed) > 0 {
		p.log.Info("refreshed stale planner statistics", "tables", st.Analyzed)
	}
	return st.More()
}
