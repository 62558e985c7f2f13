package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// TestBadInputNamesFieldAndRule feeds the CLI what TestEnqueueFlagErrors,
// TestTenantsErrors and TestEnqueueFileBadLineWritesNothingOfItsBatch leave
// out: names that are empty, too long, not UTF-8 or hold control
// characters; costs below zero and beyond int64; weights that are not
// finite; deadlines that do not parse; payloads that are not JSON, not UTF-8
// or too large; SQL in a queue name; bad lines of a JSON Lines file. Each
// command fails with one line that starts "batchq: ", names the flag, field
// or line and the rule, and nothing at all is written.
func TestBadInputNamesFieldAndRule(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	big := `"` + strings.Repeat("x", queue.DefaultMaxPayloadBytes) + `"`
	enqueue := func(extra ...string) []string {
		return append([]string{"enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "10"}, extra...)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		code  int
		msg   string
	}{
		{"empty tenant", []string{"enqueue", "--queue", "imports", "--tenant", "", "--cost", "1"}, "", 2, "batchq: --tenant: must not be empty"},
		{"huge tenant", []string{"enqueue", "--queue", "imports", "--tenant", strings.Repeat("t", 257), "--cost", "1"}, "", 2, "batchq: --tenant: must be at most 256 bytes (got 257)"},
		{"non-UTF-8 tenant", []string{"enqueue", "--queue", "imports", "--tenant", "acme\xff", "--cost", "1"}, "", 2, "batchq: --tenant: must be valid UTF-8"},
		{"tenant with a newline", []string{"enqueue", "--queue", "imports", "--tenant", "a\nb", "--cost", "1"}, "", 2, `batchq: --tenant: must not contain control characters (got "a\nb")`},
		{"negative cost", enqueue("--cost", "-5"), "", 2, "batchq: --cost: must be in 1..1000000000 (got -5)"},
		{"cost past the limit", enqueue("--cost", "1000000000001"), "", 2, "batchq: --cost: must be in 1..1000000000 (got 1000000000001)"},
		{"cost beyond int64", enqueue("--cost", "9223372036854775808"), "", 2, `batchq: --cost "9223372036854775808": out of range for a whole number`},
		{"cost in exponent form", enqueue("--cost", "1e3"), "", 2, `batchq: --cost "1e3": not a whole number`},
		{"deadline that does not parse", enqueue("--deadline", "2026-13-45T00:00:00Z"), "", 2, `batchq: --deadline "2026-13-45T00:00:00Z": not an RFC 3339 time`},
		{"negative ttl", enqueue("--ttl", "-1h"), "", 2, "batchq: --ttl: must be > 0 (got -1h0m0s)"},
		{"ttl past the limit", enqueue("--ttl", "99999d"), "", 2, `batchq: --ttl "99999d": must be at most 36500d (876000h)`},
		{"default ttl past the limit", []string{"queues", "create", "--default-ttl", "99999d", "zz"}, "", 2, `batchq: --default-ttl "99999d": must be at most 36500d (876000h)`},
		{"prune past the limit", []string{"prune", "--older-than", "9999999h"}, "", 2, `batchq: --older-than "9999999h": must be at most 36500d (876000h)`},
		{"prune negative", []string{"prune", "--older-than", "-1h"}, "", 2, `batchq: --older-than "-1h": must not be negative`},
		{"cancel before, negative", []string{"jobs", "cancel", "--queue", "imports", "--before", "-1d"}, "", 2, `batchq: --before "-1d": must not be negative`},
		{"report since, past the limit", []string{"report", "outcomes", "--since", "36501d"}, "", 2, `batchq: --since "36501d": must be at most 36500d (876000h)`},
		{"run-at that does not parse", enqueue("--run-at", "tonight"), "", 2, `batchq: --run-at "tonight": not an RFC 3339 time`},
		{"negative delay", enqueue("--delay", "-5m"), "", 2, "batchq: --delay: must be >= 0 (got -5m0s)"},
		{"run-at and delay", enqueue("--run-at", "2099-01-01T00:00:00Z", "--delay", "1h"), "", 2, "batchq: --run-at: give a run_at or a delay, not both"},
		{"ttl over before the job is stored", enqueue("--ttl", "1ns"), "", 2, "batchq: --ttl: too short: the deadline it sets must be in the future (got "},
		{"ttl past year 10000", enqueue("--run-at", "9990-01-01T00:00:00Z", "--ttl", "36500d"), "", 2,
			"batchq: --ttl: too long: the deadline it sets must be before year 10000\n"},
		{"deadline before the run-at", enqueue("--delay", "2h", "--deadline", "2000-01-01T00:00:00Z"), "", 2, "batchq: --deadline: must be in the future"},
		{"deadline at the run-at", enqueue("--run-at", "2099-01-01T00:00:00Z", "--deadline", "2099-01-01T00:00:00Z"), "", 2,
			"batchq: --deadline: must be after run_at (got 2099-01-01T00:00:00Z, run_at 2099-01-01T00:00:00Z)"},
		{"line: run_at and delay", []string{"enqueue", "--file", "-"},
			`{"queue":"imports","tenant":"a","cost":1,"run_at":"2099-01-01T00:00:00Z","delay":"1h"}`, 1, "batchq: line 1: run_at: give a run_at or a delay, not both"},
		{"line: deadline before run_at", []string{"enqueue", "--file", "-"},
			`{"queue":"imports","tenant":"a","cost":1,"run_at":"2099-01-02T00:00:00Z","deadline":"2099-01-01T00:00:00Z"}`, 1,
			"batchq: line 1: deadline: must be after run_at"},
		{"schedule: bad cron", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "every day"}, "", 2,
			`batchq: --cron: must be five fields, minute hour day-of-month month day-of-week (no seconds), or a descriptor such as @daily (got 2 fields in "every day")`},
		{"schedule: day-of-week 7", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "0 2 * * 7"}, "", 2,
			`batchq: --cron: day-of-week, field 5 of 5, must be 0-6 or SUN-SAT, Sunday being 0, as *, a value, a range low-high (1-5), a list (1,3) or a step (*/2) (got "7" in "0 2 * * 7")` + "\n"},
		{"schedule: empty cron", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", ""}, "", 2,
			`batchq: --cron: must not be empty: give five fields`},
		{"schedule: empty time zone", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--timezone", ""}, "", 2, `batchq: --timezone: must be an IANA time zone such as Europe/Paris or UTC (got ""); leave it out for UTC` + "\n"},
		{"schedule: set an empty time zone", []string{"schedules", "set", "s", "--timezone", ""}, "", 2,
			`batchq: --timezone: must be an IANA time zone such as Europe/Paris or UTC (got ""); leave it out to keep the schedule's` + "\n"},
		{"schedule: bad time zone", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--timezone", "Moon/Base"}, "", 2, `batchq: --timezone: must be an IANA time zone such as Europe/Paris (got "Moon/Base")`},
		// Zones that depend on the host that reads them, or count leap
		// seconds Go's times do not: workers would disagree on the ticks.
		{"schedule: the host's zone", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--timezone", "localtime"}, "", 2, `batchq: --timezone: must be an IANA time zone such as Europe/Paris (got "localtime")`},
		{"schedule: a zone with leap seconds", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--timezone", "right/Europe/Paris"}, "", 2, `batchq: --timezone: must be an IANA time zone such as Europe/Paris (got "right/Europe/Paris")`},
		// A copy of a zone the host may hold and the binary's own zone
		// database does not: a fleet without tzdata could not read it.
		{"schedule: a zone of the host's posix copies", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--timezone", "posix/Europe/Paris"}, "", 2, `batchq: --timezone: must be an IANA time zone such as Europe/Paris (got "posix/Europe/Paris")`},
		{"schedule: bad missed", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--missed", "all"}, "", 2, `batchq: --missed: must be "one" or "skip" (got "all")`},
		{"schedule: zero cost", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "0", "--cron", "@daily"}, "", 2,
			"batchq: --cost: must be in 1..1000000000 (got 0)"},
		{"schedule: no cron", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1"}, "", 2,
			"batchq: schedules create: --cron is required"},
		{"schedule: bad name", []string{"schedules", "create", "a b", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily"}, "", 2,
			"batchq: schedule name: must name a schedule"},
		{"schedule: unknown queue", []string{"schedules", "create", "s", "--queue", "nope", "--tenant", "a", "--cost", "1", "--cron", "@daily"}, "", 2,
			`batchq: unknown queue: "nope"`},
		{"schedule: set nothing", []string{"schedules", "set", "s"}, "", 2, "batchq: schedules set: give at least one setting to change"},
		{"schedule: pause unknown", []string{"schedules", "pause", "nope"}, "", 2, `batchq: schedule not found: "nope"`},
		{"too many attempts", enqueue("--max-attempts", "5000"), "", 2, "batchq: --max-attempts: must be in 1..1000, or 0 for the queue's setting (got 5000)"},
		{"payload NaN", enqueue("--payload", `{"score": NaN}`), "", 2, `batchq: --payload {"score": NaN}: not valid JSON`},
		{"empty payload", enqueue("--payload", ""), "", 2, `batchq: --payload "": empty, which is not JSON; leave --payload out for {}` + "\n"},
		{"blank payload", enqueue("--payload", " \t"), "", 2, `batchq: --payload " \t": empty, which is not JSON; leave --payload out for {}` + "\n"},
		{"schedule: empty payload", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--payload", ""}, "", 2, `batchq: --payload "": empty, which is not JSON; leave --payload out for {}` + "\n"},
		{"payload not UTF-8", enqueue("--payload", "{\"text\": \"caf\xe9\"}"), "", 2, "batchq: --payload: must be valid UTF-8"},
		// An empty value the API would take for its default is refused, as an
		// unset variable more likely than a choice.
		{"empty kind", enqueue("--kind", ""), "", 2, `batchq: --kind: must not be empty (leave it out for "default")` + "\n"},
		{"empty unique key", enqueue("--unique-key", ""), "", 2, "batchq: --unique-key: must not be empty (leave it out for none)\n"},
		{"schedule: empty kind", []string{"schedules", "create", "s", "--queue", "imports", "--tenant", "a", "--cost", "1", "--cron", "@daily",
			"--kind", ""}, "", 2, `batchq: --kind: must not be empty (leave it out for "default")` + "\n"},
		{"schedule: set an empty kind", []string{"schedules", "set", "s", "--kind", ""}, "", 2,
			"batchq: --kind: must not be empty (leave it out to keep the schedule's)\n"},
		{"schedules of an empty queue", []string{"schedules", "list", "--queue", ""}, "", 2,
			"batchq: --queue: must not be empty (leave it out for every queue)\n"},
		{"backlog of an empty queue", []string{"report", "backlog", "--queue", ""}, "", 2,
			"batchq: --queue: must not be empty (leave it out for every queue)\n"},
		{"usage of an empty queue", []string{"report", "tenants", "--queue", ""}, "", 2,
			"batchq: --queue: must not be empty (leave it out for every queue)\n"},
		{"outcomes of an empty tenant", []string{"report", "outcomes", "--tenant", ""}, "", 2,
			"batchq: --tenant: must not be empty (leave it out for every tenant)\n"},
		{"outcomes of an empty outcome", []string{"report", "outcomes", "--outcome", ""}, "", 2,
			"batchq: --outcome: must not be empty (leave it out for every outcome)\n"},
		{"payload too large", enqueue("--payload", big), "", 2, "batchq: --payload: must be at most 1048576 bytes as jsonb text (got 1048578)"},
		{"SQL in the queue name", []string{"enqueue", "--queue", "imports'; DROP TABLE batchq.jobs; --", "--tenant", "a", "--cost", "1"}, "", 2, "batchq: --queue: must name a queue"},

		{"negative weight", []string{"tenants", "set", "acme", "--weight", "-1"}, "", 2, "batchq: --weight: must be in 0.001..1000000 (got -1)"},
		{"infinite weight", []string{"tenants", "set", "acme", "--weight", "Inf"}, "", 2, `batchq: --weight "Inf": not a decimal number`},
		{"negative infinite weight", []string{"tenants", "set", "acme", "--weight", "-Inf"}, "", 2, `batchq: --weight "-Inf": not a decimal number`},
		{"weight beyond float64", []string{"tenants", "set", "acme", "--weight", "1e400"}, "", 2, `batchq: --weight "1e400": out of range for a decimal number`},
		{"empty tenant name", []string{"tenants", "set", "", "--weight", "2"}, "", 2, "batchq: tenant name: must not be empty"},
		{"huge tenant name", []string{"tenants", "set", strings.Repeat("n", 300), "--weight", "2"}, "", 2, "batchq: tenant name: must be at most 256 bytes (got 300)"},
		{"non-UTF-8 tenant name", []string{"tenants", "set", "\xff\xfe", "--weight", "2"}, "", 2, "batchq: tenant name: must be valid UTF-8"},
		{"NUL in tenant name", []string{"tenants", "set", "ac\x00me", "--weight", "2"}, "", 2, "batchq: tenant name: must not contain control characters"},

		{"line: non-UTF-8 tenant", []string{"enqueue", "--file", "-"},
			"{\"queue\":\"imports\",\"tenant\":\"acme\xc0\",\"cost\":1}\n", 1, "batchq: line 1: tenant: must be valid UTF-8; nothing was enqueued"},
		{"line: huge tenant", []string{"enqueue", "--file", "-"},
			`{"queue":"imports","tenant":"a","cost":1}` + "\n" + `{"queue":"imports","tenant":"` + strings.Repeat("t", 257) + `","cost":1}` + "\n",
			1, "batchq: line 2: tenant: must be at most 256 bytes (got 257); nothing was enqueued"},
		{"line: broken JSON between good lines", []string{"enqueue", "--file", "-"},
			`{"queue":"imports","tenant":"a","cost":1}` + "\n" + `{"queue":"imports","tenant":"a","cost":` + "\n" + `{"queue":"imports","tenant":"a","cost":1}` + "\n",
			1, "batchq: line 2: cost: not JSON: unexpected end of line; nothing was enqueued"},
		{"line: cost NaN", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a","cost":NaN}`, 1, "batchq: line 1: cost: not JSON: invalid character 'N'"},
		{"line: no cost", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a"}`, 1, "batchq: line 1: cost: required (every line has queue, tenant and cost); nothing was enqueued"},
		{"line: no tenant", []string{"enqueue", "--file", "-"}, `{"queue":"imports","cost":1}`, 1, "batchq: line 1: tenant: required (every line has queue, tenant and cost); nothing was enqueued"},
		{"line: negative cost", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a","cost":-1}`, 1, "batchq: line 1: cost: must be in 1..1000000000 (got -1)"},
		{"line: payload not JSON", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a","cost":1,"payload":{nope}}`, 1, "batchq: line 1: payload: not JSON: invalid character 'n'"},
		{"line: payload not UTF-8", []string{"enqueue", "--file", "-"}, "{\"queue\":\"imports\",\"tenant\":\"a\",\"cost\":1,\"payload\":\"\xff\"}", 1, "batchq: line 1: payload: must be valid UTF-8"},
		{"line: payload too large", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a","cost":1,"payload":` + big + `}`, 1, "batchq: line 1: payload: must be at most 1048576 bytes as jsonb text (got 1048578)"},
		{"line: ttl over before the job is stored", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a","cost":1}` + "\n" +
			`{"queue":"imports","tenant":"a","cost":1,"ttl":"1ns"}`, 1, "batchq: line 2: ttl: too short: the deadline it sets must be in the future (got "},
		{"line: deadline in the past", []string{"enqueue", "--file", "-"}, `{"queue":"imports","tenant":"a","cost":1,"deadline":"2001-01-01T00:00:00Z"}`, 1, "batchq: line 1: deadline: must be in the future"},
		{"line: SQL in the queue name", []string{"enqueue", "--file", "-"}, `{"queue":"x'; DELETE FROM batchq.jobs; --","tenant":"a","cost":1}`, 1, "batchq: line 1: queue: must name a queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLIInput(t, db.url, tc.stdin, tc.args...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, "batchq: "), r.stderr)
			require.Contains(t, r.stderr, tc.msg)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		})
	}
	for _, table := range []string{"jobs", "tenants", "tenant_ring", "outcomes"} {
		require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.`+table), "batchq.%s", table)
	}

	// SQL metacharacters are data, from flags and from files alike.
	hostile := `acme'); DROP TABLE batchq.jobs; --`
	r := runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", hostile, "--cost", "3", "--kind", `"; SELECT 1; --`)
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLIInput(t, db.url, `{"queue":"imports","tenant":"acme'); DROP TABLE batchq.jobs; --","cost":4,"payload":{"q":"' OR '1'='1"}}`, "enqueue", "--file", "-")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "tenants", "set", hostile, "--weight", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE tenant = $1`, hostile))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE payload->>'q' = $1`, `' OR '1'='1`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.tenants WHERE name = $1 AND weight = 2`, hostile))
}
