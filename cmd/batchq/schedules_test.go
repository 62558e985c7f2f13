package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// A job enqueued with --delay and a schedule of "@every 2s", with a worker
// running: the delayed job shows as scheduled in the report until its time,
// then runs, not before; each tick of the schedule runs one job, not before
// its tick, and no tick is missed or doubled.
func TestDelayedJobAndScheduleRunOnTimeOnceEach(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "nightly")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := queue.NewClient(db.pool, queue.Config{})
	require.NoError(t, err)

	type ran struct {
		at  time.Time
		job *queue.Job
	}
	var mu sync.Mutex
	var runs []ran
	done := make(chan error, 1)
	go func() {
		done <- client.Work(ctx, queue.WorkerConfig{
			Queue: "nightly", Concurrency: 2, PollInterval: 50 * time.Millisecond, MaintainInterval: 100 * time.Millisecond,
			Handler: func(_ context.Context, j *queue.Job) (queue.Result, error) {
				mu.Lock()
				runs = append(runs, ran{time.Now(), j})
				mu.Unlock()
				return queue.Result{}, nil
			},
		})
	}()

	before := time.Now()
	r := runCLI(t, db.url, "--format", "json", "enqueue", "--queue", "nightly", "--tenant", "acme", "--cost", "10", "--delay", "2s")
	require.Equal(t, 0, r.code, r.stderr)
	var enq struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &enq), r.stdout)
	var runAt time.Time
	require.NoError(t, db.pool.QueryRow(ctx, `SELECT run_after FROM batchq.jobs WHERE id = $1`, enq.ID).Scan(&runAt))
	require.False(t, runAt.Before(before.Add(2*time.Second)), "run-at %s is two seconds after the enqueue began at %s", runAt, before)

	// Scheduled, not queued, until its time.
	r = runCLI(t, db.url, "--format", "json", "report", "backlog", "--queue", "nightly")
	require.Equal(t, 0, r.code, r.stderr)
	var backlog []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &backlog), r.stdout)
	require.Len(t, backlog, 1)
	require.Equal(t, float64(1), backlog[0]["scheduled"])
	require.Equal(t, float64(0), backlog[0]["queued"])
	require.NotNil(t, backlog[0]["next_run_at"])

	r = runCLI(t, db.url, "schedules", "create", "every-2s", "--queue", "nightly", "--tenant", "ops", "--cost", "5",
		"--cron", "@every 2s", "--payload", `{"report":"daily"}`)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "created schedule every-2s")
	r = runCLI(t, db.url, "--format", "json", "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list, 1)
	first, err := time.Parse(time.RFC3339, list[0]["next_run_at"].(string))
	require.NoError(t, err)

	// Three ticks and the delayed job.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		ticks := 0
		for _, x := range runs {
			if x.job.Tenant == "ops" {
				ticks++
			}
		}
		return ticks >= 3 && len(runs) >= 4
	}, 30*time.Second, 50*time.Millisecond)
	r = runCLI(t, db.url, "schedules", "pause", "every-2s")
	require.Equal(t, 0, r.code, r.stderr)
	cancel()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	var ticks []time.Time
	delayed := 0
	for _, x := range runs {
		if x.job.Tenant == "acme" {
			delayed++
			require.Equal(t, enq.ID, x.job.ID)
			require.False(t, x.at.Before(runAt), "the delayed job ran at %s, before its run-at %s", x.at, runAt)
			continue
		}
		var key string
		require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT unique_key FROM batchq.outcomes WHERE job_id = $1`,
			x.job.ID).Scan(&key))
		tick, err := time.Parse(time.RFC3339, strings.TrimPrefix(key, "batchq:schedule:every-2s:"))
		require.NoError(t, err, key)
		require.False(t, x.at.Before(tick), "tick %s ran at %s", tick, x.at)
		require.JSONEq(t, `{"report":"daily"}`, string(x.job.Payload))
		ticks = append(ticks, tick)
	}
	require.Equal(t, 1, delayed, "the delayed job ran once")
	require.Equal(t, first, ticks[0], "the first tick is the one schedules list showed")
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, 2*time.Second, ticks[i].Sub(ticks[i-1]), "ticks %v: one job each, none missed", ticks)
	}
}

// Pausing a paused schedule, or resuming one that runs, says so and keeps
// its due tick; an empty --missed is refused by name, not read as one.
func TestSchedulesPauseAndResumeSayWhenNothingChanged(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "0 2 * * *", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	db.exec(t, `UPDATE batchq.schedules SET next_run_at = '2026-01-01T00:00:00Z' WHERE name = 's'`)
	// A name taken is refused as a queue's is (exit 1); one that is not there is a usage error.
	r = runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "batchq: schedule already exists: \"s\"\n", r.stderr)
	r = runCLI(t, db.url, "schedules", "resume", "nosuch")
	require.Equal(t, 2, r.code, r.stderr)

	r = runCLI(t, db.url, "schedules", "resume", "s")
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "schedule s was not paused; nothing changed: "), r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules
		WHERE name = 's' AND next_run_at = '2026-01-01T00:00:00Z' AND paused_at IS NULL`), "its due tick is kept")

	r = runCLI(t, db.url, "schedules", "pause", "s")
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "paused schedule s: "), r.stdout)
	r = runCLI(t, db.url, "schedules", "pause", "s")
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "schedule s was paused already; nothing changed: "), r.stdout)
	r = runCLI(t, db.url, "schedules", "resume", "s")
	require.Equal(t, 0, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stdout, "resumed schedule s: "), r.stdout)

	// JSON and CSV say it too.
	changed := func(args ...string) any {
		r := runCLI(t, db.url, append([]string{"--format", "json"}, args...)...)
		require.Equal(t, 0, r.code, r.stderr)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		return got["changed"]
	}
	require.Equal(t, false, changed("schedules", "resume", "s"))
	require.Equal(t, true, changed("schedules", "pause", "s"))
	require.Equal(t, false, changed("schedules", "pause", "s"))
	r = runCLI(t, db.url, "--format", "csv", "schedules", "resume", "s")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.True(t, strings.HasSuffix(lines[0], ",changed") && strings.HasSuffix(lines[1], ",true"), r.stdout)

	for _, args := range [][]string{
		{"schedules", "set", "s", "--missed", ""},
		{"schedules", "create", "s2", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1", "--missed", ""},
	} {
		r = runCLI(t, db.url, args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, `batchq: --missed: must be skip or one (got "")`)
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules`))
}

// A schedule's payload is JSON in every format, as a job's is: an object in
// --format json, not a string holding one, and the same compact text in csv
// and the table.
func TestSchedulesListPayloadIsJSONInEveryFormat(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1",
		"--payload", `{"report": "daily", "n": [1, 2]}`)
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "--format", "json", "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	var list []struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list, 1)
	require.JSONEq(t, `{"report": "daily", "n": [1, 2]}`, string(list[0].Payload))

	r = runCLI(t, db.url, "--format", "json", "schedules", "pause", "s")
	require.Equal(t, 0, r.code, r.stderr)
	var one struct {
		Payload json.RawMessage `json:"payload"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one), r.stdout)
	require.JSONEq(t, `{"report": "daily", "n": [1, 2]}`, string(one.Payload))

	r = runCLI(t, db.url, "--format", "csv", "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"{""n"":[1,2],""report"":""daily""}"`)
	r = runCLI(t, db.url, "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `{"n":[1,2],"report":"daily"}`)
}

// --max-attempts 0 is the queue's setting for a schedule's jobs, as the rule
// of a value out of range says and as set and enqueue take it: create takes
// it too.
func TestSchedulesMaxAttemptsZeroIsTheQueuesSetting(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1",
		"--max-attempts", "-1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "batchq: --max-attempts: must be in 1..1000, or 0 for the queue's setting (got -1)")
	r = runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1",
		"--max-attempts", "0")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules WHERE name = 's' AND max_attempts = 0`))
	r = runCLI(t, db.url, "schedules", "set", "s", "--max-attempts", "3")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "set", "s", "--max-attempts", "0")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules WHERE name = 's' AND max_attempts = 0`))
}

