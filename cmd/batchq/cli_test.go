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
