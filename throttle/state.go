package throttle

import (
	"math"
	"sort"
	"time"

	"github.com/batchq/batchq/quotaheaders"
)

// State is everything a fleet shares about one quota key. A [Store] loads and
// saves it whole; the throttle's decisions are pure functions of a State, the
// time and the call, so a store needs no logic of its own.
//
// All times are whole microseconds with no monotonic clock reading, so they
// survive a round trip through a Postgres timestamptz (or JSON) unchanged; a
// store may return them in any location. The zero State means nothing is
// known: every call may start.
type State struct {
	// Requests and Tokens are what the provider last said about each unit.
	Requests Quota `json:"requests"`
	Tokens   Quota `json:"tokens"`

	// Admitted lists the calls admitted since the oldest kept observation
	// was sent, oldest first, at most [MaxAdmitted] entries. A response
	// counts the calls sent before it, not those sent after, so these are
	// subtracted from what it reports.
	Admitted []Admission `json:"admitted,omitempty"`

	// PausedUntil stops every start, interactive included, after a 429.
	PausedUntil time.Time `json:"paused_until"`
	// Backoff is the current pause for a 429 without Retry-After: it starts
	// at Config.DefaultPause, doubles on each repeated 429 up to
	// Config.MaxPause, and returns to zero after a success.
	Backoff time.Duration `json:"backoff"`
	// BackoffAt is when the 429 that set Backoff was received. A 429 for a
	// call sent before it belongs to the same episode and does not double the
	// pause; a success for a call sent before it does not end the episode.
	BackoffAt time.Time `json:"backoff_at"`

	// ProbeAt is when one call may start to learn more, while a unit is short
	// and nothing says when it will refill. Zero when no probe is pending.
	ProbeAt time.Time `json:"probe_at"`
	// ProbeSent is when the last probe was admitted, until a response to a
	// call sent from then on arrives: its answer is what there is to learn,
	// so no other probe starts meanwhile (for up to Config.MaxPause, in case
	// it never answers). Zero when no probe is out.
	ProbeSent time.Time `json:"probe_sent,omitzero"`
}

// Quota is what is known about one unit (requests or tokens) of a quota key:
// the observation from the latest-sent request that has answered, plus the
// limit and the window's reset time as learned from any response.
type Quota struct {
	// Observed reports whether any response reported this unit. The other
	// fields mean something only when it is set.
	Observed bool `json:"observed"`

	Limit    int64 `json:"limit"`
	HasLimit bool  `json:"has_limit"`

	// Remaining is what the kept observation reported.
	Remaining int64 `json:"remaining"`
	// SentAt is when the kept observation's call was admitted (sent):
	// Remaining counts the calls admitted up to then, that one included, and
	// not those admitted after. Calls are counted at distinct instants, so a
	// call counted in the same microsecond is that one.
	SentAt time.Time `json:"sent_at"`
	// ReceivedAt is when its response arrived; a token bucket's refill is
	// counted from here, since the provider measured no later than this.
	ReceivedAt time.Time `json:"received_at"`

	// HasReset reports whether the provider gave a reset time. The provider
	// measured somewhere between a request's send and its response, so its
	// reset lies in [ResetFrom, ResetAt]. For a window, responses of the same
	// window narrow the interval; the throttle trusts the new window only from
	// ResetAt, and counts against it what was admitted from ResetFrom on.
	// With a token bucket, the reset is when the bucket will be full again.
	HasReset  bool      `json:"has_reset"`
	ResetFrom time.Time `json:"reset_from"`
	ResetAt   time.Time `json:"reset_at"`

	// Interactive is, for a window, what interactive calls admitted from
	// InteractiveSince on have taken of this unit in the current window. The
	// reserve is there for them to use in each window: what they already
	// used of it need not be kept again, so batch calls keep back only the
	// reserve less this. Zero for a token bucket.
	Interactive      int64     `json:"interactive,omitempty"`
	InteractiveSince time.Time `json:"interactive_since,omitzero"`
}

// Admission is what the throttle let through at one instant.
type Admission struct {
	At     time.Time `json:"at"`
	Calls  int64     `json:"calls"`
	Tokens int64     `json:"tokens"`
}

