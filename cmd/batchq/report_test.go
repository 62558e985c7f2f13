package main

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with what the commands print")

// golden compares got with testdata/name, or rewrites that file with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/batchq -run %s -update to create it", t.Name())
	require.Equal(t, string(want), got)
}

// reportFixture is a database with fixed queues, tenants, jobs, outcomes and
// quota rows, every time in it fixed, for the reports' golden files.
func reportFixture(t *testing.T) *cliDB {
	t.Helper()
	db := newCLIDB(t, "imports", "nightly")
	for _, args := range [][]string{
		{"tenants", "set", "big", "--weight", "3"},
		{"tenants", "set", "small", "--max-queued", "50"},
		{"queues", "pause", "nightly"},
	} {
		r := runCLI(t, db.url, args...)
		require.Equal(t, 0, r.code, r.stderr)
	}
	jobs := strings.Join([]string{
		`{"queue":"imports","tenant":"big","cost":100}`,
		`{"queue":"imports","tenant":"big","cost":200}`,
		`{"queue":"imports","tenant":"big","cost":300}`,
		`{"queue":"imports","tenant":"big","cost":400}`,
		`{"queue":"imports","tenant":"small","cost":50}`,
		`{"queue":"nightly","tenant":"small","cost":10}`,
	}, "\n")
	r := runCLIInput(t, db.url, jobs, "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "small", "--cost", "20", "--run-at", "2099-01-01T00:00:00Z")
	require.Equal(t, 0, r.code, r.stderr)
	// Job 1 runs, job 2 waits to retry, job 7 is scheduled; every time is fixed.
	db.exec(t, `UPDATE batchq.jobs SET state = 'running', attempt = 1, lease_token = gen_random_uuid(),
		lease_expires_at = '2025-03-01T12:10:00Z' WHERE id = 1`)
	db.exec(t, `UPDATE batchq.jobs SET state = 'retrying', attempt = 1, run_after = '2025-03-01T12:20:00Z' WHERE id = 2`)
	db.exec(t, `UPDATE batchq.jobs SET enqueued_at = '2025-03-01T12:00:00Z'::timestamptz + id * interval '1 minute',
		deadline = '2025-03-02T12:00:00Z'::timestamptz - id * interval '1 hour'`)

	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, actual_cost,
			attempts, max_attempts, deadline, enqueued_at, first_claimed_at, finished_at, worker, error, run_at)
		SELECT o.id, o.queue, o.tenant, 'summarize', o.outcome::batchq.job_outcome, o.est, o.actual, o.attempts, 5,
		       '2025-03-02T00:00:00Z', '2025-03-01T12:00:00Z',
		       '2025-03-01T12:00:00Z'::timestamptz + o.wait, '2025-03-01T12:00:00Z'::timestamptz + o.took, o.worker, o.error,
		       o.run_at::timestamptz
		FROM (VALUES
			(101, 'imports', 'big',   'succeeded', 1000, 1100, 1, interval '2 seconds',  interval '30 seconds', 'w1', NULL, NULL),
			(102, 'imports', 'big',   'succeeded', 1000, NULL, 1, interval '4 seconds',  interval '40 seconds', 'w2', NULL, NULL),
			(103, 'imports', 'big',   'failed',     500, NULL, 5, interval '6 seconds',  interval '50 seconds', 'w1', 'provider said 503', NULL),
			(104, 'imports', 'small', 'succeeded',  800,  700, 1, interval '1 second',   interval '20 seconds', 'w2', NULL, NULL),
			(105, 'imports', 'small', 'expired',    300, NULL, 0, NULL,                  interval '60 seconds', NULL, 'deadline passed while waiting', NULL),
			-- Cancelled while still scheduled: its outcome keeps its run-at.
			(106, 'nightly', 'small', 'cancelled',   20, NULL, 0, NULL,                  interval '70 seconds', NULL, 'cancelled by operator',
			 '2025-03-01T18:00:00Z'),
			(107, 'imports', 'big',   'succeeded', 9999, NULL, 1, interval '1 second',   interval '2 hours',    'w1', NULL, NULL)
		) AS o (id, queue, tenant, outcome, est, actual, attempts, wait, took, worker, error, run_at)`)

	db.exec(t, `INSERT INTO batchq.quota (key, requests_limit, requests_remaining, requests_reset_at, tokens_limit,
			tokens_remaining, tokens_reset_at, paused_until, observed_at, updated_at)
		VALUES ('openai/gpt-4o', 500, 480, '2025-03-01T12:01:00Z', 90000, 1200, '2025-03-01T12:00:30Z',
		        NULL, '2025-03-01T12:00:00Z', '2025-03-01T12:00:00Z'),
		       ('anthropic/claude', NULL, NULL, NULL, 40000, 0, '2025-03-01T12:01:00Z',
		        '2025-03-01T12:00:45Z', '2025-03-01T12:00:15Z', '2025-03-01T12:00:15Z')`)
	return db
}

// The window the fixture's outcomes fall in, but for job 107.
var reportWindow = []string{"--since", "2025-03-01T12:00:00Z", "--until", "2025-03-01T13:00:00Z"}

// normaliseAge replaces the oldest_queued_age column, which grows with the
// wall clock, with <age>. It is the last column, so the table's alignment
// does not depend on it.
func normaliseAge(format, out string) string {
	switch format {
	case "json":
		return regexp.MustCompile(`("oldest_queued_age": )[-0-9.e+]+`).ReplaceAllString(out, `$1"<age>"`)
	case "csv":
		return regexp.MustCompile(`(?m)^(.*,)[-0-9.e+]+$`).ReplaceAllString(out, `$1<age>`)
	}
	lines := strings.Split(out, "\n")
	for i := 1; i < len(lines); i++ {
		lines[i] = regexp.MustCompile(`\S+$`).ReplaceAllString(lines[i], "<age>")
	}
	return strings.Join(lines, "\n")
}

func TestReportGolden(t *testing.T) {
	t.Parallel()
	db := reportFixture(t)
	for _, report := range []struct {
		name string
		args []string
	}{
		{"backlog", nil},
		{"tenants", reportWindow},
		{"outcomes", reportWindow},
		{"quota", nil},
	} {
		for _, format := range []string{"table", "json", "csv"} {
			t.Run(report.name+"/"+format, func(t *testing.T) {
				args := append([]string{"--format", format, "report", report.name}, report.args...)
				r := runCLI(t, db.url, args...)
				require.Equal(t, 0, r.code, r.stderr)
				out := r.stdout
				if report.name == "backlog" {
					out = normaliseAge(format, out)
				}
				golden(t, "report_"+report.name+"."+format, out)

				// --format after the command says the same.
				args = append([]string{"report", report.name, "--format", format}, report.args...)
				again := runCLI(t, db.url, args...)
				require.Equal(t, 0, again.code, again.stderr)
				if report.name != "backlog" {
					require.Equal(t, r.stdout, again.stdout)
				}
			})
		}
	}
}

func TestReportFilters(t *testing.T) {
	t.Parallel()
	db := reportFixture(t)

	r := runCLI(t, db.url, "--format", "csv", "report", "backlog", "--queue", "nightly")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^queue,tenant,.*\nnightly,small,1,10,0,0,0,true,2025-03-01T12:06:00Z,,2025-03-02T06:00:00Z,[0-9.]+\n$`, r.stdout)

	r = runCLI(t, db.url, append([]string{"--format", "csv", "report", "tenants", "--queue", "nightly"}, reportWindow...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "\n"), r.stdout)
	require.Contains(t, r.stdout, "\nnightly,small,1,0,0,0,1,")

	r = runCLI(t, db.url, append([]string{"--format", "csv", "report", "outcomes", "--tenant", "big", "--outcome", "succeeded"}, reportWindow...)...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^job_id,.*\n102,.*\n101,.*\n$`, r.stdout, "newest first, 107 outside the window")

	// Without --until the window runs to now: 107 is in it.
	r = runCLI(t, db.url, "--format", "csv", "report", "outcomes", "--since", "2025-03-01T12:00:00Z", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^job_id,.*\n107,imports,big,`, r.stdout)

	// With --until alone the window is the day before it: 101 and 102 are
	// in it, 107 (later) is not.
	r = runCLI(t, db.url, "--format", "csv", "report", "outcomes", "--tenant", "big", "--outcome", "succeeded",
		"--until", "2025-03-01T13:00:00Z")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^job_id,.*\n102,.*\n101,.*\n$`, r.stdout)

	// The default window is the last 24 hours: the fixture is older.
	r = runCLI(t, db.url, "--format", "csv", "report", "outcomes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "job_id,queue,tenant,kind,outcome,attempts,estimated_cost,actual_cost,enqueued_at,finished_at,wait,run,total,worker,error,run_at\n", r.stdout)
}

func TestReportErrors(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"tenants", "--since", "last week"}, `batchq: --since "last week": not an RFC 3339 time`},
		{[]string{"outcomes", "--until", "soon"}, `batchq: --until "soon": not an RFC 3339 time`},
		{[]string{"tenants", "--since", "1h", "--until", "2h"}, "is not before --until"},
		{[]string{"outcomes", "--outcome", "lost"}, `batchq: --outcome "lost": must be succeeded, failed, expired, cancelled or discarded`},
		{[]string{"outcomes", "--limit", "0"}, "batchq: --limit 0: must be 1 or more"},
		// A name no tenant can have, refused by the tenant name's rule as
		// jobs cancel --tenant refuses it, not answered with no rows.
		{[]string{"outcomes", "--tenant", "acme\xff"}, "batchq: --tenant: must be valid UTF-8\n"},
		{[]string{"outcomes", "--tenant", "a\nb"}, `batchq: --tenant: must not contain control characters (got "a\nb")` + "\n"},
		{[]string{"outcomes", "--tenant", "a\x00b"}, `batchq: --tenant: must not contain control characters (got "a\u0000b")` + "\n"},
		{[]string{"outcomes", "--tenant", strings.Repeat("t", 257)}, "batchq: --tenant: must be at most 256 bytes (got 257)\n"},
		{[]string{"outcomes", "--tenant", ""}, "batchq: --tenant: must not be empty"},
		{[]string{"outcomes", "--queue", "a\nb"}, `batchq: unknown queue: "a\nb" is not a queue name`},
		{[]string{"tenants", "--queue", "a\nb"}, `batchq: unknown queue: "a\nb" is not a queue name`},
		{[]string{"backlog", "--queue", "a\nb"}, `batchq: unknown queue: "a\nb" is not a queue name`},
		{[]string{"backlog", "extra"}, `unexpected argument "extra"`},
		{[]string{"quota", "--format", "xml"}, `batchq: --format "xml": must be table, json or csv`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runCLI(t, db.url, append([]string{"report"}, tc.args...)...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
		})
	}
}

// A report of a queue that does not exist fails as enqueue does, instead
// of printing an empty table as if the queue had nothing in it: an unknown
// queue is a usage error (exit 2) wherever a command names one.
func TestReportUnknownQueue(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	for _, report := range []string{"backlog", "tenants", "outcomes"} {
		r := runCLI(t, db.url, "report", report, "--queue", "nosuch")
		require.Equal(t, 2, r.code, "%s: %s", report, r.stderr)
		if report == "backlog" {
			require.Equal(t, "batchq: unknown queue: \"nosuch\"\n", r.stderr, report)
		} else {
			require.Regexp(t, `^batchq: unknown queue: "nosuch", and no outcome of it matches between \S+ and \S+\n$`, r.stderr, report)
		}
		require.Empty(t, r.stdout, report)

		r = runCLI(t, db.url, "report", report, "--queue", "imports")
		require.Equal(t, 0, r.code, "%s: %s", report, r.stderr)
	}
	// Nor can a name no queue could have (the database refuses bytes that
	// are not UTF-8 with an error of its own).
	for _, report := range []string{"backlog", "tenants", "outcomes"} {
		r := runCLI(t, db.url, "report", report, "--queue", "q\xff")
		require.Equal(t, 2, r.code, "%s: %s", report, r.stderr)
		require.Equal(t, "batchq: unknown queue: \"q\\xff\" is not a queue name: "+
			"1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit\n", r.stderr, report)
	}
	r := runCLI(t, db.url, "enqueue", "--queue", "nosuch", "--tenant", "a", "--cost", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: unknown queue: \"nosuch\"\n", r.stderr, "the same error as enqueue's")
}

// A deleted queue's outcomes stay, and the reports of finished jobs still
// find them by the queue's name; the backlog of a queue that is gone is
// refused as before.
func TestHistoryReportsOutliveTheirQueue(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "gone")
	r := runCLI(t, db.url, "enqueue", "--queue", "gone", "--tenant", "acme", "--cost", "5")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "jobs", "cancel", "--queue", "gone", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "queues", "delete", "gone")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "--format", "csv", "report", "outcomes", "--queue", "gone")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, ",gone,acme,default,cancelled,", "the deleted queue's outcome")
	r = runCLI(t, db.url, "--format", "csv", "report", "tenants", "--queue", "gone")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "gone,acme,1,", "the deleted queue's usage")
	r = runCLI(t, db.url, "report", "outcomes", "--queue", "gone", "--tenant", "other")
	require.Equal(t, 2, r.code, "nothing of the gone queue matches: %s", r.stdout)
	require.Contains(t, r.stderr, `batchq: unknown queue: "gone", and no outcome of it matches between`)
	r = runCLI(t, db.url, "report", "backlog", "--queue", "gone")
	require.Equal(t, 2, r.code, r.stdout)
	require.Equal(t, "batchq: unknown queue: \"gone\"\n", r.stderr)
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2025-01-02T03:04:05Z":      time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		"2025-01-02T03:04:05+02:00": time.Date(2025, 1, 2, 1, 4, 5, 0, time.UTC),
		"90m":                       now.Add(-90 * time.Minute),
		"7d":                        now.Add(-7 * 24 * time.Hour),
		"0s":                        now,
	} {
		got, err := parseWhen("since", in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: got %s, want %s", in, got, want)
	}
	for _, in := range []string{"", "yesterday", "-1h", "1.5d", "2025-01-02", "0001-01-01T00:00:00Z", "0001-01-01T01:00:00+01:00"} {
		_, err := parseWhen("since", in, now)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), "--since")
	}
}

// The help says what served_tokens counts as batchq.tenant_usage counts it:
// every attempt is charged, expired and cancelled jobs that had run one
// included (TestTenantUsageCountsAnAttemptOfAnUnfinishedJobAsServed and
// TestTenantUsageReport check the SQL).
func TestReportTenantsHelpSaysWhatIsServed(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "report", "tenants", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	help := strings.Join(strings.Fields(r.stdout), " ")
	require.Contains(t, help, "served_tokens are what the scheduler charged: each attempt of a job at its estimate "+
		"(a job retried after a failure or a lost lease is charged for every attempt)")
	require.NotContains(t, help, "succeeded plus failed tokens")
}

var durationCases = map[string]time.Duration{
	"90s": 90 * time.Second, "36h": 36 * time.Hour, "1h30m": 90 * time.Minute, "0s": 0, "-1h": -time.Hour,
	"7d": 7 * 24 * time.Hour, "0d": 0, "36500d": 36500 * 24 * time.Hour, "-1d": -24 * time.Hour,
	"876000h": 876000 * time.Hour,
}

// durationErrors are parseDuration's errors: what it says of text that is no
// duration, of one too large and of one too negative to hold.
var durationErrors = []string{"not a duration like 90m, 36h or 30d", "must be at most 36500d (876000h)", "must not be negative"}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range durationCases {
		got, err := parseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "7", "1.5d", "1d12h", "d", "soon", "1x", "--1h"} {
		_, err := parseDuration(in)
		require.EqualError(t, err, durationErrors[0], in)
	}
	// Past the limit the error says the limit, in either form.
	for _, in := range []string{"36501d", "876001h", "9999999h", "99999999999999999999d", "99999999999999999999h", "2562048h"} {
		_, err := parseDuration(in)
		require.EqualError(t, err, durationErrors[1], in)
	}
	for _, in := range []string{"-36501d", "-9999999h", "-99999999999999999999d"} {
		_, err := parseDuration(in)
		require.EqualError(t, err, durationErrors[2], in)
	}
}

// FuzzParseDuration checks that what parses reads back the same from its
// Go form, and that what does not gets one of the errors that say the rule.
func FuzzParseDuration(f *testing.F) {
	for in := range durationCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		d, err := parseDuration(in)
		if err != nil {
			require.Contains(t, durationErrors, err.Error())
			return
		}
		again, err := parseDuration(d.String())
		require.NoError(t, err)
		require.Equal(t, d, again)
	})
}

// A queue that served no tokens in the window (every job cancelled before
// it ran) has no token shares: empty in tables, null in JSON, as
// batchq.tenant_usage gives them, not 0, which reads as starved.
func TestReportTenantsLeavesTheShareOfNothingServedEmpty(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "idle")
	for _, tenant := range []string{"a", "b"} {
		r := runCLI(t, db.url, "enqueue", "--queue", "idle", "--tenant", tenant, "--cost", "5")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := runCLI(t, db.url, "jobs", "cancel", "--queue", "idle", "--yes")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "--format", "json", "report", "tenants", "--queue", "idle")
	require.Equal(t, 0, r.code, r.stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
	require.Len(t, rows, 2)
	for _, row := range rows {
		require.Contains(t, row, "token_share")
		require.Nil(t, row["token_share"], "tenant %v", row["tenant"])
		require.EqualValues(t, 0.5, row["weight_share"])
	}
	var viaSQL int64
	require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT count(*) FROM batchq.tenant_usage(now() - interval '1 day', now() + interval '1 minute')
		WHERE queue = 'idle' AND token_share IS NULL`).Scan(&viaSQL))
	require.Equal(t, int64(2), viaSQL, "the SQL function says the same")
}

