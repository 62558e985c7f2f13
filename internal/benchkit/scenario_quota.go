package benchkit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// The clients Quota compares.
const (
	// ClientBatchq is batchq's worker pools pacing from the shared throttle,
	// with interactive calls through CallInteractive.
	ClientBatchq = "batchq"
	// ClientNaive sends batch calls at the quota's nominal rate (the token
	// limit over the mean cost), retrying each 429 after its Retry-After,
	// and makes interactive calls directly, retrying the same way.
	ClientNaive = "naive"
)

// interactiveTenant marks interactive calls in the provider's log.
const interactiveTenant = "interactive"

// QuotaConfig configures Quota. Zero fields take the defaults of
// DefaultQuotaConfig.
type QuotaConfig struct {
	Runs
	// Duration is how long each run sends calls.
	Duration time.Duration
	// The provider's quota: Tokens and Requests per Window.
	Window   time.Duration
	Tokens   int64
	Requests int64
	// Latency and Jitter: an admitted call takes Latency plus up to Jitter.
	Latency time.Duration
	Jitter  time.Duration
	// Reserve is the fraction of the quota batch work leaves to interactive
	// calls.
	Reserve float64
	// Pools worker pools (the processes of a fleet, each on its own
	// connection pool) run Workers handlers each. The naive client runs
	// Pools × Workers senders.
	Pools   int
	Workers int
	// Batch jobs cost 1..MaxCost tokens, uniformly, over Tenants tenants.
	MaxCost int64
	Tenants int
	// Interactive callers each make a call of InteractiveCost tokens every
	// InteractiveEvery.
	Interactive      int
	InteractiveEvery time.Duration
	InteractiveCost  int64
}

// DefaultQuotaConfig returns the defaults: 20-second runs against 50,000
// tokens (and 10,000 requests) per 1-second window, calls taking 20-40 ms,
// a 20% reserve, 2 pools of 16 workers, batch jobs of 1..1000 tokens, and 2
// interactive callers making a 500-token call every 100 ms.
func DefaultQuotaConfig() QuotaConfig {
	return QuotaConfig{
		Duration: 20 * time.Second, Window: time.Second, Tokens: 50_000, Requests: 10_000,
		Latency: 20 * time.Millisecond, Jitter: 20 * time.Millisecond, Reserve: 0.2,
		Pools: 2, Workers: 16, MaxCost: 1000, Tenants: 10,
		Interactive: 2, InteractiveEvery: 100 * time.Millisecond, InteractiveCost: 500,
	}
}

// Limits of a quota run's settings.
const (
	// MinQuotaWindow is the shortest quota window a run takes.
	MinQuotaWindow = time.Millisecond
	// MaxQuotaJobs bounds the batch jobs a run queues (BatchJobs): more
	// would take longer to make and enqueue than the run sends calls, if
	// memory held them at all.
	MaxQuotaJobs = 1_000_000
)

// BatchJobs is the batch jobs each run queues so that the queue never runs
// dry: half as much again as Tokens per Window let through in Duration, at
// the mean cost of 1..MaxCost. Tokens, MaxCost, Duration and Window must be
// set.
func (c QuotaConfig) BatchJobs() float64 {
	return float64(c.Tokens) * c.Duration.Seconds() / c.Window.Seconds() / (float64(c.MaxCost+1) / 2) * 1.5
}

// Check returns the ConfigError Quota would return for c before it
// measures anything, without touching a database.
func (c QuotaConfig) Check() error {
	_, err := c.withDefaults()
	return err
}

