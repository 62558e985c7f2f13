package queue

import (
	"context"
	"time"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// maintainEvery runs Maintain on the pool's queue every MaintainInterval:
// rescuing lost leases, expiring jobs past their deadline, requeueing
// retries whose backoff ended and folding cost corrections. A pass that hit
// its bounds is followed at once by another. The pools of a queue take
// turns: a pool passes only when none of the fleet began a pass within
// turnShare of its interval, so the database sees about one pass per
// interval however many workers run.
func (p *pool) maintainEvery(ctx context.Context) {
	t := time.NewTicker(p.cfg.MaintainInterval)
	defer t.Stop()
	var warned time.Time // when the log last said a turn could not be asked
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mine, err := p.maintenanceTurn(ctx)
		if err != nil && ctx.Err() == nil && time.Since(warned) >= turnWarnEvery {
			// A role granted before turns existed (re-run batchq migrate
			// grants), say, or the database away: the pool passes, as
			// every pool did before turns, and the pass says what it can.
			warned = time.Now()
			p.log.Warn("maintenance: could not ask for a turn; passing anyway", "err", err)
		}
		if !mine && err == nil {
			continue
		}
		for ctx.Err() == nil && p.maintainOnce(ctx) {
		}
	}
}

// turnShare is the part of its interval a pool lets pass after any pool's
// pass before it passes itself: less than one, so that ticks that come a
// little early do not skip a whole interval.
const turnShare = 0.9

// turnWarnEvery spaces the warnings of a pool that cannot ask for turns.
const turnWarnEvery = time.Minute

// maintenanceTurn reports whether this pool's pass is due: whether no pass
// of its queue began within turnShare of its interval (notes its own as
// begun when so). The function answers within about 200 ms even when rows it
// needs are held; a connection that hangs is given up after an interval (at
// least a second), so the pass is not put off for longer.
func (p *pool) maintenanceTurn(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, min(dbCallTimeout, max(p.cfg.MaintainInterval, time.Second)))
	defer cancel()
	return p.c.q.MaintenanceTurn(ctx, p.c.pool, dbsqlc.MaintenanceTurnParams{
		Queue: p.cfg.Queue, EveryUs: int64(turnShare * float64(p.cfg.MaintainInterval.Microseconds())),
	})
}

// maintainPass bounds one pass: a pass on a connection that went away
// silently must not stop maintenance for good. A whole fold of a
// ten-million-job backlog fits.
const maintainPass = 2 * time.Minute

// maintainOnce runs one pass and reports whether another should follow at
// once.
func (p *pool) maintainOnce(ctx context.Context) bool {
	p.c.pause("maintenance pass")
	mctx, cancel := context.WithTimeout(ctx, maintainPass)
	// A pool's passes come about one interval apart (the fleet takes
	// turns): a tick is on time when the next pass after it finds it.
	st, done, err := p.c.maintain(mctx, p.cfg.Queue, ScheduleGrace+max(p.cfg.MaintainInterval, 0))
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
