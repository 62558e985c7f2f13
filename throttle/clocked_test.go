package throttle_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
	"github.com/batchq/batchq/throttle/throttletest"
)

// clocked is a Throttle on a clock of its own that the test sets: each
// question names the instant it is asked at, and each report fails the test
// on a Store error.
type clocked struct {
	*throttle.Throttle
	t     testing.TB
	clock *throttletest.Clock
}

// newClocked returns New(cfg) on a clock that reads t0 until the test sets it.
func newClocked(t testing.TB, cfg throttle.Config) *clocked {
	t.Helper()
	th := &clocked{t: t, clock: throttletest.NewClock(t0)}
	cfg.Now = th.clock.Now
	var err error
	th.Throttle, err = throttle.New(cfg)
	require.NoError(t, err)
	return th
}

// canStartAt asks CanStart with the clock at now.
func (th *clocked) canStartAt(now time.Time, cost int64, p throttle.Priority) throttle.Decision {
	th.t.Helper()
	th.clock.Set(now)
	d, err := th.CanStart(context.Background(), cost, p)
	require.NoError(th.t, err)
	return d
}

// headroomAt asks Headroom with the clock at now.
func (th *clocked) headroomAt(now time.Time, p throttle.Priority) (calls, tokens int64) {
	th.t.Helper()
	th.clock.Set(now)
	calls, tokens, err := th.Headroom(context.Background(), p)
	require.NoError(th.t, err)
	return calls, tokens
}

func (th *clocked) observe(sent, received time.Time, unit quotaheaders.Unit, s quotaheaders.Snapshot) {
	th.t.Helper()
	require.NoError(th.t, th.ObserveSnapshot(context.Background(), sent, received, unit, s))
}

func (th *clocked) observeResponse(sent, received time.Time, resp *http.Response) {
	th.t.Helper()
	require.NoError(th.t, th.ObserveResponse(context.Background(), sent, received, resp))
}

// tooMany records a 429 received at received for a call taken to have been
// sent then.
func (th *clocked) tooMany(received time.Time, retryAfter time.Duration) {
	th.t.Helper()
	require.NoError(th.t, th.TooManyRequests(context.Background(), received, received, retryAfter))
}
