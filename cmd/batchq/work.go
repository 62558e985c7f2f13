package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"

	dec "github.com/batchq/batchq/internal/decimal"
)

func workCommand() *cli.Command {
	return &cli.Command{
		Name:  "work",
		Usage: "run a worker pool that POSTs each job's payload to an HTTP endpoint",
		Description: `Each job's payload is POSTed to --target with Content-Type: application/json,
Idempotency-Key: batchq-<job id>, Batchq-Job-Id, Batchq-Tenant and Batchq-Attempt.
A 2xx answer succeeds (its body is the result, its usage the actual cost: total_tokens, or
prompt_tokens + completion_tokens, or input_tokens + cache_creation_input_tokens +
output_tokens); a 429 hands the job back (with --quota-key, pausing every worker of the key per
Retry-After, at most --max-retry-after; without, that job waits for it, at most 24h); 408,
409, 5xx and network errors are retried with backoff; other 4xx and 3xx are discarded. With --quota-key the
workers of every process using that key pace from one shared throttle.
SIGINT or SIGTERM stops claiming and finishes running jobs.

A paused queue (batchq queues pause) hands out nothing: the workers finish what they
run, log that the queue is paused, and wait for it to be resumed. With --drain the
command exits instead, with exit code 3.

When it stops, it prints what it and its maintenance recorded: succeeded, failed for
good, retried, expired, discarded, cancelled, handed back, and the time taken. It exits non-zero when any
outcome could not be recorded (those jobs run again once their leases expire).`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "queue", Usage: "required: the queue to work", EnvVars: []string{"BATCHQ_QUEUE"}},
			&cli.StringFlag{Name: "target", Usage: "required: the http(s) URL each job's payload is POSTed to, without whitespace (a space is %20)", EnvVars: []string{"BATCHQ_TARGET"}},
			&cli.IntFlag{Name: "concurrency", Usage: "requests in flight at once", Value: 8, EnvVars: []string{"BATCHQ_CONCURRENCY"}},
			&cli.IntFlag{Name: "batch-size", Usage: "most jobs claimed at once", DefaultText: "--concurrency", EnvVars: []string{"BATCHQ_BATCH_SIZE"}},
			&cli.StringFlag{Name: "quota-key", Usage: "pace from the shared throttle of this key, e.g. openai/gpt-4o (empty: no throttle)", EnvVars: []string{"BATCHQ_QUOTA_KEY"}},
			&cli.Float64Flag{Name: "reserve", Usage: "fraction of the quota left to interactive calls, in [0,1)", Value: 0.2, EnvVars: []string{"BATCHQ_RESERVE"}},
			&cli.StringFlag{Name: "refill", Usage: "how the provider refills its quota: window or bucket", Value: "window", EnvVars: []string{"BATCHQ_REFILL"}},
			&cli.DurationFlag{Name: "reorder", Usage: "with --quota-key: how much later than a call counted after it a call may reach the provider (the spread of the fleet's hand-off and network delays), at most 1m; the throttle keeps that much of what it counted against each response's numbers", Value: 5 * time.Millisecond, EnvVars: []string{"BATCHQ_REORDER"}},
			&cli.DurationFlag{Name: "max-retry-after", Usage: "with --quota-key: the longest pause a 429's Retry-After may ask for, at most 24h; longer ones are cut to it", Value: time.Hour, EnvVars: []string{"BATCHQ_MAX_RETRY_AFTER"}},
			&cli.StringSliceFlag{Name: "header-env", Usage: "add header NAME with the value of environment variable VAR, as NAME=VAR (repeatable); secrets never go on the command line; headers the worker or its HTTP client set (Content-Type, Idempotency-Key, Batchq-*, Host, Content-Length, Connection, ...) are refused", EnvVars: []string{"BATCHQ_HEADER_ENV"}},
			&cli.DurationFlag{Name: "timeout", Usage: "how long one request may take", Value: 2 * time.Minute, EnvVars: []string{"BATCHQ_TIMEOUT"}},
			&cli.DurationFlag{Name: "shutdown-timeout", Usage: "how long a shutdown waits for running requests", Value: 30 * time.Second, EnvVars: []string{"BATCHQ_SHUTDOWN_TIMEOUT"}},
			&cli.DurationFlag{Name: "poll-interval", Usage: "how often to look for work when no notification arrives", Value: time.Second, EnvVars: []string{"BATCHQ_POLL_INTERVAL"}},
			&cli.DurationFlag{Name: "maintain-interval", Usage: "how often to rescue jobs whose lease expired, expire overdue jobs, requeue due retries and scheduled jobs, and fire the queue's schedules (negative: never)", Value: time.Second, EnvVars: []string{"BATCHQ_MAINTAIN_INTERVAL"}},
			&cli.StringFlag{Name: "name", Usage: "this worker's name in outcomes and logs (default host:pid)", EnvVars: []string{"BATCHQ_WORKER_NAME"}},
			&cli.BoolFlag{Name: "drain", Usage: "exit once the queue has nothing queued, running, waiting to retry or scheduled", EnvVars: []string{"BATCHQ_DRAIN"}},
			metricsAddrFlag(),
			metricsTopTenantsFlag(),
			commandFormatFlag(),
		},
		Action: runWork,
	}
}

