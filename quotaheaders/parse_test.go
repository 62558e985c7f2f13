package quotaheaders_test

import (
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	qh "github.com/batchq/batchq/quotaheaders"
)

// at is the instant the test responses arrive.
var at = time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)

// hdr builds a header from name, value pairs with Add, as net/http would.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// snap is a Snapshot with everything known.
func snap(remaining, limit int64, reset time.Duration) qh.Snapshot {
	return qh.Snapshot{Remaining: remaining, Limit: limit, HasLimit: true, Reset: reset, HasReset: true}
}

// parseCase is one table row: the header, the unit, and the expected
// snapshot, or none when ok is false.
type parseCase struct {
	name string
	h    http.Header
	unit qh.Unit
	want qh.Snapshot
	ok   bool
}

func runParseCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := qh.Parse(tc.h, at, tc.unit)
			require.Equal(t, tc.ok, ok, "got %+v", got)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseCounts(t *testing.T) {
	t.Parallel()

	remaining := func(v string) http.Header {
		return hdr("x-ratelimit-remaining-tokens", v, "x-ratelimit-limit-tokens", "100")
	}
	valid := func(n int64) qh.Snapshot { return qh.Snapshot{Remaining: n, Limit: 100, HasLimit: true} }
	cases := []parseCase{
		{name: "zero is valid", h: remaining("0"), want: valid(0), ok: true},
		{name: "plain", h: remaining("42"), want: valid(42), ok: true},
		{name: "leading zeros", h: remaining("007"), want: valid(7), ok: true},
		{name: "max int64", h: remaining("9223372036854775807"), want: valid(9223372036854775807), ok: true},
		{name: "trimmed spaces and tabs", h: remaining(" \t42\t "), want: valid(42), ok: true},
		{name: "int64 overflow", h: remaining("9223372036854775808")},
		{name: "azure minus one", h: remaining("-1")},
		{name: "plus sign", h: remaining("+5")},
		{name: "exponent", h: remaining("1e3")},
		{name: "hex prefix", h: remaining("0x10")},
		{name: "fraction", h: remaining("5.0")},
		{name: "thousands separator", h: remaining("1,000")},
		{name: "inner space", h: remaining("5 5")},
		{name: "non-ASCII digit", h: remaining("٣")},
		{name: "empty is absent", h: remaining("")},
		{name: "blank is absent", h: remaining("  ")},
	}
	for i := range cases {
		cases[i].unit = qh.Tokens
	}
	runParseCases(t, cases)
}

func TestParseBadPartIsUnknown(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "bad limit keeps remaining and reset",
			h:    hdr("x-ratelimit-remaining-requests", "5", "x-ratelimit-limit-requests", "-1", "x-ratelimit-reset-requests", "2s"),
			want: qh.Snapshot{Remaining: 5, Reset: 2 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "bad reset keeps remaining and limit",
			h:    hdr("x-ratelimit-remaining-requests", "5", "x-ratelimit-limit-requests", "10", "x-ratelimit-reset-requests", "soon"),
			want: qh.Snapshot{Remaining: 5, Limit: 10, HasLimit: true}, ok: true,
		},
		{
			name: "bad remaining drops the candidate",
			h:    hdr("x-ratelimit-remaining-requests", "many", "x-ratelimit-limit-requests", "10", "x-ratelimit-reset-requests", "2s"),
		},
		{
			name: "limit zero is a real limit",
			h:    hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-limit-requests", "0"),
			want: qh.Snapshot{Remaining: 0, Limit: 0, HasLimit: true}, ok: true,
		},
		{
			name: "limit alone is no candidate",
			h:    hdr("x-ratelimit-limit-requests", "10", "x-ratelimit-reset-requests", "2s"),
		},
	})
}

