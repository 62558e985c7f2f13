package throttle_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// In a window, what interactive calls already took of it counts toward the
// reserve: batch calls keep back only the rest, and interactive calls can
// still use the whole reserve in each window.
func TestWindowReserveCountsInteractiveUse(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2})
	batchTokens := func(now time.Time) int64 {
		t.Helper()
		_, tokens := th.headroomAt(now, throttle.Batch)
		return tokens
	}

	th.observe(t0, t0, quotaheaders.Tokens, snap(10000, 10000, time.Minute))
	require.Equal(t, int64(8000), batchTokens(at(time.Second)))
	require.True(t, th.canStartAt(at(time.Second), 500, throttle.Interactive).OK)
	// 9500 left, of which 1500 still reserved.
	require.Equal(t, int64(8000), batchTokens(at(2*time.Second)))
	require.True(t, th.canStartAt(at(2*time.Second), 8000, throttle.Batch).OK)
	require.Equal(t, throttle.Decision{Wait: 58 * time.Second}, th.canStartAt(at(2*time.Second), 1, throttle.Batch))
	// Interactive calls still get the whole reserve in this window.
	require.True(t, th.canStartAt(at(3*time.Second), 1500, throttle.Interactive).OK)
	require.False(t, th.canStartAt(at(3*time.Second), 1, throttle.Interactive).OK)

	// The window rolled over: the old window's interactive use is forgotten,
	// and a call past the reset counts toward the new one.
	require.Equal(t, int64(8000), batchTokens(at(61*time.Second)))
	require.True(t, th.canStartAt(at(61*time.Second), 300, throttle.Interactive).OK)
	require.Equal(t, int64(8000), batchTokens(at(61*time.Second)))
	// Once the new window is observed, calls credited past the old reset
	// are forgotten (they might belong to a window in between): the whole
	// reserve is kept back again until interactive calls are counted in it.
	th.observe(at(61*time.Second), at(61*time.Second), quotaheaders.Tokens, snap(9700, 10000, 59*time.Second))
	require.Equal(t, int64(7700), batchTokens(at(62*time.Second)))
	require.True(t, th.canStartAt(at(62*time.Second), 500, throttle.Interactive).OK)
	require.Equal(t, int64(7700), batchTokens(at(62*time.Second)), "9200 left, of which 1500 still reserved")
	require.True(t, th.canStartAt(at(62*time.Second), 7700, throttle.Batch).OK)
	require.False(t, th.canStartAt(at(62*time.Second), 1, throttle.Batch).OK)
	require.True(t, th.canStartAt(at(63*time.Second), 1500, throttle.Interactive).OK)
	require.False(t, th.canStartAt(at(63*time.Second), 1, throttle.Interactive).OK)

	// The window after: nothing taken yet, the whole reserve is kept.
	require.Equal(t, int64(8000), batchTokens(at(121*time.Second)))
}

// A token bucket has no windows: the reserve stays whole.
func TestBucketReserveIgnoresInteractiveUse(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2, Refill: throttle.TokenBucket})
	th.observe(t0, t0, quotaheaders.Tokens, snap(9999, 10000, time.Minute))
	require.True(t, th.canStartAt(t0, 500, throttle.Interactive).OK)
	_, tokens := th.headroomAt(t0, throttle.Batch)
	require.Equal(t, int64(9999-500-2000), tokens)
}

// Interactive use counted in one window never lowers a later window's
// reserve: here an interactive call lands in window 2 and no response of
// window 2 is kept (it failed, or streams past a batch call's), and window 3
// still keeps its whole reserve for interactive calls.
func TestInteractiveCreditDoesNotLeakIntoALaterWindow(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2}) // fixed window

	// Window 1: [.., t0+60s).
	th.observe(t0, t0, quotaheaders.Tokens, snap(10000, 10000, time.Minute))
	// Window 2 (t0+60s..t0+120s): one interactive call of 1500 tokens; its
	// response never updates the state (it failed, or is still streaming).
	require.True(t, th.canStartAt(at(61*time.Second), 1500, throttle.Interactive).OK)

	// Window 3 (t0+120s..t0+180s): a batch response reports a fresh window,
	// nothing used of it yet.
	th.observe(at(125*time.Second), at(125*time.Second), quotaheaders.Tokens,
		snap(10000, 10000, 55*time.Second))

	_, tokens := th.headroomAt(at(126*time.Second), throttle.Batch)
	require.Equal(t, int64(8000), tokens,
		"window 3 is untouched: batch work may use the limit less the whole reserve (2000); "+
			"the 1500 interactive tokens of window 2 were counted against window 3's reserve")
	// And so an interactive caller in window 3 finds only part of its reserve
	// once batch work took its headroom.
	require.True(t, th.canStartAt(at(127*time.Second), tokens, throttle.Batch).OK)
	require.True(t, th.canStartAt(at(128*time.Second), 2000, throttle.Interactive).OK,
		"the interactive reserve of window 3 was given to batch work")
}

// A bucket that refills so slowly that the wait for a large call is longer
// than a time.Duration holds says to wait as long as one can, not a
// microsecond (the overflowed conversion's negative wait, rounded up), which
// would have callers ask again at once, without end.
func TestBucketWaitBeyondADurationIsTheLongest(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Refill: throttle.TokenBucket})
	// About 1 token a day: 1,000,000 of 1,000,000 less 2, full in 24h.
	th.observe(t0, t0, quotaheaders.Tokens, snap(999_998, 1_000_000, 24*time.Hour))
	require.True(t, th.canStartAt(t0, 990_000, throttle.Batch).OK)
	d := th.canStartAt(t0, 200_000, throttle.Batch)
	require.False(t, d.OK)
	require.Equal(t, time.Duration(math.MaxInt64), d.Wait)
}
