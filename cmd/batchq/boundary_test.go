package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// TestEnqueueRulesAreOneAcrossGoCLIAndSQL drives each rule a job must keep
// through the three ways in: the Go API (Enqueue and EnqueueMany), the CLI
// (a flag, and a line of --file), and psql as the application's
// least-privilege role (batchq.enqueue_job and batchq.enqueue_jobs). Each
// refuses the job with the same words, and SQL with the SQLSTATE of the
// rule's class; nothing is written. The rows include what a hostile test
// once slipped past the SQL functions: a cost of 9.2×10^18, max_attempts
// 2^31−1, a 30 MB payload, an empty tenant and control characters.
func TestEnqueueRulesAreOneAcrossGoCLIAndSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "this test runs psql: install PostgreSQL's client (Debian: postgresql-client)")
	dbURL := pgtest.URL(t)
	owner := pgtest.Connect(t, dbURL)
	admin, err := queue.NewClient(owner, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, admin.CreateQueue(ctx, queue.QueueConfig{Name: "docs"}))
	require.NoError(t, admin.SetTenant(ctx, queue.Tenant{Name: "small", Weight: 1, MaxQueued: 1}))
	_, err = admin.Enqueue(ctx, queue.NewJob{Queue: "docs", Tenant: "small", Cost: 1})
	require.NoError(t, err)

	super := withDatabase(t, pgtest.ServerURL(t), dbURL)
	app, worker, operator := uniqueRole(t, "app"), uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, app, worker, operator)
	pw := randomHex(t, 16)
	env := "BATCHQ_TEST_PW_" + strings.ToUpper(app)
	require.NoError(t, os.Setenv(env, pw))
	t.Cleanup(func() { os.Unsetenv(env) })
	r := runCLI(t, super, "migrate", "grants", "--app-role", app, "--worker-role", worker, "--operator-role", operator, "--apply", "--app-password-env", env)
	require.Equal(t, 0, r.code, r.stderr)
	appURL := withUser(t, dbURL, app, pw)
	appClient, err := queue.NewClient(pgtest.Connect(t, appURL), queue.Config{})
	require.NoError(t, err)

	ok := queue.NewJob{Queue: "docs", Tenant: "t", Cost: 10}
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	huge := `{"x":"` + strings.Repeat("x", 30_000_000) + `"}`
	inFuture := `must be in the future \(got ` + regexp.QuoteMeta(past.Format(time.RFC3339Nano)) + `, now \S+Z\)`
	cases := []struct {
		name  string
		job   func(*queue.NewJob)
		field string // "" for a refusal of the queue, not of the job
		code  string
		rule  string // a regexp of the rule's text, or of the whole error when field is ""
	}{
		{"queue name", func(j *queue.NewJob) { j.Queue = "no such!" }, "queue", "BQ100",
			regexp.QuoteMeta(`must name a queue: 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit (got "no such!")`)},
		{"queue name starting with _", func(j *queue.NewJob) { j.Queue = "_docs" }, "queue", "BQ100",
			regexp.QuoteMeta(`must name a queue: 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit (got "_docs")`)},
		{"empty tenant", func(j *queue.NewJob) { j.Tenant = "" }, "tenant", "BQ100", "must not be empty"},
		{"tenant too long", func(j *queue.NewJob) { j.Tenant = strings.Repeat("t", 300) }, "tenant", "BQ100",
			regexp.QuoteMeta("must be at most 256 bytes (got 300)")},
		{"tenant with a tab", func(j *queue.NewJob) { j.Tenant = "a\tb" }, "tenant", "BQ100",
			regexp.QuoteMeta(`must not contain control characters (got "a\tb")`)},
		{"kind with a newline", func(j *queue.NewJob) { j.Kind = "x\ny" }, "kind", "BQ100",
			regexp.QuoteMeta(`must not contain control characters (got "x\ny")`)},
		{"zero cost", func(j *queue.NewJob) { j.Cost = 0 }, "cost", "BQ101", regexp.QuoteMeta("must be in 1..1000000000 (got 0)")},
		{"cost near int64's limit", func(j *queue.NewJob) { j.Cost = 9_200_000_000_000_000_000 }, "cost", "BQ101",
			regexp.QuoteMeta("must be in 1..1000000000 (got 9200000000000000000)")},
		{"negative ttl", func(j *queue.NewJob) { j.TTL = -90 * time.Second }, "ttl", "BQ103", regexp.QuoteMeta("must be > 0 (got -1m30s)")},
		{"deadline and ttl", func(j *queue.NewJob) { j.Deadline, j.TTL = time.Now().Add(time.Hour), time.Hour }, "deadline", "BQ103",
			"give a deadline or a ttl, not both"},
		{"deadline passed", func(j *queue.NewJob) { j.Deadline = past }, "deadline", "BQ103", inFuture},
		{"deadline in year 10000", func(j *queue.NewJob) {
			j.Deadline = time.Date(9999, 12, 31, 23, 0, 0, 0, time.FixedZone("", -5*3600))
		}, "deadline", "BQ103", "must be before year 10000"},
		{"max_attempts of int32's limit", func(j *queue.NewJob) { j.MaxAttempts = 2147483647 }, "max_attempts", "BQ101",
			regexp.QuoteMeta("must be in 1..1000, or 0 for the queue's setting (got 2147483647)")},
		{"negative max_attempts", func(j *queue.NewJob) { j.MaxAttempts = -1 }, "max_attempts", "BQ101",
			regexp.QuoteMeta("must be in 1..1000, or 0 for the queue's setting (got -1)")},
		{"30 MB payload", func(j *queue.NewJob) { j.Payload = json.RawMessage(huge) }, "payload", "BQ102",
			regexp.QuoteMeta("must be at most 1048576 bytes as jsonb text (got 30000009)")},
		{"unique key with a control character", func(j *queue.NewJob) { j.UniqueKey = "k\x01" }, "unique_key", "BQ100",
			regexp.QuoteMeta(`must not contain control characters (got "k\u0001")`)},
		{"unknown queue", func(j *queue.NewJob) { j.Queue = "nope" }, "", "BQ201", regexp.QuoteMeta(`batchq: unknown queue: "nope"`)},
		{"full tenant", func(j *queue.NewJob) { j.Tenant = "small" }, "", "BQ200",
			regexp.QuoteMeta(`batchq: queue_full: tenant "small" has 1 queued job in queue "docs" (bound 1); 1 more does not fit`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := ok
			tc.job(&bad)
			// The whole error, from a call of one job and as the second of two.
			one, many, sqlMany := tc.rule, tc.rule, tc.rule
			if tc.field != "" {
				one = regexp.QuoteMeta("batchq: invalid job: "+tc.field+": ") + tc.rule
				many = regexp.QuoteMeta("batchq: invalid job 2: "+tc.field+": ") + tc.rule
				sqlMany = many
				if tc.field == "queue" {
					// SQL's multi-job form takes the queue once, for the
					// whole call: it blames the first job.
					sqlMany = regexp.QuoteMeta("batchq: invalid job 1: queue: ") + tc.rule
				}
			}

			// Go.
			_, err := appClient.Enqueue(ctx, bad)
			require.Error(t, err)
			require.Regexp(t, "^"+one+"$", err.Error())
			_, err = appClient.EnqueueMany(ctx, []queue.NewJob{ok, bad})
			require.Error(t, err)
			require.Regexp(t, "^"+many+"$", err.Error())
			if tc.field != "" {
				var inv *queue.InvalidJobError
				require.ErrorAs(t, err, &inv)
				require.Equal(t, tc.field, inv.Field)
			}

			// The CLI: a job's flags, and a line of a file.
			r := runCLI(t, appURL, append([]string{"enqueue"}, flagsOfJob(bad)...)...)
			require.NotEqual(t, 0, r.code)
			if tc.field != "" {
				require.Equal(t, 2, r.code, "a usage error")
				require.Regexp(t, "^"+regexp.QuoteMeta("batchq: --"+strings.ReplaceAll(tc.field, "_", "-")+": ")+tc.rule+"\n$", r.stderr)
			} else {
				require.Regexp(t, tc.rule, r.stderr)
			}
			line := jobLine(t, bad, true)
			r = runCLIInput(t, appURL, line+"\n", "enqueue", "--file", "-")
			require.NotEqual(t, 0, r.code)
			switch {
			case len(line) > maxLineBytes: // the file's own bound comes first
				require.Contains(t, r.stderr, fmt.Sprintf("batchq: line 1: longer than %d bytes", maxLineBytes))
			case tc.field != "":
				require.Regexp(t, "^"+regexp.QuoteMeta("batchq: line 1: "+tc.field+": ")+tc.rule+"; nothing was enqueued\n$", r.stderr)
			}

			// SQL, as the application's role: the function for one job,
			// with named arguments, and the one for many, with JSON.
			code, msg := psqlError(t, psql, appURL, enqueueJobSQL(bad))
			require.Equal(t, tc.code, code, msg)
			require.Regexp(t, "^"+one+"$", msg)
			code, msg = psqlError(t, psql, appURL, fmt.Sprintf(`SELECT * FROM batchq.enqueue_jobs(%s, %s)`,
				sqlLiteral(bad.Queue), sqlLiteral("["+jobLine(t, ok, false)+","+jobLine(t, bad, false)+"]")))
			require.Equal(t, tc.code, code, msg)
			require.Regexp(t, "^"+sqlMany+"$", msg)

			require.Equal(t, int64(1), scalar(t, owner, `SELECT count(*) FROM batchq.jobs`), "nothing was written")
		})
	}
}

