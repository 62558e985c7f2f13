package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// The console's pages and actions are tested in package console; here,
// that the command checks its flags before it touches a database, serves
// on loopback with the token from the environment, and stops on its
// context.
func TestConsoleUsageErrors(t *testing.T) {
	t.Parallel()
	setenv(t, "BATCHQ_TEST_SHORT_TOKEN", "short")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"console", "--addr", "8080"}, "batchq: --addr \"8080\": must be HOST:PORT or :PORT\n"},
		{[]string{"console", "--addr", ":99999"}, "batchq: --addr \":99999\": port \"99999\" must be a number in 0..65535\n"},
		{[]string{"console", "--token-env", "BATCHQ_TEST_NO_SUCH_VAR"}, "batchq: --token-env: environment variable \"BATCHQ_TEST_NO_SUCH_VAR\" is not set\n"},
		{[]string{"console", "--token-env", "BATCHQ_TEST_SHORT_TOKEN"}, "batchq: --token-env: the token in BATCHQ_TEST_SHORT_TOKEN must be at least 16 bytes (got 5)\n"},
		{[]string{"console", "--top-tenants", "0"}, "batchq: --top-tenants 0: must be in 1..1000\n"},
		{[]string{"console", "--refresh", "1ms"}, "batchq: --refresh 1ms: must be from 100ms to 24h0m0s\n"},
		{[]string{"console", "--refresh", "600h"}, "batchq: --refresh 600h0m0s: must be from 100ms to 24h0m0s\n"},
		{[]string{"console", "--reserve", "1"}, "batchq: --reserve 1: must be in [0,1)\n"},
		{[]string{"console", "extra"}, "batchq: console: unexpected argument \"extra\"; usage: batchq console\n"},
		// Its output is web pages, and a line saying where: no data for JSON or CSV.
		{[]string{"--format", "json", "console", "--addr", "127.0.0.1:0"},
			"batchq: console: --format json: it serves web pages and prints one line of text; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
		{[]string{"--format", "csv", "console", "--addr", "127.0.0.1:0"},
			"batchq: console: --format csv: it serves web pages and prints one line of text; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
	} {
		r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Equal(t, tc.want, r.stderr, "%v", tc.args)
		require.Empty(t, r.stdout)
	}
}

func TestConsoleHelp(t *testing.T) {
	t.Parallel()
	res := runCLI(t, "", "console", "--help")
	require.Equal(t, 0, res.code, res.stderr)
	for _, flag := range []string{"--addr", "--token-env", "--top-tenants", "--refresh", "--reserve", "127.0.0.1:8080", "BATCHQ_CONSOLE_ADDR"} {
		require.Contains(t, res.stdout, flag)
	}
}

// setenv sets a variable only this test reads, for the test's duration
// (t.Setenv refuses parallel tests).
func setenv(t *testing.T, name, value string) {
	require.NoError(t, os.Setenv(name, value))
	t.Cleanup(func() { os.Unsetenv(name) })
}

// syncBuffer is a bytes.Buffer safe to read while the command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestConsoleServes(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.URL(t)
	client, err := queue.NewClient(pgtest.Connect(t, dbURL), queue.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.CreateQueue(ctx, queue.QueueConfig{Name: "docs"}))
	const token = "a-console-token-of-32-characters"
	setenv(t, "BATCHQ_TEST_CONSOLE_TOKEN", token)

	runCtx, stop := context.WithCancel(ctx)
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- newApp(&out, &errOut).RunContext(runCtx, []string{"batchq", "--database-url", dbURL,
			"console", "--addr", ":0", "--token-env", "BATCHQ_TEST_CONSOLE_TOKEN"})
	}()
	var base string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)/ \(actions need the token in \$BATCHQ_TEST_CONSOLE_TOKEN\)`).FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 10*time.Second, 10*time.Millisecond, "stdout: %s\nstderr: %s", out.String(), errOut.String())

	res, err := http.Get(base + "/")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodPost, base+"/queues/docs/pause", strings.NewReader(""))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err = noRedirect.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	q, err := client.Queue(ctx, "docs")
	require.NoError(t, err)
	require.NotNil(t, q.PausedAt, "the token from the environment acts")

	stop()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the console did not stop with its context")
	}
}
