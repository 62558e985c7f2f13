package main

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/migrations"
)

// Going below the schema's version asks for --yes, and says first what the
// Down sections would drop; while a job runs it asks for --force as well.
func TestMigrateDownAsksForYesAndRefusesWhileJobsRun(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	latest := names[len(names)-1]

	for _, args := range [][]string{
		{"tenants", "set", "acme", "--weight", "2"},
		{"tenants", "set", "beta", "--weight", "3"},
		{"tenants", "set", "beta", "--queue", "imports", "--weight", "4", "--max-queued", "7"},
		{"enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "5"},
		{"enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "6"},
		{"enqueue", "--queue", "imports", "--tenant", "beta", "--cost", "7"},
		{"jobs", "cancel", "1"},
	} {
		r := runCLI(t, db.url, args...)
		require.Equal(t, 0, r.code, "%q: %s", args, r.stderr)
	}
	db.exec(t, `INSERT INTO batchq.quota (key) VALUES ('openai/gpt-4o')`)
	intact := func() {
		t.Helper()
		require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.jobs`))
		require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.outcomes`))
		require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.quota`))
	}

	r := runCLI(t, db.url, "migrate", "down", "--to", "0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("batchq: migrate down: reverting version %d down to 0 drops the tables and data listed above; add --yes to go ahead\n", versionOf(t, latest)), r.stderr)
	require.Contains(t, r.stdout, "would revert "+latest+"\n")
	require.Contains(t, r.stdout, "would revert 00001_schema.sql\n")
	require.Contains(t, r.stdout, "would lose, with the tables it drops: 2 unfinished jobs, 1 outcome, 1 queue, 2 tenants, 1 tenant setting in a queue, 1 quota row, 0 schedules\n")
	require.NotContains(t, r.stdout, "running")
	intact()

	// Reverting the latest migration alone asks too, and lists only it.
	r = runCLI(t, db.url, "migrate", "down")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "add --yes")
	require.Contains(t, r.stdout, "would revert "+latest+"\n")
	require.Equal(t, 1, strings.Count(r.stdout, "would revert "), r.stdout)
	intact()

	db.exec(t, `UPDATE batchq.jobs SET state = 'running' WHERE id = 2`)
	r = runCLI(t, db.url, "migrate", "down", "--to", "0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stdout, "1 job is running now: stop the workers first, or add --force as well\n")
	r = runCLI(t, db.url, "migrate", "down", "--to", "0", "--yes")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "batchq: migrate down: 1 job is running; stop the workers first, or add --force\n", r.stderr)
	require.Empty(t, r.stdout)
	intact()

	r = runCLI(t, db.url, "migrate", "down", "--to", "0", "--yes", "--force")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reverted 00001_schema.sql")
	require.Contains(t, r.stdout, "schema version 0\n")
	require.Zero(t, db.count(t, `SELECT count(*) FROM pg_namespace WHERE nspname = 'batchq'`))
}

// The counts hold at any version: a table a schema does not have yet is not
// counted, and is not an error.
func TestMigrateDownCountsWhatAnOlderSchemaHas(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "migrate", "down", "--to", "0", "--yes")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "migrate", "up", "--to", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "migrate", "down")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "would revert 00001_schema.sql\nwould lose no jobs, outcomes, queues, tenants, tenant settings in queues, quota rows or schedules\n", r.stdout)

	// Version 2 has queues, tenants, jobs and outcomes, and no quota yet.
	r = runCLI(t, db.url, "migrate", "up", "--to", "2")
	require.Equal(t, 0, r.code, r.stderr)
	db.exec(t, `INSERT INTO batchq.queues (name) VALUES ('imports'), ('nightly')`)
	r = runCLI(t, db.url, "migrate", "down", "--to", "0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "would revert 00002_queue.sql\nwould revert 00001_schema.sql\n"+
		"would lose, with the tables it drops: 0 unfinished jobs, 0 outcomes, 2 queues, 0 tenants\n", r.stdout)
	r = runCLI(t, db.url, "migrate", "down", "--to", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stdout, "2 queues")
	require.Equal(t, int64(2), db.count(t, `SELECT count(*) FROM batchq.queues`))

	// Nothing to revert asks nothing.
	r = runCLI(t, db.url, "migrate", "down", "--to", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "schema version 2\n", r.stdout)
}

// A --to past the last migration names no version: a usage error, before
// anything connects, for up and for down.
func TestMigrateToPastTheLastMigration(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	last := versionOf(t, names[len(names)-1])
	for _, cmd := range []string{"up", "down"} {
		for _, to := range []string{"999", fmt.Sprint(last + 1)} {
			r := runCLI(t, noServer, "migrate", cmd, "--to", to)
			require.Equal(t, 2, r.code, "%s --to %s: %s", cmd, to, r.stderr)
			require.Equal(t, fmt.Sprintf("batchq: --to %s: no such migration; the last is %d\n", to, last), r.stderr)
			require.Empty(t, r.stdout)
		}
	}
	db := newCLIDB(t)
	r := runCLI(t, db.url, "migrate", "up", "--to", fmt.Sprint(last))
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("schema version %d\n", last), r.stdout)
}

// A --to above the schema's version is no way down: a usage error, with
// nothing reverted and nothing asked.
func TestMigrateDownToAboveTheVersion(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "migrate", "down", "--to", "2", "--yes")
	require.Equal(t, 0, r.code, r.stderr)

	for _, args := range [][]string{{"--to", "3"}, {"--to", "3", "--yes"}} {
		r = runCLI(t, db.url, append([]string{"migrate", "down"}, args...)...)
		require.Equal(t, 2, r.code, "%q: %s", args, r.stderr)
		require.Equal(t, "batchq: --to 3: must be at most the schema's version, 2; migrate down only reverts\n", r.stderr, "%q", args)
		require.Empty(t, r.stdout, "%q", args)
	}
	r = runCLI(t, db.url, "migrate", "status")
	require.Regexp(t, `(?m)^2\s+applied\s`, r.stdout)
	require.Regexp(t, `(?m)^3\s+pending\s`, r.stdout)
	// Down to the version itself is no change, and asks nothing.
	r = runCLI(t, db.url, "migrate", "down", "--to", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "schema version 2\n", r.stdout)
}

// versionOf is the version a migration's file name gives it: its number,
// which need not be its place in the list.
func versionOf(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
	require.NoError(t, err, name)
	return n
}

// Going below the version that made batchq.schedules counts its rows among
// what would be lost.
func TestMigrateDownCountsTheSchedules(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "q")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "schedules", "create", "nightly", "--queue", "q", "--tenant", "t", "--cron", "0 2 * * *", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "migrate", "down", "--to", "6")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stdout, "1 schedule")
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.schedules`), "nothing was dropped without --yes")
}

