package main

import (
	"bytes"
	"context"
	"testing"
)

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
	err := newApp(&out, &errOut).RunContext(context.Background(), argv)
	code := exitCode(err, &errOut)
	return cliResult{stdout: out.String(), stderr: errOut.String(), code: code}
}
