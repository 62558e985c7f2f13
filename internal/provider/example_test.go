package provider_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/quotaheaders"
)

// Serve a provider with a token bucket of 1000 tokens a minute, post two
// jobs of 600 tokens, and read the quota each response reports. The second
// does not fit: 400 tokens are left and 200 more take 12 seconds to refill.
func Example() {
	now := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	p, err := provider.New(provider.Config{
		RequestsPerWindow: 100,
		TokensPerWindow:   1000,
		Window:            time.Minute,
		Refill:            provider.TokenBucket,
		Now:               func() time.Time { return now }, // a clock that stands still
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()

	for _, job := range []string{"job-1", "job-2"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"estimated_tokens":600}`))
		req.Header.Set("Batchq-Job-Id", job)
		req.Header.Set("Idempotency-Key", job+"-attempt-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()

		tokens, _ := quotaheaders.Parse(resp.Header, now, quotaheaders.Tokens)
		fmt.Printf("%s: %d, %d of %d tokens left, full in %v\n", job, resp.StatusCode, tokens.Remaining, tokens.Limit, tokens.Reset)
		if wait, ok := quotaheaders.RetryAfter(resp.Header, now); ok {
			fmt.Printf("  retry after %v (Retry-After: %s)\n", wait, resp.Header.Get("Retry-After"))
		} else {
			fmt.Printf("  %s", body)
		}
	}
	st := p.Stats()
	fmt.Printf("requests %d, admitted %d, 429s %d, tokens charged %d\n", st.Requests, st.Admitted, st.TooManyRequests, st.TokensCharged)
	// Output:
	// job-1: 200, 400 of 1000 tokens left, full in 36s
	//   {"id":"chatcmpl-sim-1","object":"chat.completion","usage":{"prompt_tokens":450,"completion_tokens":150,"total_tokens":600},"echo":"job-1"}
	// job-2: 429, 400 of 1000 tokens left, full in 36s
	//   retry after 12s (Retry-After: 12)
	// requests 2, admitted 1, 429s 1, tokens charged 600
}

// A tenant whose requests use half again what they say: the provider charges
// what was used, so a client pacing by estimates meets 429s sooner than it
// expects.
func ExampleConfig_usageFactor() {
	p, _ := provider.New(provider.Config{
		TokensPerWindow: 1000,
		UsageFactor:     map[string]float64{"optimist": 1.5},
	})
	for _, tenant := range []string{"optimist", "realist"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"estimated_tokens":200}`))
		req.Header.Set("Batchq-Tenant", tenant)
		p.ServeHTTP(rec, req)
		fmt.Println(tenant, "charged", p.Log()[len(p.Log())-1].Tokens, "left", rec.Header().Get("x-ratelimit-remaining-tokens"))
	}
	// Output:
	// optimist charged 300 left 700
	// realist charged 200 left 500
}
