package main

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
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
