package queue_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/queue"
)

// Deleting a queue while work and operators' calls go on in it: each test
// orders two or three transactions as a churn run found them deadlocking
// (deadlock_detected), holding one at a point, and asserts that every call
// ends as it should instead.

// holdAt runs call, which uses c, and returns once c's transaction reaches
// point for the first time, holding it there: the call's error arrives on
// result, after resume lets the transaction go on (or the test ends).
func holdAt(t *testing.T, c *queue.Client, point string, call func() error) (result <-chan error, resume func()) {
	reached, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	queue.SetPause(c, func(at string) {
		if at == point {
			once.Do(func() {
				close(reached)
				<-goOn
			})
		}
	})
	resume = sync.OnceFunc(func() { close(goOn) })
	t.Cleanup(resume)
	result = async(call)
	<-reached
	return result, resume
}

// async runs f on its own goroutine and returns where its error arrives.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// doneOrWaiting waits until the call behind ch has returned, or a statement
// like pattern waits on a lock: a call a fix lets through must not hang the
// test, and the build before, where it waits, must come to the deadlock. It
// returns the call's error, to be read once whatever it waits for is let go.
func doneOrWaiting(t *testing.T, b *testBundle, ch <-chan error, pattern string) (result func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-ch:
			return func() error { return err }
		case <-time.After(10 * time.Millisecond):
		}
		if b.scalar(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`, pattern) > 0 {
			return func() error { return <-ch }
		}
	}
	t.Fatalf("the call neither returned nor came to wait on a lock")
	return nil
}

// completeAt claims the next job and completes it at cost: a correction
// to fold.
func completeAt(t *testing.T, b *testBundle, cost int64) {
	t.Helper()
	jobs, err := b.client.Claim(b.ctx, b.queue, nil)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.NoError(t, b.client.Complete(b.ctx, jobs[0], queue.Result{ActualCost: cost}))
}

func deleteQueueAsync(t *testing.T, b *testBundle) <-chan error {
	c := fleetClient(t, b.pool.Config().ConnString())
	return async(func() error {
		_, err := c.DeleteQueue(b.ctx, b.queue)
		return err
	})
}

// deleteQueueMeanwhile deletes b's queue while another transaction is held:
// once the delete waits on a lock, it lets that one go on (resume), and
// returns the delete's error.
func deleteQueueMeanwhile(t *testing.T, b *testBundle, resume func()) error {
	t.Helper()
	deleted := deleteQueueAsync(t, b)
	waitForLockWait(t, b, "%delete_queue%")
	resume()
	return <-deleted
}

// A delete holding the queue's row and waiting (here for a schedule row)
// had deleted the queue's pending corrections; a fold then took a tenant's
// ring row and waited for a correction the delete had deleted, and the
// delete's cascade into the ring waited for the fold. The delete now takes
// the ring rows before the corrections, and the fold passes over them.
func TestDeleteQueueAndAFoldNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{Name: "s1", Queue: b.queue, Tenant: "acme",
		Cost: 10, Cron: "@hourly"}))
	b.enqueue(t, "acme", 100)
	completeAt(t, b, 500)
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.ledger_adjustments`), "a correction pending")

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.schedules WHERE queue = $1 FOR UPDATE`, b.queue)
	require.NoError(t, err)
	deleted := deleteQueueAsync(t, b)
	waitForLockWait(t, b, "%delete_queue%")
	other := pgtest.Connect(t, b.pool.Config().ConnString())
	folded := doneOrWaiting(t, b, async(func() error {
		_, err := other.Exec(b.ctx, `SELECT batchq.apply_adjustments($1)`, b.queue)
		return err
	}), "%apply_adjustments%")
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, folded(), "the fold")
	require.NoError(t, <-deleted, "the delete")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queues`))
}

