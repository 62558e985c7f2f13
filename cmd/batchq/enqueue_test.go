package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
)

// runCLIInput is runCLI with stdin.
func runCLIInput(t testing.TB, databaseURL, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	app := newApp(&out, &errOut)
	app.Reader = strings.NewReader(stdin)
	argv := append([]string{"batchq", "--database-url", databaseURL}, args...)
	cliMu.Lock()
	err := app.RunContext(context.Background(), argv)
	cliMu.Unlock()
	code := exitCode(err, &errOut)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// cliDB is a migrated database for CLI tests, with a pool for checking what
// the commands did.
type cliDB struct {
	url  string
	pool *pgxpool.Pool
}

func newCLIDB(t *testing.T, queues ...string) *cliDB {
	t.Helper()
	url := pgtest.URL(t)
	db := &cliDB{url: url, pool: pgtest.Connect(t, url)}
	for _, q := range queues {
		r := runCLI(t, url, "queues", "create", q)
		require.Equal(t, 0, r.code, r.stderr)
	}
	return db
}

func (db *cliDB) count(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (db *cliDB) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	_, err := db.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func TestEnqueueOneJobFromFlags(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")

	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--kind", "summarize", "--cost", "1200",
		"--ttl", "2h", "--max-attempts", "3", "--payload", `{"doc": 42}`, "--unique-key", "doc-42")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued job 1\n", r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = 'acme' AND kind = 'summarize'
		AND cost = 1200 AND max_attempts = 3 AND payload = '{"doc": 42}' AND unique_key = 'doc-42'
		AND deadline BETWEEN enqueued_at + interval '119 minutes' AND enqueued_at + interval '121 minutes'`))

	r = runCLI(t, db.url, "--format", "json", "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5", "--unique-key", "doc-42")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"id": 1, "duplicate": true, "state": null}`, r.stdout)

	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5", "--deadline", "2999-01-02T03:04:05Z", "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "id,duplicate,state\n2,false,queued\n", r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id = 2 AND deadline = '2999-01-02T03:04:05Z'`))

	// JSON and CSV say what the sentence says: the job waits for its run-at.
	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5", "--delay", "1h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued job 3; it waits, scheduled, until its run-at\n", r.stdout)
	r = runCLI(t, db.url, "--format", "json", "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5", "--delay", "1h")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"id": 4, "duplicate": false, "state": "scheduled"}`, r.stdout)
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE id IN (3, 4) AND state = 'scheduled'`))
}

// A JSON null payload is stored as null from a flag, a file line and SQL
// alike, not as the default {}.
func TestEnqueueNullPayloadIsNullEverywhere(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "flag", "--cost", "1", "--payload", "null")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLIInput(t, db.url, `{"queue":"imports","tenant":"file","cost":1,"payload":null}`+"\n", "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	db.exec(t, `SELECT * FROM batchq.enqueue_jobs('imports', '[{"tenant": "sql", "cost": 1, "payload": null}]')`)
	require.Equal(t, int64(3), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE payload = 'null'::jsonb`))
}

