package throttle_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

var t0 = time.Date(2025, 5, 26, 5, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func snap(remaining, limit int64, reset time.Duration) quotaheaders.Snapshot {
	return quotaheaders.Snapshot{Remaining: remaining, Limit: limit, HasLimit: true, Reset: reset, HasReset: true}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   throttle.Config
		field string
	}{
		{throttle.Config{Reserve: 1}, "Reserve"},
		{throttle.Config{Reserve: -0.1}, "Reserve"},
		{throttle.Config{Reserve: nan()}, "Reserve"},
		{throttle.Config{Refill: 7}, "Refill"},
		{throttle.Config{ProbeInterval: -time.Second}, "ProbeInterval"},
		{throttle.Config{DefaultPause: -time.Second}, "DefaultPause"},
		{throttle.Config{MaxPause: -time.Second}, "MaxPause"},
		{throttle.Config{DefaultPause: 2 * time.Minute}, "MaxPause"},
		{throttle.Config{DefaultPause: 2 * time.Second, MaxPause: time.Second}, "MaxPause"},
	} {
		_, err := throttle.New(tc.cfg)
		require.Error(t, err, "%+v", tc.cfg)
		require.Contains(t, err.Error(), "Config."+tc.field)
		require.True(t, strings.HasPrefix(err.Error(), "batchq: "), err.Error())
	}
	_, err := throttle.New(throttle.Config{Reserve: 0.999, Refill: throttle.TokenBucket, DefaultPause: time.Minute})
	require.NoError(t, err)
}

func nan() float64 { return math.NaN() }

func TestZeroValueThrottle(t *testing.T) {
	t.Parallel()
	// The zero value is New(Config{}): no reserve, window, defaults, and
	// time.Now for its clock.
	ctx := context.Background()
	var th throttle.Throttle
	before := time.Now()
	d, err := th.CanStart(ctx, 1_000_000, throttle.Batch)
	require.NoError(t, err)
	require.True(t, d.OK)
	require.False(t, d.At.Before(before.Truncate(time.Microsecond)), "counted at the time it was asked")
	// The response to that call: 100 left, of 100.
	now := time.Now()
	require.NoError(t, th.ObserveSnapshot(ctx, d.At, now, quotaheaders.Tokens, snap(100, 100, time.Minute)))
	d, err = th.CanStart(ctx, 100, throttle.Batch)
	require.NoError(t, err)
	require.True(t, d.OK)
	d, err = th.CanStart(ctx, 1, throttle.Batch)
	require.NoError(t, err)
	require.False(t, d.OK)
	// Until the reset, a minute after the response, on the real clock.
	require.LessOrEqual(t, d.Wait, time.Minute+time.Microsecond)
	require.GreaterOrEqual(t, d.Wait, time.Minute-time.Since(now))
	now = time.Now()
	require.NoError(t, th.TooManyRequests(ctx, now, now, 0))
	pause, err := th.Pause(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, pause, time.Second+time.Microsecond, "the default pause")
	require.GreaterOrEqual(t, pause, time.Second-time.Since(now))
}

func TestDefaultsApply(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{})
	// MaxPause 60s: 1, 2, 4, ..., 32, then 60.
	pause := time.Second
	now := at(0)
	for range 8 {
		th.tooMany(now, 0)
		require.Equal(t, throttle.Decision{Wait: min(pause, time.Minute)}, th.canStartAt(now, 1, throttle.Batch))
		now = now.Add(min(pause, time.Minute))
		pause *= 2
	}
	// ProbeInterval 1s.
	th2 := newClocked(t, throttle.Config{})
	th2.observe(at(0), at(0), quotaheaders.Tokens, quotaheaders.Snapshot{Remaining: 0})
	require.Equal(t, throttle.Decision{Wait: time.Second}, th2.canStartAt(at(0), 1, throttle.Batch))
}

