// Package decimal reads numbers as people write them: in base 10, and in
// nothing else Go's own parsers read. strconv.ParseFloat also takes
// hexadecimal (0x1p1 is 2), underscores between digits (1_0 is 10), Inf and
// NaN; a weight or a fraction typed as such is a mistake to refuse, not a
// number to guess at. The console's forms and the CLI's flags read their
// fractional numbers through it.
package decimal

import (
	"regexp"
	"strconv"
)

// number is a decimal number: digits with an optional sign, fraction and
// exponent, in ASCII.
var number = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// ParseFloat reads s as a decimal number. It reports false for anything
// else, and for a number too large for a float64.
func ParseFloat(s string) (float64, bool) {
	if !number.MatchString(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}
