package queue

import (
	"bytes"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonbTextLen returns octet_length(b::jsonb::text): the length of valid JSON
// text b as PostgreSQL prints it once stored as jsonb, without asking the
// server. b must be valid UTF-8 that jsonbRejects accepts.
//
// jsonb drops the input's whitespace and prints `{"k": v, "k2": v2}` and
// `[1, 2]`; of an object's members with the same key (compared once
// unescaped), only the last is kept. Strings are unescaped, then escaped
// again as escape_json does: \b \f \n \r \t \" \\ in two bytes, other bytes
// below 0x20 as \u00xx, everything else as is. Numbers print as numeric_out
// does: without an exponent, with the input's scale, and a negative zero
// without its sign.
func jsonbTextLen(b []byte) int {
	// Room for a typical payload's keys, so the stacks rarely grow.
	p := jsonbPrinter{b: b, members: make([]jsonbMember, 0, 32), keys: make([]byte, 0, 512)}
	_, n := p.value(skipSpace(b, 0))
	return n
}

// jsonbPrinter measures values of b. Its slices are stacks that every
// object pushes onto and pops, so a payload allocates them once and again
// only when they grow, not per value.
type jsonbPrinter struct {
	b       []byte
	members []jsonbMember // of the objects being measured, innermost last
	keys    []byte        // their keys, unescaped
}

// jsonbMember holds offsets, not a slice of keys: sorting values without
// pointers needs no write barriers.
type jsonbMember struct {
	start, end int // of the key in keys
	n          int // printed length of `"key": value`
}

func (p *jsonbPrinter) key(m jsonbMember) []byte { return p.keys[m.start:m.end] }

// value returns the index after the JSON value at b[i] and its printed length.
func (p *jsonbPrinter) value(i int) (int, int) {
	switch p.b[i] {
	case '{':
		return p.object(i + 1)
	case '[':
		return p.array(i + 1)
	case '"':
		end, n, _ := stringTextLen(p.b, i+1)
		return end + 1, n
	case 't', 'n': // true, null
		return i + 4, 4
	case 'f':
		return i + 5, 5
	default:
		return numberTextLen(p.b, i)
	}
}

// array measures the array whose text follows its '[' at b[i].
func (p *jsonbPrinter) array(i int) (int, int) {
	n := len("[]")
	i = skipSpace(p.b, i)
	for p.b[i] != ']' {
		end, vn := p.value(i)
		if n > len("[]") {
			n += len(", ")
		}
		n += vn
		i = skipComma(p.b, end)
	}
	return i + 1, n
}

// object measures the object whose text follows its '{' at b[i].
func (p *jsonbPrinter) object(i int) (int, int) {
	base, keysBase := len(p.members), len(p.keys)
	i = skipSpace(p.b, i)
	for p.b[i] != '}' {
		end, kn, escaped := stringTextLen(p.b, i+1)
		m := jsonbMember{start: len(p.keys)}
		if escaped {
			// Keys equal once unescaped are the same key ("a" and "\u0061").
			p.keys = appendUnescaped(p.keys, p.b[i+1:end])
		} else {
			p.keys = append(p.keys, p.b[i+1:end]...)
		}
		m.end = len(p.keys)
		i = skipSpace(p.b, end+1) // at the ':'
		end, vn := p.value(skipSpace(p.b, i+1))
		m.n = kn + len(": ") + vn
		p.members = append(p.members, m)
		i = skipComma(p.b, end)
	}
	ms := p.members[base:]
	if len(ms) > 1 {
		// Stable, so the last of each run of equal keys is the one jsonb
		// keeps. Any order groups equal keys; lengths differ the quickest.
		slices.SortStableFunc(ms, func(a, b jsonbMember) int {
			if la, lb := a.end-a.start, b.end-b.start; la != lb {
				return la - lb
			}
			return bytes.Compare(p.key(a), p.key(b))
		})
	}
	n := len("{}")
	for k, m := range ms {
		if k+1 < len(ms) && bytes.Equal(p.key(m), p.key(ms[k+1])) {
			continue
		}
		if n > len("{}") {
			n += len(", ")
		}
		n += m.n
	}
	p.members, p.keys = p.members[:base], p.keys[:keysBase]
	return i + 1, n
}

// skipComma returns the index of what follows the value that ends at b[i]:
// the next member or element, or the closing bracket.
func skipComma(b []byte, i int) int {
	i = skipSpace(b, i)
	if b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	return i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringTextLen scans the JSON string whose text starts at b[i] and returns
// the index of its closing quote, its printed length with its quotes, and
// whether it has escapes.
func stringTextLen(b []byte, i int) (int, int, bool) {
	n, escaped := len(`""`), false
	for ; b[i] != '"'; i++ {
		if b[i] != '\\' {
			n++ // valid JSON has no raw '"' or control character in a string
			continue
		}
		var r rune
		r, i = unescape(b, i+1)
		n += runeTextLen(r)
		escaped = true
	}
	return i, n, escaped
}

// appendUnescaped appends the text of JSON string s (without its quotes),
// unescaped, to dst.
func appendUnescaped(dst, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			continue
		}
		var r rune
		r, i = unescape(s, i+1)
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// unescape decodes the escape whose backslash is before b[i] (a high and low
// surrogate escaped in turn make one) and returns the character and the
// index of the escape's last byte.
func unescape(b []byte, i int) (rune, int) {
	switch b[i] {
	case 'b':
		return '\b', i
	case 'f':
		return '\f', i
	case 'n':
		return '\n', i
	case 'r':
		return '\r', i
	case 't':
		return '\t', i
	case 'u':
		r := hex4(b[i+1 : i+5])
		i += 4
		if utf16.IsSurrogate(r) && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(b[i+3:i+7])); pair != utf8.RuneError {
				return pair, i + 6
			}
		}
		return r, i
	default: // " \ /
		return rune(b[i]), i
	}
}

// runeTextLen is the length of r in a string escape_json prints.
func runeTextLen(r rune) int {
	switch {
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20:
		return len(`\u0000`)
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3 // an unpaired surrogate too, which jsonb refuses anyway
	default:
		return 4
	}
}

// numberTextLen returns the index after the JSON number at b[i] and its
// length as numeric_out prints it. numberFits counts the sign of a negative
// zero, which numeric drops: -0.0 prints as 0.0.
func numberTextLen(b []byte, i int) (int, int) {
	end, ok, n := numberFits(b, i)
	if ok && b[i] == '-' && zeroMantissa(b[i+1:end]) {
		n--
	}
	return end, n
}

// zeroMantissa reports whether the digits of JSON number text num, up to
// its exponent, are all zeros.
func zeroMantissa(num []byte) bool {
	for _, c := range num {
		switch c {
		case '0', '.':
		case 'e', 'E':
			return true
		default:
			return false
		}
	}
	return true
}
