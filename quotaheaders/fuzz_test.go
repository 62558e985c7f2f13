package quotaheaders_test

import (
	"math"
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	qh "github.com/batchq/batchq/quotaheaders"
)

// The fuzz targets are seeded from the corpus and the table tests.

func FuzzParse(f *testing.F) {
	for _, c := range loadCorpus(f) {
		for unit := range uint8(2) {
			f.Add(headerText(c.Headers), unit, c.ReceivedAt.UnixNano())
		}
	}
	for _, text := range []string{
		"x-ratelimit-remaining-tokens: 10\nx-ratelimit-remaining-tokens: 3\nx-ratelimit-limit-tokens: lots\nx-ratelimit-limit-tokens: 100\nx-ratelimit-reset-tokens: 5s\n",
		"x-ratelimit-limit: 60\nx-ratelimit-used: 75\n",
		"RateLimit-Policy: \"a\";q=10;qu=\"tokens\"\nRateLimit: \"a\";r=3;t=4\nRateLimit: \"b\";r=1\n",
		"RateLimit: limit=100, remaining=50, reset=5\n",
		"RateLimit-Limit: 10, 10;w=1\nRateLimit-Remaining: 9\nRateLimit-Reset: 1\n",
		"x-ratelimit-remaining: 1\nx-ratelimit-reset: 1761609600000.5\n",
		"x-ratelimit-remaining: 1\nx-ratelimit-reset: Sunday, 01-Jun-25 00:00:08 GMT\n",
		"anthropic-priority-input-tokens-remaining: 0\nanthropic-ratelimit-input-tokens-remaining: 500\n",
		"retry-after-ms: -5\nx-ms-retry-after-ms: 1250.4\nRetry-After: 3\n",
		"x-rate-limit-reset-tokens: 55\nx-ratelimit-remaining-tokens: 0\nx-ratelimit-remaining-requests: 59\n",
		"x-ratelimit-remaining-tokens: 10\nx-rate-limit-remaining-tokens: 4\nx-ratelimit-limit-tokens: -1\nx-rate-limit-limit-tokens: 200\nx-ratelimit-reset-tokens: 1s\nx-rate-limit-reset-tokens: 55\n",
		"x-rate-limit-remaining-requests-minute: 7\nx-ratelimit-reset-requests-minute: 30\n",
		"X-RateLimit-Limit: 100, 100;window=60, 10000;window=86400\nX-RateLimit-Remaining: 98\nX-RateLimit-Reset: 3\n",
		"X-RateLimit-Limit: 60, 60;window=3600\nX-RateLimit-Used: 4\n",
		"X-Rate-Limit-Limit: 1,000\nX-Rate-Limit-Remaining: 1\n",
		"RateLimit-Limit: 10, 10 ; w=1 ; Burst=1000, 1000 ; w=3600\nRateLimit-Remaining: 9\n",
		"RateLimit-Limit: 100, 100;w=60;c=\"a\\\"b, c\", 5;W=1\nRateLimit-Remaining: 9\n",
	} {
		f.Add(text, uint8(0), at.UnixNano())
		f.Add(text, uint8(1), at.UnixNano())
	}

	f.Fuzz(func(t *testing.T, text string, unit uint8, receivedAtNanos int64) {
		receivedAt := time.Unix(0, receivedAtNanos).UTC()
		u := qh.Unit(unit % 3) // 2 is not a unit
		lines := parseHeaderText(text)
		canonical := headerCanonical(lines)
		before := canonical.Clone()

		got, ok := qh.Parse(canonical, receivedAt, u)
		require.Equal(t, before, canonical, "Parse must not modify the header")
		if !ok {
			require.Equal(t, qh.Snapshot{}, got)
		} else {
			require.NotEqual(t, qh.Unit(2), u)
			require.GreaterOrEqual(t, got.Remaining, int64(0))
			require.GreaterOrEqual(t, got.Limit, int64(0))
			require.GreaterOrEqual(t, got.Reset, time.Duration(0))
			if !got.HasLimit {
				require.Zero(t, got.Limit)
			}
			if !got.HasReset {
				require.Zero(t, got.Reset)
			}
		}

		// Names are case-insensitive: the same lines under upper-case keys,
		// which Parse must fold itself, give the same answer.
		upper := http.Header{}
		for _, l := range lines {
			k := asciiUpper(l[0])
			upper[k] = append(upper[k], l[1])
		}
		gotUpper, okUpper := qh.Parse(upper, receivedAt, u)
		require.Equal(t, ok, okUpper)
		require.Equal(t, got, gotUpper)

		d, ok := qh.RetryAfter(canonical, receivedAt)
		require.GreaterOrEqual(t, d, time.Duration(0))
		dUpper, okUpper := qh.RetryAfter(upper, receivedAt)
		require.Equal(t, ok, okUpper)
		require.Equal(t, d, dUpper)
	})
}