func runWork(c *cli.Context) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := requireFlags(c, "queue", "target"); err != nil {
		return err
	}
	target, err := targetFlag(c.String("target"))
	if err != nil {
		return err
	}
	header, err := headersFromEnv(c.StringSlice("header-env"))
	if err != nil {
		return err
	}
	if n := c.Int("concurrency"); n < 1 || n > 10000 {
		return usagef("batchq: --concurrency %d: must be in 1..10000", n)
	}
	if n := c.Int("batch-size"); n < 0 || n > 10000 {
		return usagef("batchq: --batch-size %d: must be in 0..10000", n)
	}
	// http.Client takes 0 for no timeout at all, and then a request that
	// never ends holds its job and a slot of --concurrency.
	if d := c.Duration("timeout"); d <= 0 {
		return usagef("batchq: --timeout %s: must be > 0", d)
	}
	// The pool takes a zero for its default; a zero or a negative given on
	// the command line is a mistake, not a wish for the default.
	if d := c.Duration("poll-interval"); d <= 0 {
		return usagef("batchq: --poll-interval %s: must be > 0", d)
	}
	if d := c.Duration("shutdown-timeout"); d <= 0 {
		return usagef("batchq: --shutdown-timeout %s: must be > 0", d)
	}
	if d := c.Duration("maintain-interval"); d == 0 {
		return usagef("batchq: --maintain-interval 0s: must be > 0, or negative for never")
	}
	if d := c.Duration("max-retry-after"); d <= 0 || d > throttle.PauseLimit {
		return usagef("batchq: --max-retry-after %s: must be in (0s, %s]", d, throttle.PauseLimit)
	}
	if d := c.Duration("reorder"); d <= 0 || d > time.Minute {
		return usagef("batchq: --reorder %s: must be in (0s, 1m0s]", d)
	}
	// Checked with or without --quota-key: a bad value is a mistake either way.
	if r := c.Float64("reserve"); !(r >= 0 && r < 1) {
		return usagef("batchq: --reserve %s: must be in [0,1)", dec.Format(r))
	}
	var refill throttle.Refill
	switch c.String("refill") {
	case "window":
		refill = throttle.Window
	case "bucket":
		refill = throttle.TokenBucket
	default:
		return usagef("batchq: --refill %q: must be window or bucket", c.String("refill"))
	}
	// Given to this command without a quota key, they would set nothing;
	// from the environment (BATCHQ_RESERVE, say, set for a whole fleet) they
	// may be meant for other workers, and are only checked.
	if err := goesWith(c, "quota-key", "without a quota key there is no throttle",
		"reserve", "refill", "reorder", "max-retry-after"); err != nil {
		return err
	}

	metricsAt, err := checkMetricsFlags(c)
	if err != nil {
		return err
	}

	cfg, err := poolConfig(c)
	if err != nil {
		return err
	}
	// Claims, finishes, heartbeats, maintenance, the throttle and the
	// notification listener each want a connection now and then.
	cfg.MaxConns = int32(min(8+c.Int("concurrency")/4, 64))
	pool, err := pgxpool.NewWithConfig(c.Context, cfg)
	if err != nil {
		return fmt.Errorf("batchq: connect: %w", err)
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	client, err := queue.NewClient(pool, queue.Config{Logger: log})
	if err != nil {
		return err
	}
	handler, err := queue.HTTPHandler(queue.HTTPConfig{
		Target: target.String(), Header: header, Client: &http.Client{Timeout: c.Duration("timeout")},
	})
	if err != nil {
		return err
	}
	wc := queue.WorkerConfig{
		Queue: c.String("queue"), Handler: handler, Concurrency: c.Int("concurrency"), BatchSize: c.Int("batch-size"),
		Name: c.String("name"), PollInterval: c.Duration("poll-interval"), MaintainInterval: c.Duration("maintain-interval"),
		ShutdownTimeout: c.Duration("shutdown-timeout"), Drain: c.Bool("drain"), Logger: log,
	}
	if key := c.String("quota-key"); key != "" {
		wc.Throttle, err = client.Throttle(key, throttle.Config{Reserve: c.Float64("reserve"), Refill: refill,
			MaxRetryAfter: c.Duration("max-retry-after"), Reorder: c.Duration("reorder")})
		if err != nil {
			// The key's rule; the throttle's settings were checked above.
			return settingUsage(err, "quota key")
		}
	}
	// Before anything starts or says it is working: the worker's name, and
	// the queue (which needs the database, so an unreachable one stops the
	// command here too).
	if err := refuseEmpty(c, "leave it out for host:pid", "name"); err != nil {
		return err
	}
	if rule := queue.NameRule(wc.Name); wc.Name != "" && rule != "" {
		return usagef("batchq: --name: %s", rule)
	}
	if _, err := client.Queue(c.Context, wc.Queue); errors.Is(err, queue.ErrUnknownQueue) {
		msg := strings.TrimPrefix(err.Error(), "batchq: ")
		if queue.ValidQueueName(wc.Queue) {
			// A name queues create takes; others say their rule instead.
			msg += fmt.Sprintf(" (batchq queues create %s makes it)", wc.Queue)
		}
		return usagef("batchq: --queue: %s", msg)
	} else if err != nil {
		return err
	}
	stopMetrics, err := startMetrics(c, metricsAt, client, &wc, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	ran := &workTally{}
	if prev := wc.OnEvent; prev != nil {
		wc.OnEvent = func(e queue.Event) { prev(e); ran.add(e) }
	} else {
		wc.OnEvent = ran.add
	}
	log.Info("working", "queue", wc.Queue, "target", redact(target), "concurrency", wc.Concurrency, "quota_key", c.String("quota-key"))
	if wc.Drain && wc.MaintainInterval < 0 {
		// The pool cannot tell whether another worker maintains the queue.
		log.Warn("--drain with maintenance off: retries and scheduled jobs run only once another worker's maintenance " +
			"requeues them, so without one the drain waits for them for ever")
	}
	start := time.Now()
	worked := make(chan struct{})
	go func() {
		select {
		case <-c.Context.Done():
			log.Info("stopping: no more claims; running requests have up to --shutdown-timeout to finish; "+
				"interrupt again to stop at once (their jobs are then rescued when their leases expire)",
				"shutdown_timeout", wc.ShutdownTimeout)
		case <-worked:
		}
	}()
	// What ran is said however the pool stopped: a queue deleted under it
	// (ErrUnknownQueue, after claims were refused for a while) too.
	err = client.Work(c.Context, wc)
	close(worked)
	if werr := ran.write(c, wc.Queue, time.Since(start)); werr != nil && err == nil {
		err = werr
	}
	return workStopped(wc.Queue, err)
}

// workStopped words the error Work stopped with. A paused queue under
// --drain exits 3 (exitPaused). A queue deleted while the pool ran is a
// failure of the run (1), not of the command line, whose --queue named a
// queue that was there (2 is kept for that): the error no longer matches
// ErrUnknownQueue.
func workStopped(queueName string, err error) error {
	switch {
	case errors.Is(err, queue.ErrQueuePaused):
		return fmt.Errorf("batchq: work --drain: queue %s is paused, so it cannot be drained: the jobs it had running are done; "+
			"resume it (batchq queues resume %s) and run again: %w", queueName, queueName, err)
	case errors.Is(err, queue.ErrUnknownQueue):
		return fmt.Errorf("batchq: work: queue %s was deleted while the worker ran: %s", queueName,
			strings.TrimPrefix(err.Error(), "batchq: "))
	}
	return err
}

// workTally counts what a worker pool ran, by outcome, for the summary work
// prints when it stops.
type workTally struct {
	mu sync.Mutex
	n  map[string]int64
}

func (t *workTally) add(e queue.Event) {
	var what string
	switch e.Kind {
	case queue.EventFinished:
		what = e.Outcome
	case queue.EventExpired:
		what = "expired"
	default:
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int64{}
	}
	t.n[what]++
}

// workOutcomes are the summary's columns, in the pool's words (Event's
// Outcome) and the summary's.
var workOutcomes = []struct{ outcome, column, words string }{
	{"succeeded", "succeeded", "succeeded"},
	{"failed", "failed", "failed for good"},
	{"retrying", "retried", "failed and will be retried"},
	{"expired", "expired", "expired"},
	{"discarded", "discarded", "discarded"},
	{"cancelled", "cancelled", "cancelled"},
	{"released", "handed_back", "handed back unstarted"},
	{"lease_lost", "lease_lost", "lost their lease"},
	{"unrecorded", "unrecorded", "could not be recorded"},
}

func (t *workTally) write(c *cli.Context, queueName string, took time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cols := []string{"queue"}
	vals := []any{queueName}
	var parts []string
	for _, o := range workOutcomes {
		n := t.n[o.outcome]
		cols = append(cols, o.column)
		vals = append(vals, n)
		// The summary line names what happened, and always the successes.
		if n > 0 || o.outcome == "succeeded" {
			parts = append(parts, fmt.Sprintf("%d %s", n, o.words))
		}
	}
	cols = append(cols, "took")
	vals = append(vals, took)
	d := newDataset(cols...)
	d.add(vals...)
	return writeResult(c, fmt.Sprintf("worked queue %s for %s: %s", queueName, took.Round(time.Millisecond), strings.Join(parts, ", ")), d)
}

// headersFromEnv builds request headers from NAME=VAR pairs, reading each
// value from the environment, so that no secret is ever on a command line.
func headersFromEnv(pairs []string) (http.Header, error) {
	h := http.Header{}
	for _, p := range pairs {
		name, env, ok := strings.Cut(p, "=")
		name, env = strings.TrimSpace(name), strings.TrimSpace(env)
		if !ok || name == "" || env == "" {
			return nil, usagef("batchq: --header-env %q: must be NAME=ENVIRONMENT_VARIABLE", p)
		}
		if !validHeaderName(name) {
			return nil, usagef("batchq: --header-env %q: header name %q must be letters, digits and ! # $ %% & ' * + - . ^ _ ` | ~", p, name)
		}
		if why := queue.ReservedHeader(name); why != "" {
			return nil, usagef("batchq: --header-env %q: %s", p, why)
		}
		v, set := os.LookupEnv(env)
		if !set {
			return nil, usagef("batchq: --header-env %s: environment variable %s is not set", name, env)
		}
		if v == "" {
			return nil, usagef("batchq: --header-env %s: environment variable %s is empty", name, env)
		}
		// The value is a secret: the error names the variable, not what it holds.
		if !validHeaderValue(v) {
			return nil, usagef("batchq: --header-env %s=%s: environment variable %s holds a control character, which a header value must not", name, env, env)
		}
		h.Add(name, v)
	}
	return h, nil
}

// validHeaderName reports whether name is an HTTP field name: a token of
// RFC 9110, section 5.6.2. net/http refuses any other at request time.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v can be sent as an HTTP field value:
// no control characters but tab (RFC 9110, section 5.5), as net/http checks.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// targetFlag reads --target: an http or https URL, without whitespace or
// control characters, which url.Parse would take and escape (a space became
// %20). Its errors show the value as typed, without its credentials and
// query (shownTarget), which may hold a key.
func targetFlag(s string) (*url.URL, error) {
	odd := func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }
	if strings.IndexFunc(s, odd) >= 0 {
		where := ""
		if strings.IndexFunc(shownTarget(s), odd) < 0 {
			where = " (in its credentials or query, which are not shown)"
		}
		return nil, usagef("batchq: --target %q: must not contain whitespace or control characters%s", shownTarget(s), where)
	}
	target, err := url.Parse(s)
	if err != nil {
		// The parser's error repeats the value, which may hold a key.
		return nil, usagef("batchq: --target %q: must be an http or https URL (it does not parse as a URL)", shownTarget(s))
	}
	if (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return nil, usagef("batchq: --target %q: must be an http or https URL", shownTarget(s))
	}
	return target, nil
}

// shownTarget is --target as typed, for an error, without what may be a
// secret: what comes before an @ in the host part, and everything from the
// first ?. It works on the text, as typed, whether or not it parses.
func shownTarget(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s = s[:i]
	}
	prefix := ""
	if i := strings.Index(s, "//"); i >= 0 && !strings.Contains(s[:i], "/") {
		prefix, s = s[:i+2], s[i+2:]
	}
	host := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		host = s[:i]
	}
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		s = s[at+1:]
	}
	return prefix + s
}

// redact drops credentials and the query from a URL before it is logged.
func redact(u *url.URL) string {
	r := *u
	r.User, r.RawQuery = nil, ""
	return r.String()
}
