package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/internal/provider"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// Defaults of Config.
const (
	DefaultDatabaseURL  = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultDatabaseName = "batchq_demo"
	DefaultDuration     = time.Minute
	DefaultChartPath    = "batchq-demo-shares.svg"
)

// Limits on Config.
const (
	MinSpeed, MaxSpeed       = 0.1, 100.0
	MinDuration, MaxDuration = time.Second, 24 * time.Hour
)

const (
	queueName = "summaries"
	quotaKey  = "sim/chat-model"
	// The fleet: worker pools on connection pools of their own, as separate
	// processes would run.
	fleetPools      = 3
	poolConcurrency = 8
	// liveWindow is the story time the live table's share column covers, and
	// the chart's sliding window.
	liveWindow = 5 * time.Second
)

// Config configures Run. The zero value plays the default story.
type Config struct {
	// DatabaseURL names the Postgres server. The demo connects to the URL's
	// database to create its own. "": DefaultDatabaseURL.
	DatabaseURL string
	// DatabaseName is the demo's own database, dropped and created afresh on
	// every run and kept afterwards. "": DefaultDatabaseName.
	DatabaseName string
	// Duration is how long the story plays, wall clock. 0: DefaultDuration.
	Duration time.Duration
	// Speed plays the story faster: the provider's quota refills Speed times
	// as fast and answers Speed times sooner, and jobs, deadlines and
	// interactive calls come Speed times as often. 0: 1.
	Speed float64
	// ChartPath is where the chart of token shares goes: PNG if it ends in
	// .png, else SVG. "": DefaultChartPath.
	ChartPath string
	// Out receives the live table and the final report. nil: io.Discard.
	Out io.Writer
	// Terminal redraws the live table in place with ANSI cursor movement;
	// otherwise it is printed as plain lines every RefreshEvery.
	Terminal bool
	// RefreshEvery is how often the live table is shown. 0: every 500ms on a
	// terminal, every 5s otherwise.
	RefreshEvery time.Duration
	// Seed seeds the story's choices and the provider's latencies: the same
	// seed plays the same story.
	Seed uint64
	// ConsoleAddr, when set, serves the web console (read-only) over the
	// demo's database at this address while the story plays, and prints
	// where. A console that cannot listen is reported and left out; the
	// story plays anyway. "": no console.
	ConsoleAddr string
}

