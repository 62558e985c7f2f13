package drr_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/drr"
)

// t0 is the instant the tests start at; nothing here reads the clock.
var t0 = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

func newQueue(t testing.TB, cfg drr.Config) *drr.Queue[string] {
	t.Helper()
	q, err := drr.New[string](cfg)
	require.NoError(t, err)
	return q
}

func enqueue(t testing.TB, q *drr.Queue[string], tenant string, cost int64, value string) {
	t.Helper()
	require.NoError(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: tenant, Cost: cost, Value: value}))
}

// drain dequeues at t0 until the queue has no live job.
func drain(q *drr.Queue[string]) []drr.Job[string] {
	var out []drr.Job[string]
	for {
		j, ok := q.DequeueAt(t0, nil)
		if !ok {
			return out
		}
		out = append(out, j)
	}
}

func values(jobs []drr.Job[string]) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Value
	}
	return out
}

func TestSmallTenantInterleavesWithBacklog(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 100, MaxPerTenant: 1000})
	for i := range 500 {
		enqueue(t, q, "big", 100, fmt.Sprintf("big-%d", i))
	}
	for i := range 3 {
		enqueue(t, q, "small", 100, fmt.Sprintf("small-%d", i))
	}

	var positions []int // 1-based
	for i, j := range drain(q) {
		if j.Tenant == "small" {
			positions = append(positions, i+1)
		}
	}
	require.Equal(t, []int{2, 4, 6}, positions)
	require.Zero(t, q.Len())
}

func TestTokensAreSharedByCostNotCount(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 1000, MaxPerTenant: 10000})
	for range 200 {
		enqueue(t, q, "large", 1000, "")
	}
	for range 2000 {
		enqueue(t, q, "small", 100, "")
	}

	tokens := map[string]int64{}
	for range 1100 { // 100 rounds: one large job and ten small ones each
		j, ok := q.DequeueAt(t0, nil)
		require.True(t, ok)
		tokens[j.Tenant] += j.Cost
		require.LessOrEqual(t, abs(tokens["large"]-tokens["small"]), int64(1000),
			"the token gap never exceeds one grant while both are backlogged")
	}
	require.Equal(t, int64(100_000), tokens["large"])
	require.Equal(t, int64(100_000), tokens["small"])
	require.Positive(t, q.TenantLen("large"), "both were backlogged throughout")
	require.Positive(t, q.TenantLen("small"), "both were backlogged throughout")
}

func TestWeightThreeGetsThreeTimesTheTokens(t *testing.T) {
	t.Parallel()
	weights := map[string]float64{"plus": 3, "basic": 1}
	q := newQueue(t, drr.Config{
		Quantum:      100,
		MaxPerTenant: 10000,
		Weight:       func(tenant string) float64 { return weights[tenant] },
	})
	for range 1000 {
		enqueue(t, q, "basic", 100, "")
		enqueue(t, q, "plus", 100, "")
	}

	tokens := map[string]int64{}
	for range 400 { // 100 rounds of three plus jobs and one basic job
		j, ok := q.DequeueAt(t0, nil)
		require.True(t, ok)
		tokens[j.Tenant] += j.Cost
	}
	require.Equal(t, int64(30_000), tokens["plus"])
	require.Equal(t, int64(10_000), tokens["basic"])
}

func TestInvalidWeightsCountAsOne(t *testing.T) {
	t.Parallel()
	for _, w := range []float64{0, -2, math.NaN(), math.Inf(1), math.Inf(-1)} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, drr.Config{
				Quantum:      100,
				MaxPerTenant: 100,
				Weight: func(tenant string) float64 {
					if tenant == "odd" {
						return w
					}
					return 1
				},
			})
			for i := range 3 {
				enqueue(t, q, "odd", 100, fmt.Sprint("odd-", i))
				enqueue(t, q, "one", 100, fmt.Sprint("one-", i))
			}
			require.Equal(t,
				[]string{"odd-0", "one-0", "odd-1", "one-1", "odd-2", "one-2"},
				values(drain(q)))
		})
	}
}

