package queue

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/batchq/batchq/throttle"
)

// CallInteractive makes one provider call for a user who is waiting, under
// the throttle the batch workers share (Client.Throttle with the same key):
// it asks at interactive priority, so it may use the reserve batch work
// leaves and never waits behind queued jobs; it waits only while the quota
// is spent or a 429 has paused everything, for as long as ctx allows. Then it
// makes the call and reports the response, so the fleet paces from what it
// learned; as in a worker pool, a call whose error wraps ErrRateLimited
// without a 429 response (an SDK that turns the 429 into an error, a 503
// "overloaded") pauses the fleet as a 429 does. cost is the call's estimated
// tokens. It returns what call returned: a failure to save what the call
// taught the throttle is not the call's, and a caller that took it for one
// might call again.
func CallInteractive(ctx context.Context, th *throttle.Throttle, cost int64, call func(context.Context) (*http.Response, error)) (*http.Response, error) {
	sentAt, err := th.Admit(ctx, cost, throttle.Interactive)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx)
	received := time.Now()
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbCallTimeout)
	defer cancel()
	switch {
	case errors.Is(err, ErrRateLimited) && status != http.StatusTooManyRequests:
		_ = th.TooManyRequests(octx, sentAt, received, retryAfter(resp, received))
	case resp != nil:
		_ = th.ObserveResponse(octx, sentAt, received, resp)
	}
	return resp, err
}
