package queue

import (
	"context"
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
// learned. cost is the call's estimated tokens.
func CallInteractive(ctx context.Context, th *throttle.Throttle, cost int64, call func(context.Context) (*http.Response, error)) (*http.Response, error) {
	sentAt, err := th.Admit(ctx, cost, throttle.Interactive)
	if err != nil {
		return nil, err
	}
	resp, err := call(ctx)
	if resp != nil {
		th.ObserveResponseAt(sentAt, time.Now(), resp)
	}
	return resp, err
}
