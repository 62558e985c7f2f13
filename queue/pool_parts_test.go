package queue

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/batchq/batchq/throttle"
)

// The pool's parts that keep state of their own, each on its own, without a
// database.

func testPool(concurrency, batch int, lease time.Duration) *pool {
	p := &pool{cfg: WorkerConfig{Concurrency: concurrency, BatchSize: batch}, admission: &admission{}}
	p.leases = newLeaseKeeper(nil, "q", slog.New(slog.DiscardHandler), func(Event) {}, lease, lease/3, true)
	return p
}

func TestClaimSizeKeepsOneBatchAheadAndClaimsWholeBatches(t *testing.T) {
	p := testPool(8, 100, time.Minute)
	if got := p.claimSize(0); got != 8 {
		t.Errorf("before any handler ran: claimSize %d, want 8, one per handler", got)
	}
	p.noteRun(time.Millisecond)
	for _, c := range []struct {
		inflight, ready, want int
		why                   string
	}{
		{0, 0, 100, "an idle pool claims a whole batch"},
		{8, 0, 100, "busy handlers and nothing waiting: a batch ahead"},
		{60, 52, 0, "less than a batch free while jobs wait: no statement for part of a batch"},
		{8, 1, 100, "a batch fits beside the busy handlers: the next claim runs while they work"},
		{108, 100, 0, "the hold is full"},
		{100, 0, 8, "nothing waits: whatever fits"},
	} {
		p.inflight.Store(int64(c.inflight))
		if got := p.claimSize(c.ready); got != c.want {
			t.Errorf("inflight %d, ready %d: claimSize %d, want %d (%s)", c.inflight, c.ready, got, c.want, c.why)
		}
	}
	p.inflight.Store(0)
	p.admission.waiting.Add(1)
	if got := p.claimSize(0); got != 0 {
		t.Errorf("a handler waits for room in the quota: claimSize %d, want 0", got)
	}
}

func TestPrefetchHoldsWhatHandlersStartWithinASecond(t *testing.T) {
	p := testPool(8, 100, time.Minute)
	if got := p.prefetch(); got != 0 {
		t.Fatalf("before any run: prefetch %d, want 0", got)
	}
	p.noteRun(time.Millisecond)
	if got := p.prefetch(); got != 100 {
		t.Errorf("1ms handlers: prefetch %d, want BatchSize", got)
	}
	p = testPool(8, 100, time.Minute)
	p.noteRun(200 * time.Millisecond) // 8 handlers start 40 jobs in a second
	if got := p.prefetch(); got != 40 {
		t.Errorf("200ms handlers: prefetch %d, want 40", got)
	}
	p = testPool(8, 100, 2*time.Second) // a quarter lease is shorter than a second
	p.noteRun(200 * time.Millisecond)
	if got := p.prefetch(); got != 20 {
		t.Errorf("200ms handlers, 2s lease: prefetch %d, want 20", got)
	}
	p = testPool(8, 100, time.Minute)
	p.noteRun(12 * time.Second) // calls of seconds: another worker should take the rest
	if got := p.prefetch(); got != 0 {
		t.Errorf("12s handlers: prefetch %d, want 0", got)
	}
	p.inflight.Store(7)
	if got := p.claimSize(0); got != 1 {
		t.Errorf("no prefetch, one handler free: claimSize %d, want 1", got)
	}
	p.inflight.Store(8)
	if got := p.claimSize(0); got != 0 {
		t.Errorf("no prefetch, every handler busy: claimSize %d, want 0", got)
	}
}

func TestNoteRunAveragesRecentRuns(t *testing.T) {
	p := testPool(1, 1, time.Minute)
	p.noteRun(800 * time.Millisecond)
	if got := time.Duration(p.meanRun.Load()); got != 800*time.Millisecond {
		t.Fatalf("first run: mean %s, want the run itself", got)
	}
	p.noteRun(0)
	if got := time.Duration(p.meanRun.Load()); got != 700*time.Millisecond {
		t.Errorf("mean %s, want an eighth of the way to the new run (700ms)", got)
	}
}

