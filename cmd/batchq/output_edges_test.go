package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Durations in JSON and CSV are seconds to the millisecond: 2.788, not the
// float nearest to the nanoseconds, 2.7878249999999998.
func TestDurationsAreSecondsToTheMillisecond(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	// The server keeps microseconds: the lease is 2.787825 s.
	r := runCLI(t, db.url, "queues", "create", "imports", "--lease", "2787825us", "--unique-for", "90m", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var q map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &q))
	require.Equal(t, "2.788", string(q["lease"]))
	require.Equal(t, "5400", string(q["unique_for"]))
	require.Equal(t, "86400", string(q["default_ttl"]))

	r = runCLI(t, db.url, "queues", "list", "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "imports,1000,10000,86400,2.788,5,5400")

	r = runCLI(t, db.url, "queues", "list")
	require.Regexp(t, `(?m)^imports\s+1000\s+10000\s+24h0m0s\s+2\.788s\s`, r.stdout)

	// Ages measured now, in every format: at most three decimals.
	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "report", "backlog", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `"oldest_queued_age": \d+(\.\d{1,3})?\n`, r.stdout)
	r = runCLI(t, db.url, "report", "backlog", "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `,\d+(\.\d{1,3})?\n$`, r.stdout)
}

// The help of --format says what JSON and CSV hold, wherever --format is.
func TestFormatHelpSaysTheUnits(t *testing.T) {
	t.Parallel()
	want := regexp.MustCompile(`--format value\s+output format: table, json or csv; in json and csv, times are RFC 3339 in UTC and durations are seconds with at most 3 decimals \(2\.788\)`)
	for _, args := range [][]string{{"--help"}, {"report", "backlog", "--help"}, {"queues", "list", "--help"}} {
		r := runCLI(t, noServer, args...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Regexp(t, want, strings.Join(strings.Fields(r.stdout), " "), "%q", args)
	}
}
