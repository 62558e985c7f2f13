package provider_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
)

func TestLog(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{TokensPerWindow: 100, Latency: time.Second})
	b.clock.Set(0)
	b.do(t, call{body: `{"tokens":60}`, job: "a", key: "a-1", tenant: "acme"})
	b.clock.Set(10 * time.Second)
	b.do(t, call{body: `{"tokens":60}`, job: "b", key: "b-1"})
	b.clock.Set(20 * time.Second)
	b.do(t, call{body: `{"tokens":10}`, job: "a", key: "a-2"})
	b.do(t, call{body: `{"tokens":10}`}) // no job id

	at := func(d time.Duration) time.Time { return t0.Add(d) }
	a1 := provider.Request{
		JobID: "a", IdempotencyKey: "a-1", Tenant: "acme", Admitted: true, Tokens: 60, Status: 200,
		Arrived: at(0), Finished: at(time.Second),
	}
	b1 := provider.Request{
		JobID: "b", IdempotencyKey: "b-1", Status: 429,
		Arrived: at(10 * time.Second), Finished: at(10 * time.Second),
	}
	a2 := provider.Request{
		JobID: "a", IdempotencyKey: "a-2", Admitted: true, Tokens: 10, Status: 200,
		Arrived: at(20 * time.Second), Finished: at(21 * time.Second),
	}
	anon := provider.Request{
		Admitted: true, Tokens: 10, Status: 200,
		Arrived: at(21 * time.Second), Finished: at(22 * time.Second),
	}
	require.Equal(t, []provider.Request{a1, b1, a2, anon}, b.p.Log())
	require.Equal(t, []provider.Request{a1, a2}, b.p.JobLog("a"))
	require.Equal(t, []provider.Request{b1}, b.p.JobLog("b"))
	require.Nil(t, b.p.JobLog("c"))
	require.Equal(t, provider.Stats{
		Requests: 4, Admitted: 3, OK: 3, TooManyRequests: 1, TokensCharged: 80,
	}, b.p.Stats())

	// The log is a copy.
	log := b.p.Log()
	log[0].JobID = "changed"
	require.Equal(t, "a", b.p.Log()[0].JobID)
}

func TestMaxConcurrentPerJob(t *testing.T) {
	t.Parallel()

	t.Run("Sequential", func(t *testing.T) {
		t.Parallel()
		b := setup(t, provider.Config{Latency: time.Second})
		require.Zero(t, b.p.MaxConcurrentPerJob())
		for range 3 {
			b.do(t, call{job: "a"})
		}
		require.Equal(t, 1, b.p.MaxConcurrentPerJob())
	})

	t.Run("Overlapping", func(t *testing.T) {
		t.Parallel()
		// Sleep holds every request in flight until all have arrived.
		const n = 6
		arrived := make(chan struct{}, n+1)
		release := make(chan struct{})
		p, err := provider.New(provider.Config{
			Latency: time.Second,
			Sleep: func(context.Context, time.Duration) {
				arrived <- struct{}{}
				<-release
			},
		})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for _, job := range []string{"a", "a", "a", "b", "b", ""} {
			wg.Go(func() { serve(t, p, call{job: job}) })
		}
		for range n {
			<-arrived
		}
		close(release)
		wg.Wait()
		require.Equal(t, 3, p.MaxConcurrentPerJob())
		for _, r := range p.Log() {
			require.False(t, r.Finished.IsZero())
		}

		// Once they are done, a new request of a is alone.
		serve(t, p, call{job: "a"})
		require.Equal(t, 3, p.MaxConcurrentPerJob(), "the maximum is kept")
	})
}