// Shift moves every time s holds by d, leaving unset (zero) times unset. A
// store that keeps the times on another clock than its callers' (a database
// a fleet shares, whose workers' clocks disagree with it and with each
// other) shifts a State by the offset between the two clocks as it saves
// it, and back as it loads it, so that each caller reads the shared times on
// its own clock. d is truncated to whole microseconds, as the times are.
func (s *State) Shift(d time.Duration) {
	d = d.Truncate(time.Microsecond)
	if d == 0 {
		return
	}
	move := func(t *time.Time) {
		if !t.IsZero() {
			*t = t.Add(d)
		}
	}
	for _, q := range [...]*Quota{&s.Requests, &s.Tokens} {
		move(&q.SentAt)
		move(&q.ReceivedAt)
		move(&q.ResetFrom)
		move(&q.ResetAt)
		move(&q.InteractiveSince)
	}
	for i := range s.Admitted {
		move(&s.Admitted[i].At)
	}
	move(&s.PausedUntil)
	move(&s.BackoffAt)
	move(&s.ProbeAt)
	move(&s.ProbeSent)
}

// MaxAdmitted bounds State.Admitted. When more entries are needed, the oldest
// two are merged at the later one's time (unless that is an observed call's
// own): that counts the older calls as sent later than they were, which only
// ever makes the throttle more careful.
const MaxAdmitted = 64

// policy is a Config with its defaults applied.
type policy struct {
	reserve       float64
	refill        Refill
	probeInterval time.Duration
	defaultPause  time.Duration
	maxPause      time.Duration
	maxRetryAfter time.Duration
	reorder       time.Duration
}

// reserveOf is how much of limit a call of priority p may not use:
// ceil(limit × reserve), where a product a rounding error puts just above a
// whole number (100 × 0.07 is 7.000000000000001) counts as that number.
func (pol policy) reserveOf(limit int64, p Priority) int64 {
	if p == Interactive || limit <= 0 {
		return 0
	}
	r := float64(limit) * pol.reserve
	if f := math.Floor(r); r-f <= 1e-9*max(1, r) {
		r = f
	}
	return int64(math.Ceil(r))
}

// decide answers one call and, if it may start, counts it. never is set when
// the decision is Never.
func decide(s *State, pol policy, now time.Time, cost int64, p Priority) (d Decision, never *NeverError) {
	cost = max(cost, 0)
	units := [...]struct {
		unit quotaheaders.Unit
		q    *Quota
		cost int64
	}{
		{quotaheaders.Requests, &s.Requests, 1},
		{quotaheaders.Tokens, &s.Tokens, cost},
	}

	for _, u := range units {
		// A limit of 0 says the quota is used up, not that nothing will ever
		// fit (a provider's 429 may say so): it waits, for the reset or for a
		// probe, like any quota used up. Taken for "never", it would fail
		// every call for good, and no call would ever learn the limit again.
		if !u.q.Observed || !u.q.HasLimit || u.q.Limit <= 0 {
			continue
		}
		if reserve := pol.reserveOf(u.q.Limit, p); u.cost > u.q.Limit-reserve {
			return Decision{Never: true}, &NeverError{
				Priority: p, Unit: u.unit, Cost: u.cost, Limit: u.q.Limit, Reserve: reserve,
			}
		}
	}

	if now.Before(s.PausedUntil) {
		return Decision{Wait: waitFor(s.PausedUntil.Sub(now))}, nil
	}

	var wait time.Duration
	short, probe, reserveOnly := false, false, true
	for _, u := range units {
		v := view(u.q, pol, s.Admitted, u.unit, now)
		if !v.known {
			continue
		}
		need := u.cost + pol.reserveLeft(u.q, p, now) - v.avail
		if need <= 0 {
			continue
		}
		short = true
		if u.cost > v.avail || u.q.HasReset {
			reserveOnly = false
		}
		if w, ok := v.waitFor(need, now); ok {
			wait = max(wait, w)
		} else {
			probe = true
		}
	}
	// A probe spends what is short. Short of the limit, the quota is used up
	// and a probe every interval learns when it comes back. Short only of
	// the reserve, of a quota whose provider sends no reset time at all, a
	// probe spends the reserve and nothing would ever end the shortage, so
	// one goes only every MaxPause: enough to find a refill nothing else
	// reports, little of the reserve. (After a window rolled over, the
	// answers of the calls already out usually come first.)
	interval := pol.probeInterval
	if reserveOnly {
		interval = max(interval, pol.maxPause)
	}

	probing := false
	switch {
	case !short:
		// Only a batch call that fits says the quota is no longer short for
		// batch work; an interactive one fits the reserve too, and must not
		// end the wait for an outstanding probe's answer.
		if p == Batch {
			s.ProbeAt, s.ProbeSent = time.Time{}, time.Time{}
		}
	case wait > 0:
		// Something known will refill; ask again then.
		return Decision{Wait: wait}, nil
	case probe && s.ProbeAt.IsZero():
		s.ProbeAt = ceilMicro(now.Add(interval))
		return Decision{Wait: interval}, nil
	case now.Before(s.ProbeAt):
		return Decision{Wait: waitFor(s.ProbeAt.Sub(now))}, nil
	case !s.ProbeSent.IsZero() && now.Before(s.ProbeSent.Add(pol.maxPause)):
		// The last probe has not answered. Another would learn nothing more,
		// and would spend what is short: the reserve, or the limit itself
		// (after a window rolled over, while the calls of the new one are
		// out, say).
		return Decision{Wait: pol.probeInterval}, nil
	default:
		// The probe: one call through; the next one an interval later, once
		// this one has answered.
		s.ProbeAt = ceilMicro(now.Add(interval))
		probing = true
	}
	at := s.admit(now, 1, cost)
	if probing {
		s.ProbeSent = at
	}
	if p == Interactive && pol.refill == Window {
		for _, u := range units {
			u.q.creditInteractive(at, u.cost)
		}
	}
	return Decision{OK: true, At: at}, nil
}

