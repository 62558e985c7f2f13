package main

import (
	"context"
	"encoding/json"
	"errors"
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
	require.Regexp(t, `^worked queue summaries for [0-9.]+m?s: 30 succeeded\n$`, r.stdout, "the drain's summary")

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
	t.Setenv("BATCHQ_TEST_EMPTY_KEY", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", "q", "--target", "ftp://x"}, `--target "ftp://x": must be an http or https URL`},
		// A key in the value stays out of the error.
		{[]string{"--queue", "q", "--target", "api.example.com/v1?key=sk-test"}, `--target "api.example.com/v1": must be an http or https URL`},
		{[]string{"--queue", "q", "--target", "http://sk-test@[::1"}, `batchq: --target "http://[::1": must be an http or https URL (it does not parse as a URL)`},
		// Shown as typed, not as url.URL prints it (%20, %C3%A9), and
		// refused with whitespace or control characters, which it would escape.
		{[]string{"--queue", "q", "--target", "ftp://x/é"}, `batchq: --target "ftp://x/é": must be an http or https URL`},
		{[]string{"--queue", "q", "--target", "http://127.0.0.1:18931/ bad"},
			`batchq: --target "http://127.0.0.1:18931/ bad": must not contain whitespace or control characters`},
		{[]string{"--queue", "q", "--target", "not a url"}, `batchq: --target "not a url": must not contain whitespace or control characters`},
		{[]string{"--queue", "q", "--target", "http://x/\tp"}, `batchq: --target "http://x/\tp": must not contain whitespace or control characters`},
		{[]string{"--queue", "q", "--target", " http://x/"}, `batchq: --target " http://x/": must not contain whitespace or control characters`},
		{[]string{"--queue", "q", "--target", "http://u:sk-test@x/?key=sk-test x"},
			`batchq: --target "http://x/": must not contain whitespace or control characters (in its credentials or query, which are not shown)`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Authorization"}, `--header-env "Authorization": must be NAME=ENVIRONMENT_VARIABLE`},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Authorization=BATCHQ_TEST_UNSET_VAR"}, "environment variable BATCHQ_TEST_UNSET_VAR is not set"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "X-Test=BATCHQ_TEST_EMPTY_KEY"},
			"batchq: --header-env X-Test: environment variable BATCHQ_TEST_EMPTY_KEY is empty\n"},
		// Headers the worker sets itself, or its HTTP client drops or manages.
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Host=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Host=BATCHQ_TEST_KEY": the worker sets Host itself, from its target` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "idempotency-key=BATCHQ_TEST_KEY"},
			`batchq: --header-env "idempotency-key=BATCHQ_TEST_KEY": the worker sets Idempotency-Key itself` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Content-Type=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Content-Type=BATCHQ_TEST_KEY": the worker sets Content-Type itself` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Batchq-Tenant=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Batchq-Tenant=BATCHQ_TEST_KEY": the worker sets the Batchq- headers itself` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "BATCHQ-PRIORITY=BATCHQ_TEST_KEY"},
			`batchq: --header-env "BATCHQ-PRIORITY=BATCHQ_TEST_KEY": the worker sets the Batchq- headers itself` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Content-Length=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Content-Length=BATCHQ_TEST_KEY": the worker's HTTP client sets Content-Length itself, from the payload` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Transfer-Encoding=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Transfer-Encoding=BATCHQ_TEST_KEY": the worker's HTTP client sets Transfer-Encoding itself, from the payload` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Trailer=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Trailer=BATCHQ_TEST_KEY": the worker sends no trailers` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "Connection=BATCHQ_TEST_KEY"},
			`batchq: --header-env "Connection=BATCHQ_TEST_KEY": a hop-by-hop header: the worker's HTTP client manages its connections` + "\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--header-env", "TE=BATCHQ_TEST_UNSET_VAR"},
			`batchq: --header-env "TE=BATCHQ_TEST_UNSET_VAR": a hop-by-hop header: the worker's HTTP client manages its connections` + "\n"},
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
		{[]string{"--queue", "q", "--target", "http://x", "--reserve", "NaN", "--quota-key", "k"}, `batchq: --reserve "NaN": not a decimal number`},
		// A quota key is refused by its flag and rule, once.
		{[]string{"--queue", "q", "--target", "http://x", "--quota-key", strings.Repeat("k", 300)}, "batchq: --quota-key: must be at most 256 bytes (got 300)\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--quota-key", "a\tb"}, "batchq: --quota-key: must not contain control characters (got \"a\\tb\")\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--timeout", "0s"}, "batchq: --timeout 0s: must be > 0"},
		{[]string{"--queue", "q", "--target", "http://x", "--timeout", "-1s"}, "batchq: --timeout -1s: must be > 0"},
		// A zero or negative interval was once taken for the default.
		{[]string{"--queue", "q", "--target", "http://x", "--poll-interval", "0s"}, "batchq: --poll-interval 0s: must be > 0"},
		{[]string{"--queue", "q", "--target", "http://x", "--poll-interval", "-1s"}, "batchq: --poll-interval -1s: must be > 0"},
		{[]string{"--queue", "q", "--target", "http://x", "--shutdown-timeout", "-1s"}, "batchq: --shutdown-timeout -1s: must be > 0"},
		{[]string{"--queue", "q", "--target", "http://x", "--maintain-interval", "0s"}, "batchq: --maintain-interval 0s: must be > 0, or negative for never"},
		{[]string{"--queue", "q", "--target", "http://x", "--max-retry-after", "48h"}, "batchq: --max-retry-after 48h0m0s: must be in (0s, 24h0m0s]"},
		{[]string{"--queue", "q", "--target", "http://x", "--max-retry-after", "0s"}, "batchq: --max-retry-after 0s: must be in (0s, 24h0m0s]"},
		{[]string{"--queue", "q", "--target", "http://x", "--reorder", "0s"}, "batchq: --reorder 0s: must be in (0s, 1m0s]"},
		{[]string{"--queue", "q", "--target", "http://x", "--reorder", "-5ms", "--quota-key", "k"}, "batchq: --reorder -5ms: must be in (0s, 1m0s]"},
		{[]string{"--queue", "q", "--target", "http://x", "--reorder", "2m", "--quota-key", "k"}, "batchq: --reorder 2m0s: must be in (0s, 1m0s]"},
		// Settings of a throttle or of metrics given without one are mistakes.
		{[]string{"--queue", "q", "--target", "http://x", "--reserve", "0.3"},
			"batchq: work: --reserve goes with --quota-key (without a quota key there is no throttle)\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--refill", "bucket", "--quota-key", ""},
			"batchq: work: --refill goes with --quota-key (without a quota key there is no throttle)\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--max-retry-after", "1m"},
			"batchq: work: --max-retry-after goes with --quota-key (without a quota key there is no throttle)\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--reorder", "20ms"},
			"batchq: work: --reorder goes with --quota-key (without a quota key there is no throttle)\n"},
		{[]string{"--queue", "q", "--target", "http://x", "--metrics-top-tenants", "5"},
			"batchq: work: --metrics-top-tenants goes with --metrics-addr (without an address no metrics are served)\n"},
		{[]string{"--queue", "q", "--target", "http://x", "extra"}, `batchq: work: unexpected argument "extra"`},
		// Checked before the worker starts, not by the pool once it has.
		{[]string{"--queue", "q", "--target", "http://x", "--name", strings.Repeat("w", 257)},
			"batchq: --name: must be at most 256 bytes (got 257)"},
		{[]string{"--queue", "q", "--target", "http://x", "--name", "w\xff"}, "batchq: --name: must be valid UTF-8"},
		{[]string{"--queue", "q", "--target", "http://x", "--name", "w\tx"}, `batchq: --name: must not contain control characters (got "w\tx")`},
		{[]string{"--queue", "q", "--target", "http://x", "--name", ""}, "batchq: --name: must not be empty (leave it out for host:pid)\n"},
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
	// A database it cannot reach stops it before it says it is working or
	// prints a summary of nothing.
	r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "work", "--queue", "q", "--target", "http://x")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "connect")
	require.NotContains(t, r.stderr, "working")
	require.Empty(t, r.stdout)
}

