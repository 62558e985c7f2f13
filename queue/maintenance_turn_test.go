package queue_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// hourUs is an hour in microseconds, maintenance_turn's unit.
const hourUs = int64(time.Hour / time.Microsecond)

// askTurnIn asks batchq.maintenance_turn in db (the pool, or a transaction)
// whether a pass of queueName within everyUs microseconds is the caller's.
func askTurnIn(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, queueName string, everyUs int64) (bool, error) {
	var mine bool
	err := db.QueryRow(ctx, `SELECT batchq.maintenance_turn($1, $2)`, queueName, everyUs).Scan(&mine)
	return mine, err
}

// turn asks for a turn of queueName, in a statement of its own.
func (b *testBundle) turn(t *testing.T, queueName string, everyUs int64) bool {
	t.Helper()
	mine, err := askTurnIn(b.ctx, b.pool, queueName, everyUs)
	require.NoError(t, err)
	return mine
}

// holdTurn takes the hour's turn of queueName in a transaction it leaves
// open, holding the turn's row, for the test to commit (or to roll back
// when it ends).
func (b *testBundle) holdTurn(t *testing.T, queueName string) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	mine, err := askTurnIn(b.ctx, tx, queueName, hourUs)
	require.NoError(t, err)
	require.True(t, mine)
	return tx
}

// A queue's maintenance turn goes to the first to ask in each interval, by
// the server's clock; each queue has its own.
func TestMaintenanceTurnGoesToOnePerInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "other"}))

	require.True(t, b.turn(t, "q", hourUs), "no pass began yet")
	require.False(t, b.turn(t, "q", hourUs), "a pass began within the hour")
	require.True(t, b.turn(t, "other", hourUs), "another queue's turn is its own")
	require.False(t, b.turn(t, "q", math.MaxInt64), "the longest interval")
	require.True(t, b.turn(t, "q", 0), "a pass began more than no time ago")
	time.Sleep(20 * time.Millisecond)
	require.True(t, b.turn(t, "q", int64(10*time.Millisecond/time.Microsecond)), "the interval passed")

	// The server's clock set back by more than an interval: the last pass
	// looks to have begun in the future, and the next is not put off until
	// then.
	b.exec(t, `UPDATE batchq.maintenance_turns SET passed_at = clock_timestamp() + interval '2 hours' WHERE queue = 'q'`)
	require.True(t, b.turn(t, "q", hourUs), "a pass two hours ahead")
	require.False(t, b.turn(t, "q", hourUs), "the pass just noted")

	// A queue that is not there gets a yes, for its pass to say so, and no
	// row.
	require.True(t, b.turn(t, "nope", hourUs))
	require.True(t, b.turn(t, "nope", hourUs))
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.maintenance_turns WHERE queue = 'nope'`))

	_, err := b.pool.Exec(b.ctx, `SELECT batchq.maintenance_turn('q', -1)`)
	requireRefused(t, err, "maintenance turn", "every_us", "must be >= 0 (got -1)")
	_, err = b.pool.Exec(b.ctx, `SELECT batchq.maintenance_turn('', 0)`)
	require.ErrorContains(t, err, "batchq: maintenance turn: queue:")

	// Deleted with its queue.
	_, err = b.client.DeleteQueue(b.ctx, "other")
	require.NoError(t, err)
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.maintenance_turns WHERE queue = 'other'`))
}

// Of pools asking at once, exactly one is told yes: the second waits for
// the first's answer to commit, then finds the pass begun.
func TestMaintenanceTurnAskedAtOnceGoesToOne(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	first := b.holdTurn(t, "q")

	second := b.askTurn("q", hourUs)
	select {
	case <-second:
		t.Fatal("the second asked did not wait for the first's answer")
	case <-time.After(50 * time.Millisecond): // well within the 200 ms it waits
	}
	require.NoError(t, first.Commit(b.ctx))
	got := <-second
	require.NoError(t, got.err)
	require.False(t, got.mine, "both were told yes")
}

// asked is an answer of batchq.maintenance_turn and how long it took.
type asked struct {
	mine bool
	took time.Duration
	err  error
}