// A job cancelled while still scheduled shows its run-at in report outcomes
// and in batchq.audit, as jobs show does; a scheduled job that came due and
// ran shows none.
func TestReportOutcomesShowTheRunAtOfAJobCancelledWhileScheduled(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	for range 2 {
		r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5", "--delay", "720h")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := runCLI(t, db.url, "jobs", "cancel", "1", "--reason", "not needed")
	require.Equal(t, 0, r.code, r.stderr)
	var runAt time.Time
	require.NoError(t, db.pool.QueryRow(context.Background(), `SELECT run_at FROM batchq.audit WHERE job_id = 1`).Scan(&runAt))
	require.WithinDuration(t, time.Now().Add(720*time.Hour), runAt, time.Minute)
	// Job 2 comes due and runs.
	db.exec(t, `UPDATE batchq.jobs SET run_after = now() WHERE id = 2`)
	client, err := queue.NewClient(db.pool, queue.Config{})
	require.NoError(t, err)
	_, err = client.Maintain(context.Background(), "imports")
	require.NoError(t, err)
	jobs, err := client.Claim(context.Background(), "imports", nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, client.Complete(context.Background(), jobs[0], queue.Result{}))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.audit WHERE job_id = 2 AND run_at IS NULL`))

	r = runCLI(t, db.url, "--format", "json", "report", "outcomes")
	require.Equal(t, 0, r.code, r.stderr)
	var rows []struct {
		JobID   int64      `json:"job_id"`
		Outcome string     `json:"outcome"`
		RunAt   *time.Time `json:"run_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, int64(2), rows[0].JobID)
	require.Equal(t, "succeeded", rows[0].Outcome)
	require.Nil(t, rows[0].RunAt, "a job that ran has no run-at: %s", r.stdout)
	require.Equal(t, int64(1), rows[1].JobID)
	require.Equal(t, "cancelled", rows[1].Outcome)
	require.NotNil(t, rows[1].RunAt, r.stdout)
	require.True(t, runAt.Equal(*rows[1].RunAt), "got %s, want %s", rows[1].RunAt, runAt)

	r = runCLI(t, db.url, "--format", "csv", "report", "outcomes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `^job_id,queue,tenant,kind,outcome,attempts,estimated_cost,actual_cost,enqueued_at,finished_at,wait,run,total,worker,error,run_at\n`, r.stdout)
	require.Regexp(t, `\n2,imports,acme,default,succeeded,1,5,,[^\n]*,\n`, r.stdout, "no run-at, last")
	require.Regexp(t, `\n1,imports,acme,default,cancelled,0,5,,[^\n]*,`+regexp.QuoteMeta(runAt.UTC().Format(time.RFC3339Nano))+`\n`, r.stdout)
}
