package quotaheaders

import (
	"net/http"
	"time"
)

// The structured-field generations of the IETF RateLimit draft.
//
// Draft -07 sends one Dictionary, "RateLimit: limit=100, remaining=50,
// reset=5", in requests. Drafts -08 and later send a List of service limit
// items, `RateLimit: "burst";r=50;t=30`, each named after a policy in
// RateLimit-Policy, `"burst";q=100;w=60;qu="requests"`, which gives the
// limit (q) and the unit (qu). A -07 Dictionary never parses as a List
// ("limit=100" is not an Item) and a -08 List never parses as a Dictionary
// (a String is not a key), so the field is tried as a List first.

func readStructured(h http.Header, receivedAt time.Time, unit Unit, p *picker) {
	field, ok := joinLines(h["Ratelimit"])
	if !ok {
		return
	}
	if items, ok := parseSFList(field); ok {
		readServiceLimits(items, h, receivedAt, unit, p)
		return
	}
	if dict, ok := parseSFDictionary(field); ok && unit == Requests {
		if s, ok := readDraft07(dict, receivedAt); ok {
			p.consider(s)
		}
	}
}

// readServiceLimits reads the items of a -08+ RateLimit List. An item
// without a valid r is dropped. The unit and the limit come from the policy
// of the same name; without one the unit is requests and the limit unknown.
// A RateLimit-Policy that is present but does not parse leaves the unit of
// every item unknown, so none is reported: reading a tokens quota as
// requests would be a wrong number, not an unknown one. The policy's w is a
// window length, not a reset, and is ignored.
func readServiceLimits(items []sfItem, h http.Header, receivedAt time.Time, unit Unit, p *picker) {
	var policies []sfItem
	if field, ok := joinLines(h["Ratelimit-Policy"]); ok {
		if policies, ok = parseSFList(field); !ok {
			return
		}
	}
	for _, it := range items {
		if it.inner {
			continue
		}
		r, ok := it.param("r")
		if !ok {
			continue
		}
		s := Snapshot{}
		if s.Remaining, ok = r.nonNegativeInt(); !ok {
			continue
		}
		itemUnit := Requests
		if pol, ok := findPolicy(policies, it); ok {
			if itemUnit, ok = policyUnit(pol); !ok {
				continue
			}
			if q, ok := pol.param("q"); ok {
				s.Limit, s.HasLimit = q.nonNegativeInt()
			}
		}
		if itemUnit != unit {
			continue
		}
		if t, ok := it.param("t"); ok {
			s.Reset, s.HasReset = integerReset(t, receivedAt)
		}
		p.consider(s)
	}
}

// findPolicy returns the first policy named like it.
func findPolicy(policies []sfItem, it sfItem) (sfItem, bool) {
	name, ok := it.name()
	if !ok {
		return sfItem{}, false
	}
	for _, pol := range policies {
		if n, ok := pol.name(); ok && n == name {
			return pol, true
		}
	}
	return sfItem{}, false
}

// policyUnit maps a policy's quota unit: absent or "requests" is requests,
// "tokens" (an extension LLM gateways use; the draft registers
// content-bytes and concurrent-requests) is tokens, and anything else is
// not a unit this package reports.
func policyUnit(pol sfItem) (Unit, bool) {
	qu, ok := pol.param("qu")
	if !ok {
		return Requests, true
	}
	if qu.kind == sfString {
		switch qu.str {
		case "requests":
			return Requests, true
		case "tokens":
			return Tokens, true
		}
	}
	return 0, false
}

// readDraft07 reads the -07 Dictionary. Its remaining is required; limit
// and reset are optional.
func readDraft07(dict []sfMember, receivedAt time.Time) (Snapshot, bool) {
	var s Snapshot
	found := false
	for _, m := range dict {
		if m.item.inner {
			continue
		}
		switch m.key {
		case "remaining":
			s.Remaining, found = m.item.bare.nonNegativeInt()
		case "limit":
			s.Limit, s.HasLimit = m.item.bare.nonNegativeInt()
		case "reset":
			s.Reset, s.HasReset = integerReset(m.item.bare, receivedAt)
		}
	}
	if !found {
		return Snapshot{}, false
	}
	return s, true
}

// integerReset applies the bare-number reset rule to a structured Integer.
// The drafts define only non-negative Integers here; anything else is
// unknown.
func integerReset(b sfBare, receivedAt time.Time) (time.Duration, bool) {
	n, ok := b.nonNegativeInt()
	if !ok {
		return 0, false
	}
	return numericReset(uint64(n), "", receivedAt)
}

// firstListInteger reads the limit of draft -01 to -06 RateLimit-Limit: the
// first member of a structured List, "10, 10;w=1, 50;w=60", or just "10".
func firstListInteger(lines []string) (int64, bool) {
	field, ok := joinLines(lines)
	if !ok {
		return 0, false
	}
	list, ok := parseSFList(field)
	if !ok || len(list) == 0 || list[0].inner {
		return 0, false
	}
	return list[0].bare.nonNegativeInt()
}
