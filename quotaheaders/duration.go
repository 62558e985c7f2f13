package quotaheaders

import (
	"math"
	"time"
)

// Exact decimal arithmetic. Every duration here is built from decimal digits
// with integers only: floats would turn "2m59.56s" into 179,560.000000001 ms
// or 179,559.99999 ms depending on the path, and a throttle that wakes a
// millisecond early gets a 429.

const maxDuration = uint64(math.MaxInt64)

// ParseDuration parses an unsigned Go-style duration such as "6m0s",
// "250ms", "1h2m3.5s", "500µs" or "500us": a sequence of decimal numbers,
// each with an optional fraction and a unit (ns, us, µs, μs, ms, s, m, h),
// or "0" alone. It accepts what [time.ParseDuration] accepts except a sign,
// and converts with integer arithmetic, so the result is exact to the
// nanosecond; where a number's fraction goes beyond the nanosecond it rounds
// that number up, where time.ParseDuration truncates. It reports false for
// anything else, including values that do not fit in a [time.Duration].
func ParseDuration(s string) (time.Duration, bool) {
	if s == "0" {
		return 0, true
	}
	if s == "" {
		return 0, false
	}
	var total uint64
	for s != "" {
		i := countDigits(s)
		intDigits := s[:i]
		s = s[i:]
		var fracDigits string
		if s != "" && s[0] == '.' {
			j := 1 + countDigits(s[1:])
			fracDigits = s[1:j]
			s = s[j:]
		}
		if intDigits == "" && fracDigits == "" {
			return 0, false
		}
		j := 0
		for j < len(s) && s[j] != '.' && !isDigit(s[j]) {
			j++
		}
		unit, ok := durationUnit(s[:j])
		if !ok {
			return 0, false
		}
		s = s[j:]
		n, ok := scaleDecimal(intDigits, fracDigits, unit)
		if !ok || n > maxDuration-total {
			return 0, false
		}
		total += n
	}
	return time.Duration(total), true
}

// durationUnit is the length of a Go duration unit in nanoseconds.
func durationUnit(u string) (uint64, bool) {
	switch u {
	case "ns":
		return 1, true
	case "us", "µs", "μs": // U+00B5 micro sign and U+03BC Greek mu, as in package time
		return uint64(time.Microsecond), true
	case "ms":
		return uint64(time.Millisecond), true
	case "s":
		return uint64(time.Second), true
	case "m":
		return uint64(time.Minute), true
	case "h":
		return uint64(time.Hour), true
	}
	return 0, false
}

// decimalDuration parses an unsigned decimal number, "12" or "1250.4", in
// the given unit. It reports false for signs, exponents, a missing digit on
// either side of the point, and values that overflow.
func decimalDuration(s string, unit uint64) (time.Duration, bool) {
	intDigits, fracDigits, ok := splitDecimal(s)
	if !ok {
		return 0, false
	}
	n, ok := scaleDecimal(intDigits, fracDigits, unit)
	return time.Duration(n), ok
}

// splitDecimal splits "12.5" into "12" and "5". It requires 1*DIGIT
// ["." 1*DIGIT] and nothing else.
func splitDecimal(s string) (intDigits, fracDigits string, ok bool) {
	i := countDigits(s)
	if i == 0 {
		return "", "", false
	}
	if i == len(s) {
		return s, "", true
	}
	if s[i] != '.' || i+1 == len(s) || countDigits(s[i+1:]) != len(s)-i-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// scaleDecimal returns intDigits.fracDigits × unit nanoseconds, with a
// fraction of a nanosecond rounded up. It reports false when the result does
// not fit in a time.Duration.
func scaleDecimal(intDigits, fracDigits string, unit uint64) (uint64, bool) {
	var whole uint64
	if intDigits != "" { // ".5s" is a Go duration
		var ok bool
		if whole, ok = parseUint(intDigits); !ok {
			return 0, false
		}
	}
	if whole > maxDuration/unit {
		return 0, false
	}
	n := whole*unit + fractionCeil(fracDigits, unit)
	if n > maxDuration {
		return 0, false
	}
	return n, true
}

// fractionCeil returns ⌈0.fracDigits × unit⌉ exactly. It runs Horner's rule
// from the last digit: each step divides (digit×unit + carried quotient) by
// ten and remembers whether anything was left over, so no intermediate value
// exceeds 10×unit, however many digits there are.
func fractionCeil(fracDigits string, unit uint64) uint64 {
	var q uint64
	inexact := false
	for i := len(fracDigits) - 1; i >= 0; i-- {
		n := uint64(fracDigits[i]-'0')*unit + q
		q = n / 10
		if n%10 != 0 {
			inexact = true
		}
	}
	if inexact {
		q++
	}
	return q
}

// parseUint parses a non-empty run of decimal digits, reporting false on
// overflow.
func parseUint(digits string) (uint64, bool) {
	if digits == "" {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if !isDigit(c) {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseCount parses a quota count: a plain non-negative decimal integer that
// fits in an int64. Signs, prefixes, exponents and fractions are invalid.
func parseCount(s string) (int64, bool) {
	n, ok := parseUint(s)
	if !ok || n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

func countDigits(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}