func TestAdmissionCountsWhatTheThrottleHasNotSeen(t *testing.T) {
	th, err := throttle.New(throttle.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a := &admission{th: th}
	d1 := &dispatch{job: &Job{ID: 1, Cost: 10}}
	d2 := &dispatch{job: &Job{ID: 2, Cost: 5}, sentAt: time.Now()} // a probe's claim: counted already
	a.count(d1)
	a.count(d2)
	if c, tok := a.unadmitted(); c != 1 || tok != 10 {
		t.Fatalf("unadmitted %d calls %d tokens, want 1 and 10", c, tok)
	}
	a.settle(d1)
	a.settle(d1) // twice: counted off once
	a.settle(d2)
	if c, tok := a.unadmitted(); c != 0 || tok != 0 {
		t.Fatalf("after settling: %d calls %d tokens, want none", c, tok)
	}

	none := &admission{}
	none.count(&dispatch{job: &Job{ID: 3, Cost: 7}})
	if c, _ := none.unadmitted(); c != 0 {
		t.Errorf("without a throttle nothing is counted, got %d calls", c)
	}
}

func TestLeaseKeeperTellsALostRunFromTheCurrentOne(t *testing.T) {
	k := newLeaseKeeper(nil, "q", slog.New(slog.DiscardHandler), func(Event) {}, time.Minute, 20*time.Second, false)
	first := &Job{ID: 7, token: pgtype.UUID{Bytes: [16]byte{1}, Valid: true}}
	k.claimed([]*Job{first}, time.Now())
	if k.lost(first) {
		t.Fatal("a claimed job's lease is kept while it waits for a handler")
	}
	cancelled := false
	if got := k.start(first, func() { cancelled = true }); got != startOK {
		t.Fatalf("start of a run whose lease is kept: %d, want startOK", got)
	}
	// The job is claimed again under another token: the first run lost its
	// lease, and its handler is cancelled.
	again := &Job{ID: 7, token: pgtype.UUID{Bytes: [16]byte{2}, Valid: true}}
	k.claimed([]*Job{again}, time.Now())
	if !cancelled || !k.lost(first) || k.lost(again) {
		t.Fatalf("after a second claim: first cancelled %v, first lost %v, second lost %v; want true, true, false",
			cancelled, k.lost(first), k.lost(again))
	}
	if got := k.start(first, func() {}); got != startLost {
		t.Errorf("start of a run displaced by a later claim: %d, want startLost", got)
	}
	k.untrack(first) // the stale run's end leaves the new one alone
	if k.lost(again) {
		t.Error("untracking the stale run dropped the current one")
	}
	k.untrack(again)
	if !k.lost(again) {
		t.Error("an untracked run's lease is still kept")
	}
}

// An operator's cancel found while a job waits for a handler keeps it from
// starting, however the cancel and the start interleave; one found after it
// started cancels its handler.
func TestLeaseKeeperKeepsACancelledRunFromStarting(t *testing.T) {
	k := newLeaseKeeper(nil, "q", slog.New(slog.DiscardHandler), func(Event) {}, time.Minute, 20*time.Second, false)
	waiting := &Job{ID: 1, token: pgtype.UUID{Bytes: [16]byte{1}, Valid: true}}
	running := &Job{ID: 2, token: pgtype.UUID{Bytes: [16]byte{2}, Valid: true}}
	k.claimed([]*Job{waiting, running}, time.Now())
	cancelled := false
	if got := k.start(running, func() { cancelled = true }); got != startOK {
		t.Fatalf("start: %d, want startOK", got)
	}
	k.stopping([]run{waiting.run(), running.run(), {id: 3}})
	if got := k.start(waiting, func() { t.Error("the cancelled run's handler was cancelled before it started") }); got != startCancelled {
		t.Errorf("start of a run an operator cancelled while it waited: %d, want startCancelled", got)
	}
	if !cancelled {
		t.Error("a running job an operator cancelled kept its handler going")
	}
	if k.lost(waiting) || k.lost(running) {
		t.Error("a cancelled run lost its lease: its end is still to be recorded")
	}
}

func TestWaitingJobsHandsOutOldestFirstAndTakesBackWhatMustNotStart(t *testing.T) {
	t0 := time.Now()
	d := func(id int64, at time.Duration) *dispatch {
		return &dispatch{job: &Job{ID: id}, claimed: t0.Add(at)}
	}
	ids := func(ds []*dispatch) []int64 {
		var out []int64
		for _, d := range ds {
			out = append(out, d.job.ID)
		}
		return out
	}
	w := newWaitingJobs()
	if _, ok := w.oldest(); ok {
		t.Fatal("an empty queue has an oldest job")
	}
	w.add([]*dispatch{d(1, 0), d(2, 0), d(3, time.Second)})
	w.add([]*dispatch{d(4, 2*time.Second), d(5, 3*time.Second), d(6, 3*time.Second)})
	if got, emptied := w.take(); got.job.ID != 1 || emptied {
		t.Fatalf("take: job %d, emptied %v; want 1, false", got.job.ID, emptied)
	}
	if at, _ := w.oldest(); !at.Equal(t0) {
		t.Errorf("oldest claim %s after the first, want %s", at, t0)
	}
	looked := w.claimedBy(t0.Add(time.Second))
	if got := ids(looked); !slices.Equal(got, []int64{2, 3}) || w.len() != 3 {
		t.Errorf("claimed by 1s: %v, %d left; want [2 3] (at the second too), 3 left", got, w.len())
	}
	w.putBack(looked)
	if got := ids(w.claimedBy(t0.Add(time.Second))); !slices.Equal(got, []int64{2, 3}) || w.len() != 3 {
		t.Errorf("put back, then claimed by 1s: %v, %d left; want [2 3] back in front, 3 left", got, w.len())
	}
	if got := ids(w.takeIf(func(d *dispatch) bool { return d.job.ID == 5 })); !slices.Equal(got, []int64{5}) {
		t.Errorf("takeIf: %v, want [5]", got)
	}
	if got, _ := w.take(); got.job.ID != 4 {
		t.Errorf("take after takeIf: %d, want 4, the order kept", got.job.ID)
	}
	if got, emptied := w.take(); got.job.ID != 6 || !emptied {
		t.Errorf("take of the last: job %d, emptied %v; want 6, true", got.job.ID, emptied)
	}

	// A handler waiting for a job gets the next one added, and nil once the
	// queue closes; closing hands back what no handler took.
	got := make(chan *dispatch)
	go func() {
		for {
			d, _ := w.take()
			got <- d
			if d == nil {
				return
			}
		}
	}()
	w.add([]*dispatch{d(7, 4*time.Second)})
	if d := <-got; d == nil || d.job.ID != 7 {
		t.Fatalf("a waiting handler got %v, want job 7", d)
	}
	w.add([]*dispatch{d(8, 5*time.Second), d(9, 5*time.Second)})
	// The handler has 8 (or is about to take it); 9 may be taken too.
	first := <-got
	left := ids(w.close())
	var second *dispatch
	if len(left) == 0 {
		second = <-got
	}
	if last := <-got; last != nil {
		t.Errorf("take after close: job %d, want nil", last.job.ID)
	}
	if first.job.ID != 8 || (len(left) == 0) == (second == nil) || (second != nil && second.job.ID != 9) ||
		(len(left) > 0 && !slices.Equal(left, []int64{9})) {
		t.Errorf("after close: handler took %v then %v, close handed back %v; want 8, then 9 from exactly one of them", first, second, left)
	}
	if w.add([]*dispatch{}); w.len() != 0 {
		t.Error("adding nothing added something")
	}
}

func TestRefusalWatchCountsOnlyRefusalsForGood(t *testing.T) {
	var w refusalWatch
	t0 := time.Now()
	missing := &pgconn.PgError{Code: "42P01"}
	since := func(err error, at time.Duration) (time.Duration, error) { return w.since(err, t0.Add(at)) }
	if got, stop := since(missing, 0); got != 0 || stop != ErrSchemaGone {
		t.Fatalf("first failure: %s, %v, want 0, ErrSchemaGone", got, stop)
	}
	if got, _ := since(&pgconn.PgError{Code: "42883"}, 5*time.Second); got != 5*time.Second {
		t.Fatalf("still missing (a function now): %s, want 5s", got)
	}
	if got, stop := since(errors.New("connection refused"), 6*time.Second); got != 0 || stop != nil {
		t.Fatalf("another error: %s, %v, want 0, nil", got, stop)
	}
	if got, _ := since(missing, 7*time.Second); got != 0 {
		t.Errorf("missing again after another error starts over: %s, want 0", got)
	}
	denied := &pgconn.PgError{Code: "42501"}
	if got, stop := since(denied, 8*time.Second); got != 0 || stop != ErrNotPermitted {
		t.Errorf("permission denied after a missing schema starts over: %s, %v, want 0, ErrNotPermitted", got, stop)
	}
	if got, stop := since(denied, 10*time.Second); got != 2*time.Second || stop != ErrNotPermitted {
		t.Errorf("still denied: %s, %v, want 2s, ErrNotPermitted", got, stop)
	}
	if got, stop := since(unknownQueue("q"), 11*time.Second); got != 0 || stop != ErrUnknownQueue {
		t.Errorf("a deleted queue after a denial starts over: %s, %v, want 0, ErrUnknownQueue", got, stop)
	}
}
