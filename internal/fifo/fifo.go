// Package fifo is the baseline batchq's benchmarks compare against: the
// plain first-in-first-out SKIP LOCKED queue an application would otherwise
// write, claiming and completing in batches and recording outcomes the same
// way batchq does. It is not fair; that is the point of comparing.
//
// Bare is a second baseline, between the two: batchq's own rows claimed
// without the fair claim's bookkeeping (see schema.sql).
package fifo

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/internal/fifo/fifodb"
)

//go:embed schema.sql
var schema string

// Queue is a FIFO queue in the batchq_fifo schema.
type Queue struct {
	pool *pgxpool.Pool
	q    *fifodb.Queries
}

// Open creates both baselines' schema if needed (the batchq schema must be
// migrated) and returns the FIFO queue. Worker processes that share a
// database use New instead: creating the schema from several at once fails.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Queue, error) {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("fifo: create schema: %w", err)
	}
	return New(pool), nil
}

// New returns the FIFO queue in a database where Open created its schema.
func New(pool *pgxpool.Pool) *Queue {
	return &Queue{pool: pool, q: fifodb.New()}
}

// Insert adds jobs, one per tenant and cost, in one statement.
func (f *Queue) Insert(ctx context.Context, tenants []string, costs []int64) error {
	return f.q.Insert(ctx, f.pool, fifodb.InsertParams{Tenants: tenants, Costs: costs})
}

// Job is a claimed job.
type Job = fifodb.ClaimRow

// Claim claims up to n jobs in arrival order.
func (f *Queue) Claim(ctx context.Context, n int) ([]Job, error) {
	return f.q.Claim(ctx, f.pool, int32(n))
}

// Complete removes claimed jobs and writes their outcomes in one statement.
func (f *Queue) Complete(ctx context.Context, ids []int64) error {
	return f.q.Complete(ctx, f.pool, ids)
}

// Reset empties the queue and its outcomes.
func (f *Queue) Reset(ctx context.Context) error {
	return f.q.Reset(ctx, f.pool)
}

// Bare claims batchq's queued jobs in their fair order by one plain SKIP
// LOCKED statement, without the budget, the expiry of jobs past their
// deadline and the ring cursor that batchq's claim keeps, and completes them
// with batchq's own completion. Only for measuring: the order holds only
// while no job expires and no tenant joins.
type Bare struct {
	pool *pgxpool.Pool
	q    *fifodb.Queries
	jobs *dbsqlc.Queries
}

// NewBare returns the bare baseline in a database where Open created its
// schema.
func NewBare(pool *pgxpool.Pool) *Bare {
	return &Bare{pool: pool, q: fifodb.New(), jobs: dbsqlc.New()}
}

// BareJob is a job Bare claimed.
type BareJob = fifodb.BareClaimRow

// Claim claims up to n queued jobs of queue for worker.
func (b *Bare) Claim(ctx context.Context, queue string, n int, worker string) ([]BareJob, error) {
	return b.q.BareClaim(ctx, b.pool, fifodb.BareClaimParams{Queue: queue, MaxJobs: int32(n), Worker: worker})
}

// Complete finishes claimed jobs as succeeded, as batchq.Client.CompleteMany
// does, and returns how many it finished.
func (b *Bare) Complete(ctx context.Context, jobs []BareJob) (int, error) {
	p := dbsqlc.CompleteParams{
		Ids:         make([]int64, len(jobs)),
		Tokens:      make([]pgtype.UUID, len(jobs)),
		ActualCosts: make([]int64, len(jobs)),
		Results:     make([]string, len(jobs)),
	}
	for i, j := range jobs {
		p.Ids[i], p.Tokens[i], p.ActualCosts[i] = j.ID, j.LeaseToken, -1
	}
	rows, err := b.jobs.Complete(ctx, b.pool, p)
	return len(rows), err
}
