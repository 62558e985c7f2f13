package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/migrations"
)

func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)

	r := runCLI(t, url, "migrate", "up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "applied 00001_schema.sql")
	require.Contains(t, r.stdout, "applied 00002_queue.sql")

	r = runCLI(t, url, "migrate", "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^1\s+applied\s+\S+ \S+\s+00001_schema.sql$`, r.stdout)
	require.Regexp(t, `(?m)^2\s+applied\s+\S+ \S+\s+00002_queue.sql$`, r.stdout)
	r = runCLI(t, url, "migrate", "status", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `"version": 1,\s+"state": "applied",\s+"applied_at": "\d{4}-\d\d-\d\dT[^"]+Z",\s+"file": "00001_schema.sql"`, r.stdout)

	// Down reverts the latest migration, whichever that is now.
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	latest := len(names)
	r = runCLI(t, url, "migrate", "down", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reverted "+names[latest-1])
	require.Contains(t, r.stdout, fmt.Sprintf("schema version %d", latest-1))

	r = runCLI(t, url, "migrate", "down", "--to", "1", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reverted 00002_queue.sql")
	require.Contains(t, r.stdout, "schema version 1")

	r = runCLI(t, url, "migrate", "status")
	require.Regexp(t, `(?m)^2\s+pending\s+-\s+00002_queue.sql$`, r.stdout)
	r = runCLI(t, url, "--format", "csv", "migrate", "status")
	require.Contains(t, r.stdout, "version,state,applied_at,file\n1,applied,")
	require.Contains(t, r.stdout, "\n2,pending,,00002_queue.sql\n")

	r = runCLI(t, url, "migrate", "down", "--to", "0", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schema version 0")

	r = runCLI(t, url, "migrate", "up", "--to", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schema version 1")
}

func TestMigrateGet(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "migrate", "get", "--version", "1", "--up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "CREATE SCHEMA IF NOT EXISTS batchq;")
	require.NotContains(t, r.stdout, "DROP SCHEMA")

	r = runCLI(t, "", "migrate", "get", "--version", "1", "--down")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "DROP SCHEMA IF EXISTS batchq CASCADE;")
	require.NotContains(t, r.stdout, "CREATE SCHEMA")

	r = runCLI(t, "", "migrate", "get", "--version", "1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "exactly one of --up or --down")

	r = runCLI(t, "", "migrate", "get", "--up")
	require.Equal(t, 2, r.code)
	require.Equal(t, "batchq: migrate get: --version is required (see batchq migrate get --help)\n", r.stderr)
	require.Empty(t, r.stdout)

	r = runCLI(t, "", "migrate", "get", "--version", "999", "--up")
	require.Equal(t, 2, r.code, "a wrong flag value")
	require.Contains(t, r.stderr, "--version 999: no such migration")
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"up", "down"} {
		// No server answers here: a usage error must come first.
		r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "migrate", cmd, "--to", "-1")
		require.Equal(t, 2, r.code, "%s: %s", cmd, r.stderr)
		require.Equal(t, "batchq: --to -1: must be a version, 0 or more\n", r.stderr)
		require.Empty(t, r.stdout)
	}

	r := runCLI(t, "", "migrate", "get", "--version", "x", "--up")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "batchq: ")
	require.Contains(t, r.stderr, `"x"`)
}

// Each --to says what its command does without it: up applies every
// pending migration, down reverts only the latest.
func TestMigrateToHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "migrate", "down", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "revert down to this version, which stays applied (0: revert every migration) (default: revert only the latest migration)")
	require.NotContains(t, r.stdout, "all the way")

	r = runCLI(t, "", "migrate", "up", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "apply up to and including this version (default: every pending migration)")
}

