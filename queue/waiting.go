package queue

import (
	"slices"
	"sync"
	"time"
)

// waitingJobs holds the claimed jobs no handler has taken yet, oldest claim
// first. The fetcher adds each claim's jobs, and takes back those that must
// not start (waited too long, the queue paused, an operator's cancel, a
// shutdown); handlers take the next one themselves. A handler that finishes
// a job starts the next without waking the fetcher, which a hand-off of
// each job through it did: a pass of its loop per job.
type waitingJobs struct {
	mu     sync.Mutex
	added  sync.Cond // jobs were added, or the pool closed
	jobs   []*dispatch
	closed bool
}

func newWaitingJobs() *waitingJobs {
	w := &waitingJobs{}
	w.added.L = &w.mu
	return w
}

// add appends a claim's jobs, for the handlers to take.
func (w *waitingJobs) add(ds []*dispatch) {
	if len(ds) == 0 {
		return
	}
	w.mu.Lock()
	w.jobs = append(w.jobs, ds...)
	w.mu.Unlock()
	if len(ds) == 1 {
		w.added.Signal()
	} else {
		w.added.Broadcast()
	}
}

// take waits for a job and takes the oldest. It returns nil once the pool
// is closed; emptied says the job taken was the last one waiting.
func (w *waitingJobs) take() (d *dispatch, emptied bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.jobs) == 0 && !w.closed {
		w.added.Wait()
	}
	if len(w.jobs) == 0 {
		return nil, false
	}
	d = w.jobs[0]
	w.jobs[0] = nil
	w.jobs = w.jobs[1:]
	return d, len(w.jobs) == 0
}

// len is how many jobs wait.
func (w *waitingJobs) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs)
}

// oldest is when the job waiting longest was claimed; ok is false when none
// waits.
func (w *waitingJobs) oldest() (claimed time.Time, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.jobs) == 0 {
		return time.Time{}, false
	}
	return w.jobs[0].claimed, true
}

// claimedBy takes the jobs claimed at t or before, the oldest ones.
func (w *waitingJobs) claimedBy(t time.Time) []*dispatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for n < len(w.jobs) && !w.jobs[n].claimed.After(t) {
		n++
	}
	return w.cutLocked(n)
}

// putBack returns jobs taken from the front (claimedBy) to the front, in
// their order, for the handlers.
func (w *waitingJobs) putBack(ds []*dispatch) {
	if len(ds) == 0 {
		return
	}
	w.mu.Lock()
	w.jobs = append(slices.Clip(ds), w.jobs...)
	w.mu.Unlock()
	w.added.Broadcast()
}

// takeIf takes the waiting jobs for which pick says true, and leaves the
// others in their order.
func (w *waitingJobs) takeIf(pick func(*dispatch) bool) []*dispatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	var taken []*dispatch
	kept := w.jobs[:0]
	for _, d := range w.jobs {
		if pick(d) {
			taken = append(taken, d)
		} else {
			kept = append(kept, d)
		}
	}
	clear(w.jobs[len(kept):])
	w.jobs = kept
	return taken
}

// takeAll takes every waiting job.
func (w *waitingJobs) takeAll() []*dispatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cutLocked(len(w.jobs))
}

// close takes every waiting job and makes take return nil from now on,
// once handlers have nothing left to start.
func (w *waitingJobs) close() []*dispatch {
	w.mu.Lock()
	ds := w.cutLocked(len(w.jobs))
	w.closed = true
	w.mu.Unlock()
	w.added.Broadcast()
	return ds
}

// cutLocked takes the first n jobs; w.mu is held.
func (w *waitingJobs) cutLocked(n int) []*dispatch {
	if n == 0 {
		return nil
	}
	ds := make([]*dispatch, n)
	copy(ds, w.jobs[:n])
	clear(w.jobs[:n])
	w.jobs = w.jobs[n:]
	return ds
}