// reserveLeft is what of q's limit a call of priority p must leave at now:
// for a batch call in a window, the reserve less what interactive calls
// already took of this window.
func (pol policy) reserveLeft(q *Quota, p Priority, now time.Time) int64 {
	r := pol.reserveOf(q.Limit, p)
	if r > 0 && pol.refill == Window {
		r = max(0, r-q.interactiveIn(now))
	}
	return r
}

// creditInteractive counts an interactive call admitted at at against the
// window it is sure to fall in: the current one when at is before the
// earliest the window can reset, the next one when at is past the latest.
// Between the two nothing is counted.
func (q *Quota) creditInteractive(at time.Time, cost int64) {
	if !q.Observed || !q.HasReset {
		return
	}
	switch {
	case !at.Before(q.ResetAt):
		if q.InteractiveSince.Before(q.ResetAt) {
			q.Interactive, q.InteractiveSince = 0, q.ResetAt
		}
	case at.Before(q.ResetFrom):
		if q.InteractiveSince.IsZero() {
			q.InteractiveSince = at
		}
	default:
		return
	}
	q.Interactive += cost
}

// interactiveIn is what interactive calls took of the window now is in, as
// far as known: nothing when now may be on either side of the reset.
func (q *Quota) interactiveIn(now time.Time) int64 {
	if !q.Observed || !q.HasReset || q.Interactive == 0 {
		return 0
	}
	switch {
	case !now.Before(q.ResetAt):
		if !q.InteractiveSince.Before(q.ResetAt) {
			return q.Interactive
		}
	case now.Before(q.ResetFrom):
		return q.Interactive
	}
	return 0
}

// unitView is what one unit allows at one instant.
type unitView struct {
	known bool  // false: nothing is known, so the unit admits anything
	avail int64 // what is left now, after the calls admitted since the observation
	rate  float64
	until time.Time // when a window resets; zero if no refill is expected
}

// view computes what q allows at now.
func view(q *Quota, pol policy, log []Admission, unit quotaheaders.Unit, now time.Time) unitView {
	if !q.Observed {
		return unitView{}
	}
	if pol.refill == TokenBucket {
		if rate, ok := q.bucketRate(); ok {
			return unitView{known: true, avail: bucketLevel(q, rate, pol.reorder, log, unit, now), rate: rate}
		}
	}
	// A window (or a bucket whose rate cannot be told): what was reported,
	// until the reset; after it, the full limit less what was admitted since.
	if q.HasReset && !now.Before(q.ResetAt) {
		if !q.HasLimit {
			return unitView{} // rolled over and nothing known: go
		}
		// A window forgets what was admitted before it rolled over; a bucket,
		// full at its reset but for what was taken since, does not.
		taken := admitted(log, q.ResetFrom, unit)
		if pol.refill == TokenBucket {
			taken = uncounted(log, q, pol.reorder, unit)
		}
		return unitView{known: true, avail: q.Limit - taken}
	}
	v := unitView{known: true, avail: q.Remaining - uncounted(log, q, pol.reorder, unit)}
	if q.HasReset {
		v.until = q.ResetAt
	}
	return v
}

