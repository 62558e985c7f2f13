// Package throttletest holds the behaviour tests that every throttle.Store
// must pass, so the in-memory store and the Postgres store are held to the
// same semantics.
package throttletest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// RunStoreSuite runs the throttle's behaviour tests, and the Store contract
// tests, against the stores newStore returns. newStore is called once per
// subtest, from parallel subtests; a store may be shared between calls, since
// every subtest uses its own keys.
func RunStoreSuite(t *testing.T, newStore func(t *testing.T) throttle.Store) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s throttle.Store)
	}{
		{"StoreStartsEmpty", testStoreStartsEmpty},
		{"StoreRoundTrip", testStoreRoundTrip},
		{"StoreErrorSavesNothing", testStoreErrorSavesNothing},
		{"StoreSerializesUpdates", testStoreSerializesUpdates},
		{"NothingKnownMeansGo", testNothingKnownMeansGo},
		{"BatchStopsAtReserveInteractiveDoesNot", testReserve},
		{"TooManyRequestsStopsBoth", testTooManyRequestsStopsBoth},
		{"WindowRolloverForgetsLocalAccounting", testWindowRollover},
		{"WindowRolloverUnknownLimitMeansGo", testWindowRolloverUnknownLimit},
		{"RequestsAndTokensBothMustAdmit", testBothUnits},
		{"StaleResponsesDoNotUndoFresherOnes", testStaleResponses},
		{"WindowResetNarrowedByFasterResponses", testWindowResetNarrowed},
		{"TokenBucketRefillsContinuously", testTokenBucketRefill},
		{"TokenBucketNeverOverAdmits", testTokenBucketNeverOverAdmits},
		{"NoResetKnownProbes", testProbe},
		{"DefaultPauseDoublesUpToCapAndResets", testDefaultPause},
		{"InFlight429sDoNotDoubleThePause", testInFlight429s},
		{"Never", testNever},
		{"FleetSharesOneState", testFleet},
		{"CallsDecidedOutOfOrderAreCountedInOrder", testOutOfOrderDecisions},
		{"ResponsesMayMissCallsCountedJustBefore", testReorder},
		{"AdmissionLogIsBounded", testAdmissionLogBounded},
		{"StateTimesAreMicroseconds", testStateTimesAreMicroseconds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// t0 is the fixed instant the tests start at.
var t0 = time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func snap(remaining, limit int64, reset time.Duration) quotaheaders.Snapshot {
	return quotaheaders.Snapshot{Remaining: remaining, Limit: limit, HasLimit: true, Reset: reset, HasReset: true}
}

// keyOf is the quota key of the running test.
func keyOf(t *testing.T) string { return "throttletest/" + t.Name() }

// clocked is a Throttle on a clock of its own that the test sets: each
// question names the instant it is asked at, and each report fails the test
// on a Store error.
type clocked struct {
	*throttle.Throttle
	t     *testing.T
	clock *Clock
}

// newThrottle returns a throttle on s for the test's key, or for cfg.Key if
// it is set.
func newThrottle(t *testing.T, s throttle.Store, cfg throttle.Config) *clocked {
	t.Helper()
	th := &clocked{t: t, clock: NewClock(t0)}
	cfg.Store, cfg.Now = s, th.clock.Now
	if cfg.Key == "" {
		cfg.Key = keyOf(t)
	}
	var err error
	if th.Throttle, err = throttle.New(cfg); err != nil {
		t.Fatalf("New: %v", err)
	}
	return th
}

// canStartAt asks CanStart with the clock at now.
func (th *clocked) canStartAt(now time.Time, cost int64, p throttle.Priority) throttle.Decision {
	th.t.Helper()
	th.clock.Set(now)
	d, err := th.CanStart(context.Background(), cost, p)
	if err != nil {
		th.t.Fatalf("CanStart(+%v, %d, %v): %v", now.Sub(t0), cost, p, err)
	}
	return d
}

func (th *clocked) observe(sent, received time.Time, unit quotaheaders.Unit, s quotaheaders.Snapshot) {
	th.t.Helper()
	if err := th.ObserveSnapshot(context.Background(), sent, received, unit, s); err != nil {
		th.t.Fatalf("ObserveSnapshot: %v", err)
	}
}

func (th *clocked) observeResponse(sent, received time.Time, resp *http.Response) {
	th.t.Helper()
	if err := th.ObserveResponse(context.Background(), sent, received, resp); err != nil {
		th.t.Fatalf("ObserveResponse: %v", err)
	}
}

// tooMany records a 429 received at received for a call taken to have been
// sent then.
func (th *clocked) tooMany(received time.Time, retryAfter time.Duration) {
	th.t.Helper()
	if err := th.TooManyRequests(context.Background(), received, received, retryAfter); err != nil {
		th.t.Fatalf("TooManyRequests: %v", err)
	}
}

// check asks th at now and fails unless the decision is want.
func check(t *testing.T, th *clocked, now time.Time, cost int64, p throttle.Priority, want throttle.Decision) {
	t.Helper()
	th.clock.Set(now)
	got, err := th.CanStart(context.Background(), cost, p)
	if err != nil {
		t.Fatalf("CanStart(+%v, %d, %v): %v", now.Sub(t0), cost, p, err)
	}
	why, counted := got.Why, got.At
	got.Why, got.At = nil, time.Time{}
	// An admitted call is counted at now, or just after a call counted
	// before it; a refused one at no instant.
	if got.OK && (counted.Before(now.Truncate(time.Microsecond)) || counted.After(now.Add(time.Millisecond))) ||
		!got.OK && !counted.IsZero() {
		t.Fatalf("CanStart(+%v, %d, %v): counted at +%v", now.Sub(t0), cost, p, counted.Sub(t0))
	}
	if got != want {
		t.Fatalf("CanStart(+%v, %d, %v) = %+v, want %+v", now.Sub(t0), cost, p, got, want)
	}
	// A Never says why, and nothing else does.
	if got.Never != (why != nil) {
		t.Fatalf("CanStart(+%v, %d, %v): Never %v but Why %v", now.Sub(t0), cost, p, got.Never, why)
	}
	if why != nil && (why.Cost <= why.Limit-why.Reserve || why.Priority != p || !errors.Is(why, throttle.ErrNever)) {
		t.Fatalf("CanStart(+%v, %d, %v): Why %+v does not explain a Never", now.Sub(t0), cost, p, why)
	}
}

var (
	ok    = throttle.Decision{OK: true}
	never = throttle.Decision{Never: true}
)

func wait(d time.Duration) throttle.Decision { return throttle.Decision{Wait: d} }

// state reads the state of th's key.
func state(t *testing.T, s throttle.Store) throttle.State {
	t.Helper()
	var st throttle.State
	err := s.Update(context.Background(), keyOf(t), func(s *throttle.State) error {
		st = *s
		st.Admitted = append([]throttle.Admission(nil), s.Admitted...)
		return nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	return st
}

func testStoreStartsEmpty(t *testing.T, s throttle.Store) {
	var empty throttle.State
	err := s.Update(context.Background(), keyOf(t), func(st *throttle.State) error {
		if d := diffState(*st, empty); d != "" {
			return fmt.Errorf("a new key's state is not the zero State: %s", d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fullState sets every field, with times at microsecond precision in a zone
// other than UTC, as a store must keep them.
func fullState() throttle.State {
	zone := time.FixedZone("UTC+2", 2*60*60)
	tm := func(us int64) time.Time { return t0.Add(time.Duration(us) * time.Microsecond).In(zone) }
	q := func(n int64) throttle.Quota {
		return throttle.Quota{
			Observed: true, Limit: 1000 * n, HasLimit: true, Remaining: 999 * n,
			SentAt: tm(n), ReceivedAt: tm(n + 1_000_001), HasReset: true,
			ResetFrom: tm(n + 60_000_000), ResetAt: tm(n + 61_000_001),
		}
	}
	return throttle.State{
		Requests: q(1),
		Tokens:   q(7),
		Admitted: []throttle.Admission{
			{At: tm(3), Calls: 1, Tokens: 500},
			{At: tm(4), Calls: 2, Tokens: 1},
			{At: tm(1_500_009), Calls: 3, Tokens: 0},
		},
		PausedUntil: tm(90_000_017),
		Backoff:     4 * time.Second,
		BackoffAt:   tm(86_000_017),
		ProbeAt:     tm(91_000_003),
	}
}

func testStoreRoundTrip(t *testing.T, s throttle.Store) {
	ctx, key := context.Background(), keyOf(t)
	want := fullState()
	if err := s.Update(ctx, key, func(st *throttle.State) error { *st = fullState(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, key, func(st *throttle.State) error {
		if d := diffState(*st, want); d != "" {
			return fmt.Errorf("state did not survive the store: %s", d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Other keys are untouched.
	if err := s.Update(ctx, key+"/other", func(st *throttle.State) error {
		if d := diffState(*st, throttle.State{}); d != "" {
			return fmt.Errorf("another key's state changed: %s", d)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func testStoreErrorSavesNothing(t *testing.T, s throttle.Store) {
	ctx, key := context.Background(), keyOf(t)
	if err := s.Update(ctx, key, func(st *throttle.State) error { *st = fullState(); return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := s.Update(ctx, key, func(st *throttle.State) error {
		st.Requests.Remaining = 1
		st.Admitted = append(st.Admitted, throttle.Admission{At: t0, Calls: 9})
		st.Admitted[0].Tokens = 42
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	if d := diffState(state(t, s), fullState()); d != "" {
		t.Fatalf("a failed Update changed the state: %s", d)
	}
}

func testStoreSerializesUpdates(t *testing.T, s throttle.Store) {
	const goroutines, each = 8, 25
	ctx, key := context.Background(), keyOf(t)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range each {
				err := s.Update(ctx, key, func(st *throttle.State) error {
					st.Requests.Remaining++
					st.Admitted = append(st.Admitted[:0], throttle.Admission{At: t0, Calls: st.Requests.Remaining})
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := state(t, s)
	if st.Requests.Remaining != goroutines*each || len(st.Admitted) != 1 || st.Admitted[0].Calls != goroutines*each {
		t.Fatalf("after %d concurrent increments: Remaining %d, Admitted %+v", goroutines*each, st.Requests.Remaining, st.Admitted)
	}
}

func testNothingKnownMeansGo(t *testing.T, s throttle.Store) {
	th := newThrottle(t, s, throttle.Config{Reserve: 0.5})
	for i := range 3 {
		check(t, th, at(time.Duration(i)), 1_000_000_000, throttle.Batch, ok)
	}
}

func testReserve(t *testing.T, s throttle.Store) {
	// The article's test: batch stops at the reserve, interactive does not.
	th := newThrottle(t, s, throttle.Config{Reserve: 0.2})
	th.observe(at(0), at(time.Second), quotaheaders.Tokens, snap(1000, 1000, time.Minute))
	th.observe(at(0), at(time.Second), quotaheaders.Requests, snap(100, 100, time.Minute))
	for range 4 {
		check(t, th, at(2*time.Second), 200, throttle.Batch, ok) // 1000 → 200, the reserve
	}
	// Nothing refills before the reset, received at +1s plus a minute.
	check(t, th, at(2*time.Second), 1, throttle.Batch, wait(59*time.Second))
	check(t, th, at(2*time.Second), 200, throttle.Interactive, ok)
	check(t, th, at(2*time.Second), 1, throttle.Interactive, wait(59*time.Second))
	check(t, th, at(61*time.Second), 800, throttle.Batch, ok)
}

func testTooManyRequestsStopsBoth(t *testing.T, s throttle.Store) {
	// The article's test: a 429 stops both until the reset.
	th := newThrottle(t, s, throttle.Config{Reserve: 0.2})
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(900, 1000, time.Minute))
	th.tooMany(at(time.Second), 2*time.Second)
	check(t, th, at(2*time.Second), 1, throttle.Batch, wait(time.Second))
	check(t, th, at(2*time.Second), 1, throttle.Interactive, wait(time.Second))
	check(t, th, at(3*time.Second-time.Microsecond), 1, throttle.Interactive, wait(time.Microsecond))
	check(t, th, at(3*time.Second), 1, throttle.Interactive, ok)
	check(t, th, at(3*time.Second), 1, throttle.Batch, ok)
}

func testWindowRollover(t *testing.T, s throttle.Store) {
	// The article's test: when the reset passes, local accounting is forgotten.
	th := newThrottle(t, s, throttle.Config{})
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(1000, 1000, 10*time.Second))
	check(t, th, at(time.Second), 500, throttle.Batch, ok)
	check(t, th, at(time.Second), 500, throttle.Batch, ok)
	check(t, th, at(time.Second), 500, throttle.Batch, wait(9*time.Second))
	// The new window: the calls at +1s are forgotten, the full limit is back.
	check(t, th, at(10*time.Second), 500, throttle.Batch, ok)
	check(t, th, at(10*time.Second), 500, throttle.Batch, ok)
	// What is admitted in the new window counts; with no reset known for it,
	// wait a probe interval.
	check(t, th, at(10*time.Second), 500, throttle.Batch, wait(time.Second))
}

func testWindowRolloverUnknownLimit(t *testing.T, s throttle.Store) {
	th := newThrottle(t, s, throttle.Config{Reserve: 0.2})
	th.observe(at(0), at(0), quotaheaders.Tokens,
		quotaheaders.Snapshot{Remaining: 100, Reset: 10 * time.Second, HasReset: true})
	check(t, th, at(time.Second), 100, throttle.Batch, ok) // no limit, no reserve
	check(t, th, at(time.Second), 1, throttle.Batch, wait(9*time.Second))
	// After the reset, with nothing known, go.
	check(t, th, at(10*time.Second), 5000, throttle.Batch, ok)
	check(t, th, at(10*time.Second), 5000, throttle.Batch, ok)
}

func testBothUnits(t *testing.T, s throttle.Store) {
	th := newThrottle(t, s, throttle.Config{})
	th.observe(at(0), at(0), quotaheaders.Requests, snap(2, 3, time.Minute))
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(10_000, 10_000, 30*time.Second))
	check(t, th, at(time.Second), 10, throttle.Batch, ok)
	check(t, th, at(time.Second), 10, throttle.Batch, ok)
	// Tokens to spare, but no request left until the requests reset.
	check(t, th, at(time.Second), 10, throttle.Batch, wait(59*time.Second))

	// Requests to spare, but not enough tokens until the tokens reset.
	th2 := newThrottle(t, s, throttle.Config{Key: keyOf(t) + "/tokens"})
	th2.observe(at(0), at(0), quotaheaders.Requests, snap(100, 100, time.Minute))
	th2.observe(at(0), at(0), quotaheaders.Tokens, snap(100, 10_000, 30*time.Second))
	check(t, th2, at(time.Second), 150, throttle.Batch, wait(29*time.Second))
	check(t, th2, at(time.Second), 100, throttle.Batch, ok)
	check(t, th2, at(time.Second), 1, throttle.Batch, wait(29*time.Second))
	// Both short: wait for the later of the two.
	th2.observe(at(2*time.Second), at(2*time.Second), quotaheaders.Requests, snap(0, 100, 50*time.Second))
	check(t, th2, at(3*time.Second), 1, throttle.Batch, wait(49*time.Second))
}

func testStaleResponses(t *testing.T, s throttle.Store) {
	// A window of 1000 tokens that resets at +1h. Calls A, B, C, D are sent
	// at +0s, +1s, +2s, +2.5s; the provider counts each as it arrives, and
	// the responses come back out of order.
	th := newThrottle(t, s, throttle.Config{})
	observe := func(sent, received time.Duration, remaining int64) {
		th.observe(at(sent), at(received), quotaheaders.Tokens, snap(remaining, 1000, time.Hour-sent))
	}
	observe(-time.Second, -time.Second, 1000)
	for _, sent := range []time.Duration{0, time.Second, 2 * time.Second, 2500 * time.Millisecond} {
		check(t, th, at(sent), 100, throttle.Interactive, ok)
	}
	// C's response says 700: A, B and C are counted; D, sent after, is not.
	observe(2*time.Second, 3*time.Second, 700)
	// A's and B's arrive late and say 900 and 800, from before the others
	// were counted: stale, they change nothing.
	observe(0, 4*time.Second, 900)
	observe(time.Second, 4*time.Second, 800)
	// 700 − D = 600.
	check(t, th, at(5*time.Second), 601, throttle.Interactive, wait(time.Hour-5*time.Second))
	check(t, th, at(5*time.Second), 600, throttle.Interactive, ok)

	// D's response is fresher than C's and replaces it: 600, less the 600
	// admitted at +5s after D was sent.
	observe(2500*time.Millisecond, 6*time.Second, 600)
	check(t, th, at(7*time.Second), 1, throttle.Interactive, wait(time.Hour-7*time.Second))
	// The article's throttle would have believed A's 900 and let 900 more
	// through; here, once the call at +5s answers, the truth is 0 left.
	observe(5*time.Second, 8*time.Second, 0)
	check(t, th, at(9*time.Second), 1, throttle.Interactive, wait(time.Hour-9*time.Second))
}

func testWindowResetNarrowed(t *testing.T, s throttle.Store) {
	// The provider's window resets at +60s. A's response (sent at +0s) comes
	// back in half a second; B's (sent at +1s) takes eight. Each bounds the
	// reset by [sent + reset, received + reset]; together they pin it.
	th := newThrottle(t, s, throttle.Config{})
	check(t, th, at(0), 100, throttle.Batch, ok)
	th.observe(at(0), at(500*time.Millisecond), quotaheaders.Tokens, snap(100, 200, 59500*time.Millisecond))
	check(t, th, at(time.Second), 100, throttle.Batch, ok)
	th.observe(at(time.Second), at(9*time.Second), quotaheaders.Tokens, snap(0, 200, 59*time.Second))
	// B alone would say the window resets by +68s.
	check(t, th, at(10*time.Second), 1, throttle.Batch, wait(50*time.Second))
	check(t, th, at(60*time.Second), 200, throttle.Batch, ok)
}

func testTokenBucketRefill(t *testing.T, s throttle.Store) {
	// A bucket of 6000 tokens refilling over a minute (100/s), empty at +0s.
	observe := func(th *clocked) {
		th.observe(at(0), at(0), quotaheaders.Tokens, snap(0, 6000, time.Minute))
	}
	bucket := newThrottle(t, s, throttle.Config{Refill: throttle.TokenBucket})
	observe(bucket)
	window := newThrottle(t, s, throttle.Config{Key: keyOf(t) + "/window"})
	observe(window)

	// The window waits for the reset; the bucket waits for 500 tokens, at the
	// rate it can be sure of: (6000 − 0 − 1) / 60s, allowing for rounding.
	check(t, window, at(0), 500, throttle.Batch, wait(time.Minute))
	d := bucket.canStartAt(at(0), 500, throttle.Batch)
	if d.OK || d.Wait < 5*time.Second || d.Wait > 5*time.Second+5*time.Millisecond {
		t.Fatalf("bucket: CanStart(+0s, 500) = %+v, want a wait of just over 5s", d)
	}
	check(t, bucket, at(d.Wait), 500, throttle.Batch, ok)
	check(t, window, at(d.Wait), 500, throttle.Batch, wait(time.Minute-d.Wait))
	// Refilled to the limit by the reset, not beyond.
	check(t, bucket, at(time.Hour), 6000, throttle.Batch, ok)
	check(t, bucket, at(time.Hour), 1, throttle.Batch, wait(10*time.Millisecond+2*time.Microsecond))
}

func testTokenBucketNeverOverAdmits(t *testing.T, s throttle.Store) {
	// A simulated provider bucket: 6000 tokens a minute. Calls of random cost
	// are asked for whenever the throttle says to; each response (with the
	// provider's remaining, rounded down, and reset, rounded up to the
	// millisecond) arrives two seconds later. The provider must never run
	// dry, and the throttle must keep up with the refill.
	const limit, rate = 6000.0, 100.0 // tokens, tokens per second
	th := newThrottle(t, s, throttle.Config{Refill: throttle.TokenBucket, Reserve: 0.1})
	// Before the first response nothing is known and everything may start;
	// start from one that says the bucket is full.
	th.observe(at(-time.Second), t0, quotaheaders.Tokens, snap(limit, limit, 0))
	level, last := limit, t0
	refill := func(now time.Time) {
		level = min(limit, level+rate*now.Sub(last).Seconds())
		last = now
	}
	type response struct {
		sent, received time.Time
		snap           quotaheaders.Snapshot
	}
	var inFlight []response
	rng := rand.New(rand.NewPCG(1, 2))
	now, end := t0, t0.Add(10*time.Minute)
	cost := 50 + rng.Int64N(750)
	var admitted float64
	for now.Before(end) {
		for len(inFlight) > 0 && !inFlight[0].received.After(now) {
			r := inFlight[0]
			inFlight = inFlight[1:]
			th.observe(r.sent, r.received, quotaheaders.Tokens, r.snap)
		}
		d := th.canStartAt(now, cost, throttle.Batch)
		next := now.Add(d.Wait)
		if d.OK {
			refill(now)
			level -= float64(cost)
			if level < 0 {
				t.Fatalf("at +%v the provider's bucket is at %.1f: over-admitted", now.Sub(t0), level)
			}
			admitted += float64(cost)
			reset := time.Duration((limit - level) / rate * float64(time.Second))
			inFlight = append(inFlight, response{now, now.Add(2 * time.Second), quotaheaders.Snapshot{
				Remaining: int64(level), Limit: limit, HasLimit: true,
				Reset: reset.Truncate(time.Millisecond) + time.Millisecond, HasReset: true,
			}})
			cost = 50 + rng.Int64N(750)
			next = now.Add(time.Millisecond + time.Duration(rng.Int64N(int64(100*time.Millisecond))))
		}
		if len(inFlight) > 0 && inFlight[0].received.Before(next) {
			next = inFlight[0].received
		}
		now = next
	}
	// Batch may use the bucket down to the reserve, plus the refill.
	allowed := limit*0.9 + rate*end.Sub(t0).Seconds()
	if admitted < 0.95*allowed {
		t.Fatalf("admitted %.0f tokens in 10 minutes, less than 95%% of the %.0f allowed", admitted, allowed)
	}
	t.Logf("admitted %.0f of %.0f tokens allowed (%.1f%%)", admitted, allowed, 100*admitted/allowed)
}

func testProbe(t *testing.T, s throttle.Store) {
	// Nothing left and no reset known: wait a probe interval, then let one
	// call through to learn more, and the next an interval later, once the
	// one before has answered.
	th := newThrottle(t, s, throttle.Config{ProbeInterval: 2 * time.Second})
	th.observe(at(0), at(0), quotaheaders.Tokens, quotaheaders.Snapshot{Remaining: 0, Limit: 1000, HasLimit: true})
	check(t, th, at(time.Second), 10, throttle.Batch, wait(2*time.Second))
	check(t, th, at(2*time.Second), 10, throttle.Interactive, wait(time.Second))
	check(t, th, at(3*time.Second), 10, throttle.Batch, ok) // the probe
	check(t, th, at(3*time.Second), 10, throttle.Batch, wait(2*time.Second))
	// Its answer has not come: no second probe, however long.
	check(t, th, at(5*time.Second), 10, throttle.Batch, wait(2*time.Second))
	check(t, th, at(30*time.Second), 10, throttle.Batch, wait(2*time.Second))
	// It answers: still nothing left, so the next probe goes an interval on.
	th.observe(at(3*time.Second), at(31*time.Second), quotaheaders.Tokens, quotaheaders.Snapshot{Remaining: 0, Limit: 1000, HasLimit: true})
	check(t, th, at(31*time.Second), 10, throttle.Batch, wait(2*time.Second))
	check(t, th, at(33*time.Second), 10, throttle.Batch, ok) // the next one
	// A probe that never answers holds the next back for MaxPause (60s).
	check(t, th, at(92*time.Second), 10, throttle.Batch, wait(2*time.Second))
	check(t, th, at(93*time.Second), 10, throttle.Batch, ok)
	// The probe's answer: room again.
	th.observe(at(93*time.Second), at(94*time.Second), quotaheaders.Tokens, quotaheaders.Snapshot{Remaining: 500, Limit: 1000, HasLimit: true})
	check(t, th, at(94*time.Second), 10, throttle.Batch, ok)
	check(t, th, at(94*time.Second), 10, throttle.Batch, ok)
	// Short again: the probe interval starts over.
	check(t, th, at(95*time.Second), 481, throttle.Batch, wait(2*time.Second))
}

func testDefaultPause(t *testing.T, s throttle.Store) {
	th := newThrottle(t, s, throttle.Config{DefaultPause: time.Second, MaxPause: 4 * time.Second})
	step := func(received time.Duration, wantPause time.Duration) {
		t.Helper()
		th.tooMany(at(received), 0)
		check(t, th, at(received), 1, throttle.Interactive, wait(wantPause))
		check(t, th, at(received+wantPause), 1, throttle.Batch, ok)
	}
	step(0, time.Second)
	step(2*time.Second, 2*time.Second)
	step(5*time.Second, 4*time.Second)
	step(10*time.Second, 4*time.Second) // capped
	// A success (a response to a call sent after the last 429) starts over.
	th.observe(at(14*time.Second), at(15*time.Second), quotaheaders.Tokens, snap(500, 1000, time.Minute))
	step(16*time.Second, time.Second)
}

func testInFlight429s(t *testing.T, s throttle.Store) {
	// Three calls in flight when the first 429 arrives: their 429s are the
	// same episode and do not double the pause. A 429 to a call sent after
	// the pause does; a success after that starts over.
	th := newThrottle(t, s, throttle.Config{DefaultPause: time.Second, MaxPause: time.Minute})
	resp := func(status int) *http.Response { return &http.Response{StatusCode: status, Header: http.Header{}} }
	th.observeResponse(at(-3*time.Second), at(0), resp(http.StatusTooManyRequests))
	th.observeResponse(at(-2*time.Second), at(200*time.Millisecond), resp(http.StatusTooManyRequests))
	th.observeResponse(at(-1*time.Second), at(300*time.Millisecond), resp(http.StatusTooManyRequests))
	check(t, th, at(time.Second), 1, throttle.Interactive, wait(300*time.Millisecond))
	check(t, th, at(1300*time.Millisecond), 1, throttle.Batch, ok)
	// A success for a call sent before the 429 arrived ends nothing.
	th.observeResponse(at(-500*time.Millisecond), at(1400*time.Millisecond), resp(http.StatusOK))
	th.observeResponse(at(1300*time.Millisecond), at(1500*time.Millisecond), resp(http.StatusTooManyRequests))
	check(t, th, at(1500*time.Millisecond), 1, throttle.Batch, wait(2*time.Second))
	check(t, th, at(3500*time.Millisecond), 1, throttle.Batch, ok)
	th.observeResponse(at(3500*time.Millisecond), at(4*time.Second), resp(http.StatusOK))
	th.observeResponse(at(4*time.Second), at(5*time.Second), resp(http.StatusTooManyRequests))
	check(t, th, at(5*time.Second), 1, throttle.Batch, wait(time.Second))
	// Retry-After, when given, is the pause, and leaves the backoff alone.
	th.tooMany(at(10*time.Second), 30*time.Second)
	check(t, th, at(10*time.Second), 1, throttle.Interactive, wait(30*time.Second))
}

func testNever(t *testing.T, s throttle.Store) {
	th := newThrottle(t, s, throttle.Config{Reserve: 0.2})
	// Before any limit is known, nothing is Never.
	check(t, th, at(0), 5000, throttle.Batch, ok)
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(0, 1000, time.Minute))
	th.observe(at(0), at(0), quotaheaders.Requests, snap(10, 10, time.Minute))
	check(t, th, at(time.Second), 801, throttle.Batch, never)
	check(t, th, at(time.Second), 800, throttle.Batch, wait(time.Minute-time.Second))
	check(t, th, at(time.Second), 1001, throttle.Interactive, never)
	check(t, th, at(time.Second), 1000, throttle.Interactive, wait(time.Minute-time.Second))
	// Never even while paused: waiting would not help.
	th.tooMany(at(time.Second), 10*time.Second)
	check(t, th, at(2*time.Second), 801, throttle.Batch, never)

	err := th.Wait(context.Background(), 801, throttle.Batch)
	var ne *throttle.NeverError
	if !errors.Is(err, throttle.ErrNever) || !errors.As(err, &ne) {
		t.Fatalf("Wait = %v, want a *NeverError wrapping ErrNever", err)
	}
	if want := (throttle.NeverError{Priority: throttle.Batch, Unit: quotaheaders.Tokens, Cost: 801, Limit: 1000, Reserve: 200}); *ne != want {
		t.Fatalf("Wait's error = %+v, want %+v", *ne, want)
	}

	// One request a minute and any reserve: batch can never start at all.
	th2 := newThrottle(t, s, throttle.Config{Reserve: 0.01, Key: keyOf(t) + "/requests"})
	th2.observe(at(0), at(0), quotaheaders.Requests, snap(1, 1, time.Minute))
	check(t, th2, at(time.Second), 1, throttle.Batch, never)
	check(t, th2, at(time.Second), 1, throttle.Interactive, ok)
}

func testFleet(t *testing.T, s throttle.Store) {
	// Two processes, one quota key: each sees what the other admitted.
	a := newThrottle(t, s, throttle.Config{Reserve: 0.5})
	b := newThrottle(t, s, throttle.Config{Reserve: 0.5})
	a.observe(at(0), at(0), quotaheaders.Tokens, snap(1000, 1000, time.Minute))
	check(t, a, at(time.Second), 300, throttle.Batch, ok)
	check(t, b, at(time.Second), 300, throttle.Batch, wait(59*time.Second))
	check(t, b, at(time.Second), 200, throttle.Batch, ok)
	b.tooMany(at(2*time.Second), 5*time.Second)
	check(t, a, at(3*time.Second), 1, throttle.Interactive, wait(4*time.Second))
}

func testOutOfOrderDecisions(t *testing.T, s throttle.Store) {
	// Process b decides at +1s but reaches the store only after process a,
	// which decided at +2s, was counted and sent. a's response cannot have
	// seen b's call, so b's must still be subtracted from what it reports.
	a := newThrottle(t, s, throttle.Config{})
	b := newThrottle(t, s, throttle.Config{})
	a.observe(at(0), at(0), quotaheaders.Tokens, snap(1000, 1000, time.Minute))
	da := a.canStartAt(at(2*time.Second), 400, throttle.Batch)
	db := b.canStartAt(at(time.Second), 400, throttle.Batch)
	if !da.OK || !db.OK {
		t.Fatalf("decisions %+v, %+v: want both OK", da, db)
	}
	if !db.At.After(da.At) {
		t.Fatalf("b counted at +%v, not after a at +%v", db.At.Sub(t0), da.At.Sub(t0))
	}
	a.observe(da.At, at(3*time.Second), quotaheaders.Tokens, snap(600, 1000, time.Minute))
	check(t, a, at(3*time.Second), 201, throttle.Batch, wait(time.Minute))
	check(t, a, at(3*time.Second), 200, throttle.Batch, ok)
}

func testReorder(t *testing.T, s throttle.Store) {
	// Calls counted at +1s, +1.97s and +2s (the observed one): the second,
	// less than Reorder before the third, may have reached the provider
	// after it, so its cost stays against what the third's response says.
	th := newThrottle(t, s, throttle.Config{Reorder: 50 * time.Millisecond})
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(10_000, 10_000, time.Minute))
	check(t, th, at(time.Second), 1000, throttle.Batch, ok)
	check(t, th, at(1970*time.Millisecond), 300, throttle.Batch, ok)
	d := th.canStartAt(at(2*time.Second), 100, throttle.Batch)
	if !d.OK {
		t.Fatalf("CanStart(+2s) = %+v, want OK", d)
	}
	// The provider counted the first and the third: 10,000 − 1,000 − 100.
	th.observe(d.At, at(2100*time.Millisecond), quotaheaders.Tokens, snap(8_900, 10_000, time.Minute))
	check(t, th, at(3*time.Second), 8_601, throttle.Batch, wait(time.Minute-900*time.Millisecond))
	check(t, th, at(3*time.Second), 8_600, throttle.Batch, ok)
}

func testAdmissionLogBounded(t *testing.T, s throttle.Store) {
	th := newThrottle(t, s, throttle.Config{Reorder: 10 * time.Millisecond})
	const n = 3 * throttle.MaxAdmitted
	for i := range n {
		check(t, th, at(time.Duration(i)*time.Millisecond), 10, throttle.Batch, ok)
	}
	st := state(t, s)
	if len(st.Admitted) > throttle.MaxAdmitted {
		t.Fatalf("%d admissions kept, want at most %d", len(st.Admitted), throttle.MaxAdmitted)
	}
	var calls, tokens int64
	for _, a := range st.Admitted {
		calls, tokens = calls+a.Calls, tokens+a.Tokens
	}
	if calls != n || tokens != 10*n {
		t.Fatalf("merging lost admissions: %d calls, %d tokens; want %d, %d", calls, tokens, n, 10*n)
	}
	// An observation makes the admissions more than Reorder before its
	// request irrelevant.
	th.observe(at(n*time.Millisecond-5*time.Millisecond), at(time.Second), quotaheaders.Tokens, snap(1000, 1000, time.Minute))
	if st := state(t, s); len(st.Admitted) != 15 {
		t.Fatalf("after the observation %d admissions are kept, want the last 15: %+v", len(st.Admitted), st.Admitted)
	}
}

func testStateTimesAreMicroseconds(t *testing.T, s throttle.Store) {
	// Callers pass nanosecond times; a store keeps microseconds. Whatever the
	// throttle saves must already be whole microseconds, so a round trip
	// through the store changes nothing.
	th := newThrottle(t, s, throttle.Config{Refill: throttle.Window})
	ns := func(d time.Duration) time.Time { return t0.Add(d + 123*time.Nanosecond) }
	check(t, th, ns(time.Second), 10, throttle.Batch, ok)
	th.observe(ns(time.Second), ns(2*time.Second), quotaheaders.Tokens,
		snap(10, 1000, 30*time.Second+456*time.Nanosecond))
	th.tooMany(ns(3*time.Second), 0)
	th.tooMany(ns(3*time.Second), 1500*time.Millisecond+789*time.Nanosecond)
	st := state(t, s)
	for name, tm := range stateTimes(st) {
		if tm.Nanosecond()%1000 != 0 {
			t.Errorf("%s = %v is not whole microseconds", name, tm)
		}
	}
	if st.Backoff%time.Microsecond != 0 {
		t.Errorf("Backoff = %v is not whole microseconds", st.Backoff)
	}
	// Rounding goes the careful way: the reset (received at +2s+123ns, plus
	// 30s+456ns) is trusted from +32s+1µs, not a nanosecond before.
	check(t, th, ns(5*time.Second), 11, throttle.Batch, wait(27*time.Second+time.Microsecond))
	check(t, th, ns(30*time.Second), 11, throttle.Batch, wait(2*time.Second+time.Microsecond))
	check(t, th, at(32*time.Second), 11, throttle.Batch, wait(time.Microsecond))
	check(t, th, at(32*time.Second+time.Microsecond), 11, throttle.Batch, ok)
}

func stateTimes(s throttle.State) map[string]time.Time {
	m := map[string]time.Time{
		"PausedUntil": s.PausedUntil, "BackoffAt": s.BackoffAt, "ProbeAt": s.ProbeAt, "ProbeSent": s.ProbeSent,
	}
	for name, q := range map[string]throttle.Quota{"Requests": s.Requests, "Tokens": s.Tokens} {
		m[name+".SentAt"], m[name+".ReceivedAt"] = q.SentAt, q.ReceivedAt
		m[name+".ResetFrom"], m[name+".ResetAt"] = q.ResetFrom, q.ResetAt
		m[name+".InteractiveSince"] = q.InteractiveSince
	}
	for i, a := range s.Admitted {
		m[fmt.Sprintf("Admitted[%d].At", i)] = a.At
	}
	return m
}

// diffState describes how a differs from b, comparing times as instants.
func diffState(a, b throttle.State) string {
	ta, tb := stateTimes(a), stateTimes(b)
	for name, x := range ta {
		if y, ok := tb[name]; !ok || !x.Equal(y) {
			return fmt.Sprintf("%s: %v, want %v", name, x, y)
		}
	}
	if len(ta) != len(tb) || len(a.Admitted) != len(b.Admitted) {
		return fmt.Sprintf("Admitted: %+v, want %+v", a.Admitted, b.Admitted)
	}
	for i := range a.Admitted {
		x, y := a.Admitted[i], b.Admitted[i]
		if x.Calls != y.Calls || x.Tokens != y.Tokens {
			return fmt.Sprintf("Admitted[%d]: %+v, want %+v", i, x, y)
		}
	}
	zero := func(s throttle.State) throttle.State {
		s.Admitted, s.PausedUntil, s.BackoffAt, s.ProbeAt, s.ProbeSent = nil, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		for _, q := range []*throttle.Quota{&s.Requests, &s.Tokens} {
			q.SentAt, q.ReceivedAt, q.ResetFrom, q.ResetAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			q.InteractiveSince = time.Time{}
		}
		return s
	}
	if za, zb := zero(a), zero(b); fmt.Sprintf("%+v", za) != fmt.Sprintf("%+v", zb) {
		return fmt.Sprintf("%+v, want %+v", za, zb)
	}
	return ""
}
