package quotaheaders

import "time"

// Thresholds that tell a bare number's meaning apart. 1e9 seconds is 31
// years, longer than any quota window, and 1e11 epoch seconds is the year
// 5138, so the three ranges do not overlap in practice.
const (
	epochSecondsFrom = 1_000_000_000
	epochMillisFrom  = 100_000_000_000
)

// parseReset reads a reset value sent at receivedAt as the time from
// receivedAt until the window resets:
//
//   - a bare decimal is delta seconds below 1e9, epoch seconds below 1e11
//     and epoch milliseconds from there on ("24", "33011.38", "1706792400",
//     "1761609600000");
//   - an unsigned Go duration is relative ("6m0s");
//   - an RFC 3339 timestamp or an HTTP-date is absolute.
//
// Absolute values in the past give 0. Anything else, and anything that
// overflows a time.Duration, is unknown.
func parseReset(s string, receivedAt time.Time) (time.Duration, bool) {
	if intDigits, fracDigits, ok := splitDecimal(s); ok {
		whole, ok := parseUint(intDigits)
		if !ok {
			return 0, false
		}
		return numericReset(whole, fracDigits, receivedAt)
	}
	if d, ok := ParseDuration(s); ok {
		return d, true
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return until(t, receivedAt)
	}
	if t, ok := parseHTTPDate(s, receivedAt); ok {
		return until(t, receivedAt)
	}
	return 0, false
}

// numericReset applies the bare-number rule to whole.fracDigits.
func numericReset(whole uint64, fracDigits string, receivedAt time.Time) (time.Duration, bool) {
	switch {
	case whole < epochSecondsFrom:
		// At most 1e18 ns: always fits.
		return time.Duration(whole*uint64(time.Second) + fractionCeil(fracDigits, uint64(time.Second))), true
	case whole < epochMillisFrom:
		nsec := fractionCeil(fracDigits, uint64(time.Second))
		return until(time.Unix(int64(whole), int64(nsec)), receivedAt)
	default:
		nsec := (whole%1000)*uint64(time.Millisecond) + fractionCeil(fracDigits, uint64(time.Millisecond))
		return until(time.Unix(int64(whole/1000), int64(nsec)), receivedAt)
	}
}

// until is the time from receivedAt to t, 0 when t is not after receivedAt,
// and unknown when it does not fit in a time.Duration (time.Time.Sub
// saturates instead of failing, so the result is checked by adding it back).
func until(t, receivedAt time.Time) (time.Duration, bool) {
	if !t.After(receivedAt) {
		return 0, true
	}
	d := t.Sub(receivedAt)
	if !receivedAt.Add(d).Equal(t) {
		return 0, false
	}
	return d, true
}