// waitFor is how long until need more is available, or false if nothing
// known will bring it.
func (v unitView) waitFor(need int64, now time.Time) (time.Duration, bool) {
	if v.rate > 0 {
		// A nanosecond more, so rounding cannot leave the refill a hair short.
		// Beyond what a Duration holds (a slow refill and a large need), the
		// longest wait: converted, it would overflow to a negative one, which
		// waitFor would make a microsecond, and callers would spin.
		ns := math.Ceil(float64(need) / v.rate * float64(time.Second))
		if ns >= math.MaxInt64-1 {
			return time.Duration(math.MaxInt64), true
		}
		return waitFor(time.Duration(ns) + 1), true
	}
	if !v.until.IsZero() && now.Before(v.until) {
		return waitFor(v.until.Sub(now)), true
	}
	return 0, false
}

// bucketRate is a lower bound on the provider's refill rate per second: the
// provider may have rounded remaining down by up to one and the reset up.
func (q *Quota) bucketRate() (float64, bool) {
	if !q.HasLimit || !q.HasReset {
		return 0, false
	}
	gap := q.Limit - q.Remaining - 1
	span := q.ResetAt.Sub(q.ReceivedAt)
	if gap <= 0 || span <= 0 {
		return 0, false
	}
	return float64(gap) / span.Seconds(), true
}

// bucketLevel replays a token bucket from the kept observation: it holds
// Remaining at ReceivedAt, refills at rate up to the limit, and loses each
// call the observation did not count (see notCounted).
func bucketLevel(q *Quota, rate float64, reorder time.Duration, log []Admission, unit quotaheaders.Unit, now time.Time) int64 {
	limit := float64(q.Limit)
	level, at := float64(q.Remaining), q.ReceivedAt
	refill := func(to time.Time) {
		if to.After(at) {
			level = min(limit, level+rate*to.Sub(at).Seconds())
			at = to
		}
	}
	for _, a := range log {
		if !notCounted(a, q, reorder) {
			continue
		}
		refill(a.At)
		level -= float64(a.cost(unit))
	}
	refill(now)
	if level >= 1<<63 { // a limit near the largest int64: float64 rounds it up
		return math.MaxInt64
	}
	return int64(math.Floor(level))
}

func (a Admission) cost(unit quotaheaders.Unit) int64 {
	if unit == quotaheaders.Requests {
		return a.Calls
	}
	return a.Tokens
}

// admitted sums the admissions at or after since.
func admitted(log []Admission, since time.Time, unit quotaheaders.Unit) int64 {
	i := sort.Search(len(log), func(i int) bool { return !log[i].At.Before(since) })
	var n int64
	for _, a := range log[i:] {
		n += a.cost(unit)
	}
	return n
}

// uncounted sums the admissions that the kept observation of q may not have
// counted (see notCounted).
func uncounted(log []Admission, q *Quota, reorder time.Duration, unit quotaheaders.Unit) int64 {
	var n int64
	for _, a := range log {
		if notCounted(a, q, reorder) {
			n += a.cost(unit)
		}
	}
	return n
}

// notCounted reports whether the response of q's kept observation may not
// have counted the calls of a: those counted after its own call, and those
// counted less than reorder before it, which may have reached the provider
// after it. Its own call, counted at exactly SentAt, it counted.
func notCounted(a Admission, q *Quota, reorder time.Duration) bool {
	return a.At.After(q.SentAt) || a.At.Before(q.SentAt) && !a.At.Before(q.SentAt.Add(-reorder))
}

