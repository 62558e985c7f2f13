package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/batchq/batchq/quotaheaders"
)

// Priority says whether a call may use the reserve.
type Priority int

const (
	// Batch calls leave the reserve alone.
	Batch Priority = iota
	// Interactive calls come from a user who is waiting; they may use the
	// reserve and never queue behind batch work.
	Interactive
)

func (p Priority) String() string {
	if p == Interactive {
		return "interactive"
	}
	return "batch"
}

// Refill is how the provider refills a quota. Choose the one the provider
// documents: the window model, on a bucket, forgets calls the bucket has not
// yet refilled once the reset passes; the bucket model, on a window, expects
// a refill before the reset that never comes. Either can then over-admit
// until the next response corrects it.
type Refill int

const (
	// Window: remaining stays what the provider said until the reset, then
	// the whole limit is back and what was admitted before is forgotten. The
	// article's model, and the default.
	Window Refill = iota
	// TokenBucket: the quota refills continuously, and the reset is when it
	// will be full again (OpenAI and Anthropic document their limits this
	// way). Calls start as soon as the refill covers them instead of at the
	// reset.
	TokenBucket
)

func (r Refill) String() string {
	switch r {
	case Window:
		return "window"
	case TokenBucket:
		return "token bucket"
	}
	return fmt.Sprintf("Refill(%d)", int(r))
}

// Decision is the answer to one call.
type Decision struct {
	OK    bool          // start now; the cost has been counted
	Wait  time.Duration // when !OK: how long before asking again is worthwhile
	Never bool          // this cost can never be granted at this priority (cost > limit − reserve)
	// At is, when OK, the instant the call was counted at: the sentAt to
	// pass when its response is observed. It is now, or a little later when
	// a call decided at a later now was counted first.
	At time.Time
	// Why says, when Never, which unit the cost can never fit and why; it
	// wraps ErrNever. Nil otherwise.
	Why *NeverError
}

// ErrNever is wrapped by the *NeverError that Wait returns when a call costs
// more than the limit (less the reserve, for batch) of a unit: it would wait
// forever.
var ErrNever = errors.New("batchq: throttle: call can never start")

// NeverError says which unit a call can never fit. It unwraps to ErrNever.
type NeverError struct {
	Priority Priority
	Unit     quotaheaders.Unit
	Cost     int64 // what the call needs of Unit
	Limit    int64
	Reserve  int64 // the part of Limit this priority may not use
}

func (e *NeverError) Error() string {
	return fmt.Sprintf("batchq: throttle: %s call needs %d %s, more than the limit of %d less a reserve of %d",
		e.Priority, e.Cost, unitName(e.Unit), e.Limit, e.Reserve)
}

func (e *NeverError) Unwrap() error { return ErrNever }

func unitName(u quotaheaders.Unit) string {
	if u == quotaheaders.Requests {
		return "requests"
	}
	return "tokens"
}

// Config configures a Throttle. The zero Config is valid.
type Config struct {
	// Reserve is the fraction of the limit that only interactive calls may
	// use, in [0, 1): batch calls start only while remaining − cost ≥
	// ceil(limit × Reserve), for requests and for tokens. With a Window
	// refill the reserve is per window, and what interactive calls already
	// took of the current window counts toward it: batch calls keep back
	// only the rest, so interactive calls can use the whole reserve in each
	// window and batch calls what the interactive ones leave. Default 0.
	Reserve float64

	// Refill is how the provider refills its quota. Default Window.
	Refill Refill

	// ProbeInterval is how long to wait, when a unit is short and nothing
	// says when it will refill, before letting one call through to learn
	// more; and then between such calls, each of which also waits for the
	// one before it to answer (for up to MaxPause). When a batch call is
	// short only of the reserve of a unit whose provider sends no reset
	// time, the wait is MaxPause instead: each such call spends the reserve.
	// Default 1s.
	ProbeInterval time.Duration

	// DefaultPause is how long a 429 without Retry-After stops every start.
	// It doubles on each repeated 429, up to MaxPause, and starts over after a
	// success. Default 1s.
	DefaultPause time.Duration

	// MaxPause caps the doubled pause; it must be at least DefaultPause and
	// at most PauseLimit. Default 60s.
	MaxPause time.Duration

	// MaxRetryAfter caps the pause a 429's Retry-After asks for: a provider
	// that answers "retry in a day" is asked again after this. At most
	// PauseLimit. Default 1h.
	MaxRetryAfter time.Duration

	// Reorder is how much earlier than another call a call may be counted
	// and still reach the provider after it: between counting a call and
	// its request arriving lie a hand-off to a handler, a connection and the
	// network, longer for some calls than others, and across a fleet calls
	// are sent from many machines. A response is taken not to have counted
	// the calls counted up to Reorder before its own, so their cost is kept
	// against what it reports. Too small, and a call that arrived late is
	// missed until a later response; too large, and the throttle holds
	// back about Reorder's worth of calls it could have started. Default
	// 5ms.
	Reorder time.Duration

	// Store holds the state shared by every Throttle with the same Key, across
	// processes if the store is shared (the queue's store is a Postgres
	// table). Default: a new MemoryStore, private to this Throttle.
	Store Store

	// Key names the quota in Store, for example provider and model.
	// Default "".
	Key string

	// Now is the clock decisions are made by: CanStart, Admit, Wait,
	// Headroom and Pause ask it for the current time. The times a caller
	// passes (when a call was sent, when its response arrived) must come
	// from the same clock. Tests set a clock they advance by hand. It must
	// be safe for concurrent use. Default time.Now.
	Now func() time.Time
}