// A schema batchq that another program made is left alone: migrate up would
// record its first migration as applied to it (and migrate down would then
// drop that schema) before failing on the second. Nothing is written, not
// even the version table, and migrate status writes nothing either.
func TestMigrateUpLeavesAnotherProgramsSchemaAlone(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	pool := pgtest.Connect(t, url)
	_, err := pool.Exec(t.Context(), `CREATE SCHEMA batchq; CREATE TABLE batchq.jobs (id int)`)
	require.NoError(t, err)
	versionTable := func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, migrations.TableName).Scan(&ok))
		return ok
	}

	r := runCLI(t, url, "migrate", "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^1\s+pending\s+-\s+00001_schema.sql$`, r.stdout)
	require.False(t, versionTable(), "migrate status created the version table")

	r = runCLI(t, url, "migrate", "up")
	require.Equal(t, 1, r.code, r.stderr)
	require.Equal(t, "batchq: migrate up: schema batchq already holds tables or functions, and batchq_goose_db_version "+
		"records no batchq migration: it belongs to another program, or was migrated by another tool with a version "+
		"table of its own; nothing was changed\n", r.stderr)
	require.Empty(t, r.stdout)
	require.False(t, versionTable(), "migrate up wrote before refusing")

	// An empty schema batchq, made ahead for batchq, is batchq's to fill.
	_, err = pool.Exec(t.Context(), `DROP TABLE batchq.jobs`)
	require.NoError(t, err)
	r = runCLI(t, url, "migrate", "up")
	require.Equal(t, 0, r.code, r.stderr)
}

// A migration that fails leaves those before it applied, each in its own
// transaction: migrate up says which, the version they left, and which
// migration failed, in its own words rather than goose's.
func TestMigrateUpSaysWhatItAppliedBeforeAFailure(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	r := runCLI(t, url, "migrate", "up", "--to", "1")
	require.Equal(t, 0, r.code, r.stderr)
	pool := pgtest.Connect(t, url)
	_, err := pool.Exec(t.Context(), `CREATE TABLE batchq.quota (x int)`)
	require.NoError(t, err)

	r = runCLI(t, url, "migrate", "up")
	require.Equal(t, 1, r.code, r.stderr)
	require.Regexp(t, `^applied 00002_queue.sql \(\d+ms\)\nschema version 2\n$`, r.stdout)
	require.Equal(t, `batchq: migrate up: 00003_quota.sql: ERROR: relation "quota" already exists (SQLSTATE 42P07)`+"\n", r.stderr)

	r = runCLI(t, url, "migrate", "up", "--to", "0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --to 0: must be a version to apply, 1 or more\n", r.stderr)
}

// A role that may not create the version table is told so before anything
// is written, not with goose's "failed to initialize".
func TestMigrateUpSaysTheRightItLacks(t *testing.T) {
	t.Parallel()
	// With only pg_catalog on its search_path, the version table would go
	// there, where no role of the tests may create anything.
	url := pgtest.EmptyURL(t) + "&search_path=pg_catalog"
	r := runCLI(t, url, "migrate", "up")
	require.Equal(t, 1, r.code, r.stderr)
	require.Regexp(t, `^batchq: migrate up: role \S+ may not create the version table batchq_goose_db_version in schema `+
		`pg_catalog \(it lacks CREATE there\): grant it, or migrate as the database's owner; nothing was changed\n$`, r.stderr)
	require.Empty(t, r.stdout)
}