func TestPriorityAndRefillStrings(t *testing.T) {
	t.Parallel()
	require.Equal(t, "batch", throttle.Batch.String())
	require.Equal(t, "interactive", throttle.Interactive.String())
	require.Equal(t, "token bucket", throttle.TokenBucket.String())
	require.Equal(t, "window", throttle.Window.String())
}

// fakeTimers fires the timers Wait sleeps on when the test says.
type fakeTimers struct {
	timers chan fakeTimer
}

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func newFakeTimers(th *clocked) *fakeTimers {
	f := &fakeTimers{timers: make(chan fakeTimer)}
	throttle.SetTimer(th.Throttle, func(d time.Duration) (<-chan time.Time, func() bool) {
		tm := fakeTimer{d: d, c: make(chan time.Time, 1)}
		f.timers <- tm
		return tm.c, func() bool { return true }
	})
	return f
}

func TestWaitBlocksUntilOK(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.5})
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(600, 1000, 10*time.Second))
	timers := newFakeTimers(th)
	th.clock.Set(at(time.Second))

	done := make(chan error, 1)
	go func() { done <- th.Wait(context.Background(), 200, throttle.Batch) }()
	// 600 − 200 < 500: wait for the reset, 9s away.
	tm := <-timers.timers
	require.Equal(t, 9*time.Second, tm.d)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before its timer fired", err)
	default:
	}
	th.clock.Set(at(10 * time.Second))
	tm.c <- at(10 * time.Second)
	require.NoError(t, <-done)
	// It was counted.
	require.Equal(t, throttle.Decision{OK: true, At: at(10*time.Second + time.Microsecond)}, th.canStartAt(at(10*time.Second), 300, throttle.Batch))
	require.Equal(t, throttle.Decision{Wait: time.Second}, th.canStartAt(at(10*time.Second), 1, throttle.Batch))
}

func TestWaitReturnsContextError(t *testing.T) {
	t.Parallel()
	th, err := throttle.New(throttle.Config{}) // on the real clock
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, th.TooManyRequests(context.Background(), now, now, time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, th.Wait(ctx, 1, throttle.Interactive), context.DeadlineExceeded)

	// A done context admits nothing.
	var free throttle.Throttle
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, free.Wait(ctx, 1, throttle.Batch), context.Canceled)
}

func TestWaitNever(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.25})
	th.observe(at(0), at(0), quotaheaders.Tokens, snap(1000, 1000, time.Minute))
	err := th.Wait(context.Background(), 751, throttle.Batch)
	require.ErrorIs(t, err, throttle.ErrNever)
	var ne *throttle.NeverError
	require.ErrorAs(t, err, &ne)
	require.Equal(t, throttle.NeverError{Priority: throttle.Batch, Unit: quotaheaders.Tokens, Cost: 751, Limit: 1000, Reserve: 250}, *ne)
	require.Equal(t, "batchq: throttle: batch call needs 751 tokens, more than the limit of 1000 less a reserve of 250", err.Error())
	require.NoError(t, th.Wait(context.Background(), 750, throttle.Batch))
}

// failingStore fails every update.
type failingStore struct{ err error }

func (s failingStore) Update(context.Context, string, func(*throttle.State) error) error {
	return s.err
}

// failingLoader fails every load too.
type failingLoader struct{ failingStore }

func (s failingLoader) Load(context.Context, string) (throttle.State, error) {
	return throttle.State{}, s.err
}