func (c QuotaConfig) withDefaults() (QuotaConfig, error) {
	d := DefaultQuotaConfig()
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.Duration, &d.Duration}, {&c.Window, &d.Window}, {&c.Latency, &d.Latency}, {&c.InteractiveEvery, &d.InteractiveEvery},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *int64 }{
		{&c.Tokens, &d.Tokens}, {&c.Requests, &d.Requests}, {&c.MaxCost, &d.MaxCost}, {&c.InteractiveCost, &d.InteractiveCost},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *int }{
		{&c.Pools, &d.Pools}, {&c.Workers, &d.Workers}, {&c.Tenants, &d.Tenants}, {&c.Interactive, &d.Interactive},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	switch {
	case c.Window < MinQuotaWindow:
		return c, configErrorf("quota: the window (%s) must be at least %s", c.Window, MinQuotaWindow)
	case c.InteractiveEvery < 0:
		return c, configErrorf("quota: the interactive callers' interval must be more than 0")
	case c.Duration < 4*c.Window:
		return c, configErrorf("quota: the duration (%s) must be at least 4 windows (%s)", c.Duration, 4*c.Window)
	case !(c.Reserve >= 0 && c.Reserve < 1):
		return c, configErrorf("quota: reserve must be in [0, 1)")
	case c.Jitter < 0 || c.Latency < 0:
		return c, configErrorf("quota: latency and jitter must be >= 0")
	case c.MaxCost > c.Tokens || c.InteractiveCost > c.Tokens:
		return c, configErrorf("quota: a call must fit the token limit")
	case c.Tokens < 1 || c.Requests < 1 || c.Pools < 1 || c.Workers < 1 || c.Tenants < 1 || c.Interactive < 0:
		return c, configErrorf("quota: sizes must be positive")
	case c.MaxCost < 1 || c.InteractiveCost < 1:
		return c, configErrorf("quota: costs must be positive")
	case !(c.BatchJobs() <= MaxQuotaJobs):
		return c, configErrorf("quota: a run would queue %.0f batch jobs, more than %d", c.BatchJobs(), MaxQuotaJobs)
	}
	return c, nil
}

// quotaResult is what one quota run measured.
type quotaResult struct {
	utilization, batch, interactive float64 // shares of the token limit over the steady part of the run
	tooMany                         int64   // 429s over the whole run
	perMinute                       float64
	waitP50, waitP99                float64 // interactive: from wanting to call to starting the call that succeeded, ms
	calls                           int     // interactive calls that succeeded
	unfinished                      int     // interactive calls still waiting when the run ended
	jobs                            int64   // batch calls answered 200
}

type quotaKey struct {
	refill provider.Refill
	client string
}