// admit counts a call and returns the instant it is counted at: now, or a
// microsecond after the latest instant the state already holds when another
// process (or goroutine) recorded a later one first. Deciding takes a store
// round trip or a lock, so a call decided at an earlier now can be counted,
// and sent, after a call decided later; counting it at its own now would
// take it as sent before the other, and the other's response, which never saw
// it, as having counted it. The log stays in order and bounded.
func (s *State) admit(now time.Time, calls, tokens int64) time.Time {
	at := floorMicro(now)
	latest := func(t time.Time) {
		if !at.After(t) {
			at = t.Add(time.Microsecond)
		}
	}
	if n := len(s.Admitted); n > 0 {
		latest(s.Admitted[n-1].At)
	}
	for _, q := range [...]*Quota{&s.Requests, &s.Tokens} {
		if q.Observed {
			latest(q.SentAt)
		}
	}
	s.Admitted = append(s.Admitted, Admission{At: at, Calls: calls, Tokens: tokens})
	for len(s.Admitted) > MaxAdmitted {
		// Merged into an observed call's own instant, older calls would be
		// taken as that call: merge the next two instead.
		i := 0
		if s.observedAt(s.Admitted[1].At) {
			i = 1
		}
		s.Admitted[i+1].Calls += s.Admitted[i].Calls
		s.Admitted[i+1].Tokens += s.Admitted[i].Tokens
		s.Admitted = append(s.Admitted[:i], s.Admitted[i+1:]...)
	}
	return at
}

// notSent takes back one call admitted at at, costing cost tokens.
func notSent(s *State, at time.Time, cost int64) {
	at = floorMicro(at)
	if s.ProbeSent.Equal(at) {
		s.ProbeSent = time.Time{}
	}
	for i := range s.Admitted {
		a := &s.Admitted[i]
		if !a.At.Equal(at) {
			continue
		}
		a.Calls, a.Tokens = max(a.Calls-1, 0), max(a.Tokens-cost, 0)
		if a.Calls == 0 && a.Tokens == 0 {
			s.Admitted = append(s.Admitted[:i], s.Admitted[i+1:]...)
		}
		return
	}
}

// observedAt reports whether t is the SentAt of a kept observation.
func (s *State) observedAt(t time.Time) bool {
	return s.Requests.Observed && s.Requests.SentAt.Equal(t) || s.Tokens.Observed && s.Tokens.SentAt.Equal(t)
}

// prune drops admissions that no kept observation needs: those more than
// reorder before the oldest SentAt of the observed units.
func (s *State) prune(reorder time.Duration) {
	var oldest time.Time
	for _, q := range [...]*Quota{&s.Requests, &s.Tokens} {
		if q.Observed && (oldest.IsZero() || q.SentAt.Before(oldest)) {
			oldest = q.SentAt
		}
	}
	if oldest.IsZero() {
		return
	}
	oldest = oldest.Add(-reorder)
	i := sort.Search(len(s.Admitted), func(i int) bool { return !s.Admitted[i].At.Before(oldest) })
	s.Admitted = append(s.Admitted[:0], s.Admitted[i:]...)
}

func (s *State) quota(unit quotaheaders.Unit) *Quota {
	switch unit {
	case quotaheaders.Requests:
		return &s.Requests
	case quotaheaders.Tokens:
		return &s.Tokens
	}
	return nil
}