// The same settings from the environment, which a whole fleet may share,
// are checked but not refused for want of a quota key or an address.
func TestWorkTakesThrottleSettingsFromTheEnvironmentWithoutAKey(t *testing.T) {
	t.Setenv("BATCHQ_RESERVE", "0.3")
	t.Setenv("BATCHQ_REFILL", "bucket")
	t.Setenv("BATCHQ_MAX_RETRY_AFTER", "1m")
	t.Setenv("BATCHQ_REORDER", "20ms")
	t.Setenv("BATCHQ_METRICS_TOP_TENANTS", "5")
	dbURL := pgtest.URL(t) // migrated, without queue q
	r := runCLI(t, dbURL, "work", "--queue", "q", "--target", "http://x")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --queue: unknown queue: \"q\" (batchq queues create q makes it)\n", r.stderr, "the next check, past the flags")
	t.Setenv("BATCHQ_RESERVE", "1.5")
	r = runCLI(t, dbURL, "work", "--queue", "q", "--target", "http://x")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "must be in [0,1)")
}

// An unknown queue is a usage error that names its flag, found before any
// work: nothing says it is working.
func TestWorkUnknownQueueIsAUsageError(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	r := runCLI(t, url, "work", "--queue", "nope", "--target", "http://127.0.0.1:1", "--drain")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --queue: unknown queue: \"nope\" (batchq queues create nope makes it)\n", r.stderr)
	require.NotContains(t, r.stderr, "working")
	require.Empty(t, r.stdout)

	r = runCLI(t, url, "work", "--queue", "a b", "--target", "http://127.0.0.1:1", "--drain")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --queue: unknown queue: \"a b\" is not a queue name: "+
		"1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit\n", r.stderr)
}

