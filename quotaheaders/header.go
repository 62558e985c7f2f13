package quotaheaders

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// caseFolded returns h with every key in canonical form, so that lookups by
// canonical name are case-insensitive. net/http canonicalises the keys of
// the headers it receives, so the usual answer is h itself, without a copy.
// A map built by hand may hold "x-ratelimit-remaining-tokens" or even two
// spellings of one name; their lines are merged, canonical spelling first,
// then the others in sorted order, so the result does not depend on map
// iteration order.
func caseFolded(h http.Header) http.Header {
	canonical := true
	for k := range h {
		if !isCanonicalKey(k) {
			canonical = false
			break
		}
	}
	if canonical {
		return h
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		ca, cb := textproto.CanonicalMIMEHeaderKey(a) == a, textproto.CanonicalMIMEHeaderKey(b) == b
		if ca != cb {
			if ca {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	folded := make(http.Header, len(h))
	for _, k := range keys {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		folded[ck] = append(folded[ck], h[k]...)
	}
	return folded
}

// isCanonicalKey reports whether textproto.CanonicalMIMEHeaderKey would
// leave k as it is: an upper-case letter first and after each hyphen, lower
// case elsewhere. It is the cheap check for the common case; a key it
// rejects only costs the copy.
func isCanonicalKey(k string) bool {
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// trimValue removes the optional whitespace (SP and HTAB) around a field
// value.
func trimValue(v string) string { return strings.Trim(v, " \t") }

// joinLines combines the lines of a structured field into one value, as
// RFC 8941 §4.2 asks. Empty lines are absent; ok is false when none is left.
func joinLines(lines []string) (string, bool) {
	var joined string
	n := 0
	for _, l := range lines {
		if l = trimValue(l); l == "" {
			continue
		}
		if n == 0 {
			joined = l
		} else {
			joined += ", " + l
		}
		n++
	}
	return joined, n > 0
}
