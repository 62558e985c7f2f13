package quotaheaders

import (
	"net/http"
	"strings"
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

// listLimit reads the limit of the RateLimit-Limit of drafts -00 to -06:
// the first member of a list, "10, 10;w=1, 50;w=60", or just "10". Later
// drafts make it an RFC 8941 structured field; draft -01 (and draft-polli
// before it) writes it in HTTP's own list syntax, which also allows what
// RFC 8941 does not: space before ";", upper-case parameter names, numbers
// of more than 15 digits. A field that is not a structured List is read in
// that syntax.
func listLimit(field string) (int64, bool) {
	list, ok := parseSFList(field)
	if !ok {
		return draftListLimit(field)
	}
	if len(list) == 0 || list[0].inner {
		return 0, false
	}
	return list[0].bare.nonNegativeInt()
}

// draftListLimit reads the limit of a RateLimit-Limit as draft -01 defines
// it (§2.3, §3.1), and of the X-RateLimit-Limit that copies it:
//
//	RateLimit-Limit = expiring-limit [, 1#quota-policy ]
//	quota-policy    = service-limit; "w" "=" time-window
//	                  *( OWS ";" OWS quota-comment )
//	quota-comment   = token "=" ( token / quoted-string )
//
// The first member is the limit in force; the others describe quota
// policies and are checked for syntax only. The list is an RFC 9110 §5.6.1
// list, whose empty members are ignored. Each member is a number with
// parameters: the first may have any (servers send
// `100;window=60;comment="fixed window"`), every other one must have a
// window, w or, as draft-polli-ratelimit-headers named it, window, of
// 1*DIGIT seconds. So "1,000" is not the limit 1 with a policy "000": it is
// invalid. Parameter names are case-insensitive, as ABNF literals are.
func draftListLimit(field string) (int64, bool) {
	var limit int64
	members := 0
	s := field
	for {
		if s = trimOWS(s); s != "" && s[0] != ',' {
			digits, window, rest, ok := quotaPolicy(s)
			if !ok || (members > 0 && !window) {
				return 0, false
			}
			if members == 0 {
				if limit, ok = parseCount(digits); !ok {
					return 0, false
				}
			}
			members++
			s = trimOWS(rest)
		}
		if s == "" {
			return limit, members > 0
		}
		if s[0] != ',' {
			return 0, false
		}
		s = s[1:]
	}
}

// quotaPolicy reads one member of a draft list, 1*DIGIT followed by
// *( OWS ";" OWS token "=" ( token / quoted-string ) ), and reports whether
// it has a valid window parameter. rest is what follows the member.
func quotaPolicy(s string) (digits string, window bool, rest string, ok bool) {
	n := countDigits(s)
	if n == 0 {
		return "", false, "", false
	}
	digits, rest = s[:n], s[n:]
	for {
		t := trimOWS(rest)
		if t == "" || t[0] != ';' {
			return digits, window, rest, true
		}
		t = trimOWS(t[1:])
		k := 0
		for k < len(t) && isTChar(t[k]) {
			k++
		}
		if k == 0 || k == len(t) || t[k] != '=' {
			return "", false, "", false
		}
		key := t[:k]
		value, after, ok := tokenOrQuotedString(t[k+1:])
		if !ok {
			return "", false, "", false
		}
		if strings.EqualFold(key, "w") || strings.EqualFold(key, "window") {
			if countDigits(value) != len(value) {
				return "", false, "", false
			}
			window = true
		}
		rest = after
	}
}

// tokenOrQuotedString reads an RFC 9110 token or quoted-string (§5.6.2,
// §5.6.4) at the start of s: value is its text as sent, quotes included.
func tokenOrQuotedString(s string) (value, rest string, ok bool) {
	if s == "" {
		return "", "", false
	}
	if s[0] != '"' {
		n := 0
		for n < len(s) && isTChar(s[n]) {
			n++
		}
		return s[:n], s[n:], n > 0
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return s[:i+1], s[i+1:], true
		case c == '\\':
			// quoted-pair: HTAB, SP, VCHAR or obs-text.
			if i++; i == len(s) || (s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f {
				return "", "", false
			}
		case c < 0x20 && c != '\t' || c == 0x7f:
			return "", "", false
		}
	}
	return "", "", false
}
