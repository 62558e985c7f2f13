package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJobsShowCancelRetry(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--kind", "summarize", "--cost", "40",
		"--ttl", "2h", "--payload", `{"doc":7}`)
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "jobs", "show", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^state\s+queued$`, r.stdout)
	require.Regexp(t, `(?m)^finished\s+false$`, r.stdout)
	require.Regexp(t, `(?m)^payload\s+\{"doc":7\}$`, r.stdout)
	require.Regexp(t, `(?m)^finished_at\s+-$`, r.stdout)

	// The flag after the id is read too.
	r = runCLI(t, db.url, "jobs", "cancel", "1", "--reason", "duplicate import")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "cancelled job 1\n", r.stdout)

	r = runCLI(t, db.url, "jobs", "show", "1", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &shown))
	require.Equal(t, "cancelled", shown["state"])
	require.Equal(t, true, shown["finished"])
	require.Equal(t, "duplicate import", shown["error"])
	require.Equal(t, map[string]any{"doc": float64(7)}, shown["payload"])
	require.Nil(t, shown["result"])

	r = runCLI(t, db.url, "jobs", "cancel", "1")
	require.Equal(t, 1, r.code)
	require.Equal(t, "batchq: job 1 cannot be cancelled: it finished (cancelled); only queued or retrying jobs can be cancelled\n", r.stderr)

	r = runCLI(t, db.url, "jobs", "retry", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "resubmitted job 1 as job 2\n", r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id = 2 AND tenant = 'acme'
		AND kind = 'summarize' AND cost = 40 AND payload = '{"doc": 7}' AND state = 'queued'`))

	r = runCLI(t, db.url, "jobs", "retry", "1", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"id": 1, "action": "already_resubmitted", "new_id": 2}`, r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs`))

	r = runCLI(t, db.url, "jobs", "retry", "2")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "batchq: job 2 cannot be retried: it is queued")

	// A job waiting to retry becomes due now.
	db.exec(t, `UPDATE batchq.jobs SET state = 'retrying', run_after = now() + interval '1 hour' WHERE id = 2`)
	r = runCLI(t, db.url, "jobs", "retry", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "job 2 is due now")
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id = 2 AND run_after <= now()`))

	db.exec(t, `UPDATE batchq.jobs SET state = 'running' WHERE id = 2`)
	r = runCLI(t, db.url, "jobs", "cancel", "2")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "batchq: job 2 cannot be cancelled: it is running")
}

func TestJobsErrors(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"show", "abc"}, 2, `batchq: job id "abc": must be a positive integer`},
		{[]string{"show", "-5"}, 2, "flag provided but not defined: -5"},
		{[]string{"show"}, 2, "missing ID"},
		{[]string{"show", "1", "2"}, 2, `unexpected argument "2"`},
		{[]string{"show", "99"}, 1, "batchq: job not found: no job or outcome 99"},
		{[]string{"cancel", "99"}, 1, "batchq: job not found: no job or outcome 99"},
		{[]string{"retry", "99"}, 1, "batchq: job not found: no job or outcome 99"},
		{[]string{"cancel", "1", "--reason"}, 2, "flag needs an argument: --reason"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runCLI(t, db.url, append([]string{"jobs"}, tc.args...)...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
		})
	}
}

func TestRetryRefusesASucceededJob(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at)
		VALUES (5, 'imports', 't', 'k', 'succeeded', 1, 1, 1, now(), now(), now())`)
	r := runCLI(t, db.url, "jobs", "retry", "5")
	require.Equal(t, 1, r.code)
	require.Equal(t, "batchq: resubmit job 5: it succeeded; only failed, discarded, expired or cancelled jobs are resubmitted\n", r.stderr)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.jobs`))
}

// Retrying a finished job again returns its copy only while the copy is
// unfinished or within the queue's --unique-for after it finished, as the
// help and README say; after that it makes another copy.
func TestRetryTwiceMakesOneCopyOnlyWithinTheUniqueWindow(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "jobs", "retry", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, strings.Join(strings.Fields(r.stdout), " "),
		"Resubmitting the same job again returns that copy while the copy is unfinished, or within the queue's --unique-for after it finished; later, it makes another copy.")

	db := newCLIDB(t, "imports")
	r = runCLI(t, db.url, "queues", "create", "nightly", "--unique-for", "1h")
	require.Equal(t, 0, r.code, r.stderr)
	run := func(args ...string) string {
		t.Helper()
		r := runCLI(t, db.url, args...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		return r.stdout
	}
	for _, q := range []struct {
		name      string
		uniqueFor bool
	}{{"imports", false}, {"nightly", true}} {
		t.Run(q.name, func(t *testing.T) {
			out := run("enqueue", "--queue", q.name, "--tenant", "acme", "--cost", "5", "--format", "json")
			var enq struct{ ID int64 }
			require.NoError(t, json.Unmarshal([]byte(out), &enq))
			id := enq.ID
			run("jobs", "cancel", fmt.Sprint(id))

			type retried struct {
				Action string `json:"action"`
				NewID  int64  `json:"new_id"`
			}
			retry := func() retried {
				var got retried
				require.NoError(t, json.Unmarshal([]byte(run("jobs", "retry", fmt.Sprint(id), "--format", "json")), &got))
				return got
			}
			first := retry()
			require.Equal(t, "resubmitted", first.Action)
			require.Equal(t, retried{"already_resubmitted", first.NewID}, retry(), "the copy is unfinished")

			run("jobs", "cancel", fmt.Sprint(first.NewID))
			again := retry()
			if q.uniqueFor {
				require.Equal(t, retried{"already_resubmitted", first.NewID}, again, "the copy finished within --unique-for")
			} else {
				require.Equal(t, "resubmitted", again.Action, "the copy finished, and --unique-for is 0s")
				require.NotEqual(t, first.NewID, again.NewID)
			}
		})
	}
}