func TestEnqueueFlagErrors(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"missing cost", []string{"--queue", "imports", "--tenant", "a"}, 2, "--cost is required"},
		{"cost zero", []string{"--queue", "imports", "--tenant", "a", "--cost", "0"}, 2, "--cost: must be in 1..1000000000 (got 0)"},
		{"cost not a number", []string{"--queue", "imports", "--tenant", "a", "--cost", "lots"}, 2, `"lots"`},
		{"bad deadline", []string{"--queue", "imports", "--tenant", "a", "--cost", "1", "--deadline", "tomorrow"}, 2, `--deadline "tomorrow": not an RFC 3339 time`},
		{"deadline passed", []string{"--queue", "imports", "--tenant", "a", "--cost", "1", "--deadline", "2001-01-01T00:00:00Z"}, 2, "--deadline: must be in the future"},
		{"both", []string{"--queue", "imports", "--tenant", "a", "--cost", "1", "--deadline", "2999-01-01T00:00:00Z", "--ttl", "1h"}, 2, "--deadline: give a deadline or a ttl, not both"},
		{"bad payload", []string{"--queue", "imports", "--tenant", "a", "--cost", "1", "--payload", "{nope"}, 2, "--payload {nope: not valid JSON"},
		{"bad queue name", []string{"--queue", "no queue", "--tenant", "a", "--cost", "1"}, 2, `--queue: must name a queue`},
		{"unknown queue", []string{"--queue", "nope", "--tenant", "a", "--cost", "1"}, 2, `unknown queue: "nope"`},
		{"file and flags", []string{"--file", "x.jsonl", "--tenant", "a"}, 2, "--tenant describes one job; with --file each line does"},
		{"batch size alone", []string{"--queue", "imports", "--tenant", "a", "--cost", "1", "--batch-size", "5"}, 2, "--batch-size goes with --file"},
		{"batch size zero", []string{"--file", "-", "--batch-size", "0"}, 2, "--batch-size 0: must be in 1..100000"},
		// A file that cannot be read is a usage error, as a bad value of
		// any flag is.
		{"missing file", []string{"--file", filepath.Join(dir, "none.jsonl")}, 2,
			fmt.Sprintf("batchq: --file %q: must name a file that can be read (no such file or directory)\n", filepath.Join(dir, "none.jsonl"))},
		{"directory", []string{"--file", dir}, 2, fmt.Sprintf("batchq: --file %q: must name a file, not a directory\n", dir)},
		{"empty file name", []string{"--file", ""}, 2, "batchq: enqueue: --file: must name a file, or - for standard input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, db.url, append([]string{"enqueue"}, tc.args...)...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
			require.True(t, strings.HasPrefix(r.stderr, "batchq: "), r.stderr)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line")
		})
	}
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.jobs`))
}

func TestEnqueueFileInBatches(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports", "nightly")
	var lines []string
	for i := range 7 {
		lines = append(lines, fmt.Sprintf(`{"queue":"imports","tenant":"t%d","kind":"summarize","cost":%d,"ttl":"90m","max_attempts":2,"payload":{"doc":%d},"unique_key":"doc-%d"}`, i%2, 100+i, i, i))
	}
	lines = append(lines, "", `{"queue":"nightly","tenant":"t0","cost":5,"deadline":"2999-01-01T00:00:00Z","kind":null}`)
	lines = append(lines, `{"queue":"imports","tenant":"t0","cost":1,"unique_key":"doc-3"}`) // a duplicate
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	r := runCLI(t, db.url, "enqueue", "--file", path, "--batch-size", "3")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued 8 jobs, 1 duplicate, from 10 lines\n", r.stdout)
	require.Equal(t, int64(7), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'imports' AND kind = 'summarize' AND max_attempts = 2`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE queue = 'nightly' AND kind = 'default' AND deadline = '2999-01-01'`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE payload = '{"doc": 6}' AND cost = 106`))

	// The same lines again from standard input: every keyed line is a duplicate.
	r = runCLIInput(t, db.url, strings.Join(lines, "\n"), "--format", "json", "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"enqueued": 1, "duplicates": 8, "lines": 10}`, r.stdout)
}

func TestEnqueueFileBadLineWritesNothingOfItsBatch(t *testing.T) {
	t.Parallel()
	good := func(i int) string { return fmt.Sprintf(`{"queue":"imports","tenant":"t","cost":%d}`, i+1) }
	for _, tc := range []struct {
		name     string
		bad      string
		badLine  int // 1-based, in a file of 6 lines with batches of 2
		msg      string
		enqueued int64
	}{
		{"unknown field", `{"queue":"imports","tenant":"t","cost":1,"colour":"red"}`, 4, `line 4: unknown field "colour"`, 2},
		{"fractional cost", `{"queue":"imports","tenant":"t","cost":1.5}`, 3, "line 3: cost: must be an integer (got 1.5)", 2},
		{"huge cost", `{"queue":"imports","tenant":"t","cost":9223372036854775808}`, 6, "line 6: cost: 9223372036854775808 is out of range for a 64-bit integer", 4},
		{"not JSON", `{"queue":`, 1, "line 1: queue: not JSON: unexpected end of line", 0},
		{"cost out of range", `{"queue":"imports","tenant":"t","cost":0}`, 4, "line 4: cost: must be in 1..1000000000 (got 0)", 2},
		{"empty tenant", `{"queue":"imports","tenant":"","cost":1}`, 5, "line 5: tenant: must not be empty", 4},
		{"empty queue", `{"queue":"","tenant":"t","cost":1}`, 3, `line 3: queue: must name a queue`, 2},
		// Not taken for none and "default", as --unique-key '' and --kind ''
		// are not: an empty column would lose its deduplication silently.
		{"empty unique key", `{"queue":"imports","tenant":"t","cost":1,"unique_key":""}`, 5,
			"line 5: unique_key: must not be empty (leave it out, or null, for none)", 4},
		{"empty kind", `{"queue":"imports","tenant":"t","cost":1,"kind":""}`, 2,
			`line 2: kind: must not be empty (leave it out, or null, for "default")`, 0},
		{"unknown queue", `{"queue":"nope","tenant":"t","cost":1}`, 2, `line 2: unknown queue "nope"`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newCLIDB(t, "imports")
			lines := make([]string, 6)
			for i := range lines {
				lines[i] = good(i)
			}
			lines[tc.badLine-1] = tc.bad
			r := runCLIInput(t, db.url, strings.Join(lines, "\n")+"\n", "enqueue", "--file", "-", "--batch-size", "2")
			require.Equal(t, 1, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
			batchStart := (tc.badLine-1)/2*2 + 1
			if batchStart == 1 {
				require.Contains(t, r.stderr, "nothing was enqueued")
			} else {
				require.Contains(t, r.stderr, fmt.Sprintf("lines before %d were enqueued, nothing from line %d on", batchStart, batchStart))
			}
			require.Contains(t, r.stdout, fmt.Sprintf("enqueued %d job", tc.enqueued))
			// The batches before the bad one, and nothing else.
			require.Equal(t, tc.enqueued, db.count(t, `SELECT count(*) FROM batchq.jobs`))
			require.Equal(t, tc.enqueued*(tc.enqueued+1)/2, db.count(t, `SELECT coalesce(sum(cost), 0) FROM batchq.jobs`))
		})
	}
}