func TestParseResetValues(t *testing.T) {
	t.Parallel()

	epoch := func(d time.Duration) string { return strconv.FormatInt(at.Add(d).Unix(), 10) }
	epochMS := func(d time.Duration) string { return strconv.FormatInt(at.Add(d).UnixMilli(), 10) }
	const unknown = time.Duration(-1)
	cases := []struct {
		value string
		want  time.Duration // unknown: HasReset false
	}{
		// Bare decimals: delta seconds below 1e9.
		{"24", 24 * time.Second},
		{"0", 0},
		{"0024", 24 * time.Second},
		{"33011.382867", 33011382867 * time.Microsecond},
		{"45.5", 45500 * time.Millisecond},
		{"0.0000000001", 1}, // a tenth of a nanosecond rounds up, never down
		{"999999999", 999999999 * time.Second},
		{"999999999.999999999", 999999999999999999},
		// Epoch seconds from 1e9, epoch milliseconds from 1e11.
		{"1000000000", 0}, // 2001: past, clamps at 0
		{epoch(time.Hour), time.Hour},
		{epoch(time.Hour) + ".25", time.Hour + 250*time.Millisecond},
		{epoch(-time.Hour), 0},
		{"99999999999", unknown}, // the year 5138 is beyond a time.Duration from now
		{"100000000000", 0},      // epoch ms in 1973: past
		{epochMS(1500 * time.Millisecond), 1500 * time.Millisecond},
		{epochMS(time.Second) + ".5", time.Second + 500*time.Microsecond},
		{"99999999999999999999", unknown},
		// Go durations are relative and exact.
		{"2m59.56s", 179560 * time.Millisecond},
		{"1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond},
		{"6m0s", 6 * time.Minute},
		{"500µs", 500 * time.Microsecond},
		{"500us", 500 * time.Microsecond},
		{"250ms", 250 * time.Millisecond},
		{"7ns", 7},
		{"2562047h47m16.854775807s", time.Duration(1<<63 - 1)},
		{"2562047h47m16.854775808s", unknown},
		// RFC 3339 and HTTP-dates are absolute.
		{"2025-06-01T00:00:06Z", 6 * time.Second},
		{"2025-06-01T02:00:06+02:00", 6 * time.Second},
		{"2025-05-31T19:00:06-05:00", 6 * time.Second},
		{"2025-06-01T00:00:00.0005Z", 500 * time.Microsecond},
		{"2025-05-31T23:59:59Z", 0},
		{"2025-13-45T99:00:00Z", unknown},
		{"Sun, 01 Jun 2025 00:00:07 GMT", 7 * time.Second},
		{"Sunday, 01-Jun-25 00:00:08 GMT", 8 * time.Second},
		{"Sun Jun  1 00:00:09 2025", 9 * time.Second},
		{"Sat, 31 May 2025 00:00:00 GMT", 0},
		{"Sun, 01 Jun 2025 00:00:07 PST", unknown},
		// Signed, malformed or float-only spellings are unknown.
		{"-1s", unknown},
		{"+1s", unknown},
		{"-5", unknown},
		{"+5", unknown},
		{"1e3", unknown},
		{"5.", unknown},
		{"1 s", unknown},
		{"Infinity", unknown},
		{"NaN", unknown},
		{"5s 5s", unknown},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			t.Parallel()
			h := hdr("x-ratelimit-remaining", "1", "x-ratelimit-reset", tc.value)
			got, ok := qh.Parse(h, at, qh.Requests)
			require.True(t, ok, "the remaining count is valid whatever the reset")
			require.Equal(t, int64(1), got.Remaining)
			if tc.want == unknown {
				require.False(t, got.HasReset, "got reset %v", got.Reset)
				require.Zero(t, got.Reset)
				return
			}
			require.True(t, got.HasReset, "reset unknown")
			require.Equal(t, tc.want, got.Reset)
		})
	}
}

func TestParseRepeatedLines(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "lowest remaining, first valid limit, longest reset",
			h: hdr(
				"x-ratelimit-remaining-tokens", "10", "x-ratelimit-remaining-tokens", "3", "x-ratelimit-remaining-tokens", "7",
				"x-ratelimit-limit-tokens", "lots", "x-ratelimit-limit-tokens", "100", "x-ratelimit-limit-tokens", "200",
				"x-ratelimit-reset-tokens", "1s", "x-ratelimit-reset-tokens", "5s", "x-ratelimit-reset-tokens", "later", "x-ratelimit-reset-tokens", "2s",
			),
			unit: qh.Tokens, want: snap(3, 100, 5*time.Second), ok: true,
		},
		{
			name: "an invalid line is skipped",
			h:    hdr("x-ratelimit-remaining-tokens", "abc", "x-ratelimit-remaining-tokens", "9"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 9}, ok: true,
		},
		{
			name: "empty lines are absent",
			h:    hdr("x-ratelimit-remaining-tokens", "", "x-ratelimit-remaining-tokens", "9", "x-ratelimit-limit-tokens", "", "x-ratelimit-limit-tokens", "50"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 9, Limit: 50, HasLimit: true}, ok: true,
		},
		{
			name: "no valid line is no candidate",
			h:    hdr("x-ratelimit-remaining-tokens", "abc", "x-ratelimit-remaining-tokens", "-1"),
			unit: qh.Tokens,
		},
		{
			name: "a comma-joined value is not split",
			h:    hdr("x-ratelimit-remaining-tokens", "5, 3"),
			unit: qh.Tokens,
		},
	})
}

