package throttle_test

import (
	"container/heap"
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// The simulation: a provider (a token bucket or a fixed window) that answers
// with real rate-limit headers, and a fleet of batch and interactive callers,
// each with its own Throttle on one shared store, running as goroutines on a
// fake clock for ten simulated minutes. Calls take 0.5–8s, so responses come
// back out of order.

type simParams struct {
	refill           throttle.Refill // the provider's, and the throttles'
	headers          bool            // observe through ObserveResponse, else snapshots
	duration, period time.Duration
	requests, tokens int64 // limits per period
	reserve          float64
	batch            int // batch callers
	interactive      int // interactive callers
	seed             uint64
}

func defaultSim(refill throttle.Refill, headers bool) simParams {
	return simParams{
		refill: refill, headers: headers,
		duration: 10 * time.Minute, period: time.Minute,
		requests: 600, tokens: 600_000, reserve: 0.2,
		batch: 40, interactive: 2, seed: 1,
	}
}

type simResult struct {
	batchTokens, interactiveTokens int64
	batchCalls, interactiveCalls   int
	batch429, interactive429       int
	interactiveWaits               int // interactive calls not let through at once
	interactiveWaitsWithRoom       int // ... while the reserve had room for them
	allowed                        float64
}

// utilization is the share of what batch may use that it did use: for a
// window, the limit less the reserve in each window; for a bucket, the bucket
// less the reserve plus its refill, less what interactive calls took.
func (r simResult) utilization() float64 { return float64(r.batchTokens) / r.allowed }

func simulate(tb testing.TB, sp simParams) simResult {
	tb.Helper()
	start := t0
	end := start.Add(sp.duration)
	clock := newSimClock(start)
	var prov simProvider
	if sp.refill == throttle.TokenBucket {
		prov = newBucketProvider(start, sp)
	} else {
		prov = &windowProvider{start: start, period: sp.period, limit: [2]int64{sp.requests, sp.tokens}}
	}
	store := &throttle.MemoryStore{}
	newThrottle := func(rng *rand.Rand) *throttle.Throttle {
		th, err := throttle.New(throttle.Config{Reserve: sp.reserve, Refill: sp.refill, Store: store, Key: "sim", Now: clock.Now})
		if err != nil {
			tb.Fatal(err)
		}
		// Callers of a fleet do not wake in the same microsecond.
		throttle.SetTimer(th, func(d time.Duration) (<-chan time.Time, func() bool) {
			return clock.NewTimer(d + time.Duration(rng.Int64N(int64(200*time.Microsecond))))
		})
		return th
	}
	ctx := context.Background()
	observe := func(th *throttle.Throttle, sent, received time.Time, r simReply) error {
		if sp.headers {
			return th.ObserveResponse(ctx, sent, received, &http.Response{StatusCode: r.status, Header: r.header})
		}
		if r.status == http.StatusTooManyRequests {
			// As a caller without the response would: sent just now.
			if err := th.TooManyRequests(ctx, received, received, r.retryAfter); err != nil {
				return err
			}
		}
		if err := th.ObserveSnapshot(ctx, sent, received, quotaheaders.Requests, r.snaps[0]); err != nil {
			return err
		}
		return th.ObserveSnapshot(ctx, sent, received, quotaheaders.Tokens, r.snaps[1])
	}
	latency := func(rng *rand.Rand) time.Duration {
		return 500*time.Millisecond + time.Duration(rng.Int64N(int64(7500*time.Millisecond)))
	}

	var mu sync.Mutex
	var res simResult
	var interactiveLog []simCall // interactive calls, for the reserve's room
	reserveOf := func(limit int64) int64 { return int64(math.Ceil(float64(limit) * sp.reserve)) }
	// The reserve has room for an interactive call if the interactive calls
	// of the provider's window (of the last period, for a bucket) and this
	// one fit in it.
	room := func(now time.Time, cost int64) bool {
		since := now.Add(-sp.period)
		if sp.refill == throttle.Window {
			since = start.Add(now.Sub(start).Truncate(sp.period))
		}
		var calls, tokens int64
		for _, c := range interactiveLog {
			if c.at.After(since) || (sp.refill == throttle.Window && c.at.Equal(since)) {
				calls, tokens = calls+1, tokens+c.tokens
			}
		}
		return calls+1 <= reserveOf(sp.requests) && tokens+cost <= reserveOf(sp.tokens)
	}

	for i := range sp.batch {
		rng := rand.New(rand.NewPCG(sp.seed, uint64(i)))
		th := newThrottle(rng)
		clock.Go(func() {
			clock.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			for {
				cost := 500 + rng.Int64N(3001)
				sent, err := th.Admit(ctx, cost, throttle.Batch)
				if err != nil {
					tb.Error(err)
					return
				}
				if !sent.Before(end) {
					return
				}
				r := prov.call(sent, cost)
				mu.Lock()
				if r.status == http.StatusTooManyRequests {
					res.batch429++
				} else {
					res.batchCalls++
					res.batchTokens += cost
				}
				mu.Unlock()
				clock.Sleep(latency(rng))
				if err := observe(th, sent, clock.Now(), r); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	for i := range sp.interactive {
		rng := rand.New(rand.NewPCG(sp.seed, uint64(1000+i)))
		th := newThrottle(rng)
		clock.Go(func() {
			for {
				clock.Sleep(time.Duration(rng.ExpFloat64() * float64(3*time.Second)))
				now := clock.Now()
				if !now.Before(end) {
					return
				}
				cost := 500 + rng.Int64N(1501)
				d, err := th.CanStart(ctx, cost, throttle.Interactive)
				if err != nil {
					tb.Error(err)
					return
				}
				if !d.OK {
					mu.Lock()
					res.interactiveWaits++
					if room(now, cost) {
						res.interactiveWaitsWithRoom++
						tb.Logf("interactive call of %d waits %v at +%v while the reserve has room", cost, d.Wait, now.Sub(start))
					}
					mu.Unlock()
					if now, err = th.Admit(ctx, cost, throttle.Interactive); err != nil {
						tb.Error(err)
						return
					}
					if !now.Before(end) {
						return
					}
				}
				r := prov.call(now, cost)
				mu.Lock()
				if r.status == http.StatusTooManyRequests {
					res.interactive429++
				} else {
					res.interactiveCalls++
					res.interactiveTokens += cost
					interactiveLog = append(interactiveLog, simCall{now, cost})
				}
				mu.Unlock()
				clock.Sleep(latency(rng))
				if err := observe(th, now, clock.Now(), r); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	select {
	case <-clock.run():
	case <-time.After(2 * time.Minute):
		tb.Fatal("the simulation is stuck")
	}

	periods := sp.duration.Seconds() / sp.period.Seconds()
	batchShare := float64(sp.tokens - reserveOf(sp.tokens))
	if sp.refill == throttle.TokenBucket {
		// Full at the start, down to the reserve, plus the refill, less what
		// interactive calls took of it.
		res.allowed = batchShare + float64(sp.tokens)*periods - float64(res.interactiveTokens)
	} else {
		// The limit less the reserve, every window (interactive calls take
		// theirs mostly from the reserve).
		res.allowed = batchShare * periods
	}
	return res
}

type simCall struct {
	at     time.Time
	tokens int64
}

func (r simResult) log(tb testing.TB, sp simParams) {
	tb.Helper()
	mode := "snapshots"
	if sp.headers {
		mode = "headers"
	}
	tb.Logf("%v provider, %s: batch used %d of %.0f tokens allowed (%.1f%%) in %d calls; 429s: batch %d, interactive %d; "+
		"interactive: %d calls, %d tokens, %d not let through at once (%d with room in the reserve)",
		sp.refill, mode, r.batchTokens, r.allowed, 100*r.utilization(), r.batchCalls, r.batch429, r.interactive429,
		r.interactiveCalls, r.interactiveTokens, r.interactiveWaits, r.interactiveWaitsWithRoom)
}

func TestSimulation(t *testing.T) {
	t.Parallel()
	for _, refill := range []throttle.Refill{throttle.TokenBucket, throttle.Window} {
		for _, headers := range []bool{true, false} {
			sp := defaultSim(refill, headers)
			name := refill.String() + "/snapshots"
			if headers {
				name = refill.String() + "/headers"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				res := simulate(t, sp)
				res.log(t, sp)
				if u := res.utilization(); u < 0.95 {
					t.Errorf("batch used %.1f%% of what the limit less the reserve allows, want at least 95%%", 100*u)
				}
				if res.batch429+res.interactive429 > 0 {
					t.Errorf("%d 429s for batch, %d for interactive; want none", res.batch429, res.interactive429)
				}
				if res.interactiveWaitsWithRoom > 0 {
					t.Errorf("%d interactive calls waited while the reserve had room", res.interactiveWaitsWithRoom)
				}
				if res.interactiveCalls == 0 || res.batchCalls == 0 {
					t.Errorf("nothing ran: %+v", res)
				}
			})
		}
	}
}

func BenchmarkSimulation(b *testing.B) {
	for _, refill := range []throttle.Refill{throttle.TokenBucket, throttle.Window} {
		for _, headers := range []bool{true, false} {
			sp := defaultSim(refill, headers)
			name := refill.String() + "/snapshots"
			if headers {
				name = refill.String() + "/headers"
			}
			b.Run(name, func(b *testing.B) {
				var res simResult
				for i := 0; b.Loop(); i++ {
					sp.seed = uint64(i + 1)
					res = simulate(b, sp)
				}
				res.log(b, sp)
				b.ReportMetric(100*res.utilization(), "batch-util-%")
				b.ReportMetric(float64(res.batch429), "batch-429s")
				b.ReportMetric(float64(res.interactive429), "interactive-429s")
				b.ReportMetric(float64(res.interactiveWaitsWithRoom), "interactive-waits-with-room")
			})
		}
	}
}

// simReply is a provider's answer: the status and headers, and the same
// numbers as snapshots.
type simReply struct {
	status     int
	header     http.Header
	snaps      [2]quotaheaders.Snapshot // requests, tokens
	retryAfter time.Duration
}

type simProvider interface {
	call(now time.Time, tokens int64) simReply
}

// reply builds the headers OpenAI sends: x-ratelimit-{limit,remaining,reset}-
// {requests,tokens}, resets as Go durations rounded up to the millisecond,
// and Retry-After in whole seconds on a 429.
func reply(status int, limit, remaining [2]int64, reset [2]time.Duration, retryAfter time.Duration) simReply {
	r := simReply{status: status, header: http.Header{}}
	for u, name := range [2]string{"requests", "tokens"} {
		rs := reset[u].Truncate(time.Millisecond)
		if rs < reset[u] {
			rs += time.Millisecond
		}
		r.header.Set("x-ratelimit-limit-"+name, strconv.FormatInt(limit[u], 10))
		r.header.Set("x-ratelimit-remaining-"+name, strconv.FormatInt(remaining[u], 10))
		r.header.Set("x-ratelimit-reset-"+name, rs.String())
		r.snaps[u] = quotaheaders.Snapshot{Remaining: remaining[u], Limit: limit[u], HasLimit: true, Reset: rs, HasReset: true}
	}
	if status == http.StatusTooManyRequests {
		secs := int64(math.Ceil(retryAfter.Seconds()))
		r.retryAfter = time.Duration(secs) * time.Second
		r.header.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	return r
}

// bucketProvider refills each unit continuously, limit per period, and
// counts a call when it arrives (as it is sent: no network delay).
type bucketProvider struct {
	mu     sync.Mutex
	period time.Duration
	limit  [2]int64
	level  [2]float64
	last   time.Time
}

func newBucketProvider(start time.Time, sp simParams) *bucketProvider {
	p := &bucketProvider{period: sp.period, limit: [2]int64{sp.requests, sp.tokens}, last: start}
	p.level = [2]float64{float64(sp.requests), float64(sp.tokens)}
	return p
}

func (p *bucketProvider) call(now time.Time, tokens int64) simReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	rate := func(u int) float64 { return float64(p.limit[u]) / p.period.Seconds() }
	if dt := now.Sub(p.last).Seconds(); dt > 0 {
		for u := range p.level {
			p.level[u] = min(float64(p.limit[u]), p.level[u]+rate(u)*dt)
		}
		p.last = now
	}
	cost := [2]float64{1, float64(tokens)}
	status, retryAfter := http.StatusOK, time.Duration(0)
	if p.level[0] >= cost[0] && p.level[1] >= cost[1] {
		p.level[0] -= cost[0]
		p.level[1] -= cost[1]
	} else {
		status = http.StatusTooManyRequests
		for u := range p.level {
			retryAfter = max(retryAfter, time.Duration((cost[u]-p.level[u])/rate(u)*float64(time.Second)))
		}
	}
	var remaining [2]int64
	var reset [2]time.Duration
	for u := range p.level {
		remaining[u] = int64(math.Floor(p.level[u]))
		reset[u] = time.Duration((float64(p.limit[u]) - p.level[u]) / rate(u) * float64(time.Second))
	}
	return reply(status, p.limit, remaining, reset, retryAfter)
}

// windowProvider allows limit per fixed window of period, counting a call
// when it arrives.
type windowProvider struct {
	mu     sync.Mutex
	start  time.Time
	period time.Duration
	limit  [2]int64
	used   [2]int64
	window int64
}

func (p *windowProvider) call(now time.Time, tokens int64) simReply {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := int64(now.Sub(p.start) / p.period); w != p.window {
		p.window, p.used = w, [2]int64{}
	}
	untilReset := p.start.Add(time.Duration(p.window+1) * p.period).Sub(now)
	cost := [2]int64{1, tokens}
	status := http.StatusOK
	if p.used[0]+cost[0] <= p.limit[0] && p.used[1]+cost[1] <= p.limit[1] {
		p.used[0] += cost[0]
		p.used[1] += cost[1]
	} else {
		status = http.StatusTooManyRequests
	}
	remaining := [2]int64{p.limit[0] - p.used[0], p.limit[1] - p.used[1]}
	return reply(status, p.limit, remaining, [2]time.Duration{untilReset, untilReset}, untilReset)
}

// simClock is a fake clock for goroutines. Time stands still while any
// goroutine it runs is busy; when all are blocked on its timers it jumps to
// the earliest one and fires every timer due then.
type simClock struct {
	mu      sync.Mutex
	now     time.Time
	running int // goroutines not blocked on a timer; the starter counts as one
	seq     int
	timers  simTimers
	idle    chan struct{}
}

type simTimer struct {
	at    time.Time
	seq   int
	c     chan time.Time
	index int // in the heap; -1 once fired or stopped
}

func newSimClock(now time.Time) *simClock {
	return &simClock{now: now, running: 1, idle: make(chan struct{})}
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Go runs f as one of the clock's goroutines.
func (c *simClock) Go(f func()) {
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
	go func() {
		defer c.exit()
		f()
	}()
}

// run lets time move once every goroutine has been started; the channel is
// closed when all have returned.
func (c *simClock) run() <-chan struct{} {
	c.exit()
	return c.idle
}

func (c *simClock) exit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	c.advance()
}

// NewTimer counts the caller as blocked from now on: it must wait on the
// channel (or stop the timer) next.
func (c *simClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	tm := &simTimer{at: c.now.Add(max(d, 0)), seq: c.seq, c: make(chan time.Time, 1)}
	heap.Push(&c.timers, tm)
	c.running--
	c.advance()
	return tm.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if tm.index < 0 {
			return false
		}
		heap.Remove(&c.timers, tm.index)
		c.running++
		return true
	}
}

func (c *simClock) Sleep(d time.Duration) {
	ch, _ := c.NewTimer(d)
	<-ch
}

func (c *simClock) advance() {
	if c.running > 0 {
		return
	}
	if len(c.timers) == 0 {
		close(c.idle)
		return
	}
	due := c.timers[0].at
	if due.After(c.now) {
		c.now = due
	}
	for len(c.timers) > 0 && !c.timers[0].at.After(due) {
		tm := heap.Pop(&c.timers).(*simTimer)
		c.running++
		tm.c <- c.now
	}
}

type simTimers []*simTimer

func (h simTimers) Len() int { return len(h) }
func (h simTimers) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h simTimers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *simTimers) Push(x any) {
	tm := x.(*simTimer)
	tm.index = len(*h)
	*h = append(*h, tm)
}
func (h *simTimers) Pop() any {
	old := *h
	tm := old[len(old)-1]
	tm.index = -1
	*h = old[:len(old)-1]
	return tm
}
