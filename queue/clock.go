package queue

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// dbClock relates this process's clock to the database's. The quota rows a
// fleet shares keep their times on the database's clock: a pause after a 429
// written by a worker whose clock runs a minute fast would otherwise end a
// minute early for every other worker, and one written by a slow clock
// would end a minute late.
//
// The offset is measured against a query of the database's clock, taking
// the reading as made halfway through the round trip, best of a few tries,
// so its error is at most half the shortest round trip. It is kept, not
// measured afresh on every load: the throttle matches a response to the
// admission it counted by their exact times, so a time saved and loaded
// again must come back to the microsecond. It is measured again every
// clockRefresh and replaced only when it moved by more than clockStep (the
// local clock was stepped, say).
type dbClock struct {
	now func() time.Time // this process's clock, as the throttle's callers read it

	mu       sync.Mutex
	offset   time.Duration // add to a local time for the database's
	measured time.Time     // when offset was last measured (monotonic); zero: never
}

const (
	clockSamples = 3
	clockRefresh = 5 * time.Minute
	clockStep    = 10 * time.Millisecond
)

// dbClockOffset returns what to add to a time on this process's clock to get
// the same instant on the database's.
func (c *Client) dbClockOffset(ctx context.Context) (time.Duration, error) {
	k := &c.clock
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.measured.IsZero() && time.Since(k.measured) < clockRefresh {
		return k.offset, nil
	}
	var best, bestRTT time.Duration = 0, -1
	for range clockSamples {
		start := time.Now()
		db, err := c.q.DatabaseClock(ctx, c.pool)
		rtt := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("batchq: read the database's clock: %w", err)
		}
		if off := db.Sub(k.now().Add(-rtt / 2)); bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = off, rtt
		}
	}
	if k.measured.IsZero() || (best-k.offset).Abs() > clockStep {
		k.offset = best.Round(time.Microsecond)
	}
	k.measured = time.Now()
	return k.offset, nil
}