func TestConfigGrant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		quantum int64
		weight  func(string) float64
		want    int64
	}{
		{"nil weight", 100, nil, 100},
		{"weight 1", 100, constant(1), 100},
		{"fractional", 100, constant(2.5), 250},
		{"rounds to nearest", 100, constant(0.333), 33},
		{"rounds halves away from zero", 10, constant(0.25), 3},
		{"at least 1", 100, constant(0.004), 1},
		{"zero counts as 1", 100, constant(0), 100},
		{"negative counts as 1", 100, constant(-3), 100},
		{"NaN counts as 1", 100, constant(math.NaN()), 100},
		{"+Inf counts as 1", 100, constant(math.Inf(1)), 100},
		{"-Inf counts as 1", 100, constant(math.Inf(-1)), 100},
		{"weight 1 is exact above 2^53", 1<<53 + 1, constant(1), 1<<53 + 1},
		{"saturates", math.MaxInt64, constant(2), math.MaxInt64},
		{"huge weight saturates", 1, constant(1e300), math.MaxInt64},
		{"half of the largest quantum", math.MaxInt64, constant(0.5), 1 << 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := drr.Config{Quantum: tt.quantum, MaxPerTenant: 1, Weight: tt.weight}
			require.Equal(t, tt.want, cfg.Grant("t"))
		})
	}
}

func constant(w float64) func(string) float64 { return func(string) float64 { return w } }

func TestFullTenantDoesNotBlockAnother(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 2})
	enqueue(t, q, "runaway", 10, "r0")
	enqueue(t, q, "runaway", 10, "r1")

	err := q.EnqueueAt(t0, drr.Job[string]{Tenant: "runaway", Cost: 10})
	require.ErrorIs(t, err, drr.ErrQueueFull)
	require.ErrorContains(t, err, `"runaway"`)
	require.ErrorContains(t, err, "MaxPerTenant is 2")
	require.True(t, strings.HasPrefix(err.Error(), "drr: "), err.Error())

	enqueue(t, q, "quiet", 10, "q0")
	require.Equal(t, 2, q.TenantLen("runaway"))
	require.Equal(t, 1, q.TenantLen("quiet"))
	require.Equal(t, 3, q.Len())

	j, ok := q.DequeueAt(t0, nil)
	require.True(t, ok)
	require.Equal(t, "r0", j.Value)
	enqueue(t, q, "runaway", 10, "r2") // room again
}

func TestExpiredJobsAreDroppedAndReported(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10, DefaultTTL: time.Hour})
	for _, j := range []drr.Job[string]{
		{Tenant: "a", Cost: 10, Deadline: t0.Add(time.Second), Value: "stale"},
		{Tenant: "a", Cost: 10, Deadline: t0.Add(2 * time.Second), Value: "due now"},
		{Tenant: "a", Cost: 10, Value: "live"},
		{Tenant: "b", Cost: 10, Value: "b's"},
	} {
		require.NoError(t, q.EnqueueAt(t0, j))
	}

	var expired []string
	report := func(j drr.Job[string]) { expired = append(expired, j.Value) }

	j, ok := q.DequeueAt(t0.Add(2*time.Second), report)
	require.True(t, ok)
	require.Equal(t, "live", j.Value, "the next live job runs")
	require.Equal(t, t0.Add(time.Hour), j.Deadline, "a job without a deadline gets DefaultTTL")
	require.Equal(t, []string{"stale", "due now"}, expired, "a deadline equal to now is expired")
	require.Equal(t, 1, q.Len())

	expired = nil
	_, ok = q.DequeueAt(t0.Add(time.Hour), report)
	require.False(t, ok, "an expired job is never returned")
	require.Equal(t, []string{"b's"}, expired)
	require.Zero(t, q.Len())
	require.Zero(t, q.TenantLen("b"))
}