// limitListCases are the limit values of TestParseDraftLimitList.
var limitListCases = []string{
	"100, 100;window=60, 10000;window=86400", "100, 100;w=60", "10, 10;w=1;burst=1000, 1000;w=3600",
	`100, 100;w=60;burst=1000;comment="sliding window", 5000;w=3600;burst=0;comment="fixed window"`,
	"0, 15;w=20", `100;window=60;comment="fixed window"`, "10, 10; window=1, 50; window=60", "100, 100 ;\tw=60",
	"10, 10;W=1;Burst=1000", `10, 10;c="a\"b, c";w=1`, ", 10, , 10;w=1,", "9223372036854775807", "1,000", "10, 20",
	"10, 10;w=", "10, 10;window=1m", `10, 10;w="1"`, "10, 10;w=1;flag", `10, 10;c="open`, "-1, 10;w=1", "10 20",
	"9223372036854775808, 1;w=1", " , ", "1000000000000000, 1;w=1", "10, 10;W=soon", "10;w=", `"ten", 10`,
}

// FuzzParseLimitList fuzzes the limit of X-RateLimit-Limit and
// RateLimit-Limit, plain or the list of the early drafts.
func FuzzParseLimitList(f *testing.F) {
	for _, v := range limitListCases {
		f.Add(v)
	}
	for _, c := range loadCorpus(f) {
		for _, l := range c.Headers {
			if strings.EqualFold(l[0], "X-RateLimit-Limit") || strings.EqualFold(l[0], "RateLimit-Limit") {
				f.Add(l[1])
			}
		}
	}

	f.Fuzz(func(t *testing.T, value string) {
		classic, ok := qh.Parse(hdr("X-RateLimit-Limit", value, "X-RateLimit-Remaining", "1"), at, qh.Requests)
		require.True(t, ok, "the remaining count is valid whatever the limit")
		ietf, ok := qh.Parse(hdr("RateLimit-Limit", value, "RateLimit-Remaining", "1"), at, qh.Requests)
		require.True(t, ok, "the remaining count is valid whatever the limit")
		for _, s := range []qh.Snapshot{classic, ietf} {
			require.Equal(t, int64(1), s.Remaining)
			require.GreaterOrEqual(t, s.Limit, int64(0))
			if !s.HasLimit {
				require.Zero(t, s.Limit)
			}
		}

		v := strings.Trim(value, " \t")
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && countDigits(v) == len(v) {
			// A plain count is its own limit in either field.
			require.Equal(t, snapLimit(n), classic)
			require.Equal(t, snapLimit(n), ietf)
		}
		if classic.HasLimit {
			// The limit is the first member: the value, past empty members,
			// starts with its digits (leading zeros allowed), and the
			// RateLimit-Limit field, which reads a superset of the syntax,
			// agrees.
			first := strings.TrimLeft(v, " \t,")
			digits := first[:countDigits(first)]
			n, err := strconv.ParseInt(digits, 10, 64)
			require.NoError(t, err, "%q", value)
			require.Equal(t, n, classic.Limit, "%q", value)
			require.Equal(t, classic, ietf, "%q", value)
		}
	})
}

// snapLimit is the snapshot of a remaining count of 1 and the given limit.
func snapLimit(limit int64) qh.Snapshot {
	return qh.Snapshot{Remaining: 1, Limit: limit, HasLimit: true}
}

// countDigits counts the leading ASCII digits of s.
func countDigits(s string) int {
	n := 0
	for n < len(s) && '0' <= s[n] && s[n] <= '9' {
		n++
	}
	return n
}

var retryFields = []string{"retry-after-ms", "x-ms-retry-after-ms", "Retry-After"}

var decimalRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