// Maintenance took a queue's due schedules, then each tick's enqueue asked
// for the queue's row, which a delete held while it waited for the
// schedules. Maintenance now takes the row before the schedules: the delete
// waits, and then refuses the queue, which holds the ticks' jobs.
func TestDeleteQueueAndFiringSchedulesNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, name := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{Name: name, Queue: b.queue, Tenant: "acme",
			Cost: 10, Cron: "@hourly"}))
	}
	m := fleetClient(t, b.pool.Config().ConnString())
	// Half past, two hours on: each schedule's last tick was missed half an
	// hour before (one job each), and none is on time.
	later := time.Now().Truncate(time.Hour).Add(2*time.Hour + 30*time.Minute)
	queue.SetMaintenanceClock(m, func() time.Time { return later })
	maintained, resume := holdAt(t, m, "schedules taken", func() error {
		_, err := m.Maintain(b.ctx, b.queue)
		return err
	})
	deleted := deleteQueueMeanwhile(t, b, resume)
	require.NoError(t, <-maintained, "maintenance")
	var notEmpty *queue.QueueNotEmptyError
	require.ErrorAs(t, deleted, &notEmpty, "the delete")
	require.Equal(t, int64(6), b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "every schedule fired")
}

// A tenant's settings for one queue took its settings row, then the next
// statement's foreign-key check asked for the queue's row, which a delete
// held while its cascade waited for the settings row. The settings change
// now takes the queue's row first: the delete waits, then deletes.
func TestQueueTenantSettingsAndDeleteQueueNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	two, three := 2.0, 3.0
	_, err := b.client.UpdateQueueTenant(b.ctx, b.queue, "acme", queue.TenantUpdate{Weight: &two})
	require.NoError(t, err)
	w := fleetClient(t, b.pool.Config().ConnString())
	set, resume := holdAt(t, w, "queue tenant held", func() error {
		_, err := w.UpdateQueueTenant(b.ctx, b.queue, "acme", queue.TenantUpdate{Weight: &three})
		return err
	})
	deleted := deleteQueueMeanwhile(t, b, resume)
	require.NoError(t, <-set, "the settings change")
	require.NoError(t, deleted, "the delete")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queue_tenants`))
}

// A weight change held a tenant's ring rows; a bulk cancel emptied the
// queue, leaving the tenant's refund pending; a delete took the queue's row
// and waited for the ring; the change's re-key then asked for the queue's
// row (a second update of the ring row checks its foreign key). The change
// now takes the rows of its queues before their ring rows.
func TestTenantWeightAndDeleteQueueNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "acme", 100)
	b.enqueue(t, "acme", 100)
	completeAt(t, b, 300)
	w := fleetClient(t, b.pool.Config().ConnString())
	set, resume := holdAt(t, w, "tenant's ring rows held", func() error {
		return w.SetTenant(b.ctx, queue.Tenant{Name: "acme", Weight: 2})
	})
	st, err := b.client.CancelJobs(b.ctx, queue.JobFilter{Queue: b.queue}, "")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 1}, st)
	deleted := deleteQueueMeanwhile(t, b, resume)
	require.NoError(t, <-set, "the weight change")
	require.NoError(t, deleted, "the delete")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queues`))
}

