package provider_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/provider"
)

// TestConcurrentUse sends requests from many clients at once over a real
// server on a clock that stands still, while others read the statistics, and
// checks that exactly the quota was admitted, each admission saw its own
// remaining count, and the books balance. Run it with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	b := setup(t, provider.Config{RequestsPerWindow: 100, TokensPerWindow: 1_000_000, Refill: provider.TokenBucket})
	srv := httptest.NewServer(b.p)
	t.Cleanup(srv.Close)

	const clients, each, cost = 32, 10, 7
	var (
		mu        sync.Mutex
		remaining []int // x-ratelimit-remaining-requests of each 200
		retryMs   []string
	)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(fmt.Sprintf(`{"tokens":%d}`, cost)))
				if !assertNoError(t, err) {
					return
				}
				req.Header.Set(provider.DefaultJobHeader, fmt.Sprintf("job-%d-%d", c, i))
				resp, err := srv.Client().Do(req)
				if !assertNoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				mu.Lock()
				switch resp.StatusCode {
				case http.StatusOK:
					n, _ := strconv.Atoi(resp.Header.Get("x-ratelimit-remaining-requests"))
					remaining = append(remaining, n)
				case http.StatusTooManyRequests:
					retryMs = append(retryMs, resp.Header.Get("retry-after-ms"))
				}
				mu.Unlock()
			}
		})
		wg.Go(func() {
			for range each {
				st := b.p.Stats()
				if st.Requests < st.OK+st.TooManyRequests {
					t.Errorf("inconsistent stats %+v", st)
				}
				_ = b.p.Log()
				_ = b.p.JobLog(fmt.Sprintf("job-%d-0", c))
				_ = b.p.MaxConcurrentPerJob()
				_ = b.p.RequestsDuringPause()
				_ = b.p.Utilization(time.Time{}, time.Time{})
			}
		})
	}
	wg.Wait()

	require.Equal(t, provider.Stats{
		Requests: clients * each, Admitted: 100, OK: 100, TooManyRequests: clients*each - 100, TokensCharged: 100 * cost,
	}, b.p.Stats())
	slices.Sort(remaining)
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, remaining, "each admitted request saw the quota it left")
	require.Equal(t, slices.Repeat([]string{"600"}, clients*each-100), retryMs, "a request comes back every 600ms")
	require.Len(t, b.p.Log(), clients*each)
	require.Equal(t, 1, b.p.MaxConcurrentPerJob())
	// Every request after the first 429 arrived at the same instant, within
	// its Retry-After.
	require.Equal(t, int64(clients*each-101), b.p.RequestsDuringPause())
}

// assertNoError reports err without stopping a goroutine that is not the
// test's.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