func TestDefaultTTLIs24Hours(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	enqueue(t, q, "a", 10, "first")
	enqueue(t, q, "a", 10, "second")

	j, ok := q.DequeueAt(t0.Add(24*time.Hour-time.Nanosecond), nil)
	require.True(t, ok)
	require.Equal(t, t0.Add(24*time.Hour), j.Deadline)

	_, ok = q.DequeueAt(t0.Add(24*time.Hour), nil)
	require.False(t, ok)
}

func TestEnqueueAndDequeueReadTheClock(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	before := time.Now()
	require.NoError(t, q.Enqueue(drr.Job[string]{Tenant: "a", Cost: 10, Value: "now"}))
	after := time.Now()

	j, ok := q.Dequeue(nil)
	require.True(t, ok)
	require.Equal(t, "now", j.Value)
	require.False(t, j.Deadline.Before(before.Add(24*time.Hour)), "deadline %v", j.Deadline)
	require.False(t, j.Deadline.After(after.Add(24*time.Hour)), "deadline %v", j.Deadline)
}

func TestExpiredJobsCountTowardsTheBoundUntilDropped(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 1})
	require.NoError(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: "a", Cost: 10, Deadline: t0.Add(-time.Second)}),
		"a job already past its deadline is accepted")
	require.ErrorIs(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: "a", Cost: 10}), drr.ErrQueueFull)

	_, ok := q.DequeueAt(t0, nil)
	require.False(t, ok)
	enqueue(t, q, "a", 10, "")
}

func TestOnExpiredMayCallTheQueue(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	require.NoError(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: "a", Cost: 10, Deadline: t0, Value: "late"}))

	_, ok := q.DequeueAt(t0, func(j drr.Job[string]) {
		// A retry with a fresh deadline; this deadlocks if the lock is held.
		j.Deadline = time.Time{}
		j.Value = "retry"
		require.NoError(t, q.EnqueueAt(t0, j))
	})
	require.False(t, ok)

	j, ok := q.DequeueAt(t0, nil)
	require.True(t, ok)
	require.Equal(t, "retry", j.Value)
}

func TestHugeCostDequeuesWithoutLooping(t *testing.T) {
	t.Parallel()
	// Plain looping would make 10^12 visits; this finishes at once.
	q := newQueue(t, drr.Config{Quantum: 1, MaxPerTenant: 10})
	enqueue(t, q, "a", 1_000_000_000_000, "a")
	enqueue(t, q, "b", 500_000_000_000, "b0")
	enqueue(t, q, "b", 500_000_000_000, "b1")

	// b covers its first job after 5×10^11 rounds, a and b's second job
	// after 10^12 rounds, in ring order.
	require.Equal(t, []string{"b0", "a", "b1"}, values(drain(q)))
}

// A tenant whose only job expires during a futile pass leaves the ring, and
// the pass starts its count again: the skip over futile rounds still comes,
// rather than the ring being looped visit by visit (10^12 visits here).
func TestHugeCostSkipsAfterATenantExpiresMidPass(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 1, MaxPerTenant: 10})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	require.NoError(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: "b", Cost: 1_000_000_000_000, Value: "huge"}))
	require.NoError(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: "a", Cost: 5, Deadline: t0.Add(time.Second), Value: "late"}))
	var expired []string
	done := make(chan drr.Job[string], 1)
	go func() {
		j, _ := q.DequeueAt(t0.Add(time.Minute), func(j drr.Job[string]) { expired = append(expired, j.Value) })
		done <- j
	}()
	select {
	case j := <-done:
		require.Equal(t, "huge", j.Value)
		require.Equal(t, []string{"late"}, expired)
	case <-time.After(10 * time.Second):
		t.Fatal("DequeueAt loops visit by visit")
	}
}