func TestRequestsDuringPause(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{TokensPerWindow: 60, Refill: provider.TokenBucket}) // a token a second
	require.Equal(t, http.StatusOK, b.post(t, 0, 60).status)

	r := b.post(t, 0, 1) // paused until 1s
	require.Equal(t, "1000", r.header.Get("retry-after-ms"))
	require.Zero(t, b.p.RequestsDuringPause(), "the 429 itself came before any pause")

	r = b.post(t, 500*time.Millisecond, 2) // early; it extends the pause to 2s
	require.Equal(t, "1500", r.header.Get("retry-after-ms"))
	require.Equal(t, int64(1), b.p.RequestsDuringPause())

	r = b.post(t, 1999*time.Millisecond, 1) // early, though it fits
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, int64(2), b.p.RequestsDuringPause())

	// On time: the pause ends at the 429 plus retry-after-ms (Retry-After,
	// rounded up to 2s from 500ms, is not what a client should wait).
	r = b.post(t, 2*time.Second, 0)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, int64(2), b.p.RequestsDuringPause())

	// A shorter 429 later does not shorten a longer pause.
	require.Equal(t, "4", b.post(t, 2*time.Second, 5).header.Get("Retry-After")) // until 6s
	r = b.post(t, 3*time.Second, 3)                                              // early, and asked to wait only 1s
	require.Equal(t, "1000", r.header.Get("retry-after-ms"))
	require.Equal(t, int64(3), b.p.RequestsDuringPause())
	b.post(t, 5*time.Second, 0) // still before 6s
	require.Equal(t, int64(4), b.p.RequestsDuringPause())
	b.post(t, 6*time.Second, 0)
	require.Equal(t, int64(4), b.p.RequestsDuringPause())
}

func TestUtilization(t *testing.T) {
	t.Parallel()
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	t.Run("Nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, provider.Config{})
		require.Equal(t, provider.Utilization{}, b.p.Utilization(time.Time{}, time.Time{}))
		require.Zero(t, b.p.Utilization(time.Time{}, time.Time{}).TokenShare())
	})

	t.Run("TokenBucket", func(t *testing.T) {
		t.Parallel()
		b := setup(t, provider.Config{RequestsPerWindow: 600, TokensPerWindow: 60, Refill: provider.TokenBucket})
		b.post(t, 0, 60)
		b.post(t, 10*time.Second, 10)
		b.post(t, 15*time.Second, 10) // 429: not counted
		b.post(t, 20*time.Second, 10)

		u := b.p.Utilization(time.Time{}, time.Time{})
		require.Equal(t, provider.Utilization{
			From: at(0), To: at(20 * time.Second),
			Requests: 3, Tokens: 80,
			RequestsAllowed: 600 + 200, TokensAllowed: 60 + 20, // a full bucket and 20s of refill
		}, u)
		require.InDelta(t, 1.0, u.TokenShare(), 1e-12)
		require.InDelta(t, 3.0/800, u.RequestShare(), 1e-12)

		u = b.p.Utilization(at(10*time.Second), at(20*time.Second))
		require.Equal(t, int64(20), u.Tokens)
		require.Equal(t, int64(70), u.TokensAllowed)

		u = b.p.Utilization(at(10*time.Second), time.Time{})
		require.Equal(t, at(20*time.Second), u.To)
		require.Equal(t, int64(2), u.Requests)
	})

	t.Run("FixedWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, provider.Config{RequestsPerWindow: 600, TokensPerWindow: 60, Refill: provider.FixedWindow})
		b.post(t, 30*time.Second, 60)
		b.post(t, 70*time.Second, 60)

		u := b.p.Utilization(time.Time{}, time.Time{})
		require.Equal(t, provider.Utilization{
			From: at(30 * time.Second), To: at(70 * time.Second),
			Requests: 2, Tokens: 120,
			RequestsAllowed: 1200, TokensAllowed: 120, // [0:30, 1:10] touches two windows
		}, u)
		require.InDelta(t, 1.0, u.TokenShare(), 1e-12)

		u = b.p.Utilization(at(0), at(time.Minute-time.Nanosecond))
		require.Equal(t, int64(60), u.Tokens)
		require.Equal(t, int64(60), u.TokensAllowed)

		require.Zero(t, b.p.Utilization(at(time.Minute), at(0)).TokensAllowed, "an empty period allows nothing")
	})
}
