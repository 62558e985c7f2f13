package drr

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// defaultTTL is the deadline given to jobs enqueued without one when
// Config.DefaultTTL is zero.
const defaultTTL = 24 * time.Hour

// ErrQueueFull is returned by Enqueue and EnqueueAt when the job's tenant
// already holds Config.MaxPerTenant queued jobs. It is wrapped with the tenant
// and the bound; test for it with errors.Is. Other tenants are not affected.
var ErrQueueFull = errors.New("drr: queue full")

// ErrInvalidJob is returned by Enqueue and EnqueueAt when the job has an
// empty Tenant or a Cost that is not > 0. It is wrapped with the field and
// the rule it breaks; test for it with errors.Is.
var ErrInvalidJob = errors.New("drr: invalid job")

// Job is one unit of work queued for a tenant.
type Job[T any] struct {
	// Tenant owns the job; fairness is between tenants. Must not be empty.
	Tenant string
	// Cost is what the job spends of its tenant's deficit, e.g. its
	// estimated tokens. Must be > 0.
	Cost int64
	// Deadline is when the job expires: a job is expired at any time at or
	// after its deadline. Zero means Config.DefaultTTL after the enqueue;
	// dequeued and expired jobs carry the deadline that applied.
	Deadline time.Time
	// Value is the caller's payload, returned as is.
	Value T
}

// Config configures a Queue.
type Config struct {
	// Quantum is the cost a tenant of weight 1 is granted per visit.
	// Must be > 0.
	Quantum int64
	// MaxPerTenant bounds the number of jobs one tenant may have queued,
	// expired jobs not yet dropped included. Must be > 0.
	MaxPerTenant int
	// Weight scales a tenant's grant. It is called, with the queue locked,
	// each time a tenant is visited, so it must be fast and must not call
	// the Queue; when the queue skips futile rounds it calls Weight once per
	// tenant for all the visits it skips. A weight that is NaN, infinite or
	// not > 0 counts as 1. Nil: every tenant weighs 1.
	Weight func(tenant string) float64
	// DefaultTTL is the deadline, counted from the enqueue, of jobs enqueued
	// without one. Must be >= 0; 0 means 24 hours.
	DefaultTTL time.Duration
}

// Grant returns the cost the tenant is granted per visit: Quantum × weight,
// rounded to the nearest integer (halves away from zero) in float64, at
// least 1 and at most math.MaxInt64. A weight of 1, and a weight that counts
// as 1 because it is not finite or not > 0, grants exactly Quantum (or 1 if
// Quantum is not > 0).
//
// The Postgres dequeuer computes its per-tenant grant with the same rule.
func (c Config) Grant(tenant string) int64 {
	w := 1.0
	if c.Weight != nil {
		w = c.Weight(tenant)
	}
	return grant(c.Quantum, w)
}

func grant(quantum int64, weight float64) int64 {
	if math.IsNaN(weight) || math.IsInf(weight, 0) || weight <= 0 || weight == 1 {
		// Exact: float64 cannot hold every Quantum above 2^53.
		return max(quantum, 1)
	}
	g := math.Round(float64(quantum) * weight)
	switch {
	case g >= math.MaxInt64: // float64(math.MaxInt64) is 2^63, out of range
		return math.MaxInt64
	case g < 1:
		return 1
	}
	return int64(g)
}

func (c Config) validate() error {
	if c.Quantum <= 0 {
		return fmt.Errorf("drr: Config.Quantum is %d, must be > 0", c.Quantum)
	}
	if c.MaxPerTenant <= 0 {
		return fmt.Errorf("drr: Config.MaxPerTenant is %d, must be > 0", c.MaxPerTenant)
	}
	if c.DefaultTTL < 0 {
		return fmt.Errorf("drr: Config.DefaultTTL is %v, must be >= 0", c.DefaultTTL)
	}
	return nil
}

// Queue is a deficit-round-robin fair queue of jobs carrying values of type
// T. Create one with New.
//
// A Queue is safe for concurrent use by multiple goroutines. The zero value
// is a valid Queue that holds nothing: it rejects every job with
// ErrQueueFull.
type Queue[T any] struct {
	mu  sync.Mutex
	cfg Config

	tenants map[string]*tenant[T] // exactly the tenants in the ring
	first   *tenant[T]            // the ring, in the order tenants joined
	last    *tenant[T]
	ringLen int
	// cursor is the tenant the pointer is at; nil means past the last
	// tenant, where a tenant that joins is visited next.
	cursor *tenant[T]
	// granted reports whether the cursor's tenant has had its grant for
	// the current visit. A visit can span several DequeueAt calls.
	granted bool
	jobs    int
	// round tells one pass of the pointer over the ring from the next: it
	// moves on each time the pointer wraps, and once when skipFutileRounds
	// skips passes (it is compared, never counted with, so it cannot
	// overflow however many passes a skip spans).
	round int64
	// left holds the tenants that left the ring in the current round. One
	// that comes back before the round ends waits for the next.
	left map[string]struct{}
}

