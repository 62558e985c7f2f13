package throttle_test

import (
	"context"
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
	ctx := context.Background()
	th, err := throttle.New(throttle.Config{Reserve: 0.2})
	require.NoError(t, err)
	batchTokens := func(now time.Time) int64 {
		t.Helper()
		_, tokens, err := th.HeadroomAt(ctx, now, throttle.Batch)
		require.NoError(t, err)
		return tokens
	}

	th.ObserveSnapshotAt(t0, t0, quotaheaders.Tokens, snap(10000, 10000, time.Minute))
	require.Equal(t, int64(8000), batchTokens(at(time.Second)))
	require.True(t, th.CanStartAt(at(time.Second), 500, throttle.Interactive).OK)
	// 9500 left, of which 1500 still reserved.
	require.Equal(t, int64(8000), batchTokens(at(2*time.Second)))
	require.True(t, th.CanStartAt(at(2*time.Second), 8000, throttle.Batch).OK)
	require.Equal(t, throttle.Decision{Wait: 58 * time.Second}, th.CanStartAt(at(2*time.Second), 1, throttle.Batch))
	// Interactive calls still get the whole reserve in this window.
	require.True(t, th.CanStartAt(at(3*time.Second), 1500, throttle.Interactive).OK)
	require.False(t, th.CanStartAt(at(3*time.Second), 1, throttle.Interactive).OK)

	// The window rolled over: the old window's interactive use is forgotten,
	// and a call past the reset counts toward the new one.
	require.Equal(t, int64(8000), batchTokens(at(61*time.Second)))
	require.True(t, th.CanStartAt(at(61*time.Second), 300, throttle.Interactive).OK)
	require.Equal(t, int64(8000), batchTokens(at(61*time.Second)))
	// ... also once the new window is observed.
	th.ObserveSnapshotAt(at(61*time.Second), at(61*time.Second), quotaheaders.Tokens, snap(9700, 10000, 59*time.Second))
	require.Equal(t, int64(8000), batchTokens(at(62*time.Second)))
	require.True(t, th.CanStartAt(at(62*time.Second), 8000, throttle.Batch).OK)
	require.False(t, th.CanStartAt(at(62*time.Second), 1, throttle.Batch).OK)
	require.True(t, th.CanStartAt(at(63*time.Second), 1700, throttle.Interactive).OK)
	require.False(t, th.CanStartAt(at(63*time.Second), 1, throttle.Interactive).OK)

	// The window after: nothing taken yet, the whole reserve is kept.
	require.Equal(t, int64(8000), batchTokens(at(121*time.Second)))
}

// A token bucket has no windows: the reserve stays whole.
func TestBucketReserveIgnoresInteractiveUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	th, err := throttle.New(throttle.Config{Reserve: 0.2, Refill: throttle.TokenBucket})
	require.NoError(t, err)
	th.ObserveSnapshotAt(t0, t0, quotaheaders.Tokens, snap(9999, 10000, time.Minute))
	require.True(t, th.CanStartAt(t0, 500, throttle.Interactive).OK)
	_, tokens, err := th.HeadroomAt(ctx, t0, throttle.Batch)
	require.NoError(t, err)
	require.Equal(t, int64(9999-500-2000), tokens)
}