func TestDeficitsSaturate(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: math.MaxInt64, MaxPerTenant: 10})
	enqueue(t, q, "a", 1, "a0")
	enqueue(t, q, "a", math.MaxInt64, "a1")
	enqueue(t, q, "b", math.MaxInt64, "b0")

	// a keeps MaxInt64-1 after a0; its next grant would overflow, so it
	// saturates and covers a1.
	require.Equal(t, []string{"a0", "b0", "a1"}, values(drain(q)))
}

func TestEmptiedTenantDoesNotBankCredit(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	enqueue(t, q, "a", 1, "a0") // leaves 9 unspent, then a leaves the ring
	for i := range 3 {
		enqueue(t, q, "b", 10, fmt.Sprint("b", i))
	}

	j, ok := q.DequeueAt(t0, nil)
	require.True(t, ok)
	require.Equal(t, "a0", j.Value)

	// a comes back in the round it left: its first visit is in the next
	// round, where the 9 kept would cover a1. Without them it takes two.
	enqueue(t, q, "a", 15, "a1")
	require.Equal(t, []string{"b0", "b1", "b2", "a1"}, values(drain(q)))
}

func TestTenantJoiningPastTheEndJoinsTheCurrentRound(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	for i := range 3 {
		enqueue(t, q, "a", 10, fmt.Sprint("a", i))
	}
	enqueue(t, q, "b", 10, "b0")

	var got []string
	for range 2 {
		j, ok := q.DequeueAt(t0, nil)
		require.True(t, ok)
		got = append(got, j.Value)
	}
	// b emptied, so the pointer is past the end of the ring: c is next.
	enqueue(t, q, "c", 10, "c0")
	got = append(got, values(drain(q))...)
	require.Equal(t, []string{"a0", "b0", "c0", "a1", "a2"}, got)
}

// A tenant that refills its queue whenever it empties, as a chain of jobs
// each enqueueing the next does, gets one visit a round like any other.
func TestTenantThatRefillsWhenItEmptiesWaitsForTheNextRound(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	for i := range 3 {
		enqueue(t, q, "a", 10, fmt.Sprint("a", i))
	}
	enqueue(t, q, "b", 10, "b0")

	var got []string
	for i := 1; ; i++ {
		j, ok := q.DequeueAt(t0, nil)
		if !ok {
			break
		}
		got = append(got, j.Value)
		if j.Tenant == "b" && i < 6 {
			enqueue(t, q, "b", 10, fmt.Sprint("b", i))
		}
	}
	require.Equal(t, []string{"a0", "b0", "a1", "b2", "a2", "b4"}, got)
}

// A tenant that comes back in the round it left, while the pointer is still
// in the middle of the ring, is visited after the tenants behind the pointer
// and the ones before it.
func TestTenantBackInTheRoundItLeftJoinsTheNextRound(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	enqueue(t, q, "a", 10, "a0")
	enqueue(t, q, "a", 10, "a1")
	enqueue(t, q, "b", 10, "b0")
	enqueue(t, q, "c", 10, "c0")
	enqueue(t, q, "c", 10, "c1")

	var got []string
	for range 2 {
		j, ok := q.DequeueAt(t0, nil)
		require.True(t, ok)
		got = append(got, j.Value)
	}
	enqueue(t, q, "b", 10, "b1") // b left in this round, before c's visit
	enqueue(t, q, "d", 10, "d0") // d is new: it joins this round
	got = append(got, values(drain(q))...)
	require.Equal(t, []string{"a0", "b0", "c0", "d0", "a1", "c1", "b1"}, got)
}