func FuzzRetryAfter(f *testing.F) {
	for _, c := range loadCorpus(f) {
		for _, l := range c.Headers {
			for i, name := range retryFields {
				if strings.EqualFold(l[0], name) {
					f.Add(l[1], uint8(i), c.ReceivedAt.UnixNano())
				}
			}
		}
	}
	for _, v := range []string{
		"18", "0", " 7 ", "1.5", "0.05", "0.0000000001", "1250.4", "5, 10", "-1", "+1", "1e3", "1s", "5.", ".5",
		"9223372036", "9223372037", "9223372036854", "9223372036855",
		"Sun, 01 Jun 2025 00:00:05 GMT", "Sunday, 01-Jun-25 00:00:06 GMT", "Sun Jun  1 00:00:07 2025",
		"Fri, 31 Dec 1999 23:59:59 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Monday, 29-Feb-00 00:00:00 GMT",
	} {
		for i := range retryFields {
			f.Add(v, uint8(i), at.UnixNano())
		}
	}

	f.Fuzz(func(t *testing.T, value string, field uint8, receivedAtNanos int64) {
		receivedAt := time.Unix(0, receivedAtNanos).UTC()
		name := retryFields[int(field)%len(retryFields)]
		d, ok := qh.RetryAfter(hdr(name, value), receivedAt)
		require.GreaterOrEqual(t, d, time.Duration(0))
		if !ok {
			require.Zero(t, d)
		}

		v := strings.Trim(value, " \t")
		unit := int64(time.Millisecond)
		if name == "Retry-After" {
			unit = int64(time.Second)
		}
		switch {
		case decimalRE.MatchString(v):
			// Oracle: exact rational arithmetic, rounded up.
			r, _ := new(big.Rat).SetString(v)
			r.Mul(r, new(big.Rat).SetInt64(unit))
			want := new(big.Int).Quo(r.Num(), r.Denom())
			if !r.IsInt() {
				want.Add(want, big.NewInt(1))
			}
			if want.IsInt64() {
				require.True(t, ok, "%q", v)
				require.Equal(t, want.Int64(), int64(d), "%q", v)
			} else {
				require.False(t, ok, "%q overflows", v)
			}
		case name == "Retry-After":
			if date, err := time.Parse(http.TimeFormat, v); err == nil {
				// Oracle for IMF-fixdate: the difference, clamped at 0,
				// when it fits.
				switch {
				case !date.After(receivedAt):
					require.True(t, ok)
					require.Zero(t, d)
				case date.Sub(receivedAt) < math.MaxInt64:
					require.True(t, ok)
					require.Equal(t, date.Sub(receivedAt), d)
				}
			}
		default:
			require.False(t, ok, "%q is not decimal milliseconds", v)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, tc := range durationCases {
		f.Add(tc.in, int64(tc.want))
	}
	for _, c := range loadCorpus(f) {
		for _, l := range c.Headers {
			f.Add(l[1], int64(0))
		}
	}

	f.Fuzz(func(t *testing.T, s string, n int64) {
		d, ok := qh.ParseDuration(s)
		require.GreaterOrEqual(t, d, time.Duration(0))
		if !ok {
			require.Zero(t, d)
		}

		goD, err := time.ParseDuration(s)
		if ok {
			require.NoError(t, err, "ParseDuration accepts %q, time.ParseDuration does not", s)
			// time.ParseDuration computes each number's fraction in floating
			// point and truncates it; this package is exact and rounds each
			// number up: at most one nanosecond apart per number.
			require.GreaterOrEqual(t, d-goD, time.Duration(0), "%q: %v vs %v", s, d, goD)
			require.LessOrEqual(t, d-goD, time.Duration(countNumbers(s)), "%q: %v vs %v", s, d, goD)
		} else if err == nil && !strings.HasPrefix(s, "-") && !strings.HasPrefix(s, "+") {
			require.Equal(t, time.Duration(math.MaxInt64), goD, "time.ParseDuration accepts %q, ParseDuration does not", s)
		}

		// What time.Duration.String prints reads back exactly.
		if n < 0 {
			n = -(n + 1)
		}
		back, ok := qh.ParseDuration(time.Duration(n).String())
		require.True(t, ok, time.Duration(n).String())
		require.Equal(t, time.Duration(n), back)
	})
}

// countNumbers counts the numbers of a duration, "1.5h0.1s" has two.
func countNumbers(s string) int {
	n := 0
	inNumber := false
	for i := 0; i < len(s); i++ {
		numeric := '0' <= s[i] && s[i] <= '9' || s[i] == '.'
		if numeric && !inNumber {
			n++
		}
		inNumber = numeric
	}
	return n
}

// asciiUpper upper-cases ASCII letters only: strings.ToUpper would map
// non-ASCII letters such as 'ı' to ASCII ones and change which name a key is.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
