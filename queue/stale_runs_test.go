package queue_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// runsOf enqueues a job and claims it n times, each claim after the lease
// of the one before expired and the job was rescued: it returns the job's id
// and its runs, oldest first. Only the last holds the lease.
func runsOf(t *testing.T, b *testBundle, n int) (int64, []*queue.Job) {
	t.Helper()
	id := b.enqueue(t, "t", 1)
	var runs []*queue.Job
	for i := range n {
		if i > 0 {
			b.exec(t, `UPDATE batchq.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
			st, err := b.client.Maintain(b.ctx, b.queue)
			require.NoError(t, err)
			require.Equal(t, 1, st.Rescued)
		}
		jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Worker: "w"})
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, id, jobs[0].ID)
		runs = append(runs, jobs[0])
	}
	return id, runs
}

// A job's earlier run (its lease lost, the job rescued and claimed again)
// and its current run may finish in one CompleteMany: the run that holds the
// lease finishes the job, whichever is listed first.
func TestCompleteManyFinishesAJobByTheRunThatHoldsItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id, runs := runsOf(t, b, 2)
	stale, current := runs[0], runs[1]

	lost, err := b.client.CompleteMany(b.ctx, []queue.Completion{
		{Job: stale, Result: queue.Result{Output: []byte(`{"run":1}`)}},
		{Job: current, Result: queue.Result{Output: []byte(`{"run":2}`)}},
	})
	require.NoError(t, err)
	require.Empty(t, lost, "the job was finished")
	require.Equal(t, int64(0), b.scalar(t, `SELECT count(*) FROM batchq.jobs WHERE id = $1`, id),
		"the current run's completion holds the lease, yet the job is still unfinished")
	var result string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT result::text FROM batchq.outcomes WHERE job_id = $1`, id).Scan(&result))
	require.JSONEq(t, `{"run":2}`, result)
}

// A job listed under two old leases (neither holds it) is one job whose
// lease was lost: CompleteMany names it once.
func TestCompleteManyNamesALostJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id, runs := runsOf(t, b, 3) // run 3 holds the lease

	lost, err := b.client.CompleteMany(b.ctx, []queue.Completion{{Job: runs[0]}, {Job: runs[1]}})
	require.NoError(t, err)
	require.Equal(t, []int64{id}, lost, "one job lost its lease")
}

// staleAndCurrentInOneBatch runs a pool in which job x's first run outlives
// its lease while x is claimed again by the same pool, and both runs finish
// in the same completer batch (the batch before it waits on a row lock).
// stale and current are what the two runs return. It returns x's id and the
// pool's finish events; the pool stops when the test ends.
func staleAndCurrentInOneBatch(t *testing.T, b *testBundle, stale, current error) (int64, *eventLog) {
	t.Helper()
	z := b.enqueue(t, "z", 1)
	x := b.enqueue(t, "x", 1)

	var runs runCounter
	var events eventLog
	zStarted, x1Started, x2Started := make(chan struct{}), make(chan struct{}), make(chan struct{})
	zGo, xGo := make(chan struct{}), make(chan struct{})
	var returned sync.WaitGroup
	returned.Add(2)
	ctx, cancel := context.WithCancel(b.ctx)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 3, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, ShutdownTimeout: 100 * time.Millisecond,
		OnEvent: events.on,
		Handler: func(hctx context.Context, j *queue.Job) (queue.Result, error) {
			if j.ID == z {
				close(zStarted)
				<-zGo
				return queue.Result{}, nil
			}
			switch runs.add(j.ID) {
			case 1:
				close(x1Started)
				<-xGo // does not watch hctx
				defer returned.Done()
				return queue.Result{Output: []byte(`{"run":1}`)}, stale
			case 2:
				close(x2Started)
				<-xGo
				defer returned.Done()
				return queue.Result{Output: []byte(`{"run":2}`)}, current
			}
			return queue.Result{}, errors.New("a third run")
		},
	})
	t.Cleanup(func() {
		cancel()
		require.NoError(t, wait())
	})
	<-zStarted
	<-x1Started
	// x's first run loses its lease, and the pool claims x again.
	b.exec(t, `UPDATE batchq.jobs SET state = 'retrying', run_after = now(), lease_token = NULL,
		lease_expires_at = NULL, worker = NULL WHERE id = $1`, x)
	select {
	case <-x2Started:
	case <-time.After(10 * time.Second):
		t.Fatal("x was not claimed again")
	}

	// z's completion waits on z's row, so what finishes meanwhile queues up
	// for the next batch.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, z)
	require.NoError(t, err)
	close(zGo)
	waitForLockWait(t, b, "%name: Complete%")
	close(xGo)
	returned.Wait()
	time.Sleep(300 * time.Millisecond) // both runs hand their outcome to the completer
	require.NoError(t, tx.Commit(b.ctx))
	return x, &events
}

