package provider

import (
	"math/bits"
	"strconv"
	"time"
)

// Refill is how the simulated provider refills a quota.
type Refill int

const (
	// FixedWindow gives the whole limit back at each window boundary (the
	// instants that are whole multiples of Window since the zero time, so a
	// one-minute window starts on the minute), and nothing in between. The
	// reset it reports is the time to the next boundary. The default, as in
	// package throttle.
	FixedWindow Refill = iota
	// TokenBucket refills continuously, the whole limit over one Window: a
	// limit of 60 a minute gives one back every second, up to 60. The reset
	// it reports is when the bucket will be full again. OpenAI documents its
	// limits this way.
	TokenBucket
)

// String returns the constant's name.
func (r Refill) String() string {
	switch r {
	case FixedWindow:
		return "FixedWindow"
	case TokenBucket:
		return "TokenBucket"
	}
	return "Refill(" + strconv.Itoa(int(r)) + ")"
}

// meter is one unit's quota (requests or tokens). Callers bring it to now
// with refill before asking it anything.
type meter interface {
	refill(now time.Time)
	limit() int64
	remaining() int64
	take(n int64)
	// resetIn is how long from now until the whole limit is back.
	resetIn(now time.Time) time.Duration
	// waitFor is how long from now until n fit; 0 if they fit now. n must
	// not exceed the limit.
	waitFor(now time.Time, n int64) time.Duration
	// allowed is the most this quota lets through over [from, to], starting
	// with the whole limit available.
	allowed(from, to time.Time) int64
}

func newMeter(r Refill, limit int64, window time.Duration) meter {
	if r == TokenBucket {
		return &bucket{max: limit, size: window, avail: limit}
	}
	return &fixedWindow{max: limit, size: window}
}

// bucket is a token bucket that refills max over size, continuously. Its
// level is kept exactly: avail whole units plus frac/size of one, so that
// refills computed at any instants add up to what one refill over the whole
// time would give.
type bucket struct {
	max   int64
	size  time.Duration
	avail int64
	frac  uint64 // < size; zero when full
	last  time.Time
}

func (b *bucket) limit() int64     { return b.max }
func (b *bucket) remaining() int64 { return b.avail }
func (b *bucket) take(n int64)     { b.avail -= n }

func (b *bucket) refill(now time.Time) {
	e := now.Sub(b.last)
	if e <= 0 {
		return // a clock that went back refills nothing
	}
	b.last = now
	if e >= b.size {
		b.avail, b.frac = b.max, 0
		return
	}
	// e·max + frac < size·(max+1), so the quotient fits and Div64 cannot
	// overflow.
	hi, lo := bits.Mul64(uint64(e), uint64(b.max))
	lo, carry := bits.Add64(lo, b.frac, 0)
	q, r := bits.Div64(hi+carry, lo, uint64(b.size))
	if int64(q) >= b.max-b.avail {
		b.avail, b.frac = b.max, 0
		return
	}
	b.avail += int64(q)
	b.frac = r
}

// until is how long the bucket takes to hold target units (≤ max): the
// missing units less the fraction already refilled, at max per size,
// rounded up so that a refill after that long always covers them.
func (b *bucket) until(target int64) time.Duration {
	need := target - b.avail
	if need <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(need), uint64(b.size))
	lo, borrow := bits.Sub64(lo, b.frac, 0)
	q, r := bits.Div64(hi-borrow, lo, uint64(b.max))
	if r != 0 {
		q++
	}
	return time.Duration(q)
}

func (b *bucket) resetIn(time.Time) time.Duration            { return b.until(b.max) }
func (b *bucket) waitFor(_ time.Time, n int64) time.Duration { return b.until(n) }

func (b *bucket) allowed(from, to time.Time) int64 {
	if to.Before(from) {
		return 0
	}
	refilled := mulDiv(b.max, to.Sub(from), b.size)
	if refilled > 1<<63-1-b.max {
		return 1<<63 - 1
	}
	return b.max + refilled
}

// fixedWindow lets max through in each window of size.
type fixedWindow struct {
	max   int64
	size  time.Duration
	used  int64
	start time.Time
}

func (w *fixedWindow) limit() int64     { return w.max }
func (w *fixedWindow) remaining() int64 { return w.max - w.used }
func (w *fixedWindow) take(n int64)     { w.used += n }

func (w *fixedWindow) refill(now time.Time) {
	if s := now.Truncate(w.size); s.After(w.start) {
		w.start, w.used = s, 0
	}
}

func (w *fixedWindow) resetIn(now time.Time) time.Duration {
	return max(0, w.start.Add(w.size).Sub(now))
}

func (w *fixedWindow) waitFor(now time.Time, n int64) time.Duration {
	if w.used+n <= w.max {
		return 0
	}
	return w.resetIn(now)
}

func (w *fixedWindow) allowed(from, to time.Time) int64 {
	if to.Before(from) {
		return 0
	}
	windows := int64(to.Truncate(w.size).Sub(from.Truncate(w.size))/w.size) + 1
	hi, lo := bits.Mul64(uint64(windows), uint64(w.max))
	if hi != 0 || lo > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(lo)
}

// mulDiv is floor(n·d/size) for non-negative arguments, saturating.
func mulDiv(n int64, d, size time.Duration) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(d))
	if hi >= uint64(size) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(size))
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}