const (
	defaultProbeInterval = time.Second
	defaultPause         = time.Second
	defaultMaxPause      = time.Minute
	defaultMaxRetryAfter = time.Hour
	defaultReorder       = 5 * time.Millisecond
)

// PauseLimit is the longest any pause may be: Config.MaxPause and
// Config.MaxRetryAfter at most. A shared store may refuse a state paused
// for longer (batchq.save_quota does).
const PauseLimit = 24 * time.Hour

func (c Config) policy() (policy, error) {
	pol := policy{
		reserve:       c.Reserve,
		refill:        c.Refill,
		probeInterval: c.ProbeInterval,
		defaultPause:  c.DefaultPause,
		maxPause:      c.MaxPause,
		maxRetryAfter: c.MaxRetryAfter,
		reorder:       c.Reorder,
	}
	if math.IsNaN(c.Reserve) || c.Reserve < 0 || c.Reserve >= 1 {
		return policy{}, fmt.Errorf("batchq: throttle: Config.Reserve must be in [0, 1), got %v", c.Reserve)
	}
	if c.Refill != Window && c.Refill != TokenBucket {
		return policy{}, fmt.Errorf("batchq: throttle: Config.Refill must be Window or TokenBucket, got %d", int(c.Refill))
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ProbeInterval", &pol.probeInterval, defaultProbeInterval},
		{"DefaultPause", &pol.defaultPause, defaultPause},
		{"MaxPause", &pol.maxPause, defaultMaxPause},
		{"MaxRetryAfter", &pol.maxRetryAfter, defaultMaxRetryAfter},
		{"Reorder", &pol.reorder, defaultReorder},
	} {
		switch {
		case *d.v < 0:
			return policy{}, fmt.Errorf("batchq: throttle: Config.%s must not be negative, got %v", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
		*d.v = waitFor(*d.v) // whole microseconds, like the state
	}
	if pol.maxPause < pol.defaultPause {
		return policy{}, fmt.Errorf("batchq: throttle: Config.MaxPause (%v) must be at least DefaultPause (%v)",
			pol.maxPause, pol.defaultPause)
	}
	if pol.maxPause > PauseLimit || pol.maxRetryAfter > PauseLimit {
		return policy{}, fmt.Errorf("batchq: throttle: Config.MaxPause (%v) and Config.MaxRetryAfter (%v) must be at most %v",
			pol.maxPause, pol.maxRetryAfter, PauseLimit)
	}
	return pol, nil
}

// Throttle paces calls to one provider quota from what the provider says is
// left. It is safe for concurrent use; Throttles built with the same Store and
// Key act as one.
//
// The zero value is usable and acts as New(Config{}): no reserve, the window
// model, state in a private MemoryStore. A Throttle must not be copied after
// first use.
type Throttle struct {
	once  sync.Once
	built bool
	pol   policy
	store Store
	key   string
	now   func() time.Time

	// The timer Wait sleeps on; tests replace it (export_test.go).
	newTimer func(time.Duration) (<-chan time.Time, func() bool)
}

// New returns a Throttle for cfg, or an error naming the invalid field.
func New(cfg Config) (*Throttle, error) {
	pol, err := cfg.policy()
	if err != nil {
		return nil, err
	}
	t := &Throttle{built: true, pol: pol, store: cfg.Store, key: cfg.Key, now: cfg.Now}
	t.init()
	return t, nil
}

// Key returns the quota key the throttle paces (Config.Key).
func (t *Throttle) Key() string {
	if t == nil {
		return ""
	}
	return t.key
}

func (t *Throttle) init() {
	t.once.Do(func() {
		if !t.built {
			t.pol, _ = Config{}.policy()
		}
		if t.store == nil {
			t.store = &MemoryStore{}
		}
		if t.now == nil {
			t.now = time.Now
		}
		t.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
			tm := time.NewTimer(d)
			return tm.C, tm.Stop
		}
	})
}

// Headroom is what calls of priority p could start now without waiting: how
// many calls, and how many tokens in all, each math.MaxInt64 when nothing
// known limits it, 0 while paused. It counts nothing: a worker sizes a batch
// claim with it, then asks CanStart for each job it claimed. When a unit is
// short and nothing says when it refills, it is 0 though CanStart may let a
// probe through.
func (t *Throttle) Headroom(ctx context.Context, p Priority) (calls, tokens int64, err error) {
	t.init()
	now := t.now()
	if l, ok := t.store.(Loader); ok {
		s, err := l.Load(ctx, t.key)
		if err != nil {
			return 0, 0, fmt.Errorf("batchq: throttle: load quota %q: %w", t.key, err)
		}
		calls, tokens = headroom(&s, t.pol, now, p)
		return calls, tokens, nil
	}
	err = t.update(ctx, func(s *State) { calls, tokens = headroom(s, t.pol, now, p) })
	return calls, tokens, err
}

// Pause returns how long from now every start stays stopped by a 429 (the
// provider's Retry-After, or the default pause when it gave none); 0 when no
// pause is on. It counts nothing.
func (t *Throttle) Pause(ctx context.Context) (time.Duration, error) {
	t.init()
	now := t.now()
	pause := func(s *State) time.Duration { return max(s.PausedUntil.Sub(now), 0) }
	if l, ok := t.store.(Loader); ok {
		s, err := l.Load(ctx, t.key)
		if err != nil {
			return 0, fmt.Errorf("batchq: throttle: load quota %q: %w", t.key, err)
		}
		return pause(&s), nil
	}
	var d time.Duration
	err := t.update(ctx, func(s *State) { d = pause(s) })
	return d, err
}

func (t *Throttle) update(ctx context.Context, fn func(*State)) error {
	t.init()
	err := t.store.Update(ctx, t.key, func(s *State) error { fn(s); return nil })
	if err != nil {
		return fmt.Errorf("batchq: throttle: update quota %q: %w", t.key, err)
	}
	return nil
}

// CanStart answers whether a call costing cost tokens (and one request) may
// start now, and if so counts it. A call starts only when both units admit
// it; nothing known about a unit means it admits anything. Negative costs
// count as zero; any priority other than Interactive is Batch. When the
// decision is Never, Decision.Why says why. It returns the Store's error,
// with the zero Decision.
func (t *Throttle) CanStart(ctx context.Context, cost int64, p Priority) (Decision, error) {
	d, never, err := t.decide(ctx, cost, p)
	d.Why = never
	return d, err
}

func (t *Throttle) decide(ctx context.Context, cost int64, p Priority) (d Decision, never *NeverError, err error) {
	t.init()
	now := t.now()
	err = t.update(ctx, func(s *State) { d, never = decide(s, t.pol, now, cost, p) })
	if err != nil {
		return Decision{}, nil, err
	}
	return d, never, nil
}

// ObserveSnapshot records what the response to a call sent at sentAt,
// received at receivedAt, said about one unit. A response counts the calls
// sent up to its own, not those sent after; so the observation of the
// latest-sent call is kept and the calls admitted after its sentAt are
// subtracted from it. An observation older than the kept one only teaches
// the limit and, for a window, narrows the reset.
//
// sentAt is best the instant the call was counted at: Decision.At, or the
// time Admit returned. An earlier time is safe (calls are subtracted twice);
// a later one may take calls admitted in between as already counted.
//
// An observation for a request sent after the latest 429 arrived is a
// success: it ends the doubling of the default pause. For a 429, call
// TooManyRequests first, or use ObserveResponse.
func (t *Throttle) ObserveSnapshot(ctx context.Context, sentAt, receivedAt time.Time, unit quotaheaders.Unit, s quotaheaders.Snapshot) error {
	return t.update(ctx, func(st *State) {
		observe(st, t.pol, sentAt, receivedAt, unit, s)
		succeeded(st, sentAt)
	})
}

// ObserveResponse records the response to a call sent at sentAt (as for
// ObserveSnapshot), received at receivedAt: the quota headers of both units,
// and for a 429 a pause of Retry-After, or of the default pause when it has
// none. The default pause doubles only for a 429 to a call sent after the
// previous 429 arrived; calls in flight at that time belong to the same
// episode. Any other status is a success. A nil resp is ignored.
func (t *Throttle) ObserveResponse(ctx context.Context, sentAt, receivedAt time.Time, resp *http.Response) error {
	if resp == nil {
		return nil
	}
	// A reset or a Retry-After given as a time is on the provider's clock:
	// measured from receivedAt, a worker whose clock runs fast would take the
	// reset for nearer than it is, and tell the whole fleet so.
	ref := quotaheaders.ProviderClock(resp.Header, receivedAt)
	var snaps [2]quotaheaders.Snapshot
	var has [2]bool
	units := [2]quotaheaders.Unit{quotaheaders.Requests, quotaheaders.Tokens}
	for i, u := range units {
		// A cost counts a whole call: a quota of input or output tokens
		// alone is not compared with it (quotaheaders.ParseCalls).
		snaps[i], has[i] = quotaheaders.ParseCalls(resp.Header, ref, u)
	}
	var retryAfter time.Duration
	limited := resp.StatusCode == http.StatusTooManyRequests
	if limited {
		if d, ok := quotaheaders.RetryAfter(resp.Header, ref); ok {
			retryAfter = d
		}
	}
	return t.update(ctx, func(st *State) {
		// The pause first: the 429's own headers must not count as a success.
		if limited {
			tooMany(st, t.pol, sentAt, receivedAt, retryAfter)
		} else {
			succeeded(st, sentAt)
		}
		for i, u := range units {
			if has[i] {
				observe(st, t.pol, sentAt, receivedAt, u, snaps[i])
			}
		}
	})
}

// TooManyRequests records a refusal for the rate, received at receivedAt, of
// a call sent at sentAt (the instant Admit or CanStart counted it), when
// there is no 429 response to observe: an SDK's error, or a 503
// "overloaded" the caller reads as rate limiting. Every start, interactive
// included, stops for retryAfter, or if it is 0 for the default pause. As in
// ObserveResponse, a refusal of a call sent before the current pause began
// belongs to the same episode and does not double the pause. A caller that
// does not know when the call was sent passes receivedAt as sentAt: the
// default pause then doubles on each refusal.
func (t *Throttle) TooManyRequests(ctx context.Context, sentAt, receivedAt time.Time, retryAfter time.Duration) error {
	return t.update(ctx, func(st *State) { tooMany(st, t.pol, sentAt, receivedAt, retryAfter) })
}

// NotSent takes back the admission at at (Decision.At, or the instant Admit
// returned) of a batch call costing cost that was not sent after all: its
// job went to another worker, or its deadline passed in between. The call
// no longer counts against the quota, and if it was a probe, another may go
// without waiting for its answer. An admission already merged with an older
// one (State.Admitted is bounded) stays counted, which only ever makes the
// throttle more careful.
func (t *Throttle) NotSent(ctx context.Context, at time.Time, cost int64) error {
	return t.update(ctx, func(st *State) { notSent(st, at, max(cost, 0)) })
}

// Wait blocks until a call costing cost may start, and counts it. It returns
// a *NeverError (wrapping ErrNever) if the call can never start at priority
// p, ctx.Err() if ctx is done first, or the Store's error.
func (t *Throttle) Wait(ctx context.Context, cost int64, p Priority) error {
	_, err := t.Admit(ctx, cost, p)
	return err
}

// Admit is Wait that also returns the instant the call was counted at: the
// sentAt to pass when its response is observed.
func (t *Throttle) Admit(ctx context.Context, cost int64, p Priority) (time.Time, error) {
	t.init()
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		d, never, err := t.decide(ctx, cost, p)
		switch {
		case err != nil:
			return time.Time{}, err
		case d.OK:
			return d.At, nil
		case d.Never:
			return time.Time{}, never
		}
		c, stop := t.newTimer(d.Wait)
		select {
		case <-ctx.Done():
			stop()
			return time.Time{}, ctx.Err()
		case <-c:
		}
	}
}
