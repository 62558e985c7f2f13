package throttle_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

func TestHeadroom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	th, err := throttle.New(throttle.Config{Reserve: 0.2})
	require.NoError(t, err)

	calls, tokens, err := th.HeadroomAt(ctx, t0, throttle.Batch)
	require.NoError(t, err)
	require.Equal(t, int64(math.MaxInt64), calls, "nothing known: no limit")
	require.Equal(t, int64(math.MaxInt64), tokens)

	th.ObserveSnapshotAt(t0, t0, quotaheaders.Requests, snap(50, 100, time.Minute))
	th.ObserveSnapshotAt(t0, t0, quotaheaders.Tokens, snap(9000, 10000, time.Minute))
	calls, tokens, err = th.HeadroomAt(ctx, at(time.Second), throttle.Batch)
	require.NoError(t, err)
	require.Equal(t, int64(50-20), calls, "batch leaves the reserve")
	require.Equal(t, int64(9000-2000), tokens)
	calls, tokens, err = th.HeadroomAt(ctx, at(time.Second), throttle.Interactive)
	require.NoError(t, err)
	require.Equal(t, int64(50), calls)
	require.Equal(t, int64(9000), tokens)

	// Headroom counts nothing; admissions reduce it.
	require.True(t, th.CanStartAt(at(time.Second), 3000, throttle.Batch).OK)
	_, tokens, err = th.HeadroomAt(ctx, at(2*time.Second), throttle.Batch)
	require.NoError(t, err)
	require.Equal(t, int64(4000), tokens)
	require.True(t, th.CanStartAt(at(2*time.Second), 4000, throttle.Batch).OK)
	require.False(t, th.CanStartAt(at(2*time.Second), 1, throttle.Batch).OK)
	_, tokens, err = th.HeadroomAt(ctx, at(2*time.Second), throttle.Batch)
	require.NoError(t, err)
	require.Zero(t, tokens)

	// Nothing while paused, interactive included.
	th.TooManyRequestsAt(at(3*time.Second), 10*time.Second)
	calls, tokens, err = th.HeadroomAt(ctx, at(4*time.Second), throttle.Interactive)
	require.NoError(t, err)
	require.Zero(t, calls)
	require.Zero(t, tokens)
}