func TestParseGitHubUsed(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "limit minus used",
			h:    hdr("x-ratelimit-limit", "60", "x-ratelimit-used", "4", "x-ratelimit-reset", "30"),
			want: snap(56, 60, 30*time.Second), ok: true,
		},
		{
			name: "used beyond limit is zero",
			h:    hdr("x-ratelimit-limit", "60", "x-ratelimit-used", "75"),
			want: qh.Snapshot{Remaining: 0, Limit: 60, HasLimit: true}, ok: true,
		},
		{
			name: "remaining wins over used",
			h:    hdr("x-ratelimit-limit", "60", "x-ratelimit-remaining", "50", "x-ratelimit-used", "4"),
			want: qh.Snapshot{Remaining: 50, Limit: 60, HasLimit: true}, ok: true,
		},
		{
			name: "invalid remaining is not replaced by used",
			h:    hdr("x-ratelimit-limit", "60", "x-ratelimit-remaining", "n/a", "x-ratelimit-used", "4"),
		},
		{
			name: "used without limit",
			h:    hdr("x-ratelimit-used", "4"),
		},
		{
			name: "invalid used",
			h:    hdr("x-ratelimit-limit", "60", "x-ratelimit-used", "-4"),
		},
		{
			name: "used is only GitHub's",
			h:    hdr("x-ratelimit-limit-requests", "60", "x-ratelimit-used-requests", "4"),
		},
	})
}

func TestParseNamesCaseInsensitive(t *testing.T) {
	t.Parallel()

	want := snap(42, 60, 2*time.Second)
	for _, h := range []http.Header{
		{"x-ratelimit-remaining-requests": {"42"}, "x-ratelimit-limit-requests": {"60"}, "x-ratelimit-reset-requests": {"2s"}},
		{"X-RATELIMIT-REMAINING-REQUESTS": {"42"}, "X-RateLimit-Limit-Requests": {"60"}, "x-RateLimit-reset-Requests": {"2s"}},
		hdr("X-RATELIMIT-REMAINING-REQUESTS", "42", "x-ratelimit-limit-requests", "60", "X-Ratelimit-Reset-Requests", "2s"),
	} {
		got, ok := qh.Parse(h, at, qh.Requests)
		require.True(t, ok)
		require.Equal(t, want, got)
	}

	// Two spellings of one name in a hand-built map: the canonical one's
	// lines come first, whatever the map's iteration order.
	h := http.Header{
		"x-ratelimit-limit-tokens":     {"5"},
		"X-RATELIMIT-LIMIT-TOKENS":     {"6"},
		"X-Ratelimit-Limit-Tokens":     {"7"},
		"x-ratelimit-remaining-tokens": {"1"},
	}
	before := maps.Clone(h)
	for range 50 {
		got, ok := qh.Parse(h, at, qh.Tokens)
		require.True(t, ok)
		require.Equal(t, qh.Snapshot{Remaining: 1, Limit: 7, HasLimit: true}, got)
	}
	require.Equal(t, before, h, "Parse must not modify the header")
}

