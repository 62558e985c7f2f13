package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// helpLines returns the lines of a command's help that describe a flag:
// its name and usage, with the default urfave/cli appends.
func helpLines(t *testing.T, args ...string) map[string]string {
	t.Helper()
	r := runCLI(t, noServer, append(args, "--help")...)
	require.Equal(t, 0, r.code, "%q: %s", args, r.stderr)
	flags := map[string]string{}
	for _, line := range strings.Split(r.stdout, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "--"), " ")
		flags[name] = line
	}
	require.NotEmpty(t, flags, "%q", args)
	return flags
}

// enqueue's required flags say so, as work's do, with no "(default: 0)".
func TestEnqueueHelpMarksRequiredFlags(t *testing.T) {
	t.Parallel()
	flags := helpLines(t, "enqueue")
	for _, f := range []string{"queue", "tenant", "cost"} {
		require.Contains(t, flags[f], "required unless --file: ", f)
		require.NotContains(t, flags[f], "(default", f)
	}
	require.True(t, strings.HasSuffix(flags["max-attempts"], "how often the job may run (default: the queue's setting)"), flags["max-attempts"])
	require.Contains(t, flags["batch-bytes"], "(default: 16777216, 16 MiB)")
	for f, line := range flags {
		require.LessOrEqual(t, strings.Count(line, "(default"), 1, "--%s: %s", f, line)
	}

	r := runCLI(t, noServer, "enqueue", "--help")
	require.NotContains(t, r.stdout, "a Go duration)")
	require.Contains(t, r.stdout, `or whole days, like "7d"`)

	flags = helpLines(t, "migrate", "get")
	require.Contains(t, flags["version"], "required unless --functions: ")
	require.NotContains(t, flags["version"], "(default")
}

// No flag of any command shows two defaults: one in its usage text and
// one urfave/cli appends.
func TestEveryFlagShowsOneDefaultAtMost(t *testing.T) {
	t.Parallel()
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" || c.Hidden {
				continue
			}
			path := append(append([]string(nil), prefix...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(path, c.Subcommands)
				continue
			}
			for f, line := range helpLines(t, path...) {
				require.LessOrEqual(t, strings.Count(line, "(default"), 1, "%q --%s: %s", path, f, line)
			}
		}
	}
	walk(nil, newApp(io.Discard, io.Discard).Commands)
}

// batchLog records the transaction of every statement that inserts jobs:
// the count of distinct transactions is the count of batches written.
func batchLog(t *testing.T, db *cliDB) func() int64 {
	t.Helper()
	db.exec(t, `CREATE TABLE public.batch_log (txid bigint NOT NULL)`)
	db.exec(t, `CREATE FUNCTION public.log_batch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.batch_log VALUES (txid_current());
    RETURN NULL;
END
$$`)
	db.exec(t, `CREATE TRIGGER log_batch AFTER INSERT ON batchq.jobs FOR EACH STATEMENT EXECUTE FUNCTION public.log_batch()`)
	return func() int64 { return db.count(t, `SELECT count(DISTINCT txid) FROM public.batch_log`) }
}

// largeLine is a job line of size bytes.
func largeLine(i, size int) string {
	const format = `{"queue":"imports","tenant":"t%d","cost":1,"payload":{"text":"%s"}}`
	pad := size - len(fmt.Sprintf(format, i%3, ""))
	return fmt.Sprintf(format, i%3, strings.Repeat("x", pad))
}

