package quotaheaders

import "time"

// HTTP-date layouts of RFC 9110 §5.6.7. The zone is the literal "GMT", not a
// layout zone, so "PST" is an error rather than a silent UTC.
const (
	imfFixdate = "Mon, 02 Jan 2006 15:04:05 GMT"
	rfc850Date = "Monday, 02-Jan-06 15:04:05 GMT"
	asctime    = "Mon Jan _2 15:04:05 2006"
)

// parseHTTPDate parses the three forms of HTTP-date. The two-digit year of
// the obsolete RFC 850 form is resolved against receivedAt as RFC 9110
// §5.6.7 requires: a year more than 50 years ahead is in the previous
// century (and, symmetrically, one 50 or more years behind is in the next).
func parseHTTPDate(s string, receivedAt time.Time) (time.Time, bool) {
	if t, err := time.Parse(imfFixdate, s); err == nil {
		return t, true
	}
	if t, err := time.Parse(asctime, s); err == nil {
		return t, true
	}
	t, err := time.Parse(rfc850Date, s)
	if err != nil {
		return time.Time{}, false
	}
	now := receivedAt.UTC()
	year := now.Year() - now.Year()%100 + t.Year()%100
	switch c := withYear(t, year); {
	case c.After(now.AddDate(50, 0, 0)):
		year -= 100
	case !c.After(now.AddDate(-50, 0, 0)):
		year += 100
	}
	c := withYear(t, year)
	if c.Day() != t.Day() {
		return time.Time{}, false // 29 Feb in a century year that is not a leap year
	}
	return c, true
}

func withYear(t time.Time, year int) time.Time {
	return time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), 0, time.UTC)
}
