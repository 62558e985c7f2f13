package metrics

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// rank starts a ranking of the tenants when the latest is RankInterval old
// (or failed) and none runs, and waits for a running one while half the
// scrape's budget allows; a slower one goes on in the background and a later
// scrape uses it. It returns the error of a ranking that failed since the
// last scrape, once: a ranking that failed in a blip must not mark the
// database down until the next one, a RankInterval later.
func (c *Collector) rank(ctx context.Context) error {
	c.rankMu.Lock()
	if c.ranking == nil && (c.rankedAt.IsZero() || c.now().Sub(c.rankedAt) >= c.cfg.RankInterval) {
		c.ranking = make(chan struct{})
		go c.runRanking(c.ranking)
	}
	done := c.ranking
	c.rankMu.Unlock()
	if done != nil {
		wait, cancel := context.WithTimeout(ctx, c.cfg.ScrapeTimeout/2)
		defer cancel()
		select {
		case <-done:
		case <-wait.Done():
		}
	}
	c.rankMu.Lock()
	defer c.rankMu.Unlock()
	err := c.rankErr
	c.rankErr = nil
	return err
}

// runRanking reads the leaders of each queue and names them.
func (c *Collector) runRanking(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithTimeout(context.Background(), max(c.cfg.RankInterval, c.cfg.ScrapeTimeout))
	defer cancel()
	rows, err := c.cfg.Client.LeadingTenants(ctx, c.cfg.TopTenants, c.cfg.Queues)
	if err == nil {
		top := map[string][]string{}
		tenants := map[string]int64{}
		for _, r := range rows {
			top[r.Queue] = append(top[r.Queue], r.Tenant)
			tenants[r.Queue] = r.Tenants
		}
		c.labels.refresh(top, c.dropTenant)
		c.rankMu.Lock()
		c.tenants = tenants
		c.rankMu.Unlock()
	} else {
		err = fmt.Errorf("batchq: metrics: rank tenants: %w", err)
	}
	c.rankMu.Lock()
	defer c.rankMu.Unlock()
	c.ranking, c.rankErr = nil, err
	if err == nil {
		c.rankedAt = c.now()
	} else {
		c.rankedAt = time.Time{} // the next scrape tries again
	}
}

// dropTenant deletes the event-fed series of a tenant no longer named.
func (c *Collector) dropTenant(queue, tenant string) {
	for _, v := range c.perTenant {
		v.DeletePartialMatch(prometheus.Labels{"queue": queue, "tenant": tenant})
	}
}

// backlog is what the backlog gauges say of one queue and tenant label.
type backlog struct {
	queuedJobs, queuedTokens, running, retrying, scheduled int64
	oldestAge                                              float64
}

func (b *backlog) add(r queue.BacklogTotalRow) {
	b.queuedJobs += r.QueuedJobs
	b.queuedTokens += r.QueuedTokens
	b.running += r.RunningJobs
	b.retrying += r.RetryingJobs
	b.scheduled += r.ScheduledJobs
	b.oldestAge = max(b.oldestAge, r.OldestQueuedAge.Seconds())
}

// collectBacklog sends the backlog gauges of the named tenants and of the
// rest, and the number of tenants.
func (c *Collector) collectBacklog(ctx context.Context, ch chan<- prometheus.Metric) error {
	rows, err := c.cfg.Client.BacklogTotals(ctx, c.cfg.Queues, c.labels.named())
	if err != nil {
		return fmt.Errorf("batchq: metrics: backlog: %w", err)
	}
	type label struct{ queue, tenant string }
	gauges := map[label]*backlog{}
	for _, r := range rows {
		if _, ok := gauges[label{r.Queue, other}]; ok {
			continue
		}
		paused := 0.0
		if r.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(c.queuePaused, prometheus.GaugeValue, paused, r.Queue)
		// Every queue has "other", and every named tenant a gauge, if only of
		// zeros: gauges fall to 0 rather than vanish.
		gauges[label{r.Queue, other}] = &backlog{}
		for _, t := range c.labels.namedIn(r.Queue) {
			gauges[label{r.Queue, t}] = &backlog{}
		}
	}
	for _, r := range rows {
		l := label{r.Queue, r.Tenant}
		if _, named := gauges[l]; !named || r.Tenant == "" {
			// The rest, or a tenant a ranking since dropped.
			l.tenant = other
		}
		gauges[l].add(r)
	}
	for l, g := range gauges {
		ch <- prometheus.MustNewConstMetric(c.queuedJobs, prometheus.GaugeValue, float64(g.queuedJobs), l.queue, l.tenant)
		ch <- prometheus.MustNewConstMetric(c.queuedTokens, prometheus.GaugeValue, float64(g.queuedTokens), l.queue, l.tenant)
		ch <- prometheus.MustNewConstMetric(c.runningJobs, prometheus.GaugeValue, float64(g.running), l.queue, l.tenant)
		ch <- prometheus.MustNewConstMetric(c.retryingJobs, prometheus.GaugeValue, float64(g.retrying), l.queue, l.tenant)
		ch <- prometheus.MustNewConstMetric(c.scheduledJobs, prometheus.GaugeValue, float64(g.scheduled), l.queue, l.tenant)
		if g.queuedJobs > 0 {
			ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, g.oldestAge, l.queue, l.tenant)
		}
	}
	c.rankMu.Lock()
	defer c.rankMu.Unlock()
	for l := range gauges {
		if l.tenant == other {
			ch <- prometheus.MustNewConstMetric(c.backlogTenants, prometheus.GaugeValue, float64(c.tenants[l.queue]), l.queue)
		}
	}
	return nil
}

// collectQuota sends what the quota table says of each key, and the headroom
// of the configured throttles.
func (c *Collector) collectQuota(ctx context.Context, ch chan<- prometheus.Metric) error {
	rows, err := c.cfg.Client.QuotaLevels(ctx)
	if err != nil {
		return fmt.Errorf("batchq: metrics: quota: %w", err)
	}
	for _, r := range rows {
		for _, u := range []struct {
			unit             string
			limit, remaining *int64
		}{
			{"requests", r.RequestsLimit, r.RequestsRemaining},
			{"tokens", r.TokensLimit, r.TokensRemaining},
		} {
			if u.limit != nil {
				ch <- prometheus.MustNewConstMetric(c.quotaLimit, prometheus.GaugeValue, float64(*u.limit), r.Key, u.unit)
			}
			if u.remaining != nil {
				ch <- prometheus.MustNewConstMetric(c.quotaRemaining, prometheus.GaugeValue, float64(*u.remaining), r.Key, u.unit)
			}
		}
		ch <- prometheus.MustNewConstMetric(c.pauseRemaining, prometheus.GaugeValue, r.PauseLeft.Seconds(), r.Key)
	}
	for key, th := range c.cfg.Throttles {
		for _, p := range []throttle.Priority{throttle.Batch, throttle.Interactive} {
			calls, tokens, err := th.Headroom(ctx, p)
			if err != nil {
				return fmt.Errorf("batchq: metrics: headroom of %q: %w", key, err)
			}
			// MaxInt64: nothing is known of the unit, so nothing to say.
			if calls != math.MaxInt64 {
				ch <- prometheus.MustNewConstMetric(c.headroom, prometheus.GaugeValue, float64(calls), key, "requests", p.String())
			}
			if tokens != math.MaxInt64 {
				ch <- prometheus.MustNewConstMetric(c.headroom, prometheus.GaugeValue, float64(tokens), key, "tokens", p.String())
			}
		}
	}
	return nil
}
