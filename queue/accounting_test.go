package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// QuotaStore.Update saves only when fn changed the state: a decision that
// changes nothing (each wait a paced worker is told) writes no row and takes
// no version, so it never makes a real admission elsewhere retry.
func TestQuotaStoreSavesOnlyChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	c, err := queue.NewClient(pool, queue.Config{})
	require.NoError(t, err)
	s := c.QuotaStore()
	now := time.Now().UTC().Truncate(time.Microsecond)
	require.NoError(t, s.Update(ctx, "k", func(st *throttle.State) error {
		st.PausedUntil = now.Add(time.Minute)
		return nil
	}))
	var v0 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT version FROM batchq.quota WHERE key = 'k'`).Scan(&v0))
	for range 3 {
		require.NoError(t, s.Update(ctx, "k", func(*throttle.State) error { return nil }))
	}
	var v1 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT version FROM batchq.quota WHERE key = 'k'`).Scan(&v1))
	require.Equal(t, v0, v1, "no-op updates must not save")
}

// A handler that returns ErrRateLimited with the provider's response, here
// a 503 "overloaded" with Retry-After, pauses the fleet as a 429 does: the
// shared throttle admits nothing, not even an interactive call, until then.
func TestRateLimitedErrorPausesTheFleetWhateverTheResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "t", 1)
	th, err := b.client.Throttle("prov/model", throttle.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	ran := make(chan struct{}, 10)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 1, PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		Throttle: th,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			ran <- struct{}{}
			resp := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"30"}}}
			return queue.Result{Response: resp}, fmt.Errorf("overloaded: %w", queue.ErrRateLimited)
		},
	})
	<-ran
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'retrying'`) == 1
	}, 10*time.Second, 10*time.Millisecond, "handed back")
	cancel()
	require.NoError(t, wait())
	d, err := th.CanStart(b.ctx, 1, throttle.Interactive)
	require.NoError(t, err)
	require.False(t, d.OK, "ErrRateLimited must pause the fleet (Retry-After 30s), but the throttle admits")
}

// Calls in flight together that the provider refuses for the rate, each
// reported by its handler as ErrRateLimited with no 429 response, are one
// episode: the fleet pauses for the default pause once, not doubled for each.
func TestRateLimitedCallsInFlightTogetherPauseOnce(t *testing.T) {
	t.Parallel()
	const calls = 6
	b := setup(t, queue.QueueConfig{})
	first := b.enqueue(t, "t", 1)
	b.enqueueN(t, "t", calls, 1)
	th, err := b.client.Throttle("prov/model", throttle.Config{DefaultPause: time.Second, MaxPause: time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var started atomic.Int32
	all := make(chan struct{})
	refused := make(chan struct{}, calls)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: calls, BatchSize: calls, PollInterval: 20 * time.Millisecond, MaintainInterval: -1,
		Throttle: th,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			if j.ID == first {
				return queue.Result{}, nil // the pool learns from one call first
			}
			if started.Add(1) == calls {
				close(all)
			}
			select { // all sent before any is refused
			case <-all:
			case <-time.After(10 * time.Second):
			}
			defer func() { refused <- struct{}{} }()
			return queue.Result{}, fmt.Errorf("SDK: rate limited: %w", queue.ErrRateLimited)
		},
	})
	for range calls {
		select {
		case <-refused:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d calls ran at once", started.Load())
		}
	}
	require.Eventually(t, func() bool {
		return b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE state = 'retrying'`) == calls
	}, 10*time.Second, 10*time.Millisecond, "handed back")
	cancel()
	require.NoError(t, wait())
	d, err := th.CanStart(b.ctx, 1, throttle.Interactive)
	require.NoError(t, err)
	require.False(t, d.OK, "the fleet is paused")
	require.LessOrEqual(t, d.Wait, time.Second, "one pause for calls sent together, not one doubling each")
}

// A job cancelled (or expired) after it ran an attempt stays charged for
// that claim (only a job that was queued when it went is refunded), and
// tenant_usage counts it in served_tokens, as the scheduler did.
func TestTenantUsageCountsAnAttemptOfAnUnfinishedJobAsServed(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "a", 100)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	retrying, err := b.client.Fail(b.ctx, jobs[0], fmt.Errorf("503"), &queue.FailOpts{RetryIn: time.Hour})
	require.NoError(t, err)
	require.True(t, retrying)
	require.NoError(t, b.client.Cancel(b.ctx, id, "operator"))

	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`), "no refund: the claim stays charged")
	rows, err := b.client.TenantUsage(b.ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), b.queue)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	t.Logf("%+v", rows[0])
	require.Equal(t, int64(100), rows[0].ServedTokens, "the tenant was charged 100 for the attempt it ran")
}

// A job that failed, was retried and then succeeded was charged for both
// claims (the retry rejoined its tenant's queue, charged again):
// served_tokens counts every attempt, the last at the actual cost reported.
func TestTenantUsageCountsEveryAttemptAsTheLedgerDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 100)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	retrying, err := b.client.Fail(b.ctx, jobs[0], fmt.Errorf("503"), &queue.FailOpts{RetryIn: time.Nanosecond})
	require.NoError(t, err)
	require.True(t, retrying)
	time.Sleep(time.Millisecond)
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Requeued)
	jobs, err = b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{ActualCost: 70}))
	_, err = b.client.Maintain(b.ctx, b.queue) // folds the correction into the ledger
	require.NoError(t, err)

	rows, err := b.client.TenantUsage(b.ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), b.queue)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, int64(170), rows[0].ServedTokens, "100 for the failed attempt, 70 for the one that succeeded")
}
