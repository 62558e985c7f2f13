package quotaheaders_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	qh "github.com/batchq/batchq/quotaheaders"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()

	const none = time.Duration(-1)
	cases := []struct {
		name string
		h    http.Header
		want time.Duration // none: ok is false
	}{
		{"delay seconds", hdr("Retry-After", "18"), 18 * time.Second},
		{"zero", hdr("Retry-After", "0"), 0},
		{"whitespace trimmed", hdr("Retry-After", " \t7 "), 7 * time.Second},
		{"decimal seconds", hdr("Retry-After", "1.5"), 1500 * time.Millisecond},
		{"small decimal", hdr("Retry-After", "0.05"), 50 * time.Millisecond},
		{"sub-nanosecond rounds up", hdr("Retry-After", "0.0000000001"), 1},
		{"retry-after-ms first", hdr("Retry-After", "1", "x-ms-retry-after-ms", "2000", "retry-after-ms", "650"), 650 * time.Millisecond},
		{"x-ms-retry-after-ms second", hdr("Retry-After", "1", "x-ms-retry-after-ms", "1250.4"), 1250400 * time.Microsecond},
		{"invalid ms falls back", hdr("retry-after-ms", "-5", "x-ms-retry-after-ms", "soon", "Retry-After", "3"), 3 * time.Second},
		{"empty ms is absent", hdr("retry-after-ms", "", "Retry-After", "3"), 3 * time.Second},
		{"several lines take the largest", hdr("Retry-After", "5", "Retry-After", "10", "Retry-After", "x", "Retry-After", "7"), 10 * time.Second},
		{"several ms lines take the largest", hdr("retry-after-ms", "5", "retry-after-ms", "20.5"), 20500 * time.Microsecond},
		{"a list is invalid", hdr("Retry-After", "5, 10"), none},
		{"a list without space is invalid", hdr("Retry-After", "5,10"), none},
		{"negative", hdr("Retry-After", "-1"), none},
		{"plus sign", hdr("Retry-After", "+1"), none},
		{"exponent", hdr("Retry-After", "1e3"), none},
		{"Go duration is not a Retry-After", hdr("Retry-After", "1s"), none},
		{"RFC 3339 is not a Retry-After", hdr("Retry-After", "2025-06-01T00:00:05Z"), none},
		{"trailing point", hdr("Retry-After", "5."), none},
		{"leading point", hdr("Retry-After", ".5"), none},
		{"IMF-fixdate", hdr("Retry-After", "Sun, 01 Jun 2025 00:00:05 GMT"), 5 * time.Second},
		{"RFC 850 date", hdr("Retry-After", "Sunday, 01-Jun-25 00:00:06 GMT"), 6 * time.Second},
		{"asctime date", hdr("Retry-After", "Sun Jun  1 00:00:07 2025"), 7 * time.Second},
		{"past date clamps", hdr("Retry-After", "Fri, 31 Dec 1999 23:59:59 GMT"), 0},
		{"zone other than GMT", hdr("Retry-After", "Sun, 01 Jun 2025 00:00:05 PST"), none},
		{"date and seconds lines", hdr("Retry-After", "Sun, 01 Jun 2025 00:00:05 GMT", "Retry-After", "3"), 5 * time.Second},
		{"huge but representable", hdr("Retry-After", "9223372036"), 9223372036 * time.Second},
		{"overflow", hdr("Retry-After", "9223372037"), none},
		{"huge ms", hdr("retry-after-ms", "9223372036854"), 9223372036854 * time.Millisecond},
		{"ms overflow falls back", hdr("retry-after-ms", "9223372036855", "Retry-After", "2"), 2 * time.Second},
		{"date beyond a Duration", hdr("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"), none},
		{"lower-case raw keys", http.Header{"retry-after": {"4"}}, 4 * time.Second},
		{"nothing", http.Header{}, none},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := qh.RetryAfter(tc.h, at)
			if tc.want == none {
				require.False(t, ok, "got %v", got)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRetryAfterRFC850Year(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name       string
		receivedAt time.Time
		value      string
		want       time.Duration
		ok         bool
	}{
		{
			name:       "same century",
			receivedAt: time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC),
			value:      "Sunday, 06-Nov-94 08:49:37 GMT", want: 7 * time.Second, ok: true,
		},
		{
			// 2050 would be 56 years ahead of 1994, so it is 1950 and past.
			// A fixed pivot (time.Parse's 69) would say 2050.
			name:       "more than 50 years ahead is the previous century",
			receivedAt: time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC),
			value:      "Monday, 06-Nov-50 08:49:37 GMT", want: 0, ok: true,
		},
		{
			name:       "two years ahead across a century",
			receivedAt: time.Date(2099, 12, 31, 23, 59, 0, 0, time.UTC),
			value:      "Friday, 01-Jan-00 00:00:00 GMT", want: 60 * time.Second, ok: true,
		},
		{
			name:       "29 February in a century year that is not a leap year",
			receivedAt: time.Date(2080, 1, 1, 0, 0, 0, 0, time.UTC),
			value:      "Monday, 29-Feb-00 00:00:00 GMT",
		},
		{
			name:       "29 February in 2000",
			receivedAt: time.Date(2000, 2, 28, 0, 0, 0, 0, time.UTC),
			value:      "Tuesday, 29-Feb-00 00:00:00 GMT", want: 24 * time.Hour, ok: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := qh.RetryAfter(hdr("Retry-After", tc.value), tc.receivedAt)
			require.Equal(t, tc.ok, ok, "got %v", got)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestProviderClockIsTheResponsesDate(t *testing.T) {
	t.Parallel()
	received := time.Date(2026, 11, 30, 12, 0, 40, 0, time.UTC)
	date := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	h := http.Header{"Date": {date.Format(http.TimeFormat)}}
	if got := qh.ProviderClock(h, received); !got.Equal(date) {
		t.Errorf("with a Date: %v, want %v", got, date)
	}
	for _, v := range []string{"", "yesterday"} {
		if got := qh.ProviderClock(http.Header{"Date": {v}}, received); !got.Equal(received) {
			t.Errorf("Date %q: %v, want the receive time %v", v, got, received)
		}
	}
}