// A stale run's completion written in the same completer batch as the
// current run's is refused (the current run finishes the job): the pool
// reports the stale run as lease_lost and the current one as succeeded.
func TestStaleCompletionInTheCurrentRunsBatchIsReportedLeaseLost(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	x, events := staleAndCurrentInOneBatch(t, b, nil, nil)
	require.Eventually(t, func() bool { return len(events.outcomes(x)) == 2 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, "succeeded", b.outcome(t, x))
	got := events.outcomes(x)
	slices.Sort(got)
	require.Equal(t, []string{"lease_lost", "succeeded"}, got, "finish events of x's two runs")
}

// The same for failures: of a stale run's failure and the current run's
// final failure in one batch, the current run's is recorded, as the job's
// one outcome row.
func TestStaleAndCurrentFailureInOneBatchAreRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	x, events := staleAndCurrentInOneBatch(t, b, errors.New("stale run failed"),
		queue.Permanent(errors.New("current run failed")))
	b.waitFinished(t, x, "x's final failure was not recorded; events: %v", events.outcomes(x))
	require.Equal(t, "discarded", b.outcome(t, x))
}

// The same for releases (two 429s): the current run's release hands the job
// back, and the stale run's, refused, is reported as lease_lost, not as a
// second release.
func TestStaleAndCurrentReleaseInOneBatchAreToldApart(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	x, events := staleAndCurrentInOneBatch(t, b, queue.ErrRateLimited, queue.ErrRateLimited)
	require.Eventually(t, func() bool { return len(events.outcomes(x)) >= 2 }, 10*time.Second, 20*time.Millisecond)
	got := events.outcomes(x)[:2]
	slices.Sort(got)
	require.Equal(t, []string{"lease_lost", "released"}, got, "release events of x's two runs")
}

// Heartbeat with a stale run listed beside the current run of the same job:
// the stale one lost its lease, and the current one's lease is extended.
func TestHeartbeatTellsAStaleRunFromTheCurrentOne(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	_, runs := runsOf(t, b, 2)
	stale, current := runs[0], runs[1]
	before := current.LeaseExpiresAt
	time.Sleep(20 * time.Millisecond)
	require.ErrorIs(t, b.client.Heartbeat(b.ctx, current, stale), queue.ErrLeaseLost)
	require.True(t, current.LeaseExpiresAt.After(before), "the current run's lease was extended")
	require.NoError(t, b.client.Heartbeat(b.ctx, current))
	require.ErrorIs(t, b.client.Heartbeat(b.ctx, stale), queue.ErrLeaseLost)
}

// A pool that claims a job again while its own earlier run of it is still
// going (the job was rescued while the process stalled, before a heartbeat
// could notice) cancels that earlier run, so the job does not run twice at
// once, and reports it as lease_lost.
func TestReclaimedJobCancelsTheStaleRunInTheSamePool(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	x := b.enqueue(t, "x", 1)

	var runs runCounter
	var events eventLog
	x1Started, x2Started := make(chan struct{}), make(chan struct{})
	x1Cancelled := make(chan struct{})
	ctx, cancel := context.WithCancel(b.ctx)
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		HeartbeatInterval: time.Hour, // no heartbeat notices the lost lease
		OnEvent:           events.on,
		Handler: func(hctx context.Context, j *queue.Job) (queue.Result, error) {
			switch runs.add(j.ID) {
			case 1:
				close(x1Started)
				select {
				case <-hctx.Done():
					close(x1Cancelled)
					return queue.Result{}, hctx.Err()
				case <-time.After(20 * time.Second):
					return queue.Result{}, errors.New("the first run was never cancelled")
				}
			case 2:
				close(x2Started)
				return queue.Result{Output: []byte(`{"run":2}`)}, nil
			}
			return queue.Result{}, errors.New("a third run")
		},
	})
	defer func() {
		cancel()
		require.NoError(t, wait())
	}()
	<-x1Started
	// x's first run loses its lease; maintenance hands x back and the pool
	// claims it again.
	b.exec(t, `UPDATE batchq.jobs SET state = 'retrying', run_after = now(), lease_token = NULL,
		lease_expires_at = NULL, worker = NULL WHERE id = $1`, x)
	for _, c := range []chan struct{}{x2Started, x1Cancelled} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("x was not claimed again, or its first run was not cancelled when it was")
		}
	}
	require.Eventually(t, func() bool { return len(events.outcomes(x)) == 2 }, 10*time.Second, 20*time.Millisecond)
	got := events.outcomes(x)
	slices.Sort(got)
	require.Equal(t, []string{"lease_lost", "succeeded"}, got, "finish events of x's two runs")
	require.Equal(t, "succeeded", b.outcome(t, x))
}
