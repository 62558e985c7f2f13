package quotaheaders

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSFList(t *testing.T) {
	t.Parallel()

	valid := []struct {
		in   string
		want []sfItem
	}{
		{`"burst";q=100;w=60,"daily";q=1000;w=86400`, []sfItem{
			{bare: sfBare{kind: sfString, str: "burst"}, params: []sfParam{{"q", sfBare{kind: sfInteger, num: 100}}, {"w", sfBare{kind: sfInteger, num: 60}}}},
			{bare: sfBare{kind: sfString, str: "daily"}, params: []sfParam{{"q", sfBare{kind: sfInteger, num: 1000}}, {"w", sfBare{kind: sfInteger, num: 86400}}}},
		}},
		{`10, 10;w=1 ,	50;w=60`, []sfItem{
			{bare: sfBare{kind: sfInteger, num: 10}},
			{bare: sfBare{kind: sfInteger, num: 10}, params: []sfParam{{"w", sfBare{kind: sfInteger, num: 1}}}},
			{bare: sfBare{kind: sfInteger, num: 50}, params: []sfParam{{"w", sfBare{kind: sfInteger, num: 60}}}},
		}},
		{`-999999999999999, 999999999999.999, -0.5`, []sfItem{
			{bare: sfBare{kind: sfInteger, num: -999999999999999}},
			{bare: sfBare{kind: sfDecimal, num: 999999999999999}},
			{bare: sfBare{kind: sfDecimal, num: -500}},
		}},
		{`"a\"b\\c", "", "\\"`, []sfItem{
			{bare: sfBare{kind: sfString, str: `a"b\c`}},
			{bare: sfBare{kind: sfString, str: ""}},
			{bare: sfBare{kind: sfString, str: `\`}},
		}},
		{`*tok/en:x, ?1, ?0, :cHJvZmlsZQ==:, ::`, []sfItem{
			{bare: sfBare{kind: sfToken, str: "*tok/en:x"}},
			{bare: sfBare{kind: sfBoolean, flag: true}},
			{bare: sfBare{kind: sfBoolean}},
			{bare: sfBare{kind: sfBytes, str: "cHJvZmlsZQ=="}},
			{bare: sfBare{kind: sfBytes}},
		}},
		{`a;b;c=?0;*d="x"`, []sfItem{
			{bare: sfBare{kind: sfToken, str: "a"}, params: []sfParam{
				{"b", sfBare{kind: sfBoolean, flag: true}},
				{"c", sfBare{kind: sfBoolean}},
				{"*d", sfBare{kind: sfString, str: "x"}},
			}},
		}},
		{`( "a"  1 );p=2, ()`, []sfItem{
			{inner: true, items: []sfItem{{bare: sfBare{kind: sfString, str: "a"}}, {bare: sfBare{kind: sfInteger, num: 1}}}, params: []sfParam{{"p", sfBare{kind: sfInteger, num: 2}}}},
			{inner: true},
		}},
		{`  1`, []sfItem{{bare: sfBare{kind: sfInteger, num: 1}}}},
		{``, nil},
	}
	for _, tc := range valid {
		got, ok := parseSFList(tc.in)
		require.True(t, ok, "%q", tc.in)
		require.Equal(t, tc.want, got, "%q", tc.in)
	}

	invalid := []string{
		`1,`,               // trailing comma
		`1,,2`,             // empty member
		`,1`,               // leading comma
		`1 2`,              // missing comma
		`1000000000000000`, // 16 integer digits
		`1000000000000.5`,  // 13 integer digits in a Decimal
		`1.5555`,           // 4 fractional digits
		`1.`,               // no fractional digit
		`-`,                // no digit
		`-a`,               // sign without digit
		`"abc`,             // unterminated String
		`"a\b"`,            // bad escape
		"\"a\tb\"",         // control character in a String
		`"é"`,              // non-ASCII in a String
		`:abc`,             // unterminated Byte Sequence
		`:a-b:`,            // not base64
		`?2`,               // not a Boolean
		`?`,                // truncated Boolean
		`a;B=1`,            // upper-case key
		`a;1=1`,            // key starting with a digit
		`a;=1`,             // empty key
		`a;b=`,             // missing parameter value
		`a;b=(1)`,          // Inner List as a parameter value
		`(1,2)`,            // comma in an Inner List
		`(1`,               // unterminated Inner List
		`(1)(2)`,           // no separator
		`@123`,             // RFC 9651 Date, not RFC 8941
		`a=1`,              // a Dictionary member
		"\t1",              // leading HTAB is not SP
		`%"x"`,             // Display String
		`é`,                // not a bare item
	}
	for _, in := range invalid {
		_, ok := parseSFList(in)
		require.False(t, ok, "%q", in)
	}
}

func TestParseSFDictionary(t *testing.T) {
	t.Parallel()

	got, ok := parseSFDictionary(`limit=100, remaining=50;x, reset=5, flag, limit=7, inner=(1 2)`)
	require.True(t, ok)
	require.Equal(t, []sfMember{
		{"limit", sfItem{bare: sfBare{kind: sfInteger, num: 7}}}, // first position, last value
		{"remaining", sfItem{bare: sfBare{kind: sfInteger, num: 50}, params: []sfParam{{"x", sfBare{kind: sfBoolean, flag: true}}}}},
		{"reset", sfItem{bare: sfBare{kind: sfInteger, num: 5}}},
		{"flag", sfItem{bare: sfBare{kind: sfBoolean, flag: true}}},
		{"inner", sfItem{inner: true, items: []sfItem{{bare: sfBare{kind: sfInteger, num: 1}}, {bare: sfBare{kind: sfInteger, num: 2}}}}},
	}, got)

	for _, in := range []string{
		`"burst";r=50`, // a String is not a key
		`Limit=1`,      // upper-case key
		`a=1,`,         // trailing comma
		`a=`,           // missing value
		`a=1 b=2`,      // missing comma
		`a=1;`,         // parameter without key
	} {
		_, ok := parseSFDictionary(in)
		require.False(t, ok, "%q", in)
	}
}