func TestLargeJobWaitsForItsDeficit(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 10, MaxPerTenant: 10})
	enqueue(t, q, "a", 25, "a-large")
	for i := range 4 {
		enqueue(t, q, "b", 10, fmt.Sprint("b", i))
	}
	// a's deficit is 10, 20, then 30 on its third visit.
	require.Equal(t, []string{"b0", "b1", "a-large", "b2", "b3"}, values(drain(q)))
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	valid := drr.Config{Quantum: 1, MaxPerTenant: 1}
	tests := []struct {
		name  string
		edit  func(*drr.Config)
		field string
	}{
		{"zero quantum", func(c *drr.Config) { c.Quantum = 0 }, "Quantum"},
		{"negative quantum", func(c *drr.Config) { c.Quantum = -5 }, "Quantum"},
		{"zero bound", func(c *drr.Config) { c.MaxPerTenant = 0 }, "MaxPerTenant"},
		{"negative bound", func(c *drr.Config) { c.MaxPerTenant = -1 }, "MaxPerTenant"},
		{"negative TTL", func(c *drr.Config) { c.DefaultTTL = -time.Second }, "DefaultTTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tt.edit(&cfg)
			q, err := drr.New[string](cfg)
			require.Nil(t, q)
			require.ErrorContains(t, err, "drr: Config."+tt.field)
		})
	}
}

func TestInvalidJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		job   drr.Job[string]
		field string
	}{
		{"empty tenant", drr.Job[string]{Cost: 1}, "Tenant"},
		{"zero cost", drr.Job[string]{Tenant: "a"}, "Cost"},
		{"negative cost", drr.Job[string]{Tenant: "a", Cost: -1}, "Cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newQueue(t, drr.Config{Quantum: 1, MaxPerTenant: 1})
			err := q.EnqueueAt(t0, tt.job)
			require.ErrorIs(t, err, drr.ErrInvalidJob)
			require.False(t, errors.Is(err, drr.ErrQueueFull))
			require.ErrorContains(t, err, "drr: invalid job: "+tt.field)
			require.Zero(t, q.Len())
		})
	}
}

func TestZeroQueueHoldsNothing(t *testing.T) {
	t.Parallel()
	var q drr.Queue[string]
	require.ErrorIs(t, q.EnqueueAt(t0, drr.Job[string]{Tenant: "a", Cost: 1}), drr.ErrQueueFull)
	_, ok := q.DequeueAt(t0, nil)
	require.False(t, ok)
	require.Zero(t, q.Len())
	require.Zero(t, q.TenantLen("a"))
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	const producers, consumers, perProducer = 4, 4, 500
	const total = producers * perProducer
	q, err := drr.New[int](drr.Config{Quantum: 100, MaxPerTenant: total})
	require.NoError(t, err)

	var mu sync.Mutex
	returned := map[int]int{}
	expired := map[int]int{}
	var accounted atomic.Int64

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				id := p*perProducer + i
				j := drr.Job[int]{Tenant: fmt.Sprint("tenant-", id%7), Cost: int64(1 + id%250), Value: id}
				if id%5 == 0 {
					j.Deadline = t0.Add(-time.Second)
				}
				if err := q.EnqueueAt(t0, j); err != nil {
					t.Error(err)
					accounted.Add(1) // so the consumers still stop
				}
				_ = q.TenantLen(j.Tenant)
			}
		})
	}
	for range consumers {
		wg.Go(func() {
			onExpired := func(j drr.Job[int]) {
				mu.Lock()
				expired[j.Value]++
				mu.Unlock()
				accounted.Add(1)
			}
			for accounted.Load() < total {
				j, ok := q.DequeueAt(t0, onExpired)
				if !ok {
					runtime.Gosched()
					continue
				}
				mu.Lock()
				returned[j.Value]++
				mu.Unlock()
				accounted.Add(1)
			}
		})
	}
	wg.Wait()

	require.Zero(t, q.Len())
	require.Len(t, returned, total-total/5)
	require.Len(t, expired, total/5)
	for id, n := range returned {
		require.Equal(t, 1, n, "job %d returned once", id)
		require.NotZero(t, id%5, "job %d had expired", id)
	}
	for id, n := range expired {
		require.Equal(t, 1, n, "job %d reported once", id)
		require.Zero(t, id%5, "job %d was live", id)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// refQueue is the article's FairQueue transcribed line by line, with the
// rules drr adds to it: the grant rule of Config.Grant, saturating deficits,
// default deadlines, argument time, and a tenant that comes back in the pass
// it left in waits for the next pass. It loops through every futile round.
type refQueue struct {
	cfg     drr.Config
	queues  map[string][]drr.Job[int]
	deficit map[string]int64
	active  []string
	cursor  int
	granted bool
	pass    int64            // wraps of the cursor
	left    map[string]int64 // the pass each tenant last left the ring in
	from    map[string]int64 // the first pass an active tenant may be visited in
}

func newRefQueue(cfg drr.Config) *refQueue {
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = 24 * time.Hour
	}
	return &refQueue{cfg: cfg, queues: map[string][]drr.Job[int]{}, deficit: map[string]int64{},
		left: map[string]int64{}, from: map[string]int64{}}
}

