package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// A handler that notices its cancellation late (a call that takes no
// context) outlives its lost lease, while the job is rescued and claimed
// again by the same pool under a new token. When the old run returns, it
// leaves the new run's lease alone: the new run is heartbeated to the end and
// completes, and the job runs twice, not three times.
func TestStaleRunLeavesTheNewRunsLeaseAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{Lease: time.Second})
	id := b.enqueue(t, "a", 1)

	var runs runCounter
	var events eventLog
	r1, r2 := make(chan struct{}), make(chan struct{})
	releaseR1 := make(chan struct{})
	var once1, once2 sync.Once
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	wait := b.work(ctx, queue.WorkerConfig{
		Queue: b.queue, Concurrency: 2, BatchSize: 1,
		PollInterval: 20 * time.Millisecond, MaintainInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
		OnEvent:           events.on,
		Handler: func(hctx context.Context, j *queue.Job) (queue.Result, error) {
			switch runs.add(j.ID) {
			case 1:
				once1.Do(func() { close(r1) })
				<-releaseR1 // does not watch hctx
				return queue.Result{}, hctx.Err()
			case 2:
				once2.Do(func() { close(r2) })
				select { // three leases' worth, heartbeated all along
				case <-time.After(3 * time.Second):
					return queue.Result{}, nil
				case <-hctx.Done():
					return queue.Result{}, hctx.Err()
				}
			}
			return queue.Result{}, nil
		},
	})
	<-r1
	// The first run's lease is lost (what RescueLostLeases does to it).
	b.exec(t, `UPDATE batchq.jobs SET state = 'retrying', run_after = now(), lease_token = NULL,
		lease_expires_at = NULL, worker = NULL WHERE id = $1`, id)
	select {
	case <-r2:
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not claimed again")
	}
	close(releaseR1) // the old run returns while the new one runs
	b.waitFinished(t, id)
	cancel()
	require.NoError(t, wait())

	require.Equal(t, 2, runs.get(id), "outcomes per run: %v", events.outcomes(id))
	require.Equal(t, "succeeded", b.outcome(t, id))
	require.Equal(t, int64(2), b.scalar(t, `SELECT attempts FROM batchq.outcomes WHERE job_id = $1`, id),
		"outcomes per run: %v", events.outcomes(id))
}
