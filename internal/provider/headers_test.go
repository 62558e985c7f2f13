package provider_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// postHTTP sends a request of tokens over the network and returns the
// response with its body closed.
func postHTTP(t *testing.T, url string, tokens int64) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(fmt.Sprintf(`{"estimated_tokens":%d}`, tokens)))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp
}

func snapshot(remaining, limit int64, reset time.Duration) quotaheaders.Snapshot {
	return quotaheaders.Snapshot{Remaining: remaining, Limit: limit, HasLimit: true, Reset: reset, HasReset: true}
}

// batchq's own parser reads the provider's headers, after a trip through a
// real HTTP server and client, and gets the provider's numbers back.
func TestQuotaheadersReadsTheHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		refill provider.Refill
		// 10 requests and 1000 tokens a minute; one request of 100 tokens
		// at t0, then one of 1000 at t0+500ms.
		first, second    [2]quotaheaders.Snapshot // requests, tokens
		secondRetry      time.Duration
		secondRetryWhole string // Retry-After
	}{
		{
			name:   "TokenBucket",
			refill: provider.TokenBucket,
			first:  [2]quotaheaders.Snapshot{snapshot(9, 10, 6*time.Second), snapshot(900, 1000, 6*time.Second)},
			// A request comes back every 6s, a token every 60ms: 908⅓
			// tokens at 500ms, so 1000 fit 5.5s later.
			second:           [2]quotaheaders.Snapshot{snapshot(9, 10, 5500*time.Millisecond), snapshot(908, 1000, 5500*time.Millisecond)},
			secondRetry:      5500 * time.Millisecond,
			secondRetryWhole: "6",
		},
		{
			name:             "FixedWindow",
			refill:           provider.FixedWindow,
			first:            [2]quotaheaders.Snapshot{snapshot(9, 10, time.Minute), snapshot(900, 1000, time.Minute)},
			second:           [2]quotaheaders.Snapshot{snapshot(9, 10, 59500*time.Millisecond), snapshot(900, 1000, 59500*time.Millisecond)},
			secondRetry:      59500 * time.Millisecond,
			secondRetryWhole: "60",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, provider.Config{RequestsPerWindow: 10, TokensPerWindow: 1000, Refill: tc.refill})
			srv := httptest.NewServer(b.p)
			t.Cleanup(srv.Close)

			resp := postHTTP(t, srv.URL, 100)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			for i, unit := range []quotaheaders.Unit{quotaheaders.Requests, quotaheaders.Tokens} {
				s, ok := quotaheaders.Parse(resp.Header, t0, unit)
				require.True(t, ok, "unit %d", unit)
				require.Equal(t, tc.first[i], s, "unit %d", unit)
			}
			_, ok := quotaheaders.RetryAfter(resp.Header, t0)
			require.False(t, ok, "a 200 asks for no wait")

			b.clock.Set(500 * time.Millisecond)
			received := t0.Add(500 * time.Millisecond)
			resp = postHTTP(t, srv.URL, 1000)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			for i, unit := range []quotaheaders.Unit{quotaheaders.Requests, quotaheaders.Tokens} {
				s, ok := quotaheaders.Parse(resp.Header, received, unit)
				require.True(t, ok, "unit %d", unit)
				require.Equal(t, tc.second[i], s, "unit %d", unit)
			}
			d, ok := quotaheaders.RetryAfter(resp.Header, received)
			require.True(t, ok)
			require.Equal(t, tc.secondRetry, d)
			require.Equal(t, tc.secondRetryWhole, resp.Header.Get("Retry-After"))
		})
	}
}

// A throttle that observes the provider's responses lets a call start only
// when the provider admits it: not during the announced pause, and not
// before the quota has room.
func TestThrottleAgreesWithTheProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider provider.Refill
		throttle throttle.Refill
	}{
		{provider.TokenBucket, throttle.TokenBucket},
		{provider.FixedWindow, throttle.Window},
	} {
		t.Run(tc.provider.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, provider.Config{RequestsPerWindow: 10, TokensPerWindow: 1000, Refill: tc.provider})
			// The throttle reads the provider's clock: one clock for both.
			th, err := throttle.New(throttle.Config{Refill: tc.throttle, Now: b.clock.Now})
			require.NoError(t, err)

			send := func(at time.Duration, tokens int64) *http.Response {
				b.clock.Set(at)
				res := httptest.NewRecorder()
				b.p.ServeHTTP(res, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(fmt.Sprintf(`{"tokens":%d}`, tokens))))
				resp := res.Result()
				require.NoError(t, th.ObserveResponse(context.Background(), t0.Add(at), t0.Add(at), resp))
				return resp
			}
			require.Equal(t, http.StatusOK, send(0, 100).StatusCode)
			resp := send(500*time.Millisecond, 1000)
			require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			retry, ok := quotaheaders.RetryAfter(resp.Header, t0.Add(500*time.Millisecond))
			require.True(t, ok)

			// Follow the throttle's waits until it lets the call start.
			at := 500 * time.Millisecond
			for i := 0; ; i++ {
				require.Less(t, i, 10, "the throttle keeps waiting")
				b.clock.Set(at)
				d, err := th.CanStart(context.Background(), 1000, throttle.Batch)
				require.NoError(t, err)
				if d.OK {
					break
				}
				at += d.Wait
			}
			require.GreaterOrEqual(t, at, 500*time.Millisecond+retry, "the throttle honours the provider's Retry-After")
			require.Equal(t, http.StatusOK, send(at, 1000).StatusCode)
			require.Zero(t, b.p.RequestsDuringPause())
		})
	}
}