// Every method that reads or writes the store returns its error.
func TestStoreErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("connection refused")
	for _, store := range []throttle.Store{failingStore{boom}, failingLoader{failingStore{boom}}} {
		th := newClocked(t, throttle.Config{Store: store, Key: "openai/gpt"})
		d, err := th.CanStart(ctx, 1, throttle.Batch)
		require.ErrorIs(t, err, boom)
		require.Contains(t, err.Error(), `"openai/gpt"`)
		require.Equal(t, throttle.Decision{}, d, "no decision")
		require.ErrorIs(t, th.Wait(ctx, 1, throttle.Batch), boom)
		_, err = th.Admit(ctx, 1, throttle.Interactive)
		require.ErrorIs(t, err, boom)
		_, _, err = th.Headroom(ctx, throttle.Batch)
		require.ErrorIs(t, err, boom)
		_, err = th.Pause(ctx)
		require.ErrorIs(t, err, boom)
		require.ErrorIs(t, th.ObserveSnapshot(ctx, at(0), at(0), quotaheaders.Tokens, snap(1, 1, 0)), boom)
		require.ErrorIs(t, th.ObserveResponse(ctx, at(0), at(0), &http.Response{StatusCode: 200}), boom)
		require.ErrorIs(t, th.TooManyRequests(ctx, at(0), at(0), 0), boom)
		require.ErrorIs(t, th.NotSent(ctx, at(0), 1), boom)
	}
}

// openAIHeaders is what OpenAI sends: x-ratelimit-* with Go durations.
func openAIHeaders(limitReq, remainingReq int64, resetReq string, limitTok, remainingTok int64, resetTok string) http.Header {
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", itoa(limitReq))
	h.Set("x-ratelimit-remaining-requests", itoa(remainingReq))
	h.Set("x-ratelimit-reset-requests", resetReq)
	h.Set("x-ratelimit-limit-tokens", itoa(limitTok))
	h.Set("x-ratelimit-remaining-tokens", itoa(remainingTok))
	h.Set("x-ratelimit-reset-tokens", resetTok)
	return h
}

// These tests read real headers through quotaheaders.Parse.

func TestObserveResponseReadsBothUnits(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2})
	resp := &http.Response{StatusCode: http.StatusOK, Header: openAIHeaders(10, 3, "20s", 100_000, 90_000, "6m0s")}
	th.observeResponse(at(0), at(time.Second), resp)
	// Requests: 3 left, 2 reserved: one batch call, then wait for the reset.
	require.Equal(t, throttle.Decision{OK: true, At: at(2 * time.Second)}, th.canStartAt(at(2*time.Second), 1000, throttle.Batch))
	require.Equal(t, throttle.Decision{Wait: 19 * time.Second}, th.canStartAt(at(2*time.Second), 1000, throttle.Batch))
	// Tokens: limit 100000 less a reserve of 20000.
	d := th.canStartAt(at(2*time.Second), 80_001, throttle.Batch)
	require.True(t, d.Never)
	require.False(t, d.OK)
	require.Equal(t, &throttle.NeverError{Priority: throttle.Batch, Unit: quotaheaders.Tokens, Cost: 80_001, Limit: 100_000, Reserve: 20_000}, d.Why)
	require.Equal(t, throttle.Decision{OK: true, At: at(2*time.Second + time.Microsecond)}, th.canStartAt(at(2*time.Second), 89_000, throttle.Interactive))
	require.Equal(t, throttle.Decision{Wait: 6*time.Minute - time.Second}, th.canStartAt(at(2*time.Second), 1, throttle.Interactive))
}

// Anthropic's limits per side of a call (input, output) are not a limit on
// a call's whole cost: a 9,000-token call, mostly input, can start with
// 21,000 input and 8,000 output tokens left; tokens-* counts both sides.
// Once one side is used up, nothing starts before its reset.
func TestObserveResponseComparesCostWithWholeCallQuota(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{})
	h := http.Header{}
	h.Set("anthropic-ratelimit-input-tokens-limit", "30000")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "21000")
	h.Set("anthropic-ratelimit-output-tokens-limit", "8000")
	h.Set("anthropic-ratelimit-output-tokens-remaining", "8000")
	h.Set("anthropic-ratelimit-tokens-limit", "38000")
	h.Set("anthropic-ratelimit-tokens-remaining", "29000")
	th.observeResponse(at(0), at(time.Second), &http.Response{StatusCode: http.StatusOK, Header: h})
	require.Equal(t, throttle.Decision{OK: true, At: at(time.Second)}, th.canStartAt(at(time.Second), 9000, throttle.Batch))

	h.Set("anthropic-ratelimit-input-tokens-remaining", "0")
	h.Set("anthropic-ratelimit-input-tokens-reset", at(13*time.Second).Format(time.RFC3339))
	th.observeResponse(at(time.Second), at(2*time.Second), &http.Response{StatusCode: http.StatusOK, Header: h})
	d := th.canStartAt(at(2*time.Second), 9000, throttle.Batch)
	require.False(t, d.OK)
	require.False(t, d.Never, "%v", d.Why)
	require.Equal(t, 11*time.Second, d.Wait, "until the input side resets")
}

