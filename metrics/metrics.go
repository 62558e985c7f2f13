package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/quotaheaders"
	"github.com/batchq/batchq/throttle"
)

// DefaultTopTenants is how many tenants of each queue get labels of their own
// when Config.TopTenants is 0.
const DefaultTopTenants = 20

// Config configures a Collector. The zero Config exports only the event-fed
// series, with every tenant under "other" (nothing says which tenants lead).
type Config struct {
	// Client reads the backlog and quota gauges at each scrape, and which
	// tenants lead (see RankInterval). nil: no gauges, and no tenant labels
	// but "other".
	Client *queue.Client
	// Queues limits the backlog gauges and the ranking to these queues; the
	// other queues' events are counted under tenant "other". nil: every queue.
	Queues []string
	// TopTenants is how many tenants of each queue, by queued tokens, get
	// series of their own; the rest are summed under tenant="other".
	// 0: DefaultTopTenants.
	TopTenants int
	// Throttles, by quota key, are the throttles whose headroom is exported
	// as batchq_quota_headroom. nil: none.
	Throttles map[string]*throttle.Throttle
	// RankInterval is how often the tenants are ranked to choose the named
	// ones: an aggregate of every unfinished job by tenant, seconds with a
	// million tenants, so it runs in the background and scrapes in between
	// reuse its result. 0: 1 minute.
	RankInterval time.Duration
	// ScrapeTimeout bounds the database reads of one scrape; a scrape waits
	// for a ranking it started for at most half of it. 0: 5s.
	ScrapeTimeout time.Duration
	// Logger receives the errors of those reads. nil: slog.Default().
	Logger *slog.Logger
}

// Collector is a prometheus.Collector of batchq's metrics (see the package
// documentation for the list). It is safe for concurrent use; create it with
// New.
type Collector struct {
	cfg    Config
	log    *slog.Logger
	labels *tenantLabels
	now    func() time.Time

	// Per queue and tenant, named or "other": recorded under labels.mu.
	claimedJobs     *prometheus.CounterVec
	claimedTokens   *prometheus.CounterVec
	wait            *prometheus.HistogramVec
	finishedJobs    *prometheus.CounterVec
	finishedEst     *prometheus.CounterVec
	finishedActual  *prometheus.CounterVec
	expiredJobs     *prometheus.CounterVec
	expiredTokens   *prometheus.CounterVec
	queueFull       *prometheus.CounterVec
	perTenant       []deleter
	duration        *prometheus.HistogramVec
	throttleWaits   *prometheus.CounterVec
	throttleSeconds *prometheus.CounterVec
	interWait       *prometheus.HistogramVec
	interTokens     *prometheus.CounterVec
	rateLimited     *prometheus.CounterVec
	pausedSeconds   *prometheus.CounterVec
	longPauses      *prometheus.CounterVec
	errors          *prometheus.CounterVec
	events          []prometheus.Collector

	// The end of the latest announced wait, per wait kind and labels, so
	// overlapping announcements count once.
	untilMu sync.Mutex
	until   map[[3]string]time.Time

	scrapeMu sync.Mutex // one set of database reads at a time

	rankMu   sync.Mutex
	ranking  chan struct{}    // closed when the running ranking ends; nil: none runs
	rankedAt time.Time        // when the latest ranking ended
	rankErr  error            // its error
	tenants  map[string]int64 // its count of tenants with unfinished jobs, by queue

	queuedJobs, queuedTokens, oldestAge, runningJobs, retryingJobs, scheduledJobs *prometheus.Desc
	backlogTenants, queuePaused                                                   *prometheus.Desc
	quotaLimit, quotaRemaining, pauseRemaining, headroom, dbUp                    *prometheus.Desc
}

type deleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