type tenant[T any] struct {
	name       string
	queue      fifo[T]
	deficit    int64
	prev, next *tenant[T]
	grant      int64 // scratch for skipFutileRounds
	// from is the first round the tenant may be visited in: the round it
	// joined, or the next one when it left the ring in the round it joined.
	from int64
}

// New returns an empty Queue, or an error naming the Config field that is
// invalid.
func New[T any](cfg Config) (*Queue[T], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = defaultTTL
	}
	return &Queue[T]{cfg: cfg, tenants: make(map[string]*tenant[T])}, nil
}

// Enqueue is EnqueueAt(time.Now(), j).
func (q *Queue[T]) Enqueue(j Job[T]) error { return q.EnqueueAt(time.Now(), j) }

// EnqueueAt appends j to its tenant's queue at time now, which sets the
// deadline of a job without one. A tenant that had no queued jobs joins the
// end of the ring with a deficit of zero. It returns an error wrapping
// ErrInvalidJob for an invalid job and ErrQueueFull when the tenant holds
// MaxPerTenant jobs; a job whose deadline has already passed is accepted and
// expires at its first visit.
func (q *Queue[T]) EnqueueAt(now time.Time, j Job[T]) error {
	if j.Tenant == "" {
		return fmt.Errorf("%w: Tenant is empty", ErrInvalidJob)
	}
	if j.Cost <= 0 {
		return fmt.Errorf("%w: Cost is %d, must be > 0", ErrInvalidJob, j.Cost)
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.tenants[j.Tenant]
	if held := t.len(); held >= q.cfg.MaxPerTenant {
		return fmt.Errorf("%w: tenant %q holds %d jobs, MaxPerTenant is %d", ErrQueueFull, j.Tenant, held, q.cfg.MaxPerTenant)
	}
	if j.Deadline.IsZero() {
		j.Deadline = now.Add(q.cfg.DefaultTTL)
	}
	if t == nil {
		t = &tenant[T]{name: j.Tenant}
		q.join(t)
	}
	t.queue.push(j)
	q.jobs++
	return nil
}

// Dequeue is DequeueAt(time.Now(), onExpired).
func (q *Queue[T]) Dequeue(onExpired func(Job[T])) (Job[T], bool) {
	return q.DequeueAt(time.Now(), onExpired)
}

// DequeueAt removes and returns the next job in fair order at time now, or
// false if no live job is queued. Expired jobs it meets at the head of a
// tenant's queue are dropped and passed to onExpired, in the order they were
// dropped, before DequeueAt returns; onExpired runs with the queue unlocked,
// so it may call the Queue. A nil onExpired drops them silently.
func (q *Queue[T]) DequeueAt(now time.Time, onExpired func(Job[T])) (Job[T], bool) {
	var expired []Job[T]
	q.mu.Lock()
	j, ok := q.dequeueLocked(now, &expired)
	q.mu.Unlock()
	if onExpired != nil {
		for _, e := range expired {
			onExpired(e)
		}
	}
	return j, ok
}

func (q *Queue[T]) dequeueLocked(now time.Time, expired *[]Job[T]) (Job[T], bool) {
	// futile counts the visits in a row, in this call, that moved on
	// without dequeuing or dropping a tenant, or passing over one that waits
	// for the next round. Once it reaches the ring's length, every tenant has
	// been visited at this instant, so every head is live and costs more than
	// its tenant's deficit.
	futile := 0
	for q.first != nil {
		if q.cursor == nil {
			q.cursor = q.first
			q.nextRound()
		}
		t := q.cursor
		if t.from > q.round {
			// It left the ring in this round and came back: it has had its
			// visit. Futile passes are counted afresh, from visits that
			// find every head.
			q.cursor = t.next
			q.granted = false
			futile = 0
			continue
		}
		for t.queue.len() > 0 && !t.queue.front().Deadline.After(now) {
			*expired = append(*expired, t.queue.pop())
			q.jobs--
		}
		if t.queue.len() == 0 {
			q.leave(t)
			futile = 0
			continue
		}
		if !q.granted {
			t.deficit = addSat(t.deficit, q.cfg.Grant(t.name))
			q.granted = true
		}
		if head := t.queue.front(); head.Cost <= t.deficit {
			t.deficit -= head.Cost
			t.queue.pop()
			q.jobs--
			if t.queue.len() == 0 {
				q.leave(t)
			}
			return head, true
		}
		q.cursor = t.next
		q.granted = false
		futile++
		if futile >= q.ringLen {
			q.skipFutileRounds()
			futile = 0
		}
	}
	return Job[T]{}, false
}

// skipFutileRounds is called after a whole pass over the ring dequeued
// nothing. Until something is dequeued, plain looping would repeat such
// passes from the same tenant, each adding every tenant's grant: no head can
// change (time stands still within a DequeueAt call and every head was found
// live in the pass), and nothing joins (the queue is locked). Tenant t first
// covers its head in pass need(t) = ceil((cost - deficit) / grant) from
// here, so the first dequeue is in pass m = min need(t), and the m-1 passes
// before it are futile. Adding their grants in one step leaves the next pass
// to find the same tenant and job plain looping would.
func (q *Queue[T]) skipFutileRounds() {
	var m int64 = math.MaxInt64
	for t := q.first; t != nil; t = t.next {
		t.grant = q.cfg.Grant(t.name)
		short := t.queue.front().Cost - t.deficit // > 0, or the pass would have dequeued
		m = min(m, (short-1)/t.grant+1)
	}
	if skip := m - 1; skip > 0 {
		for t := q.first; t != nil; t = t.next {
			// Cannot overflow: skip < need(t), so deficit + skip×grant
			// stays below the head's cost.
			t.deficit += skip * t.grant
		}
		q.round++
		q.left = nil
	}
}

// nextRound is called when the pointer wraps to the first tenant.
func (q *Queue[T]) nextRound() {
	q.round++
	q.left = nil
}

// join appends t to the end of the ring. A tenant that left the ring in the
// current round is visited from the next one, after every tenant in the ring
// has had its turn: were it visited again at once, a tenant that refilled
// its queue whenever it emptied would be visited every time, and the others
// never. The article's FairQueue visits it again.
func (q *Queue[T]) join(t *tenant[T]) {
	t.from = q.round
	if _, ok := q.left[t.name]; ok {
		t.from++
	}
	t.prev = q.last
	if q.last == nil {
		q.first = t
	} else {
		q.last.next = t
	}
	q.last = t
	if q.cursor == nil && t.from == q.round {
		// The pointer is past the end: the new tenant is the next visit.
		q.cursor = t
	}
	q.tenants[t.name] = t
	q.ringLen++
}

// leave removes t, the tenant at the cursor, from the ring; the pointer moves
// to the tenant after it, whose visit has not begun.
func (q *Queue[T]) leave(t *tenant[T]) {
	if t.prev == nil {
		q.first = t.next
	} else {
		t.prev.next = t.next
	}
	if t.next == nil {
		q.last = t.prev
	} else {
		t.next.prev = t.prev
	}
	if q.cursor == t {
		q.cursor = t.next
	}
	q.granted = false
	delete(q.tenants, t.name)
	q.ringLen--
	if q.left == nil {
		q.left = make(map[string]struct{})
	}
	q.left[t.name] = struct{}{}
}

// Len returns the number of queued jobs, expired jobs not yet dropped
// included.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.jobs
}

