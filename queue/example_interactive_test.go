package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// Code serving a waiting user asks the throttle the batch workers share at
// interactive priority, so it may use the reserve they leave and never waits
// behind queued jobs, then reports the provider's answer so the whole fleet
// paces from it. In production the throttle comes from Client.Throttle with
// the workers' quota key; here it is in memory.
func ExampleCallInteractive() {
	sim, _ := provider.New(provider.Config{RequestsPerWindow: 100, TokensPerWindow: 10_000})
	srv := httptest.NewServer(sim)
	defer srv.Close()

	th, _ := throttle.New(throttle.Config{Reserve: 0.2})
	ask := func(tokens int) int {
		resp, err := queue.CallInteractive(context.Background(), th, int64(tokens), func(ctx context.Context) (*http.Response, error) {
			body := strings.NewReader(fmt.Sprintf(`{"tokens":%d}`, tokens))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, body)
			return http.DefaultClient.Do(req)
		})
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	fmt.Println("first call:", ask(7_000))
	// 3,000 tokens are left; batch work may not go below the 2,000 reserved...
	d, _ := th.CanStart(context.Background(), 1_500, throttle.Batch)
	fmt.Println("batch may start 1,500 more:", d.OK)
	// ...but a user who is waiting may use the reserve.
	fmt.Println("interactive call of 2,500:", ask(2_500))
	// Output:
	// first call: 200
	// batch may start 1,500 more: false
	// interactive call of 2,500: 200
}
