package queue_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// scheduleJobs lists the jobs a schedule enqueued (unfinished or finished),
// by their unique keys.
func (b *testBundle) scheduleJobs(t *testing.T, name string) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `
		SELECT unique_key FROM batchq.jobs WHERE unique_key LIKE 'batchq:schedule:' || $1 || ':%'
		UNION ALL
		SELECT unique_key FROM batchq.outcomes WHERE unique_key LIKE 'batchq:schedule:' || $1 || ':%'
		ORDER BY 1`, name)
	require.NoError(t, err)
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.NoError(t, rows.Err())
	return keys
}

// schedule reads a schedule as GetSchedule returns it.
func (b *testBundle) schedule(t *testing.T, name string) queue.Schedule {
	t.Helper()
	s, err := b.client.GetSchedule(b.ctx, name)
	require.NoError(t, err)
	return s
}

func instant(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// Ticks in a time zone with daylight saving, as robfig/cron computes them:
// 02:30 in Paris does not happen on the day clocks go from 02:00 to 03:00,
// and happens twice on the day 02:00-03:00 repeats. Through maintenance with
// a clock: nothing at the skipped 02:30, one job at each tick around it.
func TestScheduleTicksAcrossADaylightSavingChange(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	clock := instant("2026-03-27T12:00:00Z")
	queue.SetMaintenanceClock(b.client, func() time.Time { return clock })
	require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
		Name: "nightly", Queue: b.queue, Tenant: "acme", Cost: 100, Cron: "30 2 * * *", Timezone: "Europe/Paris",
	}))
	s, err := b.client.GetSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, instant("2026-03-28T01:30:00Z"), s.NextRunAt.UTC(), "02:30 CET")

	step := func(at string) queue.MaintainStats {
		t.Helper()
		clock = instant(at)
		st, err := b.client.Maintain(b.ctx, b.queue)
		require.NoError(t, err)
		return st
	}
	require.Zero(t, step("2026-03-28T01:29:59Z").Fired)
	require.Equal(t, 1, step("2026-03-28T01:30:00Z").Fired)
	s, err = b.client.GetSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, instant("2026-03-30T00:30:00Z"), s.NextRunAt.UTC(), "no 02:30 on 29 March: the next is 02:30 CEST on the 30th")
	// Through the night of the change: 01:30Z is 03:30 CEST, past where 02:30 would be.
	for _, at := range []string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-29T12:00:00Z"} {
		require.Zero(t, step(at).Fired, at)
	}
	require.Equal(t, 1, step("2026-03-30T00:30:00Z").Fired)
	require.Equal(t, []string{
		"batchq:schedule:nightly:2026-03-28T01:30:00Z",
		"batchq:schedule:nightly:2026-03-30T00:30:00Z",
	}, b.scheduleJobs(t, "nightly"))

	// Autumn: 02:30 CEST (00:30Z) happens, then clocks go back an hour and
	// 02:30 CET (01:30Z) happens too; robfig/cron ticks at both.
	clock = instant("2026-10-24T12:00:00Z")
	_, err = b.pool.Exec(b.ctx, `UPDATE batchq.schedules SET next_run_at = '2026-10-25T00:30:00Z'`)
	require.NoError(t, err)
	_, next := firstTickAfter(t, "30 2 * * *", "Europe/Paris", clock)
	require.Equal(t, instant("2026-10-25T00:30:00Z"), next)
	require.Equal(t, 1, step("2026-10-25T00:30:00Z").Fired)
	s, err = b.client.GetSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, instant("2026-10-25T01:30:00Z"), s.NextRunAt.UTC(), "02:30 CET, the repeated hour")
	require.Equal(t, 1, step("2026-10-25T01:30:00Z").Fired)
	s, err = b.client.GetSchedule(b.ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, instant("2026-10-26T01:30:00Z"), s.NextRunAt.UTC())
	require.Len(t, b.scheduleJobs(t, "nightly"), 4)
}