func TestParseStructuredFields(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "limit and unit from the policy of the same name",
			h:    hdr("RateLimit-Policy", `"day";q=1000;w=86400, "min";q=50;w=60`, "RateLimit", `"min";r=40;t=20`),
			want: snap(40, 50, 20*time.Second), ok: true,
		},
		{
			name: "lines of one name are joined",
			h:    hdr("RateLimit", `"a";r=9;t=1`, "RateLimit", `"b";r=4;t=2`),
			want: qh.Snapshot{Remaining: 4, Reset: 2 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "a syntax error drops the whole field",
			h:    hdr("RateLimit", `"a";r=9;t=1`, "RateLimit", `"b";r=`),
		},
		{
			name: "a syntax error on any line drops the whole field",
			h:    hdr("RateLimit", `"a";r=9;t=1`, "RateLimit", `"b";r=4;t=2,`),
		},
		{
			name: "an item without r is dropped, the rest kept",
			h:    hdr("RateLimit", `"a";t=1, "b";r=3;t=5`),
			want: qh.Snapshot{Remaining: 3, Reset: 5 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "negative, decimal, string or inner-list r is dropped",
			h:    hdr("RateLimit", `"a";r=-1, "b";r=1.5, "c";r="2", ("d");r=0, "e";r=8`),
			want: qh.Snapshot{Remaining: 8}, ok: true,
		},
		{
			name: "a bad t makes only the reset unknown",
			h:    hdr("RateLimit", `"a";r=3;t="soon"`),
			want: qh.Snapshot{Remaining: 3}, ok: true,
		},
		{
			name: "w is not a reset",
			h:    hdr("RateLimit-Policy", `"a";q=10;w=60`, "RateLimit", `"a";r=3`),
			want: qh.Snapshot{Remaining: 3, Limit: 10, HasLimit: true}, ok: true,
		},
		{
			name: "a bad q makes only the limit unknown",
			h:    hdr("RateLimit-Policy", `"a";q=-10`, "RateLimit", `"a";r=3;t=4`),
			want: qh.Snapshot{Remaining: 3, Reset: 4 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "a policy field that does not parse leaves the unit unknown",
			h:    hdr("RateLimit-Policy", `"a";q=10;qu="tokens"; w`, "RateLimit", `"a";r=3;t=4`),
		},
		{
			name: "qu tokens is not requests",
			h:    hdr("RateLimit-Policy", `"t";q=100;qu="tokens"`, "RateLimit", `"t";r=30`),
		},
		{
			name: "qu requests",
			h:    hdr("RateLimit-Policy", `"r";q=100;qu="requests"`, "RateLimit", `"r";r=30`),
			want: qh.Snapshot{Remaining: 30, Limit: 100, HasLimit: true}, ok: true,
		},
		{
			name: "other units are ignored",
			h:    hdr("RateLimit-Policy", `"c";q=5;qu="concurrent-requests", "b";q=9;qu="content-bytes"`, "RateLimit", `"c";r=1, "b";r=2`),
		},
		{
			name: "a Token qu is not a unit",
			h:    hdr("RateLimit-Policy", `"r";q=100;qu=requests`, "RateLimit", `"r";r=30`),
		},
		{
			name: "Token names match too",
			h:    hdr("RateLimit-Policy", `burst;q=100;w=60`, "RateLimit", `burst;r=50;t=30`),
			want: snap(50, 100, 30*time.Second), ok: true,
		},
		{
			name: "parameters of other types parse",
			h:    hdr("RateLimit-Policy", `"p";q=10;pk=:cHJvZmlsZQ==:;x=?1;y=1.5;z=tok/en`, "RateLimit", `"p";r=2;pk=:cHJvZmlsZQ==:`),
			want: qh.Snapshot{Remaining: 2, Limit: 10, HasLimit: true}, ok: true,
		},
		{
			name: "t follows the bare-number rule",
			h:    hdr("RateLimit", `"a";r=1;t=`+strconv.FormatInt(at.Add(90*time.Second).Unix(), 10)),
			want: qh.Snapshot{Remaining: 1, Reset: 90 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "draft 07 dictionary",
			h:    hdr("RateLimit", "limit=100, remaining=50, reset=5"),
			want: snap(50, 100, 5*time.Second), ok: true,
		},
		{
			name: "draft 07 without remaining",
			h:    hdr("RateLimit", "limit=10, reset=1"),
		},
		{
			name: "draft 07 with a negative remaining",
			h:    hdr("RateLimit", "limit=10, remaining=-1, reset=1"),
		},
		{
			name: "draft 07 with a bad reset",
			h:    hdr("RateLimit", "limit=10, remaining=2, reset=?1"),
			want: qh.Snapshot{Remaining: 2, Limit: 10, HasLimit: true}, ok: true,
		},
		{
			name: "draft 07 is requests only",
			h:    hdr("RateLimit", "limit=100, remaining=50, reset=5"),
			unit: qh.Tokens,
		},
		{
			name: "draft 03 limit list",
			h:    hdr("RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "9", "RateLimit-Reset", "1"),
			want: snap(9, 10, time.Second), ok: true,
		},
		{
			name: "draft 06 limit with a syntax error",
			h:    hdr("RateLimit-Limit", "10;w=", "RateLimit-Remaining", "9"),
			want: qh.Snapshot{Remaining: 9}, ok: true,
		},
		{
			name: "draft 06 limit whose first member is not an integer",
			h:    hdr("RateLimit-Limit", `"ten", 10`, "RateLimit-Remaining", "9"),
			want: qh.Snapshot{Remaining: 9}, ok: true,
		},
	})
}

func TestParseStructuredTokens(t *testing.T) {
	t.Parallel()

	h := hdr("RateLimit-Policy", `"rpm";q=500;w=60, "tpm";q=200000;qu="tokens";w=60`, "RateLimit", `"tpm";r=150000;t=12, "rpm";r=480;t=12`)
	got, ok := qh.Parse(h, at, qh.Tokens)
	require.True(t, ok)
	require.Equal(t, snap(150000, 200000, 12*time.Second), got)
	got, ok = qh.Parse(h, at, qh.Requests)
	require.True(t, ok)
	require.Equal(t, snap(480, 500, 12*time.Second), got)
}

func TestParseMostRestrictive(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "lowest remaining across dialects",
			h: hdr("x-ratelimit-remaining-tokens", "100", "x-ratelimit-limit-tokens", "1000",
				"anthropic-ratelimit-output-tokens-remaining", "50", "anthropic-ratelimit-output-tokens-limit", "80"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 50, Limit: 80, HasLimit: true}, ok: true,
		},
		{
			name: "lowest remaining across windows",
			h: hdr("x-ratelimit-remaining-requests-day", "5", "x-ratelimit-reset-requests-day", "3600",
				"x-ratelimit-remaining-requests-minute", "7", "x-ratelimit-reset-requests-minute", "30"),
			want: qh.Snapshot{Remaining: 5, Reset: time.Hour, HasReset: true}, ok: true,
		},
		{
			name: "on a tie the longer reset",
			h: hdr("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "2s", "x-ratelimit-limit-tokens", "1",
				"x-tokenlimit-remaining", "0", "x-tokenlimit-reset", "9s", "x-tokenlimit-limit", "2"),
			unit: qh.Tokens, want: snap(0, 2, 9*time.Second), ok: true,
		},
		{
			name: "on a tie an unknown reset comes last",
			h: hdr("x-ratelimit-remaining-tokens", "0", "x-ratelimit-limit-tokens", "1",
				"x-tokenlimit-remaining", "0", "x-tokenlimit-reset", "1ms", "x-tokenlimit-limit", "2"),
			unit: qh.Tokens, want: snap(0, 2, time.Millisecond), ok: true,
		},
		{
			name: "on a full tie the first dialect",
			h: hdr("anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-limit", "80000",
				"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-limit", "96000"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 0, Limit: 96000, HasLimit: true}, ok: true,
		},
		{
			name: "on a full tie the first item of a field",
			h:    hdr("RateLimit-Policy", `"a";q=10, "b";q=20`, "RateLimit", `"b";r=1;t=5, "a";r=1;t=5`),
			want: snap(1, 20, 5*time.Second), ok: true,
		},
		{
			name: "structured and separate fields compete",
			h:    hdr("RateLimit", `"a";r=7;t=5`, "x-ratelimit-remaining", "6", "x-ratelimit-limit", "60"),
			want: qh.Snapshot{Remaining: 6, Limit: 60, HasLimit: true}, ok: true,
		},
		{
			name: "units do not mix",
			h:    hdr("x-ratelimit-remaining-requests", "1", "x-ratelimit-remaining-tokens", "0"),
			want: qh.Snapshot{Remaining: 1}, ok: true,
		},
		{
			name: "both spellings",
			h:    hdr("x-ratelimit-remaining-tokens", "10", "x-rate-limit-remaining-tokens", "4"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 4}, ok: true,
		},
	})
}

