package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
)

// jsonbTextCases hold octet_length(in::jsonb::text) as PostgreSQL 15 printed
// it.
var jsonbTextCases = []struct {
	name string
	in   string
	want int
}{
	{"empty object", `{}`, 2},
	{"empty array", `[]`, 2},
	{"spaced empty object", " { } ", 2},
	{"spaced empty array", `[ ]`, 2},
	{"separators", `{"a":1,"b":[1,2,{}]}`, 25},
	{"whitespace dropped", "{ \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } }\r\n", 22},
	{"true", `true`, 4},
	{"false", `false`, 5},
	{"null", ` null `, 4},
	{"literals", `[true,false,null]`, 19},
	{"nested", `[[[[[[{"a":[[{"b":{}}]]}]]]]]]`, 32},

	{"duplicate key, last longer", `{"a":1,"a":22}`, 9},
	{"duplicate key, last shorter", `{"a":22,"a":1}`, 8},
	{"duplicate key escaped", `{"a":1,"\u0061":22}`, 9},
	{"duplicate key solidus", `{"/":1,"\/":"xx"}`, 11},
	{"duplicate key apart", `{"b":1,"a":2,"b":333}`, 18},
	{"duplicate object drops its duplicates", `{"a":{"x":1,"x":2},"a":{"y":3}}`, 15},
	{"same key in sibling objects", `{"a":{"x":1,"x":22},"b":{"x":"yyy"}}`, 35},
	{"duplicates in array elements", `[{"k":1,"k":2},{"k":"x","k":"yz"}]`, 23},
	{"duplicate key two-byte", `{"\u00e9":1,"é":"two"}`, 13},
	{"duplicate key surrogate pair", `{"\ud83d\ude00":1,"😀":"two"}`, 15},
	{"duplicate key newline", `{"\n":1,"\u000a":22}`, 10},
	{"duplicate key quote", `{"\"":1,"\u0022":22}`, 10},
	{"duplicate key backslash", `{"a\\":1,"a\u005c":22}`, 11},
	{"escaped keys nested", `{"\u0061":{"\u0062":1,"b":22},"a":3,"\u0063":{"\u0063":[{"\u0063":1,"c":{"\u0063":4}}]},"c":{"cc":[]}}`, 25},
	{"many members", manyMembers(), 982},

	{"short escapes", `"\b\f\n\r\t\"\\\/"`, 17},
	{"short escapes as \\u", `"\u0008\u0009\u000a\u000c\u000d"`, 12},
	{"other control characters", `"\u0001\u000b\u001f"`, 20},
	{"space tilde DEL", `"\u0020\u007e\u007f"`, 5},
	{"raw DEL", "\"\x7fa\u00e9\"", 6},
	{"UTF-8 lengths", `"\u0080\u07ff\u0800\uffff"`, 12},
	{"surrogate pairs", `"\ud800\udc00\udbff\udfff"`, 10},
	{"upper-case hex", `"\uD83D\uDE00"`, 6},
	{"quote backslash solidus as \\u", `"\u0022\u005c\u002f"`, 7},
	{"raw non-ASCII", `"é€😀"`, 11},
	{"escaped backslash before u0000", `"a\\u0000"`, 10},
	{"escaped backslash", `"\\"`, 4},
	{"empty string", `""`, 2},

	{"zero", `0`, 1},
	{"negative zero", `-0`, 1},
	{"negative zero with scale", `-0.0`, 3},
	{"negative zero with exponent", `-0e5`, 1},
	{"negative zero scale from exponent", `-0.000e-2`, 7},
	{"negative zero upper-case exponent", `-0E+3`, 1},
	{"zero scale absorbed by exponent", `0.0e5`, 1},
	{"zero with negative exponent", `0e-3`, 5},
	{"negative", `-1`, 2},
	{"exponent expanded", `1e3`, 4},
	{"plus exponent", `1E+02`, 3},
	{"exponent leading zeros", `1e007`, 8},
	{"negative exponent", `1.5e-3`, 6},
	{"scale kept", `1.50`, 4},
	{"negative with exponent", `-1.0e1`, 3},
	{"scale from exponent", `100e-2`, 4},
	{"fraction shifted", `12.3e-1`, 4},
	{"leading fraction zeros", `0.00001e5`, 1},
	{"zero exponent", `0.000e0`, 5},
	{"negative zero exponent", `1e-0`, 1},
	{"long integer", `123456789012345678901234567890`, 30},
	{"long fraction", `1.000000000000000000001`, 23},
	{"negative shifted to integer", `-0.001e3`, 2},
	{"negative shifted", `-0.001e2`, 4},
	{"half", `5e-1`, 3},
	{"smallest", `1e-16383`, 16385},
	{"largest scale of negative zero", `-0e-16383`, 16385},
	{"largest", `-9.99e131071`, 131073},
	{"negative zeros nested", `[-0,-0.0,{"a":-0e1}]`, 18},
	{"negative zero scale shortened", `-0.00e1`, 3},
}

