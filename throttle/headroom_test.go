package throttle_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

func TestHeadroom(t *testing.T) {
	t.Parallel()
	th := newClocked(t, throttle.Config{Reserve: 0.2})

	calls, tokens := th.headroomAt(t0, throttle.Batch)
	require.Equal(t, int64(math.MaxInt64), calls, "nothing known: no limit")
	require.Equal(t, int64(math.MaxInt64), tokens)

	th.observe(t0, t0, quotaheaders.Requests, snap(50, 100, time.Minute))
	th.observe(t0, t0, quotaheaders.Tokens, snap(9000, 10000, time.Minute))
	calls, tokens = th.headroomAt(at(time.Second), throttle.Batch)
	require.Equal(t, int64(50-20), calls, "batch leaves the reserve")
	require.Equal(t, int64(9000-2000), tokens)
	calls, tokens = th.headroomAt(at(time.Second), throttle.Interactive)
	require.Equal(t, int64(50), calls)
	require.Equal(t, int64(9000), tokens)

	// Headroom counts nothing; admissions reduce it.
	require.True(t, th.canStartAt(at(time.Second), 3000, throttle.Batch).OK)
	_, tokens = th.headroomAt(at(2*time.Second), throttle.Batch)
	require.Equal(t, int64(4000), tokens)
	require.True(t, th.canStartAt(at(2*time.Second), 4000, throttle.Batch).OK)
	require.False(t, th.canStartAt(at(2*time.Second), 1, throttle.Batch).OK)
	_, tokens = th.headroomAt(at(2*time.Second), throttle.Batch)
	require.Zero(t, tokens)

	// Nothing while paused, interactive included.
	th.tooMany(at(3*time.Second), 10*time.Second)
	calls, tokens = th.headroomAt(at(4*time.Second), throttle.Interactive)
	require.Zero(t, calls)
	require.Zero(t, tokens)
}