func (r *refQueue) enqueue(now time.Time, j drr.Job[int]) error {
	if j.Tenant == "" || j.Cost <= 0 {
		return drr.ErrInvalidJob
	}
	q := r.queues[j.Tenant]
	if len(q) >= r.cfg.MaxPerTenant {
		return drr.ErrQueueFull
	}
	if j.Deadline.IsZero() {
		j.Deadline = now.Add(r.cfg.DefaultTTL)
	}
	r.queues[j.Tenant] = append(q, j)
	if !slices.Contains(r.active, j.Tenant) {
		r.active = append(r.active, j.Tenant)
		r.deficit[j.Tenant] = 0
		r.from[j.Tenant] = r.pass
		if left, ok := r.left[j.Tenant]; ok && left == r.pass {
			r.from[j.Tenant]++
		}
	}
	return nil
}

func (r *refQueue) dequeue(now time.Time, onExpired func(drr.Job[int])) (drr.Job[int], bool) {
	for len(r.active) > 0 {
		if r.cursor >= len(r.active) {
			r.cursor = 0
			r.pass++
		}
		tenant := r.active[r.cursor]
		if r.from[tenant] > r.pass {
			r.cursor++
			r.granted = false
			continue
		}
		for len(r.queues[tenant]) > 0 && !r.queues[tenant][0].Deadline.After(now) {
			onExpired(r.queues[tenant][0])
			r.queues[tenant] = r.queues[tenant][1:]
		}
		if len(r.queues[tenant]) == 0 {
			r.remove(tenant)
			continue
		}
		if !r.granted {
			r.deficit[tenant] = saturatingAdd(r.deficit[tenant], refGrant(r.cfg, tenant))
			r.granted = true
		}
		head := r.queues[tenant][0]
		if head.Cost <= r.deficit[tenant] {
			r.deficit[tenant] -= head.Cost
			r.queues[tenant] = r.queues[tenant][1:]
			if len(r.queues[tenant]) == 0 {
				r.remove(tenant)
			}
			return head, true
		}
		r.cursor++
		r.granted = false
	}
	return drr.Job[int]{}, false
}

func (r *refQueue) size(tenant string) int {
	if tenant != "" {
		return len(r.queues[tenant])
	}
	n := 0
	for _, q := range r.queues {
		n += len(q)
	}
	return n
}

func (r *refQueue) remove(tenant string) {
	i := slices.Index(r.active, tenant)
	r.active = slices.Delete(r.active, i, i+1)
	delete(r.deficit, tenant)
	r.left[tenant] = r.pass
	if i < r.cursor {
		r.cursor--
	}
	r.granted = false
}

// refGrant is the documented rule of Config.Grant, written out again.
func refGrant(cfg drr.Config, tenant string) int64 {
	w := 1.0
	if cfg.Weight != nil {
		w = cfg.Weight(tenant)
	}
	if !(w > 0) || math.IsInf(w, 1) || w == 1 {
		return max(cfg.Quantum, 1)
	}
	g := math.Round(float64(cfg.Quantum) * w)
	if g >= 0x1p63 {
		return math.MaxInt64
	}
	return max(int64(g), 1)
}

func saturatingAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

// source turns fuzz or random bytes into workload decisions; past the end
// of its bytes it answers zero.
type source struct {
	data []byte
	i    int
}

func (s *source) done() bool { return s.i >= len(s.data) }

func (s *source) byte() byte {
	if s.done() {
		return 0
	}
	s.i++
	return s.data[s.i-1]
}

func (s *source) intn(n int) int { return int(s.byte()) % n }

func (s *source) uint64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(s.byte())
	}
	return v
}

// cost picks a job cost for a tenant of grant g: often at the edges of one
// grant, never more than 64 grants, so the reference loops at most 64
// rounds per dequeue.
func (s *source) cost(g int64) int64 {
	limit := int64(math.MaxInt64)
	if g <= math.MaxInt64/64 {
		limit = 64 * g
	}
	switch s.intn(6) {
	case 0:
		return 1
	case 1:
		return g
	case 2:
		return min(saturatingAdd(g, 1), limit)
	case 3:
		return max(g-1, 1)
	case 4:
		return 1 + int64(s.uint64()%uint64(limit))
	default:
		twice := saturatingAdd(g, g)
		return 1 + int64(s.uint64()%uint64(min(limit, saturatingAdd(twice, twice))))
	}
}

var (
	refQuanta  = []int64{1, 3, 10, 100, 1000, 1 << 40, math.MaxInt64 / 2, math.MaxInt64}
	refWeights = []float64{1, 1, 2, 3, 0.5, 0.25, 1.5, 0.3, 0.001, 1e12, 0, -1, math.NaN(), math.Inf(1)}
	refTTLs    = []time.Duration{0, 3 * time.Second, 10 * time.Second}
)

// checkAgainstReference runs the workload the bytes describe on a Queue and
// on refQueue and fails at the first difference in enqueue errors, dequeue
// order, expired reports or lengths.
func checkAgainstReference(t testing.TB, data []byte) {
	t.Helper()
	src := &source{data: data}
	tenants := make([]string, 1+src.intn(6))
	weights := map[string]float64{}
	for i := range tenants {
		tenants[i] = fmt.Sprint("t", i)
		weights[tenants[i]] = refWeights[src.intn(len(refWeights))]
	}
	cfg := drr.Config{
		Quantum:      refQuanta[src.intn(len(refQuanta))],
		MaxPerTenant: 1 + src.intn(8),
		DefaultTTL:   refTTLs[src.intn(len(refTTLs))],
	}
	if src.intn(4) > 0 {
		cfg.Weight = func(tenant string) float64 { return weights[tenant] }
	}
	q, err := drr.New[int](cfg)
	require.NoError(t, err)
	ref := newRefQueue(cfg)

	now := t0
	nextID := 0
	dequeue := func(step int) bool {
		var gotExpired, wantExpired []drr.Job[int]
		got, gotOK := q.DequeueAt(now, func(j drr.Job[int]) { gotExpired = append(gotExpired, j) })
		want, wantOK := ref.dequeue(now, func(j drr.Job[int]) { wantExpired = append(wantExpired, j) })
		require.Equal(t, wantExpired, gotExpired, "step %d: expired reports", step)
		require.Equal(t, wantOK, gotOK, "step %d: dequeued", step)
		require.Equal(t, want, got, "step %d: dequeued job", step)
		return gotOK
	}
	for step := 0; !src.done() && step < 5000; step++ {
		switch op := src.intn(10); {
		case op < 5:
			tenant := tenants[src.intn(len(tenants))]
			j := drr.Job[int]{Tenant: tenant, Cost: src.cost(refGrant(cfg, tenant)), Value: nextID}
			nextID++
			switch src.intn(5) {
			case 0: // zero: DefaultTTL
			case 1:
				j.Deadline = now
			case 2:
				j.Deadline = now.Add(time.Duration(src.intn(13)-3) * time.Second)
			case 3:
				j.Deadline = now.Add(time.Duration(src.intn(250)) * 10 * time.Millisecond)
			case 4:
				j.Deadline = now.Add(time.Hour)
			}
			if src.intn(50) == 0 {
				j.Tenant = ""
			}
			if src.intn(50) == 0 {
				j.Cost = -int64(src.intn(2))
			}
			gotErr, wantErr := q.EnqueueAt(now, j), ref.enqueue(now, j)
			require.Equal(t, wantErr == nil, gotErr == nil, "step %d: enqueue %+v: %v", step, j, gotErr)
			if wantErr != nil {
				require.ErrorIs(t, gotErr, wantErr, "step %d", step)
			}
		case op < 8:
			dequeue(step)
		case op < 9:
			now = now.Add(time.Duration(src.intn(5)) * 500 * time.Millisecond)
		default:
			for dequeue(step) {
			}
		}
		require.Equal(t, ref.size(""), q.Len(), "step %d: Len", step)
		for _, tenant := range tenants {
			require.Equal(t, ref.size(tenant), q.TenantLen(tenant), "step %d: TenantLen(%s)", step, tenant)
		}
	}
}

