package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueuesCreateSetList(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)

	r := runCLI(t, db.url, "queues", "create", "imports", "--quantum", "2000", "--max-per-tenant", "50",
		"--default-ttl", "2h", "--lease", "30s", "--max-attempts", "3", "--unique-for", "1h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "created queue imports: quantum 2000, max-per-tenant 50, default-ttl 2h0m0s, lease 30s, max-attempts 3, unique-for 1h0m0s\n", r.stdout)

	// Flags before the name work as well as after it; unset settings default.
	r = runCLI(t, db.url, "queues", "create", "--lease", "1m", "nightly")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "queue nightly: quantum 1000, max-per-tenant 10000, default-ttl 24h0m0s, lease 1m0s,")

	r = runCLI(t, db.url, "queues", "set", "nightly", "--quantum", "500", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"name":"nightly","quantum":500,"max_per_tenant":10000,"default_ttl":86400,"lease":60,"max_attempts":5,"unique_for":0,"paused_at":null}`, r.stdout)

	r = runCLI(t, db.url, "queues", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, strings.Join([]string{
		"NAME     QUANTUM  MAX PER TENANT  DEFAULT TTL  LEASE  MAX ATTEMPTS  UNIQUE FOR  PAUSED AT",
		"imports  2000     50              2h0m0s       30s    3             1h0m0s      -",
		"nightly  500      10000           24h0m0s      1m0s   5             0s          -",
		"",
	}, "\n"), r.stdout)

	r = runCLI(t, db.url, "--format", "csv", "queues", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "name,quantum,max_per_tenant,default_ttl,lease,max_attempts,unique_for,paused_at\n"+
		"imports,2000,50,7200,30,3,3600,\nnightly,500,10000,86400,60,5,0,\n", r.stdout)
}

func TestQueuesErrors(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"exists", []string{"create", "imports"}, 1, `batchq: queue already exists: "imports"`},
		{"bad name", []string{"create", "no/slash"}, 2, `batchq: queue name: must be 1-128 characters`},
		{"no name", []string{"create"}, 2, "batchq: queues create: missing NAME; usage: batchq queues create NAME"},
		{"two names", []string{"create", "a", "b"}, 2, `unexpected argument "b"`},
		{"zero quantum", []string{"create", "x", "--quantum", "0"}, 2, "batchq: --quantum: must be in 1..1000000000 (got 0)"},
		{"zero lease", []string{"create", "x", "--lease", "0s"}, 2, "batchq: --lease: must be at least 1s (got 0s)"},
		{"zero max attempts", []string{"create", "x", "--max-attempts", "0"}, 2, "batchq: --max-attempts: must be in 1..1000 (got 0)"},
		{"negative bound", []string{"create", "x", "--max-per-tenant", "-1"}, 2, "batchq: --max-per-tenant: must be in 1..2147483647 (got -1)"},
		{"short lease", []string{"set", "imports", "--lease", "10ms"}, 2, "batchq: --lease: must be at least 1s (got 10ms)"},
		{"bad duration", []string{"set", "imports", "--default-ttl", "a day"}, 2, `"a day"`},
		{"trailing bad duration", []string{"set", "imports", "--unique-for", "soon"}, 2, `batchq: --unique-for "soon": not a duration like 90m, 36h or 30d`},
		{"unknown flag", []string{"set", "imports", "--colour", "red"}, 2, "flag provided but not defined: --colour"},
		{"nothing to set", []string{"set", "imports"}, 2, "give at least one setting to change"},
		{"unknown queue", []string{"set", "nope", "--quantum", "5"}, 2, `batchq: unknown queue: "nope"`},
		{"bad format", []string{"list", "--format", "yaml"}, 2, `batchq: --format "yaml": must be table, json or csv`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, db.url, append([]string{"queues"}, tc.args...)...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
		})
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.queues`))
	require.Equal(t, int64(1000), db.count(t, `SELECT quantum FROM batchq.queues`))
}

// Duration flags take whole days as prune --older-than and report --since
// do, before the name or after it, and an error says what a duration is.
func TestDurationFlagsTakeDays(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "q3", "--default-ttl", "7d", "--unique-for", "30d", "--lease", "1d")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "created queue q3: quantum 1000, max-per-tenant 10000, default-ttl 168h0m0s, lease 24h0m0s, max-attempts 5, unique-for 720h0m0s\n", r.stdout)
	r = runCLI(t, db.url, "queues", "set", "--unique-for", "2d", "q3", "--default-ttl", "90m")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "default-ttl 1h30m0s, lease 24h0m0s, max-attempts 5, unique-for 48h0m0s")

	for _, args := range [][]string{
		{"queues", "create", "q4", "--default-ttl", "7x"},
		{"queues", "set", "q3", "--lease", "1.5d"},
		{"queues", "set", "--unique-for", "soon", "q3"},
	} {
		r := runCLI(t, db.url, args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, ": not a duration like 90m, 36h or 30d\n", "%v", args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.queues`))

	r = runCLI(t, db.url, "enqueue", "--queue", "q3", "--tenant", "acme", "--cost", "1", "--ttl", "2d")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs
		WHERE deadline BETWEEN enqueued_at + interval '47 hours 59 minutes' AND enqueued_at + interval '48 hours 1 minute'`))
	r = runCLI(t, db.url, "enqueue", "--queue", "q3", "--tenant", "acme", "--cost", "1", "--ttl", "0d")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --ttl: must be > 0 (got 0s)\n", r.stderr)
}

