package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
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
