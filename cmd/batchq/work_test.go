package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
)

func TestWorkDrainsThroughHTTP(t *testing.T) {
	t.Setenv("TEST_PROVIDER_KEY", "Bearer sk-test-secret")
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	ctx := context.Background()
	c, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, c.CreateQueue(ctx, queue.QueueConfig{Name: "summaries"}))
	var jobs []queue.NewJob
	for i := range 30 {
		jobs = append(jobs, queue.NewJob{Queue: "summaries", Tenant: fmt.Sprint("t", i%3), Cost: 50, Payload: []byte(`{"tokens":50}`)})
	}
	_, err = c.EnqueueMany(ctx, jobs)
	require.NoError(t, err)

	sim, err := provider.New(provider.Config{RequestsPerWindow: 1000, TokensPerWindow: 100_000})
	require.NoError(t, err)
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		sim.ServeHTTP(w, r)
	}))
	defer srv.Close()

	r := runCLI(t, url, "work", "--queue", "summaries", "--target", srv.URL, "--concurrency", "1",
		"--quota-key", "sim/model", "--header-env", "Authorization=TEST_PROVIDER_KEY", "--drain", "--poll-interval", "50ms")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stderr, "sk-test-secret", "a secret reached the logs")

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM batchq.outcomes WHERE outcome = 'succeeded' AND actual_cost = 50`).Scan(&n))
	require.Equal(t, 30, n)
	require.Equal(t, int64(30), sim.Stats().OK)
	for _, a := range auth {
		require.Equal(t, "Bearer sk-test-secret", a)
	}
	for _, req := range sim.Log() {
		require.Equal(t, "batchq-"+req.JobID, req.IdempotencyKey)
		require.NotEmpty(t, req.Tenant)
	}
	var limit int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT tokens_limit FROM batchq.quota WHERE key = 'sim/model'`).Scan(&limit))
	require.Equal(t, int64(100_000), limit, "the shared throttle learned the quota from the headers")
	var stored int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM batchq.outcomes WHERE result::text LIKE '%sk-test%' OR error LIKE '%sk-test%'`).Scan(&stored))
	require.Zero(t, stored)
}

func TestWorkRejectsBadFlags(t *testing.T) {
	t.Setenv("BATCHQ_TEST_KEY", "Bearer sk-test")
	t.Setenv("BATCHQ_TEST_BROKEN_KEY", "Bearer sk-test\r\nX-Injected: 1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", "q", "--target", "ftp://x"}, `--target "ftp://x": must be an http or https URL`},
		// A key in the value stays out of the error.
		{[]string{"--queue", "q", "--target", "api.example.com/v1?key=sk-test"}, `--target "api.example.com/v1": must be an http or https URL`},
		{[]string{"--queue", "q", "--target", "http://sk-test@[::1"}, `--target: must be an http or https URL (it does not parse as a URL)`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Authorization"}, `--header-env "Authorization": must be NAME=ENVIRONMENT_VARIABLE`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Authorization=BATCHQ_TEST_UNSET_VAR"}, "environment variable BATCHQ_TEST_UNSET_VAR is not set"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Bad Header=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Bad Header=BATCHQ_TEST_KEY": header name "Bad Header" must be letters, digits and ! # $ % & ' * + - . ^ _ ` + "`" + ` | ~`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "X-Key:=BATCHQ_TEST_KEY"}, `header name "X-Key:" must be letters, digits and`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "X-Ключ=BATCHQ_TEST_KEY"}, `header name "X-Ключ" must be letters, digits and`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Authorization=BATCHQ_TEST_BROKEN_KEY"},
			"batchq: --header-env Authorization=BATCHQ_TEST_BROKEN_KEY: environment variable BATCHQ_TEST_BROKEN_KEY holds a control character, which a header value must not"},
		{[]string{"--queue", "q", "--target", "http://x", "--refill", "drip"}, `--refill "drip": must be window or bucket`},
		{[]string{"--queue", "q", "--target", "http://x", "--concurrency", "0"}, "--concurrency 0: must be in 1..10000"},
		{[]string{"--queue", "q", "--target", "http://x", "--reserve", "1.5"}, "batchq: --reserve 1.5: must be in [0,1)"},
		{[]string{"--queue", "q", "--target", "http://x", "--reserve", "-0.1"}, "batchq: --reserve -0.1: must be in [0,1)"},
		{[]string{"--queue", "q", "--target", "http://x", "--reserve", "NaN", "--quota-key", "k"}, "batchq: --reserve NaN: must be in [0,1)"},
		{[]string{"--queue", "q", "--target", "http://x", "--timeout", "0s"}, "batchq: --timeout 0s: must be > 0"},
		{[]string{"--queue", "q", "--target", "http://x", "--timeout", "-1s"}, "batchq: --timeout -1s: must be > 0"},
		{nil, "batchq: work: --queue is required (see batchq work --help)"},
		{[]string{"--target", "http://x"}, "batchq: work: --queue is required (see batchq work --help)"},
		{[]string{"--queue", "q"}, "batchq: work: --target is required (see batchq work --help)"},
	} {
		// No server answers here: a usage error must come first.
		r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", append([]string{"work"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		require.NotContains(t, r.stderr, "sk-test", "a secret reached the error")
		require.Empty(t, r.stdout, "%v", tc.args)
	}
}