// A file of large lines goes in batches bounded by bytes, not only by
// --batch-size: by default 16 MiB of lines.
func TestEnqueueFileBatchesByBytes(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	batches := batchLog(t, db)
	// 20 lines of 900 kB: 18 fit in 16 MiB (16777216 bytes), the 19th does not.
	var lines []string
	for i := range 20 {
		lines = append(lines, largeLine(i, 900_000))
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	r := runCLI(t, db.url, "enqueue", "--file", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued 20 jobs, 0 duplicates, from 20 lines\n", r.stdout)
	require.Equal(t, int64(2), batches())
}

// --batch-bytes sets the bound: a batch ends before the line that would
// take it past it, a longer line goes alone, and a bad line names the
// batches written before it.
func TestEnqueueFileBatchBytes(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	batches := batchLog(t, db)
	// Lines of 1000 bytes, bounded at 2500: batches of 2. Line 5 is 3000
	// bytes: it goes alone, between lines 3-4 and 6-7.
	var lines []string
	for i := range 7 {
		size := 1000
		if i == 4 {
			size = 3000
		}
		lines = append(lines, largeLine(i, size))
		require.Len(t, lines[i], size)
	}
	r := runCLIInput(t, db.url, strings.Join(lines, "\n")+"\n", "enqueue", "--file", "-", "--batch-bytes", "2500")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued 7 jobs, 0 duplicates, from 7 lines\n", r.stdout)
	require.Equal(t, int64(4), batches())

	// Bounded at 2000, lines 1-2, 3-4 and 5 go in batches of their own;
	// line 7 is bad, and nothing of its batch, which line 6 began, is written.
	lines[6] = `{"queue":"imports","tenant":"t","cost":0.5}`
	r = runCLIInput(t, db.url, strings.Join(lines, "\n")+"\n", "enqueue", "--file", "-", "--batch-bytes", "2000")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "batchq: line 7: cost: must be an integer (got 0.5); lines before 6 were enqueued, nothing from line 6 on\n", r.stderr)
	require.Equal(t, "enqueued 5 jobs, 0 duplicates, before the error\n", r.stdout)
	require.Equal(t, int64(4+3), batches())

	// --batch-size still bounds a batch of small lines.
	r = runCLIInput(t, db.url, strings.Repeat(`{"queue":"imports","tenant":"t","cost":1}`+"\n", 5), "enqueue", "--file", "-", "--batch-size", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(4+3+3), batches())
}

func TestEnqueueBatchBytesErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--file", "-", "--batch-bytes", "0"}, "batchq: --batch-bytes 0: must be in 1..1073741824\n"},
		{[]string{"--file", "-", "--batch-bytes", "2147483648"}, "batchq: --batch-bytes 2147483648: must be in 1..1073741824\n"},
		{[]string{"--queue", "q", "--tenant", "t", "--cost", "1", "--batch-bytes", "100"}, "batchq: enqueue: --batch-bytes goes with --file\n"},
	} {
		r := runCLI(t, noServer, append([]string{"enqueue"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%q: %s", tc.args, r.stderr)
		require.Equal(t, tc.msg, r.stderr, "%q", tc.args)
	}
}

// A ttl in whole days works on the command line and in a file, as the help
// says.
func TestEnqueueTTLInDays(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "t", "--cost", "1", "--ttl", "7d")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLIInput(t, db.url, `{"queue":"imports","tenant":"t","cost":1,"ttl":"2d"}`, "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	for _, days := range []int{7, 2} {
		require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs
			WHERE deadline - enqueued_at BETWEEN make_interval(days => $1) - interval '1 minute'
			                             AND make_interval(days => $1) + interval '1 minute'`, days), "%dd", days)
	}
	// From the run-at, as the command's description says and as it is
	// computed, not from now.
	help := runCLI(t, noServer, "enqueue", "--help").stdout
	require.Regexp(t, regexp.MustCompile(`--ttl value +the deadline as a duration from the run-at \(now, without one\), instead of --deadline: Go's, like 90m or 36h, or whole days, like 2d`), help)
	require.Regexp(t, regexp.MustCompile(`--deadline value +when the job stops being worth running, RFC 3339; after the run-at \(default: the run-at \+ --ttl, or \+ the queue's default TTL\)`), help)
}

// A file saved with a UTF-8 byte order mark, as Windows editors save it,
// is read as without one; one anywhere else is not JSON.
func TestEnqueueFileSkipsAByteOrderMark(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	line := `{"queue":"imports","tenant":"t","cost":1}`
	r := runCLIInput(t, db.url, "\uFEFF"+line+"\n"+line+"\n", "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued 2 jobs, 0 duplicates, from 2 lines\n", r.stdout)
	r = runCLIInput(t, db.url, line+"\n\uFEFF"+line+"\n", "enqueue", "--file", "-")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "batchq: line 2: not JSON")
}

// One of anything is counted in the singular.
func TestEnqueueFileCountsOneInTheSingular(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	line := `{"queue":"imports","tenant":"t","cost":1,"unique_key":"k"}` + "\n"
	r := runCLIInput(t, db.url, line, "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued 1 job, 0 duplicates, from 1 line\n", r.stdout)
	r = runCLIInput(t, db.url, line, "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "enqueued 0 jobs, 1 duplicate, from 1 line\n", r.stdout)
}
