package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/batchq/batchq/internal/dbsqlc"
)

// The reads below are what a metrics scrape asks of the database (package
// metrics calls them): the backlog of a few named tenants and of the rest,
// the tenants to name, and the shared quota state. They read the jobs that
// are not finished and the quota rows, never the outcomes.

// LeadingTenantRow is one of the tenants of a queue with the most queued
// tokens.
type LeadingTenantRow struct {
	Queue  string
	Tenant string
	// Tenants is how many tenants have unfinished jobs in Queue.
	Tenants int64
}

// LeadingTenants returns, for each queue with unfinished jobs, its n tenants
// with the most queued tokens (then the most queued jobs, the most running
// jobs, and by name), ordered by queue and tenant. queues limits it to those
// queues; nil means every queue. It aggregates every unfinished job of those
// queues by tenant, seconds with a million tenants: run it in the background,
// not on every scrape.
func (c *Client) LeadingTenants(ctx context.Context, n int, queues []string) ([]LeadingTenantRow, error) {
	if n <= 0 {
		return nil, errors.New("batchq: leading tenants: n must be > 0")
	}
	rows, err := c.q.MetricsLeaders(ctx, c.pool, dbsqlc.MetricsLeadersParams{
		TopTenants: int32(min(n, math.MaxInt32)), Queues: queues,
	})
	if err != nil {
		return nil, fmt.Errorf("batchq: leading tenants: %w", err)
	}
	out := make([]LeadingTenantRow, len(rows))
	for i, r := range rows {
		out[i] = LeadingTenantRow(r)
	}
	return out, nil
}

// BacklogTotalRow is what one named tenant of a queue, or (Tenant "") all its
// other tenants together, have waiting and running.
type BacklogTotalRow struct {
	Queue string
	// Tenant is a tenant asked for by name, or "" for the sum of the rest
	// (no tenant has that name).
	Tenant       string
	QueuedJobs   int64
	QueuedTokens int64 // estimated cost of the queued jobs
	// OldestQueuedAge is how long ago, on the database's clock, the oldest
	// queued job was enqueued; 0 with no queued job.
	OldestQueuedAge time.Duration
	RunningJobs     int64
	RetryingJobs    int64 // waiting for their backoff before they rejoin the queue
	ScheduledJobs   int64 // waiting for their run-at before they join the queue
	// Paused reports whether the queue is paused (PauseQueue).
	Paused bool
}

// BacklogTotals returns each queue's backlog in a few rows: one for each
// tenant named in named (queue to tenant names) that has unfinished jobs,
// and one with Tenant "" summing all the others, which every queue has, of
// zeros when it has no unfinished job. Rows are ordered by queue, then
// tenant. queues limits it to those queues; nil means every queue. Unlike
// Backlog, it is one pass over the unfinished jobs into these few groups,
// cheap enough for every scrape: a million jobs take well under a second.
func (c *Client) BacklogTotals(ctx context.Context, queues []string, named map[string][]string) ([]BacklogTotalRow, error) {
	p := dbsqlc.MetricsBacklogParams{Queues: queues, NamedQueues: []string{}, NamedTenants: []string{}}
	for _, q := range slices.Sorted(maps.Keys(named)) {
		for _, t := range named[q] {
			p.NamedQueues, p.NamedTenants = append(p.NamedQueues, q), append(p.NamedTenants, t)
		}
	}
	rows, err := c.q.MetricsBacklog(ctx, c.pool, p)
	if err != nil {
		return nil, fmt.Errorf("batchq: backlog totals: %w", err)
	}
	out := make([]BacklogTotalRow, len(rows))
	for i, r := range rows {
		out[i] = BacklogTotalRow{
			Queue: r.Queue, Tenant: r.Tenant, QueuedJobs: r.QueuedJobs, QueuedTokens: r.QueuedTokens,
			OldestQueuedAge: seconds(r.OldestQueuedAgeSeconds), RunningJobs: r.RunningJobs,
			RetryingJobs: r.RetryingJobs, ScheduledJobs: r.ScheduledJobs, Paused: r.Paused,
		}
	}
	return out, nil
}

// QuotaLevelRow is what the provider last reported of one quota key, and how
// long the fleet stays paused. Nil fields were never reported.
type QuotaLevelRow struct {
	Key                              string
	RequestsLimit, RequestsRemaining *int64
	TokensLimit, TokensRemaining     *int64
	// PauseLeft is how long, on the database's clock, every start stays
	// stopped after a 429; 0 when no pause is on.
	PauseLeft time.Duration
}

// QuotaLevels returns every quota key's levels, by key. Quota returns the
// same rows with their reset and pause times instead.
func (c *Client) QuotaLevels(ctx context.Context) ([]QuotaLevelRow, error) {
	rows, err := c.q.MetricsQuota(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("batchq: quota levels: %w", err)
	}
	out := make([]QuotaLevelRow, len(rows))
	for i, r := range rows {
		out[i] = QuotaLevelRow{
			Key: r.Key, RequestsLimit: r.RequestsLimit, RequestsRemaining: r.RequestsRemaining,
			TokensLimit: r.TokensLimit, TokensRemaining: r.TokensRemaining,
			PauseLeft: seconds(r.PauseRemainingSeconds),
		}
	}
	return out, nil
}

// seconds converts a number of seconds the database computed to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