// manyMembers is an object of 40 members, more than sorting by insertion
// alone handles, whose last 15 repeat earlier keys, escaped, with longer
// values.
func manyMembers() string {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range 40 {
		if i > 0 {
			sb.WriteString(",")
		}
		k := i
		if i >= 25 {
			k = (i - 25) * 3
		}
		fmt.Fprintf(&sb, `"k\u00%x%d":%s`, 0x30+k%10, k/10, strings.Repeat("7", i+1))
	}
	sb.WriteString("}")
	return sb.String()
}

func TestJSONBTextLen(t *testing.T) {
	t.Parallel()
	for _, tc := range jsonbTextCases {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.in)
			require.True(t, json.Valid(b) && utf8.Valid(b) && jsonbRejects(b) == "", "not a payload jsonb stores: %s", tc.in)
			require.Equal(t, tc.want, jsonbTextLen(b), "in: %s", tc.in)
		})
	}
}

// FuzzJSONBTextLen checks jsonbTextLen against the server on every input
// that a payload may be.
func FuzzJSONBTextLen(f *testing.F) {
	for _, tc := range jsonbTextCases {
		f.Add([]byte(tc.in))
	}
	pool := pgtest.New(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) || jsonbRejects(b) != "" {
			t.Skip("not a payload")
		}
		var want int
		err := pool.QueryRow(ctx, `SELECT octet_length($1::text::jsonb::text)`, string(b)).Scan(&want)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			t.Skipf("the server refuses it: %v", err)
		}
		require.NoError(t, err)
		if got := jsonbTextLen(b); got != want {
			var text string
			_ = pool.QueryRow(ctx, `SELECT left($1::text::jsonb::text, 500)`, string(b)).Scan(&text)
			t.Fatalf("jsonbTextLen(%q) = %d, server printed %d bytes: %s", b, got, want, text)
		}
	})
}

// BenchmarkJSONBTextLen measures a typical payload of about 1 KB.
func BenchmarkJSONBTextLen(b *testing.B) {
	payload := []byte(`{
  "model": "claude-sonnet-4-5",
  "max_tokens": 1024,
  "temperature": 0.7,
  "top_p": 1.0,
  "system": "You are a careful assistant. Answer in the user's language.\nKeep answers short.",
  "messages": [
    {"role": "user", "content": "Summarise the attached support ticket in three bullet points, and say whether it needs an engineer."},
    {"role": "assistant", "content": "- Customer cannot log in since the update\n- Password reset e-mails arrive late\n- Happens on mobile only"},
    {"role": "user", "content": "Translate that into French, please: \u00ab r\u00e9sum\u00e9 \u00bb style."}
  ],
  "metadata": {
    "tenant": "acme-corp",
    "ticket_id": 48213,
    "priority": "high",
    "tags": ["login", "email", "mobile", "regression"],
    "created_at": "2025-06-01T12:34:56.789Z",
    "score": 1.5e-3,
    "attempt": 1,
    "trace": {"span": "9f2c4a1b7d3e", "sampled": true, "parent": null}
  },
  "stop_sequences": ["\n\nHuman:", "</answer>"],
  "stream": false
}`)
	if !json.Valid(payload) {
		b.Fatal("payload is not JSON")
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		jsonbTextLen(payload)
	}
}