// observe records what a response said about one unit. The observation from
// the latest-sent request is kept; an older one can still teach the limit
// and, for a window, narrow the reset.
func observe(s *State, pol policy, sentAt, receivedAt time.Time, unit quotaheaders.Unit, snap quotaheaders.Snapshot) {
	q := s.quota(unit)
	if q == nil {
		return
	}
	if receivedAt.Before(sentAt) {
		receivedAt = sentAt
	}
	var from, until time.Time
	if snap.HasReset {
		reset := max(snap.Reset, 0)
		from, until = floorMicro(sentAt.Add(reset)), ceilMicro(receivedAt.Add(reset))
	}
	sentAt, receivedAt = floorMicro(sentAt), ceilMicro(receivedAt)
	sameWindow := pol.refill == Window && snap.HasReset && q.Observed && q.HasReset &&
		!from.After(q.ResetAt) && !q.ResetFrom.After(until)

	fresher := !q.Observed || sentAt.After(q.SentAt) ||
		(sentAt.Equal(q.SentAt) && snap.Remaining < q.Remaining)
	if !fresher {
		if snap.HasLimit && !q.HasLimit {
			q.Limit, q.HasLimit = snap.Limit, true
		}
		if sameWindow {
			q.ResetFrom, q.ResetAt = maxTime(q.ResetFrom, from), minTime(q.ResetAt, until)
		}
		return
	}

	old := *q
	q.Observed = true
	q.Remaining = snap.Remaining
	q.SentAt, q.ReceivedAt = sentAt, receivedAt
	if snap.HasLimit {
		q.Limit, q.HasLimit = snap.Limit, true
	}
	q.HasReset, q.ResetFrom, q.ResetAt = snap.HasReset, from, until
	if sameWindow {
		q.ResetFrom, q.ResetAt = maxTime(old.ResetFrom, from), minTime(old.ResetAt, until)
	} else if q.Interactive != 0 {
		// A new window (or none). Calls credited past the old reset may
		// belong to it or to a window between the two, which nothing here
		// tells apart: forget them, and keep back the whole reserve until
		// interactive calls are counted in this window. That errs towards
		// the interactive callers.
		q.Interactive, q.InteractiveSince = 0, time.Time{}
	}
	s.ProbeAt = time.Time{}
	s.prune(pol.reorder)
}

// succeeded ends a 429 episode when a call sent after it got through.
func succeeded(s *State, sentAt time.Time) {
	if !floorMicro(sentAt).Before(s.BackoffAt) {
		s.Backoff, s.BackoffAt = 0, time.Time{}
	}
	probeAnswered(s, sentAt)
}

// probeAnswered notes a response to a call sent at sentAt: one sent since the
// last probe answers it.
func probeAnswered(s *State, sentAt time.Time) {
	if !s.ProbeSent.IsZero() && !floorMicro(sentAt).Before(s.ProbeSent) {
		s.ProbeSent = time.Time{}
	}
}

// tooMany pauses every start after a 429: for retryAfter if the provider gave
// one, else for the backoff, which doubles only when the call was sent after
// the previous 429 arrived (calls already in flight belong to the same
// episode).
func tooMany(s *State, pol policy, sentAt, receivedAt time.Time, retryAfter time.Duration) {
	probeAnswered(s, sentAt)
	if retryAfter > 0 {
		retryAfter = min(retryAfter, pol.maxRetryAfter)
		s.PausedUntil = maxTime(s.PausedUntil, ceilMicro(receivedAt.Add(retryAfter)))
		return
	}
	receivedAt = ceilMicro(receivedAt)
	switch {
	case s.Backoff <= 0:
		s.Backoff, s.BackoffAt = pol.defaultPause, receivedAt
	case !floorMicro(sentAt).Before(s.BackoffAt):
		s.Backoff, s.BackoffAt = min(2*s.Backoff, pol.maxPause), receivedAt
	}
	s.PausedUntil = maxTime(s.PausedUntil, receivedAt.Add(s.Backoff))
}

// waitFor rounds a wait up to a whole, positive number of microseconds, the
// precision of the state, so asking again after it is never a moment early.
func waitFor(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return max(d, time.Microsecond)
}

func floorMicro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

func ceilMicro(t time.Time) time.Time {
	f := t.Truncate(time.Microsecond)
	if f.Equal(t) {
		return f
	}
	return f.Add(time.Microsecond)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// headroom is what calls of priority p could start at now without waiting:
// how many calls and how many tokens, each math.MaxInt64 when nothing limits
// it. It counts nothing.
func headroom(s *State, pol policy, now time.Time, p Priority) (calls, tokens int64) {
	if now.Before(s.PausedUntil) {
		return 0, 0
	}
	calls, tokens = math.MaxInt64, math.MaxInt64
	for _, u := range [...]struct {
		unit quotaheaders.Unit
		q    *Quota
		out  *int64
	}{
		{quotaheaders.Requests, &s.Requests, &calls},
		{quotaheaders.Tokens, &s.Tokens, &tokens},
	} {
		v := view(u.q, pol, s.Admitted, u.unit, now)
		if !v.known {
			continue
		}
		*u.out = max(0, v.avail-pol.reserveLeft(u.q, p, now))
	}
	return calls, tokens
}
