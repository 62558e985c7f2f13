package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batchq/batchq/metrics"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// Wire a worker pool's events to a collector and serve it. With
// Config.Client set, the collector also reads the backlog and quota gauges
// from the database at each scrape.
func Example_worker() {
	col, err := metrics.New(metrics.Config{TopTenants: 20})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	cfg := queue.WorkerConfig{Queue: "summaries", OnEvent: col.OnEvent("openai/gpt-4o")}
	// client.Work(ctx, cfg) would now report what the pool does; here, as
	// the pool would, two handlers hear the same 429 with Retry-After: 2.
	for range 2 {
		cfg.OnEvent(queue.Event{Kind: queue.EventRateLimited, Queue: "summaries", Wait: 2 * time.Second})
	}

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			fmt.Printf("%s %.0f\n", f.GetName(), m.GetCounter().GetValue())
		}
	}
	// Output:
	// batchq_quota_paused_seconds_total 2
	// batchq_rate_limited_responses_total 2
}

// Interactive calls measured: CallInteractive is queue.CallInteractive that
// also records how long the shared throttle kept the user waiting.
func Example_interactive() {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"usage":{"total_tokens":40}}`)
	}))
	defer provider.Close()
	col, err := metrics.New(metrics.Config{})
	if err != nil {
		panic(err)
	}
	th, err := throttle.New(throttle.Config{Reserve: 0.2}) // in a fleet: client.Throttle("openai/gpt-4o", …)
	if err != nil {
		panic(err)
	}

	resp, err := col.CallInteractive(context.Background(), "openai/gpt-4o", th, 40, func(ctx context.Context) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, nil)
		if err != nil {
			return nil, err
		}
		return http.DefaultClient.Do(req)
	})
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				fmt.Println(f.GetName(), "count", h.GetSampleCount())
			} else {
				fmt.Println(f.GetName(), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// batchq_interactive_tokens_total 40
	// batchq_interactive_wait_seconds count 1
}
