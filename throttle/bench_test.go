package throttle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// BenchmarkCanStart measures one decision under contention: every goroutine
// asks the same Throttle (one quota key, one lock), on a clock that moves a
// microsecond per question.
func BenchmarkCanStart(b *testing.B) {
	const big = 1 << 50
	ctx := context.Background()
	for _, bc := range []struct {
		name   string
		refill throttle.Refill
		setup  func(*throttle.Throttle) error
	}{
		{"nothing-known", throttle.Window, func(*throttle.Throttle) error { return nil }},
		{"window", throttle.Window, func(th *throttle.Throttle) error {
			return observeBoth(th, snap(big, big, time.Hour), snap(big, big, time.Hour))
		}},
		{"token-bucket", throttle.TokenBucket, func(th *throttle.Throttle) error {
			return observeBoth(th, snap(big/2, big, time.Hour), snap(big/2, big, time.Hour))
		}},
		{"paused", throttle.Window, func(th *throttle.Throttle) error {
			return th.TooManyRequests(ctx, t0, t0, time.Hour)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var clock atomic.Int64
			now := func() time.Time { return t0.Add(time.Duration(clock.Add(1)) * time.Microsecond) }
			th, err := throttle.New(throttle.Config{Reserve: 0.1, Refill: bc.refill, Now: now})
			if err != nil {
				b.Fatal(err)
			}
			if err := bc.setup(th); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := th.CanStart(ctx, 1000, throttle.Batch); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// observeBoth records a response at t0 that said tokens and requests.
func observeBoth(th *throttle.Throttle, tokens, requests quotaheaders.Snapshot) error {
	ctx := context.Background()
	if err := th.ObserveSnapshot(ctx, t0, t0, quotaheaders.Tokens, tokens); err != nil {
		return err
	}
	return th.ObserveSnapshot(ctx, t0, t0, quotaheaders.Requests, requests)
}
