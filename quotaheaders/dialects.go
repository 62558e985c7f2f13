package quotaheaders

import (
	"net/http"
	"net/textproto"
	"time"
)

// source is one single-value dialect for one quota: the fields that carry
// its remaining count, limit and reset. Each part lists its field names,
// canonical; a dialect spelled two ways lists both, the usual spelling first,
// and the lines of all its names are read as the lines of one field.
type source struct {
	unit      Unit
	remaining []string
	limit     []string
	reset     []string // none when the dialect sends none
	// used, when set, is GitHub's x-ratelimit-used: with a limit and no
	// remaining it gives remaining = max(0, limit - used).
	used      []string
	limitForm limitForm
	// oneSide marks a quota of one side of a call's tokens, input or output
	// (see ParseCalls).
	oneSide bool
}

// limitForm is how a dialect writes its limit.
type limitForm uint8

const (
	// limitCount is a plain count; of repeated lines the first valid one.
	limitCount limitForm = iota
	// limitList is the RateLimit-Limit of drafts -00 to -06: a list field
	// whose first member is the limit (see listLimit).
	limitList
	// limitCountOrList is a classic X-RateLimit-Limit: a plain count, or the
	// list of drafts -01 to -03, "100, 100;window=60" (see draftListLimit);
	// of repeated lines the first valid one.
	limitCountOrList
)

// sources lists the single-value dialects. The order is the tie-break of
// last resort: http.Header keeps no order across names, so "header order"
// between two equally restrictive candidates of different fields means this
// order.
var sources = buildSources()

func buildSources() []source {
	var s []source
	add := func(src source) {
		for _, names := range [][]string{src.remaining, src.limit, src.reset, src.used} {
			for i := range names {
				names[i] = textproto.CanonicalMIMEHeaderKey(names[i])
			}
		}
		s = append(s, src)
	}
	// names gives the field of part in each spelling, prefix+part+suffix.
	names := func(prefixes []string, part, suffix string) []string {
		var n []string
		for _, p := range prefixes {
			n = append(n, p+part+suffix)
		}
		return n
	}

	// IETF drafts -00 to -06: three separate fields, quota in requests.
	add(source{unit: Requests, remaining: []string{"ratelimit-remaining"}, limit: []string{"ratelimit-limit"},
		reset: []string{"ratelimit-reset"}, limitForm: limitList})

	// OpenAI, Groq, Azure OpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens};
	// Cerebras adds -minute and -day windows, Mistral spells requests "req"
	// and has a -month window for tokens. Each window is its own candidate.
	// Azure also spells the names x-rate-limit-, and mixes the spellings in
	// one response: a 429 with x-rate-limit-reset-tokens beside
	// x-ratelimit-remaining-requests. The two are one field.
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
	spellings := []string{"x-ratelimit-", "x-rate-limit-"}
	for _, sf := range suffixes {
		add(source{unit: sf.unit, remaining: names(spellings, "remaining-", sf.name),
			limit: names(spellings, "limit-", sf.name), reset: names(spellings, "reset-", sf.name)})
	}

	// Anthropic. The anthropic-priority-* fields of Priority Tier describe a
	// commitment, not quota left, and are deliberately absent.
	for _, q := range []struct {
		unit Unit
		name string
	}{{Requests, "requests"}, {Tokens, "tokens"}, {Tokens, "input-tokens"}, {Tokens, "output-tokens"}} {
		p := []string{"anthropic-ratelimit-" + q.name + "-"}
		add(source{unit: q.unit, remaining: names(p, "remaining", ""), limit: names(p, "limit", ""),
			reset: names(p, "reset", ""), oneSide: q.name != "requests" && q.name != "tokens"})
	}

	// Together: tokens in x-tokenlimit-*.
	add(source{unit: Tokens, remaining: []string{"x-tokenlimit-remaining"}, limit: []string{"x-tokenlimit-limit"},
		reset: []string{"x-tokenlimit-reset"}})

	// Classic X-RateLimit-* (GitHub, OpenRouter, GitLab, Together's
	// requests): requests. WHOOP sends the limit as the draft list,
	// "100, 100;window=60, 10000;window=86400".
	for _, prefix := range spellings {
		p := []string{prefix}
		add(source{unit: Requests, remaining: names(p, "remaining", ""), limit: names(p, "limit", ""),
			reset: names(p, "reset", ""), used: names(p, "used", ""), limitForm: limitCountOrList})
	}
	return s
}

// read returns the candidate this source gives, if its remaining count, or
// GitHub's limit and used, is valid. A bad limit or reset makes only that
// part unknown.
func (src *source) read(h http.Header, receivedAt time.Time) (Snapshot, bool) {
	var s Snapshot
	remaining, present, ok := lowestCount(lines(h, src.remaining))
	if !ok && (present || len(src.used) == 0) {
		return Snapshot{}, false
	}
	s.Limit, s.HasLimit = src.readLimit(lines(h, src.limit))
	if !ok {
		used, usedOK := firstCount(lines(h, src.used))
		if !s.HasLimit || !usedOK {
			return Snapshot{}, false
		}
		remaining = max(0, s.Limit-used)
	}
	s.Remaining = remaining
	if len(src.reset) > 0 {
		s.Reset, s.HasReset = longestReset(lines(h, src.reset), receivedAt)
	}
	return s, true
}

// readLimit reads the limit from the lines of the source's limit field.
func (src *source) readLimit(lines []string) (int64, bool) {
	switch src.limitForm {
	case limitList:
		field, ok := joinLines(lines)
		if !ok {
			return 0, false
		}
		return listLimit(field)
	case limitCountOrList:
		for _, l := range lines {
			// A count is a draft list of one member.
			if n, ok := draftListLimit(trimValue(l)); ok {
				return n, true
			}
		}
		return 0, false
	default:
		return firstCount(lines)
	}
}

// lines returns the lines of the fields names, in order. It copies only
// when more than one of them is present, and never writes to h.
func lines(h http.Header, names []string) []string {
	var found []string
	for _, name := range names {
		l := h[name]
		switch {
		case len(l) == 0:
		case found == nil:
			found = l
		default:
			// The full slice expression makes append copy, not write into
			// h's array.
			found = append(found[:len(found):len(found)], l...)
		}
	}
	return found
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