// A schedule without --ttl gives its jobs the queue's default TTL: the list
// says none of its own (- in the table, null in json, empty in csv), not a
// TTL of 0s.
func TestSchedulesListShowsNoTTLOfItsOwn(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "--format", "json", "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list, 1)
	require.Contains(t, list[0], "ttl")
	require.Nil(t, list[0]["ttl"])
	r = runCLI(t, db.url, "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, " 0s ")

	// One of its own, and back to the queue's with 0s, as --max-attempts 0.
	r = runCLI(t, db.url, "schedules", "set", "s", "--ttl", "2h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules WHERE name = 's' AND ttl = interval '2 hours'`))
	r = runCLI(t, db.url, "schedules", "set", "s", "--ttl", "0s")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules WHERE name = 's' AND ttl IS NULL`))
	r = runCLI(t, db.url, "schedules", "set", "s", "--ttl", "-1h")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --ttl: must be > 0, or 0s for the queue's default TTL (got -1h0m0s)\n", r.stderr)
}

// The database keeps a schedule's TTL in whole microseconds, as a queue's
// --default-ttl: a finer one is refused by that rule, naming the flag, with
// exit 2, not by the table's check with exit 1.
func TestSchedulesTTLIsWholeMicroseconds(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	for ttl, got := range map[string]string{"1ns": "1ns", "999ns": "999ns", "1.5us": "1.5µs"} {
		r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@daily", "--cost", "1",
			"--ttl", ttl)
		require.Equal(t, 2, r.code, r.stderr)
		require.Equal(t, "batchq: --ttl: must be a whole number of microseconds (got "+got+")\n", r.stderr)
	}
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@daily", "--cost", "1",
		"--ttl", "1us")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "set", "s", "--ttl", "0.4us")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --ttl: must be a whole number of microseconds (got 400ns)\n", r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules WHERE name = 's' AND ttl = interval '1 microsecond'`))
}