// Releasing runs locked those an operator had asked to stop first, then
// the rest: out of id order. A bulk cancel (or a heartbeat) holding the
// lower id and waiting for the higher one met it. Release now locks them
// all in one statement, in id order.
func TestReleaseAndABulkCancelNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "acme", 1)
	b.enqueue(t, "acme", 1)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 2})
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	lo, hi := jobs[0], jobs[1]
	if hi.ID < lo.ID {
		lo, hi = hi, lo
	}
	_, err = b.client.CancelJob(b.ctx, hi.ID, "stop it")
	require.NoError(t, err)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM batchq.jobs WHERE id = $1 FOR UPDATE`, lo.ID)
	require.NoError(t, err)
	c := fleetClient(t, b.pool.Config().ConnString())
	cancelled := async(func() error {
		_, err := c.CancelJobs(b.ctx, queue.JobFilter{Queue: b.queue}, "")
		return err
	})
	waitForLockWait(t, b, "%cancel_jobs%") // waits for lo, before hi
	r := pgtest.Connect(t, b.pool.Config().ConnString())
	released := async(func() error {
		_, err := r.Exec(b.ctx, `SELECT * FROM batchq.release($1, ARRAY[$2, $3]::bigint[],
			ARRAY(SELECT lease_token FROM batchq.jobs WHERE id IN ($2, $3) ORDER BY id = $3), ARRAY[0, 0]::bigint[])`,
			b.queue, lo.ID, hi.ID)
		return err
	})
	release := doneOrWaiting(t, b, released, "%batchq.release%")
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-cancelled, "the bulk cancel")
	require.NoError(t, release(), "the release")
	require.Equal(t, "cancelled", b.outcome(t, lo.ID))
	require.Equal(t, "cancelled", b.outcome(t, hi.ID))
}

// A weight change took the rows of the queues where its tenant had a ring
// row, then the tenant's ring rows; a queue the tenant joined between the
// two had its ring row locked without its queue's row, and a delete of that
// queue (after a bulk cancel emptied it) closed the cycle. The change now
// locks ring rows only in the queues whose rows it holds, and leaves the
// others to its second pass.
func TestTenantWeightAndAQueueItJoinsMeanwhileNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	w := fleetClient(t, b.pool.Config().ConnString())
	queuesHeld, ringHeld := make(chan struct{}), make(chan struct{})
	goOn, goOnAgain := make(chan struct{}), make(chan struct{})
	var once1, once2 sync.Once
	queue.SetPause(w, func(at string) {
		switch at {
		case "tenant's queues held":
			once1.Do(func() { close(queuesHeld); <-goOn })
		case "tenant's ring rows held":
			once2.Do(func() { close(ringHeld); <-goOnAgain })
		}
	})
	defer func() {
		for _, ch := range []chan struct{}{goOn, goOnAgain} {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
	}()
	set := async(func() error { return w.SetTenant(b.ctx, queue.Tenant{Name: "zed", Weight: 2}) })
	<-queuesHeld
	b.enqueue(t, "zed", 100) // zed joins the queue now
	close(goOn)
	<-ringHeld
	st, err := b.client.CancelJobs(b.ctx, queue.JobFilter{Queue: b.queue}, "")
	require.NoError(t, err)
	require.Equal(t, queue.CancelStats{Cancelled: 1}, st)
	deleted := doneOrWaiting(t, b, deleteQueueAsync(t, b), "%delete_queue%")
	close(goOnAgain)
	require.NoError(t, <-set, "the weight change")
	require.NoError(t, deleted(), "the delete")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.queues`))
}

// A maintenance pass fired a queue's due ticks one by one, each taking its
// tenant's ring row as it came: out of tenant order. An enqueue for several
// tenants, which takes their rows in tenant order, held a's and waited for
// b's, which the pass held from its first tick, while the pass's next ticks
// (a's) waited for a's. The pass now locks the ring rows of its ticks'
// tenants in tenant order before it fires any.
func TestFiringSchedulesAndAnEnqueueForSeveralTenantsNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.enqueue(t, "a", 1)
	b.enqueue(t, "b", 1)
	names := []string{"fb", "fa1", "fa2", "fa3", "fa4", "fa5", "fa6", "fa7", "fa8"}
	for _, name := range names {
		require.NoError(t, b.client.CreateSchedule(b.ctx, queue.Schedule{Name: name, Queue: b.queue, Tenant: "a",
			Cost: 10, Cron: "@hourly"}))
	}
	// b's tick first, then a's. Maintained at half past an hour gone, each
	// tick was missed minutes before and none is on time: one job each.
	at := time.Now().Truncate(time.Hour).Add(-30 * time.Minute)
	b.exec(t, `UPDATE batchq.schedules SET tenant = 'b', next_run_at = $1::timestamptz - interval '10 minutes' WHERE name = 'fb'`, at)
	b.exec(t, `UPDATE batchq.schedules SET next_run_at = $1::timestamptz - interval '5 minutes' WHERE name <> 'fb'`, at)
	m := fleetClient(t, b.pool.Config().ConnString())
	queue.SetMaintenanceClock(m, func() time.Time { return at })
	maintained, resume := holdAt(t, m, "schedule fired", func() error {
		_, err := m.Maintain(b.ctx, b.queue)
		return err
	}) // b's tick fired
	e := fleetClient(t, b.pool.Config().ConnString())
	enqueued := async(func() error {
		_, err := e.EnqueueMany(b.ctx, []queue.NewJob{{Queue: b.queue, Tenant: "b", Cost: 1}, {Queue: b.queue, Tenant: "a", Cost: 1}})
		return err
	})
	waitForLockWait(t, b, "%enqueue%")
	resume()
	require.NoError(t, <-maintained, "maintenance")
	require.NoError(t, <-enqueued, "the enqueue")
	require.Equal(t, int64(2+len(names)+2), b.scalar(t, `SELECT count(*) FROM batchq.jobs`), "every tick fired")
}