func TestParseIgnoresWhatIsNotQuota(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "anthropic priority tier",
			h: hdr("anthropic-priority-input-tokens-limit", "10000", "anthropic-priority-input-tokens-remaining", "0",
				"anthropic-priority-input-tokens-reset", "2025-06-01T00:01:00Z",
				"anthropic-priority-output-tokens-remaining", "0"),
			unit: qh.Tokens,
		},
		{
			name: "anthropic priority tier does not lower the quota",
			h: hdr("anthropic-priority-input-tokens-remaining", "0",
				"anthropic-ratelimit-input-tokens-remaining", "500"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 500}, ok: true,
		},
		{
			name: "no reset inferred from a window name",
			h:    hdr("x-ratelimit-remaining-tokens-minute", "10", "x-ratelimit-limit-tokens-minute", "20"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 10, Limit: 20, HasLimit: true}, ok: true,
		},
		{
			name: "names are matched exactly",
			h: hdr("x-ratelimit-remaining-tokens_usage_based", "1", "x-ratelimit-remaining-tokens-prompt", "1",
				"x-ratelimit-tokens-query-cost", "1", "x-should-retry", "true"),
			unit: qh.Tokens,
		},
		{
			name: "nothing at all",
			h:    http.Header{},
			unit: qh.Tokens,
		},
		{
			name: "nil header",
			unit: qh.Requests,
		},
	})
}

func TestParseUnknownUnit(t *testing.T) {
	t.Parallel()

	h := hdr("x-ratelimit-remaining-requests", "1", "x-ratelimit-remaining-tokens", "1", "x-ratelimit-remaining", "1")
	for _, u := range []qh.Unit{-1, 2, 100} {
		_, ok := qh.Parse(h, at, u)
		require.False(t, ok, "unit %d", u)
	}
}