// Refusals without a 429 response of calls sent together are one episode:
// the pause does not double for each, as it does for refusals of calls sent
// after the pause began.
func TestTooManyRequestsOfCallsSentTogetherIsOneEpisode(t *testing.T) {
	t.Parallel()
	const pause = time.Second
	th := newClocked(t, throttle.Config{DefaultPause: pause})
	for i := range 6 {
		sent := at(time.Duration(i) * 10 * time.Millisecond)
		require.NoError(t, th.TooManyRequests(context.Background(), sent, sent.Add(100*time.Millisecond), 0))
	}
	first := th.canStartAt(at(150*time.Millisecond), 1, throttle.Interactive) // the last refusal's arrival
	require.Equal(t, pause, first.Wait, "six calls sent before the pause began: one episode")

	// A call sent after the pause began and refused again doubles it.
	sent := at(100*time.Millisecond + pause)
	require.NoError(t, th.TooManyRequests(context.Background(), sent, sent.Add(100*time.Millisecond), 0))
	require.Equal(t, 2*pause, th.canStartAt(sent.Add(100*time.Millisecond), 1, throttle.Interactive).Wait)
}

func TestPauseSaysWhatIsLeftOfThePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, store := range []throttle.Store{nil, &throttle.MemoryStore{}} {
		th := newClocked(t, throttle.Config{DefaultPause: 3 * time.Second, Store: store, Key: "k"})
		pauseAt := func(now time.Time) time.Duration {
			t.Helper()
			th.clock.Set(now)
			d, err := th.Pause(ctx)
			require.NoError(t, err)
			return d
		}
		require.Zero(t, pauseAt(at(0)), "no 429 yet")
		th.tooMany(at(time.Second), 0)
		require.Equal(t, 3*time.Second, pauseAt(at(time.Second)), "the default pause")
		require.Equal(t, time.Second, pauseAt(at(3*time.Second)))
		require.Zero(t, pauseAt(at(5*time.Second)), "over")
		require.Equal(t, throttle.Decision{OK: true, At: at(5 * time.Second)}, th.canStartAt(at(5*time.Second), 1, throttle.Batch),
			"Pause counts nothing")
	}
}

func TestObserveResponseTooManyRequestsRetryAfter(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{})
	h := openAIHeaders(500, 0, "17.5s", 30_000, 29_100, "1.8s")
	h.Set("Retry-After", "2")
	th.observeResponse(at(0), at(time.Second), &http.Response{StatusCode: http.StatusTooManyRequests, Header: h})
	// Every start stops for Retry-After, interactive included ...
	require.Equal(t, throttle.Decision{Wait: 2 * time.Second}, th.canStartAt(at(time.Second), 1, throttle.Interactive))
	require.Equal(t, throttle.Decision{Wait: time.Second}, th.canStartAt(at(2*time.Second), 1, throttle.Batch))
	// ... and then the headers say no request is left until 17.5s after
	// the response.
	require.Equal(t, throttle.Decision{Wait: 15500 * time.Millisecond}, th.canStartAt(at(3*time.Second), 1, throttle.Interactive))
	require.Equal(t, throttle.Decision{OK: true, At: at(18500 * time.Millisecond)}, th.canStartAt(at(18500*time.Millisecond), 1, throttle.Interactive))
}

