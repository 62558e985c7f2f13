package quotaheaders

import (
	"net/http"
	"net/textproto"
	"time"
)

// source is one single-value dialect for one quota: the fields that carry
// its remaining count, limit and reset. Field names are canonical.
type source struct {
	unit      Unit
	remaining string
	limit     string
	reset     string // "" when the dialect sends none
	// used, when set, is GitHub's x-ratelimit-used: with a limit and no
	// remaining it gives remaining = max(0, limit - used).
	used string
	// limitIsList marks the RateLimit-Limit of drafts -01 to -06, a
	// structured List whose first member is the limit.
	limitIsList bool
	// oneSide marks a quota of one side of a call's tokens, input or output
	// (see ParseCalls).
	oneSide bool
}

// sources lists the single-value dialects. The order is the tie-break of
// last resort: http.Header keeps no order across names, so "header order"
// between two equally restrictive candidates of different fields means this
// order.
var sources = buildSources()

func buildSources() []source {
	var s []source
	add := func(unit Unit, remaining, limit, reset, used string) {
		s = append(s, source{
			unit:      unit,
			remaining: textproto.CanonicalMIMEHeaderKey(remaining),
			limit:     textproto.CanonicalMIMEHeaderKey(limit),
			reset:     textproto.CanonicalMIMEHeaderKey(reset),
			used:      textproto.CanonicalMIMEHeaderKey(used),
		})
	}

	// IETF drafts -00 to -06: three separate fields, quota in requests.
	add(Requests, "ratelimit-remaining", "ratelimit-limit", "ratelimit-reset", "")
	s[len(s)-1].limitIsList = true

	// OpenAI, Groq, Azure OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens};
	// Cerebras adds -minute and -day windows, Mistral spells requests "req"
	// and has a -month window for tokens. Each window is its own candidate.
	type suffix struct {
		unit Unit
		name string
	}
	suffixes := []suffix{{Requests, "requests"}, {Tokens, "tokens"}}
	for _, w := range []string{"minute", "hour", "day", "month"} {
		suffixes = append(suffixes,
			suffix{Requests, "requests-" + w},
			suffix{Requests, "req-" + w},
			suffix{Tokens, "tokens-" + w})
	}
	for _, prefix := range []string{"x-ratelimit-", "x-rate-limit-"} {
		for _, sf := range suffixes {
			add(sf.unit, prefix+"remaining-"+sf.name, prefix+"limit-"+sf.name, prefix+"reset-"+sf.name, "")
		}
	}

	// Anthropic. The anthropic-priority-* fields of Priority Tier describe a
	// commitment, not quota left, and are deliberately absent.
	for _, q := range []struct {
		unit Unit
		name string
	}{{Requests, "requests"}, {Tokens, "tokens"}, {Tokens, "input-tokens"}, {Tokens, "output-tokens"}} {
		p := "anthropic-ratelimit-" + q.name + "-"
		add(q.unit, p+"remaining", p+"limit", p+"reset", "")
		s[len(s)-1].oneSide = q.name != "requests" && q.name != "tokens"
	}

	// Together: tokens in x-tokenlimit-*.
	add(Tokens, "x-tokenlimit-remaining", "x-tokenlimit-limit", "x-tokenlimit-reset", "")

	// Classic X-RateLimit-* (GitHub, OpenRouter, GitLab, Together's
	// requests): requests.
	for _, prefix := range []string{"x-ratelimit-", "x-rate-limit-"} {
		add(Requests, prefix+"remaining", prefix+"limit", prefix+"reset", prefix+"used")
	}
	return s
}

// read returns the candidate this source gives, if its remaining count, or
// GitHub's limit and used, is valid. A bad limit or reset makes only that
// part unknown.
func (src *source) read(h http.Header, receivedAt time.Time) (Snapshot, bool) {
	var s Snapshot
	remaining, present, ok := lowestCount(h[src.remaining])
	if !ok && (present || src.used == "") {
		return Snapshot{}, false
	}
	if src.limitIsList {
		s.Limit, s.HasLimit = firstListInteger(h[src.limit])
	} else {
		s.Limit, s.HasLimit = firstCount(h[src.limit])
	}
	if !ok {
		used, usedOK := firstCount(h[src.used])
		if !s.HasLimit || !usedOK {
			return Snapshot{}, false
		}
		remaining = max(0, s.Limit-used)
	}
	s.Remaining = remaining
	if src.reset != "" {
		s.Reset, s.HasReset = longestReset(h[src.reset], receivedAt)
	}
	return s, true
}

// lowestCount is the lowest valid count among repeated lines. present
// reports whether any line had a value at all.
func lowestCount(lines []string) (n int64, present, ok bool) {
	for _, l := range lines {
		l = trimValue(l)
		if l == "" {
			continue
		}
		present = true
		if c, valid := parseCount(l); valid && (!ok || c < n) {
			n, ok = c, true
		}
	}
	return n, present, ok
}

// firstCount is the first valid count among repeated lines.
func firstCount(lines []string) (int64, bool) {
	for _, l := range lines {
		if c, ok := parseCount(trimValue(l)); ok {
			return c, true
		}
	}
	return 0, false
}

// longestReset is the longest valid reset among repeated lines.
func longestReset(lines []string, receivedAt time.Time) (time.Duration, bool) {
	var longest time.Duration
	found := false
	for _, l := range lines {
		l = trimValue(l)
		if l == "" {
			continue
		}
		if d, ok := parseReset(l, receivedAt); ok && (!found || d > longest) {
			longest, found = d, true
		}
	}
	return longest, found
}