func TestEnqueueFileQueueFullNamesTheBatch(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "imports", "--max-per-tenant", "3")
	require.Equal(t, 0, r.code, r.stderr)
	in := strings.Repeat(`{"queue":"imports","tenant":"t","cost":1}`+"\n", 5)
	r = runCLIInput(t, db.url, in, "enqueue", "--file", "-", "--batch-size", "2")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, `lines 3-4: queue_full: tenant "t" has 2 queued jobs in queue "imports" (bound 3)`)
	require.Contains(t, r.stderr, "lines before 3 were enqueued")
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.jobs`))
}

// A batch the database refuses for a cause of its own says so as a single
// job does: on a database nobody migrated, what to run. A batch of one line
// is named as one line.
func TestEnqueueFileOnAnUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	r := runCLIInput(t, url, `{"queue":"q","tenant":"t","cost":1}`+"\n", "enqueue", "--file", "-")
	require.Equal(t, 1, r.code, r.stderr)
	require.True(t, strings.HasPrefix(r.stderr, `batchq: line 1: enqueue into "q": `), r.stderr)
	require.Contains(t, r.stderr, "nothing was enqueued; is the database migrated? run 'batchq migrate up'\n")
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
}

// After a bad line, `lines` in JSON counts the lines of the batches written,
// whatever the batch size, so a script goes on from lines+1, the line the
// error names as the first not written.
func TestEnqueueFileLinesAfterAnErrorAreTheLinesWritten(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	good := `{"queue":"imports","tenant":"t","cost":1}`
	in := strings.Join([]string{good, "", good, good, `{"queue":"imports","tenant":"t","cost":0}`, good}, "\n") + "\n"
	for _, tc := range []struct {
		batch    string
		enqueued int
		lines    int
	}{
		{"1", 3, 4}, // lines 1-4 written, line 5 refused
		{"2", 2, 3}, // lines 1 and 3 (with the blank 2), then 4-5 refused
		{"4", 0, 0}, // lines 1-5 in the first batch
	} {
		t.Run(tc.batch, func(t *testing.T) {
			db.exec(t, `DELETE FROM batchq.jobs`)
			r := runCLIInput(t, db.url, in, "enqueue", "--file", "-", "--batch-size", tc.batch, "--format", "json")
			require.Equal(t, 1, r.code, r.stderr)
			require.JSONEq(t, fmt.Sprintf(`{"enqueued": %d, "duplicates": 0, "lines": %d}`, tc.enqueued, tc.lines), r.stdout)
			if tc.lines == 0 {
				require.Contains(t, r.stderr, "nothing was enqueued")
			} else {
				require.Contains(t, r.stderr, fmt.Sprintf("nothing from line %d on", tc.lines+1))
			}
			require.Equal(t, int64(tc.enqueued), db.count(t, `SELECT count(*) FROM batchq.jobs`))
		})
	}
}

// interruptibleEnqueueFile runs enqueue --file - into db's queue imports,
// in batches of two, on three job lines from a writer that then goes quiet
// without closing. It returns what the command prints, its exit code once it
// ends, and the interrupt that a signal would be.
func interruptibleEnqueueFile(t *testing.T, db *cliDB) (out, errOut *bytes.Buffer, exited <-chan int, interrupt func()) {
	t.Helper()
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go fmt.Fprint(pw, strings.Repeat(`{"queue":"imports","tenant":"t","cost":1}`+"\n", 3))
	return interruptibleCLI(t, db, pr, "enqueue", "--file", "-", "--batch-size", "2")
}

// interruptibleCLI runs batchq with args against db, reading stdin, in the
// background: interrupt does what Ctrl-C does (main cancels the command's
// context), and exited gives the exit code.
func interruptibleCLI(t *testing.T, db *cliDB, stdin io.Reader, args ...string) (out, errOut *bytes.Buffer, exited <-chan int, interrupt func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, errOut = &bytes.Buffer{}, &bytes.Buffer{}
	app := newApp(out, errOut)
	app.Reader = stdin
	code := make(chan int, 1)
	go func() {
		cliMu.Lock()
		err := app.RunContext(ctx, append([]string{"batchq", "--database-url", db.url}, args...))
		cliMu.Unlock()
		code <- exitCode(err, errOut)
	}()
	return out, errOut, code, cancel
}

// An interrupt stops enqueue --file while it waits for standard input, not
// at the next line, and the summary says what was written: the batches
// before it, not the lines read since.
func TestEnqueueFileStopsWhenInterruptedWaitingForInput(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	out, errOut, exited, interrupt := interruptibleEnqueueFile(t, db)
	require.Eventually(t, func() bool { return db.count(t, `SELECT count(*) FROM batchq.jobs`) == 2 },
		10*time.Second, 10*time.Millisecond, "the first batch")
	interrupt()
	select {
	case code := <-exited:
		require.Equal(t, 1, code, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("enqueue --file did not stop when interrupted")
	}
	require.Equal(t, "batchq: interrupted; lines before 3 were enqueued, nothing from line 3 on\n", errOut.String())
	require.Equal(t, "enqueued 2 jobs, 0 duplicates, before the error\n", out.String())
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.jobs`))
}