// TenantLen returns the number of jobs the tenant has queued, expired jobs
// not yet dropped included: the number MaxPerTenant bounds.
func (q *Queue[T]) TenantLen(tenant string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.tenants[tenant].len()
}

func (t *tenant[T]) len() int {
	if t == nil {
		return 0
	}
	return t.queue.len()
}

// addSat returns a+b for b >= 0, or math.MaxInt64 if that overflows. A
// saturated deficit covers any job.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// fifo is a queue of jobs in a slice that reuses its space.
type fifo[T any] struct {
	buf  []Job[T]
	head int // index of the front job in buf
}

func (f *fifo[T]) len() int { return len(f.buf) - f.head }

func (f *fifo[T]) front() Job[T] { return f.buf[f.head] }

func (f *fifo[T]) push(j Job[T]) {
	if len(f.buf) == cap(f.buf) && f.head >= len(f.buf)/2 {
		// Slide down instead of growing when at least half is free.
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf = f.buf[:n]
		f.head = 0
	}
	f.buf = append(f.buf, j)
}

func (f *fifo[T]) pop() Job[T] {
	j := f.buf[f.head]
	f.buf[f.head] = Job[T]{} // let the value be collected
	f.head++
	if f.head == len(f.buf) {
		f.buf = f.buf[:0]
		f.head = 0
	}
	return j
}