func TestObserveResponseWithoutQuotaHeaders(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{})
	th.observeResponse(at(0), at(time.Second), nil)
	th.observeResponse(at(0), at(time.Second), &http.Response{StatusCode: http.StatusOK, Header: http.Header{}})
	require.Equal(t, throttle.Decision{OK: true, At: at(time.Second)}, th.canStartAt(at(time.Second), 1_000_000, throttle.Batch))
	// A 429 without Retry-After: the default pause.
	th.observeResponse(at(time.Second), at(2*time.Second), &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}})
	require.Equal(t, throttle.Decision{Wait: time.Second}, th.canStartAt(at(2*time.Second), 1, throttle.Interactive))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A limit of 0 (a Mistral 429 says so) is a quota used up, not one nothing
// fits: calls wait for it, and a probe goes out to learn more, rather than
// every call failing for good.
func TestZeroLimitWaitsRatherThanNever(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("x-ratelimit-limit-req-minute", "0")
	h.Set("x-ratelimit-remaining-req-minute", "0")
	th.observeResponse(t0, t0, &http.Response{StatusCode: http.StatusTooManyRequests, Header: h})
	later := t0.Add(time.Hour)
	for _, p := range []throttle.Priority{throttle.Interactive, throttle.Batch} {
		d := th.canStartAt(later, 1, p)
		require.False(t, d.Never, "priority %v", p)
	}
	// After a probe interval, one call goes out to learn more.
	require.True(t, th.canStartAt(later.Add(2*time.Second), 1, throttle.Batch).OK)
}

// After a window rolls over, and batch calls have taken what the new one
// leaves them before any of its responses came back, the throttle knows no
// reset for the new window: it probes, one call to learn more, and then
// waits for that call's answer. It used to let one call through every
// ProbeInterval however short it was, into the reserve and past the limit.
func TestProbesAfterARolloverWaitForTheirAnswer(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2}) // the window model
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	th.observe(t0, t0, quotaheaders.Tokens,
		quotaheaders.Snapshot{Remaining: 600_000, Limit: 600_000, HasLimit: true, Reset: time.Minute, HasReset: true})
	var admitted int64
	for range 9 { // the new window: 450,000 of the 480,000 batch may use
		require.True(t, th.canStartAt(at(61*time.Second), 50_000, throttle.Batch).OK)
		admitted += 50_000
	}
	for d := 61 * time.Second; d < 70*time.Second; d += 10 * time.Millisecond {
		if th.canStartAt(at(d), 50_000, throttle.Batch).OK {
			admitted += 50_000
		}
	}
	require.Equal(t, int64(500_000), admitted, "one probe beyond what batch may use, no more")
}

// Interactive calls fit the reserve, so one that fits says nothing of the
// batch shortage: it must not end the wait for a batch probe's answer. Mixed
// in at any pace, they leave batch work at its share plus one probe.
func TestInteractiveCallsDoNotEndTheWaitForAProbe(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, every := range []time.Duration{1500 * time.Millisecond, 2 * time.Second, 3 * time.Second} {
		th := newClocked(t, throttle.Config{Reserve: 0.2})
		th.observe(t0, t0, quotaheaders.Tokens,
			quotaheaders.Snapshot{Remaining: 600_000, Limit: 600_000, HasLimit: true, Reset: time.Minute, HasReset: true})
		var batch, interactive int64
		for d := 61 * time.Second; d < 75*time.Second; d += 10 * time.Millisecond {
			if d >= 63*time.Second && (d-63*time.Second)%every == 0 && th.canStartAt(at(d), 100, throttle.Interactive).OK {
				interactive += 100
			}
			if th.canStartAt(at(d), 50_000, throttle.Batch).OK {
				batch += 50_000
			}
		}
		require.Equal(t, int64(500_000), batch, "interactive every %v: batch gets its share and one probe", every)
		require.Positive(t, interactive, "interactive every %v", every)
	}
}

