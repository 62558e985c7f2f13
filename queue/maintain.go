package queue

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// maintainBatch bounds the rows one maintenance step touches, so one pass
// never holds many locks for long; a pass with more to do says so.
const maintainBatch = 1000

// MaintainStats counts what one maintenance pass did.
type MaintainStats struct {
	Rescued  int // running jobs whose lease expired, sent back to retry
	Lost     int // running jobs whose lease expired with no attempt or time left
	Expired  int // waiting jobs removed because their deadline passed
	Requeued int // retrying and scheduled jobs moved to their tenants' queues, being due
	Fired    int // jobs the queue's recurring schedules enqueued
	Adjusted int // tenants whose queued keys took ledger adjustments
	// Analyzed names the tables whose planner statistics were stale and
	// which the pass ran ANALYZE on.
	Analyzed []string
}

// More reports whether a step hit its batch bound, so another pass should
// follow at once.
func (s MaintainStats) More() bool {
	return s.Rescued+s.Lost >= maintainBatch || s.Expired >= maintainBatch || s.Requeued >= maintainBatch ||
		s.Fired >= maintainBatch
}

// Maintain runs one maintenance pass over a queue: it rescues jobs whose lease
// expired, expires waiting jobs past their deadline wherever they are in the
// backlog, moves due retries and due scheduled jobs to the end of their
// tenants' queues, fires the queue's due recurring schedules, and folds
// ledger adjustments into queued keys. Every step skips rows others hold, so any
// number of processes may run it at once. Workers run it periodically. It
// returns ErrUnknownQueue for no such queue.
func (c *Client) Maintain(ctx context.Context, queue string) (MaintainStats, error) {
	st, _, err := c.maintain(ctx, queue, ScheduleGrace)
	return st, err
}

// swept is a job a maintenance pass finished: outcome expired or failed.
type swept struct {
	id      int64
	tenant  string
	cost    int64
	outcome string
}

// maintain is Maintain that also returns the jobs the pass finished, for a
// pool to report as it reports those its claims find expired. A schedule's
// tick found within grace of its time is on time (see planTicks).
func (c *Client) maintain(ctx context.Context, queue string, grace time.Duration) (MaintainStats, []swept, error) {
	var st MaintainStats
	var done []swept
	if !queueName.MatchString(queue) {
		return st, done, unknownQueue(queue)
	}
	// Each step refuses a queue that is not there (BQ201): one deleted
	// meanwhile is ErrUnknownQueue at any step.
	stepErr := func(step string, err error) error {
		if u := unknownQueueRefusal(err); u != nil {
			return u
		}
		return fmt.Errorf("batchq: maintain %q: %s: %w", queue, step, err)
	}
	rescued, err := c.q.RescueLostLeases(ctx, c.pool, dbsqlc.RescueLostLeasesParams{Queue: queue, MaxJobs: maintainBatch})
	if err != nil {
		return st, done, stepErr("rescue", err)
	}
	for _, r := range rescued {
		if r.Retrying {
			st.Rescued++
		} else {
			st.Lost++
			done = append(done, swept{r.ID, r.Tenant, r.Cost, r.Outcome})
		}
	}
	expired, err := c.q.ExpireOverdue(ctx, c.pool, dbsqlc.ExpireOverdueParams{Queue: queue, MaxJobs: maintainBatch})
	if err != nil {
		return st, done, stepErr("expire", err)
	}
	st.Expired = len(expired)
	for _, e := range expired {
		done = append(done, swept{e.ID, e.Tenant, e.Cost, "expired"})
	}
	requeued, err := c.q.Requeue(ctx, c.pool, dbsqlc.RequeueParams{Queue: queue, MaxJobs: maintainBatch,
		At: c.maintenanceAt()})
	if err != nil {
		return st, done, stepErr("requeue", err)
	}
	st.Requeued = int(requeued)
	if st.Fired, err = c.fireSchedules(ctx, queue, grace); err != nil {
		return st, done, stepErr("schedules", err)
	}
	adjusted, err := c.q.ApplyAdjustments(ctx, c.pool, queue)
	if err != nil {
		return st, done, stepErr("adjust", err)
	}
	st.Adjusted = int(adjusted)
	if st.Analyzed, err = c.analyzeStale(ctx); err != nil {
		return st, done, fmt.Errorf("batchq: maintain %q: statistics: %w", queue, err)
	}
	return st, done, nil
}

// shrunkAnalyzeAfter is how long after a table's last ANALYZE one that
// shrank far from it is analyzed again (see StaleTables).
const shrunkAnalyzeAfter = 10 * time.Minute

// statsCheckInterval spaces one client's checks for stale statistics; the
// check reads the server's table statistics, which maintenance every second
// need not do.
const statsCheckInterval = 10 * time.Second

// analyzeStale refreshes the planner statistics of the queue's tables when
// they are far from what the tables hold, checking at most once per
// statsCheckInterval per client. Sessions keep the plans of their prepared
// statements until the statistics change; planned while a queue was empty, a
// claim scans the whole jobs table once it is not. Autovacuum repairs that in
// time, when it runs; a role that may not ANALYZE the tables (only their
// owner may) leaves it to autovacuum, and a table another ANALYZE holds is
// skipped. A table just analyzed is no longer stale, so it is not analyzed
// again until it drifts again.
func (c *Client) analyzeStale(ctx context.Context) ([]string, error) {
	// Maintenance of another queue on this client checking now is as good.
	if !c.statsMu.TryLock() {
		return nil, nil
	}
	defer c.statsMu.Unlock()
	if !c.statsCheckedAt.IsZero() && time.Since(c.statsCheckedAt) < statsCheckInterval {
		return nil, nil
	}
	c.statsCheckedAt = time.Now()
	stale, err := c.q.StaleTables(ctx, c.pool, cmp.Or(c.shrunkAfter, shrunkAnalyzeAfter).Microseconds())
	if err != nil {
		return nil, err
	}
	for _, t := range stale {
		name := pgx.Identifier{"batchq", t}.Sanitize()
		if _, err := c.pool.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+name); err != nil {
			return nil, fmt.Errorf("analyze %s: %w", name, err)
		}
	}
	return stale, nil
}
