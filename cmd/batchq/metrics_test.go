package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
)

var listenAddrCases = []struct {
	in, want, err string
}{
	{in: ":9090", want: "127.0.0.1:9090"},
	{in: ":0", want: "127.0.0.1:0"},
	{in: "127.0.0.1:0", want: "127.0.0.1:0"},
	{in: "0.0.0.0:9090", want: "0.0.0.0:9090"},
	{in: "[::]:9090", want: "[::]:9090"},
	{in: "[::1]:9090", want: "[::1]:9090"},
	{in: "localhost:9090", want: "localhost:9090"},
	{in: "10.1.2.3:9100", want: "10.1.2.3:9100"},
	{in: "9090", err: "must be HOST:PORT or :PORT"},
	{in: "::1", err: "must be HOST:PORT or :PORT"},
	{in: "127.0.0.1:", err: `port "" must be a number`},
	{in: ":http", err: `port "http" must be a number`},
	{in: ":65536", err: `port "65536" must be a number in 0..65535`},
	{in: ":-1", err: `port "-1" must be a number`},
}

// A bare :PORT listens on loopback; other interfaces only when named.
func TestMetricsListenAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range listenAddrCases {
		got, err := metricsListenAddr(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}

	// And what a bare port resolves to really is loopback only.
	addr, err := metricsListenAddr(":0")
	require.NoError(t, err)
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	defer ln.Close()
	require.True(t, ln.Addr().(*net.TCPAddr).IP.IsLoopback(), ln.Addr().String())
}

func FuzzMetricsListenAddr(f *testing.F) {
	for _, tc := range listenAddrCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := metricsListenAddr(in)
		if err != nil {
			return
		}
		host, port, err := net.SplitHostPort(got)
		require.NoError(t, err, "%q gave %q", in, got)
		inHost, inPort, _ := net.SplitHostPort(in)
		require.Equal(t, inPort, port)
		if inHost == "" {
			require.Equal(t, "127.0.0.1", host, "%q must default to loopback", in)
		} else {
			require.Equal(t, inHost, host)
		}
	})
}

// `batchq work --metrics-addr :0` serves on loopback and logs where.
func TestWorkServesMetricsOnLoopback(t *testing.T) {
	url := pgtest.URL(t)
	pool := pgtest.Connect(t, url)
	ctx := context.Background()
	c, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	require.NoError(t, c.CreateQueue(ctx, queue.QueueConfig{Name: "summaries"}))
	var jobs []queue.NewJob
	for i := range 5 {
		jobs = append(jobs, queue.NewJob{Queue: "summaries", Tenant: fmt.Sprint("t", i%2), Cost: 50, Payload: []byte(`{"tokens":50}`)})
	}
	_, err = c.EnqueueMany(ctx, jobs)
	require.NoError(t, err)
	sim, err := provider.New(provider.Config{RequestsPerWindow: 1000, TokensPerWindow: 100_000})
	require.NoError(t, err)
	srv := httptest.NewServer(sim)
	defer srv.Close()

	r := runCLI(t, url, "work", "--queue", "summaries", "--target", srv.URL, "--quota-key", "sim/model",
		"--drain", "--poll-interval", "50ms", "--metrics-addr", ":0", "--metrics-top-tenants", "1")
	require.Equal(t, 0, r.code, r.stderr)
	m := regexp.MustCompile(`msg="serving metrics" url=http://([^/ ]+)/metrics`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r.stderr)
	host, port, err := net.SplitHostPort(m[1])
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	require.NotEqual(t, "0", port, "the log names the port the kernel chose")
}

// The endpoint answers GET and HEAD; a scrape is never a POST or a DELETE.
func TestMetricsHandlerMethods(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "batchq_test_gauge", Help: "a gauge"}))
	h := metricsHandler(reg)
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/metrics", http.StatusOK},
		{http.MethodHead, "/metrics", http.StatusOK},
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodPut, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/metrics/x", http.StatusNotFound},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
		require.Equal(t, tc.want, w.Code, "%s %s", tc.method, tc.path)
		switch tc.want {
		case http.StatusOK:
			if tc.method == http.MethodGet {
				require.Contains(t, w.Body.String(), "batchq_test_gauge 0")
			}
		case http.StatusMethodNotAllowed:
			require.Equal(t, "GET, HEAD", w.Header().Get("Allow"), "%s %s", tc.method, tc.path)
		}
	}
}

// The metrics flags are checked before anything connects: in a database
// where the queue is unknown, a bad flag is what the user hears of.
func TestWorkRejectsBadMetricsFlags(t *testing.T) {
	dbURL := pgtest.URL(t) // migrated, without queue q
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-addr", "9090"}, `--metrics-addr "9090": must be HOST:PORT or :PORT`},
		{[]string{"--metrics-addr", ":0", "--metrics-top-tenants", "0"}, "--metrics-top-tenants 0: must be in 1..10000"},
		{[]string{"--metrics-top-tenants", "-5"}, "--metrics-top-tenants -5: must be in 1..10000"}, // without --metrics-addr
	} {
		r := runCLI(t, dbURL, append([]string{"work", "--queue", "q", "--target", "http://x"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want)
	}
	// A host is looked up when the server starts listening, once the queue
	// is known.
	require.Zero(t, runCLI(t, dbURL, "queues", "create", "q").code)
	r := runCLI(t, dbURL, "work", "--queue", "q", "--target", "http://x", "--metrics-addr", "999.1.1.1:9090")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `--metrics-addr "999.1.1.1:9090": host "999.1.1.1" is not found`)
}
