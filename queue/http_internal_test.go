package queue

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// streamUsage finds what usageTokens finds in a body, without holding it:
// the top-level usage member, wherever it is, and nothing that only looks
// like it. A body that is not one whole JSON object says nothing.
func TestStreamUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want int64
	}{
		{`{"usage":{"total_tokens":7}}`, 7},
		{`{"id":"x","usage":{"input_tokens":3,"output_tokens":4}}`, 7},
		{` { "usage" : { "total_tokens" : 9 } } ` + "\n", 9},
		{`{"data":[{"usage":{"total_tokens":1}}],"usage":{"total_tokens":5}}`, 5},
		{`{"Usage":{"total_tokens":6}}`, 6}, // encoding/json matches names without regard to case
		// The last one counts, as encoding/json keeps it.
		{`{"usage":{"total_tokens":5},"usage":{"total_tokens":8}}`, 8},
		{`{"usage":{"total_tokens":5},"usage":null}`, 0},
		// Only nested ones, or in strings, or as a value: none of them is it.
		{`{"data":[{"usage":{"total_tokens":1}}]}`, 0},
		{`{"a":{"usage":{"total_tokens":1}}}`, 0},
		{`{"text":"{\"usage\":{\"total_tokens\":1}}","n":1}`, 0},
		{`{"kind":"usage","x":{"total_tokens":1}}`, 0},
		{`{"usages":{"total_tokens":1}}`, 0},
		{`[{"usage":{"total_tokens":1}}]`, 0},
		// Strings with braces, brackets and escaped quotes inside usage.
		{`{"usage":{"note":"}]\"{","total_tokens":11},"z":"}"}`, 11},
		{`{"usage":null}`, 0},
		{`{"usage":{"total_tokens":-3}}`, 0},
		// OpenAI's chat shape without a total; Anthropic's with the prompt
		// it wrote to its cache (which counts against its input-token
		// limit) and read from it (which does not).
		{`{"usage":{"prompt_tokens":100,"completion_tokens":20}}`, 120},
		{`{"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":125}}`, 125},
		{`{"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":0}}`, 120},
		{`{"usage":{"input_tokens":10,"cache_creation_input_tokens":5000,"cache_read_input_tokens":900,"output_tokens":50}}`, 5060},
		{`{"usage":{"input_tokens":9223372036854775807,"output_tokens":9}}`, 9223372036854775807},
		// Not one whole object: an event stream, text, a body cut short.
		{"data: {\"usage\":{\"output_tokens\":4}}\n\ndata: {\"usage\":{\"output_tokens\":9}}\n", 0},
		{`{"usage":{"total_tokens":3}} {"usage":{"total_tokens":4}}`, 0},
		{`not json`, 0},
		{``, 0},
		{`{"usage":{"total_tokens":12}, "data":[1,2`, 0},
	} {
		got := streamUsage(strings.NewReader(tc.body))
		if got != tc.want {
			t.Errorf("streamUsage(%s) = %d; want %d", tc.body, got, tc.want)
		}
		// On a body it can hold, usageTokens says the same.
		if json.Valid([]byte(tc.body)) && usageTokens([]byte(tc.body)) != got {
			t.Errorf("usageTokens(%s) = %d, streamUsage %d", tc.body, usageTokens([]byte(tc.body)), got)
		}
	}
	// A usage object larger than any is taken for none.
	big := `{"usage":{"total_tokens":5,"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
	if got := streamUsage(strings.NewReader(big)); got != 0 {
		t.Errorf("a 70 KiB usage: %d; want 0", got)
	}
	// A read that fails leaves the cost unknown.
	broken := errors.New("connection reset")
	body := io.MultiReader(strings.NewReader(`{"usage":{"total_tokens":5},"data":[`), iotest.ErrReader(broken))
	if got := streamUsage(body); got != 0 {
		t.Errorf("a read error: %d; want 0", got)
	}
}
