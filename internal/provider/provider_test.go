package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
)

// t0 is on a minute boundary, so one-minute fixed windows start there.
var t0 = time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)

// fakeClock is the provider's clock in unit tests: it stands still until
// set, and Sleep moves it on instead of sleeping.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set puts the clock at t0 + offset.
func (c *fakeClock) Set(offset time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t0.Add(offset)
}

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

type testBundle struct {
	p     *provider.Provider
	clock *fakeClock
}

// setup builds a Provider for cfg on a fake clock at t0.
func setup(t testing.TB, cfg provider.Config) *testBundle {
	t.Helper()
	clock := &fakeClock{now: t0}
	cfg.Now, cfg.Sleep = clock.Now, clock.Sleep
	p, err := provider.New(cfg)
	require.NoError(t, err)
	return &testBundle{p: p, clock: clock}
}

// call is one request to send; the zero call is a POST with an empty body.
type call struct {
	method, body     string
	job, key, tenant string
	ctx              context.Context
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends c to the handler directly, without a network.
func (b *testBundle) do(t testing.TB, c call) reply {
	t.Helper()
	return serve(t, b.p, c)
}

// post sends a request of tokens at t0 + at.
func (b *testBundle) post(t testing.TB, at time.Duration, tokens int64) reply {
	t.Helper()
	b.clock.Set(at)
	return b.do(t, call{body: fmt.Sprintf(`{"tokens":%d}`, tokens)})
}

func serve(t testing.TB, h http.Handler, c call) reply {
	t.Helper()
	if c.method == "" {
		c.method = http.MethodPost
	}
	req := httptest.NewRequest(c.method, "/v1/chat/completions", strings.NewReader(c.body))
	if c.ctx != nil {
		req = req.WithContext(c.ctx)
	}
	setHeaders(req, c)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return reply{status: res.StatusCode, header: res.Header, body: body}
}

func setHeaders(req *http.Request, c call) {
	if c.job != "" {
		req.Header.Set(provider.DefaultJobHeader, c.job)
	}
	if c.key != "" {
		req.Header.Set(provider.IdempotencyKeyHeader, c.key)
	}
	if c.tenant != "" {
		req.Header.Set(provider.TenantHeader, c.tenant)
	}
}

type completion struct {
	ID    string `json:"id"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
	Echo string `json:"echo"`
}

type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decode[T any](t testing.TB, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), "body %s", body)
	return v
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t, provider.Config{})
		r := b.do(t, call{body: `{}`})
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "500", r.header.Get("x-ratelimit-limit-requests"))
		require.Equal(t, "499", r.header.Get("x-ratelimit-remaining-requests"))
		require.Equal(t, "1m0s", r.header.Get("x-ratelimit-reset-requests")) // fixed one-minute windows
		require.Equal(t, "200000", r.header.Get("x-ratelimit-limit-tokens"))
		require.Equal(t, "199900", r.header.Get("x-ratelimit-remaining-tokens")) // DefaultTokens 100
		require.Equal(t, "1m0s", r.header.Get("x-ratelimit-reset-tokens"))
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			field string
			cfg   provider.Config
		}{
			{"RequestsPerWindow", provider.Config{RequestsPerWindow: -1}},
			{"TokensPerWindow", provider.Config{TokensPerWindow: -1}},
			{"Window", provider.Config{Window: -time.Second}},
			{"Refill", provider.Config{Refill: provider.Refill(7)}},
			{"DefaultTokens", provider.Config{DefaultTokens: -1}},
			{"Latency", provider.Config{Latency: -1}},
			{"Jitter", provider.Config{Jitter: -1}},
			{"FailRate", provider.Config{FailRate: 1.5}},
			{"FailRate", provider.Config{FailRate: -0.1}},
			{"FailStatus", provider.Config{FailStatus: 429}},
			{"UsageFactor", provider.Config{UsageFactor: map[string]float64{"a": 0}}},
			{"FailJobs", provider.Config{FailJobs: map[string]int{"a": 200}}},
		} {
			_, err := provider.New(tc.cfg)
			require.ErrorContains(t, err, "batchq: provider: invalid Config."+tc.field, "%+v", tc.cfg)
		}
	})
}

func TestRequestCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		method     string
		body       string
		wantStatus int
		wantTokens int64 // charged
	}{
		{"Tokens", "", `{"tokens":7}`, 200, 7},
		{"EstimatedTokens", "", `{"estimated_tokens":9,"model":"m"}`, 200, 9},
		{"TokensWinOverEstimate", "", `{"estimated_tokens":9,"tokens":7}`, 200, 7},
		{"ZeroTokens", "", `{"tokens":0}`, 200, 0},
		{"NoCountIsDefault", "", `{"messages":[]}`, 200, 5},
		{"EmptyBodyIsDefault", "", "", 200, 5},
		{"NullIsDefault", "", "null", 200, 5},
		{"Negative", "", `{"tokens":-1}`, 400, 0},
		{"Fraction", "", `{"tokens":1.5}`, 400, 0},
		{"NotAnObject", "", `[1]`, 400, 0},
		{"NotJSON", "", `tokens=1`, 400, 0},
		{"NotPOST", http.MethodGet, "", 405, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, provider.Config{TokensPerWindow: 1000, DefaultTokens: 5})
			r := b.do(t, call{method: tc.method, body: tc.body, job: "j"})
			require.Equal(t, tc.wantStatus, r.status)
			require.Equal(t, fmt.Sprint(1000-tc.wantTokens), r.header.Get("x-ratelimit-remaining-tokens"))

			st := b.p.Stats()
			require.Equal(t, tc.wantTokens, st.TokensCharged)
			if tc.wantStatus == http.StatusMethodNotAllowed {
				require.Equal(t, "POST", r.header.Get("Allow"))
			}
			if tc.wantStatus != 200 {
				require.Equal(t, "invalid_request_error", decode[apiError](t, r.body).Error.Type)
				require.Equal(t, provider.Stats{Requests: 1, ClientErrors: 1}, st)
				require.Equal(t, "1000", r.header.Get("x-ratelimit-remaining-tokens"), "a malformed request is not charged")
				return
			}
			c := decode[completion](t, r.body)
			require.Equal(t, tc.wantTokens, c.Usage.TotalTokens)
			require.Equal(t, c.Usage.TotalTokens, c.Usage.PromptTokens+c.Usage.CompletionTokens)
			require.Equal(t, "j", c.Echo)
		})
	}
}

func TestResponseBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{TokensPerWindow: 100})

	r := b.do(t, call{body: `{"tokens":80}`, job: "job-1"})
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	c := decode[completion](t, r.body)
	require.Equal(t, "chatcmpl-sim-1", c.ID)
	require.Equal(t, int64(60), c.Usage.PromptTokens)
	require.Equal(t, int64(20), c.Usage.CompletionTokens)
	require.Equal(t, int64(80), c.Usage.TotalTokens)
	require.Equal(t, "job-1", c.Echo)

	r = b.do(t, call{body: `{"tokens":30}`, job: "job-2"})
	require.Equal(t, http.StatusTooManyRequests, r.status)
	e := decode[apiError](t, r.body)
	require.Equal(t, "rate_limit_exceeded", e.Error.Type)
	require.Equal(t, "rate_limit_exceeded", *e.Error.Code)
	require.Contains(t, e.Error.Message, "tokens")

	// More than the limit can never fit: no Retry-After, since waiting
	// would not help.
	r = b.do(t, call{body: `{"tokens":101}`, job: "job-3"})
	require.Equal(t, http.StatusTooManyRequests, r.status)
	e = decode[apiError](t, r.body)
	require.Equal(t, "rate_limit_exceeded", e.Error.Type)
	require.Equal(t, "request_too_large", *e.Error.Code)
	require.Empty(t, r.header.Get("Retry-After"))
	require.Empty(t, r.header.Get("Retry-After-Ms"))
}

func TestUsageFactor(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{
		TokensPerWindow: 1000,
		Window:          time.Hour, // a negligible refill between the steps
		UsageFactor:     map[string]float64{"low": 1.5, "slightly-low": 1.1, "high": 0.5},
	})
	for _, tc := range []struct {
		tenant        string
		tokens        int64
		wantStatus    int
		wantCharged   int64
		wantRemaining string
	}{
		{"low", 100, 200, 150, "850"},
		{"slightly-low", 100, 200, 110, "740"}, // not 111: no floating-point noise
		{"high", 101, 200, 51, "689"},          // 50.5 rounds up
		{"", 100, 200, 100, "589"},
		{"unknown", 89, 200, 89, "500"},
		// The estimate fits what is left, the actual use does not.
		{"low", 400, 429, 0, "500"},
		{"", 400, 200, 400, "100"},
		// The estimate is below the limit, the actual use above it.
		{"low", 700, 429, 0, "100"},
	} {
		r := b.do(t, call{body: fmt.Sprintf(`{"estimated_tokens":%d}`, tc.tokens), tenant: tc.tenant})
		require.Equal(t, tc.wantStatus, r.status, "%+v", tc)
		require.Equal(t, tc.wantRemaining, r.header.Get("x-ratelimit-remaining-tokens"), "%+v", tc)
		if tc.wantStatus == 200 {
			require.Equal(t, tc.wantCharged, decode[completion](t, r.body).Usage.TotalTokens, "%+v", tc)
		}
	}
	st := b.p.Stats()
	require.Equal(t, int64(900), st.TokensCharged)
	require.Equal(t, int64(6), st.Admitted)
	require.Equal(t, int64(2), st.TooManyRequests)

	log := b.p.Log()
	require.Equal(t, "low", log[0].Tenant)
	require.Equal(t, int64(150), log[0].Tokens)
	require.False(t, log[5].Admitted)
	require.Zero(t, log[5].Tokens)
}

func TestFaults(t *testing.T) {
	t.Parallel()

	t.Run("FailJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, provider.Config{TokensPerWindow: 1000, FailJobs: map[string]int{"bad": 400, "flaky": 503}})
		bad := b.do(t, call{body: `{"tokens":10}`, job: "bad"})
		flaky := b.do(t, call{body: `{"tokens":10}`, job: "flaky"})
		good := b.do(t, call{body: `{"tokens":10}`, job: "good"})

		require.Equal(t, 400, bad.status)
		require.Equal(t, "invalid_request_error", decode[apiError](t, bad.body).Error.Type)
		require.Equal(t, 503, flaky.status)
		require.Equal(t, "server_error", decode[apiError](t, flaky.body).Error.Type)
		require.Equal(t, 200, good.status)
		// Faults are charged and carry the quota headers.
		require.Equal(t, "990", bad.header.Get("x-ratelimit-remaining-tokens"))
		require.Equal(t, "980", flaky.header.Get("x-ratelimit-remaining-tokens"))
		require.Equal(t, "970", good.header.Get("x-ratelimit-remaining-tokens"))
		require.Equal(t, provider.Stats{
			Requests: 3, Admitted: 3, OK: 1, ClientErrors: 1, ServerErrors: 1, TokensCharged: 30,
		}, b.p.Stats())
		require.Equal(t, 503, b.p.JobLog("flaky")[0].Status)
	})

	// statuses sends n requests and returns their statuses.
	statuses := func(t *testing.T, cfg provider.Config, n int) []int {
		t.Helper()
		cfg.RequestsPerWindow, cfg.TokensPerWindow = 1_000_000, 1_000_000
		b := setup(t, cfg)
		out := make([]int, n)
		for i := range out {
			out[i] = b.do(t, call{body: `{"tokens":1}`}).status
		}
		return out
	}
	count := func(statuses []int, status int) int {
		n := 0
		for _, s := range statuses {
			if s == status {
				n++
			}
		}
		return n
	}

	t.Run("FailRate", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 200, count(statuses(t, provider.Config{}, 200), 200))
		require.Equal(t, 200, count(statuses(t, provider.Config{FailRate: 1, FailStatus: 503}, 200), 503))

		third := statuses(t, provider.Config{FailRate: 0.3, Seed: 7}, 1000)
		require.Equal(t, 1000, count(third, 200)+count(third, 500), "FailStatus defaults to 500")
		require.InDelta(t, 300, count(third, 500), 60) // 4 standard deviations
	})

	t.Run("Seeded", func(t *testing.T) {
		t.Parallel()
		a := statuses(t, provider.Config{FailRate: 0.5, Seed: 42}, 100)
		require.Equal(t, a, statuses(t, provider.Config{FailRate: 0.5, Seed: 42}, 100))
		require.NotEqual(t, a, statuses(t, provider.Config{FailRate: 0.5, Seed: 43}, 100))
	})
}

func TestLatency(t *testing.T) {
	t.Parallel()
	cfg := provider.Config{RequestsPerWindow: 3, Latency: 2 * time.Second, Jitter: time.Second, Seed: 1}
	b := setup(t, cfg)
	for range 4 { // the fourth is a 429
		b.do(t, call{body: `{"tokens":1}`, job: "j"})
	}
	slept := b.clock.Slept()
	require.Len(t, slept, 3, "a 429 is answered at once")
	for _, d := range slept {
		require.GreaterOrEqual(t, d, 2*time.Second)
		require.Less(t, d, 3*time.Second)
	}
	require.NotEqual(t, slept[0], slept[1], "jittered")

	// The quota is charged at arrival, and the log times bracket the
	// latency.
	log := b.p.JobLog("j")
	require.Len(t, log, 4)
	for i, d := range slept {
		require.Equal(t, d, log[i].Finished.Sub(log[i].Arrived))
		require.Equal(t, log[i].Finished, log[i+1].Arrived) // the fake clock moved on by the latency
	}
	require.Equal(t, http.StatusTooManyRequests, log[3].Status)
	require.Equal(t, log[3].Arrived, log[3].Finished)

	again := setup(t, cfg)
	for range 3 {
		again.do(t, call{body: `{"tokens":1}`})
	}
	require.Equal(t, slept, again.clock.Slept(), "same seed, same delays")
}

func TestSleepGetsTheRequestContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	var got any
	p, err := provider.New(provider.Config{
		Latency: time.Hour,
		Sleep:   func(ctx context.Context, _ time.Duration) { got = ctx.Value(key{}) },
	})
	require.NoError(t, err)
	r := serve(t, p, call{ctx: context.WithValue(context.Background(), key{}, "mine")})
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "mine", got)
}

func TestJobHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{Header: "X-Job"})
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
	req.Header.Set("X-Job", "custom")
	req.Header.Set(provider.DefaultJobHeader, "ignored")
	rec := httptest.NewRecorder()
	b.p.ServeHTTP(rec, req)
	require.Equal(t, "custom", decode[completion](t, rec.Body.Bytes()).Echo)
	require.Len(t, b.p.JobLog("custom"), 1)
	require.Nil(t, b.p.JobLog("ignored"))
}