func TestParseDialectNames(t *testing.T) {
	t.Parallel()

	// Every documented name pattern yields a candidate of its unit and none
	// of the other.
	requests := []string{
		"x-ratelimit-%s-requests", "x-rate-limit-%s-requests",
		"x-ratelimit-%s-requests-minute", "x-ratelimit-%s-requests-day",
		"x-ratelimit-%s-req-minute", "x-rate-limit-%s-req-minute",
		"anthropic-ratelimit-requests-%s", "x-ratelimit-%s", "x-rate-limit-%s", "ratelimit-%s",
	}
	tokens := []string{
		"x-ratelimit-%s-tokens", "x-rate-limit-%s-tokens",
		"x-ratelimit-%s-tokens-minute", "x-ratelimit-%s-tokens-day", "x-ratelimit-%s-tokens-month",
		"anthropic-ratelimit-tokens-%s", "anthropic-ratelimit-input-tokens-%s", "anthropic-ratelimit-output-tokens-%s",
		"x-tokenlimit-%s",
	}
	check := func(pattern string, unit, other qh.Unit) {
		t.Helper()
		name := func(part string) string { return strings.Replace(pattern, "%s", part, 1) }
		h := hdr(name("remaining"), "3", name("limit"), "8", name("reset"), "1")
		got, ok := qh.Parse(h, at, unit)
		require.True(t, ok, pattern)
		require.Equal(t, snap(3, 8, time.Second), got, pattern)
		_, ok = qh.Parse(h, at, other)
		require.False(t, ok, pattern)
	}
	for _, p := range requests {
		check(p, qh.Requests, qh.Tokens)
	}
	for _, p := range tokens {
		check(p, qh.Tokens, qh.Requests)
	}
}

// ParseCalls reads a quota of one side of a call (Anthropic's input and
// output tokens) only once it is used up, and then with no limit; otherwise
// what Parse reads.
func TestParseCallsComparesOnlyWholeCalls(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 4, 10, 15, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		h    http.Header
		want qh.Snapshot
		ok   bool
	}{{
		// A Tier 1 response: 21,000 input tokens left of 30,000, all 8,000
		// output tokens; tokens-* counts both. Parse's most restrictive is the
		// output quota, which would refuse any call of more than 8,000 tokens.
		name: "one side left",
		h: hdr("anthropic-ratelimit-input-tokens-remaining", "21000", "anthropic-ratelimit-input-tokens-limit", "30000",
			"anthropic-ratelimit-output-tokens-remaining", "8000", "anthropic-ratelimit-output-tokens-limit", "8000",
			"anthropic-ratelimit-tokens-remaining", "29000", "anthropic-ratelimit-tokens-limit", "38000"),
		want: qh.Snapshot{Remaining: 29000, Limit: 38000, HasLimit: true}, ok: true,
	}, {
		name: "one side used up",
		h: hdr("anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-limit", "80000",
			"anthropic-ratelimit-input-tokens-reset", "2025-04-10T15:30:12Z",
			"anthropic-ratelimit-tokens-remaining", "16000", "anthropic-ratelimit-tokens-limit", "96000",
			"anthropic-ratelimit-tokens-reset", "2025-04-10T15:30:12Z"),
		want: qh.Snapshot{Remaining: 0, Reset: 12 * time.Second, HasReset: true}, ok: true,
	}, {
		name: "one side alone, left",
		h:    hdr("anthropic-ratelimit-output-tokens-remaining", "500", "anthropic-ratelimit-output-tokens-limit", "8000"),
	}, {
		name: "whole calls",
		h:    hdr("x-ratelimit-remaining-tokens", "100", "x-ratelimit-limit-tokens", "1000"),
		want: qh.Snapshot{Remaining: 100, Limit: 1000, HasLimit: true}, ok: true,
	}} {
		got, ok := qh.ParseCalls(c.h, at, qh.Tokens)
		require.Equal(t, c.ok, ok, c.name)
		require.Equal(t, c.want, got, c.name)
	}
	s, ok := qh.Parse(hdr("anthropic-ratelimit-output-tokens-remaining", "500", "anthropic-ratelimit-output-tokens-limit", "8000"), at, qh.Tokens)
	require.True(t, ok)
	require.Equal(t, qh.Snapshot{Remaining: 500, Limit: 8000, HasLimit: true}, s, "Parse still reads one side")
}

