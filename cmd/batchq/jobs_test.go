package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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
	require.Equal(t, "batchq: job 1 cannot be cancelled: it finished (cancelled); only unfinished jobs can be cancelled\n", r.stderr)

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

	// A running job is asked to stop, and says so until its worker stops it.
	db.exec(t, `UPDATE batchq.jobs SET state = 'running', lease_token = gen_random_uuid(),
		lease_expires_at = now() + interval '1 minute', attempt = 1 WHERE id = 2`)
	r = runCLI(t, db.url, "jobs", "cancel", "2", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"id": 2, "action": "stopping"}`, r.stdout)
	r = runCLI(t, db.url, "jobs", "show", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^state\s+running$`, r.stdout)
	require.Regexp(t, `(?m)^cancel_requested_at\s+\d{4}-`, r.stdout)
	require.Regexp(t, `(?m)^note\s+cancel requested: its worker stops it at its next heartbeat`, r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id = 2 AND state = 'running'`))
}

// Cancelling a running job again says it was asked to stop already, and
// keeps the first request's time and reason, as the bulk cancel does.
func TestJobsCancelARunningJobAskedAlready(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5")
	require.Equal(t, 0, r.code, r.stderr)
	db.exec(t, `UPDATE batchq.jobs SET state = 'running', lease_token = gen_random_uuid(),
		lease_expires_at = now() + interval '1 minute', attempt = 1 WHERE id = 1`)

	r = runCLI(t, db.url, "jobs", "cancel", "1", "--reason", "bad import")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "job 1 is running: its worker stops it at its next heartbeat, and it finishes as cancelled\n", r.stdout)
	first := db.count(t, `SELECT (extract(epoch FROM cancel_requested_at) * 1e6)::bigint FROM batchq.jobs WHERE id = 1`)

	r = runCLI(t, db.url, "jobs", "cancel", "1", "--reason", "second thoughts")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "job 1 is running and was already asked to stop: it keeps the first request's reason; "+
		"its worker stops it at its next heartbeat, and it finishes as cancelled\n", r.stdout)
	r = runCLI(t, db.url, "jobs", "cancel", "1", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"id": 1, "action": "already_stopping"}`, r.stdout)

	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id = 1 AND last_error = 'bad import'`),
		"the first request's reason stays")
	require.Equal(t, first, db.count(t, `SELECT (extract(epoch FROM cancel_requested_at) * 1e6)::bigint FROM batchq.jobs WHERE id = 1`),
		"and its time")
}

// jobs show on a succeeded job says why its payload is not there.
func TestJobsShowSaysASucceededJobKeepsNoPayload(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at, result)
		VALUES (5, 'imports', 't', 'k', 'succeeded', 1, 1, 1, now(), now(), now(), '{"ok":1}')`)
	r := runCLI(t, db.url, "jobs", "show", "5")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^payload\s+-$`, r.stdout)
	require.Regexp(t, `(?m)^note\s+the payload is not kept: a succeeded job's outcome keeps its result`, r.stdout)
}