// A provider that never says when its quota refills (minute windows named,
// no reset sent): batch work short only of the reserve probes once a
// MaxPause, not once a ProbeInterval, so it does not spend the reserve call
// by call.
func TestProbesIntoTheReserveOfAQuotaWithoutResetsAreRare(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2})
	remaining := 20 // of 100: exactly the reserve
	resp := func() *http.Response {
		h := http.Header{}
		h.Set("x-ratelimit-limit-req-minute", "100")
		h.Set("x-ratelimit-remaining-req-minute", strconv.Itoa(remaining))
		return &http.Response{StatusCode: http.StatusOK, Header: h}
	}
	th.observeResponse(at(0), at(0), resp())
	batch := 0
	for ms := 0; ms < 60_000 && remaining > 0; ms += 100 {
		now := at(time.Duration(ms) * time.Millisecond)
		if d := th.canStartAt(now, 1, throttle.Batch); d.OK {
			batch++
			remaining--
			th.observeResponse(d.At, now.Add(50*time.Millisecond), resp())
		}
	}
	require.LessOrEqual(t, batch, 1, "a minute: at most one probe into the reserve")
	require.True(t, th.canStartAt(at(time.Minute), 1, throttle.Interactive).OK, "the reserve is there for interactive calls")
}

// A token bucket whose limit is near the largest int64 reports that much
// headroom when full, not none (float64 rounds the level past int64's range).
func TestHugeBucketHasHeadroom(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Refill: throttle.TokenBucket})
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "9223372036854775807")
	h.Set("x-ratelimit-remaining-tokens", "0")
	h.Set("x-ratelimit-reset-tokens", "1m")
	th.observeResponse(at(0), at(0), &http.Response{StatusCode: http.StatusOK, Header: h})
	_, tokens := th.headroomAt(at(2*time.Minute), throttle.Batch)
	require.Greater(t, tokens, int64(math.MaxInt64/2))
}

// The reserve is ceil(limit × Reserve) in exact arithmetic: 100 × 0.07 is 7,
// though float64 makes it 7.000000000000001.
func TestReserveIsNotRoundedUpByFloatError(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.07})
	th.observe(at(0), at(0), quotaheaders.Requests, quotaheaders.Snapshot{Remaining: 100, Limit: 100, HasLimit: true})
	calls, _ := th.headroomAt(at(time.Second), throttle.Batch)
	require.Equal(t, int64(93), calls)
}

// A call admitted and then not sent (its job went to another worker) is
// taken back: it no longer counts, and if it was a probe, the next probe
// need not wait for an answer that will never come.
func TestNotSentTakesTheAdmissionBack(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{ProbeInterval: time.Second})
	ctx := context.Background()
	th.observe(at(0), at(0), quotaheaders.Tokens, quotaheaders.Snapshot{Remaining: 100, Limit: 1000, HasLimit: true})
	d := th.canStartAt(at(time.Second), 60, throttle.Batch)
	require.True(t, d.OK)
	require.False(t, th.canStartAt(at(time.Second), 60, throttle.Batch).OK, "40 left")
	require.NoError(t, th.NotSent(ctx, d.At, 60))
	require.True(t, th.canStartAt(at(time.Second), 60, throttle.Batch).OK, "100 left again")

	// Nothing left now (40): the probe, taken back, does not hold the next.
	require.False(t, th.canStartAt(at(2*time.Second), 60, throttle.Batch).OK)
	probe := th.canStartAt(at(3*time.Second), 60, throttle.Batch)
	require.True(t, probe.OK, "the probe")
	require.False(t, th.canStartAt(at(10*time.Second), 60, throttle.Batch).OK, "waits for its answer")
	require.NoError(t, th.NotSent(ctx, probe.At, 60))
	require.True(t, th.canStartAt(at(10*time.Second), 60, throttle.Batch).OK, "the next probe")
}