// Azure OpenAI spells the x-ratelimit-* names x-rate-limit-* as well, and
// mixes the two in one response: a 429 of openai/openai-python#937 carries
// x-rate-limit-reset-tokens: 55 beside x-ratelimit-remaining-requests. The
// spellings are one field, their resets bare seconds like OpenAI's others.
func TestParseAzureHyphenatedSpelling(t *testing.T) {
	t.Parallel()

	runParseCases(t, []parseCase{
		{
			name: "reset in one spelling, remaining in the other",
			h: hdr("x-rate-limit-reset-tokens", "55", "x-ratelimit-remaining-requests", "19",
				"x-ratelimit-remaining-tokens", "0"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 0, Reset: 55 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "limit in one spelling, remaining and reset in the other",
			h: hdr("x-ratelimit-limit-requests", "100", "x-rate-limit-remaining-requests", "10",
				"x-rate-limit-reset-requests", "60"),
			want: snap(10, 100, time.Minute), ok: true,
		},
		{
			name: "remaining in one spelling, limit and reset in the other",
			h: hdr("x-rate-limit-remaining-tokens", "120", "x-ratelimit-limit-tokens", "30000",
				"x-ratelimit-reset-tokens", "6m0s"),
			unit: qh.Tokens, want: snap(120, 30000, 6*time.Minute), ok: true,
		},
		{
			name: "a window in both spellings",
			h:    hdr("x-ratelimit-remaining-tokens-minute", "7", "x-rate-limit-limit-tokens-minute", "20", "x-rate-limit-reset-tokens-minute", "30"),
			unit: qh.Tokens, want: snap(7, 20, 30*time.Second), ok: true,
		},
		{
			name: "all in the hyphenated spelling, bare seconds",
			h: hdr("x-rate-limit-limit-tokens", "1000", "x-rate-limit-remaining-tokens", "100",
				"x-rate-limit-reset-tokens", "60"),
			unit: qh.Tokens, want: snap(100, 1000, time.Minute), ok: true,
		},
		{
			name: "all in the hyphenated spelling, a Go duration",
			h: hdr("x-rate-limit-limit-requests", "60", "x-rate-limit-remaining-requests", "59",
				"x-rate-limit-reset-requests", "1s"),
			want: snap(59, 60, time.Second), ok: true,
		},
		{
			name: "both spellings: the lowest remaining, the longest reset, the usual spelling's limit",
			h: hdr("x-ratelimit-remaining-tokens", "10", "x-rate-limit-remaining-tokens", "4",
				"x-ratelimit-reset-tokens", "1s", "x-rate-limit-reset-tokens", "55",
				"x-ratelimit-limit-tokens", "100", "x-rate-limit-limit-tokens", "200"),
			unit: qh.Tokens, want: snap(4, 100, 55*time.Second), ok: true,
		},
		{
			name: "an invalid limit in the usual spelling gives way to the other",
			h: hdr("x-ratelimit-remaining-tokens", "4", "x-ratelimit-limit-tokens", "-1",
				"x-rate-limit-limit-tokens", "200"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 4, Limit: 200, HasLimit: true}, ok: true,
		},
		{
			name: "an invalid remaining in one spelling is skipped",
			h: hdr("x-ratelimit-remaining-tokens", "-1", "x-rate-limit-remaining-tokens", "9",
				"x-ratelimit-reset-tokens", "2"),
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 9, Reset: 2 * time.Second, HasReset: true}, ok: true,
		},
		{
			name: "Azure's -1 in both spellings is no candidate",
			h: hdr("x-rate-limit-remaining-tokens", "-1", "x-ratelimit-remaining-tokens", "-1",
				"x-rate-limit-reset-tokens", "0"),
			unit: qh.Tokens,
		},
		{
			name: "a reset alone is no candidate",
			h:    hdr("x-rate-limit-reset-tokens", "55", "x-ratelimit-limit-tokens", "30000"),
			unit: qh.Tokens,
		},
		{
			name: "hand-built map in mixed case",
			h:    http.Header{"X-RATE-LIMIT-RESET-TOKENS": {"55"}, "x-ratelimit-remaining-tokens": {"3"}},
			unit: qh.Tokens, want: qh.Snapshot{Remaining: 3, Reset: 55 * time.Second, HasReset: true}, ok: true,
		},
	})
}

// Reading the lines of two spellings as one field must not write them into
// the spare capacity of the header's own slices.
func TestParseSpellingsLeaveHeaderAlone(t *testing.T) {
	t.Parallel()

	usual := make([]string, 1, 4)
	usual[0] = "10"
	h := http.Header{"X-Ratelimit-Remaining-Tokens": usual, "X-Rate-Limit-Remaining-Tokens": {"4", "6"}}
	got, ok := qh.Parse(h, at, qh.Tokens)
	require.True(t, ok)
	require.Equal(t, qh.Snapshot{Remaining: 4}, got)
	require.Equal(t, []string{"10", "", "", ""}, usual[:cap(usual)])
}

