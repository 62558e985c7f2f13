package queue

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetClock sets the clock c's quota store takes for this process's: a test
// runs two clients as two workers whose clocks disagree.
func SetClock(c *Client, now func() time.Time) { c.clock.now = now }

// SetBeforeFinishWrite makes the worker pools of c run f before their
// completer writes each batch: a test holds a finish back, as a slow
// database or a long batch ahead of it would.
func SetBeforeFinishWrite(c *Client, f func()) { c.beforeFinishWrite = f }

// SetBeforeHeartbeat makes the lease keepers of c's worker pools run f
// once each beat has listed its runs, before it sends them: a test holds a
// beat back, as a slow database would.
func SetBeforeHeartbeat(c *Client, f func()) { c.beforeHeartbeat = f }

// SetFinishGiveUp sets how long the worker pools of c retry a finish the
// database refuses (see completer.retry).
func SetFinishGiveUp(c *Client, d time.Duration) { c.finishGiveUp = d }

// Quote is quote: how errors write names, as SQL's batchq.quote does.
var Quote = quote

// SetRefusedFor sets how long the worker pools of c keep claiming while the
// database refuses their claims for good (see refusedFor).
func SetRefusedFor(c *Client, d time.Duration) { c.refusedFor = d }

// SetPauseCheckEvery sets how often c's worker pools look whether their
// queue was paused while claimed jobs wait (see pauseCheckEvery).
func SetPauseCheckEvery(c *Client, d time.Duration) { c.pauseCheckEvery = d }

// SetShrunkAnalyzeAfter sets how long after a table's last ANALYZE c's
// maintenance analyzes a table that shrank (see shrunkAnalyzeAfter).
func SetShrunkAnalyzeAfter(c *Client, d time.Duration) { c.shrunkAfter = d }

// SetAssumedRun makes the worker pools of c start as if their handlers ran
// for d: they claim ahead from their first claim, where a pool whose
// handlers have not run yet claims only for them (see prefetch).
func SetAssumedRun(c *Client, d time.Duration) { c.assumedRun = d }

// PoolOf is the pool c uses: benchmarks reset its tables between runs.
func PoolOf(c *Client) *pgxpool.Pool { return c.pool }

// SetMaintenanceClock makes c's maintenance promote scheduled and retrying
// jobs, and fire schedules, as of now() instead of the database's clock; the
// schedule calls read it too.
func SetMaintenanceClock(c *Client, now func() time.Time) { c.testNow = now }

// PlanTick is planTicks over a schedule's expression and time zone, with
// the last tick it plans.
func PlanTick(expr, tz string, due, at time.Time, missed string) (tick time.Time, enqueue bool, next time.Time) {
	s, err := parseCron(expr, tz)
	if err != nil {
		panic(err)
	}
	ticks, next := planTicks(s, due, at, missed, ScheduleGrace)
	last := ticks[len(ticks)-1]
	return last.at, last.enqueue, next
}

// SetPause makes c run f at the named points of its transactions (pause's
// callers): a test holds one there to order it against another.
func SetPause(c *Client, f func(at string)) { c.testPause = f }
