package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// completer records what handlers finished, in batches: whatever has queued
// up while one batch was written goes in the next, so under load a statement
// finishes many jobs and when idle a job is recorded at once. A write that
// fails is retried with backoff: for as long as the database is out of reach
// (so an outage does not by itself send a job that did its work to run
// again; its lease may still expire and another pool rescue it first), and
// for a minute after any other error. A write given up leaves the jobs' leases to
// expire and the jobs to be rescued, so nothing is lost, and their events
// say "unrecorded". Each job's run is passed to written once
// its finish is written or given up: until then the pool keeps its lease, so
// a finish that waits (behind a slow batch, or for the database) is not
// rescued and run again meanwhile.
type completer struct {
	c       *Client
	emit    func(Event)
	log     *slog.Logger
	written func(*Job)
	ops     chan finishOp
	closed  chan struct{}

	// Done once the writes are abandoned: a failed one is not retried, and
	// the one in flight stops.
	abandoned context.Context
	abandon   context.CancelFunc // for a shutdown out of time; see newCompleter

	unrecorded atomic.Int64 // runs whose end could not be written

	// writingSince is when the write in flight began (unix ns), 0 while
	// none runs. A write that takes long (waiting on a lock an operator's
	// open transaction holds, retrying while the database is away or
	// refuses it) holds the pool's claims back (pool.stalledWrites).
	writingSince atomic.Int64
	// afterWrite, when set, is called after each write, given or not.
	afterWrite func()
}

type finishKind int

const (
	finishComplete finishKind = iota
	finishFail
	finishRelease
)

type finishOp struct {
	kind  finishKind
	job   *Job
	res   Result
	took  time.Duration
	err   error
	delay time.Duration
}

// maxFinishBatch bounds the jobs one statement finishes.
const maxFinishBatch = 500

func newCompleter(c *Client, emit func(Event), log *slog.Logger, written func(*Job)) *completer {
	d := &completer{c: c, emit: emit, log: log, written: written, ops: make(chan finishOp, 1024),
		closed: make(chan struct{})}
	// abandon makes writes give up at once instead of retrying, and cuts
	// the one in flight: for a shutdown that has run out of time while the
	// database is unreachable, or a write waits on a lock or a hung
	// connection.
	d.abandoned, d.abandon = context.WithCancel(context.Background())
	return d
}

func (d *completer) complete(j *Job, res Result, took time.Duration) {
	d.ops <- finishOp{kind: finishComplete, job: j, res: res, took: took}
}

// fail records a failed attempt; took is how long its handler ran (0: it
// never started).
func (d *completer) fail(j *Job, err error, took time.Duration) {
	d.ops <- finishOp{kind: finishFail, job: j, err: err, took: took}
}

// release hands j back to its tenant's queue after delay; took is how long
// its handler ran (0: it never started).
func (d *completer) release(j *Job, delay, took time.Duration) {
	d.ops <- finishOp{kind: finishRelease, job: j, delay: delay, took: took}
}

// writingFor is how long the write in flight has taken at now, 0 when none
// runs.
func (d *completer) writingFor(now time.Time) time.Duration {
	since := d.writingSince.Load()
	if since == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, since))
}

// close waits until everything handed over has been written.
func (d *completer) close() {
	close(d.ops)
	<-d.closed
}