var (
	// waitBuckets span a claim within the second to a backlog of a day.
	waitBuckets = []float64{0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400}
	// durationBuckets span a fast completion to a long generation.
	durationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// interactiveBuckets are for a user who is waiting.
	interactiveBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// New returns a Collector for cfg, or an error naming the invalid field.
func New(cfg Config) (*Collector, error) {
	if cfg.TopTenants < 0 {
		return nil, errors.New("batchq: metrics: Config.TopTenants must be >= 0")
	}
	if cfg.ScrapeTimeout < 0 || cfg.RankInterval < 0 {
		return nil, errors.New("batchq: metrics: Config.ScrapeTimeout and RankInterval must be >= 0")
	}
	if cfg.TopTenants == 0 {
		cfg.TopTenants = DefaultTopTenants
	}
	if cfg.ScrapeTimeout == 0 {
		cfg.ScrapeTimeout = 5 * time.Second
	}
	if cfg.RankInterval == 0 {
		cfg.RankInterval = time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// Events name tenants only of the queues the ranking covers: the others'
	// are all "other".
	var admits func(string) bool
	if cfg.Client != nil {
		admits = func(q string) bool { return cfg.Queues == nil || slices.Contains(cfg.Queues, q) }
	}
	c := &Collector{
		cfg: cfg, log: log, labels: newTenantLabels(cfg.TopTenants, admits), now: time.Now,
		until: map[[3]string]time.Time{},
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		c.events = append(c.events, v)
		return v
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		c.events = append(c.events, v)
		return v
	}
	c.claimedJobs = counter("batchq_claimed_jobs_total",
		"Jobs a worker pool of this process claimed and started.", "queue", "tenant")
	c.claimedTokens = counter("batchq_claimed_tokens_total",
		"Estimated tokens of the jobs claimed and started.", "queue", "tenant")
	c.wait = histogram("batchq_job_wait_seconds",
		"Time from a job's enqueue to its claim, for each job claimed and started.", waitBuckets, "queue", "tenant")
	c.finishedJobs = counter("batchq_finished_jobs_total",
		"Job attempts that ended, by outcome: succeeded, failed, discarded and cancelled end the job; retrying, released and lease_lost end the attempt; unrecorded could not be written, and the job will run again.",
		"queue", "tenant", "outcome")
	c.finishedEst = counter("batchq_finished_estimated_tokens_total",
		"Estimated tokens of the job attempts that ended, by outcome.", "queue", "tenant", "outcome")
	c.finishedActual = counter("batchq_finished_actual_tokens_total",
		"Actual tokens the handlers reported for the job attempts that ended, by outcome.", "queue", "tenant", "outcome")
	c.expiredJobs = counter("batchq_expired_jobs_total",
		"Jobs a claim or the pool's maintenance found past their deadline and recorded as expired.", "queue", "tenant")
	c.expiredTokens = counter("batchq_expired_tokens_total",
		"Estimated tokens of the jobs a claim or the pool's maintenance found expired.", "queue", "tenant")
	c.queueFull = counter("batchq_queue_full_rejected_jobs_total",
		"Jobs an enqueue could not add because the tenant's queue was full (ObserveEnqueueError).", "queue", "tenant")
	c.perTenant = []deleter{c.claimedJobs, c.claimedTokens, c.wait, c.finishedJobs, c.finishedEst,
		c.finishedActual, c.expiredJobs, c.expiredTokens, c.queueFull}
	c.duration = histogram("batchq_job_duration_seconds",
		"How long handlers ran, for the attempts whose run time is known, by outcome.", durationBuckets, "queue", "outcome")
	c.throttleWaits = counter("batchq_batch_throttle_waits_total",
		"Times a worker pool found no quota for its next job at batch priority and waited.", "queue", "key")
	c.throttleSeconds = counter("batchq_batch_throttle_wait_seconds_total",
		"Seconds worker pools were told to wait for quota at batch priority (the union of the waits).", "queue", "key")
	c.interWait = histogram("batchq_interactive_wait_seconds",
		"Time an interactive call waited for the throttle to admit it (or gave up).", interactiveBuckets, "key")
	c.interTokens = counter("batchq_interactive_tokens_total",
		"Estimated tokens of the interactive calls admitted.", "key")
	c.rateLimited = counter("batchq_rate_limited_responses_total",
		"429 responses received from the provider, by the priority of the call.", "key", "priority")
	c.pausedSeconds = counter("batchq_quota_paused_seconds_total",
		"Seconds of pause the provider's 429s announced (Retry-After), counted once where pauses overlap.", "key")
	c.longPauses = counter("batchq_quota_long_pauses_total",
		"429s after which the fleet paused for more than a minute (each is logged with its key, reason and end).", "key")
	c.errors = counter("batchq_worker_errors_total",
		"Database or bookkeeping errors of the worker pools.", "queue")

	qt := []string{"queue", "tenant"}
	c.queuedJobs = prometheus.NewDesc("batchq_queued_jobs", "Jobs queued, waiting for their turn.", qt, nil)
	c.queuedTokens = prometheus.NewDesc("batchq_queued_tokens", "Estimated tokens of the queued jobs.", qt, nil)
	c.oldestAge = prometheus.NewDesc("batchq_oldest_queued_job_age_seconds", "Age of the oldest queued job.", qt, nil)
	c.runningJobs = prometheus.NewDesc("batchq_running_jobs", "Jobs claimed and running under a lease.", qt, nil)
	c.retryingJobs = prometheus.NewDesc("batchq_retrying_jobs", "Jobs waiting for their backoff before they rejoin the queue.", qt, nil)
	c.scheduledJobs = prometheus.NewDesc("batchq_scheduled_jobs", "Jobs waiting for their run-at before they join the queue.", qt, nil)
	c.backlogTenants = prometheus.NewDesc("batchq_backlog_tenants",
		"Tenants with unfinished jobs in the queue, named or not, as of the latest ranking.", []string{"queue"}, nil)
	c.queuePaused = prometheus.NewDesc("batchq_queue_paused", "1 while the queue is paused (batchq queues pause): its workers claim nothing.", []string{"queue"}, nil)
	c.quotaLimit = prometheus.NewDesc("batchq_quota_limit", "The quota's limit, as the provider last reported it.", []string{"key", "unit"}, nil)
	c.quotaRemaining = prometheus.NewDesc("batchq_quota_remaining", "What was left of the quota, as the provider last reported it.", []string{"key", "unit"}, nil)
	c.pauseRemaining = prometheus.NewDesc("batchq_quota_pause_remaining_seconds", "How long every call stays paused after a 429; 0 when not paused.", []string{"key"}, nil)
	c.headroom = prometheus.NewDesc("batchq_quota_headroom",
		"What calls of the priority could start now; for batch, what is left above the interactive reserve.", []string{"key", "unit", "priority"}, nil)
	c.dbUp = prometheus.NewDesc("batchq_database_up", "1 if the latest scrape read the gauges from the database, 0 if it failed.", nil, nil)
	return c, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.events {
		v.Describe(ch)
	}
	// The gauges too, though without a Client they are never collected: the
	// set described is the same for every Collector.
	for _, d := range []*prometheus.Desc{c.queuedJobs, c.queuedTokens, c.oldestAge, c.runningJobs, c.retryingJobs,
		c.scheduledJobs, c.backlogTenants, c.queuePaused, c.quotaLimit, c.quotaRemaining, c.pauseRemaining, c.headroom, c.dbUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the event-fed series, then the
// gauges read from the database now. A failed read is logged and reported
// as batchq_database_up 0, and the other series are still exported.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	// The events first: a tenant this scrape drops from the named ones then
	// still has its last counts exported.
	for _, v := range c.events {
		v.Collect(ch)
	}
	if c.cfg.Client == nil {
		return
	}
	c.scrapeMu.Lock()
	defer c.scrapeMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ScrapeTimeout)
	defer cancel()
	up := 1.0
	if err := c.rank(ctx); err != nil {
		c.log.Error("metrics: ranking the tenants failed", "err", err)
		up = 0
	}
	if err := c.collectBacklog(ctx, ch); err != nil {
		c.log.Error("metrics: reading the backlog failed", "err", err)
		up = 0
	}
	if err := c.collectQuota(ctx, ch); err != nil {
		c.log.Error("metrics: reading the quota failed", "err", err)
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.dbUp, prometheus.GaugeValue, up)
}

// OnEvent returns a hook for queue.WorkerConfig.OnEvent that records a
// worker pool's events. quotaKey is the key of the pool's throttle, the key
// label of its throttle waits and 429s; "" for a pool without one.
func (c *Collector) OnEvent(quotaKey string) func(queue.Event) {
	return func(e queue.Event) { c.observe(quotaKey, e) }
}

func (c *Collector) observe(key string, e queue.Event) {
	switch e.Kind {
	case queue.EventClaimed:
		c.perTenantEvent(e, func(q, t string) {
			c.claimedJobs.WithLabelValues(q, t).Inc()
			c.claimedTokens.WithLabelValues(q, t).Add(float64(e.Job.Cost))
			c.wait.WithLabelValues(q, t).Observe(max(e.Wait, 0).Seconds())
		})
	case queue.EventFinished:
		c.perTenantEvent(e, func(q, t string) {
			c.finishedJobs.WithLabelValues(q, t, e.Outcome).Inc()
			c.finishedEst.WithLabelValues(q, t, e.Outcome).Add(float64(e.Job.Cost))
			if e.ActualCost > 0 {
				c.finishedActual.WithLabelValues(q, t, e.Outcome).Add(float64(e.ActualCost))
			}
		})
		if e.Duration > 0 {
			c.duration.WithLabelValues(e.Queue, e.Outcome).Observe(e.Duration.Seconds())
		}
	case queue.EventExpired:
		c.perTenantEvent(e, func(q, t string) {
			c.expiredJobs.WithLabelValues(q, t).Inc()
			c.expiredTokens.WithLabelValues(q, t).Add(float64(e.Job.Cost))
		})
	case queue.EventThrottled:
		c.throttleWaits.WithLabelValues(e.Queue, key).Inc()
		c.throttleSeconds.WithLabelValues(e.Queue, key).Add(c.announce("throttle", e.Queue, key, e.Wait))
	case queue.EventRateLimited:
		c.rateLimited.WithLabelValues(key, throttle.Batch.String()).Inc()
		c.pausedSeconds.WithLabelValues(key).Add(c.announce("pause", "", key, e.Wait))
		// Without a quota key the wait is that job's, not a pause of the fleet.
		if e.Wait > time.Minute && key != "" {
			c.longPauses.WithLabelValues(key).Inc()
		}
	case queue.EventError:
		c.errors.WithLabelValues(e.Queue).Inc()
	}
}

// ObserveEnqueueError records a queue_full rejection when err, the error of
// one of the queue's Enqueue functions, is a *queue.QueueFullError; any other
// error, or nil, records nothing. Rejections happen where jobs are enqueued,
// not in the workers, so the enqueueing code calls this.
func (c *Collector) ObserveEnqueueError(err error) {
	var full *queue.QueueFullError
	if !errors.As(err, &full) {
		return
	}
	c.labels.record(full.Queue, full.Tenant, func(tenant string) {
		c.queueFull.WithLabelValues(full.Queue, tenant).Add(float64(full.Adding))
	})
}

// perTenantEvent records a job's event under its queue and tenant label,
// holding the labels' lock so a refresh cannot drop the tenant midway.
func (c *Collector) perTenantEvent(e queue.Event, record func(queue, tenant string)) {
	if e.Job == nil {
		return
	}
	c.labels.record(e.Queue, e.Job.Tenant, func(tenant string) { record(e.Queue, tenant) })
}

// announce returns the seconds of a wait of d announced now that no earlier
// announcement of the same kind and labels already covers.
func (c *Collector) announce(kind, queue, key string, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	now := c.now()
	end := now.Add(d)
	c.untilMu.Lock()
	defer c.untilMu.Unlock()
	k := [3]string{kind, queue, key}
	from := now
	if prev := c.until[k]; prev.After(from) {
		from = prev
	}
	if !end.After(from) {
		return 0
	}
	c.until[k] = end
	return end.Sub(from).Seconds()
}

// CallInteractive is queue.CallInteractive that records the call: how long
// the throttle kept it waiting (batchq_interactive_wait_seconds, also when
// it gave up), its estimated tokens once admitted, and a 429 answer. key is
// th's quota key. The throttle's waits can only be seen from inside the
// call, so interactive code that wants them measured calls this instead.
func (c *Collector) CallInteractive(ctx context.Context, key string, th *throttle.Throttle, cost int64,
	call func(context.Context) (*http.Response, error)) (*http.Response, error) {
	start := c.now()
	admitted := false
	resp, err := queue.CallInteractive(ctx, th, cost, func(ctx context.Context) (*http.Response, error) {
		admitted = true
		c.interWait.WithLabelValues(key).Observe(c.now().Sub(start).Seconds())
		c.interTokens.WithLabelValues(key).Add(float64(cost))
		return call(ctx)
	})
	if !admitted {
		c.interWait.WithLabelValues(key).Observe(c.now().Sub(start).Seconds())
	}
	if resp != nil && resp.StatusCode == http.StatusTooManyRequests {
		c.rateLimited.WithLabelValues(key, throttle.Interactive.String()).Inc()
		// A date in Retry-After is on the provider's clock, as the pools
		// read it.
		d, _ := quotaheaders.RetryAfter(resp.Header, quotaheaders.ProviderClock(resp.Header, c.now()))
		c.pausedSeconds.WithLabelValues(key).Add(c.announce("pause", "", key, d))
	}
	return resp, err
}