// flagsOfJob is the flags of `batchq enqueue` that describe j.
func flagsOfJob(j queue.NewJob) []string {
	args := []string{"--queue", j.Queue, "--tenant", j.Tenant, "--cost", strconv.FormatInt(j.Cost, 10)}
	if j.Kind != "" {
		args = append(args, "--kind", j.Kind)
	}
	if !j.Deadline.IsZero() {
		args = append(args, "--deadline", j.Deadline.Format(time.RFC3339))
	}
	if j.TTL != 0 {
		args = append(args, "--ttl", j.TTL.String())
	}
	if j.MaxAttempts != 0 {
		args = append(args, "--max-attempts", strconv.Itoa(j.MaxAttempts))
	}
	if j.Payload != nil {
		args = append(args, "--payload", string(j.Payload))
	}
	if j.UniqueKey != "" {
		args = append(args, "--unique-key", j.UniqueKey)
	}
	return args
}

// jobLine is j as a JSON object: a line of `batchq enqueue --file` with its
// queue and the ttl as a Go duration (cli), or a job of batchq.enqueue_jobs,
// the ttl in seconds.
func jobLine(t *testing.T, j queue.NewJob, cli bool) string {
	t.Helper()
	m := map[string]any{"tenant": j.Tenant, "cost": j.Cost}
	if cli {
		m["queue"] = j.Queue
	}
	if j.Kind != "" {
		m["kind"] = j.Kind
	}
	if !j.Deadline.IsZero() {
		m["deadline"] = j.Deadline.Format(time.RFC3339Nano)
	}
	if j.TTL != 0 {
		if cli {
			m["ttl"] = j.TTL.String()
		} else {
			m["ttl"] = j.TTL.Seconds()
		}
	}
	if j.MaxAttempts != 0 {
		m["max_attempts"] = j.MaxAttempts
	}
	if j.Payload != nil {
		m["payload"] = j.Payload
	}
	if j.UniqueKey != "" {
		m["unique_key"] = j.UniqueKey
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// enqueueJobSQL is the call of batchq.enqueue_job for j, with named
// arguments.
func enqueueJobSQL(j queue.NewJob) string {
	args := []string{"queue => " + sqlLiteral(j.Queue), "tenant => " + sqlLiteral(j.Tenant), "cost => " + strconv.FormatInt(j.Cost, 10)}
	if j.Kind != "" {
		args = append(args, "kind => "+sqlLiteral(j.Kind))
	}
	if !j.Deadline.IsZero() {
		args = append(args, "deadline => "+sqlLiteral(j.Deadline.Format(time.RFC3339Nano)))
	}
	if j.TTL != 0 {
		args = append(args, fmt.Sprintf("ttl => make_interval(secs => %g)", j.TTL.Seconds()))
	}
	if j.MaxAttempts != 0 {
		args = append(args, "max_attempts => "+strconv.Itoa(j.MaxAttempts))
	}
	if j.Payload != nil {
		args = append(args, "payload => "+sqlLiteral(string(j.Payload)))
	}
	if j.UniqueKey != "" {
		args = append(args, "unique_key => "+sqlLiteral(j.UniqueKey))
	}
	return "SELECT * FROM batchq.enqueue_job(" + strings.Join(args, ", ") + ")"
}

// sqlLiteral quotes s as an SQL string literal, an escape string when it
// holds a control character or a backslash.
func sqlLiteral(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == '\\' }) {
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	var b strings.Builder
	b.WriteString("E'")
	for _, r := range s {
		switch {
		case r == '\'':
			b.WriteString("''")
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString("'")
	return b.String()
}

// psqlError runs sql with psql and returns the SQLSTATE and the message of
// the error it must fail with.
func psqlError(t *testing.T, psql, url, sql string) (code, msg string) {
	t.Helper()
	cmd := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-d", url, "-f", "-")
	cmd.Stdin = strings.NewReader(sql + ";\n")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "psql ran without an error: %s", out)
	m := regexp.MustCompile(`(?m)ERROR:  ([0-9A-Z]{5}): (.*)$`).FindStringSubmatch(string(out))
	require.NotNil(t, m, "%s", out)
	return m[1], m[2]
}
