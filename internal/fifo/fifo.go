// Package fifo holds the baselines batchq's benchmarks compare against: the
// plain first-in-first-out SKIP LOCKED queue an application would otherwise
// write, claiming and completing in batches. Neither is fair; that is the
// point of comparing.
//
// Queue stores what batchq stores (the same job and outcome rows, batchq's
// indexes less the ones that serve fairness), so the fair queue's gap to it
// is what fairness costs. Lean is the narrowest FIFO that still writes an
// outcome row per job, so the gap to it is also what batchq's rows cost.
// schema.sql has both.
package fifo

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/internal/fifo/fifodb"
)

//go:embed schema.sql
var schema string

// Name is the queue the FIFO baseline's jobs are in.
const Name = "fifo"

// Queue is the FIFO queue with batchq's rows, in the batchq_fifo schema.
type Queue struct {
	pool *pgxpool.Pool
	q    *fifodb.Queries
}

// Open creates the baselines' schema if needed and returns the FIFO queue.
// Worker processes that share a database use New instead: creating the
// schema from several at once fails.
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
	return f.q.Insert(ctx, f.pool, InsertParams(tenants, costs))
}

// InsertParams are Insert's parameters, for inserting in a transaction of
// the caller's with fifodb.Queries.Insert.
func InsertParams(tenants []string, costs []int64) fifodb.InsertParams {
	return fifodb.InsertParams{Queue: Name, Tenants: tenants, Costs: costs}
}

// Job is a claimed job.
type Job = fifodb.ClaimRow

// Claim claims up to n jobs in arrival order for worker, under one lease
// token.
func (f *Queue) Claim(ctx context.Context, n int, worker string) ([]Job, error) {
	return f.q.Claim(ctx, f.pool, fifodb.ClaimParams{Queue: Name, MaxJobs: int32(n), Worker: worker})
}

// Complete removes claimed jobs whose lease their token still holds and
// writes their outcomes, in one statement, and returns how many it finished.
func (f *Queue) Complete(ctx context.Context, jobs []Job) (int, error) {
	p := fifodb.CompleteParams{Ids: make([]int64, len(jobs)), Tokens: make([]pgtype.UUID, len(jobs))}
	for i, j := range jobs {
		p.Ids[i], p.Tokens[i] = j.ID, j.LeaseToken
	}
	n, err := f.q.Complete(ctx, f.pool, p)
	return int(n), err
}

// Reset empties both baselines' jobs and outcomes.
func (f *Queue) Reset(ctx context.Context) error {
	return f.q.Reset(ctx, f.pool)
}

// Lean is the lean FIFO queue, in the same schema.
type Lean struct {
	pool *pgxpool.Pool
	q    *fifodb.Queries
}

// NewLean returns the lean queue in a database where Open created its schema.
func NewLean(pool *pgxpool.Pool) *Lean {
	return &Lean{pool: pool, q: fifodb.New()}
}

// Insert adds jobs, one per tenant and cost, in one statement.
func (l *Lean) Insert(ctx context.Context, tenants []string, costs []int64) error {
	return l.q.LeanInsert(ctx, l.pool, fifodb.LeanInsertParams{Tenants: tenants, Costs: costs})
}

// LeanJob is a job Lean claimed.
type LeanJob = fifodb.LeanClaimRow

// Claim claims up to n jobs in arrival order.
func (l *Lean) Claim(ctx context.Context, n int) ([]LeanJob, error) {
	return l.q.LeanClaim(ctx, l.pool, int32(n))
}

// Complete removes claimed jobs and writes their outcomes in one statement.
func (l *Lean) Complete(ctx context.Context, ids []int64) error {
	return l.q.LeanComplete(ctx, l.pool, ids)
}