func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestDequeueOrderMatchesLoopingReference(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			checkAgainstReference(t, randomBytes(seed, 6000))
		})
	}
}

func FuzzDequeueOrder(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("large tenant, small tenant, one deadline"))
	for seed := range uint64(8) {
		f.Add(randomBytes(seed, 512))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstReference(t, data)
	})
}

// BenchmarkDequeue measures one dequeue in a steady state: every job taken
// is put back, so the ring keeps its tenants. Costs range over 1..1000 with
// a quantum of 500, so some visits move on without dequeuing.
func BenchmarkDequeue(b *testing.B) {
	for _, tenants := range []int{10, 1_000, 100_000} {
		b.Run(fmt.Sprint("tenants=", tenants), func(b *testing.B) {
			q, err := drr.New[int](drr.Config{Quantum: 500, MaxPerTenant: 8})
			require.NoError(b, err)
			for i := range 4 * tenants {
				j := drr.Job[int]{Tenant: fmt.Sprint("tenant-", i%tenants), Cost: int64(1 + i*7919%1000), Value: i}
				require.NoError(b, q.EnqueueAt(t0, j))
			}
			b.ReportAllocs()
			for b.Loop() {
				j, ok := q.DequeueAt(t0, nil)
				if !ok {
					b.Fatal("queue ran dry")
				}
				if err := q.EnqueueAt(t0, j); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A skip over futile rounds can span nearly 2^63 passes (a quantum of 1, a
// job costing MaxInt64). A tenant that came back in the round it left still
// waits for one round only, and the queue goes on dequeuing.
func TestHugeSkipAfterATenantCameBackDoesNotStall(t *testing.T) {
	t.Parallel()
	q := newQueue(t, drr.Config{Quantum: 1, MaxPerTenant: 10})
	enqueue(t, q, "a", math.MaxInt64, "a0")
	enqueue(t, q, "b", math.MaxInt64, "b0")
	enqueue(t, q, "b", math.MaxInt64, "b1")
	j, ok := q.DequeueAt(t0, nil)
	require.True(t, ok)
	require.Equal(t, "a0", j.Value)
	enqueue(t, q, "a", math.MaxInt64, "a1") // a left in this round
	enqueue(t, q, "c", math.MaxInt64, "c0")

	done := make(chan []string)
	go func() { done <- values(drain(q)) }()
	select {
	case got := <-done:
		// c's grants began a round before a's and b1's; b is ahead of a in
		// the ring.
		require.Equal(t, []string{"b0", "c0", "b1", "a1"}, got)
	case <-time.After(10 * time.Second):
		t.Fatal("DequeueAt did not return")
	}
}
