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
	store := &throttle.MemoryStore{}
	fleet := make([]*throttle.Throttle, 4)
	for i := range fleet {
		th, err := throttle.New(throttle.Config{Reserve: 0.2, Store: store, Key: "openai/gpt"})
		require.NoError(t, err)
		fleet[i] = th
	}
	fleet[0].ObserveSnapshotAt(at(0), at(0), quotaheaders.Tokens, snap(10_000, 10_000, time.Hour))
	fleet[0].ObserveSnapshotAt(at(0), at(0), quotaheaders.Requests, snap(5000, 5000, time.Hour))

	const cost = 7
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		th := fleet[g%len(fleet)]
		wg.Go(func() {
			now := at(time.Second + time.Duration(g)*time.Microsecond)
			for {
				d := th.CanStartAt(now, cost, throttle.Batch)
				if !d.OK {
					require.Equal(t, time.Hour-now.Sub(t0), d.Wait)
					return
				}
				admitted.Add(cost)
			}
		})
		wg.Go(func() {
			// Stale responses (sent before the kept one), a 429 long over,
			// and a Wait that gives up at once: none change what is left.
			th.ObserveSnapshotAt(at(-time.Second), at(time.Second), quotaheaders.Tokens, snap(10_000, 10_000, time.Hour))
			th.TooManyRequestsAt(at(-time.Hour), time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = th.Wait(ctx, cost, throttle.Batch)
		})
	}
	// A zero Throttle initializes itself once, from many goroutines.
	var zero throttle.Throttle
	for range 8 {
		wg.Go(func() { require.True(t, zero.CanStartAt(at(0), 1, throttle.Batch).OK) })
	}
	wg.Wait()
	// 10000 less a reserve of 2000, in calls of 7.
	require.Equal(t, int64(8000/cost*cost), admitted.Load())
}
