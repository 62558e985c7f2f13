package quotaheaders

import (
	"net/http"
	"time"
)

// ProviderClock returns the instant to measure the times a response gives
// as dates from (resets, a Retry-After date): its Date header, on the same
// clock as those dates, or receivedAt when it has none. Measured from the
// receiver's own clock, a date would be off by however far that clock is
// from the provider's. Date has whole seconds, so a wait measured from it
// comes out up to a second long.
func ProviderClock(h http.Header, receivedAt time.Time) time.Time {
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		return date
	}
	return receivedAt
}

// RetryAfter reads how long the server asks the client to wait, from
// headers received at receivedAt. It tries retry-after-ms (decimal
// milliseconds), then x-ms-retry-after-ms (Azure, the same), then
// Retry-After (decimal seconds or an HTTP-date in any of its three forms);
// the first field with a valid line wins. Among several lines of that field
// the longest wait wins. A date in the past gives 0. A list such as "5, 10"
// is invalid, and so is a value that does not fit in a time.Duration; a
// huge value that fits is returned as it is. It reports false when no field
// has a valid value.
func RetryAfter(h http.Header, receivedAt time.Time) (time.Duration, bool) {
	h = caseFolded(h)
	if d, ok := longestRetry(h["Retry-After-Ms"], receivedAt, false); ok {
		return d, true
	}
	if d, ok := longestRetry(h["X-Ms-Retry-After-Ms"], receivedAt, false); ok {
		return d, true
	}
	return longestRetry(h["Retry-After"], receivedAt, true)
}

// longestRetry is the longest valid wait among lines of one field. seconds
// selects Retry-After's grammar over the millisecond fields'.
func longestRetry(lines []string, receivedAt time.Time, seconds bool) (time.Duration, bool) {
	var longest time.Duration
	found := false
	for _, l := range lines {
		l = trimValue(l)
		if l == "" {
			continue
		}
		var d time.Duration
		var ok bool
		if seconds {
			d, ok = parseRetryAfterSeconds(l, receivedAt)
		} else {
			d, ok = decimalDuration(l, uint64(time.Millisecond))
		}
		if ok && (!found || d > longest) {
			longest, found = d, true
		}
	}
	return longest, found
}

// parseRetryAfterSeconds parses a Retry-After value: delay-seconds (a
// decimal fraction is accepted, as the OpenAI and Anthropic clients do) or
// an HTTP-date.
func parseRetryAfterSeconds(s string, receivedAt time.Time) (time.Duration, bool) {
	if d, ok := decimalDuration(s, uint64(time.Second)); ok {
		return d, true
	}
	if t, ok := parseHTTPDate(s, receivedAt); ok {
		return until(t, receivedAt)
	}
	return 0, false
}
