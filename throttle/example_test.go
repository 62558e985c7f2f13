package throttle_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

func show(d throttle.Decision, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case d.OK:
		return "start"
	case d.Never:
		return "never"
	}
	return "wait " + d.Wait.String()
}

// Batch work stops at the reserve; interactive calls may use it.
func Example() {
	ctx := context.Background()
	// A clock the example sets, so that its output does not depend on when
	// it runs; leave Now unset for time.Now.
	now := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	th, err := throttle.New(throttle.Config{Reserve: 0.2, Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	// The response to a call sent a second ago said: 300 of 1000 tokens
	// left, the window resets in 30s.
	err = th.ObserveSnapshot(ctx, now.Add(-time.Second), now, quotaheaders.Tokens, quotaheaders.Snapshot{
		Remaining: 300, Limit: 1000, HasLimit: true, Reset: 30 * time.Second, HasReset: true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("batch 100:", show(th.CanStart(ctx, 100, throttle.Batch)))
	fmt.Println("batch 100:", show(th.CanStart(ctx, 100, throttle.Batch)))
	fmt.Println("interactive 100:", show(th.CanStart(ctx, 100, throttle.Interactive)))
	fmt.Println("batch 900:", show(th.CanStart(ctx, 900, throttle.Batch)))
	now = now.Add(30 * time.Second)
	fmt.Println("batch 100 after the reset:", show(th.CanStart(ctx, 100, throttle.Batch)))
	// Output:
	// batch 100: start
	// batch 100: wait 30s
	// interactive 100: start
	// batch 900: never
	// batch 100 after the reset: start
}

// A 429 stops everything, interactive included, for its Retry-After.
func ExampleThrottle_ObserveResponse() {
	ctx := context.Background()
	sent := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	received := sent.Add(800 * time.Millisecond)
	now := received
	th, err := throttle.New(throttle.Config{Now: func() time.Time { return now }}) // no reserve, window model
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "500")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "17.5s")
	h.Set("Retry-After", "18")
	if err := th.ObserveResponse(ctx, sent, received, &http.Response{StatusCode: http.StatusTooManyRequests, Header: h}); err != nil {
		panic(err)
	}
	fmt.Println("interactive:", show(th.CanStart(ctx, 1, throttle.Interactive)))
	now = received.Add(18 * time.Second)
	fmt.Println("18s later:", show(th.CanStart(ctx, 1, throttle.Interactive)))
	// Output:
	// interactive: wait 18s
	// 18s later: start
}

// Throttles built on one Store with one Key act as one: a fleet paces from
// one shared state.
func ExampleMemoryStore() {
	ctx := context.Background()
	now := time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)
	store := &throttle.MemoryStore{}
	cfg := throttle.Config{Reserve: 0.5, Store: store, Key: "openai/gpt-4o", Now: func() time.Time { return now }}
	a, _ := throttle.New(cfg)
	b, _ := throttle.New(cfg)
	err := a.ObserveSnapshot(ctx, now.Add(-time.Second), now, quotaheaders.Tokens, quotaheaders.Snapshot{
		Remaining: 1000, Limit: 1000, HasLimit: true, Reset: time.Minute, HasReset: true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("a, batch 400:", show(a.CanStart(ctx, 400, throttle.Batch)))
	fmt.Println("b, batch 400:", show(b.CanStart(ctx, 400, throttle.Batch)))
	fmt.Println("b, batch 100:", show(b.CanStart(ctx, 100, throttle.Batch)))
	// Output:
	// a, batch 400: start
	// b, batch 400: wait 1m0s
	// b, batch 100: start
}
