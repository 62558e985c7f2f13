package throttle_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// TestConcurrentUse hammers four Throttles on one store (a fleet) from many
// goroutines at once, mixing decisions with observations that must not
// change them, and checks that exactly what the quota allows was admitted.
// Run it with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &throttle.MemoryStore{}
	// Each process of the fleet reads a clock of its own, standing still.
	fleet := make([]*throttle.Throttle, 4)
	for i := range fleet {
		now := at(time.Second + time.Duration(i)*time.Microsecond)
		th, err := throttle.New(throttle.Config{Reserve: 0.2, Store: store, Key: "openai/gpt", Now: func() time.Time { return now }})
		require.NoError(t, err)
		fleet[i] = th
	}
	require.NoError(t, fleet[0].ObserveSnapshot(ctx, at(0), at(0), quotaheaders.Tokens, snap(10_000, 10_000, time.Hour)))
	require.NoError(t, fleet[0].ObserveSnapshot(ctx, at(0), at(0), quotaheaders.Requests, snap(5000, 5000, time.Hour)))

	const cost = 7
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		th := fleet[g%len(fleet)]
		wg.Go(func() {
			for {
				d, err := th.CanStart(ctx, cost, throttle.Batch)
				require.NoError(t, err)
				if !d.OK {
					require.Equal(t, time.Hour-time.Second-time.Duration(g%len(fleet))*time.Microsecond, d.Wait)
					return
				}
				admitted.Add(cost)
			}
		})
		wg.Go(func() {
			// Stale responses (sent before the kept one), a 429 long over,
			// and a Wait that gives up at once: none change what is left.
			require.NoError(t, th.ObserveSnapshot(ctx, at(-time.Second), at(time.Second), quotaheaders.Tokens, snap(10_000, 10_000, time.Hour)))
			require.NoError(t, th.TooManyRequests(ctx, at(-time.Hour), at(-time.Hour), time.Second))
			done, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, th.Wait(done, cost, throttle.Batch), context.Canceled)
		})
	}
	// A zero Throttle initializes itself once, from many goroutines.
	var zero throttle.Throttle
	for range 8 {
		wg.Go(func() {
			d, err := zero.CanStart(ctx, 1, throttle.Batch)
			require.NoError(t, err)
			require.True(t, d.OK)
		})
	}
	wg.Wait()
	// 10000 less a reserve of 2000, in calls of 7.
	require.Equal(t, int64(8000/cost*cost), admitted.Load())
}
