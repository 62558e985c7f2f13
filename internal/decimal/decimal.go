// Package decimal reads numbers as people write them: in base 10, and in
// nothing else Go's own parsers read. strconv.ParseFloat also takes
// hexadecimal (0x1p1 is 2), underscores between digits (1_0 is 10), Inf and
// NaN, and reads 1e-400 as 0; a weight or a fraction typed as such is a
// mistake to refuse, not a number to guess at. The console's forms and the
// CLI's flags read their fractional numbers through it.
package decimal

import (
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// number is a decimal number: digits with an optional sign, fraction and
// exponent, in ASCII.
var number = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

var (
	// ErrSyntax is the refusal of what is not a decimal number.
	ErrSyntax = errors.New("not a decimal number")
	// ErrRange is the refusal of a decimal number a float64 cannot hold:
	// too large, or so small it would read as 0.
	ErrRange = errors.New("out of range")
)

// Parse reads s as a decimal number.
func Parse(s string) (float64, error) {
	if !number.MatchString(s) {
		return 0, ErrSyntax
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, ErrRange
	}
	if mantissa, _, _ := strings.Cut(strings.ToLower(s), "e"); f == 0 && strings.ContainsAny(mantissa, "123456789") {
		return 0, ErrRange
	}
	return f, nil
}

// ParseFloat reads s as a decimal number. It reports false for anything
// else, and for a number a float64 cannot hold (Parse says which).
func ParseFloat(s string) (float64, bool) {
	f, err := Parse(s)
	return f, err == nil
}

// Format writes f as people write a number: in plain digits from 0.000001
// up to 1e21 (1000001, not the 1.000001e+06 of %v), and with a short
// exponent beyond them (1e-8, 2.5e21), never with more digits than f needs.
func Format(f float64) string {
	if a := math.Abs(f); a == 0 || (a >= 1e-6 && a < 1e21) || math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mantissa, exp, _ := strings.Cut(s, "e")
	sign := ""
	if exp[0] == '-' {
		sign = "-"
	}
	return mantissa + "e" + sign + strings.TrimLeft(exp[1:], "0")
}