// jobs cancel --queue counts first, and with --yes cancels: waiting jobs
// finish as cancelled and leave the ledger, running ones are asked to stop,
// and only the jobs the filters pick are touched.
// A reason longer than the SQL API records is refused by name, as the SQL
// API refuses it, one job or many, and nothing is cancelled.
func TestJobsCancelRefusesAReasonTooLong(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "enqueue", "--queue", "q", "--tenant", "t", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	long := strings.Repeat("x", 4097)
	for _, args := range [][]string{{"1"}, {"--queue", "q", "--yes"}} {
		r := runCLI(t, db.url, append(append([]string{"jobs", "cancel"}, args...), "--reason", long)...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "batchq: jobs cancel: --reason: must be at most 4096 bytes (got 4097)")
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs`))
	r = runCLI(t, db.url, "jobs", "cancel", "1", "--reason", long[:4096])
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(4096), db.count(t, `SELECT octet_length(error) FROM batchq.outcomes WHERE job_id = 1`))
}

func TestJobsCancelInBulk(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports", "other")
	enqueue := func(queue, tenant, kind string, n int) {
		t.Helper()
		var lines strings.Builder
		for range n {
			fmt.Fprintf(&lines, `{"queue":%q,"tenant":%q,"kind":%q,"cost":10}`+"\n", queue, tenant, kind)
		}
		r := runCLIInput(t, db.url, lines.String(), "enqueue", "--file", "-")
		require.Equal(t, 0, r.code, r.stderr)
	}
	enqueue("imports", "bulk", "embed", 2500)
	enqueue("imports", "bulk", "summarize", 3)
	enqueue("imports", "small", "embed", 2)
	enqueue("other", "bulk", "embed", 4)
	// One of bulk's embeds is running.
	db.exec(t, `UPDATE batchq.jobs SET state = 'running', lease_token = gen_random_uuid(),
		lease_expires_at = now() + interval '1 minute', attempt = 1 WHERE id = 1`)

	r := runCLI(t, db.url, "jobs", "cancel", "--queue", "imports", "--tenant", "bulk", "--kind", "embed")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "jobs of queue imports, tenant bulk, kind embed: 2499 queued, 0 retrying, 0 scheduled and 1 running (25000 tokens); "+
		"nothing changed: run again with --yes to cancel the waiting ones and ask the running ones to stop\n", r.stdout)
	require.Equal(t, int64(2509), db.count(t, `SELECT count(*) FROM batchq.jobs`), "a count changes nothing")

	r = runCLI(t, db.url, "jobs", "cancel", "--queue", "imports", "--tenant", "bulk", "--kind", "embed", "--yes",
		"--reason", "bad import", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.EqualValues(t, 2499, got["cancelled"])
	require.EqualValues(t, 1, got["stopping"])
	require.Equal(t, false, got["dry_run"])
	require.Equal(t, int64(2499), db.count(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'cancelled' AND error = 'bad import'`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE cancel_requested_at IS NOT NULL AND state = 'running'`))
	// The rest is untouched, and bulk's ledger in imports holds only what is left.
	require.Equal(t, int64(3+2+4+1), db.count(t, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(3+2), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'imports' AND state = 'queued'`))

	// Nothing is left to cancel, and a time filter picks nothing enqueued later.
	r = runCLI(t, db.url, "jobs", "cancel", "--queue", "imports", "--tenant", "bulk", "--kind", "embed", "--before", "1h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "jobs of queue imports, tenant bulk, kind embed, enqueued before ", r.stdout[:len("jobs of queue imports, tenant bulk, kind embed, enqueued before ")])
	require.True(t, strings.HasSuffix(r.stdout, ": none; nothing to cancel\n"), r.stdout)
	// The running job was asked to stop already: it is not counted again,
	// and keeps the first reason, not this run's default.
	r = runCLI(t, db.url, "jobs", "cancel", "--queue", "imports", "--after", "1h", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, ": cancelled 5, asked 0 running to stop\n")
	require.Equal(t, int64(4+1), db.count(t, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id = 1 AND last_error = 'bad import'`))

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"cancel"}, "batchq: jobs cancel: give a job ID, or --queue to cancel in bulk"},
		{[]string{"cancel", "--tenant", "bulk"}, "give a job ID, or --queue to cancel in bulk"},
		{[]string{"cancel", "5", "--queue", "imports"}, "batchq: jobs cancel: --queue cancels in bulk, not a job ID: give one or the other"},
		{[]string{"cancel", "--queue", "nope"}, `batchq: unknown queue: "nope"`},
		{[]string{"cancel", "--queue", "imports", "--tenant", ""}, "batchq: --tenant: must not be empty"},
		{[]string{"cancel", "--queue", "imports", "--kind", "a\tb"}, "batchq: --kind: must not contain control characters"},
		{[]string{"cancel", "--queue", "imports", "--before", "yesterday"}, `batchq: --before "yesterday": not an RFC 3339 time`},
		{[]string{"cancel", "--queue", "imports", "--before", "2h", "--after", "1h"}, "batchq: --after "},
		// Go's zero time would drop the filter and cancel every job.
		{[]string{"cancel", "--queue", "imports", "--before", "0001-01-01T00:00:00Z", "--yes"},
			`batchq: --before "0001-01-01T00:00:00Z": must be after 0001-01-01T00:00:00Z, which stands for no time`},
	} {
		r := runCLI(t, db.url, append([]string{"jobs"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.msg, tc.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	require.Equal(t, int64(4+1), db.count(t, `SELECT count(*) FROM batchq.jobs`))
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
		{[]string{"show", "99"}, 2, "batchq: job not found: no job or outcome 99"},
		{[]string{"cancel", "99"}, 2, "batchq: job not found: no job or outcome 99"},
		{[]string{"retry", "99"}, 2, "batchq: job not found: no job or outcome 99"},
		{[]string{"cancel", "1", "--reason"}, 2, "batchq: jobs cancel: --reason needs a value"},
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

// Resubmitting a job whose queue was deleted says so, and is not a usage
// error: the command line named a job that exists.
func TestRetryOfAJobWhoseQueueWasDeleted(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	for _, args := range [][]string{
		{"enqueue", "--queue", "imports", "--tenant", "t", "--cost", "1"},
		{"jobs", "cancel", "1"},
		{"queues", "delete", "imports"},
	} {
		r := runCLI(t, db.url, args...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
	}
	r := runCLI(t, db.url, "jobs", "retry", "1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "batchq: job 1 cannot be resubmitted: its queue imports no longer exists; "+
		"create it again (batchq queues create imports) to resubmit it\n", r.stderr)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.jobs`))
}

