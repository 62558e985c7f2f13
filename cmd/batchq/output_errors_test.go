package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bad --format given after the arguments is a usage error (exit 2) found
// before the command acts: the job is not cancelled, the queue not created.
func TestTrailingBadFormatFailsBeforeTheCommandActs(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	r := runCLI(t, db.url, "enqueue", "--queue", "q", "--tenant", "acme", "--cost", "5")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "jobs", "cancel", "1", "--format", "xml")
	require.Equal(t, 2, r.code)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = 1`),
		"a usage error must leave the job alone, but it was cancelled")
}

func TestTrailingBadFormatCreatesNothing(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "imports", "--format", "yaml")
	require.Equal(t, 2, r.code)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.queues WHERE name = 'imports'`),
		"a usage error must create nothing, but the queue exists")
}

// An error with line breaks (a provider's error body) stays on its row of
// the table, written with escapes.
func TestTableKeepsAMultiLineErrorOnItsRow(t *testing.T) {
	t.Parallel()
	out := outcomesTableWithError(t, "batchq: provider answered 400 Bad Request: {\n  \"error\": \"bad\"\n}")
	require.Contains(t, out, `Bad Request: {\n  "error": "bad"\n}`)
}

// Other control characters are escaped too: a vertical tab or form feed
// would split the row, and an escape sequence in a provider's answer would
// reach the operator's terminal.
func TestTableEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	out := outcomesTableWithError(t, "dup\vof\fjob 9 \x1b[2J\x1b]0;title\a \u0085 caf\u00e9 \u2028line\u2029para")
	require.Contains(t, out, `dup\x0bof\x0cjob 9 \x1b[2J\x1b]0;title\x07 \u0085 café \u2028line\u2029para`)
}

// A tenant named with a bidirectional control (U+202E turns the text after
// it around) shows in a table as what it holds, and cannot reorder its row;
// JSON and CSV keep its bytes.
func TestTableEscapesBidiControls(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	name := "acme\u202egnp.exe\u2066"
	r := runCLI(t, db.url, "tenants", "set", name, "--weight", "2")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^acme\\u202egnp\.exe\\u2066\s+2\s`, r.stdout)
	require.NotContains(t, r.stdout, "\u202e")
	require.NotContains(t, r.stdout, "\u2066")
	for _, format := range []string{"json", "csv"} {
		r = runCLI(t, db.url, "tenants", "list", "--format", format)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, name, format)
	}
}

// Sentences and errors show a name the way tables do: a tenant or kind
// holding a bidirectional control (U+202E turns the words after it around)
// or a C1 control (U+0085 is a line break to some terminals) cannot make a
// confirmation or an error read otherwise than it says. JSON keeps the
// name's bytes.
func TestSentencesAndErrorsEscapeControlsInNames(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "small", "--max-per-tenant", "1")
	require.Equal(t, 0, r.code, r.stderr)
	tenant := "acme\u202egnp.exe\u2066\u0085"
	shown := `acme\u202egnp.exe\u2066\u0085`
	kind := "sum\u200fmary\u009b"
	raw := func(t *testing.T, r cliResult) {
		t.Helper()
		for _, c := range []string{"\u202e", "\u2066", "\u0085", "\u200f", "\u009b"} {
			require.NotContains(t, r.stdout+r.stderr, c)
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tenants", "set", tenant, "--weight", "2"}, "set tenant " + shown + ": weight 2, each queue's bound\n"},
		{[]string{"tenants", "set", tenant, "--queue", "small", "--weight", "3"},
			"set tenant " + shown + " in queue small: weight 3, its bound for every queue\n"},
		{[]string{"tenants", "unset", tenant, "--queue", "small"},
			"unset tenant " + shown + " in queue small: its settings for every queue apply there\n"},
		{[]string{"jobs", "cancel", "--queue", "small", "--tenant", tenant, "--kind", kind},
			"jobs of queue small, tenant " + shown + `, kind sum\u200fmary\u009b: none; nothing to cancel` + "\n"},
	} {
		r := runCLI(t, db.url, tc.args...)
		require.Equal(t, 0, r.code, "%q: %s", tc.args, r.stderr)
		require.Equal(t, tc.want, r.stdout, "%q", tc.args)
		raw(t, r)
	}

	r = runCLI(t, db.url, "schedules", "create", "nightly", "--queue", "small", "--tenant", tenant, "--kind", kind,
		"--cost", "1", "--cron", "0 2 * * *")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "for tenant "+shown+" in queue small")
	raw(t, r)

	// An error of package queue names the tenant, JSON-quoted.
	r = runCLI(t, db.url, "enqueue", "--queue", "small", "--tenant", tenant, "--kind", kind, "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "enqueue", "--queue", "small", "--tenant", tenant, "--kind", kind, "--cost", "1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, `tenant "`+shown+`"`)
	raw(t, r)
	// A refused name, in the rule's words.
	r = runCLI(t, db.url, "tenants", "unset", "a\tb\u202e", "--queue", "small")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `(got "a\tb\u202e")`)
	raw(t, r)

	r = runCLI(t, db.url, "tenants", "set", tenant, "--weight", "2", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, tenant, "JSON keeps the name")
}

// outcomesTableWithError prints report outcomes of a database holding one
// outcome, whose error is errText, and requires it on one row.
func outcomesTableWithError(t *testing.T, errText string) string {
	t.Helper()
	db := newCLIDB(t)
	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at, error)
		VALUES (1, 'q', 't', 'k', 'failed', 1, 1, 1, now(), now(), now(), $1)`, errText)
	r := runCLI(t, db.url, "report", "outcomes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 2, strings.Count(r.stdout, "\n"), "a header and one row")
	return r.stdout
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":           "plain",
		"a\r\nb\nc\rd\te": `a\nb\nc\nd\te`,
		"\x00\x7f\u009b":  `\x00\x7f\u009b`,
		"bad \xff byte":   `bad \xff byte`,
		"kept \ufffd 東":   "kept \ufffd 東",
		// The bidirectional controls, every one of them.
		"\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069": `\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069`,
		"\u05d0\u05d1 stays": "\u05d0\u05d1 stays",
	} {
		require.Equal(t, want, oneLine(in), "%q", in)
	}
}

// Columns line up by the width a terminal gives a cell: two for a wide
// character, none for a combining accent.
func TestTableAlignsWideAndCombiningCharacters(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	tb := newTable(&b, "TENANT", "JOBS")
	tb.row("東京株式会社", "1")
	tb.row("cafe\u0301", "2")
	tb.row("plain", "3")
	require.NoError(t, tb.flush())
	require.Equal(t, "TENANT        JOBS\n東京株式会社  1\ncafe\u0301          2\nplain         3\n", b.String())
}

// The smallest weight a tenant may have is listed as itself, not as 0,
// which batchq would refuse.
func TestTableShowsASmallWeight(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "tenants", "set", "tiny", "--weight", "0.001")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^tiny\s+0\.001\s`, r.stdout)
}