func TestHelpAfterArguments(t *testing.T) {
	t.Parallel()
	// A server that is not there: help must not need one.
	r := runCLI(t, "postgres://nobody@127.0.0.1:1/none", "queues", "create", "imports", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "--max-per-tenant")
	require.Contains(t, r.stdout, "queued jobs a tenant may hold")
}

// queues pause and resume say what changed, in words and in JSON; the
// list shows when a queue was paused; delete refuses a queue with jobs,
// saying how many, and deletes an empty one.
func TestQueuesPauseResumeDelete(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports", "spare")

	r := runCLI(t, db.url, "queues", "pause", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "paused queue imports\n", r.stdout)
	r = runCLI(t, db.url, "queues", "pause", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "queue imports was paused already\n", r.stdout)
	for _, c := range []struct {
		cmd     string
		changed bool
	}{{"pause", false}, {"resume", true}, {"resume", false}, {"pause", true}} {
		r = runCLI(t, db.url, "--format", "json", "queues", c.cmd, "imports")
		require.Equal(t, 0, r.code, r.stderr)
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
		require.Equal(t, c.changed, got["changed"], "%s: %s", c.cmd, r.stdout)
		require.Equal(t, "imports", got["name"])
	}
	r = runCLI(t, db.url, "queues", "list", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var qs []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &qs))
	require.Len(t, qs, 2)
	require.NotNil(t, qs[0]["paused_at"], "imports is paused")
	require.Nil(t, qs[1]["paused_at"], "spare is not")

	// Enqueues go on while it is paused.
	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "a", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "queues", "resume", "imports", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var q map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &q))
	require.Equal(t, "imports", q["name"])
	require.Nil(t, q["paused_at"])
	r = runCLI(t, db.url, "queues", "resume", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "queue imports was not paused\n", r.stdout)

	r = runCLI(t, db.url, "queues", "delete", "imports")
	require.Equal(t, 1, r.code)
	require.Equal(t, `batchq: queue "imports" holds 1 unfinished job (1 queued, 0 running, 0 retrying, 0 scheduled): `+
		"cancel it (batchq jobs cancel --queue imports) or let it finish first\n", r.stderr)
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.queues`))

	// Its schedules would go with it, and may enqueue more meanwhile: the
	// refusal says so.
	for _, name := range []string{"nightly", "hourly"} {
		r = runCLI(t, db.url, "schedules", "create", name, "--queue", "imports", "--tenant", "acme", "--cost", "1", "--cron", "@daily")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = runCLI(t, db.url, "queues", "delete", "imports")
	require.Equal(t, 1, r.code)
	require.Equal(t, `batchq: queue "imports" holds 1 unfinished job (1 queued, 0 running, 0 retrying, 0 scheduled): `+
		"cancel it (batchq jobs cancel --queue imports) or let it finish first; it also has 2 schedules, which may "+
		"enqueue more and are deleted with it (batchq schedules list --queue imports)\n", r.stderr)
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.schedules`))

	r = runCLI(t, db.url, "queues", "delete", "spare", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"deleted":"spare","schedules_deleted":0}`, r.stdout)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.queues`))

	// Deleting a queue deletes its schedules, and says how many.
	r = runCLI(t, db.url, "jobs", "cancel", "--queue", "imports", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "queues", "delete", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "deleted queue imports and its 2 schedules\n", r.stdout)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.schedules`))
	for _, name := range []string{"imports", "spare"} {
		r = runCLI(t, db.url, "queues", "create", name)
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = runCLI(t, db.url, "schedules", "create", "nightly", "--queue", "imports", "--tenant", "acme", "--cost", "1", "--cron", "@daily")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "queues", "delete", "imports", "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "deleted,schedules_deleted\nimports,1\n", r.stdout)
	r = runCLI(t, db.url, "queues", "delete", "spare")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "deleted queue spare; it had no schedules\n", r.stdout)

	for _, args := range [][]string{
		{"pause", "nope"}, {"resume", "nope"}, {"delete", "nope"}, {"delete", "spare"},
	} {
		r := runCLI(t, db.url, append([]string{"queues"}, args...)...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "batchq: unknown queue: ", args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	for _, args := range [][]string{{"pause"}, {"delete", "a", "b"}} {
		r := runCLI(t, db.url, append([]string{"queues"}, args...)...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
}

// A name no queue could have is refused with the naming rule, which the SQL
// API raises for it (BQ100), and still as an unknown queue (exit 2), by every
// command that names a queue.
func TestInvalidQueueNameSaysTheRule(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	for _, args := range [][]string{
		{"queues", "pause", "Bad Name!"}, {"queues", "resume", "Bad Name!"}, {"queues", "delete", "Bad Name!"},
		{"queues", "set", "Bad Name!", "--quantum", "5"}, {"tenants", "set", "acme", "--queue", "Bad Name!", "--weight", "2"},
		{"jobs", "cancel", "--queue", "bad name"}, {"report", "backlog", "--queue", "bad name"},
	} {
		r := runCLI(t, db.url, args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		require.Regexp(t, `^batchq: unknown queue: "(Bad Name!|bad name)" is not a queue name: 1-128 characters of A-Z a-z 0-9 _ \. : - starting with a letter or digit\n$`,
			r.stderr, args)
	}
}
