package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

var jobLineCases = []struct {
	name string
	line string
	want queue.NewJob
	err  string // a prefix of the error; "" for none
}{
	{name: "minimal", line: `{"queue":"q","tenant":"t","cost":1}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1}},
	{name: "every field",
		line: `{"queue":"q","tenant":"acme","kind":"summarize","cost":1200,"ttl":"90m","max_attempts":3,"payload":{"doc":[1,2]},"unique_key":"doc-1"}`,
		want: queue.NewJob{Queue: "q", Tenant: "acme", Kind: "summarize", Cost: 1200, TTL: 90 * time.Minute, MaxAttempts: 3,
			Payload: json.RawMessage(`{"doc":[1,2]}`), UniqueKey: "doc-1"}},
	{name: "deadline", line: ` {"cost": 7, "deadline": "2030-01-02T03:04:05.5+01:00", "queue": "q", "tenant": "t"} `,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 7, Deadline: time.Date(2030, 1, 2, 2, 4, 5, 5e8, time.UTC)}},
	{name: "nulls are absent", line: `{"queue":"q","tenant":"t","cost":1,"kind":null,"ttl":null,"deadline":null,"run_at":null}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1}},
	// As batchq.enqueue_jobs and --payload null take it.
	{name: "a null payload is a payload", line: `{"queue":"q","tenant":"t","cost":1,"payload":null}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, Payload: json.RawMessage(`null`)}},
	{name: "largest cost", line: `{"queue":"q","tenant":"t","cost":9223372036854775807}`, want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1<<63 - 1}},
	{name: "negative cost is for the queue to refuse", line: `{"queue":"q","tenant":"t","cost":-3}`, want: queue.NewJob{Queue: "q", Tenant: "t", Cost: -3}},
	{name: "zero cost is for the queue to refuse", line: `{"queue":"q","tenant":"t","cost":0}`, want: queue.NewJob{Queue: "q", Tenant: "t"}},
	{name: "empty names are for the queue to refuse", line: `{"queue":"","tenant":"","cost":1}`, want: queue.NewJob{Cost: 1}},
	// The queue would take these for "default" and none, as it would
	// --kind '' and --unique-key '', which are refused too.
	{name: "empty kind", line: `{"queue":"q","tenant":"t","cost":1,"kind":""}`, err: `kind: must not be empty (leave it out, or null, for "default")`},
	{name: "empty unique key", line: `{"queue":"q","tenant":"t","cost":1,"unique_key":""}`, err: "unique_key: must not be empty (leave it out, or null, for none)"},
	{name: "payload kept as written", line: `{"queue":"q","tenant":"t","cost":1,"payload": "text"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, Payload: json.RawMessage(`"text"`)}},

	{name: "empty object", line: `{}`, err: "queue: required (every line has queue, tenant and cost)"},
	{name: "no queue", line: `{"tenant":"t","cost":1}`, err: "queue: required"},
	{name: "no tenant", line: `{"queue":"q","cost":1}`, err: "tenant: required"},
	{name: "no cost", line: `{"queue":"q","tenant":"t"}`, err: "cost: required (every line has queue, tenant and cost)"},
	{name: "null cost", line: `{"queue":"q","tenant":"t","cost":null}`, err: "cost: required"},

	{name: "unknown field", line: `{"queue":"q","colour":"red"}`, err: `unknown field "colour"`},
	{name: "field names are exact", line: `{"Queue":"q"}`, err: `unknown field "Queue"`},
	{name: "repeated field", line: `{"cost":1,"cost":2}`, err: "cost: given twice"},
	{name: "cost too large", line: `{"cost":9223372036854775808}`, err: "cost: 9223372036854775808 is out of range for a 64-bit integer"},
	{name: "cost fraction", line: `{"cost":1.5}`, err: "cost: must be an integer (got 1.5)"},
	{name: "cost exponent", line: `{"cost":1.5e-1}`, err: "cost: must be an integer (got 1.5e-1)"},
	{name: "cost exponent out of range", line: `{"cost":1e19}`, err: "cost: 1e19 is out of range for a 64-bit integer"},
	{name: "cost huge exponent", line: `{"cost":1e999999999999}`, err: "cost: 1e999999999999 is out of range for a 64-bit integer"},
	{name: "cost tiny exponent", line: `{"cost":1e-999999999999}`, err: "cost: must be an integer (got 1e-999999999999)"},
	// JSON has one kind of number, and SQL's enqueue_jobs takes these as the
	// whole numbers they are.
	{name: "cost written with an exponent", line: `{"queue":"q","tenant":"t","cost":1.2e3}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1200}},
	{name: "cost written with a fraction of zeros", line: `{"queue":"q","tenant":"t","cost":12.000,"max_attempts":3e0}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 12, MaxAttempts: 3}},
	{name: "cost of zeros", line: `{"queue":"q","tenant":"t","cost":0.0e5}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 0}},
	{name: "cost at the edge", line: `{"queue":"q","tenant":"t","cost":92233720368547758.07e2}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 9223372036854775807}},
	{name: "cost string", line: `{"cost":"12"}`, err: `cost: must be an integer (got "12")`},
	{name: "max attempts too large", line: `{"max_attempts":4294967296}`, err: "max_attempts: 4294967296 is out of range for a 32-bit integer"},
	{name: "tenant not a string", line: `{"tenant":5}`, err: "tenant: must be a string (got 5)"},
	{name: "bad deadline", line: `{"deadline":"tomorrow"}`, err: `deadline: "tomorrow" is not an RFC 3339 time`},
	{name: "deadline not a string", line: `{"deadline":1700000000}`, err: "deadline: must be an RFC 3339 time in a string"},
	{name: "bad ttl", line: `{"ttl":"ten minutes"}`, err: `ttl: "ten minutes" is not a duration`},
	{name: "ttl in days", line: `{"queue":"q","tenant":"t","cost":1,"ttl":"7d"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, TTL: 7 * 24 * time.Hour}},
	{name: "ttl zero", line: `{"ttl":"0s"}`, err: "ttl: must be > 0 (got 0s)"},
	{name: "ttl past the limit", line: `{"ttl":"99999d"}`, err: `ttl: "99999d": must be at most 36500d (876000h)`},
	{name: "deadline and ttl", line: `{"deadline":"2030-01-01T00:00:00Z","ttl":"1h"}`, err: "deadline: give a deadline or a ttl, not both"},
	{name: "run_at", line: `{"queue":"q","tenant":"t","cost":1,"run_at":"2030-01-02T03:04:05Z"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, RunAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}},
	{name: "delay", line: `{"queue":"q","tenant":"t","cost":1,"delay":"2d"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, Delay: 48 * time.Hour}},
	{name: "delay zero runs now", line: `{"queue":"q","tenant":"t","cost":1,"delay":"0s"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1}},
	{name: "bad run_at", line: `{"run_at":"at two"}`, err: `run_at: "at two" is not an RFC 3339 time`},
	{name: "run_at not a string", line: `{"run_at":1700000000}`, err: "run_at: must be an RFC 3339 time in a string"},
	{name: "a zero run_at is none beside a delay", line: `{"queue":"q","tenant":"t","cost":1,"run_at":"0001-01-01T00:00:00Z","delay":"1h"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, Delay: time.Hour}},
	{name: "bad delay", line: `{"delay":"soon"}`, err: `delay: "soon" is not a duration`},
	{name: "negative delay", line: `{"delay":"-5m"}`, err: "delay: must be >= 0 (got -5m)"},
	{name: "negative delay in days", line: `{"delay":"-1d"}`, err: "delay: must be >= 0 (got -1d)"},
	{name: "delay past the limit", line: `{"delay":"9999999h"}`, err: `delay: "9999999h": must be at most 36500d (876000h)`},
	{name: "run_at and delay", line: `{"run_at":"2030-01-01T00:00:00Z","delay":"1h"}`, err: "run_at: give a run_at or a delay, not both"},
	{name: "run_at and no delay", line: `{"queue":"q","tenant":"t","cost":1,"run_at":"2030-01-01T00:00:00Z","delay":"0s"}`,
		want: queue.NewJob{Queue: "q", Tenant: "t", Cost: 1, RunAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}},
	{name: "array", line: `[{"cost":1}]`, err: "must be a JSON object"},
	{name: "truncated", line: `{"cost":1`, err: "not JSON: unexpected end of line"},
	{name: "trailing data", line: `{"cost":1} {"cost":2}`, err: "unexpected data after the JSON object"},
	{name: "garbage", line: `cost=1`, err: "not JSON: invalid character"},
	{name: "lone surrogate in a tenant", line: `{"queue":"q","tenant":"acme\ud800","cost":1}`,
		err: `tenant: must not contain an unpaired UTF-16 surrogate escape such as \ud800 (got "acme\ud800")`},
	{name: "lone low surrogate in a key", line: `{"queue":"q","tenant":"t","cost":1,"unique_key":"k\udfff"}`,
		err: `unique_key: must not contain an unpaired UTF-16 surrogate escape`},
	{name: "surrogate pair is a character", line: `{"queue":"q","tenant":"t\ud83d\ude00","cost":1}`,
		want: queue.NewJob{Queue: "q", Tenant: "t😀", Cost: 1}},
	{name: "long value clipped", line: `{"tenant":[` + strings.Repeat("1,", 100) + `1]}`, err: "tenant: must be a string (got [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1...)"},
}

func TestParseJobLine(t *testing.T) {
	t.Parallel()
	for _, tc := range jobLineCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseJobLine([]byte(tc.line))
			if tc.err != "" {
				require.Error(t, err)
				require.True(t, strings.HasPrefix(err.Error(), tc.err), "error %q, want prefix %q", err, tc.err)
				return
			}
			require.NoError(t, err)
			require.True(t, tc.want.Deadline.Equal(got.Deadline), "deadline %s, want %s", got.Deadline, tc.want.Deadline)
			got.Deadline, tc.want.Deadline = time.Time{}, time.Time{}
			require.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseJobLine checks that any line either parses to a job that reads
// back the same when written out again, or fails with a one-line error that
// names a field or what is wrong with the line.
func FuzzParseJobLine(f *testing.F) {
	for _, tc := range jobLineCases {
		f.Add(tc.line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		j, err := parseJobLine([]byte(line))
		if err != nil {
			msg := err.Error()
			require.NotContains(t, msg, "\n", "one line")
			require.True(t, jobLineErrorStart(msg), "error %q starts with a field or a known fault", msg)
			return
		}
		again, err := parseJobLine(jobLineOf(t, j))
		require.NoError(t, err)
		require.True(t, j.Deadline.Equal(again.Deadline))
		require.True(t, j.RunAt.Equal(again.RunAt))
		j.Deadline, again.Deadline = time.Time{}, time.Time{}
		j.RunAt, again.RunAt = time.Time{}, time.Time{}
		if j.Payload != nil {
			require.JSONEq(t, string(j.Payload), string(again.Payload))
			j.Payload, again.Payload = nil, nil
		}
		require.Equal(t, j, again)
	})
}

func jobLineErrorStart(msg string) bool {
	for _, p := range []string{"not JSON", "must be a JSON object", "unknown field", "unexpected data"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	field, _, ok := strings.Cut(msg, ": ")
	return ok && jobLineFields[field]
}

// jobLineOf writes a job as a job line.
func jobLineOf(t *testing.T, j queue.NewJob) []byte {
	m := map[string]any{"queue": j.Queue, "tenant": j.Tenant, "cost": j.Cost, "max_attempts": j.MaxAttempts}
	// An empty kind or key is written as none: given as "", it is refused.
	if j.Kind != "" {
		m["kind"] = j.Kind
	}
	if j.UniqueKey != "" {
		m["unique_key"] = j.UniqueKey
	}
	if !j.Deadline.IsZero() {
		m["deadline"] = j.Deadline.Format(time.RFC3339Nano)
	}
	if j.TTL != 0 {
		m["ttl"] = j.TTL.String()
	}
	if !j.RunAt.IsZero() {
		m["run_at"] = j.RunAt.Format(time.RFC3339Nano)
	}
	if j.Delay != 0 {
		m["delay"] = j.Delay.String()
	}
	if j.Payload != nil {
		m["payload"] = j.Payload
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}