func (d *completer) run() {
	defer close(d.closed)
	defer d.abandon() // nothing writes after run
	// One batch's buffer, used again: under load every flush filled a new
	// one, grown from one op up, per statement.
	var batch []finishOp
	for first := range d.ops {
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxFinishBatch {
			select {
			case o, ok := <-d.ops:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		d.writingSince.Store(time.Now().UnixNano())
		if h := d.c.beforeFinishWrite; h != nil {
			h()
		}
		d.flush(batch)
		d.writingSince.Store(0)
		for _, o := range batch {
			d.written(o.job)
		}
		clear(batch) // the jobs are done with
		if d.afterWrite != nil {
			d.afterWrite()
		}
	}
}

func (d *completer) flush(batch []finishOp) {
	done := make([]Completion, 0, len(batch))
	var fails []failure
	var failTook []time.Duration
	var rel []*Job
	var delays, relTook []time.Duration
	for _, o := range batch {
		switch o.kind {
		case finishComplete:
			done = append(done, Completion{Job: o.job, Result: o.res})
		case finishFail:
			fails = append(fails, failure{job: o.job, cause: o.err, opts: FailOpts{Final: IsPermanent(o.err)}})
			failTook = append(failTook, o.took)
		case finishRelease:
			rel, delays, relTook = append(rel, o.job), append(delays, o.delay), append(relTook, o.took)
		}
	}
	if len(done) > 0 {
		lost, written := d.completeAll(done)
		for _, o := range batch {
			if o.kind != finishComplete {
				continue
			}
			outcome := "succeeded"
			switch {
			case !written[o.job.run()]:
				outcome = "unrecorded"
				d.unrecorded.Add(1)
			case lost[o.job.run()]:
				outcome = "lease_lost"
				d.log.Warn("completion refused: the job's lease was lost", "job", o.job.ID)
			}
			d.emit(Event{Kind: EventFinished, Job: o.job, Outcome: outcome, ActualCost: o.res.ActualCost, Duration: o.took})
		}
	}
	if len(fails) > 0 {
		res, unwritten := d.failAll(fails)
		for i, f := range fails {
			outcome := "lease_lost"
			if got, ok := res[f.job.run()]; ok {
				outcome = got
			} else if unwritten[f.job.run()] {
				outcome = "unrecorded"
				d.unrecorded.Add(1)
			}
			d.emit(Event{Kind: EventFinished, Job: f.job, Outcome: outcome, Err: f.cause, Duration: failTook[i]})
		}
	}
	if len(rel) > 0 {
		var released map[run]string
		err := d.retry("release", func(ctx context.Context) (err error) {
			released, err = d.c.releaseMany(ctx, rel, delays)
			return err
		})
		for i, j := range rel {
			outcome := released[j.run()] // released, or cancelled
			switch {
			case err != nil:
				outcome = "unrecorded"
				d.unrecorded.Add(1)
			case outcome == "":
				outcome = "lease_lost"
			}
			d.emit(Event{Kind: EventFinished, Job: j, Outcome: outcome, Duration: relTook[i]})
		}
	}
}

// failAll writes the failures and returns, for each run it recorded, what
// became of its job, and the runs it could not write. As
// completeAll does, it writes a batch the database refuses in halves, so one
// failure it cannot store costs only itself.
func (d *completer) failAll(fails []failure) (res map[run]string, unwritten map[run]bool) {
	res, unwritten = map[run]string{}, map[run]bool{}
	var write func(part []failure)
	write = func(part []failure) {
		var got map[run]string
		err := d.retry("fail", func(ctx context.Context) (err error) {
			got, err = d.c.failMany(ctx, part)
			return err
		})
		if isDataError(err) && len(part) > 1 {
			write(part[:len(part)/2])
			write(part[len(part)/2:])
			return
		}
		if err != nil {
			for _, f := range part {
				unwritten[f.job.run()] = true
			}
			return
		}
		maps.Copy(res, got)
	}
	write(fails)
	return res, unwritten
}

// completeAll writes the completions and returns the runs whose lease was
// lost and the runs written (lost or not). When the database refuses the
// batch's data (a result it cannot store, say), the batch is written in
// halves so that one bad completion costs only itself; the server being
// away is retried as a whole.
func (d *completer) completeAll(done []Completion) (lost, written map[run]bool) {
	lost, written = map[run]bool{}, make(map[run]bool, len(done))
	var write func(part []Completion)
	write = func(part []Completion) {
		var lostRuns map[run]bool
		err := d.retry("complete", func(ctx context.Context) (err error) {
			lostRuns, err = d.c.completeRuns(ctx, part)
			return err
		})
		if isDataError(err) && len(part) > 1 {
			write(part[:len(part)/2])
			write(part[len(part)/2:])
			return
		}
		if isDataError(err) && len(part[0].Result.Output) > 0 {
			// Only the result can be what the server refuses. The job did its
			// work: left unrecorded, it would run again, so it is recorded
			// without its result.
			d.log.Warn("result refused; recording the job without it", "job", part[0].Job.ID, "err", err)
			c := part[0]
			c.Result.Output = nil
			write([]Completion{c})
			return
		}
		if err != nil {
			return
		}
		for _, c := range part {
			written[c.Job.run()] = true
			if lostRuns[c.Job.run()] {
				lost[c.Job.run()] = true
			}
		}
	}
	write(done)
	return lost, written
}

// isDataError reports whether the database refused a statement for the data
// it was given, which no retry changes: SQLSTATE class 22 (data exception),
// or an argument batchq's functions refuse (class BQ1).
func isDataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "BQ1"))
}

// retry runs write until it succeeds, backing off up to five seconds between
// tries. While the database is out of reach (isUnreachable) it keeps on until
// the pool abandons its writes: a batch given up meanwhile would leave its
// jobs to run again once rescued, though each of them did its work, and
// every batch after it would wait out the same window in turn. On a data
// error, which no retry changes, it gives up at once; on any other error
// from the database, after a minute (Client.finishGiveUp). A write given up
// leaves the jobs to lease expiry and rescue, and returns the error.
func (d *completer) retry(what string, write func(context.Context) error) error {
	wait := 50 * time.Millisecond
	giveUp := d.c.finishGiveUp
	if giveUp == 0 {
		giveUp = time.Minute
	}
	deadline := time.Now().Add(giveUp)
	for {
		ctx, cancel := context.WithTimeout(d.abandoned, 30*time.Second)
		err := write(ctx)
		cancel()
		if err == nil {
			return nil
		}
		d.emit(Event{Kind: EventError, Err: err})
		abandoned := d.abandoned.Err() != nil
		if abandoned || isDataError(err) || (!isUnreachable(err) && time.Now().After(deadline)) {
			d.log.Error("giving up; the jobs' leases will expire and they will be rescued", "op", what, "err", err)
			return err
		}
		d.log.Warn("retrying", "op", what, "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-d.abandoned.Done():
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// isUnreachable reports whether err says the database could not be reached
// or the connection to it broke, which a later try may find mended: a
// connection refused or reset, or ended mid-statement, and the errors of a
// server shutting down, starting up or out of connections (SQLSTATE class 08,
// 57P01..57P03, class 53). A try that ran out of time is not among them: it
// may have waited on a row lock as well as on a network that went quiet. Nor
// is a refusal the client words itself (an unknown queue, a closed pool).
func isUnreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "53") ||
			pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) && !ne.Timeout()
}