// Quota runs batch work and interactive calls against a simulated provider
// with a token-bucket quota and one with fixed windows, first with batchq
// (worker pools sharing a throttle through Postgres, keeping a reserve for
// interactive calls) and then with a naive client, and reports the share of
// the token limit used, the 429s and the interactive calls' wait. Its bars,
// for each kind of quota: batchq uses at least 95% of the limit less the
// reserve, and gets at most one 429 a minute.
func Quota(ctx context.Context, env *Env, cfg QuotaConfig) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rep, err := newReport(ctx, env, "quota", cfg.Runs)
	if err != nil {
		return nil, err
	}
	rep.param("duration", cfg.Duration.String())
	rep.param("window", cfg.Window.String())
	rep.param("tokens", cfg.Tokens)
	rep.param("requests", cfg.Requests)
	rep.param("latency", cfg.Latency.String())
	rep.param("jitter", cfg.Jitter.String())
	rep.param("reserve", cfg.Reserve)
	rep.param("pools", cfg.Pools)
	rep.param("workers", cfg.Workers)
	rep.param("max_cost", cfg.MaxCost)
	rep.param("interactive", cfg.Interactive)
	rep.param("interactive_every", cfg.InteractiveEvery.String())
	rep.param("interactive_cost", cfg.InteractiveCost)

	keys := []quotaKey{
		{provider.TokenBucket, ClientBatchq}, {provider.TokenBucket, ClientNaive},
		{provider.FixedWindow, ClientBatchq}, {provider.FixedWindow, ClientNaive},
	}
	if !cfg.NoWarmUp {
		warm := cfg
		warm.Duration = max(cfg.Duration/4, 4*cfg.Window)
		for _, k := range keys[:2] {
			if _, err := quotaOnce(ctx, env, warm, k, 0); err != nil {
				return nil, err
			}
			cfg.progress("quota warm-up %s %s", k.refill, k.client)
		}
	}
	res := map[quotaKey][]quotaResult{}
	for r := range cfg.reps() {
		for _, k := range keys {
			got, err := quotaOnce(ctx, env, cfg, k, r+1)
			if err != nil {
				return nil, err
			}
			res[k] = append(res[k], got)
			cfg.progress("quota rep %d/%d %s %s: utilization %.3f, %d 429s, interactive p99 %.1f ms",
				r+1, cfg.reps(), k.refill, k.client, got.utilization, got.tooMany, got.waitP99)
		}
	}

	col := func(k quotaKey, f func(quotaResult) float64, prec int) Sample {
		var vs []float64
		for _, r := range res[k] {
			vs = append(vs, f(r))
		}
		return NewSample(prec, vs...)
	}
	t := NewTable("quota", fmt.Sprintf("quota: %s tokens per %s, %.0f%% reserve; %d pools × %d workers; %d interactive callers, %d tokens every %s; runs of %s",
		group(fmt.Sprint(cfg.Tokens)), cfg.Window, 100*cfg.Reserve, cfg.Pools, cfg.Workers, cfg.Interactive, cfg.InteractiveCost, cfg.InteractiveEvery, cfg.Duration),
		"quota", "client", "utilization", "batch_of_limit_less_reserve", "batch_share", "interactive_share", "http_429",
		"http_429_per_min", "interactive_p50_ms", "interactive_p99_ms", "interactive_calls", "batch_calls")
	for _, k := range keys {
		t.Add(refillName(k.refill), k.client,
			col(k, func(r quotaResult) float64 { return r.utilization }, 3),
			col(k, func(r quotaResult) float64 { return r.batch / (1 - cfg.Reserve) }, 3),
			col(k, func(r quotaResult) float64 { return r.batch }, 3),
			col(k, func(r quotaResult) float64 { return r.interactive }, 3),
			col(k, func(r quotaResult) float64 { return float64(r.tooMany) }, 0),
			col(k, func(r quotaResult) float64 { return r.perMinute }, 1),
			col(k, func(r quotaResult) float64 { return r.waitP50 }, 1),
			col(k, func(r quotaResult) float64 { return r.waitP99 }, 1),
			col(k, func(r quotaResult) float64 { return float64(r.calls) }, 0),
			col(k, func(r quotaResult) float64 { return float64(r.jobs) }, 0))
	}
	rep.Tables = append(rep.Tables, t)

	for _, refill := range []provider.Refill{provider.TokenBucket, provider.FixedWindow} {
		b, n := quotaKey{refill, ClientBatchq}, quotaKey{refill, ClientNaive}
		// What batch work used of what it may use: the limit less the
		// reserve. Interactive calls are not counted: they may use the
		// reserve, and counting them would let them carry the bar.
		use := func(k quotaKey) float64 {
			return col(k, func(r quotaResult) float64 { return r.batch / (1 - cfg.Reserve) }, 0).Median()
		}
		perMin := func(k quotaKey) float64 {
			return col(k, func(r quotaResult) float64 { return r.perMinute }, 0).Median()
		}
		p99 := func(k quotaKey) float64 { return col(k, func(r quotaResult) float64 { return r.waitP99 }, 0).Median() }
		rep.Bars = append(rep.Bars,
			newBar(fmt.Sprintf("quota (%s): batch utilization / (limit less reserve)", refillName(refill)), use(b), 0.95, false,
				fmt.Sprintf("batchq %s; naive %s", fmtFloat(use(b), 3), fmtFloat(use(n), 3))),
			newBar(fmt.Sprintf("quota (%s): 429s per minute", refillName(refill)), perMin(b), 1, true,
				fmt.Sprintf("batchq %s/min; naive %s/min; interactive p99 wait batchq %s ms, naive %s ms",
					fmtFloat(perMin(b), 1), fmtFloat(perMin(n), 1), fmtFloat(p99(b), 1), fmtFloat(p99(n), 1))))
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("utilization counts the tokens admitted from the third window of a run to its end (fixed windows: whole windows only) over what the limit allowed then; "+
		"429s per minute are over the whole run, so with %s windows a minute is %.0f windows", cfg.Window, float64(time.Minute)/float64(cfg.Window)))
	return rep.finish(), nil
}

func refillName(r provider.Refill) string {
	if r == provider.TokenBucket {
		return "token bucket"
	}
	return "fixed window"
}

// quotaOnce runs one client against a fresh provider for cfg.Duration.
func quotaOnce(ctx context.Context, env *Env, cfg QuotaConfig, k quotaKey, rep int) (quotaResult, error) {
	p, err := provider.New(provider.Config{
		RequestsPerWindow: cfg.Requests, TokensPerWindow: cfg.Tokens, Window: cfg.Window, Refill: k.refill,
		Latency: cfg.Latency, Jitter: cfg.Jitter, Seed: cfg.Seed + uint64(rep),
	})
	if err != nil {
		return quotaResult{}, err
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	httpClient := &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute},
	}
	defer httpClient.CloseIdleConnections()

	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(rep)))
	// Enough batch work that the queue never runs dry: half as much again as
	// the quota lets through.
	n := int(cfg.BatchJobs())
	costs := make([]int64, n+100)
	for i := range costs {
		costs[i] = 1 + rng.Int64N(cfg.MaxCost)
	}

	var run func(context.Context) error
	var waits interactiveWaits
	switch k.client {
	case ClientBatchq:
		run, err = batchqClient(ctx, env, cfg, k, srv.URL, httpClient, costs, &waits)
	case ClientNaive:
		run = naiveClient(cfg, srv.URL, httpClient, costs, &waits)
	}
	if err != nil {
		return quotaResult{}, err
	}
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	err = run(runCtx)
	cancel()
	end := start.Add(cfg.Duration)
	if err != nil {
		return quotaResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return quotaResult{}, err
	}
	return measureQuota(p.Log(), cfg, k.refill, start, end, &waits), nil
}

