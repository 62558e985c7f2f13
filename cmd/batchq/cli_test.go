package main

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/internal/pgtest"
)

// cliMu runs one command at a time: urfave/cli v2 writes to its global
// HelpFlag while it parses any command's flags, which parallel tests would
// race on. The tests' databases and checks still run in parallel.
var cliMu sync.Mutex

// cliResult is what one command run printed and how it exited.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs batchq with args against databaseURL (none when empty) and
// captures its output, the way main does.
func runCLI(t testing.TB, databaseURL string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	argv := []string{"batchq"}
	if databaseURL != "" {
		argv = append(argv, "--database-url", databaseURL)
	}
	argv = append(argv, args...)
	cliMu.Lock()
	err := newApp(&out, &errOut).RunContext(context.Background(), argv)
	cliMu.Unlock()
	code := exitCode(err, &errOut)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}

// A mistyped command is a wrong command line: one line on stderr, exit 2,
// whether it is the command, a subcommand or the topic of help.
func TestUnknownCommandExitsTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `batchq: unknown command "bogus"; run 'batchq help'` + "\n"},
		{[]string{"help", "bogus"}, `batchq: unknown command "bogus"; run 'batchq help'` + "\n"},
		{[]string{"migrate", "upp"}, `batchq: unknown command "migrate upp"; run 'batchq migrate help'` + "\n"},
		{[]string{"jobs", "shwo", "1"}, `batchq: unknown command "jobs shwo"; run 'batchq jobs help'` + "\n"},
		{[]string{"report", "tenant"}, `batchq: unknown command "report tenant"; run 'batchq report help'` + "\n"},
	} {
		// No server answers here: nothing may need one.
		r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Equal(t, tc.want, r.stderr, "%v", tc.args)
		require.Empty(t, r.stdout, "%v", tc.args)
	}
	for _, args := range [][]string{{"help"}, {"migrate"}, {"help", "migrate"}, {"jobs", "help"}} {
		r := runCLI(t, "", args...)
		require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stdout, "USAGE:", "%v", args)
	}
}

// TestReadmeListsEveryCommand keeps the synopsis in README.md's CLI
// section in step with the app: every command batchq shows in its help is
// on a line of it.
func TestReadmeListsEveryCommand(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## CLI\n")
	require.True(t, ok, "README.md has no CLI section")
	_, block, ok := strings.Cut(section, "\n```\n")
	require.True(t, ok, "the CLI section has no synopsis block")
	block, _, _ = strings.Cut(block, "\n```\n")

	listed := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		words, ok := strings.CutPrefix(line, "batchq ")
		if !ok {
			continue
		}
		words, _, _ = strings.Cut(words, "  ") // a comment follows
		paths := []string{""}
		for _, w := range strings.Fields(words) {
			if w == "" || !unicode.IsLower(rune(w[0])) {
				break // a flag, an argument or "..."
			}
			var next []string
			for _, p := range paths {
				for _, alt := range strings.Split(w, "|") {
					next = append(next, strings.TrimSpace(p+" "+alt))
				}
			}
			paths = next
		}
		for _, p := range paths {
			listed[p] = true
		}
	}

	var missing []string
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			path := strings.TrimSpace(prefix + " " + c.Name)
			if len(c.Subcommands) > 0 {
				walk(path, c.Subcommands)
			} else if !listed[path] {
				missing = append(missing, path)
			}
		}
	}
	walk("", newApp(io.Discard, io.Discard).Commands)
	require.Empty(t, missing, "commands missing from README.md's CLI synopsis")
}

// TestDocsCiteTestsThatExist keeps README.md's and BENCHMARKS.md's evidence
// true to its name: every test, fuzz target and benchmark they cite by name
// is a function of some test file of the repository.
func TestDocsCiteTestsThatExist(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)\(`)
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	}))
	require.NotEmpty(t, defined)
	cite := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)`")
	for _, doc := range []string{"README.md", "BENCHMARKS.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		cited := cite.FindAllSubmatch(b, -1)
		require.NotEmpty(t, cited, doc)
		for _, m := range cited {
			require.True(t, defined[string(m[1])], "%s cites %s, which no test file defines", doc, m[1])
		}
	}
}

// On a database nobody migrated, a command says what to run, not only which
// relation the server did not find.
func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	for _, args := range [][]string{
		{"queues", "list"},
		{"enqueue", "--queue", "q", "--tenant", "t", "--cost", "5"},
		{"report", "backlog"},
	} {
		r := runCLI(t, url, args...)
		require.Equal(t, 1, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "is the database migrated? run 'batchq migrate up'", "%v", args)
	}
}

