package quotaheaders_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/quotaheaders"
)

// corpusCase is one response of testdata/quota-corpus.json. Headers are the
// lines in the order they were sent.
type corpusCase struct {
	Name       string      `json:"name"`
	Source     string      `json:"source"`
	ReceivedAt time.Time   `json:"received_at"`
	Headers    [][2]string `json:"headers"`
	Expect     struct {
		Tokens       *expectedQuota `json:"tokens"`
		Requests     *expectedQuota `json:"requests"`
		RetryAfterMS *int64         `json:"retry_after_ms"`
	} `json:"expect"`
	Notes string `json:"notes"`
}

// expectedQuota is a corpus expectation; null limit or reset_ms means
// unknown, and reset_ms is the reset rounded up to whole milliseconds.
type expectedQuota struct {
	Limit     *int64 `json:"limit"`
	Remaining int64  `json:"remaining"`
	ResetMS   *int64 `json:"reset_ms"`
}

func loadCorpus(tb testing.TB) []corpusCase {
	tb.Helper()
	data, err := os.ReadFile("testdata/quota-corpus.json")
	require.NoError(tb, err)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cases []corpusCase
	require.NoError(tb, dec.Decode(&cases))
	return cases
}

// headerAsSent keeps each name exactly as the corpus spells it, so that
// mixed-case names reach Parse as a hand-built map would.
func headerAsSent(lines [][2]string) http.Header {
	h := http.Header{}
	for _, l := range lines {
		h[l[0]] = append(h[l[0]], l[1])
	}
	return h
}

// headerCanonical builds the header as net/http would, with Add.
func headerCanonical(lines [][2]string) http.Header {
	h := http.Header{}
	for _, l := range lines {
		h.Add(l[0], l[1])
	}
	return h
}

// ceilMS rounds up to whole milliseconds, as the corpus' reset_ms does.
func ceilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func TestCorpus(t *testing.T) {
	t.Parallel()

	cases := loadCorpus(t)
	require.Len(t, cases, 48, "the 43 cases copied from ../shared/testdata and 5 added here (Azure spellings, draft limit lists)")
	seen := map[string]bool{}
	for _, c := range cases {
		require.False(t, seen[c.Name], "duplicate case name %q", c.Name)
		seen[c.Name] = true
	}

	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			for form, h := range map[string]http.Header{
				"as sent":   headerAsSent(c.Headers),
				"canonical": headerCanonical(c.Headers),
			} {
				requireQuota(t, form+" tokens", c.Expect.Tokens, h, c.ReceivedAt, quotaheaders.Tokens)
				requireQuota(t, form+" requests", c.Expect.Requests, h, c.ReceivedAt, quotaheaders.Requests)

				d, ok := quotaheaders.RetryAfter(h, c.ReceivedAt)
				if c.Expect.RetryAfterMS == nil {
					require.False(t, ok, "%s: retry-after: got %v, want none", form, d)
				} else {
					require.True(t, ok, "%s: retry-after: got none", form)
					require.GreaterOrEqual(t, d, time.Duration(0))
					require.Equal(t, *c.Expect.RetryAfterMS, ceilMS(d), "%s: retry-after %v", form, d)
				}
			}
		})
	}
}

func requireQuota(t *testing.T, what string, want *expectedQuota, h http.Header, at time.Time, unit quotaheaders.Unit) {
	t.Helper()
	got, ok := quotaheaders.Parse(h, at, unit)
	if want == nil {
		require.False(t, ok, "%s: got %+v, want none", what, got)
		return
	}
	require.True(t, ok, "%s: got none", what)
	require.Equal(t, want.Remaining, got.Remaining, "%s: remaining", what)
	if want.Limit == nil {
		require.False(t, got.HasLimit, "%s: got limit %d, want unknown", what, got.Limit)
		require.Zero(t, got.Limit, "%s: unknown limit must be 0", what)
	} else {
		require.True(t, got.HasLimit, "%s: limit unknown, want %d", what, *want.Limit)
		require.Equal(t, *want.Limit, got.Limit, "%s: limit", what)
	}
	if want.ResetMS == nil {
		require.False(t, got.HasReset, "%s: got reset %v, want unknown", what, got.Reset)
		require.Zero(t, got.Reset, "%s: unknown reset must be 0", what)
	} else {
		require.True(t, got.HasReset, "%s: reset unknown, want %d ms", what, *want.ResetMS)
		require.GreaterOrEqual(t, got.Reset, time.Duration(0))
		require.Equal(t, *want.ResetMS, ceilMS(got.Reset), "%s: reset %v", what, got.Reset)
	}
}

// headerText renders lines as "Name: value" text, the form the fuzz targets
// take, and parseHeaderText reads it back.
func headerText(lines [][2]string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l[0] + ": " + l[1] + "\n")
	}
	return b.String()
}

func parseHeaderText(s string) [][2]string {
	var lines [][2]string
	for _, l := range strings.Split(s, "\n") {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		lines = append(lines, [2]string{name, value})
	}
	return lines
}