// interactiveWaits collects the interactive calls' waits.
type interactiveWaits struct {
	mu         sync.Mutex
	ms         []float64
	unfinished int
}

func (w *interactiveWaits) add(d time.Duration) {
	w.mu.Lock()
	w.ms = append(w.ms, float64(d)/float64(time.Millisecond))
	w.mu.Unlock()
}

func (w *interactiveWaits) gaveUp() {
	w.mu.Lock()
	w.unfinished++
	w.mu.Unlock()
}

// measureQuota reads the provider's log of one run.
func measureQuota(log []provider.Request, cfg QuotaConfig, refill provider.Refill, start, end time.Time, waits *interactiveWaits) quotaResult {
	from := start.Add(2 * cfg.Window)
	to := end
	windows := float64(to.Sub(from)) / float64(cfg.Window)
	if refill == provider.FixedWindow {
		// Whole windows only: the provider's start at multiples of Window.
		from = from.Truncate(cfg.Window).Add(cfg.Window)
		to = to.Truncate(cfg.Window)
		windows = math.Round(float64(to.Sub(from)) / float64(cfg.Window))
	}
	var r quotaResult
	var batch, inter int64
	for _, q := range log {
		if q.Status == http.StatusTooManyRequests {
			r.tooMany++
		}
		if q.Admitted && q.Tenant != interactiveTenant && q.Status == http.StatusOK {
			r.jobs++
		}
		if !q.Admitted || q.Arrived.Before(from) || !q.Arrived.Before(to) {
			continue
		}
		if q.Tenant == interactiveTenant {
			inter += q.Tokens
		} else {
			batch += q.Tokens
		}
	}
	allowed := float64(cfg.Tokens) * windows
	if allowed > 0 {
		r.batch, r.interactive = float64(batch)/allowed, float64(inter)/allowed
		r.utilization = r.batch + r.interactive
	}
	r.perMinute = float64(r.tooMany) / end.Sub(start).Minutes()
	waits.mu.Lock()
	defer waits.mu.Unlock()
	r.calls, r.unfinished = len(waits.ms), waits.unfinished
	r.waitP50, r.waitP99 = quantile(waits.ms, 0.5), quantile(waits.ms, 0.99)
	return r
}

