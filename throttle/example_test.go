package throttle_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

func show(d throttle.Decision) string {
	switch {
	case d.OK:
		return "start"
	case d.Never:
		return "never"
	}
	return "wait " + d.Wait.String()
}

// Batch work stops at the reserve; interactive calls may use it.
func Example() {
	th, err := throttle.New(throttle.Config{Reserve: 0.2})
	if err != nil {
		panic(err)
	}
	now := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	// The response to a call sent a second ago said: 300 of 1000 tokens
	// left, the window resets in 30s.
	th.ObserveSnapshotAt(now.Add(-time.Second), now, quotaheaders.Tokens, quotaheaders.Snapshot{
		Remaining: 300, Limit: 1000, HasLimit: true, Reset: 30 * time.Second, HasReset: true,
	})
	fmt.Println("batch 100:", show(th.CanStartAt(now, 100, throttle.Batch)))
	fmt.Println("batch 100:", show(th.CanStartAt(now, 100, throttle.Batch)))
	fmt.Println("interactive 100:", show(th.CanStartAt(now, 100, throttle.Interactive)))
	fmt.Println("batch 900:", show(th.CanStartAt(now, 900, throttle.Batch)))
	fmt.Println("batch 100 after the reset:", show(th.CanStartAt(now.Add(30*time.Second), 100, throttle.Batch)))
	// Output:
	// batch 100: start
	// batch 100: wait 30s
	// interactive 100: start
	// batch 900: never
	// batch 100 after the reset: start
}

// A 429 stops everything, interactive included, for its Retry-After.
func ExampleThrottle_ObserveResponseAt() {
	var th throttle.Throttle // the zero value: no reserve, window model
	sent := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	received := sent.Add(800 * time.Millisecond)
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "17.5s")
	h.Set("Retry-After", "18")
	th.ObserveResponseAt(sent, received, &http.Response{StatusCode: http.StatusTooManyRequests, Header: h})
	fmt.Println("interactive:", show(th.CanStartAt(received, 1, throttle.Interactive)))
	fmt.Println("18s later:", show(th.CanStartAt(received.Add(18*time.Second), 1, throttle.Interactive)))
	// Output:
	// interactive: wait 18s
	// 18s later: start
}

// Throttles built on one Store with one Key act as one: a fleet paces from
// one shared state.
func ExampleMemoryStore() {
	store := &throttle.MemoryStore{}
	cfg := throttle.Config{Reserve: 0.5, Store: store, Key: "openai/gpt-4o"}
	a, _ := throttle.New(cfg)
	b, _ := throttle.New(cfg)
	now := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	a.ObserveSnapshotAt(now.Add(-time.Second), now, quotaheaders.Tokens, quotaheaders.Snapshot{
		Remaining: 1000, Limit: 1000, HasLimit: true, Reset: time.Minute, HasReset: true,
	})
	fmt.Println("a, batch 400:", show(a.CanStartAt(now, 400, throttle.Batch)))
	fmt.Println("b, batch 400:", show(b.CanStartAt(now, 400, throttle.Batch)))
	fmt.Println("b, batch 100:", show(b.CanStartAt(now, 100, throttle.Batch)))
	// Output:
	// a, batch 400: start
	// b, batch 400: wait 1m0s
	// b, batch 100: start
}
