package queue_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

func TestJobInfoFollowsAJobToItsOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	_, err := b.client.JobInfo(b.ctx, 12345)
	require.ErrorIs(t, err, queue.ErrNotFound)

	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "acme", Kind: "summarize", Cost: 70,
		Payload: json.RawMessage(`{"doc":7}`), UniqueKey: "doc-7"})
	require.NoError(t, err)
	info, err := b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.False(t, info.Finished)
	require.Equal(t, "queued", info.State)
	require.Equal(t, "acme", info.Tenant)
	require.Equal(t, "summarize", info.Kind)
	require.Equal(t, int64(70), info.Cost)
	require.Equal(t, "doc-7", info.UniqueKey)
	require.JSONEq(t, `{"doc":7}`, string(info.Payload))
	require.Nil(t, info.FinishedAt)

	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Worker: "w9"})
	require.NoError(t, err)
	info, err = b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "running", info.State)
	require.Equal(t, 1, info.Attempt)
	require.Equal(t, "w9", info.Worker)
	require.NotNil(t, info.LeaseExpiresAt)
	require.NotNil(t, info.FirstClaimedAt)

	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{ActualCost: 90, Output: []byte(`{"ok":true}`)}))
	info, err = b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.True(t, info.Finished)
	require.Equal(t, "succeeded", info.State)
	require.Equal(t, int64(90), *info.ActualCost)
	require.JSONEq(t, `{"ok":true}`, string(info.Result))
	require.NotNil(t, info.FinishedAt)
	require.Equal(t, "w9", info.Worker)
}

func TestRetryNowMakesARetryingJobDue(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "t", 10)
	require.ErrorIs(t, b.client.RetryNow(b.ctx, id), queue.ErrNotFound, "queued, not retrying")

	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.NoError(t, b.client.Release(b.ctx, jobs[0], time.Hour))
	st, err := b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Zero(t, st.Requeued, "not due for an hour")

	require.NoError(t, b.client.RetryNow(b.ctx, id))
	st, err = b.client.Maintain(b.ctx, b.queue)
	require.NoError(t, err)
	require.Equal(t, 1, st.Requeued)
	require.Equal(t, id, b.claimOne(t).ID)
}

func TestResubmitCopiesAFinishedJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxAttempts: 3})
	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "acme", Kind: "classify", Cost: 40,
		TTL: 2 * time.Hour, MaxAttempts: 2, Payload: json.RawMessage(`{"doc":9}`), UniqueKey: "doc-9"})
	require.NoError(t, err)

	_, err = b.client.Resubmit(b.ctx, res.ID)
	require.ErrorIs(t, err, queue.ErrNotFound, "unfinished")

	require.NoError(t, b.client.Cancel(b.ctx, res.ID, "by mistake"))
	cp, err := b.client.Resubmit(b.ctx, res.ID)
	require.NoError(t, err)
	require.False(t, cp.Duplicate)
	require.NotEqual(t, res.ID, cp.ID)

	info, err := b.client.JobInfo(b.ctx, cp.ID)
	require.NoError(t, err)
	require.Equal(t, "queued", info.State)
	require.Equal(t, "acme", info.Tenant)
	require.Equal(t, "classify", info.Kind)
	require.Equal(t, int64(40), info.Cost)
	require.Equal(t, 2, info.MaxAttempts)
	require.JSONEq(t, `{"doc":9}`, string(info.Payload))
	require.Equal(t, queue.ResubmitKeyPrefix+strconv.FormatInt(res.ID, 10), info.UniqueKey)
	require.WithinDuration(t, info.EnqueuedAt.Add(2*time.Hour), info.Deadline, time.Minute, "the TTL it had")

	again, err := b.client.Resubmit(b.ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, queue.Enqueued{ID: cp.ID, Duplicate: true}, again, "its copy is unfinished")

	// Once the copy finished, the original can be resubmitted again.
	require.NoError(t, b.client.Cancel(b.ctx, cp.ID, ""))
	third, err := b.client.Resubmit(b.ctx, res.ID)
	require.NoError(t, err)
	require.False(t, third.Duplicate)

	// A succeeded job is not resubmitted.
	require.NoError(t, b.client.Cancel(b.ctx, third.ID, ""))
	done := b.claimOneAfterEnqueue(t)
	_, err = b.client.Resubmit(b.ctx, done)
	require.ErrorContains(t, err, "only failed, discarded, expired or cancelled jobs")
}

// A job cancelled while still scheduled had its time to live from its
// run-at: its copy gets that, not the wait until the run-at besides. Its
// outcome keeps the run-at; other outcomes have none.
func TestResubmitAScheduledJobKeepsItsTimeToLive(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "acme", Cost: 5,
		Delay: 30 * 24 * time.Hour, TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, b.client.Cancel(b.ctx, res.ID, "not needed"))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes
		WHERE job_id = $1 AND run_at BETWEEN now() + interval '29 days' AND now() + interval '31 days'`, res.ID))
	info, err := b.client.JobInfo(b.ctx, res.ID)
	require.NoError(t, err)
	require.NotNil(t, info.RunAfter, "jobs show says the run-at it had")
	require.WithinDuration(t, time.Now().Add(30*24*time.Hour), *info.RunAfter, time.Minute)

	cp, err := b.client.Resubmit(b.ctx, res.ID)
	require.NoError(t, err)
	info, err = b.client.JobInfo(b.ctx, cp.ID)
	require.NoError(t, err)
	require.Equal(t, "queued", info.State)
	require.WithinDuration(t, info.EnqueuedAt.Add(time.Hour), info.Deadline, time.Minute, "the TTL it had, from its run-at")

	require.NoError(t, b.client.Cancel(b.ctx, cp.ID, ""))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE job_id = $1 AND run_at IS NULL`, cp.ID))
}

// A job given up on a Permanent error (a 401 from a key since fixed, say) is
// resubmitted as a failed one is.
func TestResubmitADiscardedJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	id := b.enqueue(t, "acme", 10)
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	_, err = b.client.Fail(b.ctx, jobs[0], queue.Permanent(errors.New("401")), &queue.FailOpts{Final: true})
	require.NoError(t, err)
	require.Equal(t, "discarded", b.outcome(t, id))
	cp, err := b.client.Resubmit(b.ctx, id)
	require.NoError(t, err)
	require.False(t, cp.Duplicate)
}

func (b *testBundle) claimOneAfterEnqueue(t *testing.T) int64 {
	t.Helper()
	id := b.enqueue(t, "t", 1)
	require.Equal(t, id, b.claimOne(t).ID)
	return id
}

func TestTenantSettings(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	got, ok, err := b.client.TenantSettings(b.ctx, "new")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, queue.Tenant{Name: "new", Weight: 1}, got)

	require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: "new", Weight: 2.5, MaxQueued: 7}))
	got, ok, err = b.client.TenantSettings(b.ctx, "new")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, queue.Tenant{Name: "new", Weight: 2.5, MaxQueued: 7}, got)
}