// An interrupt (Ctrl-C) stops a bulk cancel as it stops enqueue --file:
// "interrupted", what the batches before it did, exit 1. The batch here
// waits for a job row another transaction holds, and is interrupted while
// it waits: the first of 1001 jobs (nothing done yet), or the last (after
// a first batch of 1000).
func TestJobsCancelInBulkSaysAnInterruptAsEnqueueDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		held   string // the job row held
		msg    string
		cancel int64 // jobs cancelled
	}{
		{"in the first batch", "min", "batchq: interrupted; nothing was cancelled\n", 0},
		{"in the second batch", "max",
			"batchq: interrupted; before it, cancelled 1000 and asked 0 running to stop (run it again for the rest)\n", 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newCLIDB(t, "big")
			r := runCLIInput(t, db.url, strings.Repeat(`{"queue":"big","tenant":"t","cost":1}`+"\n", 1001), "enqueue", "--file", "-")
			require.Equal(t, 0, r.code, r.stderr)
			ctx := context.Background()
			holder, err := db.pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { holder.Rollback(ctx) })
			_, err = holder.Exec(ctx, `SELECT 1 FROM batchq.jobs WHERE id = (SELECT `+tc.held+`(id) FROM batchq.jobs) FOR UPDATE`)
			require.NoError(t, err)

			out, errOut, exited, interrupt := interruptibleCLI(t, db, strings.NewReader(""), "jobs", "cancel", "--queue", "big", "--yes")
			require.Eventually(t, func() bool {
				return db.count(t, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%cancel_jobs%'`) == 1
			}, 10*time.Second, 10*time.Millisecond, "the batch waiting for the held job")
			interrupt()
			select {
			case code := <-exited:
				require.Equal(t, 1, code, errOut.String())
			case <-time.After(10 * time.Second):
				t.Fatal("jobs cancel did not stop when interrupted")
			}
			require.Equal(t, tc.msg, errOut.String())
			require.Empty(t, out.String())
			require.NoError(t, holder.Rollback(ctx))
			require.Equal(t, tc.cancel, db.count(t, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'cancelled'`))
		})
	}
}