// firstTickAfter is what planTick says the next tick after at is.
func firstTickAfter(t *testing.T, expr, tz string, at time.Time) (time.Time, time.Time) {
	t.Helper()
	tick, _, next := queue.PlanTick(expr, tz, at, at, queue.MissedOne)
	return tick, next.UTC()
}

// Three maintainers on three clients find the same ticks due at once: each
// tick enqueues exactly one job.
func TestThreeMaintainersRacingOnOneTickEnqueueOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 1000})
	var mu sync.Mutex
	clock := instant("2030-01-01T00:00:00Z")
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	clients := make([]*queue.Client, 3)
	for i := range clients {
		c, err := queue.NewClient(b.pool, queue.Config{})
		require.NoError(t, err)
		queue.SetMaintenanceClock(c, now)
		clients[i] = c
	}
	require.NoError(t, clients[0].CreateSchedule(b.ctx, queue.Schedule{
		Name: "every-minute", Queue: b.queue, Tenant: "acme", Cost: 1, Cron: "* * * * *",
	}))
	const ticks = 15
	for tick := 1; tick <= ticks; tick++ {
		mu.Lock()
		clock = clock.Add(time.Minute)
		mu.Unlock()
		var wg sync.WaitGroup
		fired := make([]int, len(clients))
		start := make(chan struct{})
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 3 {
					st, err := c.Maintain(b.ctx, b.queue)
					require.NoError(t, err)
					fired[i] += st.Fired
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, 1, fired[0]+fired[1]+fired[2], "tick %d fired by %v", tick, fired)
	}
	keys := b.scheduleJobs(t, "every-minute")
	require.Len(t, keys, ticks)
	require.Equal(t, "batchq:schedule:every-minute:2030-01-01T00:01:00Z", keys[0])
	require.Equal(t, "batchq:schedule:every-minute:2030-01-01T00:15:00Z", keys[ticks-1])
	require.Equal(t, int64(ticks), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`))
}

// Ticks that passed while no maintenance ran: "one" enqueues a job for the
// latest, "skip" none; both go on from the first tick after now. A tick
// found within ScheduleGrace is on time either way.
func TestMissedTicksAreSkippedOrCaughtUpByOne(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	clock := instant("2030-01-01T12:00:00Z")
	queue.SetMaintenanceClock(b.client, func() time.Time { return clock })
	for _, missed := range []string{queue.MissedOne, queue.MissedSkip} {
		require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
			Name: "nightly-" + missed, Queue: b.queue, Tenant: missed, Cost: 1, Cron: "0 2 * * *", Missed: missed,
		}))
	}
	// Three nights with no worker.
	clock = instant("2030-01-04T09:00:00Z")
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Fired)
	require.Equal(t, []string{"batchq:schedule:nightly-one:2030-01-04T02:00:00Z"}, b.scheduleJobs(t, "nightly-one"))
	require.Empty(t, b.scheduleJobs(t, "nightly-skip"))
	for _, missed := range []string{queue.MissedOne, queue.MissedSkip} {
		s, err := b.client.GetSchedule(b.ctx, "nightly-"+missed)
		require.NoError(t, err)
		require.Equal(t, instant("2030-01-05T02:00:00Z"), s.NextRunAt.UTC())
	}
	// On time, give or take the grace: both enqueue.
	clock = instant("2030-01-05T02:00:00Z").Add(queue.ScheduleGrace)
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 2, st.Fired)
	require.Len(t, b.scheduleJobs(t, "nightly-skip"), 1)

	tick, enqueue, next := queue.PlanTick("0 2 * * *", "UTC", instant("2030-01-06T02:00:00Z"),
		instant("2030-01-06T02:00:00Z").Add(queue.ScheduleGrace+time.Second), queue.MissedSkip)
	require.Equal(t, instant("2030-01-06T02:00:00Z"), tick.UTC())
	require.False(t, enqueue, "found a second past the grace")
	require.Equal(t, instant("2030-01-07T02:00:00Z"), next.UTC())
}

// The schedule calls: bad settings are refused by name and rule; set, pause,
// resume and delete act on the stored schedule.
func TestScheduleSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 1})
	clock := instant("2030-01-01T12:00:00Z")
	queue.SetMaintenanceClock(b.client, func() time.Time { return clock })
	good := queue.Schedule{Name: "s", Queue: b.queue, Tenant: "acme", Cost: 5, Cron: "@every 10m"}
	for _, c := range []struct {
		name   string
		change func(*queue.Schedule)
		field  string
		rule   string
	}{
		{"name", func(s *queue.Schedule) { s.Name = "no spaces" }, "name", "must name a schedule"},
		{"cron", func(s *queue.Schedule) { s.Cron = "0 25 * * *" }, "cron", `hour, field 2 of 5, must be 0-23, `},
		{"never", func(s *queue.Schedule) { s.Cron = "0 0 30 2 *" }, "cron", "must tick within five years"},
		// The column holds 256 bytes: a longer expression that parses is refused
		// by its rule, not by the table's check.
		{"long cron", func(s *queue.Schedule) { s.Cron = strings.Repeat("0,", 150) + "0 * * * *" }, "cron", "must be at most 256 bytes (got 309)"},
		// robfig/cron would tick every second for these, not as they read.
		{"every negative", func(s *queue.Schedule) { s.Cron = "@every -1s" }, "cron", "@every must be a whole number of seconds, at least 1s"},
		{"every zero", func(s *queue.Schedule) { s.Cron = "@every 0s" }, "cron", "@every must be a whole number of seconds, at least 1s"},
		{"every 100ms", func(s *queue.Schedule) { s.Cron = "@every 100ms" }, "cron", "@every must be a whole number of seconds, at least 1s"},
		{"every 1500ms", func(s *queue.Schedule) { s.Cron = "@every 1500ms" }, "cron", "@every must be a whole number of seconds, at least 1s"},
		{"every ten years", func(s *queue.Schedule) { s.Cron = "@every 87600h" }, "cron", "must tick within five years"},
		{"cron tz", func(s *queue.Schedule) { s.Cron = "CRON_TZ=Europe/Paris 0 2 * * *" }, "cron", "give it as the timezone"},
		{"timezone", func(s *queue.Schedule) { s.Timezone = "Mars/Olympus" }, "timezone", "must be an IANA time zone"},
		{"missed", func(s *queue.Schedule) { s.Missed = "all" }, "missed", `must be "one" or "skip"`},
		{"cost", func(s *queue.Schedule) { s.Cost = 0 }, "cost", "must be in 1.."},
		{"tenant", func(s *queue.Schedule) { s.Tenant = "" }, "tenant", "must not be empty"},
		{"payload", func(s *queue.Schedule) { s.Payload = []byte(`{`) }, "payload", "must be valid JSON"},
		// The column keeps whole microseconds: refused by its rule, not by
		// the table's check (999ns would be stored as 0).
		{"ttl below a microsecond", func(s *queue.Schedule) { s.TTL = 999 }, "ttl", "must be a whole number of microseconds (got 999ns)"},
		{"ttl in nanoseconds", func(s *queue.Schedule) { s.TTL = time.Hour + 1 }, "ttl", "must be a whole number of microseconds (got 1h0m0.000000001s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.change(&s)
			err := b.client.CreateSchedule(b.ctx, s)
			var se *queue.SettingError
			var inv *queue.InvalidJobError
			switch {
			case errors.As(err, &se):
				require.Equal(t, c.field, se.Field)
				require.Contains(t, se.Rule, c.rule)
			case errors.As(err, &inv):
				require.Equal(t, c.field, inv.Field)
				require.Contains(t, inv.Rule, c.rule)
			default:
				t.Fatalf("got %v", err)
			}
		})
	}
	unknown := good
	unknown.Queue = "nope"
	require.ErrorIs(t, b.client.CreateSchedule(b.ctx, unknown), queue.ErrUnknownQueue)
	require.NoError(t, b.client.CreateSchedule(b.ctx, good))
	require.ErrorIs(t, b.client.CreateSchedule(b.ctx, good), queue.ErrScheduleExists)
	s, err := b.client.GetSchedule(b.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, instant("2030-01-01T12:10:00Z"), s.NextRunAt.UTC())
	require.Equal(t, "UTC", s.Timezone)
	require.Equal(t, queue.MissedOne, s.Missed)

	// A change of payload keeps the next tick; a change of expression moves it.
	payload := []byte(`{"report":"daily"}`)
	require.NoError(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Payload: payload}))
	s, err = b.client.GetSchedule(b.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, instant("2030-01-01T12:10:00Z"), s.NextRunAt.UTC())
	require.JSONEq(t, string(payload), string(s.Payload))
	cron := "0 * * * *"
	require.NoError(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Cron: &cron}))
	s, err = b.client.GetSchedule(b.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, instant("2030-01-01T13:00:00Z"), s.NextRunAt.UTC())
	bad := "nope"
	var se *queue.SettingError
	require.ErrorAs(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Cron: &bad}), &se)
	short := 400 * time.Nanosecond
	require.ErrorAs(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{TTL: &short}), &se)
	require.Equal(t, "ttl", se.Field)
	require.Equal(t, "must be a whole number of microseconds (got 400ns)", se.Rule)
	require.ErrorIs(t, b.client.SetSchedule(b.ctx, "gone", queue.ScheduleUpdate{Cron: &cron}), queue.ErrScheduleNotFound)

	// Paused, it does not tick; resumed, it goes on from the first tick after now.
	require.NoError(t, b.client.PauseSchedule(b.ctx, "s"))
	clock = instant("2030-01-01T15:30:00Z")
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, st.Fired)
	require.NoError(t, b.client.ResumeSchedule(b.ctx, "s"))
	s, err = b.client.GetSchedule(b.ctx, "s")
	require.NoError(t, err)
	require.False(t, s.Paused)
	require.Equal(t, instant("2030-01-01T16:00:00Z"), s.NextRunAt.UTC())

	// A tick the tenant has no room for enqueues nothing, says why, and the
	// schedule goes on.
	b.enqueue(t, "acme", 1)
	clock = instant("2030-01-01T16:00:00Z")
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, st.Fired)
	s, err = b.client.GetSchedule(b.ctx, "s")
	require.NoError(t, err)
	require.Contains(t, s.LastError, `queue_full (tenant "acme" has 1 waiting job, bound 1)`)
	require.Equal(t, instant("2030-01-01T17:00:00Z"), s.NextRunAt.UTC())
	b.drainOrder(t, 1)
	clock = instant("2030-01-01T17:00:00Z")
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Fired)
	s, err = b.client.GetSchedule(b.ctx, "s")
	require.NoError(t, err)
	require.Empty(t, s.LastError)
	require.NotNil(t, s.LastJobID)

	list, err := b.client.ListSchedules(b.ctx, b.queue)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.NoError(t, b.client.DeleteSchedule(b.ctx, "s"))
	require.ErrorIs(t, b.client.DeleteSchedule(b.ctx, "s"), queue.ErrScheduleNotFound)
	_, err = b.client.GetSchedule(b.ctx, "s")
	require.ErrorIs(t, err, queue.ErrScheduleNotFound)
}

// An application's enqueue left open holds its tenant's ring row: a tick
// for that tenant waits for a later pass instead of holding up maintenance,
// and fires once the transaction is over. Another tenant's tick in the
// same pass fires.
func TestScheduleTickDoesNotWaitForAnOpenEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	clock := instant("2030-01-01T00:00:00Z")
	queue.SetMaintenanceClock(b.client, func() time.Time { return clock })
	for _, tenant := range []string{"acme", "beta"} {
		name := "hourly"
		if tenant == "beta" {
			name = "beta-hourly"
			b.enqueue(t, "beta", 1) // in the ring, free
		}
		require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
			Name: name, Queue: b.queue, Tenant: tenant, Cost: 1, Cron: "@hourly",
		}))
	}
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "acme", Cost: 1})
	require.NoError(t, err)

	clock = instant("2030-01-01T01:00:00Z")
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Fired, "beta's tick")
	require.Len(t, b.scheduleJobs(t, "beta-hourly"), 1)
	s, err := b.client.GetSchedule(b.ctx, "hourly")
	require.NoError(t, err)
	require.Equal(t, instant("2030-01-01T01:00:00Z"), s.NextRunAt.UTC(), "still due")

	require.NoError(t, tx.Commit(b.ctx))
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Fired)
	require.Equal(t, []string{"batchq:schedule:hourly:2030-01-01T01:00:00Z"}, b.scheduleJobs(t, "hourly"))
}

// After an outage long enough to hold more passed ticks than maintenance
// would walk one by one, "one" still enqueues the job of the latest tick,
// and the next is the first after now (of an "@every" schedule, the first
// of its grid).
func TestMissedOneAfterALongOutageTakesTheLatestTick(t *testing.T) {
	t.Parallel()
	at := instant("2030-07-20T09:30:30Z")
	for _, c := range []struct{ expr, due, tick, next string }{
		{"* * * * *", "2030-01-01T00:00:00Z", "2030-07-20T09:30:00Z", "2030-07-20T09:31:00Z"},
		{"*/5 * * * *", "2026-01-01T00:00:00Z", "2030-07-20T09:30:00Z", "2030-07-20T09:35:00Z"},
		{"@every 1s", "2030-06-20T09:30:30Z", "2030-07-20T09:30:30Z", "2030-07-20T09:30:31Z"},
		{"@every 7s", "2030-06-20T09:30:30Z", "2030-07-20T09:30:25Z", "2030-07-20T09:30:32Z"},
		{"0 0 29 2 *", "2028-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"},
	} {
		tick, enqueue, next := queue.PlanTick(c.expr, "UTC", instant(c.due), at, queue.MissedOne)
		require.Equal(t, instant(c.tick), tick.UTC(), c.expr)
		require.True(t, enqueue, c.expr)
		require.Equal(t, instant(c.next), next.UTC(), c.expr)
	}
}

// A stored schedule that does not parse here (written by hand, or in a zone
// this batchq refuses) keeps its tick due and says why in last_error, where
// `schedules list` shows it; the pass fires the queue's other schedules, and
// once the schedule is fixed its tick fires. A role granted before the call
// that records it existed still fires the others.
func TestAScheduleThatDoesNotParseSaysWhyItWaits(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	queue.SetMaintenanceClock(b.client, func() time.Time { return instant("2030-01-01T12:00:00Z") })
	for _, name := range []string{"broken", "fine"} {
		require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
			Name: name, Queue: b.queue, Tenant: name, Cost: 1, Cron: "0 * * * *"}))
	}
	b.exec(t, `UPDATE batchq.schedules SET timezone = 'Factory' WHERE name = 'broken'`)

	require.Equal(t, 1, b.maintainAt(t, instant("2030-01-01T13:00:00Z")).Fired)
	broken := b.schedule(t, "broken")
	require.Equal(t, `tick 2030-01-01T13:00:00Z waits: timezone: must be an IANA time zone such as Europe/Paris `+
		`(got "Factory"); fix it with batchq schedules set`, broken.LastError)
	require.Equal(t, instant("2030-01-01T13:00:00Z"), broken.NextRunAt.UTC(), "the tick stays due")
	require.Empty(t, b.scheduleJobs(t, "broken"))
	require.Len(t, b.scheduleJobs(t, "fine"), 1)

	utc := "UTC"
	require.NoError(t, b.client.SetSchedule(b.ctx, "broken", queue.ScheduleUpdate{Timezone: &utc}))
	require.Empty(t, b.schedule(t, "broken").LastError, "the new time zone clears what was said of the old")
	require.Equal(t, 2, b.maintainAt(t, instant("2030-01-01T14:00:00Z")).Fired)
	require.Empty(t, b.schedule(t, "broken").LastError)
	require.Len(t, b.scheduleJobs(t, "broken"), 1)

	// Without the right to record it, the pass goes on.
	b.exec(t, `UPDATE batchq.schedules SET timezone = 'Factory', last_error = NULL WHERE name = 'broken'`)
	b.exec(t, `REVOKE EXECUTE ON FUNCTION batchq.schedule_error(text, timestamptz, text) FROM CURRENT_USER`)
	require.Equal(t, 1, b.maintainAt(t, instant("2030-01-01T15:00:00Z")).Fired)
	require.Len(t, b.scheduleJobs(t, "fine"), 3)
	require.Empty(t, b.schedule(t, "broken").LastError)
}

// A schedule that ticks more often than maintenance passes loses no tick:
// each tick found within the grace enqueues its own job. Past the grace the
// missed ticks are caught up by one, then the on-time ones each enqueue.
func TestAPassLaterThanTheIntervalFiresEveryTick(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	queue.SetMaintenanceClock(b.client, func() time.Time { return instant("2030-01-01T12:00:00Z") })
	require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
		Name: "often", Queue: b.queue, Tenant: "t", Cost: 1, Cron: "@every 2s"}))

	require.Equal(t, 3, b.maintainAt(t, instant("2030-01-01T12:00:06Z")).Fired)
	require.Equal(t, []string{"batchq:schedule:often:2030-01-01T12:00:02Z", "batchq:schedule:often:2030-01-01T12:00:04Z",
		"batchq:schedule:often:2030-01-01T12:00:06Z"}, b.scheduleJobs(t, "often"))
	s := b.schedule(t, "often")
	require.Equal(t, instant("2030-01-01T12:00:08Z"), s.NextRunAt.UTC())
	require.Equal(t, instant("2030-01-01T12:00:06Z"), s.LastRunAt.UTC())

	// Two minutes later: 12:00:08 to 12:01:04 were missed (one job, for the
	// latest), 12:01:06 to 12:02:06 are on time (31 jobs).
	require.Equal(t, 32, b.maintainAt(t, instant("2030-01-01T12:02:06Z")).Fired)
	jobs := b.scheduleJobs(t, "often")
	require.Len(t, jobs, 3+32)
	require.Equal(t, "batchq:schedule:often:2030-01-01T12:01:04Z", jobs[3])
	require.Equal(t, "batchq:schedule:often:2030-01-01T12:01:06Z", jobs[4])
	require.Equal(t, "batchq:schedule:often:2030-01-01T12:02:06Z", jobs[len(jobs)-1])
}

// A tick that came due before a pause and had not fired (no maintenance
// pass yet) is owed: the resume handles it as a missed tick, one job for
// the latest owed tick under "one" and none under "skip". The ticks that
// fell while the schedule was paused are not owed, and it goes on from the
// first tick after the resume.
func TestResumeHandlesATickDueBeforeThePauseAsMissed(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	clock := instant("2030-01-01T10:30:00Z")
	queue.SetMaintenanceClock(b.client, func() time.Time { return clock })
	fired := func(at string) int {
		t.Helper()
		clock = instant(at)
		st, err := b.client.Maintain(b.ctx, b.queue)
		require.NoError(t, err)
		return st.Fired
	}
	for _, missed := range []string{queue.MissedOne, queue.MissedSkip} {
		require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
			Name: "hourly-" + missed, Queue: b.queue, Tenant: missed, Cost: 1, Cron: "0 * * * *", Missed: missed,
		}))
	}
	// 11:00, 12:00 and 13:00 came due with no pass, then the pause.
	clock = instant("2030-01-01T13:00:30Z")
	for _, missed := range []string{queue.MissedOne, queue.MissedSkip} {
		require.NoError(t, b.client.PauseSchedule(b.ctx, "hourly-"+missed))
	}
	require.Zero(t, fired("2030-01-01T15:20:00Z"), "paused")
	// Paused, they show no next tick, though they owe one.
	list, err := b.client.ListSchedules(b.ctx, b.queue)
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, s := range append(list, b.schedule(t, "hourly-one")) {
		require.True(t, s.Paused)
		require.Zero(t, s.NextRunAt, s.Name)
	}
	for _, missed := range []string{queue.MissedOne, queue.MissedSkip} {
		require.NoError(t, b.client.ResumeSchedule(b.ctx, "hourly-"+missed))
	}
	require.Equal(t, []string{"batchq:schedule:hourly-one:2030-01-01T13:00:00Z"}, b.scheduleJobs(t, "hourly-one"),
		"the latest tick owed from before the pause; none of 14:00 and 15:00")
	require.Empty(t, b.scheduleJobs(t, "hourly-skip"))
	one, skip := b.schedule(t, "hourly-one"), b.schedule(t, "hourly-skip")
	require.Equal(t, instant("2030-01-01T13:00:00Z"), one.LastRunAt.UTC())
	require.NotNil(t, one.LastJobID)
	require.Nil(t, skip.LastRunAt)
	for _, s := range []queue.Schedule{one, skip} {
		require.False(t, s.Paused)
		require.Equal(t, instant("2030-01-01T16:00:00Z"), s.NextRunAt.UTC(), s.Name)
	}
	require.Zero(t, fired("2030-01-01T15:30:00Z"), "the owed tick is not fired twice")
	require.Equal(t, 2, fired("2030-01-01T16:00:00Z"))

	// Paused before its tick came due, it owes nothing.
	require.NoError(t, b.client.PauseSchedule(b.ctx, "hourly-one"))
	clock = instant("2030-01-01T18:30:00Z")
	require.NoError(t, b.client.ResumeSchedule(b.ctx, "hourly-one"))
	require.Len(t, b.scheduleJobs(t, "hourly-one"), 2)
	require.Equal(t, instant("2030-01-01T19:00:00Z"), b.schedule(t, "hourly-one").NextRunAt.UTC())
}

// An application's open enqueue for the tenant holds the ring row the owed
// tick's job needs: the resume says so and leaves the schedule paused, with
// its tick still owed, rather than wait on the application or drop the
// tick.
func TestResumeWithAnOwedTickDoesNotWaitForAnOpenEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	clock := instant("2030-01-01T00:00:00Z")
	queue.SetMaintenanceClock(b.client, func() time.Time { return clock })
	require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
		Name: "hourly", Queue: b.queue, Tenant: "acme", Cost: 1, Cron: "@hourly"}))
	clock = instant("2030-01-01T01:00:10Z")
	require.NoError(t, b.client.PauseSchedule(b.ctx, "hourly"))
	clock = instant("2030-01-01T01:30:00Z")

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = b.client.EnqueueTx(b.ctx, tx, queue.NewJob{Queue: b.queue, Tenant: "acme", Cost: 1})
	require.NoError(t, err)
	err = b.client.ResumeSchedule(b.ctx, "hourly")
	require.EqualError(t, err, `batchq: resume schedule "hourly": the tick it owes from before its pause, `+
		`2030-01-01T01:00:00Z, cannot be enqueued now: another transaction holds tenant "acme"'s place in queue "q" `+
		`(an open enqueue, a maintenance pass, or the queue being deleted); it is still paused: resume it again`)
	require.True(t, b.schedule(t, "hourly").Paused)

	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, b.client.ResumeSchedule(b.ctx, "hourly"))
	require.Equal(t, []string{"batchq:schedule:hourly:2030-01-01T01:00:00Z"}, b.scheduleJobs(t, "hourly"))
	require.Equal(t, instant("2030-01-01T02:00:00Z"), b.schedule(t, "hourly").NextRunAt.UTC())
}