// A paused schedule fires no tick until it is resumed: list shows no next
// tick for it (- in the table, null in json, empty in csv), not the one it
// was due when paused; resumed, it shows its next tick again.
func TestSchedulesListShowsNoNextTickWhilePaused(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "pause", "s")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "--format", "json", "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), r.stdout)
	require.Len(t, list, 1)
	require.Equal(t, true, list[0]["paused"])
	require.Contains(t, list[0], "next_run_at")
	require.Nil(t, list[0]["next_run_at"])

	r = runCLI(t, db.url, "--format", "csv", "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err, r.stdout)
	require.Len(t, rows, 2)
	next := slices.Index(rows[0], "next_run_at")
	require.Equal(t, "true", rows[1][slices.Index(rows[0], "paused")])
	require.Empty(t, rows[1][next])

	r = runCLI(t, db.url, "schedules", "list")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2)
	col := strings.Index(lines[0], "NEXT RUN AT")
	require.Positive(t, col)
	require.True(t, strings.HasPrefix(lines[1][col:], "- "), r.stdout)

	r = runCLI(t, db.url, "--format", "json", "schedules", "resume", "s")
	require.Equal(t, 0, r.code, r.stderr)
	var one map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one), r.stdout)
	require.NotNil(t, one["next_run_at"])
}

// schedules set with a stored cron or time zone that does not parse, and
// that the command keeps, names the stored one and the flag that replaces
// it, not a flag the command did not give; resume says how to mend it.
func TestSchedulesSetNamesAStoredCronThatDoesNotParse(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "schedules", "create", "s", "--queue", "q", "--tenant", "t", "--cron", "@hourly", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	db.exec(t, `UPDATE batchq.schedules SET cron = '0 25 * * *' WHERE name = 's'`)
	const cronRule = `hour, field 2 of 5, must be 0-23, as *, a value, a range low-high (1-5), a list (1,3) or a step (*/2) ` +
		`(got "25" in "0 25 * * *")`

	r = runCLI(t, db.url, "schedules", "set", "s", "--missed", "skip")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, `batchq: schedule "s": its stored cron "0 25 * * *" does not parse: `+cronRule+
		"; give --cron to replace it\n", r.stderr)
	r = runCLI(t, db.url, "schedules", "pause", "s")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "resume", "s")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, `batchq: schedule "s": its stored cron "0 25 * * *" does not parse: `+cronRule+
		"; replace it first: batchq schedules set s --cron CRON\n", r.stderr)

	db.exec(t, `UPDATE batchq.schedules SET cron = '@hourly', timezone = 'Mars/Olympus' WHERE name = 's'`)
	r = runCLI(t, db.url, "schedules", "set", "s", "--cron", "@daily")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, `batchq: schedule "s": its stored timezone "Mars/Olympus" does not parse: must be an IANA time zone `+
		`such as Europe/Paris (got "Mars/Olympus"); give --timezone to replace it`+"\n", r.stderr)
	r = runCLI(t, db.url, "schedules", "set", "s", "--timezone", "UTC", "--missed", "skip")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules
		WHERE name = 's' AND timezone = 'UTC' AND missed = 'skip' AND paused_at IS NOT NULL`))
}

// A resume that fires the tick a schedule owed from before its pause says
// what became of it: the job it enqueued, or why it enqueued nothing.
func TestSchedulesResumeSaysWhatTheOwedTickDid(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	for _, name := range []string{"s", "full"} {
		tenant := map[string]string{"s": "t", "full": "small"}[name]
		r := runCLI(t, db.url, "schedules", "create", name, "--queue", "q", "--tenant", tenant, "--cron", "@hourly", "--cost", "1")
		require.Equal(t, 0, r.code, r.stderr)
	}
	// Both came due an hour ago, and were paused before a pass fired them:
	// they owe the latest tick before the pause.
	db.exec(t, `UPDATE batchq.schedules SET next_run_at = date_trunc('hour', now()) - interval '1 hour'`)
	for _, name := range []string{"s", "full"} {
		r := runCLI(t, db.url, "schedules", "pause", name)
		require.Equal(t, 0, r.code, r.stderr)
	}
	tick := db.count(t, `SELECT extract(epoch FROM date_trunc('hour', paused_at))::bigint FROM batchq.schedules WHERE name = 's'`)
	owed := time.Unix(tick, 0).UTC().Format(time.RFC3339)

	r := runCLI(t, db.url, "schedules", "resume", "s")
	require.Equal(t, 0, r.code, r.stderr)
	id := db.count(t, `SELECT id FROM batchq.jobs WHERE tenant = 't'`)
	require.True(t, strings.HasSuffix(strings.TrimSpace(r.stdout),
		fmt.Sprintf("; the tick it owed from before its pause, %s, enqueued job %d", owed, id)), r.stdout)

	r = runCLI(t, db.url, "tenants", "set", "small", "--max-queued", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "enqueue", "--queue", "q", "--tenant", "small", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "resume", "full")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("; the tick it owed from before its pause, %s, enqueued nothing: ", owed))
	require.Contains(t, r.stdout, `queue_full (tenant "small" has 1 waiting job, bound 1)`)

	// Resumed again, nothing was owed: nothing more is said.
	r = runCLI(t, db.url, "schedules", "pause", "s")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "resume", "s")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stdout, "owed", r.stdout)
}