// post sends one call of tokens for tenant and returns the response with its
// body read and closed.
func post(ctx context.Context, client *http.Client, url, tenant string, tokens int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(fmt.Sprintf(`{"tokens":%d}`, tokens)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(provider.TenantHeader, tenant)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp, nil
}

// interactiveLoop makes one call every cfg.InteractiveEvery until ctx is
// done, each through call, which reports whether the provider answered 200
// and when the call that did was started; a call that did not succeed is
// retried at once (call does any waiting).
func interactiveLoop(ctx context.Context, cfg QuotaConfig, offset time.Duration, waits *interactiveWaits,
	call func(ctx context.Context) (ok bool, started time.Time, err error)) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(offset):
	}
	tick := time.NewTicker(cfg.InteractiveEvery)
	defer tick.Stop()
	for {
		want := time.Now()
		for {
			ok, started, err := call(ctx)
			if ctx.Err() != nil {
				waits.gaveUp()
				return
			}
			if err == nil && ok {
				waits.add(started.Sub(want))
				break
			}
			if err != nil {
				// A transport error: try again shortly, as a caller would.
				time.Sleep(10 * time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// batchqClient prepares a run of batchq: the queue seeded with the jobs, a
// fleet of worker pools on their own connection pools sharing one throttle
// key, and interactive callers on the same key.
func batchqClient(ctx context.Context, env *Env, cfg QuotaConfig, k quotaKey, target string, httpClient *http.Client,
	costs []int64, waits *interactiveWaits) (func(context.Context) error, error) {
	if err := env.reset(ctx, queue.QueueConfig{Quantum: 1000}); err != nil {
		return nil, err
	}
	jobs := make([]queue.NewJob, len(costs))
	for i, c := range costs {
		jobs[i] = queue.NewJob{Queue: benchQueue, Tenant: fmt.Sprintf("tenant-%02d", i%cfg.Tenants), Cost: c,
			Payload: []byte(fmt.Sprintf(`{"tokens":%d}`, c))}
	}
	for i := 0; i < len(jobs); i += 5000 {
		if _, err := env.Client.EnqueueMany(ctx, jobs[i:min(i+5000, len(jobs))]); err != nil {
			return nil, err
		}
	}
	refill := throttle.Window
	if k.refill == provider.TokenBucket {
		refill = throttle.TokenBucket
	}
	key := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	tc := throttle.Config{Reserve: cfg.Reserve, Refill: refill}
	handler, err := queue.HTTPHandler(queue.HTTPConfig{Target: target, Client: httpClient})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		var wg sync.WaitGroup
		var firstErr atomic.Pointer[error]
		for i := range cfg.Pools {
			pool, err := connect(ctx, env.URL, 8+cfg.Workers/4)
			if err != nil {
				return err
			}
			defer pool.Close()
			c, err := queue.NewClient(pool, queue.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			th, err := c.Throttle(key, tc)
			if err != nil {
				return err
			}
			wg.Go(func() {
				err := c.Work(ctx, queue.WorkerConfig{
					Queue: benchQueue, Handler: handler, Throttle: th, Concurrency: cfg.Workers,
					Name: fmt.Sprint("pool-", i), PollInterval: 20 * time.Millisecond, MaintainInterval: 200 * time.Millisecond,
					ShutdownTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
				})
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			})
		}
		for i := range cfg.Interactive {
			th, err := env.Client.Throttle(key, tc)
			if err != nil {
				return err
			}
			offset := cfg.InteractiveEvery * time.Duration(i) / time.Duration(cfg.Interactive)
			wg.Go(func() {
				interactiveLoop(ctx, cfg, offset, waits, func(ctx context.Context) (bool, time.Time, error) {
					var started time.Time
					resp, err := queue.CallInteractive(ctx, th, cfg.InteractiveCost, func(ctx context.Context) (*http.Response, error) {
						started = time.Now()
						return post(ctx, httpClient, target, interactiveTenant, cfg.InteractiveCost)
					})
					return err == nil && resp.StatusCode == http.StatusOK, started, err
				})
			})
		}
		wg.Wait()
		if p := firstErr.Load(); p != nil {
			return *p
		}
		return nil
	}, nil
}

// naiveClient prepares a run of the naive client: one call of the next cost
// every Window × mean cost / Tokens, each on its own sender (at most
// Pools × Workers at once), a 429 retried after its Retry-After (1s when it
// gives none); interactive calls made at once and retried the same way.
func naiveClient(cfg QuotaConfig, target string, httpClient *http.Client, costs []int64, waits *interactiveWaits) func(context.Context) error {
	retry := func(ctx context.Context, resp *http.Response) {
		d, ok := quotaheaders.RetryAfter(resp.Header, time.Now())
		if !ok {
			d = time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	return func(ctx context.Context) error {
		var wg sync.WaitGroup
		for i := range cfg.Interactive {
			offset := cfg.InteractiveEvery * time.Duration(i) / time.Duration(cfg.Interactive)
			wg.Go(func() {
				interactiveLoop(ctx, cfg, offset, waits, func(ctx context.Context) (bool, time.Time, error) {
					started := time.Now()
					resp, err := post(ctx, httpClient, target, interactiveTenant, cfg.InteractiveCost)
					if err != nil {
						return false, started, err
					}
					if resp.StatusCode == http.StatusTooManyRequests {
						retry(ctx, resp)
					}
					return resp.StatusCode == http.StatusOK, started, nil
				})
			})
		}
		interval := time.Duration(float64(cfg.Window) * float64(cfg.MaxCost+1) / 2 / float64(cfg.Tokens))
		senders := make(chan struct{}, cfg.Pools*cfg.Workers)
		tick := time.NewTicker(interval)
		defer tick.Stop()
	send:
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				break send
			case <-tick.C:
			}
			select {
			case <-ctx.Done():
				break send
			case senders <- struct{}{}:
			}
			cost := costs[i%len(costs)]
			tenant := fmt.Sprintf("tenant-%02d", i%cfg.Tenants)
			wg.Go(func() {
				defer func() { <-senders }()
				for ctx.Err() == nil {
					resp, err := post(ctx, httpClient, target, tenant, cost)
					switch {
					case err != nil:
						time.Sleep(10 * time.Millisecond)
					case resp.StatusCode == http.StatusTooManyRequests:
						retry(ctx, resp)
					default:
						return
					}
				}
			})
		}
		wg.Wait()
		return nil
	}
}