// An interrupt while a batch is being written lets the batch finish, so the
// lines reported written are the lines written. The batch waits here for a
// ring row another transaction holds, and is interrupted while it waits.
func TestEnqueueFileFinishesTheBatchInFlightWhenInterrupted(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "t", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	ctx := context.Background()
	holder, err := db.pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Rollback(ctx) })
	_, err = holder.Exec(ctx, `SELECT 1 FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 't' FOR UPDATE`)
	require.NoError(t, err)

	out, errOut, exited, interrupt := interruptibleEnqueueFile(t, db)
	require.Eventually(t, func() bool {
		return db.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%enqueue%'`) == 1
	}, 10*time.Second, 10*time.Millisecond, "the first batch waiting for the ring row")
	interrupt()
	select {
	case code := <-exited:
		t.Fatalf("enqueue --file exited (%d) with its batch in flight: %s", code, errOut.String())
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, holder.Rollback(ctx))
	select {
	case code := <-exited:
		require.Equal(t, 1, code, errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("enqueue --file did not stop after its batch")
	}
	require.Equal(t, "batchq: interrupted; lines before 3 were enqueued, nothing from line 3 on\n", errOut.String())
	require.Equal(t, "enqueued 2 jobs, 0 duplicates, before the error\n", out.String())
	require.Equal(t, int64(3), db.count(t, `SELECT count(*) FROM batchq.jobs`))
}

// A payload within its limit as stored is taken however its line escapes
// it: \u0041 is six bytes of the line for one of the payload.
func TestEnqueueFileTakesAPayloadWrittenInEscapes(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	line := `{"queue":"imports","tenant":"t","cost":1,"payload":"` + strings.Repeat(`\u0041`, 800_000) + `"}` + "\n"
	r := runCLIInput(t, db.url, line, "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(800_000+2), db.count(t, `SELECT octet_length(payload::text) FROM batchq.jobs`))
}

// The help and configuration.md give --cost's range, the one its refusal
// says (must be in 1..1000000000), not only its lower end.
func TestCostHelpSaysItsRange(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, cmd := range [][]string{{"enqueue"}, {"schedules", "create"}, {"schedules", "set"}} {
		r := runCLI(t, "", append(cmd, "--help")...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Regexp(t, `--cost value +.*estimated cost in tokens, 1\.\.1000000000\n`, r.stdout, cmd)
	}
	require.Equal(t, 2, strings.Count(string(doc), "estimated cost in tokens, 1..1000000000 |"))
	require.NotContains(t, string(doc), "cost in tokens, 1 or more")
}
