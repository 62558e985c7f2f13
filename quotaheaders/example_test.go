package quotaheaders_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/batchq/batchq/quotaheaders"
)

// Read the quota an OpenAI response reports, measured from the instant the
// response arrived.
func ExampleParse() {
	h := http.Header{}
	h.Set("X-Ratelimit-Limit-Tokens", "150000")
	h.Set("X-Ratelimit-Remaining-Tokens", "149984")
	h.Set("X-Ratelimit-Reset-Tokens", "6m0s")
	receivedAt := time.Date(2025, 5, 26, 5, 0, 4, 0, time.UTC)

	s, ok := quotaheaders.Parse(h, receivedAt, quotaheaders.Tokens)
	fmt.Println(ok, s.Remaining, "of", s.Limit, "tokens, reset in", s.Reset)

	_, ok = quotaheaders.Parse(h, receivedAt, quotaheaders.Requests)
	fmt.Println("requests quota reported:", ok)
	// Output:
	// true 149984 of 150000 tokens, reset in 6m0s
	// requests quota reported: false
}

// Anthropic reports tokens three ways; the most restrictive wins, and its
// RFC 3339 reset becomes a duration from the arrival of the response.
func ExampleParse_anthropic() {
	h := http.Header{}
	h.Set("Anthropic-Ratelimit-Tokens-Remaining", "16000")
	h.Set("Anthropic-Ratelimit-Tokens-Reset", "2025-04-10T15:30:12Z")
	h.Set("Anthropic-Ratelimit-Input-Tokens-Limit", "80000")
	h.Set("Anthropic-Ratelimit-Input-Tokens-Remaining", "0")
	h.Set("Anthropic-Ratelimit-Input-Tokens-Reset", "2025-04-10T15:30:12Z")
	h.Set("Anthropic-Ratelimit-Output-Tokens-Remaining", "16000")
	receivedAt := time.Date(2025, 4, 10, 15, 30, 0, 0, time.UTC)

	s, _ := quotaheaders.Parse(h, receivedAt, quotaheaders.Tokens)
	fmt.Printf("%d of %d left, reset in %v\n", s.Remaining, s.Limit, s.Reset)
	// Output:
	// 0 of 80000 left, reset in 12s
}

// The IETF draft's structured fields: the limit and the unit come from the
// policy of the same name.
func ExampleParse_ietfDraft() {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`)
	h.Set("RateLimit", `"burst";r=50;t=30, "daily";r=20;t=3600`)

	s, _ := quotaheaders.Parse(h, time.Now(), quotaheaders.Requests)
	fmt.Println(s.Remaining, s.Limit, s.Reset)
	// Output:
	// 20 1000 1h0m0s
}

func ExampleRetryAfter() {
	receivedAt := time.Date(2024, 5, 16, 9, 0, 0, 0, time.UTC)

	h := http.Header{}
	h.Set("Retry-After", "1")
	h.Set("Retry-After-Ms", "650")
	d, _ := quotaheaders.RetryAfter(h, receivedAt)
	fmt.Println(d)

	h = http.Header{}
	h.Set("Retry-After", "Thu, 16 May 2024 09:00:05 GMT")
	d, _ = quotaheaders.RetryAfter(h, receivedAt)
	fmt.Println(d)
	// Output:
	// 650ms
	// 5s
}

func ExampleParseDuration() {
	for _, s := range []string{"2m59.56s", "1h2m3.5s", "500us", "-1s"} {
		d, ok := quotaheaders.ParseDuration(s)
		fmt.Println(s, d.Milliseconds(), ok)
	}
	// Output:
	// 2m59.56s 179560 true
	// 1h2m3.5s 3723500 true
	// 500us 0 true
	// -1s 0 false
}