// A stored expression or time zone that does not parse here is refused as
// stored when a change keeps it, not as a setting the caller gave; a new
// one replaces it.
func TestAStoredSettingThatDoesNotParseIsNamedAsStored(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	queue.SetMaintenanceClock(b.client, func() time.Time { return instant("2030-01-01T12:00:00Z") })
	require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{
		Name: "s", Queue: b.queue, Tenant: "t", Cost: 1, Cron: "0 * * * *"}))
	b.exec(t, `UPDATE batchq.schedules SET cron = '0 25 * * *' WHERE name = 's'`)

	stored := func(err error) *queue.StoredScheduleError {
		t.Helper()
		var se *queue.StoredScheduleError
		require.ErrorAs(t, err, &se)
		require.ErrorIs(t, err, queue.ErrInvalidSettings)
		var given *queue.SettingError
		require.False(t, errors.As(err, &given), "not a setting the call gave")
		return se
	}
	skip, paris := queue.MissedSkip, "Europe/Paris"
	for _, u := range []queue.ScheduleUpdate{{Missed: &skip}, {Timezone: &paris}} {
		se := stored(b.client.SetSchedule(b.ctx, "s", u))
		require.Equal(t, queue.StoredScheduleError{Schedule: "s", Field: "cron", Value: "0 25 * * *",
			Rule: `hour, field 2 of 5, must be 0-23, as *, a value, a range low-high (1-5), a list (1,3) or a step (*/2) ` +
				`(got "25" in "0 25 * * *")`}, *se)
	}
	require.EqualError(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Missed: &skip}),
		`batchq: schedule "s": its stored cron "0 25 * * *" does not parse: hour, field 2 of 5, must be 0-23, as *, `+
			`a value, a range low-high (1-5), a list (1,3) or a step (*/2) (got "25" in "0 25 * * *")`)
	require.Equal(t, queue.MissedOne, b.schedule(t, "s").Missed, "nothing changed")
	// A new expression that breaks a rule is the caller's.
	bad := "0 26 * * *"
	var given *queue.SettingError
	require.ErrorAs(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Cron: &bad}), &given)
	require.Equal(t, "cron", given.Field)

	// The time zone, as the expression; a resume keeps both.
	b.exec(t, `UPDATE batchq.schedules SET cron = '0 * * * *', timezone = 'Mars/Olympus' WHERE name = 's'`)
	hourly := "@hourly"
	se := stored(b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Cron: &hourly}))
	require.Equal(t, "timezone", se.Field)
	require.Equal(t, "Mars/Olympus", se.Value)
	require.NoError(t, b.client.PauseSchedule(b.ctx, "s"))
	require.Equal(t, "timezone", stored(b.client.ResumeSchedule(b.ctx, "s")).Field)
	require.True(t, b.schedule(t, "s").Paused)

	utc := "UTC"
	require.NoError(t, b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Timezone: &utc, Missed: &skip}))
	require.NoError(t, b.client.ResumeSchedule(b.ctx, "s"))
	s := b.schedule(t, "s")
	require.Equal(t, queue.MissedSkip, s.Missed)
	require.Equal(t, instant("2030-01-01T13:00:00Z"), s.NextRunAt.UTC())

	// An expression that parses but never ticks (February 30th) is refused
	// by a resume as set refuses it, and the schedule stays paused.
	require.NoError(t, b.client.PauseSchedule(b.ctx, "s"))
	b.exec(t, `UPDATE batchq.schedules SET cron = '0 0 30 2 *' WHERE name = 's'`)
	se = stored(b.client.ResumeSchedule(b.ctx, "s"))
	require.Equal(t, queue.StoredScheduleError{Schedule: "s", Field: "cron", Value: "0 0 30 2 *",
		Rule: `must tick within five years ("0 0 30 2 *" never does)`}, *se)
	require.Equal(t, se.Rule, stored(b.client.SetSchedule(b.ctx, "s", queue.ScheduleUpdate{Missed: &skip})).Rule)
	require.True(t, b.schedule(t, "s").Paused)
}