// On a schema of an older release, a command whose query names a column
// that release lacks says what to run too.
func TestOlderSchemaSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "q")
	db.exec(t, `ALTER TABLE batchq.queues DROP COLUMN paused_at CASCADE`)
	r := runCLI(t, db.url, "queues", "list")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, `column`)
	require.Contains(t, r.stderr, "is the database migrated? run 'batchq migrate up'")
}

// A role that lacks a right a command needs gets the server's refusal, which
// names the table or function, and is told which role may run the command
// and where the roles come from.
func TestPermissionDeniedNamesTheRoleThatMay(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	// An outcome old enough to prune: reading it is allowed, deleting not.
	db.exec(t, `INSERT INTO batchq.outcomes (job_id, queue, tenant, kind, outcome, estimated_cost, attempts,
			max_attempts, deadline, enqueued_at, finished_at)
		VALUES (1, 'imports', 't', 'k', 'succeeded', 1, 1, 1, now(), now(), now() - interval '2 hours')`)
	super := withDatabase(t, pgtest.ServerURL(t), db.url)
	app, worker, operator := uniqueRole(t, "app"), uniqueRole(t, "worker"), uniqueRole(t, "operator")
	dropRolesAtEnd(t, super, app, worker, operator)
	pw := randomHex(t, 16)
	env := "BATCHQ_TEST_PW_" + strings.ToUpper(operator)
	setenv(t, env, pw)
	r := runCLI(t, super, "migrate", "grants", "--app-role", app, "--worker-role", worker, "--operator-role", operator,
		"--apply", "--app-password-env", env, "--worker-password-env", env, "--operator-password-env", env)
	require.Equal(t, 0, r.code, r.stderr)

	const grants = " (see 'batchq migrate grants --help', and re-run grants after each 'batchq migrate up')\n"
	for _, tc := range []struct {
		role string
		args []string
		want string
	}{
		{operator, []string{"queues", "create", "zz"}, `batchq: create queue "zz": ERROR: permission denied for table queue_cursors (SQLSTATE 42501); ` +
			"the connected role lacks a right 'batchq queues create' needs: run it as the schema's owner" + grants},
		{operator, []string{"prune", "--older-than", "1h"}, "permission denied for table outcomes (SQLSTATE 42501) (0 outcomes were pruned before the error); " +
			"the connected role lacks a right 'batchq prune' needs: run it as the schema's owner" + grants},
		{app, []string{"jobs", "show", "1"}, "batchq: job 1: ERROR: permission denied for table jobs (SQLSTATE 42501); " +
			"the connected role lacks a right 'batchq jobs show' needs: run it as the operator role or the schema's owner" + grants},
		{worker, []string{"report", "backlog"}, "permission denied for view backlog (SQLSTATE 42501); " +
			"the connected role lacks a right 'batchq report backlog' needs: run it as the app or the operator role, or the schema's owner" + grants},
		{operator, []string{"enqueue", "--queue", "imports", "--tenant", "t", "--cost", "1"}, "permission denied for function enqueue (SQLSTATE 42501); " +
			"the connected role lacks a right 'batchq enqueue' needs: run it as the app role or the schema's owner" + grants},
	} {
		r := runCLI(t, withUser(t, db.url, tc.role, pw), tc.args...)
		require.Equal(t, 1, r.code, "%v: %s", tc.args, r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "batchq: "), r.stderr)
		require.True(t, strings.HasSuffix(r.stderr, tc.want), "%v:\n got %q\nwant %q", tc.args, r.stderr, tc.want)
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.outcomes`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.queues`))
}

// Every command that reaches batchq's schema says who may run it when the
// server denies it a right.
func TestEveryCommandNamesWhoMayRunIt(t *testing.T) {
	t.Parallel()
	// These make databases of their own, or reach none.
	none := map[string]bool{"migrate get": true, "demo": true, "bench": true, "bench-worker": true}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			path := strings.TrimSpace(prefix + " " + c.Name)
			switch {
			case c.Name == "help":
			case len(c.Subcommands) > 0:
				walk(path, c.Subcommands)
			case none[path]:
				require.NotContains(t, commandRoles, path)
			default:
				require.Contains(t, commandRoles, path)
			}
		}
	}
	walk("", newApp(io.Discard, io.Discard).Commands)
}