func (c Config) withDefaults() Config {
	if c.DatabaseURL == "" {
		c.DatabaseURL = DefaultDatabaseURL
	}
	if c.DatabaseName == "" {
		c.DatabaseName = DefaultDatabaseName
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Speed == 0 {
		c.Speed = 1
	}
	if c.ChartPath == "" {
		c.ChartPath = DefaultChartPath
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.RefreshEvery == 0 {
		c.RefreshEvery = 5 * time.Second
		if c.Terminal {
			c.RefreshEvery = 500 * time.Millisecond
		}
	}
	return c
}

// Check returns an error naming the first setting of c (after defaults)
// that is out of range.
func (c Config) Check() error {
	c = c.withDefaults()
	switch {
	case !(c.Speed >= MinSpeed && c.Speed <= MaxSpeed):
		return fmt.Errorf("batchq: demo: speed %v: must be in %v..%v", c.Speed, MinSpeed, MaxSpeed)
	case c.Duration < MinDuration || c.Duration > MaxDuration:
		return fmt.Errorf("batchq: demo: duration %s: must be in %s..%s", c.Duration, MinDuration, MaxDuration)
	case c.RefreshEvery < 0:
		return fmt.Errorf("batchq: demo: refresh interval %s: must be positive", c.RefreshEvery)
	}
	if ext := strings.ToLower(filepath.Ext(c.ChartPath)); ext != ".svg" && ext != ".png" {
		return fmt.Errorf("batchq: demo: chart %q: must end in .svg or .png", c.ChartPath)
	}
	return CheckDatabaseName(c.DatabaseName)
}

// Run plays the story of the fair-queues article on a real worker fleet
// against a simulated provider, shows a live table while it runs, and
// returns the final report, which it also prints. When ctx ends before
// Duration, the story stops there and the report covers what ran.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, story: newStory(scale(cfg.Duration, 1/cfg.Speed), cfg.Seed)}
	return r.run(ctx)
}

// runner is one run of the demo.
type runner struct {
	cfg   Config
	story story

	app    *queue.Client // the application: enqueues, interactive calls, the live table
	db     *pgxpool.Pool // app's pool, for the demo's own queries (db/queries/demo.sql)
	th     *throttle.Throttle
	sim    *provider.Provider
	target string
	http   *http.Client
	start  time.Time
	drawn  int // lines of the live table on the terminal

	enqueued     atomic.Int64
	fleetPauses  atomic.Int64
	workerErrors atomic.Int64
	lastErr      atomic.Pointer[string]

	mu          sync.Mutex
	interactive []call
	storyErr    error
}

// call is one interactive call: when it was asked, sent (zero if the
// throttle never admitted it) and answered.
type call struct {
	asked, sent, done time.Time
	status            int
}

// quiet is the logger of the demo's clients: what goes wrong reaches the
// live table and the report through the pools' events instead.
var quiet = slog.New(slog.DiscardHandler)

func (r *runner) speed(d time.Duration) time.Duration { return scale(d, r.cfg.Speed) }

func (r *runner) run(ctx context.Context) (*Report, error) {
	out := r.cfg.Out
	fmt.Fprintf(out, "batchq demo: creating database %s and migrating it\n", r.cfg.DatabaseName)
	poolCfg, err := freshDatabase(ctx, r.cfg.DatabaseURL, r.cfg.DatabaseName)
	if err != nil {
		return nil, err
	}
	appPool, err := newPool(ctx, poolCfg, 8)
	if err != nil {
		return nil, err
	}
	defer appPool.Close()
	r.db = appPool
	if r.app, err = queue.NewClient(appPool, queue.Config{Logger: quiet}); err != nil {
		return nil, err
	}
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	stopProvider, err := r.startProvider()
	if err != nil {
		return nil, err
	}
	defer stopProvider()
	thCfg := throttle.Config{
		Reserve: reserve, Refill: throttle.TokenBucket,
		ProbeInterval: r.speed(time.Second), DefaultPause: r.speed(time.Second), MaxPause: r.speed(time.Minute),
	}
	if r.th, err = r.app.Throttle(quotaKey, thCfg); err != nil {
		return nil, err
	}
	if r.cfg.ConsoleAddr != "" {
		stopConsole, err := r.startConsole()
		if err != nil {
			fmt.Fprintf(out, "batchq demo: no console: %v\n", err)
		} else {
			defer stopConsole()
		}
	}
	fmt.Fprintf(out, "batchq demo: %d tenants, %s jobs, provider on %s; playing for %s at speed %s\n\n",
		len(r.story.Tenants), count(r.story.jobCount()), r.target, r.cfg.Duration, speedText(r.cfg.Speed))

	// The backlogs already waiting when the story starts go in first, so
	// every steady tenant is in the ring before the first claim.
	if err := r.enqueue(ctx, r.story.initial()); err != nil {
		return nil, err
	}
	// The fleet connects before the clock starts: the story's time is the
	// fleet's working time.
	type member struct {
		wc     queue.WorkerConfig
		client *queue.Client
	}
	members := make([]member, fleetPools)
	for i := range members {
		wc, client, closePool, err := r.worker(ctx, poolCfg, thCfg, i+1)
		if err != nil {
			return nil, err
		}
		defer closePool()
		members[i] = member{wc, client}
	}
	runCtx, stopRun := context.WithTimeout(ctx, r.cfg.Duration)
	defer stopRun()
	r.start = time.Now()
	var fleet sync.WaitGroup
	fleetErrs := make(chan error, fleetPools)
	for _, m := range members {
		fleet.Go(func() {
			if err := m.client.Work(runCtx, m.wc); err != nil {
				fleetErrs <- err
				stopRun()
			}
		})
	}
	var story, users sync.WaitGroup
	story.Go(func() { r.playStory(runCtx) })
	users.Go(func() { r.askInteractive(runCtx) })

	r.monitor(runCtx)
	early := ctx.Err() != nil
	story.Wait() // its last enqueue has committed: nothing is enqueued after the stop
	stop := time.Now()
	users.Wait()
	fleet.Wait()
	close(fleetErrs)
	if err := <-fleetErrs; err != nil {
		return nil, fmt.Errorf("batchq: demo: worker pool: %w", err)
	}
	if r.storyErr != nil {
		return nil, r.storyErr
	}

	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r.show(final)
	rep, jobs, err := r.report(final, stop)
	if err != nil {
		return nil, err
	}
	rep.Early = early
	if err := writeChart(r.cfg.ChartPath, rep, r.chartSeries(rep, jobs)); err != nil {
		return nil, err
	}
	rep.Chart = r.cfg.ChartPath
	rep.Print(out)
	if u := databaseURL(r.cfg.DatabaseURL, r.cfg.DatabaseName); r.cfg.ConsoleAddr != "" && u != "" {
		fmt.Fprintf(out, "\nbatchq demo: the database is kept; to look at it in the console again:\n  batchq console --database-url '%s'\n", u)
	}
	return rep, nil
}

// startConsole serves the web console over the demo's database, read-only,
// on cfg.ConsoleAddr, and prints its address.
func (r *runner) startConsole() (stop func(), err error) {
	h, err := console.Handler(r.app, &console.Options{Refresh: time.Second, Reserve: reserve, Logger: quiet})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", r.cfg.ConsoleAddr)
	if err != nil {
		return nil, err
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		h = console.LoopbackOnly(h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(r.cfg.Out, "batchq demo: watch it live in the console: http://%s/queues/%s?window=1m\n", ln.Addr(), queueName)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func newPool(ctx context.Context, cfg *pgxpool.Config, conns int32) (*pgxpool.Pool, error) {
	c := cfg.Copy()
	c.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: connect: %w", err)
	}
	return pool, nil
}

// setUp creates the queue and the tenants' plans.
func (r *runner) setUp(ctx context.Context) error {
	err := r.app.CreateQueue(ctx, queue.QueueConfig{
		Name: queueName, Quantum: quantum, Lease: time.Minute, MaxAttempts: 3, DefaultTTL: time.Hour,
	})
	if err != nil {
		return err
	}
	for _, t := range r.story.Tenants {
		if err := r.app.SetTenant(ctx, queue.Tenant{Name: t.Name, Weight: t.Weight}); err != nil {
			return err
		}
	}
	return nil
}

// startProvider serves a simulated provider on loopback.
func (r *runner) startProvider() (stop func(), err error) {
	r.sim, err = provider.New(provider.Config{
		RequestsPerWindow: providerRequests, TokensPerWindow: providerTokens,
		Window: r.speed(providerWindow), Refill: provider.TokenBucket,
		Latency: r.speed(providerLatency), Jitter: r.speed(providerJitter), Seed: r.cfg.Seed,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: provider: %w", err)
	}
	srv := &http.Server{Handler: r.sim, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	r.target = "http://" + ln.Addr().String() + "/v1/chat/completions"
	transport := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}
	r.http = &http.Client{Timeout: 30 * time.Second, Transport: transport}
	return func() {
		transport.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// worker builds one pool of the fleet, on a connection pool of its own.
func (r *runner) worker(ctx context.Context, poolCfg *pgxpool.Config, thCfg throttle.Config, n int) (queue.WorkerConfig, *queue.Client, func(), error) {
	pool, err := newPool(ctx, poolCfg, 10)
	if err != nil {
		return queue.WorkerConfig{}, nil, nil, err
	}
	client, err := queue.NewClient(pool, queue.Config{Logger: quiet})
	if err != nil {
		pool.Close()
		return queue.WorkerConfig{}, nil, nil, err
	}
	th, err := client.Throttle(quotaKey, thCfg)
	if err != nil {
		pool.Close()
		return queue.WorkerConfig{}, nil, nil, err
	}
	handler, err := queue.HTTPHandler(queue.HTTPConfig{Target: r.target, Client: r.http})
	if err != nil {
		pool.Close()
		return queue.WorkerConfig{}, nil, nil, err
	}
	return queue.WorkerConfig{
		Queue: queueName, Handler: handler, Throttle: th, Concurrency: poolConcurrency,
		Name:             fmt.Sprintf("worker-%d", n),
		PollInterval:     max(20*time.Millisecond, r.speed(250*time.Millisecond)),
		MaintainInterval: max(50*time.Millisecond, r.speed(time.Second)),
		ShutdownTimeout:  10 * time.Second,
		OnEvent:          r.onEvent,
		Logger:           quiet,
	}, client, pool.Close, nil
}

func (r *runner) onEvent(e queue.Event) {
	switch e.Kind {
	case queue.EventRateLimited:
		r.fleetPauses.Add(1)
	case queue.EventError:
		r.workerErrors.Add(1)
		if e.Err != nil {
			msg := e.Err.Error()
			r.lastErr.Store(&msg)
		}
	}
}

// playStory enqueues each later arrival of the story at its time.
func (r *runner) playStory(ctx context.Context) {
	for _, a := range r.story.later() {
		if !sleepUntil(ctx, r.start.Add(r.speed(a.At))) {
			return
		}
		if err := r.enqueue(ctx, []arrival{a}); err != nil {
			r.mu.Lock()
			r.storyErr = err
			r.mu.Unlock()
			return
		}
	}
}

// enqueue commits arrivals, each in one transaction.
func (r *runner) enqueue(ctx context.Context, arrivals []arrival) error {
	for _, a := range arrivals {
		jobs := make([]queue.NewJob, len(a.Jobs))
		for i, j := range a.Jobs {
			n := r.enqueued.Load() + int64(i) + 1
			jobs[i] = queue.NewJob{
				Queue: queueName, Tenant: a.Tenant, Kind: j.Kind, Cost: j.Cost,
				TTL: r.speed(j.TTL), Payload: j.payload(a.Tenant, n),
			}
		}
		// Not under ctx: an enqueue cut off at the stop could commit
		// without the demo knowing, and the report counts every job.
		res, err := r.app.EnqueueMany(context.WithoutCancel(ctx), jobs)
		if err != nil {
			return fmt.Errorf("batchq: demo: enqueue %d jobs of %s: %w", len(jobs), a.Tenant, err)
		}
		r.enqueued.Add(int64(len(res)))
	}
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// askInteractive makes an interactive call every interactiveEvery until ctx
// ends, and waits for the calls in flight.
func (r *runner) askInteractive(ctx context.Context) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x6173))
	t := time.NewTicker(r.speed(interactiveEvery))
	defer t.Stop()
	var calls sync.WaitGroup
	defer calls.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cost := 1000 + rng.Int64N(1001)
		calls.Go(func() { r.callInteractive(context.WithoutCancel(ctx), cost) })
	}
}

// callInteractive is a user asking the assistant: one provider call under
// the throttle the fleet shares, at interactive priority.
func (r *runner) callInteractive(ctx context.Context, cost int64) {
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Second, r.speed(10*time.Second)))
	defer cancel()
	c := call{asked: time.Now()}
	resp, err := queue.CallInteractive(ctx, r.th, cost, func(ctx context.Context) (*http.Response, error) {
		c.sent = time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.target, strings.NewReader(`{"tokens":`+strconv.FormatInt(cost, 10)+`}`))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(provider.TenantHeader, "assistant")
		return r.http.Do(req)
	})
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.status = resp.StatusCode
	}
	c.done = time.Now()
	r.mu.Lock()
	r.interactive = append(r.interactive, c)
	r.mu.Unlock()
}

func (r *runner) calls() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.interactive...)
}

// monitor shows the live table every RefreshEvery until ctx ends.
func (r *runner) monitor(ctx context.Context) {
	t := time.NewTicker(r.cfg.RefreshEvery)
	defer t.Stop()
	if r.cfg.Terminal {
		r.show(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.show(ctx)
		}
	}
}
