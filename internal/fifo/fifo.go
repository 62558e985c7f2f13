// Package fifo is the baseline batchq's benchmarks compare against: the
// plain first-in-first-out SKIP LOCKED queue an application would otherwise
// write, claiming and completing in batches and recording outcomes the same
// way batchq does. It is not fair; that is the point of comparing.
package fifo

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/internal/fifo/fifodb"
)

//go:embed schema.sql
var schema string

// Queue is a FIFO queue in the batchq_fifo schema.
type Queue struct {
	pool *pgxpool.Pool
	q    *fifodb.Queries
}

// Open creates the baseline's schema if needed.
func Open(ctx context.Context, pool *pgxpool.Pool) (*Queue, error) {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return nil, fmt.Errorf("fifo: create schema: %w", err)
	}
	return &Queue{pool: pool, q: fifodb.New()}, nil
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