// askTurn asks for a turn of queueName on a connection of its own, and sends
// the answer.
func (b *testBundle) askTurn(queueName string, everyUs int64) <-chan asked {
	answer := make(chan asked, 1)
	go func() {
		start := time.Now()
		mine, err := askTurnIn(b.ctx, b.pool, queueName, everyUs)
		answer <- asked{mine, time.Since(start), err}
	}()
	return answer
}

// A transaction left open on the turn's row does not stall the fleet's
// maintenance: past 200 ms of waiting the answer is yes.
func TestMaintenanceTurnDoesNotWaitForAnOpenTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	b.holdTurn(t, "q")

	got := <-b.askTurn("q", hourUs)
	require.NoError(t, got.err)
	require.True(t, got.mine, "told to wait for a transaction that does not end")
	require.GreaterOrEqual(t, got.took, 150*time.Millisecond, "it did not wait for the row at all")
	require.Less(t, got.took, 10*time.Second)
}

// Asked within an interval of a pass, the turn is no at once, with no lock
// taken: not on the queue's row, which every enqueue locks too, nor waiting
// for one held (here, for a delete that has not committed).
func TestMaintenanceTurnSaysNoWithoutLocking(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.True(t, b.turn(t, "q", hourUs))

	held, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer held.Rollback(context.Background()) //nolint:errcheck
	_, err = held.Exec(b.ctx, `SELECT 1 FROM batchq.queues WHERE name = 'q' FOR UPDATE`)
	require.NoError(t, err)
	got := <-b.askTurn("q", hourUs)
	require.NoError(t, got.err)
	require.False(t, got.mine, "a pass began within the hour (waiting, it would have been told yes)")
}

// A turn asked while its queue is being deleted is not noted once the queue
// is gone: the answer waits for the queue's row, then is yes, with no row
// left behind for a queue made again under the name.
func TestMaintenanceTurnDuringADeleteLeavesNoTurn(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "going"}))
	require.True(t, b.turn(t, "going", hourUs))

	del, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer del.Rollback(context.Background()) //nolint:errcheck
	_, err = del.Exec(b.ctx, `SELECT batchq.delete_queue('going')`)
	require.NoError(t, err)
	answer := b.askTurn("going", 0)
	select {
	case <-answer:
		t.Fatal("the turn did not wait for the queue's row")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, del.Commit(b.ctx))
	got := <-answer
	require.NoError(t, got.err)
	require.True(t, got.mine, "a queue that is not there")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.maintenance_turns WHERE queue = 'going'`))

	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "going"}))
	require.True(t, b.turn(t, "going", hourUs), "the queue made again inherits no turn")
}

// Worker pools of one queue take turns at maintenance: three pools pass
// about as often as one would, not three times as often.
func TestWorkerPoolsTakeTurnsAtMaintenance(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	url := b.pool.Config().ConnString()
	const interval = 50 * time.Millisecond
	var passes [3]atomic.Int64
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	waits := make([]chan error, len(passes))
	start := time.Now()
	for i := range passes {
		c := fleetClient(t, url)
		queue.SetPause(c, func(at string) {
			if at == "maintenance pass" {
				passes[i].Add(1)
			}
		})
		waits[i] = make(chan error, 1)
		go func() {
			waits[i] <- c.Work(ctx, queue.WorkerConfig{Queue: b.queue, MaintainInterval: interval,
				Handler: func(context.Context, *queue.Job) (queue.Result, error) { return queue.Result{}, nil }})
		}()
	}
	time.Sleep(time.Second)
	cancel()
	for _, w := range waits {
		require.NoError(t, <-w)
	}
	elapsed := time.Since(start)

	var total int64
	for i := range passes {
		total += passes[i].Load()
	}
	// One pass per turnShare (0.9) of the interval at most, and one more
	// for the first; each pool alone would pass once per interval.
	most := int64(elapsed/(interval*9/10)) + 1
	require.LessOrEqual(t, total, most, "passes of three pools in %v (each: %d, %d, %d)", elapsed,
		passes[0].Load(), passes[1].Load(), passes[2].Load())
	require.GreaterOrEqual(t, total, int64(2), "the pools stopped maintaining")
}