// migrate up and down write --format json and csv as other commands do, a
// record of what they did; without --yes, down writes what it would do.
func TestMigrateWritesJSONAndCSV(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	latest := len(names)
	type migration struct {
		Version  int64   `json:"version"`
		File     string  `json:"file"`
		Duration float64 `json:"duration"`
	}

	r := runCLI(t, url, "migrate", "up", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var up struct {
		SchemaVersion int64       `json:"schema_version"`
		Applied       []migration `json:"applied"`
		Functions     []string    `json:"functions"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &up), r.stdout)
	require.Equal(t, int64(latest), up.SchemaVersion)
	require.Len(t, up.Applied, latest)
	require.Equal(t, migration{Version: 1, File: "00001_schema.sql", Duration: up.Applied[0].Duration}, up.Applied[0])
	require.Contains(t, up.Functions, "rules.sql")
	require.Regexp(t, `"duration": \d+(\.\d{1,3})?[,\n]`, r.stdout, "seconds, to the millisecond")

	r = runCLI(t, url, "--format", "csv", "migrate", "up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("schema_version,applied,functions\n%d,[],[]\n", latest), r.stdout)

	// Without --yes: what it would revert and lose, and the usage error.
	r = runCLI(t, url, "migrate", "down", "--to", "0", "--format", "json")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "add --yes to go ahead")
	var preview struct {
		SchemaVersion int64            `json:"schema_version"`
		ToVersion     *int64           `json:"to_version"`
		WouldRevert   []string         `json:"would_revert"`
		WouldLose     map[string]int64 `json:"would_lose"`
		Running       *int64           `json:"running"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &preview), r.stdout)
	require.Equal(t, int64(latest), preview.SchemaVersion)
	require.Equal(t, int64(0), *preview.ToVersion)
	require.Len(t, preview.WouldRevert, latest)
	require.Equal(t, names[latest-1], preview.WouldRevert[0])
	require.Equal(t, map[string]int64{"jobs": 0, "outcomes": 0, "queues": 0, "tenants": 0, "queue_tenants": 0, "quota": 0, "schedules": 0}, preview.WouldLose)
	require.Equal(t, int64(0), *preview.Running)

	r = runCLI(t, url, "migrate", "down", "--yes", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var down struct {
		SchemaVersion int64       `json:"schema_version"`
		Reverted      []migration `json:"reverted"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &down), r.stdout)
	require.Equal(t, int64(latest-1), down.SchemaVersion)
	require.Len(t, down.Reverted, 1)
	require.Equal(t, names[latest-1], down.Reverted[0].File)
	require.Equal(t, int64(latest), down.Reverted[0].Version)

	r = runCLI(t, url, "migrate", "up", "--format", "yaml")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --format \"yaml\": must be table, json or csv\n", r.stderr)
	require.Equal(t, int64(latest-1), schemaVersion(t, url), "a bad --format migrates nothing")
}

// migrate get, and migrate grants without --apply, print SQL, which has no
// JSON or CSV form: they refuse --format json and csv, from the flag or the
// environment, rather than print text a program would fail to parse.
func TestMigrateRefusesJSONForSQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--format", "json", "migrate", "get", "--version", "1", "--up"},
			"batchq: migrate get: --format json: it prints SQL, which is text only; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
		{[]string{"--format", "csv", "migrate", "get", "--functions"},
			"batchq: migrate get: --format csv: it prints SQL, which is text only; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
		{[]string{"migrate", "grants", "--format", "json"},
			"batchq: migrate grants: --format json: without --apply it prints SQL, which is text only; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
	} {
		r := runCLI(t, "", tc.args...)
		require.Equal(t, 2, r.code, "%q: %s", tc.args, r.stderr)
		require.Equal(t, tc.want, r.stderr, "%q", tc.args)
		require.Empty(t, r.stdout, "%q", tc.args)
	}
	r := runCLI(t, "", "--format", "table", "migrate", "get", "--version", "1", "--up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "CREATE SCHEMA IF NOT EXISTS batchq;")
}

func schemaVersion(t *testing.T, url string) int64 {
	t.Helper()
	var v int64
	require.NoError(t, pgtest.Connect(t, url).QueryRow(t.Context(),
		`SELECT coalesce(max(version_id), 0) FROM `+migrations.TableName+` WHERE is_applied`).Scan(&v))
	return v
}