// Drafts -00 to -03 send RateLimit-Limit as a list whose first member is the
// limit in force, the others quota policies: "10, 10;w=1, 50;w=60" (-01
// §3.1), "100, 100; window=10" (draft-polli). WHOOP sends the same list in
// X-RateLimit-Limit: "100, 100;window=60, 10000;window=86400".
func TestParseDraftLimitList(t *testing.T) {
	t.Parallel()

	classic := func(limit string) http.Header {
		return hdr("X-RateLimit-Limit", limit, "X-RateLimit-Remaining", "98", "X-RateLimit-Reset", "3")
	}
	ietf := func(limit string) http.Header {
		return hdr("RateLimit-Limit", limit, "RateLimit-Remaining", "98", "RateLimit-Reset", "3")
	}
	known := func(limit int64) qh.Snapshot { return snap(98, limit, 3*time.Second) }
	unknown := qh.Snapshot{Remaining: 98, Reset: 3 * time.Second, HasReset: true}
	runParseCases(t, []parseCase{
		// X-RateLimit-Limit.
		{name: "whoop", h: classic("100, 100;window=60, 10000;window=86400"), want: known(100), ok: true},
		{name: "x-rate-limit spelling", h: hdr("X-Rate-Limit-Limit", "100, 100;w=60", "X-Rate-Limit-Remaining", "98", "X-Rate-Limit-Reset", "3"), want: known(100), ok: true},
		{name: "draft 01 burst comment", h: classic("10, 10;w=1;burst=1000, 1000;w=3600"), want: known(10), ok: true},
		{name: "draft 01 quoted comments", h: classic(`100, 100;w=60;burst=1000;comment="sliding window", 5000;w=3600;burst=0;comment="fixed window"`), want: known(100), ok: true},
		{name: "draft 01 zero limit", h: classic("0, 15;w=20"), want: known(0), ok: true},
		{name: "parameters on the first member", h: classic(`100;window=60;comment="fixed window"`), want: known(100), ok: true},
		{name: "draft-polli spacing", h: classic("10, 10; window=1, 50; window=60"), want: known(10), ok: true},
		{name: "space and tab around semicolons", h: classic("100, 100 ;\tw=60"), want: known(100), ok: true},
		{name: "upper-case parameter names", h: classic("10, 10;W=1;Burst=1000"), want: known(10), ok: true},
		{name: "escaped quote in a comment", h: classic(`10, 10;c="a\"b, c";w=1`), want: known(10), ok: true},
		{name: "empty members are ignored", h: classic(", 10, , 10;w=1,"), want: known(10), ok: true},
		{name: "repeated lines: the first valid", h: hdr("X-RateLimit-Limit", "lots", "X-RateLimit-Limit", "100, 100;window=60", "X-RateLimit-Remaining", "98", "X-RateLimit-Reset", "3"), want: known(100), ok: true},
		{name: "a plain count still", h: classic("9223372036854775807"), want: known(9223372036854775807), ok: true},
		{name: "github used with a list limit", h: hdr("X-RateLimit-Limit", "60, 60;window=3600", "X-RateLimit-Used", "4"), want: qh.Snapshot{Remaining: 56, Limit: 60, HasLimit: true}, ok: true},
		{name: "thousands separator is no list", h: classic("1,000"), want: unknown, ok: true},
		{name: "a policy without a window", h: classic("10, 20"), want: unknown, ok: true},
		{name: "an empty window", h: classic("10, 10;w="), want: unknown, ok: true},
		{name: "a window that is not seconds", h: classic("10, 10;window=1m"), want: unknown, ok: true},
		{name: "a quoted window", h: classic(`10, 10;w="1"`), want: unknown, ok: true},
		{name: "a parameter without a value", h: classic("10, 10;w=1;flag"), want: unknown, ok: true},
		{name: "an unterminated comment", h: classic(`10, 10;w=1;c="open`), want: unknown, ok: true},
		{name: "a negative first member", h: classic("-1, 10;w=1"), want: unknown, ok: true},
		{name: "two numbers without a comma", h: classic("10 20"), want: unknown, ok: true},
		{name: "a first member that overflows", h: classic("9223372036854775808, 1;w=1"), want: unknown, ok: true},
		{name: "commas only", h: classic(" , "), want: unknown, ok: true},
		// RateLimit-Limit: what the drafts' HTTP list syntax allows and
		// RFC 8941 does not.
		{name: "ietf: space before a semicolon", h: ietf("100, 100 ;w=60"), want: known(100), ok: true},
		{name: "ietf: tab around a semicolon", h: ietf("100, 100\t;\tw=60"), want: known(100), ok: true},
		{name: "ietf: upper-case parameter names", h: ietf("10, 10;W=1;Burst=1000, 1000;w=3600"), want: known(10), ok: true},
		{name: "ietf: a limit of 16 digits", h: ietf("1000000000000000, 1;w=1"), want: known(1000000000000000), ok: true},
		{name: "ietf: draft-polli spacing", h: ietf("10, 10; window=1, 50; window=60"), want: known(10), ok: true},
		{name: "ietf: an empty window", h: ietf("10, 10;w="), want: unknown, ok: true},
		{name: "ietf: an upper-case window that is not seconds", h: ietf("10, 10;W=soon"), want: unknown, ok: true},
	})
}
