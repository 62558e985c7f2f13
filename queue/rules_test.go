package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// The rules are stated twice, in Go (queue.NewJob's checks) and in SQL
// (db/functions/rules.sql), so that a job is refused alike whatever calls
// batchq. TestEnqueueRulesAreOneAcrossGoCLIAndSQL compares the refusals; this
// test compares the pieces both build them from: the limits, and how a name,
// a time and a duration are written.
func TestSQLRulesMatchGo(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})

	limits := map[string]int64{
		"max_cost":           queue.MaxCost,
		"max_name_bytes":     256,
		"max_attempts_limit": 1000,
		"max_payload_bytes":  queue.DefaultMaxPayloadBytes,
		"max_result_bytes":   queue.MaxResultBytes,
	}
	for fn, want := range limits {
		require.Equal(t, want, b.scalar(t, `SELECT batchq.`+fn+`()::bigint`), fn)
	}
	require.Equal(t, queue.MinWeight, b.scalarFloat(t,
		`SELECT substring(pg_get_constraintdef(oid) FROM 'weight >= \(?([0-9.]+)')::float8 FROM pg_constraint WHERE conname = 'tenants_weight_range'`))

	// Every character from U+007F to U+00A0, and the neighbours of the
	// bidirectional controls: both sides draw the line in the same places.
	var edges []rune
	for r := rune(0x7f); r <= 0xa0; r++ {
		edges = append(edges, r)
	}
	edges = append(edges, 0x061b, 0x061c, 0x061d, 0x200d, 0x200e, 0x200f, 0x2010, 0x2027, 0x202f, 0x2065, 0x206a)
	for _, s := range []string{"", "acme", `a"b\c`, "tab\there", "new\nline", "\x01\x1f\x7f", "é€😀", "\u2028\u2029", "<&>", "\b\f\r",
		string(edges)} {
		var got string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT batchq.quote($1)`, s).Scan(&got))
		require.Equal(t, queue.Quote(s), got, "%q", s)
	}
	// A name that holds a C1 control (U+0085 breaks the line on some
	// terminals) or a bidirectional one (U+202E shows what follows it
	// backwards) is written with it escaped, as U+2028 and U+2029 are, so
	// an error reads as the name is; the characters around them stay.
	for s, want := range map[string]string{
		"\u2028\u2029":                `"\u2028\u2029"`,
		"a\u0080b\u0085c\u009f\u00a0": `"a\u0080b\u0085c\u009f` + "\u00a0\"",
		"\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069": `"\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"`,
		"acme\u202egnp.exe\t\u05d0\u200d":                                          `"acme\u202egnp.exe\t` + "\u05d0\u200d\"",
	} {
		require.Equal(t, want, queue.Quote(s), "%q", s)
		var got string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT batchq.quote($1)`, s).Scan(&got))
		require.Equal(t, want, got, "%q", s)
	}

	for _, tm := range []time.Time{
		time.Date(2026, 12, 1, 19, 33, 13, 0, time.UTC),
		time.Date(2026, 12, 1, 19, 33, 13, 500000000, time.UTC),
		time.Date(2026, 12, 1, 19, 33, 13, 123456000, time.FixedZone("", 3600)),
		time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
	} {
		var got string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT batchq.rfc3339($1)`, tm).Scan(&got))
		require.Equal(t, tm.UTC().Format(time.RFC3339Nano), got)
	}

	for _, d := range []time.Duration{0, time.Microsecond, -999 * time.Microsecond, 1500 * time.Microsecond, -time.Second,
		90 * time.Second, -time.Hour, 36*time.Hour + 61*time.Second + 250*time.Millisecond, 1234567 * time.Microsecond} {
		var got string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT batchq.go_duration(make_interval(secs => $1::float8 / 1e6))`,
			d.Microseconds()).Scan(&got))
		require.Equal(t, d.String(), got)
	}
}
