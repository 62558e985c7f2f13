package throttle_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// BenchmarkCanStartAt measures one decision under contention: every
// goroutine asks the same Throttle (one quota key, one lock).
func BenchmarkCanStartAt(b *testing.B) {
	const big = 1 << 50
	for _, bc := range []struct {
		name   string
		refill throttle.Refill
		setup  func(*throttle.Throttle)
	}{
		{"nothing-known", throttle.Window, func(*throttle.Throttle) {}},
		{"window", throttle.Window, func(th *throttle.Throttle) {
			th.ObserveSnapshotAt(t0, t0, quotaheaders.Tokens, snap(big, big, time.Hour))
			th.ObserveSnapshotAt(t0, t0, quotaheaders.Requests, snap(big, big, time.Hour))
		}},
		{"token-bucket", throttle.TokenBucket, func(th *throttle.Throttle) {
			th.ObserveSnapshotAt(t0, t0, quotaheaders.Tokens, snap(big/2, big, time.Hour))
			th.ObserveSnapshotAt(t0, t0, quotaheaders.Requests, snap(big/2, big, time.Hour))
		}},
		{"paused", throttle.Window, func(th *throttle.Throttle) { th.TooManyRequestsAt(t0, time.Hour) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			th, err := throttle.New(throttle.Config{Reserve: 0.1, Refill: bc.refill})
			if err != nil {
				b.Fatal(err)
			}
			bc.setup(th)
			var clock atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := t0.Add(time.Duration(clock.Add(1)) * time.Microsecond)
					th.CanStartAt(now, 1000, throttle.Batch)
				}
			})
		})
	}
}