// A queue deleted while the worker ran fails the run (exit 1); the command
// line named a queue that was there, so it is not a usage error (2).
func TestWorkOfAQueueDeletedUnderItIsAFailure(t *testing.T) {
	t.Parallel()
	stopped := fmt.Errorf("%w: claims have failed for 30s (batchq: claim: unknown queue \"imports\"); stopping", queue.ErrUnknownQueue)
	var stderr strings.Builder
	require.Equal(t, 1, exitCode(workStopped("imports", stopped), &stderr))
	require.Equal(t, "batchq: work: queue imports was deleted while the worker ran: unknown queue: claims have failed for 30s "+
		"(batchq: claim: unknown queue \"imports\"); stopping\n", stderr.String())
	// Other errors pass through as they were.
	other := errors.New("batchq: something else")
	require.Same(t, other, workStopped("imports", other))
}

// work --drain of a paused queue finishes nothing new, says why, and exits
// 3; resumed, it drains. Its summary counts each outcome, in JSON too.
func TestWorkDrainOfAPausedQueue(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	ctx := context.Background()
	c, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, c.CreateQueue(ctx, queue.QueueConfig{Name: "imports"}))
	var jobs []queue.NewJob
	for i := range 6 {
		jobs = append(jobs, queue.NewJob{Queue: "imports", Tenant: "a", Cost: 1, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	_, err = c.EnqueueMany(ctx, jobs)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Batchq-Job-Id") == "1" {
			w.WriteHeader(http.StatusBadRequest) // discarded
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()

	r := runCLI(t, url, "queues", "pause", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "paused queue imports\n", r.stdout)
	r = runCLI(t, url, "work", "--queue", "imports", "--target", srv.URL, "--drain", "--poll-interval", "20ms")
	require.Equal(t, 3, r.code, r.stderr)
	require.Contains(t, r.stderr, "batchq: work --drain: queue imports is paused, so it cannot be drained")
	require.Contains(t, r.stderr, "batchq queues resume imports")
	require.Contains(t, r.stdout, "worked queue imports for ")
	require.Contains(t, r.stdout, ": 0 succeeded\n")
	require.Equal(t, int64(6), (&cliDB{url: url, pool: pool}).count(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'queued'`), "a paused queue hands out nothing")

	r = runCLI(t, url, "queues", "resume", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, url, "--format", "json", "work", "--queue", "imports", "--target", srv.URL, "--drain", "--poll-interval", "20ms")
	require.Equal(t, 0, r.code, r.stderr)
	var sum map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum), r.stdout)
	require.Equal(t, "imports", sum["queue"])
	require.EqualValues(t, 5, sum["succeeded"])
	require.EqualValues(t, 1, sum["discarded"])
	require.EqualValues(t, 0, sum["failed"])
	require.Contains(t, sum, "took")
}

// A drain with maintenance off says, when it starts, what it will wait for:
// retries and scheduled jobs that only another worker's maintenance
// requeues. With maintenance on it says nothing of it.
func TestWorkDrainWithMaintenanceOffSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	url := newCLIDB(t, "empty").url
	const warning = "--drain with maintenance off"
	r := runCLI(t, url, "work", "--queue", "empty", "--target", "http://127.0.0.1:1", "--drain", "--maintain-interval", "-1s")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, warning)
	r = runCLI(t, url, "work", "--queue", "empty", "--target", "http://127.0.0.1:1", "--drain")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stderr, warning)
}
