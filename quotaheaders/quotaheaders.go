package quotaheaders

import (
	"net/http"
	"time"
)

// Unit is what a quota counts.
type Unit int

const (
	// Requests counts calls.
	Requests Unit = iota
	// Tokens counts model tokens.
	Tokens
)

// Snapshot is what one response said about one unit of quota. The zero
// value means nothing is left, with the limit and the reset unknown.
type Snapshot struct {
	// Remaining is what is left of the quota in the current window; never
	// negative.
	Remaining int64
	// Limit is the size of the quota. It is meaningful only when HasLimit
	// is true: a limit of 0 is a real, zero allowance.
	Limit    int64
	HasLimit bool
	// Reset is the time from the response's arrival until the window resets,
	// exact to the nanosecond, never negative, and 0 unless HasReset is true.
	// A caller converting it to coarser units should round up.
	Reset    time.Duration
	HasReset bool
}

// Parse reads the quota of one unit from response headers received at
// receivedAt. When several dialects or windows report the same unit it
// returns the most restrictive one (see the package documentation). It
// reports false when no header gives a valid remaining count for unit.
func Parse(h http.Header, receivedAt time.Time, unit Unit) (Snapshot, bool) {
	return parse(h, receivedAt, unit, false)
}

// ParseCalls is Parse for pacing calls whose cost counts the whole call: a
// call's tokens, input and output together. A quota that counts one side of
// a call only (Anthropic's input-tokens and output-tokens) cannot be compared
// with such a cost: an output limit of 8,000 says nothing of a call of 9,000
// tokens that is mostly input. Such a quota counts only once it is used up,
// when no call can start before its reset, and then with its limit unknown.
// Otherwise ParseCalls reads what Parse reads.
func ParseCalls(h http.Header, receivedAt time.Time, unit Unit) (Snapshot, bool) {
	return parse(h, receivedAt, unit, true)
}

func parse(h http.Header, receivedAt time.Time, unit Unit, wholeCalls bool) (Snapshot, bool) {
	if unit != Requests && unit != Tokens {
		return Snapshot{}, false
	}
	h = caseFolded(h)
	var p picker
	readStructured(h, receivedAt, unit, &p)
	for i := range sources {
		if sources[i].unit != unit {
			continue
		}
		s, ok := sources[i].read(h, receivedAt)
		if ok && wholeCalls && sources[i].oneSide {
			if s.Remaining > 0 {
				continue
			}
			s.Limit, s.HasLimit = 0, false
		}
		if ok {
			p.consider(s)
		}
	}
	return p.best, p.found
}

// picker keeps the most restrictive of the snapshots it is shown, in order.
type picker struct {
	best  Snapshot
	found bool
}

func (p *picker) consider(s Snapshot) {
	if !p.found || moreRestrictive(s, p.best) {
		p.best, p.found = s, true
	}
}

// moreRestrictive reports whether a leaves less room than b: less remaining,
// or as much remaining and a longer wait for the reset (an unknown reset
// counts as the shortest). On a full tie the one seen first stays.
func moreRestrictive(a, b Snapshot) bool {
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.HasReset && (!b.HasReset || a.Reset > b.Reset)
}
